"""The worked kernels of chapter 0, one idea each, in the order the chapter shows them.

Blocks are small (64 threads, or 32 x 2) so that the simulator, which runs every thread as a Python
thread, stays quick; on a GPU 128 to 256 threads per block is the usual choice.
"""

import math

import numpy as np
from numba import cuda

THREADS = 64
# Shared-array shapes must be compile-time constants on a GPU: module-level ints, not expressions.
HALO_TILE = THREADS + 1
BANK_BUF = 32 * 33


@cuda.jit
def scale(out, x, a):
    """out = a * x, one element per thread; the grid must cover x exactly (no bounds check yet)."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # this thread's element
    out[i] = a * x[i]


@cuda.jit
def scale_guarded(out, x, a):
    """The same for any length: the grid is rounded up, and the threads past the end do nothing."""
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    if i < out.size:
        out[i] = a * x[i]


def blocks(n: int, threads: int = THREADS) -> int:
    """Enough blocks of ``threads`` to cover ``n`` elements: n / threads rounded up."""
    return (n + threads - 1) // threads


@cuda.jit
def add_2d(out, x, y):
    """out = x + y on 2-D arrays: threadIdx.x runs along a row, so a warp reads consecutive elements."""
    col, row = cuda.grid(2)  # x first: the fast-moving index of the block
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = x[row, col] + y[row, col]


@cuda.jit
def diff_shared(out, x):
    """out[i] = x[i + 1] - x[i]: each block stages its elements and one more in shared memory, then
    every thread reads two of them, one loaded by its neighbour."""
    tile = cuda.shared.array(HALO_TILE, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        tile[t] = x[i]
    if t == 0 and i + THREADS < x.size:  # the halo: the first element of the next block
        tile[THREADS] = x[i + THREADS]
    cuda.syncthreads()  # every load above is done before any thread reads a neighbour's
    if i < out.size:
        out[i] = tile[t + 1] - tile[t]


@cuda.jit
def diff_shared_no_barrier(out, x):
    """diff_shared without its cuda.syncthreads(): a thread may read tile[t + 1] before thread t + 1 wrote it."""
    tile = cuda.shared.array(HALO_TILE, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        tile[t] = x[i]
    if t == 0 and i + THREADS < x.size:
        tile[THREADS] = x[i + THREADS]
    if i < out.size:
        out[i] = tile[t + 1] - tile[t]


@cuda.jit
def block_max(out, x):
    """out[b] = the largest element of block b's part of x: a tree in shared memory, halving the
    number of active threads at each step, with a barrier between steps."""
    best = cuda.shared.array(THREADS, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    best[t] = x[i] if i < x.size else -math.inf  # threads past the end bring the neutral element
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if t < step:
            best[t] = max(best[t], best[t + step])
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = best[0]


def launch_max(out, x):
    """The largest element of x in out[0]: block_max, then block_max again on the blocks' results
    until one block is left (the global step)."""
    part = x
    while True:
        n = blocks(part.size)
        dst = out if n == 1 else cuda.device_array(n, np.float32)
        block_max[n, THREADS](dst, part)
        if n == 1:
            return
        part = dst


@cuda.jit
def copy_rows(out, x):
    """A 2-D copy whose warps run along rows: consecutive lanes, consecutive addresses."""
    col, row = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        out[row, col] = x[row, col]


@cuda.jit
def copy_columns(out, x):
    """The same copy with x and y swapped: consecutive lanes are a whole row apart."""
    row, col = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        out[row, col] = x[row, col]


@cuda.jit
def shared_stride(out, x, stride):
    """out = 2 x through shared memory, lane t of each warp using word t * stride: the stride decides
    how many lanes share a bank."""
    buf = cuda.shared.array(BANK_BUF, np.float32)
    t = cuda.threadIdx.x  # blocks of 32 threads: one warp
    i = cuda.grid(1)
    if i < x.size:
        buf[t * stride] = x[i]
        out[i] = 2 * buf[t * stride]  # each thread reads back its own word: no barrier needed
