"""Naive: one thread per output pixel; both image tiles (+5 px halo) in shared memory; the five moments
computed one after another, each as an x-pass into a shared scratch buffer and a y-pass out of it,
each pass preceded by zeroing ("flushing") the scratch buffer and a block barrier.
"""

from functools import lru_cache

from numba import cuda, float32

from .common import GAUSS, RADIUS, SHIFT_F32, WINDOW, numba_launch, store

GPU_TILE = {"bx": 32, "by": 32}  # the worklog's 32x32-thread blocks
SIM_TILE = {"bx": 8, "by": 4}


@lru_cache(maxsize=None)
def build(bx: int, by: int, training: bool):
    """The kernel for a block of bx x by threads (= outputs); sizes are compile-time constants."""
    tile_shape = (by + 2 * RADIUS, bx + 2 * RADIUS)
    scratch_shape = (by + 2 * RADIUS, bx)
    nthreads = bx * by

    @cuda.jit(device=True, inline=True)
    def load_into_shared(buf, img, p, y0, x0):
        # The tile starts RADIUS pixels above and left of the block's first output; outside the image
        # the zero padding is written explicitly. Values are stored shifted (common.SHIFT).
        h, w = img.shape[1], img.shape[2]
        tid = cuda.threadIdx.y * bx + cuda.threadIdx.x
        for i in range(tid, tile_shape[0] * tile_shape[1], nthreads):
            r, c = i // tile_shape[1], i % tile_shape[1]
            y, x = y0 - RADIUS + r, x0 - RADIUS + c
            buf[r, c] = (img[p, y, x] if 0 <= y < h and 0 <= x < w else float32(0.0)) - SHIFT_F32

    @cuda.jit(device=True, inline=True)
    def flush_conv_scratch(scratch):
        tid = cuda.threadIdx.y * bx + cuda.threadIdx.x
        for i in range(tid, scratch_shape[0] * scratch_shape[1], nthreads):
            scratch[i // bx, i % bx] = float32(0.0)

    @cuda.jit(device=True, inline=True)
    def conv_x(src, scratch, square):
        # Every row of the tile (halo rows included), the block's bx columns.
        tid = cuda.threadIdx.y * bx + cuda.threadIdx.x
        for i in range(tid, scratch_shape[0] * scratch_shape[1], nthreads):
            r, c = i // bx, i % bx
            acc = float32(0.0)
            for k in range(WINDOW):
                v = src[r, c + k]
                acc += GAUSS[k] * (v * v if square else v)
            scratch[r, c] = acc

    @cuda.jit(device=True, inline=True)
    def conv_y(scratch):
        ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
        acc = float32(0.0)
        for k in range(WINDOW):
            acc += GAUSS[k] * scratch[ty + k, tx]
        return acc

    @cuda.jit(device=True, inline=True)
    def multiply_shared_mem(buf1, buf2):
        tid = cuda.threadIdx.y * bx + cuda.threadIdx.x
        for i in range(tid, tile_shape[0] * tile_shape[1], nthreads):
            r, c = i // tile_shape[1], i % tile_shape[1]
            buf1[r, c] = buf1[r, c] * buf2[r, c]

    @cuda.jit
    def ssim_naive(img1, img2, out, d_mu1, d_s11, d_s12):
        p = cuda.blockIdx.z
        x0, y0 = cuda.blockIdx.x * bx, cuda.blockIdx.y * by
        buf1 = cuda.shared.array(tile_shape, float32)
        buf2 = cuda.shared.array(tile_shape, float32)
        buf3 = cuda.shared.array(scratch_shape, float32)

        load_into_shared(buf1, img1, p, y0, x0)
        cuda.syncthreads()

        flush_conv_scratch(buf3)
        cuda.syncthreads()
        conv_x(buf1, buf3, False)
        cuda.syncthreads()
        mu1 = conv_y(buf3)
        cuda.syncthreads()

        flush_conv_scratch(buf3)
        cuda.syncthreads()
        conv_x(buf1, buf3, True)
        cuda.syncthreads()
        ex2 = conv_y(buf3)
        cuda.syncthreads()

        load_into_shared(buf2, img2, p, y0, x0)
        cuda.syncthreads()
        flush_conv_scratch(buf3)
        cuda.syncthreads()
        conv_x(buf2, buf3, False)
        cuda.syncthreads()
        mu2 = conv_y(buf3)
        cuda.syncthreads()

        flush_conv_scratch(buf3)
        cuda.syncthreads()
        conv_x(buf2, buf3, True)
        cuda.syncthreads()
        ey2 = conv_y(buf3)
        cuda.syncthreads()

        multiply_shared_mem(buf1, buf2)
        cuda.syncthreads()
        flush_conv_scratch(buf3)
        cuda.syncthreads()
        conv_x(buf1, buf3, False)
        cuda.syncthreads()
        exy = conv_y(buf3)
        cuda.syncthreads()

        y, x = y0 + cuda.threadIdx.y, x0 + cuda.threadIdx.x
        if y < out.shape[1] and x < out.shape[2]:
            store(out, d_mu1, d_s11, d_s12, p, y, x, mu1, mu2, ex2, ey2, exy, training)

    return ssim_naive


def launch(version, img1, img2, out, derivs, *, bx, by):
    n, c, h, w = img1.shape
    grid = ((w + bx - 1) // bx, (h + by - 1) // by, n * c)
    numba_launch(build(bx, by, derivs is not None), grid, (bx, by), img1, img2, out, derivs)
