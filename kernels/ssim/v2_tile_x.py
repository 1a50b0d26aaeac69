"""V2: tile along X. Each thread computes px outputs of one row, so a block of (bx/px) x by threads covers a
wider, flatter bx x by tile: more independent work per thread (fewer stalls) but a larger halo share,
since every tile recomputes the x-pass on by + 10 rows. The model in common.v2_ffma_per_block says
FFMA work grows with (by + 5) / by: the worklog measured this version slower than V1.
"""

from functools import lru_cache

from numba import cuda, float32

from .common import GAUSS, RADIUS, SHIFT_F32, WINDOW, numba_launch, store

GPU_TILE = {"bx": 128, "by": 8, "px": 4}  # 32 x 8 threads, each 4 outputs along x
SIM_TILE = {"bx": 16, "by": 4, "px": 2}


@lru_cache(maxsize=None)
def build(bx: int, by: int, px: int, training: bool):
    """The kernel for a bx x by tile computed by (bx // px) x by threads; sizes are compile-time constants."""
    if bx % px:
        raise ValueError(f"the tile width bx={bx} must be a multiple of the outputs per thread px={px}")
    tile_shape = (by + 2 * RADIUS, bx + 2 * RADIUS)
    scratch_shape = (by + 2 * RADIUS, bx)
    tx_count = bx // px
    nthreads = tx_count * by

    @cuda.jit(device=True, inline=True)
    def load_into_shared(buf, img, p, y0, x0):
        # The tile starts RADIUS pixels above and left of the block's first output; outside the image
        # the zero padding is written explicitly. Values are stored shifted (common.SHIFT).
        h, w = img.shape[1], img.shape[2]
        tid = cuda.threadIdx.y * tx_count + cuda.threadIdx.x
        for i in range(tid, tile_shape[0] * tile_shape[1], nthreads):
            r, c = i // tile_shape[1], i % tile_shape[1]
            y, x = y0 - RADIUS + r, x0 - RADIUS + c
            buf[r, c] = (img[p, y, x] if 0 <= y < h and 0 <= x < w else float32(0.0)) - SHIFT_F32

    @cuda.jit(device=True, inline=True)
    def conv_x(src, scratch, square):
        # Every row of the tile (halo rows included), the block's bx columns.
        tid = cuda.threadIdx.y * tx_count + cuda.threadIdx.x
        for i in range(tid, scratch_shape[0] * scratch_shape[1], nthreads):
            r, c = i // bx, i % bx
            acc = float32(0.0)
            for k in range(WINDOW):
                v = src[r, c + k]
                acc += GAUSS[k] * (v * v if square else v)
            scratch[r, c] = acc

    @cuda.jit(device=True, inline=True)
    def conv_y(scratch, acc):
        # Column j of this thread is tx + j * tx_count: a warp reads neighbouring columns (no bank conflict).
        ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
        for j in range(px):
            s = float32(0.0)
            for k in range(WINDOW):
                s += GAUSS[k] * scratch[ty + k, tx + j * tx_count]
            acc[j] = s

    @cuda.jit(device=True, inline=True)
    def multiply_shared_mem(buf1, buf2):
        tid = cuda.threadIdx.y * tx_count + cuda.threadIdx.x
        for i in range(tid, tile_shape[0] * tile_shape[1], nthreads):
            r, c = i // tile_shape[1], i % tile_shape[1]
            buf1[r, c] = buf1[r, c] * buf2[r, c]

    @cuda.jit
    def ssim_v2(img1, img2, out, d_mu1, d_s11, d_s12):
        p = cuda.blockIdx.z
        x0, y0 = cuda.blockIdx.x * bx, cuda.blockIdx.y * by
        buf1 = cuda.shared.array(tile_shape, float32)
        buf2 = cuda.shared.array(tile_shape, float32)
        buf3 = cuda.shared.array(scratch_shape, float32)
        # px results per moment; the loops over px have constant trip counts, so these stay in registers.
        mu1 = cuda.local.array(px, float32)
        ex2 = cuda.local.array(px, float32)
        mu2 = cuda.local.array(px, float32)
        ey2 = cuda.local.array(px, float32)
        exy = cuda.local.array(px, float32)

        load_into_shared(buf1, img1, p, y0, x0)
        cuda.syncthreads()

        conv_x(buf1, buf3, False)
        cuda.syncthreads()
        conv_y(buf3, mu1)
        cuda.syncthreads()

        conv_x(buf1, buf3, True)
        cuda.syncthreads()
        conv_y(buf3, ex2)

        # The barrier after this load also keeps the next x-pass from overwriting buf3 while the
        # y-pass above may still read it.
        load_into_shared(buf2, img2, p, y0, x0)
        cuda.syncthreads()
        conv_x(buf2, buf3, False)
        cuda.syncthreads()
        conv_y(buf3, mu2)
        cuda.syncthreads()

        conv_x(buf2, buf3, True)
        cuda.syncthreads()
        conv_y(buf3, ey2)
        cuda.syncthreads()

        multiply_shared_mem(buf1, buf2)
        cuda.syncthreads()
        conv_x(buf1, buf3, False)
        cuda.syncthreads()
        conv_y(buf3, exy)

        y = y0 + cuda.threadIdx.y
        for j in range(px):
            x = x0 + cuda.threadIdx.x + j * tx_count
            if y < out.shape[1] and x < out.shape[2]:
                store(out, d_mu1, d_s11, d_s12, p, y, x, mu1[j], mu2[j], ex2[j], ey2[j], exy[j], training)

    return ssim_v2


def launch(version, img1, img2, out, derivs, *, bx, by, px):
    n, c, h, w = img1.shape
    grid = ((w + bx - 1) // bx, (h + by - 1) // by, n * c)
    numba_launch(build(bx, by, px, derivs is not None), grid, (bx // px, by), img1, img2, out, derivs)
