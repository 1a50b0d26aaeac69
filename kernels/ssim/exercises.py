"""Auto-checked exercises of the SSIM chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/02_ssim_worklog.ipynb or
02b_ssim_beyond.ipynb. The questions compute their answers from the sources and the stored run, never from
a typed result. The published solutions, right answers and typical wrong ones are in solutions.py.
"""

import re
from pathlib import Path

import numpy as np

from kernels.harness import cuda_cpp, quantities, results
from kernels.harness.exercise import Exercise, Part, Question, register

from . import bench, common, cuda_versions
from .common import gaussian_weights

# --- ssim-ex-blur-x: the x-pass, 11 Gaussian taps along a row with zero padding -----------------


def blur_x_inputs(rng, shape):
    return (rng.uniform(0.0, 1.0, shape).astype(np.float32),)


def blur_x_reference(img):
    from scipy.ndimage import correlate1d

    return correlate1d(img.astype(np.float64), gaussian_weights(), axis=-1, mode="constant")


register(
    Exercise(
        label="ssim-ex-blur-x",
        task="the x-pass: out[y, x] = sum_k GAUSS[k] * img[y, x + k - 5], zero outside the image; launch(out, img)",
        make_inputs=blur_x_inputs,
        reference=blur_x_reference,
        # (H, W): not multiples of the block; the last one narrower than the window
        sizes=((13, 21), (11, 37), (3, 4)),
        atol=1e-5,
    )
)


# --- the questions: answers that are numbers or words, computed from the sources and the stored run ---------

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


register(
    Question(
        label="ssim-ex-naive-v1",
        task="how many flush_conv_scratch calls can go, and how many syncthreads must stay",
        parts={
            "flushes_removed": Part(
                lambda: sum(name == "flush_conv_scratch" for name, _, _ in naive_steps()),
                "does any y-pass read a scratch element that its x-pass did not write?",
            ),
            "barriers_kept": Part(
                barriers_needed,
                "a barrier orders a write and a read (or a read and a later write) of one shared buffer by "
                "different threads; list what each step reads and writes",
                rtol=0,
            ),
        },
    )
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


register(
    Question(
        label="ssim-ex-v2-model",
        task="(b): the tile height B_Y that minimises the FFMA total, and that total in millions",
        parts={
            "best_by": Part(
                v2_best_tile_height,
                "evaluate common.v2_ffma_total(3840, 2160, 1024 // by, by) for every power of two",
                rtol=0,
            ),
            "total_millions": Part(
                lambda: common.v2_ffma_total(3840, 2160, 1024 // v2_best_tile_height(), v2_best_tile_height()) / 1e6,
                "the total of common.v2_ffma_total at the best B_Y, divided by a million",
            ),
        },
    )
)


def v4_1_partial_sums() -> dict:
    c = _cuda_constants("V4-1")
    return {"per_moment": c["kPending"], "registers": c["kPending"] * c["kMoments"] * c["kColsPerThread"]}


register(
    Question(
        label="ssim-ex-partial-sums",
        task="partial sums per moment and column, and the registers the partial sums of one thread take",
        parts={
            "sums_per_moment": Part(
                lambda: v4_1_partial_sums()["per_moment"],
                "which pending output is complete, and which has received nothing yet, when a row arrives?",
                rtol=0,
            ),
            "registers": Part(
                lambda: v4_1_partial_sums()["registers"],
                "sums per moment, times the moments, times the columns of one thread",
                rtol=0,
            ),
        },
    )
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


register(
    Question(
        label="ssim-ex-beyond-count",
        task="V6's thread-instructions per output pixel: your model's, and the profiler's",
        parts={
            "model": Part(
                v6_model_per_pixel,
                "per input row: the model cell's x-pass and y-pass, plus the row loads; times 82/72 input rows "
                "per output row, over 2 columns, plus the formula",
                rtol=0.05,
            ),
            "profiler": Part(
                lambda: bench.profile()[1]["V6"]["thread instructions / px"],
                "the warp instr / px column of the profiler table, row V6",
            ),
        },
    )
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


register(
    Question(
        label="ssim-ex-beyond-depth",
        task="the KB an SM must have in flight, and the rows per warp V5 must prefetch",
        parts={
            "kb_in_flight": Part(
                lambda: pipeline_depth()["kb"],
                "bandwidth per SM (copy rate over the SMs) times the latency; GB/s times ns gives bytes",
                rtol=0.05,
            ),
            "rows_per_warp": Part(
                lambda: pipeline_depth()["rows"],
                "the bytes in flight over the warps per SM, over the bytes of one row of both images with the halo",
                rtol=0.05,
            ),
        },
    )
)


def unroll_answers() -> dict:
    stored = results.latest("ssim", results.REFERENCE_GPU)
    problem = bench.problem_name(common.BENCH_SHAPE)
    v8, v9 = (float(stored[(v, problem, "ms")]["value"]) for v in ("V8", "V9"))
    return {"fastest": _cuda_constants("V9")["kUnroll"], "ten": "slower" if v8 > v9 else "faster"}


register(
    Question(
        label="ssim-ex-beyond-unroll",
        task="the fastest unroll of V9's row loop, and whether ten rows per trip is faster or slower than V9",
        parts={
            "fastest_unroll": Part(
                lambda: unroll_answers()["fastest"],
                "where do the register moves go, and how large is the loop at each unroll?",
                rtol=0,
            ),
            "ten_rows": Part(
                lambda: unroll_answers()["ten"],
                "which version already runs ten rows per trip, and how did it fare against V9? (faster or slower)",
            ),
        },
    )
)


# --- ssim-ex-train-floor: the bytes and the floor of a training step --------------------------------


def train_floor() -> dict:
    from . import training

    moved = sum(training.step_bytes(common.BENCH_SHAPE).values())
    copy_gbps, _ = quantities.copy_gbps()
    return {"megabytes": moved / 1e6, "floor_ms": moved / copy_gbps / 1e6}


register(
    Question(
        label="ssim-ex-train-floor",
        task="the megabytes a training step with stored derivative maps moves at 1x3x2160x3840, and its floor in ms "
        "at the machine chapter's copy rate",
        parts={
            "megabytes": Part(
                lambda: train_floor()["megabytes"],
                "count the 4-byte planes each kernel reads and writes: two images, three maps, one gradient",
            ),
            "floor_ms": Part(
                lambda: train_floor()["floor_ms"],
                "bytes over the copy rate (GB/s is bytes per nanosecond)",
                rtol=0.05,
            ),
        },
    )
)
