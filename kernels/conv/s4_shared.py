"""SHARED: a block computes a tile of BM pixels x BN output channels, staging its inputs in shared memory.

The convolution is read as a matrix product (an implicit GEMM): pixels x (tap, input channel) times
(tap, input channel) x output channels. For each filter tap and each chunk of BKC input channels
the block copies the input values it needs (BM x BKC) and the filter chunk (BKC x BN) into shared
memory once; then every thread reuses them from there for its TM pixels. Global loads per FMA fall
by the tile sizes; the loads are still one word each, with the index arithmetic of the gather.
"""

from functools import cache

from numba import cuda, float32

from ..harness import check
from .common import Stage

GPU_TILE = dict(by=8, bn=32, tm=8, bkc=16)  # 256 threads, 64 x 32 outputs per block
SIM_TILE = dict(by=2, bn=4, tm=2, bkc=2)  # 8 threads: the simulator runs each as a Python thread
STATIC_SMEM = 48 * 1024  # bytes of cuda.shared.array one block may declare


@cache
def make_kernel(by: int, bn: int, tm: int, bkc: int):
    """The kernel for one tile shape: blocks of (bn, by) threads, each thread tm pixels x 1 channel."""
    bm, threads = by * tm, by * bn

    @cuda.jit
    def conv_shared(x, f, y2):
        n_img, height, width, n_in = x.shape
        n_out = f.shape[3]
        n_pix = n_img * height * width
        a_tile = cuda.shared.array((bm, bkc), float32)
        b_tile = cuda.shared.array((bkc, bn), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tid = ty * bn + tx
        m0, k0 = cuda.blockIdx.x * bm, cuda.blockIdx.y * bn
        acc = cuda.local.array(tm, float32)
        for i in range(tm):
            acc[i] = float32(0.0)
        for tap in range(9):
            r, s = tap // 3, tap % 3
            for c0 in range(0, n_in, bkc):
                # Gather: consecutive threads take consecutive channels of one pixel (coalesced in NHWC).
                for e in range(tid, bm * bkc, threads):
                    i, j = e // bkc, e % bkc
                    m, c = m0 + i, c0 + j
                    v = float32(0.0)
                    if m < n_pix and c < n_in:
                        col, row, n = m % width, (m // width) % height, m // (width * height)
                        ih, iw = row + r - 1, col + s - 1
                        if 0 <= ih < height and 0 <= iw < width:
                            v = x[n, ih, iw, c]
                    a_tile[i, j] = v
                for e in range(tid, bkc * bn, threads):
                    j, t = e // bn, e % bn
                    v = float32(0.0)
                    if c0 + j < n_in and k0 + t < n_out:
                        v = f[r, s, c0 + j, k0 + t]
                    b_tile[j, t] = v
                cuda.syncthreads()
                for j in range(bkc):
                    b = b_tile[j, tx]
                    for i in range(tm):
                        # all lanes of a warp share ty, so this read is a broadcast
                        acc[i] += a_tile[ty * tm + i, j] * b
                cuda.syncthreads()
        k = k0 + tx
        if k < n_out:
            for i in range(tm):
                m = m0 + ty * tm + i
                if m < n_pix:
                    y2[m, k] = acc[i]

    return conv_shared


def stage(by: int, bn: int, tm: int, bkc: int) -> Stage:
    by, bn, tm, bkc = (check.positive_int(v, name) for v, name in ((by, "by"), (bn, "bn"), (tm, "tm"), (bkc, "bkc")))
    check.block_shape((bn, by))
    smem = 4 * bkc * (by * tm + bn)
    if smem > STATIC_SMEM:
        raise ValueError(
            f"the tiles need 4 * bkc * (by * tm + bn) = {smem} bytes of shared memory; a block's "
            f"static shared memory is at most {STATIC_SMEM}"
        )
    kernel = make_kernel(by, bn, tm, bkc)

    def launch(x, f, y, p):
        grid = ((p.pixels + by * tm - 1) // (by * tm), (p.k + bn - 1) // bn)
        kernel[grid, (bn, by)](x, f, y.reshape(p.pixels, p.k))

    return Stage("SHARED", "nhwc", launch, options=dict(by=by, bn=bn, tm=tm, bkc=bkc))


STAGE = stage(**GPU_TILE)
