"""V3-1: the V3-0 pipeline with the ring written out by hand: five 11-element tuples that are rebuilt
each row (oldest value dropped, new one appended) and read with constant indices, so every element is
a register and the local-memory traffic of V3-0 disappears. The rotation costs register moves.
"""

from functools import lru_cache

from numba import cuda, float32

from .common import GAUSS, RADIUS, SHIFT_F32, WINDOW, numba_launch, store

GPU_TILE = {"bx": 128, "by": 64}
SIM_TILE = {"bx": 8, "by": 8}


@cuda.jit(device=True, inline=True)
def tap11(q):
    """The y-pass over one ring: constant indices only, so the tuple never leaves registers."""
    return (
        GAUSS[0] * q[0]
        + GAUSS[1] * q[1]
        + GAUSS[2] * q[2]
        + GAUSS[3] * q[3]
        + GAUSS[4] * q[4]
        + GAUSS[5] * q[5]
        + GAUSS[6] * q[6]
        + GAUSS[7] * q[7]
        + GAUSS[8] * q[8]
        + GAUSS[9] * q[9]
        + GAUSS[10] * q[10]
    )


@cuda.jit(device=True, inline=True)
def push(q, v):
    """The ring after one more row: drop the oldest, append v."""
    return (q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], v)


@lru_cache(maxsize=None)
def build(bx: int, by: int, training: bool):
    """The kernel for a strip of bx columns x by rows walked by bx threads; sizes are compile-time constants."""
    row_len = bx + 2 * RADIUS

    @cuda.jit
    def ssim_v3_1(img1, img2, out, d_mu1, d_s11, d_s12):
        p = cuda.blockIdx.z
        tx = cuda.threadIdx.x
        x0, y0 = cuda.blockIdx.x * bx, cuda.blockIdx.y * by
        h, w = img1.shape[1], img1.shape[2]
        row1 = cuda.shared.array(row_len, float32)
        row2 = cuda.shared.array(row_len, float32)
        z = float32(0.0)
        q1 = q2 = q11 = q22 = q12 = (z, z, z, z, z, z, z, z, z, z, z)

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
            q1, q2 = push(q1, a1), push(q2, a2)
            q11, q22, q12 = push(q11, a11), push(q22, a22), push(q12, a12)
            cuda.syncthreads()  # the next row may only overwrite row1/row2 once every thread read them

            if r >= 2 * RADIUS:
                # The rings hold input rows r-10 .. r, oldest first.
                mu1, mu2 = tap11(q1), tap11(q2)
                ex2, ey2, exy = tap11(q11), tap11(q22), tap11(q12)
                y, x = y0 + r - 2 * RADIUS, x0 + tx
                if y < h and x < w:
                    store(out, d_mu1, d_s11, d_s12, p, y, x, mu1, mu2, ex2, ey2, exy, training)

    return ssim_v3_1


def launch(version, img1, img2, out, derivs, *, bx, by):
    n, c, h, w = img1.shape
    grid = ((w + bx - 1) // bx, (h + by - 1) // by, n * c)
    numba_launch(build(bx, by, derivs is not None), grid, (bx,), img1, img2, out, derivs)
