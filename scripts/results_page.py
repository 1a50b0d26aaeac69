"""Write the generated part of book/results.md: each chapter's key numbers per GPU, beside the source's.

    python scripts/results_page.py        # `make book` runs it before every build

Reads every data/results/<gpu>/<chapter>.csv (the newest value of each number per GPU) and the
published tables in data/seeds/, and writes book/_generated/results.md with its figures in
book/_generated/results/ (git-ignored: regenerated on every build, so the page always shows what
the repository holds). Any subset of GPUs and chapters works: a figure shows whichever GPUs
recorded its numbers, plus the source's GPU where the source published them.
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("BOOK_MODE", "sim")  # building the book never touches a GPU (read when kernels loads)

import matplotlib
import matplotlib.pyplot as plt

from kernels.harness import results, show

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "data" / "seeds"
OUT = ROOT / "book" / "_generated"
CHAPTER_TITLES = {
    "machine": "The machine",
    "ssim": "SSIM worklog",
    "conv": "Direct convolution",
    "probes": "Hardware probes",
    "igemm": "Implicit GEMM",
}


def seed_rows(name: str) -> list[dict]:
    with (SEEDS / f"{name}.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def measured(root: Path) -> dict:
    """{chapter: {gpu name: {(kernel, problem, metric): row}}}, the newest row of each number per GPU."""
    out: dict = {}
    for slug in results.gpus(root):
        for chapter in results.chapters(slug, root):
            latest = results.latest(chapter, slug, root)
            if latest:
                name = next(iter(latest.values())).get("gpu") or slug
                out.setdefault(chapter, {})[name] = latest
    return out


# --- what each chapter's key figures pick from a GPU's newest rows ---------------------------------


def by_kernel(metric: str, problem: str, order=()) -> Callable[[dict], dict]:
    """{kernel: value} of one metric on one problem: kernels in ``order`` first, then the rest as recorded."""

    def pick(latest: dict) -> dict:
        found = {k: float(r["value"]) for (k, p, m), r in latest.items() if m == metric and p == problem}
        return {k: found[k] for k in [*order, *found] if k in found}

    return pick


def by_problem(kernel: str, metric: str) -> Callable[[dict], dict]:
    """{problem: value} of one kernel's metric: a sweep, in the order it was recorded."""

    def pick(latest: dict) -> dict:
        return {p: float(r["value"]) for (k, p, m), r in latest.items() if k == kernel and m == metric}

    return pick


def by_metric(kernel: str, metrics: tuple) -> Callable[[dict], dict]:
    """{metric: value} of one kernel, for the named metrics in that order (any problem)."""

    def pick(latest: dict) -> dict:
        found = {m: float(r["value"]) for (k, p, m), r in latest.items() if k == kernel}
        return {m: found[m] for m in metrics if m in found}

    return pick


@dataclass(frozen=True)
class KeyFigure:
    """One figure of the page: the same numbers for every GPU, and the source's where it has them."""

    chapter: str
    title: str
    unit: str
    pick: Callable[[dict], dict]
    source: Callable[[], tuple[str, list]] | None = None  # () -> (source GPU label, its rows as results rows)
    log: bool = False
    lower_is_better: bool = False


def _ssim_order():
    from kernels.ssim.registry import REGISTRY

    return tuple(v.name for v in REGISTRY)


def _conv_order():
    from kernels.conv.stages import GPU_STAGES

    return ("SEQ", *GPU_STAGES, "AUTOTUNE", "cuDNN")


def _source_rows(name: str, label: str, keep: Callable[[dict], bool], **rename) -> Callable[[], tuple]:
    """A source table's rows as results rows: ``rename`` maps a results column to a seed column or a
    constant (``kernel="stage"`` reads the seed's stage; ``metric="=ms"`` sets the metric to ms)."""

    def source():
        rows = [r for r in seed_rows(name) if keep(r)]
        mapped = [
            {
                col: (src[1:] if src.startswith("=") else r[src])
                for col, src in {"kernel": "kernel", "problem": "problem", "metric": "metric", **rename}.items()
            }
            | {"value": r["value"]}
            for r in rows
        ]
        return (label.format(gpu=rows[0].get("gpu", "")) if rows else label), mapped

    return source


def key_figures() -> list[KeyFigure]:
    a100 = _source_rows("ssim_a100", "{gpu} (worklog)", lambda r: r["metric"] == "time", metric="=ms")
    titan = _source_rows(
        "conv_titanv", "{gpu} (source)", lambda r: r["metric"] == "measured", kernel="stage", metric="=gflops"
    )
    mi25 = _source_rows("probes_mi25", "AMD MI25 (source)", lambda r: True)
    v100 = _source_rows(
        "igemm_v100",
        "{gpu} (source, cuDNN)",
        lambda r: r["metric"] == "time",
        kernel="=cudnn",
        problem="=source problem",
        metric="=ms",
    )
    return [
        KeyFigure("machine", "Copy bandwidth, 1 GiB", "GB/s", by_kernel("GB/s", "1024 MiB", ("memcpy", "copy_kernel"))),
        KeyFigure("machine", "FP32 FMA rate vs resident warps", "GFLOP/s", by_problem("fma_chains", "GFLOP/s")),
        KeyFigure("machine", "Shared-memory read bandwidth", "GB/s", by_metric("smem_read", ("GB/s",))),
        KeyFigure(
            "ssim",
            "SSIM versions, 1x3x2160x3840",
            "ms",
            by_kernel("ms", "1x3x2160x3840", _ssim_order()),
            a100,
            lower_is_better=True,
        ),
        KeyFigure(
            "conv", "Convolution stages, conv1", "GFLOP/s", by_kernel("gflops", "conv1", _conv_order()), titan, log=True
        ),
        KeyFigure(
            "conv", "Convolution stages, conv2", "GFLOP/s", by_kernel("gflops", "conv2", _conv_order()), titan, log=True
        ),
        KeyFigure(
            "probes",
            "Load latency (pointer chase)",
            "cycles",
            by_metric("chase", ("L1 hit latency", "L2 hit latency", "L2 far latency", "HBM latency")),
            mi25,
            lower_is_better=True,
        ),
        KeyFigure(
            "probes",
            "Thread launch rate vs block shape",
            "threads/cycle",
            by_problem("launch", "threads per cycle"),
            mi25,
        ),
        KeyFigure(
            "igemm",
            "Implicit GEMM, the source's convolution",
            "ms",
            by_kernel("ms", "source problem", ("cudnn",)),
            v100,
            log=True,
            lower_is_better=True,
        ),
        KeyFigure("igemm", "fp16 GEMM (cuBLAS) vs K, M = N = 4096", "TFLOP/s", by_problem("cublas_gemm", "TFLOP/s")),
    ]


# --- drawing and writing -----------------------------------------------------------------------------


def series(fig: KeyFigure, data: dict) -> dict:
    """{GPU label: {x: value}}: every GPU that recorded these numbers, then the source's GPU."""
    out = {gpu: picked for gpu, latest in sorted(data.get(fig.chapter, {}).items()) if (picked := fig.pick(latest))}
    if fig.source:
        label, rows = fig.source()
        if picked := fig.pick({(r["kernel"], r["problem"], r["metric"]): r for r in rows}):
            out[label] = picked
    return out


FONT_PT = 10  # the smallest text on a figure, at the page's column width (WIDTH_IN inches)
WIDTH_IN = 8.0
ROW_IN = 0.3  # the height of one group of bars: the launch sweep's 50 block shapes stay readable


def figure(fig: KeyFigure, lines: dict) -> plt.Figure:
    """Grouped horizontal bars: one row per x (kernel, problem or metric), one bar per GPU.

    Rows, not columns: the labels (kernel names, block shapes) never collide, and the figure grows
    taller with the number of rows at the column's width instead of wider than the page, where the
    browser would shrink its text."""
    xs = list(dict.fromkeys(x for values in lines.values() for x in values))
    height = 0.8 / len(lines)
    with plt.rc_context({"font.size": FONT_PT, "legend.fontsize": FONT_PT, "axes.titlesize": FONT_PT + 2}):
        drawn, ax = plt.subplots(
            figsize=(WIDTH_IN, max(4.5, 1.8 + ROW_IN * len(xs) * max(1.0, len(lines) / 3))), layout="constrained"
        )
        for i, (gpu, values) in enumerate(lines.items()):
            pos = [j + (i - (len(lines) - 1) / 2) * height for j, x in enumerate(xs) if x in values]
            ax.barh(pos, [values[x] for x in xs if x in values], height, label=gpu)
        ax.set_yticks(range(len(xs)), xs)
        ax.set_ylim(len(xs) - 0.5, -0.5)  # the first x on top, as in the table below the figure
        ax.set_xlabel(fig.unit + (" (lower is better)" if fig.lower_is_better else ""))
        if fig.log:
            ax.set_xscale("log")
        ax.set_title(fig.title)
        ax.grid(axis="x", alpha=0.3)
        drawn.legend(loc="outside lower center", ncol=min(len(lines), 3), frameon=False)
    return drawn


def draw(fig: KeyFigure, lines: dict, path: Path) -> None:
    """The figure of ``lines`` as a PNG at ``path``."""
    drawn = figure(fig, lines)
    drawn.savefig(path, dpi=110)
    plt.close(drawn)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def table(lines: dict) -> str:
    xs = list(dict.fromkeys(x for values in lines.values() for x in values))
    rows = [{"": x, **{gpu: _fmt(v[x]) if x in v else None for gpu, v in lines.items()}} for x in xs]
    return show.table(rows).data


def runs_table(root: Path) -> str:
    """One line per GPU: its name, driver, CUDA, the chapters it recorded and its newest run."""
    rows = []
    for slug in results.gpus(root):
        chapters = {c: results.load(c, slug, root) for c in results.chapters(slug, root)}
        newest = max((r for rs in chapters.values() for r in rs), key=lambda r: r["date"], default=None)
        if newest:
            rows.append(
                {
                    "GPU": newest["gpu"],
                    "driver": newest["driver"],
                    "CUDA": newest["cuda_runtime"],
                    "chapters": ", ".join(c for c, rs in chapters.items() if rs),
                    "newest run": newest["date"][:10],
                    "commit": newest["commit"],
                }
            )
    return show.table(rows).data if rows else "No GPU has recorded results yet.\n"


def probes_summary(data: dict) -> str:
    """The probes chapter's own summary table (kernels/probes/common.py), one column per GPU."""
    from kernels.probes import common

    by_gpu = data.get("probes", {})
    if not by_gpu:
        return ""
    columns: dict = {}
    for gpu, latest in sorted(by_gpu.items()):
        machine = data.get("machine", {}).get(gpu, {})
        sms, cc = machine.get(("device", "-", "sms")), machine.get(("device", "-", "cc"))  # recorded by chapter 01
        summary = common.summary(
            list(latest.values()), int(float(sms["value"])) if sms else None, cc=cc["value"] if cc else None
        )  # per-lane rates: this GPU's lanes
        columns[gpu] = {e["probe"]: e for e in summary}
    first = next(iter(columns.values()))
    rows = [
        {
            "probe": p,
            "unit": e["unit"],
            **{gpu: _fmt(col[p]["ours"]) if col[p]["ours"] is not None else None for gpu, col in columns.items()},
            "MI25 (source)": _fmt(e["MI25"]) if isinstance(e["MI25"], (int, float)) else None,
            "published Hopper": e["published Hopper"],
        }
        for p, e in first.items()
    ]
    return show.table(rows).data


def write(root: Path = results.RESULTS, out: Path = OUT) -> Path:
    """Write ``out``/results.md and its figures from the results under ``root``; returns the Markdown path."""
    data = measured(root)
    shutil.rmtree(out / "results", ignore_errors=True)
    (out / "results").mkdir(parents=True)
    parts = ["## The GPUs\n", runs_table(root)]
    figures = key_figures()
    for chapter in dict.fromkeys(f.chapter for f in figures):
        gpus = sorted(data.get(chapter, {}))
        parts.append(f"\n## {CHAPTER_TITLES[chapter]}\n")
        parts.append(
            f"Measured on: {', '.join(gpus)}.\n"
            if gpus
            else f"No GPU has recorded this chapter (`{chapter}`) yet; the source's numbers alone are shown.\n"
        )
        for n, fig in enumerate(f for f in figures if f.chapter == chapter):
            lines = series(fig, data)
            if not lines:
                continue
            image = out / "results" / f"{chapter}-{n}.png"
            draw(fig, lines, image)
            parts += [
                f"\n### {fig.title}\n",
                f"![{fig.title}, per GPU](_generated/results/{image.name})\n",
                table(lines),
            ]
        if chapter == "probes" and (summary := probes_summary(data)):
            parts += ["\n### The probes' summary, per GPU\n", summary]
    md = out / "results.md"
    md.write_text("\n".join(parts))
    return md


if __name__ == "__main__":
    print(f"wrote {write().relative_to(ROOT)}")
