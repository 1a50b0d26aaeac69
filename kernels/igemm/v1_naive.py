"""Step 1: naive implicit GEMM -- one thread per output element, fp32 accumulation, no reuse.

Each thread walks its own row of the implicit A matrix (the R x S x C input patch under its output
pixel) against one filter, reading two fp16 values from global memory for every multiply-add: it runs
at the speed of the caches, not of any arithmetic unit. It is the correctness and speed baseline.
"""

from numba import cuda, float32
from numba.types import float16

THREADS = 128


@cuda.jit
def igemm_naive(x, w, y, pad, stride):
    idx = cuda.grid(1)
    n_img, p_out, q_out, k_out = y.shape
    if idx >= n_img * p_out * q_out * k_out:
        return
    # Neighbouring threads own neighbouring output channels: their y stores are contiguous and
    # they all read the same input pixel (a broadcast).
    k = idx % k_out
    m = idx // k_out
    q = m % q_out
    p = (m // q_out) % p_out
    n = m // (q_out * p_out)
    height, width, channels = x.shape[1], x.shape[2], x.shape[3]
    acc = float32(0.0)
    for r in range(w.shape[1]):
        h = p * stride - pad + r
        if 0 <= h < height:
            for s in range(w.shape[2]):
                col = q * stride - pad + s
                if 0 <= col < width:
                    for c in range(channels):
                        acc += float32(x[n, h, col, c]) * float32(w[k, r, s, c])
    y[n, p, q, k] = float16(acc)
