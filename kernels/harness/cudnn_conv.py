"""cuDNN's forward convolution through NVIDIA's cuDNN frontend Python API: the library baseline of the
convolution and implicit-GEMM chapters.

An optional GPU extra (requirements-gpu.txt: nvidia-cudnn-frontend and a cuDNN wheel). ``missing()``
says in one line why it cannot run; everything else assumes it can. The heuristics offer several
engine configurations ("plans"); ``time_plans`` builds them all, times each on the same inputs and
``fastest`` keeps the best, as cuDNN's own autotuning would: the first plan the heuristics rank is
not always the fastest.
"""
from __future__ import annotations

from dataclasses import dataclass


def missing() -> str | None:
    """None when the frontend and a cuDNN library load; else one line saying what is missing."""
    try:
        import cudnn
        version = cudnn.backend_version()
    except Exception as err:  # ImportError, or the frontend present but no libcudnn to load
        return (f"cuDNN is not available ({type(err).__name__}: {err}); install the GPU extras: "
                f"pip install -r requirements-gpu.txt")
    return None if version else "cuDNN frontend loaded but reports no backend version"


def version() -> str | None:
    """The cuDNN library the frontend loaded and the frontend's own version, as in "9.19.0 (frontend
    1.32.0)"; None where ``missing()`` says why not. A baseline's time depends on both."""
    if missing():
        return None
    import cudnn
    v = cudnn.backend_version()
    # cuDNN 9 encodes MAJOR * 10000 + MINOR * 100 + PATCH; cuDNN 8 encoded MAJOR * 1000 + MINOR * 100 + PATCH.
    major, rest = divmod(v, 10000) if v >= 90000 else divmod(v, 1000)
    return f"{major}.{rest // 100}.{rest % 100} (frontend {cudnn.__version__})"


@dataclass
class PlanTiming:
    index: int
    name: str
    ms: float | None          # None: the plan did not build or run
    note: str = ""


LAYOUTS = ("nhwc", "nchw")


class ConvFprop:
    """One convolution graph: all ``dtype`` ("half" or "float"), FP32 compute, in ``layout``: NHWC
    input, KRSC filters and NHWC output, or NCHW, KCRS and NCHW. ``tensor_cores=False`` drops the plans
    cuDNN marks as using tensor cores (for "float": TF32), so the baseline computes in FP32 like the
    kernels it is compared with."""

    def __init__(self, n: int, c: int, h: int, w: int, k: int, r: int = 3, s: int = 3, pad: int = 1,
                 stride: int = 1, dtype: str = "half", tensor_cores: bool = True, layout: str = "nhwc"):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        import cudnn
        types = {"half": cudnn.data_type.HALF, "float": cudnn.data_type.FLOAT}
        if dtype not in types:
            raise ValueError(f"dtype must be one of {sorted(types)}, got {dtype!r}")
        self.layout = layout
        io, f32 = types[dtype], cudnn.data_type.FLOAT
        p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1

        def strides(ch: int, rows: int, cols: int) -> list[int]:
            """Strides of a tensor cuDNN names [batch, ch, rows, cols], channels innermost or outermost."""
            if layout == "nhwc":
                return [rows * cols * ch, 1, cols * ch, ch]
            return [ch * rows * cols, rows * cols, cols, 1]

        self.handle = cudnn.create_handle()
        g = cudnn.pygraph(io_data_type=io, intermediate_data_type=f32, compute_data_type=f32, handle=self.handle)
        # cuDNN names dimensions N, C, H, W whatever the layout; the strides say where they lie.
        self.x = g.tensor(name="x", dim=[n, c, h, w], stride=strides(c, h, w), data_type=io)
        self.w = g.tensor(name="w", dim=[k, c, r, s], stride=strides(c, r, s), data_type=io)
        self.y = g.conv_fprop(image=self.x, weight=self.w, padding=[pad, pad], stride=[stride, stride],
                              dilation=[1, 1], compute_data_type=f32, name="conv")
        self.y.set_output(True).set_data_type(io).set_dim([n, k, p, q]).set_stride(strides(k, p, q))
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if not tensor_cores:
            g.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])
        g.check_support()
        g.build_plans(cudnn.build_plan_policy.ALL)
        self.graph = g

    def plan_count(self) -> int:
        return self.graph.get_execution_plan_count()

    def plan_name(self, index: int) -> str:
        return self.graph.get_plan_name_at_index(index)

    def launcher(self, index: int, x, w, out):
        """A function that enqueues plan ``index`` on (x, w) -> out; CuPy arrays in the graph's layout."""
        import cupy
        pack = {self.x: x.data.ptr, self.w: w.data.ptr, self.y: out.data.ptr}
        workspace = cupy.empty(max(1, self.graph.get_workspace_size_plan_at_index(index)), dtype=cupy.uint8)
        return lambda: self.graph.execute_plan_at_index(pack, workspace.data.ptr, index, handle=self.handle)

    def time_plans(self, x, w, out, repeat: int = 20) -> list[PlanTiming]:
        """Every plan the heuristics offered, timed on the same inputs; plans that did not run say why
        (among them those deselected: tensor-core plans when ``tensor_cores=False``)."""
        from .timing import benchmark
        rows = []
        for i in range(self.plan_count()):
            name = self.plan_name(i)
            try:
                t = benchmark(self.launcher(i, x, w, out), warmup=3, repeat=repeat)
                rows.append(PlanTiming(i, name, t.median_ms))
            except Exception as err:  # deselected, or a plan the heuristics list but this GPU cannot build or run
                rows.append(PlanTiming(i, name, None, f"{type(err).__name__}: {str(err)[:80]}"))
        return rows

    @staticmethod
    def fastest(plans: list[PlanTiming]) -> PlanTiming:
        """The fastest plan that ran; an error naming how many were tried when none did."""
        ran = [p for p in plans if p.ms is not None]
        if not ran:
            raise RuntimeError(f"none of cuDNN's {len(plans)} plans ran on this problem")
        return min(ran, key=lambda p: p.ms)
