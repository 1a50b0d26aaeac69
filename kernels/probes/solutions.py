"""The probes chapters' published answers and typical wrong ones, attached to their exercises.

Each answer is worked out the way a student would: from the stored rows the notebook shows, or by hand
from the exercise's data. The wrong sets are mistakes students make; the tests prove the checker fails
them and names the part. The student edition leaves this file out (submission.TEACHER_ONLY).
"""

import math

from numba import cuda

from kernels.harness import device, quantities
from kernels.harness.exercise import attach

from .answers import tail_sweep
from .exercises import GRID_STRIDE_BLOCKS, GRID_STRIDE_THREADS

# --- probes-ex-wave -------------------------------------------------------------------------------


def _wave_answers() -> dict:
    sweep = tail_sweep()
    blocks = sorted(sweep)
    time = [sweep[b]["time"] for b in blocks]
    # the time is flat through the first wave and jumps by about its own length at the step
    i = next(i for i in range(1, len(blocks)) if time[i] > 1.9 * time[0])
    rate = [sweep[b]["FMA per cycle"] for b in blocks]
    return {"step_blocks": blocks[i], "rate_growth": rate[i - 1] / rate[0], "rate_kept": rate[i] / rate[i - 1]}


WAVE = _wave_answers()
attach(
    "probes-ex-wave",
    WAVE,
    {
        "the SM count instead of the step": ({**WAVE, "step_blocks": WAVE["step_blocks"] - 1}, "step_blocks: not yet"),
        "the time ratio instead of the rate ratio": ({**WAVE, "rate_kept": 2.0}, "rate_kept: not yet"),
    },
)


# --- probes-ex-warps ------------------------------------------------------------------------------

_L = math.ceil(quantities.fma_latency_cycles()[0])
attach(
    "probes-ex-warps",
    {"one_chain": 4 * _L * 32, "four_chains": 4 * math.ceil(_L / 4) * 32},
    {
        "one warp per SM instead of per scheduler": (
            {"one_chain": _L * 32, "four_chains": math.ceil(_L / 4) * 32},
            "one_chain: not yet",
        ),
    },
)


# --- probes-ex-regbanks ---------------------------------------------------------------------------

# Sources: (1) R0 R2 even, R3 odd; (2) R5 odd, R2 even; (3) R5 R7 R9 odd; (4) R2 R4 R6 even.
REGBANKS = {"collide_ampere": {1, 3, 4}, "cycles_ampere": 3, "collide_volta": {3, 4}, "cycles_volta": 2}
attach(
    "probes-ex-regbanks",
    REGBANKS,
    {
        "the destination counted as a read": ({**REGBANKS, "collide_ampere": {1, 2, 3, 4}}, "collide_ampere: not yet"),
        "two cycles at most": ({**REGBANKS, "cycles_ampere": 2}, "cycles_ampere: not yet"),
        "the Ampere rule applied to Volta": (
            {**REGBANKS, "collide_volta": {1, 3, 4}, "cycles_volta": 3},
            "collide_volta: not yet",
        ),
    },
)


# --- probes-ex-banks ------------------------------------------------------------------------------

_ODD = {s for s in range(1, 34) if math.gcd(s, 32) == 1}
attach(
    "probes-ex-banks",
    {"strides": _ODD, "float2_strides": _ODD},
    {
        "the powers of two": ({"strides": {1, 2, 4, 8, 16, 32}, "float2_strides": _ODD}, "strides: not yet"),
        "float2 needs gcd(s, 32) = 2": (
            {"strides": _ODD, "float2_strides": {s for s in range(1, 34) if math.gcd(s, 32) == 2}},
            "float2_strides: not yet",
        ),
    },
)


# --- probes-ex-little -----------------------------------------------------------------------------

_BYTES = quantities.copy_gbps()[0] * 1e9 * quantities.dram_latency_ns()[0] * 1e-9
_SMS = device.target_properties()["sms"]
attach(
    "probes-ex-little",
    {"mb_in_flight": _BYTES / 1e6, "kb_per_sm": _BYTES / _SMS / 1e3},
    {
        "the latency in microseconds": (
            {"mb_in_flight": _BYTES / 1e9, "kb_per_sm": _BYTES / _SMS / 1e6},
            "mb_in_flight: not yet",
        ),
    },
)


# --- probes-ex-launch -----------------------------------------------------------------------------

_RATE = quantities.stored("probes", "launch", "threads per cycle", "block 256x1x1")[0]
_PAD_BLOCKS = 1024 * 1024  # one block per (image, channel) plane: 13 x 13 = 169 pixels fit in 256 threads
_PAD_US = _PAD_BLOCKS * 256 / _RATE / quantities.sm_clock_mhz()[0]  # threads / (threads per cycle) / (cycles per µs)
attach(
    "probes-ex-launch",
    {"blocks": _PAD_BLOCKS, "launch_us": _PAD_US},
    {
        "a block per pixel, and the clock in GHz": (
            {"blocks": _PAD_BLOCKS * 169, "launch_us": _PAD_US * 1e3},
            "blocks: not yet",
        ),
    },
)


# --- probes-ex-grid-stride: a copy stream on a fixed grid -----------------------------------------------------


@cuda.jit
def copy_grid_stride(out, x):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)  # all the threads of the grid: each trip moves one grid-wide run of elements
    while i < out.size:
        out[i] = x[i]  # the 32 lanes of a warp copy 32 neighbouring elements
        i += stride


def launch_copy_grid_stride(out, x):
    copy_grid_stride[GRID_STRIDE_BLOCKS, GRID_STRIDE_THREADS](out, x)


# Mistakes of probes-ex-grid-stride


@cuda.jit
def copy_one_per_thread(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]


def launch_copy_one_per_thread_fixed_grid(out, x):
    """The store probe's v0 shape on the fixed grid: only the first blocks' worth of elements is copied."""
    copy_one_per_thread[GRID_STRIDE_BLOCKS, GRID_STRIDE_THREADS](out, x)


def launch_copy_one_per_thread(out, x):
    """v0's shape with enough blocks: right, but not the fixed grid the exercise asks for."""
    copy_one_per_thread[(out.size + GRID_STRIDE_THREADS - 1) // GRID_STRIDE_THREADS, GRID_STRIDE_THREADS](out, x)


@cuda.jit
def copy_chunk_per_thread(out, x):
    threads = cuda.gridsize(1)
    chunk = (out.size + threads - 1) // threads
    first = cuda.grid(1) * chunk  # each thread a contiguous run: neighbouring lanes are `chunk` elements apart
    for i in range(first, min(first + chunk, out.size)):
        out[i] = x[i]


def launch_copy_chunk_per_thread(out, x):
    copy_chunk_per_thread[GRID_STRIDE_BLOCKS, GRID_STRIDE_THREADS](out, x)


attach(
    "probes-ex-grid-stride",
    launch_copy_grid_stride,
    {
        "one element per thread on the fixed grid": (launch_copy_one_per_thread_fixed_grid, "never written"),
        "one element per thread, more blocks": (launch_copy_one_per_thread, "allows at most"),
        "a contiguous chunk per thread": (launch_copy_chunk_per_thread, "uncoalesced global access"),
    },
)
