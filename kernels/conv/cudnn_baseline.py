"""The library baseline: cuDNN's FP32 forward convolution through NVIDIA's cuDNN frontend Python API
(``harness.cudnn_conv``), every plan the heuristics offer timed and the fastest kept.

Plans that use tensor cores (TF32) are deselected, so cuDNN computes in FP32 like our kernels.
Input NHWC, filter KRSC (cuDNN's preferred filter layout for NHWC), output NHWC. Optional: needs
the nvidia-cudnn-frontend and nvidia-cudnn wheels (requirements-gpu.txt) and a GPU.
"""
from __future__ import annotations

from ..harness import cudnn_conv, device
from ..harness.cudnn_conv import version  # noqa: F401  (the cuDNN the baseline runs on)
from .common import Problem


def unavailable() -> str | None:
    """None when the baseline can run here, else the one-line reason."""
    if device.MODE != device.GPU:
        return "cuDNN baseline: needs a GPU"
    why = cudnn_conv.missing()
    return f"cuDNN baseline: {why}" if why else None


class CudnnConv(cudnn_conv.ConvFprop):
    """Problem ``p`` (3x3, stride 1, zero padding 1) as a cuDNN graph in FP32, TF32 plans deselected."""

    def __init__(self, p: Problem):
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        super().__init__(p.n, p.c, p.h, p.w, p.k, dtype="float", tensor_cores=False)

    @staticmethod
    def filter_layout(f_rsck):
        """Our NHWC-stage filter (3, 3, C, K) as cuDNN's KRSC (K, 3, 3, C)."""
        import cupy
        return cupy.ascontiguousarray(f_rsck.transpose(3, 0, 1, 2))
