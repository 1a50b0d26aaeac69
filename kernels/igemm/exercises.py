"""Auto-checked exercises of the implicit-GEMM chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/05_implicit_gemm.ipynb. The
questions' expected answers are computed in answers.py; the published answers and kernels and typical wrong ones
are in solutions.py. The student edition has neither file.
"""

import numpy as np
from numba import cuda, float32

from kernels.harness.accesses import COALESCED, NO_BANK_CONFLICTS
from kernels.harness.exercise import Exercise, Part, Question, ReadBudget, register

register(
    Question(
        label="igemm-ex-banks",
        task="the first banks of threads 0-7 with S = 2048 and S = 2080, and the smallest gap above 2048 that works",
        parts={
            "banks_2048": Part("first bank = (offset / 4) mod 32"),
            "banks_2080": Part("S = 2080 is 520 words: what is 520 mod 32?"),
            "gap_bytes": Part("try gaps of 16, 32, ... bytes; threads 1 and 4 must not share a bank"),
        },
    )
)


register(
    Question(
        label="igemm-ex-khalf",
        task="K at 90% of the asymptotic rate for cuBLAS and for our step (from the sweep's fit), "
        "and the V100's K_1/2 from its chart",
        parts={
            "k90_cublas": Part("solve K / (K + K_1/2) = 0.9 with cuBLAS's fit", rtol=0.05),
            "k90_ours": Part("the same with our step's fitted K_1/2", rtol=0.05),
            "v100_khalf": Part("solve R(32) / R_inf = 32 / (32 + K_1/2) with the chart's two rates", rtol=0.05),
        },
    )
)


register(
    Question(
        label="igemm-ex-warptile",
        task="bytes per multiply-add of 32x32, 64x64 and 64x128 warp tiles, and what limits the largest",
        parts={
            "bytes_32x32": Part("2 (W_m + W_n) / (W_m W_n) bytes"),
            "bytes_64x64": Part("2 (W_m + W_n) / (W_m W_n) bytes"),
            "bytes_64x128": Part("2 (W_m + W_n) / (W_m W_n) bytes"),
            "limit": Part("count the fp32 accumulators one thread of the warp holds (one word)"),
        },
    )
)


register(
    Question(
        label="igemm-ex-setmaxnreg",
        task="registers freed by the producer and taken by the consumers (104/200, then 112/200), "
        "and accumulators per thread of a 128x256 warpgroup tile",
        parts={
            "freed": Part("128 threads, each giving back what setmaxnreg drops"),
            "taken": Part("256 threads, each taking what it gets above 168"),
            "freed_with_112": Part("the same with 112"),
            "accumulators": Part("one fp32 accumulator per output, over 128 threads"),
        },
    )
)


# --- igemm-ex-tile: the implicit GEMM's tiled inner loop, in Numba and fp32 ----------------------------------
# C[m, k] = sum over kk of A[m, kk] * B[kk, k]: m an output pixel (n, row, col), k a filter, kk a filter tap
# (r * 3 + s) * C + c. A is never stored: im2col_element gathers it from the NHWC input (3 x 3 filters, padding
# 1, stride 1); B is the filter, stored as the (9 C, K) matrix it is.

TILE = 8  # a block computes TILE x TILE outputs with TILE x TILE threads, TILE taps per shared-memory step


@cuda.jit(device=True)
def pixel_of(m, height, width):
    """(image, row, column) of output pixel m, the row of A and of the output."""
    return m // (height * width), (m // width) % height, m % width


@cuda.jit(device=True)
def im2col_element(x, m, kk):
    """A[m, kk]: the input under output pixel m at tap kk = (r * 3 + s) * C + c, zero in the padding."""
    _, height, width, channels = x.shape
    n, row, col = pixel_of(m, height, width)
    r, s, c = kk // (3 * channels), (kk // channels) % 3, kk % channels
    h, w = row + r - 1, col + s - 1
    if 0 <= h < height and 0 <= w < width:
        return x[n, h, w, c]
    return float32(0.0)


def tile_inputs(rng, size):
    """x (N, H, W, C) and the filter as B, (9 C, K), in [-1, 1), for size = (N, H, W, C, K)."""
    n, h, w, c, k = size
    return rng.uniform(-1, 1, (n, h, w, c)).astype(np.float32), rng.uniform(-1, 1, (9 * c, k)).astype(np.float32)


def tile_reference(x, b):
    """The convolution in float64: y[n, h, w, k] = sum over r, s, c of x[n, h + r - 1, w + s - 1, c] B[.., k]."""
    n, h, w, c = x.shape
    pad = 1  # the 3x3 filter's one pixel of zeros around each image
    padded = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    a = np.concatenate([padded[:, r : r + h, s : s + w, :] for r in range(3) for s in range(3)], axis=-1)
    return a @ b.astype(np.float64)  # (N, H, W, 9 C) x (9 C, K): the GEMM the kernel computes implicitly


register(
    Exercise(
        label="igemm-ex-tile",
        task=f"y = the 3x3 convolution of x (NHWC) as an implicit GEMM with {TILE}x{TILE} tiles of A and B in "
        "shared memory: coalesced, no bank conflicts, each input read once per tile; launch(y, x, b)",
        make_inputs=tile_inputs,
        reference=tile_reference,
        # (N, H, W, C, K): pixels and filters not multiples of the tile, taps 9 C a multiple of it or not
        sizes=((1, 5, 3, 8, 12), (2, 3, 3, 4, 20), (1, 2, 3, 8, 11)),
        atol=1e-4,
        expect=(COALESCED, NO_BANK_CONFLICTS),
        reads=ReadBudget(
            per=0.6,
            work=lambda x, b: x.shape[0] * x.shape[1] * x.shape[2] * b.size,  # pixels x taps x filters
            unit="multiply-add",
            hint="stage a tile of A and a tile of B in shared memory at each step and let the threads read them "
            "there: a block then reads each element it needs once per step, not once per multiply-add",
        ),
    )
)
