"""cuDNN's convolution on the chapter's problem, through the cuDNN frontend's Python graph API.

An optional GPU extra (requirements-gpu.txt: nvidia-cudnn-frontend and a cuDNN wheel). ``missing()``
says in one line why it cannot run; everything else assumes it can. The heuristics offer several
engine configurations ("plans"); we build them all, time each on the same inputs and keep the best,
as cuDNN's own autotuning would.
"""
from __future__ import annotations

from dataclasses import dataclass

from .common import Problem


def missing() -> str | None:
    """None when the frontend and a cuDNN library load; else one line saying what is missing."""
    try:
        import cudnn
        version = cudnn.backend_version()
    except Exception as err:  # ImportError, or the frontend present but no libcudnn to load
        return (f"cuDNN is not available ({type(err).__name__}: {err}); install the GPU extras: "
                f"pip install -r requirements-gpu.txt")
    return None if version else "cuDNN frontend loaded but reports no backend version"


@dataclass
class PlanTiming:
    index: int
    name: str
    ms: float | None          # None: the plan did not build or run
    note: str = ""


class CudnnConv:
    """One convolution graph: NHWC fp16 input, KRSC fp16 filters, fp32 compute, NHWC fp16 output."""

    def __init__(self, problem: Problem):
        import cudnn
        self.problem = p = problem
        self.handle = cudnn.create_handle()
        half, f32 = cudnn.data_type.HALF, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=half, intermediate_data_type=f32, compute_data_type=f32,
                          handle=self.handle)
        # cuDNN names dimensions N, C, H, W whatever the layout; the strides say NHWC / KRSC.
        self.x = g.tensor(name="x", dim=[p.n, p.c, p.h, p.w], stride=[p.h * p.w * p.c, 1, p.w * p.c, p.c],
                          data_type=half)
        self.w = g.tensor(name="w", dim=[p.k, p.c, p.r, p.s], stride=[p.r * p.s * p.c, 1, p.s * p.c, p.c],
                          data_type=half)
        self.y = g.conv_fprop(image=self.x, weight=self.w, padding=[p.pad, p.pad], stride=[p.stride, p.stride],
                              dilation=[1, 1], compute_data_type=f32, name="conv")
        self.y.set_output(True).set_data_type(half).set_dim([p.n, p.k, p.p, p.q]).set_stride(
            [p.p * p.q * p.k, 1, p.q * p.k, p.k])
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans(cudnn.build_plan_policy.ALL)
        self.graph = g

    def plan_count(self) -> int:
        return self.graph.get_execution_plan_count()

    def plan_name(self, index: int) -> str:
        return self.graph.get_plan_name_at_index(index)

    def launcher(self, index: int, x, w, out):
        """A function that enqueues plan ``index`` on (x, w) -> out; CuPy arrays, NHWC / KRSC."""
        import cupy
        pack = {self.x: x.data.ptr, self.w: w.data.ptr, self.y: out.data.ptr}
        workspace = cupy.empty(max(1, self.graph.get_workspace_size_plan_at_index(index)), dtype=cupy.uint8)
        return lambda: self.graph.execute_plan_at_index(pack, workspace.data.ptr, index, handle=self.handle)

    def time_plans(self, x, w, out, repeat: int = 20) -> list[PlanTiming]:
        """Every plan the heuristics offered, timed on the same inputs; plans that fail say why."""
        from ..harness.timing import benchmark
        rows = []
        for i in range(self.plan_count()):
            name = self.plan_name(i)
            try:
                t = benchmark(self.launcher(i, x, w, out), warmup=3, repeat=repeat)
                rows.append(PlanTiming(i, name, t.median_ms))
            except Exception as err:  # a plan the heuristics list but this GPU cannot build or run
                rows.append(PlanTiming(i, name, None, f"{type(err).__name__}: {str(err)[:80]}"))
        return rows


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
