"""Auto-checked exercises of the convolution chapter: the published solutions and typical wrong kernels.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/03_conv.ipynb.
The wrong kernels are mistakes students make; the tests prove the checker fails them and says why.
"""

import numpy as np
from numba import cuda, float32

from kernels.harness.exercise import Exercise, register  # first: the harness picks the simulator

from .common import R, S, reference
from .s2_coalescing import conv_coalescing  # the published solution is the stage itself

THREADS = 64  # small blocks: the simulator runs every thread as a Python thread


# --- conv-ex-coalescing: NAIVE's threads and loops, the data in NHWC ------------------------------
# launch(y, x, f): x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K).


def launch_coalescing(y, x, f):
    conv_coalescing[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


def launch_coalescing_grid_rounded_down(y, x, f):
    conv_coalescing[max(y.size // THREADS, 1), THREADS](x, f, y)


@cuda.jit
def conv_coalescing_unguarded(x, f, y):
    n_img, height, width, n_in = x.shape
    n_out = f.shape[3]
    idx = cuda.grid(1)  # no test against the number of outputs: the last block's extra threads run on
    k = idx % n_out
    pixel = idx // n_out
    col = pixel % width
    row = (pixel // width) % height
    n = pixel // (width * height)
    acc = float32(0.0)
    for c in range(n_in):
        for r in range(3):
            ih = row + r - 1
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, ih, iw, c] * f[r, s, c, k]
    y[n, row, col, k] = acc


def launch_coalescing_unguarded(y, x, f):
    conv_coalescing_unguarded[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


@cuda.jit
def conv_coalescing_row_off_by_one(x, f, y):
    n_img, height, width, n_in = x.shape
    n_out = f.shape[3]
    idx = cuda.grid(1)
    if idx >= n_img * height * width * n_out:
        return
    k = idx % n_out
    pixel = idx // n_out
    col = pixel % width
    row = (pixel // width) % height
    n = pixel // (width * height)
    acc = float32(0.0)
    for c in range(n_in):
        for r in range(3):
            ih = row + r  # the -1 that centres the filter is lost
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, ih, iw, c] * f[r, s, c, k]
    y[n, row, col, k] = acc


def launch_coalescing_row_off_by_one(y, x, f):
    conv_coalescing_row_off_by_one[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


def coalescing_inputs(rng, size):
    """x (N, H, W, C) and f (3, 3, C, K) in [-1, 1) for size = (N, C, K, H, W)."""
    n, c, k, h, w = size
    return (rng.uniform(-1, 1, (n, h, w, c)).astype(np.float32), rng.uniform(-1, 1, (R, S, c, k)).astype(np.float32))


def coalescing_reference(x_nhwc, f_rsck):
    """common.reference (NCHW, KCRS) on the same data, returned in NHWK."""
    y = reference(x_nhwc.transpose(0, 3, 1, 2), f_rsck.transpose(3, 2, 0, 1))
    return y.transpose(0, 2, 3, 1)


register(
    Exercise(
        label="conv-ex-coalescing",
        task="COALESCING from NAIVE: y[n, h, w, k] = sum over c, r, s of x[n, h+r-1, w+s-1, c] * f[r, s, c, k], "
        "zero-padded; x NHWC, f (3, 3, C, K); launch(y, x, f)",
        make_inputs=coalescing_inputs,
        reference=coalescing_reference,
        solution=launch_coalescing,
        # (N, C, K, H, W): output counts 245, 330 and 3, none a multiple of the block
        sizes=((1, 3, 5, 7, 7), (2, 2, 3, 5, 11), (1, 1, 3, 1, 1)),
        atol=1e-4,
        wrong={
            "grid rounded down": (launch_coalescing_grid_rounded_down, "never written"),
            "no bounds check": (launch_coalescing_unguarded, "outside an array"),
            "row index off by one": (launch_coalescing_row_off_by_one, "shifted by -1 along axis 1"),
        },
    )
)
