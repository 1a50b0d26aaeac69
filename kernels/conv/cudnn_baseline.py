"""The library baseline: cuDNN's FP32 forward convolution through NVIDIA's cuDNN frontend Python API
(``harness.cudnn_conv``), every plan the heuristics offer timed and the fastest kept.

Plans that use tensor cores (TF32) are deselected, so cuDNN computes in FP32 like our kernels. cuDNN
offers different FP32 plans for the two layouts, so the chapter times both -- NHWC input with KRSC
filters and NCHW with KCRS -- and the faster is the baseline. Optional: needs the
nvidia-cudnn-frontend and nvidia-cudnn wheels (requirements-gpu.txt) and a GPU.

Beside it, a reference that is not a convolution: cuBLAS's SGEMM on the same multiply-adds as one
matrix product (``gemm_shape``), the im2col matrix already built. It shows what NVIDIA's FP32 GEMM
reaches at the problem's shape without a convolution's gather.
"""

from __future__ import annotations

import os

from ..harness import cudnn_conv, device
from ..harness.cudnn_conv import LAYOUTS, version  # noqa: F401  (the layouts timed; the cuDNN they run on)
from .common import Problem, R, S


def unavailable() -> str | None:
    """None when the baseline can run here, else the one-line reason."""
    if device.MODE != device.GPU:
        return "cuDNN baseline: needs a GPU"
    why = cudnn_conv.missing()
    return f"cuDNN baseline: {why}" if why else None


class CudnnConv(cudnn_conv.ConvFprop):
    """Problem ``p`` (3x3, stride 1, zero padding 1) as a cuDNN graph in FP32, TF32 plans deselected,
    in ``layout`` ("nhwc" or "nchw")."""

    def __init__(self, p: Problem, layout: str = "nhwc"):
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        super().__init__(p.n, p.c, p.h, p.w, p.k, dtype="float", tensor_cores=False, layout=layout)

    def operands(self, x_nchw, f_kcrs):
        """Input and filters, given NCHW / KCRS (as ``common.random_inputs`` makes them), on the GPU as
        this graph reads them: unchanged for "nchw", NHWC / KRSC for "nhwc"."""
        import cupy

        x, f = cupy.asarray(x_nchw), cupy.asarray(f_kcrs)
        if self.layout == "nhwc":
            x, f = x.transpose(0, 2, 3, 1), f.transpose(0, 2, 3, 1)
        return cupy.ascontiguousarray(x), cupy.ascontiguousarray(f)


def gemm_shape(p: Problem) -> tuple[int, int, int]:
    """(M, N, K) of the convolution as one GEMM: an output pixel per row, an output channel per column,
    and a (channel, tap) pair per step of the sum, so that 2 M N K = ``p.flops``."""
    return p.pixels, p.k, p.c * R * S


def sgemm_gflops(p: Problem, repeat: int = 20) -> float:
    """cuBLAS's FP32 SGEMM (CuPy's matmul) at ``gemm_shape(p)`` on random operands: GFLOP/s of the median
    of ``repeat`` timed calls. CuPy uses TF32 only when CUPY_TF32=1, which is refused here."""
    if os.environ.get("CUPY_TF32", "0") != "0":
        raise RuntimeError("sgemm_gflops: CUPY_TF32 is set, so CuPy's matmul would use TF32; unset it for FP32")
    if device.MODE != device.GPU:
        raise RuntimeError("sgemm_gflops: needs a GPU")
    import cupy
    import numpy as np

    from ..harness import timing

    m, n, k = gemm_shape(p)
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = cupy.empty((m, n), dtype=np.float32)
    ms = timing.benchmark(lambda: cupy.matmul(a, b, out=c), warmup=3, repeat=repeat).median_ms
    return p.flops / (ms * 1e-3) / 1e9
