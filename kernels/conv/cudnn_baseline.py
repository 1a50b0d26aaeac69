"""The library baseline: cuDNN's FP32 forward convolution through NVIDIA's cuDNN frontend Python API.

Plans that use tensor cores (TF32) are deselected, so cuDNN computes in FP32 like our kernels.
Input NHWC, filter KRSC (cuDNN's preferred filter layout for NHWC), output NHWC. Optional: needs
the nvidia-cudnn-frontend and nvidia-cudnn wheels (requirements-gpu.txt) and a GPU.
"""
from __future__ import annotations

from ..harness import device
from .common import Problem


def unavailable() -> str | None:
    """None when the baseline can run here, else the one-line reason."""
    if device.MODE != device.GPU:
        return "cuDNN baseline: needs a GPU"
    try:
        import cudnn  # noqa: F401
    except Exception as e:  # ImportError, or a missing libcudnn behind it
        return f"cuDNN baseline: not available ({type(e).__name__}: {e}); install requirements-gpu.txt"
    return None


class CudnnConv:
    """A built cuDNN graph for problem ``p``; call it with (x NHWC, f KRSC, y NHWK) CuPy arrays."""

    def __init__(self, p: Problem):
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        import cudnn
        import cupy
        fp32 = cudnn.data_type.FLOAT
        self.handle = cudnn.create_handle()
        g = cudnn.pygraph(io_data_type=fp32, intermediate_data_type=fp32, compute_data_type=fp32, handle=self.handle)
        n, c, h, w, k = p.n, p.c, p.h, p.w, p.k
        # cuDNN always names dimensions N, C, H, W; the strides say the memory is channels-last.
        self.x = g.tensor(name="x", dim=[n, c, h, w], stride=[h * w * c, 1, w * c, c], data_type=fp32)
        self.f = g.tensor(name="f", dim=[k, c, 3, 3], stride=[9 * c, 1, 3 * c, c], data_type=fp32)
        self.y = g.conv_fprop(image=self.x, weight=self.f, padding=[1, 1], stride=[1, 1], dilation=[1, 1],
                              compute_data_type=fp32, name="conv")
        self.y.set_output(True).set_data_type(fp32).set_stride([h * w * k, 1, w * k, k])
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])   # no TF32
        g.check_support()
        g.build_plans()
        self.graph = g
        self.workspace = cupy.empty(max(1, g.get_workspace_size()), dtype=cupy.uint8)

    @staticmethod
    def filter_layout(f_rsck):
        """Our NHWC-stage filter (3, 3, C, K) as cuDNN's KRSC (K, 3, 3, C)."""
        import cupy
        return cupy.ascontiguousarray(f_rsck.transpose(3, 0, 1, 2))

    def __call__(self, x, f_krsc, y):
        self.graph.execute({self.x: x, self.f: f_krsc, self.y: y}, self.workspace, handle=self.handle)
