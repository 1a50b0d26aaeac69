"""The library baseline: cuDNN's FP32 forward convolution through NVIDIA's cuDNN frontend Python API
(``harness.cudnn_conv``), every plan the heuristics offer timed and the fastest kept.

Plans that use tensor cores (TF32) are deselected, so cuDNN computes in FP32 like our kernels. cuDNN
offers different FP32 plans for the two layouts, so the chapter times both -- NHWC input with KRSC
filters and NCHW with KCRS -- and the faster is the baseline. Optional: needs the
nvidia-cudnn-frontend and nvidia-cudnn wheels (requirements-gpu.txt) and a GPU.
"""

from __future__ import annotations

from ..harness import cudnn_conv, device
from ..harness.cudnn_conv import LAYOUTS, version  # noqa: F401  (the layouts timed; the cuDNN they run on)
from .common import Problem


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
