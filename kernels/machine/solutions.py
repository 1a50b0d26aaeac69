"""The machine chapter's published solutions and typical wrong kernels and answers, attached to its exercises.

The wrong ones are mistakes students make; the tests prove the checker fails them and says why.
The student edition leaves this file out (submission.TEACHER_ONLY).
"""

import numpy as np
from numba import cuda

from kernels.harness import quantities
from kernels.harness.exercise import attach
from kernels.machine.answers import floor_compute_ms, floor_memory_ms

THREADS = 64  # small blocks: the simulator runs every thread as a Python thread


# --- machine-ex-saxpy: out = a x + y, one element per thread -------------------------------------


@cuda.jit
def saxpy(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:  # the last block is partly outside the arrays
        out[i] = a * x[i] + y[i]


def launch_saxpy(out, x, y, a):
    saxpy[(out.size + THREADS - 1) // THREADS, THREADS](out, x, y, a)


def launch_saxpy_grid_rounded_down(out, x, y, a):
    saxpy[max(out.size // THREADS, 1), THREADS](out, x, y, a)


@cuda.jit
def saxpy_unguarded(out, x, y, a):
    i = cuda.grid(1)
    out[i] = a * x[i] + y[i]


def launch_saxpy_unguarded(out, x, y, a):
    saxpy_unguarded[(out.size + THREADS - 1) // THREADS, THREADS](out, x, y, a)


@cuda.jit
def saxpy_twice(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i] + a * x[i]


def launch_saxpy_twice(out, x, y, a):
    saxpy_twice[(out.size + THREADS - 1) // THREADS, THREADS](out, x, y, a)


attach(
    "machine-ex-saxpy",
    solution=launch_saxpy,
    wrong={
        "grid rounded down": (launch_saxpy_grid_rounded_down, "never written"),
        "no bounds check": (launch_saxpy_unguarded, "outside an array"),
        "a x added twice": (launch_saxpy_twice, "wrong"),
    },
)


# --- machine-ex-chain: one FMA chain per thread ---------------------------------------------------


@cuda.jit
def fma_one_chain(out, x0, iters, b, c):
    i = cuda.grid(1)
    if i < out.size:
        x = x0[i]
        for _ in range(iters):
            x = cuda.fma(x, b, c)  # each FMA waits for the previous one's result
        out[i] = x


def launch_one_chain(out, x0, iters, b, c):
    fma_one_chain[(out.size + 31) // 32, 32](out, x0, iters, b, c)


@cuda.jit
def fma_one_chain_from_zero(out, x0, iters, b, c):
    i = cuda.grid(1)
    if i < out.size:
        x = np.float32(0.0)  # forgets the start value
        for _ in range(iters):
            x = cuda.fma(x, b, c)
        out[i] = x


def launch_one_chain_from_zero(out, x0, iters, b, c):
    fma_one_chain_from_zero[(out.size + 31) // 32, 32](out, x0, iters, b, c)


@cuda.jit
def fma_one_chain_first_warp(out, x0, iters, b, c):
    i = cuda.threadIdx.x  # the thread's index in its block only: every block redoes the first 32
    if i < out.size:
        x = x0[i]
        for _ in range(iters):
            x = cuda.fma(x, b, c)
        out[i] = x


def launch_one_chain_first_warp(out, x0, iters, b, c):
    fma_one_chain_first_warp[(out.size + 31) // 32, 32](out, x0, iters, b, c)


attach(
    "machine-ex-chain",
    solution=launch_one_chain,
    wrong={
        "start value forgotten": (launch_one_chain_from_zero, "wrong"),
        "threadIdx instead of grid index": (launch_one_chain_first_warp, "never written"),
    },
)


# --- machine-ex-tail: waves of one block per SM ---------------------------------------------------

SMS = quantities.sm_count()[0]

attach(
    "machine-ex-tail",
    solution={"sms_blocks_t": 1, "one_more_t": 2, "twice_t": 2, "rate_one_more": (SMS + 1) / (2 * SMS)},
    wrong={
        # time in proportion to the blocks, as if an SM could run a fraction of a block
        "time proportional to blocks": (
            {"sms_blocks_t": 1, "one_more_t": (SMS + 1) / SMS, "twice_t": 2, "rate_one_more": 1.0},
            "one_more_t: not yet",
        ),
        "the extra block costs nothing": (
            {"sms_blocks_t": 1, "one_more_t": 1, "twice_t": 2, "rate_one_more": (SMS + 1) / SMS},
            "rate_one_more: not yet",
        ),
    },
)


# --- machine-ex-floor: y = a x + y on 1e8 float32 elements ----------------------------------------

RIGHT_FLOOR = {
    "flops": 2e8,
    "bytes": 1.2e9,
    "intensity": 1 / 6,
    "floor_ms": 1.2e9 / (quantities.copy_gbps()[0] * 1e9) * 1e3,
    "bound": "memory",
    "factor": (1.2e9 / quantities.copy_gbps()[0]) / (2e8 / quantities.fma_gflops()[0]),
}

attach(
    "machine-ex-floor",
    solution=RIGHT_FLOOR,
    wrong={
        "y's write forgotten": (
            {**RIGHT_FLOOR, "bytes": 8e8, "intensity": 0.25, "floor_ms": floor_memory_ms() * 2 / 3},
            "bytes: not yet",
        ),
        "compute-bound": ({**RIGHT_FLOOR, "bound": "compute"}, "bound: not yet"),
        "floor from the FLOPs alone": (
            {**RIGHT_FLOOR, "floor_ms": floor_compute_ms()},
            "floor_ms: not yet",
        ),
    },
)
