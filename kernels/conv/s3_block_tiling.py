"""BLOCK TILING: each thread computes TP neighbouring pixels of one row for its output channel.

COALESCING loads one filter word and one input word per FMA. Here the filter word is loaded once
and used for TP pixels held in registers, so loads per FMA drop from 2 to (1 + TP) / TP, and the
index arithmetic for (image, row) is done once per TP outputs.
"""

from numba import cuda, float32

from .common import Stage

THREADS = 256  # threads per block
TP = 4  # pixels per thread, along a row; a compile-time constant so the accumulators stay in registers


@cuda.jit
def conv_block_tiling(x, f, y):
    n_img, height, width, n_in = x.shape
    n_out = f.shape[3]
    col_tiles = (width + TP - 1) // TP
    idx = cuda.grid(1)
    if idx >= n_img * height * col_tiles * n_out:
        return
    k = idx % n_out
    tile = idx // n_out
    col0 = (tile % col_tiles) * TP
    row = (tile // col_tiles) % height
    n = tile // (col_tiles * height)
    acc = cuda.local.array(TP, float32)
    for p in range(TP):
        acc[p] = float32(0.0)
    for c in range(n_in):
        for r in range(3):
            ih = row + r - 1
            if 0 <= ih < height:
                for s in range(3):
                    tap = f[r, s, c, k]
                    for p in range(TP):
                        iw = col0 + p + s - 1
                        if 0 <= iw < width:
                            acc[p] += x[n, ih, iw, c] * tap
    for p in range(TP):
        if col0 + p < width:
            y[n, row, col0 + p, k] = acc[p]


def launch(x, f, y, p, threads=THREADS):
    total = p.n * p.h * ((p.w + TP - 1) // TP) * p.k
    conv_block_tiling[(total + threads - 1) // threads, threads](x, f, y)


STAGE = Stage("BLOCK TILING", "nhwc", launch)
