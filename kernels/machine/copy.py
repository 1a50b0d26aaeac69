"""Device-to-device copy: the driver's memcpy (the bandwidth ceiling) and two Numba copy kernels.

A copy reads every byte once and writes it once, so bandwidth counts 2 x nbytes. ``copy`` launches
a kernel after checking its arrays; the kernels themselves stop at the shorter array, so a short
``dst`` is never written past its end.
"""

import numpy as np
from numba import cuda

from ..harness import check


@cuda.jit
def copy_kernel(dst, src):
    # Grid-stride loop: one launch covers any size; neighbouring threads touch neighbouring words.
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, min(src.size, dst.size), stride):
        dst[i] = src[i]


@cuda.jit
def copy_kernel_x4(dst, src):
    # Four independent loads in flight per thread before the first store: by Little's law the
    # bandwidth a thread can draw is the bytes it has in flight over the DRAM latency.
    start, stride = cuda.grid(1), cuda.gridsize(1)
    n = min(src.size, dst.size)
    i = start
    while i + 3 * stride < n:
        a, b, c, d = src[i], src[i + stride], src[i + 2 * stride], src[i + 3 * stride]
        dst[i], dst[i + stride], dst[i + 2 * stride], dst[i + 3 * stride] = a, b, c, d
        i += 4 * stride
    while i < n:
        dst[i] = src[i]
        i += stride


class _OneDtype:
    """``kernel[grid, block](dst, src)`` as Numba launches it, after refusing a ``dst`` and ``src`` of two
    dtypes: the kernel would convert each element silently (float32 into int32 truncates)."""

    def __init__(self, kernel):
        self._kernel = kernel

    def __getitem__(self, config):
        launch = self._kernel[config]

        def launch_checked(dst, src):
            kinds = [getattr(a, "dtype", None) for a in (dst, src)]
            # `None in kinds` would be wrong: a dtype equals None, np.dtype(None) being float64.
            if any(k is None for k in kinds) or np.dtype(kinds[0]) != np.dtype(kinds[1]):
                raise TypeError(
                    f"dst and src: {self._kernel.py_func.__name__} copies without converting, so both need one "
                    f"dtype; got dst {kinds[0] or type(dst).__name__} and src {kinds[1] or type(src).__name__}"
                )
            return launch(dst, src)

        return launch_checked

    def __getattr__(self, name):  # py_func, the compiled definitions: the kernel's own
        return getattr(self._kernel, name)


# Launched directly too (chapter 01 does), so the check travels with the kernel.
copy_kernel = _OneDtype(copy_kernel)
copy_kernel_x4 = _OneDtype(copy_kernel_x4)


def memcpy_d2d(dst, src):
    """cudaMemcpyAsync device-to-device on the default stream (CuPy arrays)."""
    import cupy

    for name, a in (("dst", dst), ("src", src)):
        if not isinstance(a, cupy.ndarray):
            raise TypeError(f"{name}: expected a CuPy array on the GPU, got {type(a).__name__}")
        check.require_array(a, name)
    if dst.nbytes != src.nbytes:
        raise ValueError(f"dst has {dst.nbytes} bytes, src {src.nbytes}: a copy needs equal sizes")
    check.require_output(dst, "dst", {"src": src})
    cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, 0)


def copy(dst, src, kernel=copy_kernel, *, blocks: int, threads: int = 256):
    """Launch ``kernel`` (copy_kernel or copy_kernel_x4) on ``blocks`` x ``threads`` threads to copy
    ``src`` into ``dst``: 1-D arrays of one dtype and size, not overlapping."""
    if kernel not in (copy_kernel, copy_kernel_x4):
        raise ValueError(f"kernel must be copy_kernel or copy_kernel_x4, got {kernel!r}")
    check.require_array(src, "src", ndim=1)
    check.require_array(dst, "dst", dtype=src.dtype, ndim=1)
    if dst.size != src.size:
        raise ValueError(f"dst has {dst.size} elements, src {src.size}: a copy needs equal sizes")
    check.require_output(dst, "dst", {"src": src})
    blocks = check.positive_int(blocks, "blocks", maximum=check.MAX_GRID_DIM[0])
    kernel[blocks, check.block_shape(threads)[0]](dst, src)


def bytes_moved(nbytes: int) -> int:
    return 2 * nbytes


def pairs_from_dram(nbytes: int, l2_bytes: int) -> int:
    """How many (src, dst) pairs a copy of ``nbytes`` must cycle through so that each pair's lines have
    left the L2 before its next turn: together four times the L2's capacity, or one pair that alone is."""
    check.positive_int(nbytes, "nbytes")
    check.positive_int(l2_bytes, "l2_bytes")
    return max(1, -(-4 * l2_bytes // (2 * nbytes)))


def memcpy_gbps(nbytes: int, *, pairs: int = 1, repeat: int = 20) -> float:
    """GB/s (read + write) of a device-to-device memcpy of ``nbytes``, repetition i copying pair i mod
    ``pairs``. With one pair every copy finds what the copy before it left in the L2, all of it where
    source and destination fit there; with ``pairs_from_dram`` pairs each copy reads its source from DRAM."""
    from ..harness import device, timing

    check.positive_int(nbytes, "nbytes")
    check.positive_int(pairs, "pairs")
    if device.MODE != device.GPU:
        raise RuntimeError("memcpy_gbps: timing a copy needs a GPU; this run uses the CUDA simulator")
    import cupy

    buffers = [(cupy.empty(nbytes // 4, dtype=cupy.float32), cupy.ones(nbytes // 4, dtype=cupy.float32))]
    buffers += [(cupy.empty_like(buffers[0][0]), cupy.ones_like(buffers[0][1])) for _ in range(pairs - 1)]
    t = timing.benchmark(memcpy_d2d, args=buffers, repeat=repeat)
    return bytes_moved(buffers[0][1].nbytes) / (t.median_ms * 1e-3) / 1e9
