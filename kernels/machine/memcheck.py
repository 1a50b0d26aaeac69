"""Launch every kernel of the machine chapter once, small, for compute-sanitizer (needs a GPU):

    compute-sanitizer --tool memcheck python -m kernels.machine.memcheck

The copy kernels at lengths that are not multiples of the block, the FMA chains with both unrolls at a
thread count that is not a multiple of a warp, the shared-memory stream, and the driver's copy: each on
an output poisoned with NaN, against its float64 reference. It prints every failed check and a count of
the verdicts, and exits non-zero if a check failed.
"""

from __future__ import annotations

import sys

import numpy as np

from ..harness import check, device


def checks(rng) -> list:
    """Each kernel of the chapter once per small case: a list of check.CheckResult. In the simulator (the
    tests) the Numba kernels run on NumPy arrays; the driver's copy and the CUDA C++ stream need a GPU."""
    from .copy import copy_kernel, copy_kernel_x4, memcpy_d2d
    from .fma import fma_kernel, reference

    xp = device.xp()
    out = []
    for n in (1, 97, 1000):
        src = xp.asarray(rng.random(n, dtype=np.float32))
        dst = check.poison(xp.empty_like(src))
        for kernel in (copy_kernel, copy_kernel_x4):
            kernel[3, 64](check.poison(dst), src)
            out.append(check.compare(dst, src, atol=0, name=f"{kernel.py_func.__name__} n={n}"))
        if device.on_gpu():
            memcpy_d2d(check.poison(dst), src)
            out.append(check.compare(dst, src, atol=0, name=f"memcpy n={n}"))
    for unroll in (1, 16):
        y = check.poison(xp.empty(45, dtype=np.float32))
        fma_kernel(unroll)[2, 32](y, 3, np.float32(0.999), np.float32(0.001))
        want = reference(45, 3 * unroll, 0.999, 0.001)
        out.append(check.compare(y, want, atol=1e-5, name=f"fma_chains unroll={unroll}"))
    if device.on_gpu():
        from ..harness.cuda_cpp import load

        blocks, threads, iters, step = 3, 128, 37, 32  # as tests/test_machine_kernels.py checks it
        y = check.poison(xp.empty(blocks * threads, dtype=np.float32))
        load("machine/smem_read.cu", "smem_read")((blocks,), (threads,), (y, np.int32(iters), np.int32(step)))
        idx = (np.arange(threads)[:, None] + step * np.arange(iters)[None, :]) & 1023
        want = np.tile((4.0 * idx + 6.0).sum(axis=1), blocks)
        out.append(check.compare(y, want, atol=0.0, rtol=1e-6, name="smem_read"))
    return out


if __name__ == "__main__":
    sys.exit(check.sanitized(checks))
