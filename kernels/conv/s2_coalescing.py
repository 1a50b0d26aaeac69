"""COALESCING: the same threads and loops as NAIVE, with the data in the NHWC layout.

Output channels are now innermost in y and in f (f is (3, 3, C, K)), so the 32 lanes of a warp
read 32 neighbouring filter words and write 32 neighbouring outputs: one or two cache lines per
warp-wide access instead of 32. The input value is the same for all lanes (a broadcast).
"""

from numba import cuda, float32

from .common import Stage

THREADS = 256  # threads per block


@cuda.jit
def conv_coalescing(x, f, y):
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
            ih = row + r - 1
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, ih, iw, c] * f[r, s, c, k]
    y[n, row, col, k] = acc


def launch(x, f, y, p, threads=THREADS):
    total = p.n * p.h * p.w * p.k
    conv_coalescing[(total + threads - 1) // threads, threads](x, f, y)


STAGE = Stage("COALESCING", "nhwc", launch)
