"""FP32 FMA throughput: each thread runs CHAINS independent FMA recurrences.

One chain alone waits the FMA latency (about 4 cycles) between instructions; with CHAINS chains per
thread and several warps per scheduler an independent FMA is always ready to issue. ``unroll``
inner steps share one trip of the loop counter, whose 64-bit bookkeeping costs about six issue
slots: with ``unroll=1`` those slots compete with only 8 FMAs. The results are summed into ``out``
so that no chain is dead code.
"""

from functools import cache

from numba import cuda, float32

from ..harness.check import positive_int

CHAINS = 8


@cache
def fma_kernel(unroll: int):
    """The kernel with ``unroll`` (a compile-time constant) steps of CHAINS FMAs per loop trip."""
    positive_int(unroll, "unroll")  # a compile-time trip count: a whole number

    @cuda.jit
    def fma_chains(out, iters, b, c):
        i = cuda.grid(1)
        x0 = float32(i % 7) * float32(0.01)
        x1 = x0 + float32(0.1)
        x2 = x0 + float32(0.2)
        x3 = x0 + float32(0.3)
        x4 = x0 + float32(0.4)
        x5 = x0 + float32(0.5)
        x6 = x0 + float32(0.6)
        x7 = x0 + float32(0.7)
        for _ in range(iters):
            for _ in range(unroll):  # constant trip count: fully unrolled by the compiler
                x0 = cuda.fma(x0, b, c)
                x1 = cuda.fma(x1, b, c)
                x2 = cuda.fma(x2, b, c)
                x3 = cuda.fma(x3, b, c)
                x4 = cuda.fma(x4, b, c)
                x5 = cuda.fma(x5, b, c)
                x6 = cuda.fma(x6, b, c)
                x7 = cuda.fma(x7, b, c)
        if i < out.size:
            out[i] = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))

    return fma_chains


def flops(threads: int, iters: int, unroll: int) -> int:
    """Two floating-point operations per FMA."""
    return 2 * CHAINS * unroll * threads * iters


def reference(threads: int, steps: int, b: float, c: float):
    """The same recurrences over ``steps`` = iters * unroll FMAs, in float64 (NumPy), one value per thread."""
    import numpy as np

    x = (np.arange(threads) % 7) * 0.01
    total = np.zeros(threads)
    for k in range(CHAINS):
        xk = x + 0.1 * k
        for _ in range(steps):
            xk = xk * b + c
        total += xk
    return total
