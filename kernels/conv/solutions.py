"""The convolution chapter's published solution and typical wrong kernels, attached to its exercises.

The wrong kernels are mistakes students make; the tests prove the checker fails them and says why.
The student edition leaves this file out (scripts/student_edition.py).
"""

from numba import cuda, float32

from kernels.harness.exercise import attach  # first: the harness picks the simulator

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


attach(
    "conv-ex-coalescing",
    solution=launch_coalescing,
    wrong={
        "grid rounded down": (launch_coalescing_grid_rounded_down, "never written"),
        "no bounds check": (launch_coalescing_unguarded, "outside an array"),
        "row index off by one": (launch_coalescing_row_off_by_one, "shifted by -1 along axis 1"),
    },
)
