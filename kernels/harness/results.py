"""Record measurements in ``data/results/<gpu-slug>/<chapter>.csv``, one row per number, and read them back.

Rows are only appended, and each GPU has its own folder, so no run overwrites another GPU's
results. Every row carries the GPU, driver, CUDA version, clocks, commit and date of its run.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

from . import device

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "data" / "results"   # the committed runs
# Where this run's rows go: BOOK_RESULTS may name another folder (a student's own, empty at first).
RESULTS = Path(os.environ.get("BOOK_RESULTS", REPOSITORY))
ENV_COLUMNS = ("date", "commit", "gpu", "driver", "cuda_runtime", "sm_clock_mhz", "mem_clock_mhz")
# The GPU whose runs the committed notebooks show; in the simulator, timing cells show its rows.
REFERENCE_GPU = "nvidia-h100-80gb-hbm3"
COLUMNS = ENV_COLUMNS + ("chapter", "kernel", "problem", "metric", "value", "unit")


def record(chapter: str, rows: list[dict], env: dict | None = None, root: Path | None = None) -> Path | None:
    """Append ``rows`` (each with kernel, problem, metric, value, unit) for this run's GPU.

    Returns the CSV path, or None in the simulator: simulated runs are not measurements.
    """
    if not chapter.isidentifier():
        raise ValueError(f"chapter: expected a short identifier like 'machine', got {chapter!r}")
    if not rows:
        raise ValueError("rows: expected at least one measurement")
    for row in rows:
        missing = {"kernel", "problem", "metric", "value", "unit"} - row.keys()
        if missing:
            raise ValueError(f"a results row lacks {sorted(missing)}: {row}")
        float(row["value"])
    if device.MODE != device.GPU and env is None:
        return None
    env = env or device.environment()
    path = Path(root or RESULTS) / env["gpu_slug"] / f"{chapter}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow({**{k: env.get(k, "") for k in ENV_COLUMNS}, "chapter": chapter, **row})
    return path


def load(chapter: str, gpu_slug: str, root: Path | None = None) -> list[dict]:
    """One chapter's rows for one GPU, from ``root``; by default from RESULTS, or from the repository
    where RESULTS has no file for that GPU and chapter (the reference GPU's stored numbers, which a
    student's own BOOK_RESULTS folder lacks)."""
    path = Path(root or RESULTS) / gpu_slug / f"{chapter}.csv"
    if root is None and not path.exists():
        path = REPOSITORY / gpu_slug / f"{chapter}.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def latest(chapter: str, gpu_slug: str, root: Path | None = None) -> dict:
    """The newest value of every (kernel, problem, metric) for one GPU: {key: row}."""
    rows = sorted(load(chapter, gpu_slug, root), key=lambda r: r["date"])
    return {(r["kernel"], r["problem"], r["metric"]): r for r in rows}


def chapters(gpu_slug: str, root: Path | None = None) -> list[str]:
    """The chapters with results for one GPU (CSV files in this module's format; profiler dumps beside them are not)."""
    out = []
    for path in sorted((Path(root or RESULTS) / gpu_slug).glob("*.csv")):
        with path.open(newline="") as f:
            if tuple(next(csv.reader(f), ())) == COLUMNS:
                out.append(path.stem)
    return out


def gpus(root: Path | None = None) -> list[str]:
    base = Path(root or RESULTS)
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.exists() else []


def compare(mine: dict, reference: dict) -> list[dict]:
    """Each row of ``mine`` beside the row of the same (kernel, problem, metric) in ``reference``, both
    {key: row} as ``latest`` gives them: kernel, problem, metric, unit, the two values and mine / reference.
    The reference value is None where it has no row; the ratio is None then and where it is zero."""
    out = []
    for key, row in sorted(mine.items()):
        ours = float(row["value"])
        theirs = float(reference[key]["value"]) if key in reference else None
        out.append({"kernel": key[0], "problem": key[1], "metric": key[2], "unit": row["unit"],
                    "mine": ours, "reference": theirs, "ratio": ours / theirs if theirs else None})
    return out


def measured_or_stored(chapter: str, measure, kernels: tuple[str, ...]) -> list[dict]:
    """On a GPU: rows = measure(), recorded and returned. Otherwise the reference GPU's newest rows for
    ``kernels``, with one line saying so -- the same rows a GPU run would give, so plots and tables
    downstream have one code path."""
    if not kernels:
        raise ValueError("kernels: name at least one kernel whose rows to return")
    if device.MODE == device.GPU:
        rows = measure()
        record(chapter, rows)
        return rows
    stored = [r for r in latest(chapter, REFERENCE_GPU).values() if r["kernel"] in kernels]
    stored = [{**r, "value": float(r["value"])} for r in stored]
    gpu = stored[0]["gpu"] if stored else REFERENCE_GPU
    print(f"(timing needs a GPU: showing {len(stored)} stored measurements of {', '.join(kernels)} from {gpu})")
    return stored


def value(rows: list[dict], kernel: str, metric: str, problem: str | None = None) -> float:
    """The value of one (kernel, metric[, problem]) among ``rows``; KeyError naming it if absent."""
    for r in rows:
        if r["kernel"] == kernel and r["metric"] == metric and (problem is None or r["problem"] == problem):
            return float(r["value"])
    raise KeyError(f"no row for kernel={kernel!r}, metric={metric!r}, problem={problem!r}")
