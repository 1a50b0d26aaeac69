"""NAIVE: one thread per output value, in the NCHW layout.

Threads are numbered over outputs in (image, row, column, output channel) order, so every lane of
a warp computes a different output channel of the same pixel: all lanes busy even on conv2's
14-pixel rows. But in NCHW neighbouring output channels lie H*W words apart in y and C*9 words
apart in f, so each warp-wide load of f and store of y touches 32 separate cache lines.
"""

from numba import cuda, float32

from .common import Stage

THREADS = 256  # threads per block


@cuda.jit
def conv_naive(x, f, y):
    n_img, n_in, height, width = x.shape
    n_out = f.shape[0]
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
            ih = row + r - 1
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, c, ih, iw] * f[k, c, r, s]
    y[n, k, row, col] = acc


def launch(x, f, y, p, threads=THREADS):
    total = p.n * p.h * p.w * p.k
    conv_naive[(total + threads - 1) // threads, threads](x, f, y)


STAGE = Stage("NAIVE", "nchw", launch)
