"""The expected answers of the SSIM chapter's questions (exercises.py), for the checker and the tests.

Teacher-only: the student edition leaves this file out and checks digests of these values instead. The
answers come from the sources and from the stored run of the GPU the page ran on, never from a typed result.
"""

import re
from pathlib import Path

from kernels.harness import cuda_cpp, quantities, results
from kernels.harness.exercise import answers, page_gpu

from . import bench, common, cuda_versions

_CALL = re.compile(r"^\s*(?:\w+ = )?(\w+)\(([^)]*)\)", re.M)


# What each step of Naive's kernel does to shared memory: (buffers read, buffers written), by argument position.
_EFFECTS = {
    "load_into_shared": ((), (0,)),
    "flush_conv_scratch": ((), (0,)),
    "conv_x": ((0,), (1,)),
    "conv_y": ((0,), ()),
    "multiply_shared_mem": ((0, 1), (0,)),
}


def naive_steps() -> list[tuple[str, set, set]]:
    """The shared-memory steps of Naive's kernel body in order: (function, buffers read, buffers written)."""
    source = (Path(__file__).parent / "v0_naive.py").read_text()
    body = source.split("def ssim_naive(", 1)[1]
    steps = []
    for name, args in _CALL.findall(body):
        if name in _EFFECTS:
            names = [a.strip() for a in args.split(",")]
            reads, writes = _EFFECTS[name]
            steps.append((name, {names[i] for i in reads}, {names[i] for i in writes}))
    return steps


def barriers_needed() -> int:
    """The fewest barriers Naive needs once its flushes are gone: one wherever a step reads a buffer written
    since the last barrier, or writes one read or written since then (placed as late as possible)."""
    count, read, written = 0, set(), set()
    for name, reads, writes in naive_steps():
        if name == "flush_conv_scratch":
            continue
        if reads & written or writes & (read | written):
            count, read, written = count + 1, set(), set()
        read |= reads
        written |= writes
    return count


answers(
    "ssim-ex-naive-v1",
    flushes_removed=lambda: sum(name == "flush_conv_scratch" for name, _, _ in naive_steps()),
    barriers_kept=barriers_needed,
)


def _cuda_constants(version: str) -> dict:
    """The integer constants a CUDA C++ version defines (with those of the shared header)."""
    text = cuda_versions.HEADER.read_text() + cuda_cpp.source_path(cuda_versions.source(version)).read_text()
    consts: dict = {}
    for name, expr in re.findall(r"constexpr int (\w+) = ([^;/]+);", text):
        consts[name] = int(eval(expr, {"__builtins__": {}}, dict(consts)))  # the sources' simple integer expressions
    return consts


def v2_best_tile_height(width: int = 3840, height: int = 2160, outputs: int = 1024) -> int:
    """The B_Y among 1, 2, 4, ..., ``outputs`` whose blocks of ``outputs`` outputs need the fewest FFMAs."""
    heights = [2**k for k in range(outputs.bit_length()) if 2**k <= outputs]
    return min(heights, key=lambda by: common.v2_ffma_total(width, height, outputs // by, by))


answers(
    "ssim-ex-v2-model",
    best_by=v2_best_tile_height,
    total_millions=lambda: common.v2_ffma_total(3840, 2160, 1024 // v2_best_tile_height(), v2_best_tile_height()) / 1e6,
)


def v4_1_partial_sums() -> dict:
    c = _cuda_constants("V4-1")
    return {"per_moment": c["kPending"], "registers": c["kPending"] * c["kMoments"] * c["kColsPerThread"]}


answers(
    "ssim-ex-partial-sums",
    sums_per_moment=lambda: v4_1_partial_sums()["per_moment"],
    registers=lambda: v4_1_partial_sums()["registers"],
)


FORMULA_INSTRUCTIONS = 25  # the exercise's estimate of the SSIM formula per output, the division included


def v6_model_per_pixel() -> float:
    """Notebook 02b's model of V6: x-pass, y-pass and row loads per thread and input row, over the strip's
    input rows per output row and the thread's columns, plus the SSIM formula."""
    c = _cuda_constants("V6")
    taps, moments, cols = c["kWindow"], c["kMoments"], c["kColsPerThread"]
    pixels = taps + cols - 1
    xpass = 2 * pixels // 2 + 2 * pixels + 3 * pixels + cols * moments * taps  # 8-byte loads, shifts, products, FFMAs
    ypass = cols * moments * taps
    loads = 2 * 3  # three elements per lane and image
    rows = c["kRows"]
    return (xpass + ypass + loads) * (rows + 2 * common.RADIUS) / rows / cols + FORMULA_INSTRUCTIONS


answers(
    "ssim-ex-beyond-count",
    model=v6_model_per_pixel,
    profiler=lambda: bench.profile()[1]["V6"]["thread instructions / px"],
)


def pipeline_depth() -> dict:
    """Little's law for one SM: the bytes in flight it needs, and V5's rows per warp to hold them."""
    copy_gbps, _ = quantities.copy_gbps()
    dram_ns, _ = quantities.dram_latency_ns()
    sms, _ = quantities.stored("machine", "device", "sms")
    need = copy_gbps / sms * dram_ns  # GB/s x ns = bytes
    row_bytes = 2 * (cuda_versions.geometry("V5")["cols"] + 2 * common.RADIUS) * 4
    warps = bench.warps_per_sm(bench.resources("V5")["registers"])
    return {"kb": need / 1e3, "rows": need / (warps * row_bytes)}


answers(
    "ssim-ex-beyond-depth",
    kb_in_flight=lambda: pipeline_depth()["kb"],
    rows_per_warp=lambda: pipeline_depth()["rows"],
)


def unroll_answers() -> dict:
    stored = results.latest("ssim", page_gpu())
    problem = bench.problem_name(common.BENCH_SHAPE)
    if any((v, problem, "ms") not in stored for v in ("V8", "V9")):
        raise LookupError(f"no stored V8 and V9 times on {problem} for {page_gpu()}: run the SSIM chapters on it")
    v8, v9 = (float(stored[(v, problem, "ms")]["value"]) for v in ("V8", "V9"))
    return {"fastest": _cuda_constants("V9")["kUnroll"], "ten": "slower" if v8 > v9 else "faster"}


answers(
    "ssim-ex-beyond-unroll",
    fastest_unroll=lambda: unroll_answers()["fastest"],
    ten_rows=lambda: unroll_answers()["ten"],
)


def train_floor() -> dict:
    from . import training

    moved = sum(training.step_bytes(common.BENCH_SHAPE).values())
    copy_gbps, _ = quantities.copy_gbps()
    return {"megabytes": moved / 1e6, "floor_ms": moved / copy_gbps / 1e6}


answers(
    "ssim-ex-train-floor",
    megabytes=lambda: train_floor()["megabytes"],
    floor_ms=lambda: train_floor()["floor_ms"],
)
