"""V3-0: a software pipeline sliding down Y. A block of bx threads (one output column each) walks a strip
of by output rows: it loads one input row of both images (+5 px halo in x) into shared memory, does the
x-pass of all five moments for that row, keeps the last 11 x-pass rows in a ring, and emits one output
row from the ring. The x-pass halo in Y is now 10 rows per strip, not per small tile. The trap: the
ring is an array indexed by a runtime slot, so it lives in local memory (DRAM-backed), and the bounds
tests in the load are branches.
"""

from functools import lru_cache

from numba import cuda, float32

from .common import GAUSS, RADIUS, SHIFT_F32, WINDOW, numba_launch, store

GPU_TILE = {"bx": 128, "by": 64}
SIM_TILE = {"bx": 8, "by": 8}
MOMENTS = 5


@lru_cache(maxsize=None)
def build(bx: int, by: int, training: bool):
    """The kernel for a strip of bx columns x by rows walked by bx threads; sizes are compile-time constants."""
    row_len = bx + 2 * RADIUS

    @cuda.jit
    def ssim_v3_0(img1, img2, out, d_mu1, d_s11, d_s12):
        p = cuda.blockIdx.z
        tx = cuda.threadIdx.x
        x0, y0 = cuda.blockIdx.x * bx, cuda.blockIdx.y * by
        h, w = img1.shape[1], img1.shape[2]
        row1 = cuda.shared.array(row_len, float32)
        row2 = cuda.shared.array(row_len, float32)
        ring = cuda.local.array((MOMENTS, WINDOW), float32)

        for r in range(by + 2 * RADIUS):
            y_in = y0 - RADIUS + r
            for c in range(tx, row_len, bx):
                x_in = x0 - RADIUS + c
                if 0 <= y_in < h and 0 <= x_in < w:  # stored shifted (common.SHIFT), padding too
                    row1[c] = img1[p, y_in, x_in] - SHIFT_F32
                    row2[c] = img2[p, y_in, x_in] - SHIFT_F32
                else:
                    row1[c] = -SHIFT_F32
                    row2[c] = -SHIFT_F32
            cuda.syncthreads()

            a1 = a2 = a11 = a22 = a12 = float32(0.0)
            for k in range(WINDOW):
                u, v, g = row1[tx + k], row2[tx + k], GAUSS[k]
                a1 += g * u
                a2 += g * v
                a11 += g * (u * u)
                a22 += g * (v * v)
                a12 += g * (u * v)
            slot = r % WINDOW
            ring[0, slot] = a1
            ring[1, slot] = a2
            ring[2, slot] = a11
            ring[3, slot] = a22
            ring[4, slot] = a12
            cuda.syncthreads()  # the next row may only overwrite row1/row2 once every thread read them

            if r >= 2 * RADIUS:
                # The ring holds input rows r-10 .. r; the oldest sits in slot (r + 1) % 11.
                mu1 = mu2 = ex2 = ey2 = exy = float32(0.0)
                for k in range(WINDOW):
                    s, g = (r + 1 + k) % WINDOW, GAUSS[k]
                    mu1 += g * ring[0, s]
                    mu2 += g * ring[1, s]
                    ex2 += g * ring[2, s]
                    ey2 += g * ring[3, s]
                    exy += g * ring[4, s]
                y, x = y0 + r - 2 * RADIUS, x0 + tx
                if y < h and x < w:
                    store(out, d_mu1, d_s11, d_s12, p, y, x, mu1, mu2, ex2, ey2, exy, training)

    return ssim_v3_0


def launch(version, img1, img2, out, derivs, *, bx, by):
    n, c, h, w = img1.shape
    grid = ((w + bx - 1) // bx, (h + by - 1) // by, n * c)
    numba_launch(build(bx, by, derivs is not None), grid, (bx,), img1, img2, out, derivs)
