"""Launch every worked kernel of chapter 0 once, at small odd sizes, for compute-sanitizer (needs a GPU):

    compute-sanitizer --tool memcheck python -m kernels.basics.memcheck

Each kernel writes into an output poisoned with NaN and is compared with its NumPy reference; the kernel
that leaves out its barrier (``diff_shared_no_barrier``) only has to run clean, since memcheck looks for
accesses outside an allocation, not for races. The host <-> device path of the chapter (``cuda.to_device``,
a launch, ``copy_to_host``) runs too; on a GPU every other launch passes CuPy arrays. It prints every failed check
and a count of the verdicts, and exits non-zero if a check failed.
"""

from __future__ import annotations

import sys

import numpy as np

from ..harness import check, device

SIZES = (1, 37, 130)  # none a multiple of the 64-thread block
SHAPE = (5, 37)  # rows, columns: neither a multiple of the (32, 2) block


def checks(rng) -> list:
    """Each worked kernel once per size, against its reference: a list of check.CheckResult (on CuPy
    arrays on a GPU; in the simulator, on NumPy arrays, which is how the tests run it without one)."""
    from numba import cuda

    from . import examples as ex

    xp = device.xp()

    def vector(n):
        return xp.asarray(rng.standard_normal(n).astype(np.float32))

    out = []
    for n in SIZES:
        x = vector(n)
        ref = 3 * check.to_host(x).astype(np.float64)
        y = check.poison(xp.empty_like(x))
        ex.scale_guarded[ex.blocks(n), ex.THREADS](y, x, np.float32(3))
        out.append(check.compare(y, ref, atol=1e-5, name=f"scale_guarded n={n}"))
        m = check.poison(xp.empty(1, dtype=np.float32))
        ex.launch_max(m, x)
        out.append(check.compare(m, np.array([check.to_host(x).max()]), atol=0, name=f"launch_max n={n}"))
        x2 = vector(n + 1)
        d = check.poison(xp.empty(n, dtype=np.float32))
        ex.diff_shared[ex.blocks(n), ex.THREADS](d, x2)
        want = np.diff(check.to_host(x2).astype(np.float64))
        out.append(check.compare(d, want, atol=1e-5, name=f"diff_shared n={n}"))
        ex.diff_shared_no_barrier[ex.blocks(n), ex.THREADS](d, x2)  # a race, not an out-of-bounds access

    x = vector(192)  # scale has no bounds check: its grid must cover the array exactly
    y = check.poison(xp.empty_like(x))
    ex.scale[3, 64](y, x, np.float32(-2))
    out.append(check.compare(y, -2 * check.to_host(x).astype(np.float64), atol=1e-5, name="scale n=192"))

    rows, cols = SHAPE
    a, b = (xp.asarray(rng.standard_normal(SHAPE).astype(np.float32)) for _ in range(2))
    z = check.poison(xp.empty_like(a))
    ex.add_2d[((cols + 31) // 32, (rows + 1) // 2), (32, 2)](z, a, b)
    out.append(check.compare(z, check.to_host(a).astype(np.float64) + check.to_host(b), atol=1e-5, name="add_2d"))
    grids = {ex.copy_rows: ((cols + 31) // 32, (rows + 1) // 2), ex.copy_columns: ((rows + 31) // 32, (cols + 1) // 2)}
    for kernel, grid in grids.items():
        check.poison(z)
        kernel[grid, (32, 2)](z, a)
        out.append(check.compare(z, check.to_host(a), atol=0, name=kernel.__name__))

    x = vector(45)
    for stride in (1, 32, 33):
        y = check.poison(xp.empty(45, dtype=np.float32))
        ex.shared_stride[2, 32](y, x, stride)
        out.append(check.compare(y, 2 * check.to_host(x).astype(np.float64), atol=0, name=f"shared_stride {stride}"))

    # the host <-> device path: NumPy in, a Numba device array, a launch, and the copy back
    host = rng.standard_normal(37).astype(np.float32)
    dev_out = cuda.device_array(37, dtype=np.float32)
    ex.scale_guarded[ex.blocks(37), ex.THREADS](dev_out, cuda.to_device(host), np.float32(3))
    cuda.synchronize()
    back = dev_out.copy_to_host()
    out.append(check.compare(back, 3 * host.astype(np.float64), atol=1e-5, name="to_device, copy_to_host"))
    return out


if __name__ == "__main__":
    sys.exit(check.sanitized(checks))
