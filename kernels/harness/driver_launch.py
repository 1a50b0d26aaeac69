"""Kernel launches straight through the CUDA driver's ``cuLaunchKernel``, over ctypes, for callers whose
time is the host's (a training loop calling one small operation per step).

A CuPy ``RawKernel`` call converts and checks every argument in Python and Cython each time, which can
cost more host time than a small image's kernel takes on the GPU; here the arguments go into ctypes
buffers made once per kernel and thread, and the launch costs the driver call and little else. The
kernel itself is loaded by CuPy (``cuda_cpp.load``): this module only launches it.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from functools import cache

# One C type per argument kind: a device pointer, or a 32-bit int.
KINDS = {"p": ctypes.c_uint64, "i": ctypes.c_int32}
_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT: no context current on the calling thread


@cache
def _driver():
    lib = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    u, p = ctypes.c_uint, ctypes.c_void_p
    lib.cuLaunchKernel.argtypes = [p, u, u, u, u, u, u, u, p, p, p]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, p]
    lib.cuMemsetD8Async.restype = ctypes.c_int
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def _error(code: int) -> str:
    text = ctypes.c_char_p()
    _driver().cuGetErrorString(code, ctypes.byref(text))
    return f"{text.value.decode() if text.value else 'unknown error'} (CUresult {code})"


def zero_async(address: int, nbytes: int, stream: int = 0) -> None:
    """Set ``nbytes`` bytes of device memory at ``address`` to zero, queued on ``stream`` (a raw handle)."""
    code = _driver().cuMemsetD8Async(address, 0, nbytes, stream)
    if code:
        raise RuntimeError(f"cuMemsetD8Async failed: {_error(code)}")


class Launcher:
    """Launches one loaded kernel (a CuPy ``RawKernel`` from ``cuda_cpp.load``, or its ``Function``) whose
    parameters are, in order, the kinds in ``kinds``: "p" for a device pointer (pass its address as an
    int), "i" for an int."""

    def __init__(self, function, kinds: str, device: int = 0):
        if not isinstance(kinds, str) or not kinds or set(kinds) - set(KINDS):
            raise ValueError(f"kinds: expected a string of {sorted(KINDS)}, one letter per parameter, got {kinds!r}")
        self.function, self.kinds, self.device = function, kinds, device
        self._pointer = ctypes.c_void_p(getattr(function, "kernel", function).ptr)  # the CUfunction
        self._local = threading.local()  # the driver copies the parameters at launch: one buffer set per thread

    def _buffers(self):
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            values = [KINDS[k]() for k in self.kinds]
            params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
            buffers = self._local.buffers = (values, params)
        return buffers

    def __call__(self, grid: tuple, block: tuple, args: tuple, stream: int = 0) -> None:
        """Launch on ``stream`` (a raw CUDA stream handle; 0: the legacy default stream), ``grid`` and
        ``block`` each 1 to 3 sizes, ``args`` one value per kind."""
        if len(args) != len(self.kinds):
            raise ValueError(f"args: expected {len(self.kinds)} values ({self.kinds}), got {len(args)}")
        values, params = self._buffers()
        for slot, value in zip(values, args, strict=True):
            slot.value = value
        gx, gy, gz = (*grid, 1, 1)[:3]
        bx, by, bz = (*block, 1, 1)[:3]
        code = _driver().cuLaunchKernel(self._pointer, gx, gy, gz, bx, by, bz, 0, stream, params, None)
        if code == _INVALID_CONTEXT:  # a thread that has not used the device yet: make its context current
            import cupy

            cupy.cuda.Device(self.device).use()
            code = _driver().cuLaunchKernel(self._pointer, gx, gy, gz, bx, by, bz, 0, stream, params, None)
        if code:
            raise RuntimeError(f"cuLaunchKernel failed: {_error(code)}")
