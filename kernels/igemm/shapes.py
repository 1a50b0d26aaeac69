"""best_step against cuDNN on ResNet- and VGG-like layers: every eligible step and cuDNN timed on each
shape, each result checked against the float32 reference, the rows recorded in the chapter's CSV.

    python3 -m kernels.igemm.shapes

On a GPU it times and records, then prints the table; without one it prints one line and exits 1.
"""

from __future__ import annotations

import datetime
import math
import re
import sys
import time
from collections.abc import Callable

import numpy as np

from ..harness import check, device, results
from . import common as ig

CHAPTER = "igemm"
PREFIX = "shape_"  # the kernel names of this table's rows, apart from the chapter's source-problem rows
# Layers of ResNet-50 and VGG-16 at small and odd batches, and the source problem: name -> Problem.
SHAPES = {
    "source N256 14x14 256-512": ig.PROBLEM,
    "ragged N7 17x19 64-200": ig.Problem(n=7, h=17, w=19, c=64, k=200),
    "stride-2 N4 28x28 96-96": ig.Problem(n=4, h=28, w=28, c=96, k=96, stride=2),
    "resnet conv2 N32 56x56 64-64": ig.Problem(n=32, h=56, w=56, c=64, k=64),
    "resnet conv5 N16 7x7 512-512": ig.Problem(n=16, h=7, w=7, c=512, k=512),
    "1x1 reduce N8 28x28 512-128": ig.Problem(n=8, h=28, w=28, c=512, k=128, r=1, s=1, pad=0),
    "1x1 stride-2 N16 56x56 256-512": ig.Problem(n=16, h=56, w=56, c=256, k=512, r=1, s=1, pad=0, stride=2),
    "vgg conv1 N1 224x224 64-64": ig.Problem(n=1, h=224, w=224, c=64, k=64),
    "vgg conv5 N1 14x14 512-512": ig.Problem(n=1, h=14, w=14, c=512, k=512),
    "vgg conv3 N8 56x56 256-256": ig.Problem(n=8, h=56, w=56, c=256, k=256),
}
BASELINES = {"cudnn_frontend": "frontend plan", "torch": "PyTorch"}  # the frontend's fastest; F.conv2d, cudnn.benchmark
CLASSES = ("less than one wave", "padded tiles", "full waves")  # what ``reason`` starts with
WARMUP, REPEAT = 3, 20  # the stored runs spread (IQR) a few percent at most: a median of 20 is within a percent
SITTING_HOURS = 2  # rows this GPU recorded at this commit so recently are this sitting's: measure() reuses them
# Split K swept on the layer with the most K per tile: 8 output tiles, 72 K steps each; every split step.
SWEEP_SHAPE = "vgg conv5 N1 14x14 512-512"
SWEEP_SPLITS = (1, 2, 3, 4, 6, 8, 9, 12, 15, 18, 24, 36)  # each leaves every split some of the 72 K steps


def kernels() -> tuple[str, ...]:
    """Every kernel name this table's rows may carry (a split is timed only as best_step's choice)."""
    names = {ig.stored_name(i.number, d, block_n=n) for i in ig.REGISTRY if i.cuda_cpp for d, n in i.builds}
    return tuple(PREFIX + n for n in ("best_step", *BASELINES, *sorted(names)))


def sweep_kernels() -> tuple[str, ...]:
    """The kernel names of the split sweep's rows: each split step at each depth and split count."""
    return tuple(
        PREFIX + ig.stored_name(step, d, s)
        for step in ig.SPLIT_K
        for d in ig.step_info(step).depths
        for s in SWEEP_SPLITS
    )


# The narrow builds are calibrated on the source problem here, not in notebook 05; their step's default
# build is timed beside them under its own problem name, so the chapter's row of it stays the calibration.
SOURCE, BESIDE_NARROW = "source problem", "source problem, beside the narrow build"


def _narrow_pairs() -> list[tuple[tuple, tuple]]:
    """((step, stages, block_n) of each narrow build, (step, stages, block_n) of its step's default build)."""
    return [
        ((i.number, d, n), (i.number, i.default_stages, i.block_n))
        for i in ig.REGISTRY
        for d, n in i.builds
        if n != i.block_n
    ]


def narrow_kernels() -> tuple[str, ...]:
    """The kernel names of narrow_calibration's rows."""
    return tuple(ig.stored_name(s, d, block_n=n) for pair in _narrow_pairs() for s, d, n in pair)


def narrow_calibration(*, timer=None, step_launch=None, rng=None) -> list:
    """Rows of each narrow build on the source problem (problem SOURCE: best_step's rate for it) and of its
    step's default build in the same run (problem BESIDE_NARROW), each output checked against the float32
    reference first (a wrong one is printed and gets no row)."""
    timer, step_launch = timer or _time, step_launch or _step_launch
    problem, xp = ig.PROBLEM, device.xp()
    x, w = ig.random_inputs(problem, rng or np.random.default_rng(7), xp)
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride)
    rows = []
    for narrow, wide in _narrow_pairs():
        for (step, stages, block_n), label in ((narrow, SOURCE), (wide, BESIDE_NARROW)):
            kernel = ig.stored_name(step, stages, block_n=block_n)
            out = xp.empty(problem.y_shape, dtype=np.float16)
            launch = step_launch(step, stages, x, w, out, problem, block_n=block_n)
            ms = _checked_ms(launch, out, ref, problem, f"{kernel} on the {label}", timer)
            if ms is not None:
                rows.append({"kernel": kernel, "problem": label, "metric": "ms", "value": ms, "unit": "ms"})
    return rows


def _checked_ms(launch: Callable[[], None], out, ref, problem: ig.Problem, name: str, timer) -> float | None:
    """``launch``'s time by ``timer`` once its output, written into ``out`` poisoned first, matches the
    reference ``ref``; None, with the verdict printed, where it does not."""
    check.poison(out)
    launch()
    verdict = ig.compare(out, ref, problem, name=name)
    if not verdict.ok:
        print(verdict)
        return None
    return float(timer(launch))


def split_sweep(*, timer=None, step_launch=None, rng=None) -> list:
    """Rows of each split-K step, at the depth best_step takes for it, on SWEEP_SHAPE for each of
    SWEEP_SPLITS, each output checked against the float32 reference first (a wrong one is printed and
    gets no row)."""
    timer, step_launch = timer or _time, step_launch or _step_launch
    problem = SHAPES[SWEEP_SHAPE]
    xp = device.xp()
    x, w = ig.random_inputs(problem, rng or np.random.default_rng(6), xp)
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride)
    rows = []
    depth = {step: ig.best_step(problem, steps=(step,)).stages for step in ig.SPLIT_K}
    for step, splits in ((step, splits) for step in ig.SPLIT_K for splits in SWEEP_SPLITS):
        stages = depth[step]
        kernel = ig.stored_name(step, stages, splits)
        out = xp.empty(problem.y_shape, dtype=np.float16)
        launch = step_launch(step, stages, x, w, out, problem, splits)
        ms = _checked_ms(launch, out, ref, problem, f"{kernel} on {SWEEP_SHAPE}", timer)
        if ms is not None:
            rows.append({"kernel": PREFIX + kernel, "problem": SWEEP_SHAPE, "metric": "ms", "value": ms, "unit": "ms"})
    return rows


def _time(launch: Callable[[], None]) -> float:
    from ..harness import timing

    return timing.benchmark(launch, warmup=WARMUP, repeat=REPEAT).median_ms


def _step_launch(step: int, stages, x, w, out, problem: ig.Problem, splits=None, block_n=None):
    return ig.launcher(
        step, x, w, out, pad=problem.pad, stride=problem.stride, stages=stages, splits=splits, block_n=block_n
    )


def _cudnn_frontend(problem: ig.Problem, x, w, out):
    """The fastest plan's launcher; None with the reason printed where the frontend is missing."""
    from .cudnn_conv import CudnnConv, missing

    if why := missing():
        print(f"cuDNN frontend left out: {why}")
        return None
    return CudnnConv(problem).fastest_launcher(x, w, out, repeat=REPEAT)


def _torch(problem: ig.Problem, x, w, out):
    """F.conv2d on channels-last views of x and w with cudnn.benchmark (and TF32 off, for the process:
    ``cudnn_conv.autotuned_torch``; these problems are fp16), its NHWC result copied to ``out`` only for
    the check; None with the reason printed where PyTorch is missing."""
    from ..harness.cudnn_conv import autotuned_torch

    if (torch := autotuned_torch()) is None:
        return None
    F = torch.nn.functional
    xt = torch.from_dlpack(x).permute(0, 3, 1, 2)  # NHWC memory seen as NCHW: channels-last
    wt = torch.from_dlpack(w).permute(0, 3, 1, 2)
    yt = torch.from_dlpack(out)

    def launch():
        y = F.conv2d(xt, wt, stride=problem.stride, padding=problem.pad)
        if launch.copy:
            yt.copy_(y.permute(0, 2, 3, 1))

    launch.copy = True
    return launch


BASELINE_LAUNCHERS = {"cudnn_frontend": _cudnn_frontend, "torch": _torch}


def sitting_ms() -> dict:
    """{(kernel, problem): ms} of the chapter's rows that this GPU recorded at the current commit in the
    last SITTING_HOURS: measurements of this sitting that ``measure`` need not repeat (notebook 05's
    timings of the source problem, this page's narrow calibration, or this table's rows from a run cut
    short). Empty without a GPU or where the commit is unknown."""
    if not device.on_gpu():
        return {}
    env = device.environment()
    if not re.fullmatch(r"[0-9a-f]{7,40}", env["commit"]):
        return {}
    since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=SITTING_HOURS)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    return {
        (r["kernel"], r["problem"]): float(r["value"])
        for r in results.load(CHAPTER, env["gpu_slug"])
        if r["commit"] == env["commit"] and r["metric"] == "ms" and r["date"] >= since
    }


# The chapter's own names (notebook 05) of a baseline's timing of the source problem.
CHAPTER_BASELINES = {"cudnn_frontend": "cudnn"}


def _earlier(known: dict, kernel: str, name: str, problem: ig.Problem, aliases=()) -> float | None:
    """The ms of ``kernel`` on shape ``name`` in ``known`` (sitting_ms): this table's own row, or on the
    source problem the chapter's row under the kernel's name or one of its ``aliases``; else None."""
    names = [(PREFIX + kernel, name)]
    if problem == ig.PROBLEM:
        names += [(k, SOURCE) for k in (kernel, *aliases)]
    return next((known[n] for n in names if n in known), None)


def _chapter_aliases(step: int, stages, block_n: int) -> tuple[str, ...]:
    """Other names notebook 05 gives the build: a step's default build without its depth (v5_epilogue)."""
    default = stages == ig.default_stages(step) and block_n == ig.step_info(step).block_n
    return (ig.stored_name(step, None),) if default else ()


def measure(
    shapes: dict | None = None, *, timer=_time, step_launch=_step_launch, baselines=None, rng=None, known=None
) -> list:
    """Rows (kernel, problem, metric, value, unit) of every eligible step, best_step's choice and each
    cuDNN baseline on every shape, each output checked against the float32 reference first: a wrong one
    is printed and gets no row. ``timer(launch) -> ms``, ``step_launch`` and ``baselines`` are the GPU's
    by default (the tests pass fakes). ``known`` ({(kernel, problem): ms}, sitting_ms's) holds times of
    this sitting: a step found there is checked but not timed again, a baseline (checked where it was
    timed) not run at all."""
    shapes = SHAPES if shapes is None else shapes
    baselines = BASELINE_LAUNCHERS if baselines is None else baselines
    known = known or {}
    rng = rng or np.random.default_rng(5)
    xp = device.xp()
    rows = []
    for name, problem in shapes.items():
        x, w = ig.random_inputs(problem, rng, xp)
        ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride)
        launches, ms = [], {}
        makers = [
            (
                ig.stored_name(step, stages, block_n=n),
                lambda p, x, w, out, v=(step, stages), n=n: step_launch(*v, x, w, out, p, block_n=n),
                _chapter_aliases(step, stages, n),
            )
            for step, stages, n in ig.variants(problem)
        ]
        choice = ig.best_step(problem)
        if choice.splits > 1:  # split K: timed as best_step's own row, not as a variant of the table
            makers.append(
                (choice.name, lambda p, x, w, out, c=choice: step_launch(c.step, c.stages, x, w, out, p, c.splits), ())
            )
        for kernel, make in baselines.items():
            earlier = _earlier(known, kernel, name, problem, (CHAPTER_BASELINES.get(kernel, kernel),))
            if earlier is not None:
                ms[kernel] = earlier
            else:
                makers.append((kernel, make, ()))
        for kernel, make, aliases in makers:
            out = xp.empty(problem.y_shape, dtype=np.float16)
            try:
                launch = make(problem, x, w, out)
            except Exception as err:  # one that cannot build for a shape loses that shape, not the table
                print(f"{kernel} left out on {name}: {type(err).__name__}: {str(err)[:120]}")
                continue
            if launch is not None:
                launches.append((kernel, out, launch, _earlier(known, kernel, name, problem, aliases)))
        for kernel, out, launch, earlier in launches:
            check.poison(out)
            launch()
            verdict = ig.compare(out, ref, problem, name=f"{kernel} on {name}")
            if not verdict.ok:
                print(verdict)
                continue
            if hasattr(launch, "copy"):
                launch.copy = False  # PyTorch's copy to the checked array is no part of its time
            ms[kernel] = float(timer(launch)) if earlier is None else earlier
        for kernel, t in ms.items():
            if kernel != choice.name or choice.splits == 1:
                rows.append({"kernel": PREFIX + kernel, "problem": name, "metric": "ms", "value": t, "unit": "ms"})
        if choice.name in ms:
            rows += [
                {"kernel": PREFIX + "best_step", "problem": name, "metric": metric, "value": value, "unit": unit}
                for metric, value, unit in (
                    ("ms", ms[choice.name], "ms"),
                    ("step", choice.step, ""),
                    ("stages", choice.stages or 0, ""),
                    ("splits", choice.splits, ""),
                    ("block_n", choice.tile[1], ""),
                )
            ]
    return rows


def measured_or_stored() -> list[dict]:
    """On a GPU: measure() recorded and returned (results.measured_or_stored). Otherwise the reference
    GPU's newest rows of this table, with one short line saying so (not the names of all its kernels)."""
    if device.on_gpu():
        known = sitting_ms()  # read before measuring: this run's own rows are recorded after it
        return results.measured_or_stored(CHAPTER, lambda: measure(known=known), kernels())
    stored = [r for r in results.latest(CHAPTER, results.REFERENCE_GPU).values() if r["kernel"] in kernels()]
    gpu = stored[0]["gpu"] if stored else results.REFERENCE_GPU
    print(f"(timing needs a GPU: showing {len(stored)} stored measurements of the shape table from {gpu})")
    return [{**r, "value": float(r["value"])} for r in stored]


def table(rows: list[dict], props: dict | None = None, shapes: dict | None = None) -> list[dict]:
    """One row per shape with stored times: best_step's choice, its rate, the fastest step measured, the
    strongest cuDNN, their ratio (above 1: best_step is faster), the word and the model's reasons."""
    props = props or device.target_properties()
    shapes = SHAPES if shapes is None else shapes
    at = {(r["kernel"], r["problem"], r["metric"]): float(r["value"]) for r in rows}
    out = []
    for name, problem in shapes.items():
        chosen = at.get((PREFIX + "best_step", name, "ms"))
        cudnn = {b: at[(PREFIX + b, name, "ms")] for b in BASELINES if (PREFIX + b, name, "ms") in at}
        if chosen is None or not cudnn:
            continue
        step = int(at[(PREFIX + "best_step", name, "step")])
        stages = int(at[(PREFIX + "best_step", name, "stages")]) or None
        splits = int(at.get((PREFIX + "best_step", name, "splits"), 1))
        block_n = int(at.get((PREFIX + "best_step", name, "block_n"), ig.step_info(step).block_n))
        chosen_name = ig.stored_name(step, stages, splits, block_n)
        steps = {
            k[0][len(PREFIX) :]: v
            for k, v in at.items()
            if k[1] == name and k[2] == "ms" and k[0][len(PREFIX) :] not in ("best_step", *BASELINES)
        }
        unsplit = min(steps, key=steps.get)  # every variant of the table runs without a split
        fastest = chosen_name if chosen < steps[unsplit] else unsplit  # split K is timed only as the choice
        base = min(cudnn, key=cudnn.get)
        ratio = cudnn[base] / chosen
        m, n, kd = problem.gemm
        tile, tiles, slots, waves, tile_flops = ig.tile_model(step, stages, problem, props, splits, block_n=block_n)
        useful = problem.flops / (tiles * tile_flops)
        why = reason(problem, ratio > 1, tiles / (props["sms"] * slots), useful, splits)
        out.append(
            {
                "shape": name,
                "M x N x K": f"{m} x {n} x {kd}",
                "best_step": chosen_name,
                "splits": splits,
                "split gain": steps[unsplit] / chosen,  # the fastest unsplit variant's time over the choice's
                "TFLOP/s": problem.flops / chosen / 1e9,
                "fastest step": fastest,
                "cuDNN": BASELINES[base],
                "cuDNN TFLOP/s": problem.flops / cudnn[base] / 1e9,
                "ratio": ratio,
                "verdict": "wins" if ratio > 1 else "loses",
                "tiles per SM slot": tiles / (props["sms"] * slots),
                "useful work": useful,
                "FLOP/B": problem.flops / problem.bytes_compulsory,
                "why": why,
                "class": next(c for c in CLASSES if why.startswith(c)),
            }
        )
    return out


def reason(problem: ig.Problem, won: bool, occupancy: float, useful: float, splits: int = 1) -> str:
    """The words for a win or a loss from the model's features: a partial wave, padded tiles, or full waves."""
    if occupancy < 1:
        split = f", K split {splits} ways" if splits > 1 else ""
        if won:
            return f"less than one wave ({occupancy:.0%} of the slots{split}): what decides is how many SMs get work"
        if splits > 1:
            return (
                f"less than one wave ({occupancy:.0%} of the slots{split}): each block is short, so the launches, "
                "the pipeline's fill and the partial sums' second kernel weigh"
            )
        return f"less than one wave ({occupancy:.0%} of the slots): more busy SMs would need smaller tiles"
    if useful < 0.75:
        return f"padded tiles: {useful:.0%} of the tile work is useful"
    if won:
        return "full waves: our main loop is faster on this shape"
    return "full waves: cuDNN's main loop is faster on this shape"


def summary(table_rows: list[dict]) -> dict:
    """Shapes won, shapes measured, the geometric mean of the ratios, the best and worst shape, the rows
    where the choice splits K, and the shapes lost by the class of their reason."""
    ratios = [r["ratio"] for r in table_rows]
    return {
        "won": sum(r > 1 for r in ratios),
        "shapes": len(ratios),
        "geomean": math.exp(sum(math.log(r) for r in ratios) / len(ratios)),
        "best": max(table_rows, key=lambda r: r["ratio"]),
        "worst": min(table_rows, key=lambda r: r["ratio"]),
        "fastest_chosen": sum(r["best_step"] == r["fastest step"] for r in table_rows),
        "split": [r for r in table_rows if r["splits"] > 1],
        "lost": {cls: sum(r["ratio"] <= 1 and r["class"] == cls for r in table_rows) for cls in CLASSES},
    }


def sweep_curves(sweep_rows: list[dict], table_rows: list[dict], props: dict, step: int | None = None) -> dict | None:
    """The split sweep of ``step`` (default: the first split step) at its swept depth: measured and
    modelled µs per split count, and the strongest cuDNN's µs on SWEEP_SHAPE from the table's rows;
    None where fewer than two splits are stored."""
    step = ig.SPLIT_K[0] if step is None else step
    names = {PREFIX + ig.stored_name(step, d, s): (d, s) for d in ig.step_info(step).depths for s in SWEEP_SPLITS}
    by_depth: dict[int, dict[int, float]] = {}
    for r in sweep_rows:
        if r["problem"] == SWEEP_SHAPE and r["kernel"] in names:
            d, s = names[r["kernel"]]
            by_depth.setdefault(d, {})[s] = 1e3 * float(r["value"])
    if not by_depth or max(map(len, by_depth.values())) < 2:
        return None
    stages, measured = max(by_depth.items(), key=lambda kv: len(kv[1]))
    rate = ig.stored_rates(props)[(step, stages, ig.step_info(step).block_n)]
    head = ig.stored_heads().get(step, 1.0)  # as best_step
    problem = SHAPES[SWEEP_SHAPE]
    cudnn = [
        1e3 * float(r["value"])
        for r in table_rows
        if r["problem"] == SWEEP_SHAPE and r["kernel"] in {PREFIX + b for b in BASELINES} and r["metric"] == "ms"
    ]
    return {
        "step": step,
        "stages": stages,
        "measured_us": dict(sorted(measured.items())),
        "model_us": {s: 1e3 * ig.estimate_ms(step, stages, problem, props, rate, s, head) for s in SWEEP_SPLITS},
        "cudnn_us": min(cudnn) if cudnn else math.inf,
    }


def curve_shape(times: dict[int, float]) -> str:
    """Words for how a time moves as the split grows: where its lowest point is, and what follows it."""
    best, splits = min(times, key=times.get), sorted(times)
    if best == splits[0]:
        return "is lowest unsplit"
    if best == splits[-1]:
        return "falls all the way to the largest split"
    return f"falls to {best} splits, then rises"


def shapes_sentence(measured: str, model: str) -> str:
    """One sentence for the two curves' shapes (curve_shape's words), without saying a shared shape twice."""
    if measured == model:
        return f"The measured time {measured}, and so does the model's"
    return f"The measured time {measured}; the model's {model}"


def sweep_findings(curves: dict) -> dict:
    """The sweep's numbers and the words that depend on them, over the split counts measured: the fastest
    split, the model's choice, and where the model sits against the measurement."""
    measured, model = curves["measured_us"], curves["model_us"]
    best, chosen, one = min(measured, key=measured.get), min(measured, key=model.get), min(measured)
    low = sum(model[s] < measured[s] for s in measured)
    choice_pct = 100 * (measured[chosen] / measured[best] - 1)
    return {
        "best": best,
        "best_us": measured[best],
        "one_us": measured[one],
        "gain": measured[one] / measured[best],
        "model_best": chosen,
        "model_best_us": model[chosen],
        "model_one_us": model[one],
        "choice_us": measured[chosen],
        "choice_pct": choice_pct,
        "choice_note": "the fastest split itself" if chosen == best else f"{choice_pct:.0f}% above the fastest split",
        "cudnn_word": "faster than" if measured[best] < curves["cudnn_us"] else "slower than",
        "shapes": shapes_sentence(curve_shape(measured), curve_shape({s: model[s] for s in measured})),
        "model_side": (
            "below the measurement at every split"
            if low == len(measured)
            else "above the measurement at every split"
            if low == 0
            else f"below the measurement at {low} of {len(measured)} splits"
        ),
        "one_pct": 100 * abs(model[one] / measured[one] - 1),
        "one_side": "low" if model[one] < measured[one] else "high",
        "best_gap_us": abs(measured[best] - model[best]),
        "best_side": "below" if model[best] < measured[best] else "above",
    }


def main() -> int:
    if not device.on_gpu():
        print("needs a CUDA GPU: the shape table times every step and cuDNN")
        return 1
    start, rows = time.perf_counter(), []
    results.record(CHAPTER, narrow_calibration())  # before best_step weighs the narrow builds
    for name, problem in SHAPES.items():  # recorded shape by shape: a run cut short keeps what it measured
        if shape_rows := measure({name: problem}):
            results.record(CHAPTER, shape_rows)
            rows += shape_rows
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    for r in table(rows):
        print(
            f"{r['shape']:32s} {r['best_step']:28s} {r['TFLOP/s']:7.1f} TFLOP/s  {r['cuDNN']:38s} "
            f"{r['cuDNN TFLOP/s']:7.1f}  ratio {r['ratio']:.2f} {r['verdict']}: {r['why']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
