"""Record measurements in ``data/results/<gpu-slug>/<chapter>.csv``, one row per number, and read them back.

Rows are only appended, and each GPU has its own folder, so no run overwrites another GPU's
results. Every row carries the GPU, driver, CUDA version, clocks, commit and date of its run.
Each batch of rows is one write under an exclusive lock of its file, then fsync'ed, so processes
recording at once neither write the header twice nor mix their rows.

``BOOK_RESULTS`` may name another folder for this run's rows; a relative one is taken from the
repository root (ROOT), wherever the process runs: the notebooks' kernel runs in notebooks/,
scripts/rerun.py in the root, and both must name the same folder.
"""

from __future__ import annotations

import csv
import fcntl
import io
import math
import os
from collections.abc import Iterable
from pathlib import Path

from . import device

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "data" / "results"  # the committed runs
ENV_COLUMNS = ("date", "commit", "gpu", "driver", "cuda_runtime", "sm_clock_mhz", "mem_clock_mhz")
# The GPU whose runs the committed notebooks show; in the simulator, timing cells show its rows.
REFERENCE_GPU = "nvidia-h100-80gb-hbm3"
COLUMNS = ENV_COLUMNS + ("chapter", "kernel", "problem", "metric", "value", "unit")
ROW_KEYS = ("kernel", "problem", "metric", "value", "unit")


def results_folder(named: str | None) -> Path:
    """The folder that BOOK_RESULTS (``named``) names, absolute: a relative one is taken from ROOT, the
    repository root, not from the working directory. Unset or empty: REPOSITORY."""
    return ROOT / Path(named).expanduser() if named else REPOSITORY


# Where this run's rows go: BOOK_RESULTS may name another folder (a student's own, empty at first).
RESULTS = results_folder(os.environ.get("BOOK_RESULTS"))


def gpu_folder(gpu_slug: str, root: Path | None = None) -> Path:
    """The folder of one GPU's results under ``root`` (by default RESULTS), created, to write in.

    Refuses a folder inside ROOT when this copy of the package was installed without the repository
    (``pip install .`` copies kernels/ alone into site-packages, with no data/ beside it): the rows
    would be lost with the next install."""
    base = Path(root or RESULTS)
    installed = not (ROOT / "data").is_dir() or {"site-packages", "dist-packages"} & set(ROOT.parts)
    if installed and base.resolve().is_relative_to(ROOT):
        raise RuntimeError(
            f"results: {base} is inside {ROOT}, a copy of the package installed without the "
            "repository's data/: install the repository with `pip install -e .`, or set "
            "BOOK_RESULTS to an absolute folder for your results"
        )
    folder = base / gpu_slug
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def finite(value) -> bool:
    """Whether ``value`` reads as a finite number."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def record(chapter: str, rows: Iterable[dict], env: dict | None = None, root: Path | None = None) -> Path | None:
    """Append ``rows`` (each with kernel, problem, metric, value, unit) for this run's GPU.

    The environment columns come from ``env`` (by default this run's), never from a row.
    Returns the CSV path, or None in the simulator: simulated runs are not measurements.
    """
    if not chapter.isidentifier():
        raise ValueError(f"chapter: expected a short identifier like 'machine', got {chapter!r}")
    rows = list(rows)  # a generator would be used up by the checks below
    if not rows:
        raise ValueError("rows: expected at least one measurement")
    for row in rows:
        missing = set(ROW_KEYS) - row.keys()
        if missing:
            raise ValueError(f"a results row lacks {sorted(missing)}: {row}")
        clash = sorted((set(ENV_COLUMNS) | {"chapter"}) & row.keys())
        if clash:
            raise ValueError(f"a results row sets {clash}, which the run's environment sets: {row}")
        if not finite(row["value"]):
            raise ValueError(f"value: expected a finite number, got {row['value']!r} in {row}")
    if device.MODE != device.GPU and env is None:
        return None
    env = env or device.environment()
    path = gpu_folder(env["gpu_slug"], root) / f"{chapter}.csv"
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writerows({**{k: env.get(k, "") for k in ENV_COLUMNS}, "chapter": chapter, **row} for row in rows)
    _append(path, text.getvalue())
    return path


def _append(path: Path, text: str) -> None:
    """Append ``text`` (whole CSV rows) to ``path`` in one write under an exclusive lock, then fsync.

    The header goes first into an empty file (decided under the lock: two processes creating the file
    at once write it once); an existing file's header must be COLUMNS; a last line without its newline
    (a writer killed mid-row) is ended first, so the new rows are never glued to it."""
    with path.open("a+b") as f:  # appends go to the end whatever the position read from
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            buffer = io.StringIO()
            csv.writer(buffer).writerow(COLUMNS)
            text = buffer.getvalue() + text
        else:
            f.seek(0)
            header = next(csv.reader([f.readline().decode(errors="replace")]), [])
            if tuple(header) != COLUMNS:
                raise ValueError(
                    f"{path}: its header {header} is not {list(COLUMNS)}; appending would shift "
                    "every field: move the file aside (or add the missing columns) first"
                )
            f.seek(size - 1)
            if f.read(1) != b"\n":
                text = "\r\n" + text  # csv's line ending, as in the rest of the file
        f.write(text.encode())
        f.flush()
        os.fsync(f.fileno())


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` as the whole of ``path``: into a temporary file beside it, fsync'ed, then renamed over
    it, so a killed run leaves the old file or the new one, never half of one (the profilers' CSVs)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


_READ: dict[str, tuple] = {}  # path: (the stat of the bytes parsed, their rows)


def read(path: Path) -> list[dict]:
    """The rows of one results CSV; ValueError naming the file, line and field of what is wrong: a header
    other than COLUMNS, a row of another number of fields, a value that is not a finite number, a last
    line without its newline (a writer killed mid-row). A file read before and not replaced or changed
    since is not parsed again (the model behind best_step reads the same stored quantities many times);
    the caller gets its own copies of the rows."""
    st = Path(path).stat()
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if _READ.get(str(path), (None,))[0] != stamp:
        _READ[str(path)] = (stamp, _parse(Path(path)))
    return [dict(r) for r in _READ[str(path)][1]]


def _parse(path: Path) -> list[dict]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 ({e.reason})") from e
    if data and not data.endswith(b"\n"):
        last = text.count("\n") + 1
        raise ValueError(f"{path}, line {last}: the last line has no newline (a writer killed mid-row?)")
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = next(reader, None)
        if header is not None and tuple(header) != COLUMNS:
            raise ValueError(f"{path}, line 1: the header {header} is not {list(COLUMNS)}")
        for fields in reader:
            where = f"{path}, line {reader.line_num}"
            if not fields:
                continue
            if len(fields) != len(COLUMNS):
                raise ValueError(f"{where}: expected {len(COLUMNS)} fields, got {len(fields)}: {fields}")
            row = dict(zip(COLUMNS, fields, strict=True))
            if not finite(row["value"]):
                raise ValueError(f"{where}, field 'value': expected a finite number, got {row['value']!r}")
            rows.append(row)
    except csv.Error as e:
        raise ValueError(f"{path}, line {reader.line_num}: {e}") from e
    return rows


def load(chapter: str, gpu_slug: str, root: Path | None = None) -> list[dict]:
    """One chapter's rows for one GPU, from ``root``; by default from RESULTS, or from the repository
    where RESULTS has no file for that GPU and chapter (the reference GPU's stored numbers, which a
    student's own BOOK_RESULTS folder lacks)."""
    path = Path(root or RESULTS) / gpu_slug / f"{chapter}.csv"
    if root is None and not path.exists():
        path = REPOSITORY / gpu_slug / f"{chapter}.csv"
    return read(path) if path.exists() else []


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
        out.append(
            {
                "kernel": key[0],
                "problem": key[1],
                "metric": key[2],
                "unit": row["unit"],
                "mine": ours,
                "reference": theirs,
                "ratio": ours / theirs if theirs else None,
            }
        )
    return out


def measured_or_stored(chapter: str, measure, kernels: tuple[str, ...] | str) -> list[dict]:
    """On a GPU: rows = measure(), recorded and returned. Otherwise the reference GPU's newest rows for
    ``kernels``, with one line saying so -- the same rows a GPU run would give, so plots and tables
    downstream have one code path. Kernel names match whole: a single name may be given as a string."""
    kernels = (kernels,) if isinstance(kernels, str) else tuple(kernels)  # `in` a string matches substrings
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
