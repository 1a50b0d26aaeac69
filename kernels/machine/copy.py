"""Device-to-device copy: the driver's memcpy (the bandwidth ceiling) and two Numba copy kernels.

A copy reads every byte once and writes it once, so bandwidth counts 2 x nbytes.
"""
from numba import cuda


@cuda.jit
def copy_kernel(dst, src):
    # Grid-stride loop: one launch covers any size; neighbouring threads touch neighbouring words.
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, src.size, stride):
        dst[i] = src[i]


@cuda.jit
def copy_kernel_x4(dst, src):
    # Four independent loads in flight per thread before the first store: by Little's law the
    # bandwidth a thread can draw is the bytes it has in flight over the DRAM latency.
    start, stride = cuda.grid(1), cuda.gridsize(1)
    n = src.size
    i = start
    while i + 3 * stride < n:
        a, b, c, d = src[i], src[i + stride], src[i + 2 * stride], src[i + 3 * stride]
        dst[i], dst[i + stride], dst[i + 2 * stride], dst[i + 3 * stride] = a, b, c, d
        i += 4 * stride
    while i < n:
        dst[i] = src[i]
        i += stride


def memcpy_d2d(dst, src):
    """cudaMemcpyAsync device-to-device on the default stream (CuPy arrays)."""
    import cupy
    if dst.nbytes != src.nbytes:
        raise ValueError(f"dst has {dst.nbytes} bytes, src {src.nbytes}: a copy needs equal sizes")
    cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                  cupy.cuda.runtime.memcpyDeviceToDevice, 0)


def bytes_moved(nbytes: int) -> int:
    return 2 * nbytes
