"""cuDNN's convolution on the chapter's problem: fp16 NHWC input, KRSC filters, fp32 compute, fp16 NHWC
output, through the harness's cuDNN frontend graph (``harness.cudnn_conv``: every plan the heuristics
offer is built and can be timed), and the names of the kernels a plan launches.
"""

from __future__ import annotations

from ..harness.cudnn_conv import ConvFprop, missing, version  # noqa: F401  (this chapter's one import for cuDNN)
from .problems import Problem


class CudnnConv(ConvFprop):
    """The chapter's convolution ``problem`` as a cuDNN graph in fp16."""

    def __init__(self, problem: Problem):
        self.problem = p = problem
        super().__init__(p.n, p.c, p.h, p.w, p.k, p.r, p.s, p.pad, p.stride, dtype="half")


def kernel_names(fn) -> list[str] | str:
    """The names of the GPU kernels ``fn`` launches, from PyTorch's CUPTI profiler; or why not."""
    try:
        import cupy
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
    except ImportError as err:
        return f"no profiler to name the kernels ({err}); run under `nsys profile` or `ncu` instead"
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            cupy.cuda.Device().synchronize()
        return sorted({e.name for e in prof.events() if e.device_type == DeviceType.CUDA})
    except Exception as err:  # CUPTI unavailable or busy (e.g. under another profiler)
        return f"the profiler could not run ({type(err).__name__}: {err})"
