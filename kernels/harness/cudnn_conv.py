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

import numpy as np

from . import check
from .cudnn_lib import missing, version  # noqa: F401  (importable from here too; device.software imports cudnn_lib)


@dataclass
class PlanTiming:
    index: int
    name: str
    ms: float | None  # None: the plan did not build or run
    note: str = ""


LAYOUTS = ("nhwc", "nchw")
DTYPES = {"half": np.float16, "float": np.float32}


def operand_shapes(
    n: int, c: int, h: int, w: int, k: int, r: int, s: int, pad: int, stride: int, layout: str
) -> dict[str, tuple]:
    """The array shapes of input "x", filters "w" and output "y" of a graph: NHWC, KRSC and NPQK for
    "nhwc"; NCHW, KCRS and NKPQ for "nchw"."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    n, c, h, w, k, r, s, stride = (
        check.positive_int(v, name)
        for v, name in zip((n, c, h, w, k, r, s, stride), ("n", "c", "h", "w", "k", "r", "s", "stride"), strict=True)
    )
    pad = check.nonnegative_int(pad, "pad")
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    if p < 1 or q < 1:
        raise ValueError(f"the {r}x{s} filter is larger than the padded {h}x{w} input (pad {pad})")
    if layout == "nhwc":
        return {"x": (n, h, w, c), "w": (k, r, s, c), "y": (n, p, q, k)}
    return {"x": (n, c, h, w), "w": (k, c, r, s), "y": (n, k, p, q)}


def device_pointers(x, w, out, shapes: dict[str, tuple], dtype) -> tuple[int, int, int]:
    """The device addresses of (x, w, out) after checking each against the graph: a GPU array of
    ``dtype``, C-contiguous, of its shape in ``shapes``. cuDNN checks none of this: a wrong dtype
    gives wrong numbers, a small output is overrun."""
    pointers = []
    for name, a in (("x", x), ("w", w), ("y", out)):
        check.require_array(a, name, dtype=dtype, shape=shapes[name])
        if not hasattr(a, "__cuda_array_interface__"):
            raise TypeError(f"{name}: cuDNN needs a GPU array (cupy.ndarray), got {type(a).__name__}")
        pointers.append(check.address(a))
    return tuple(pointers)


class ConvFprop:
    """One convolution graph: all ``dtype`` ("half" or "float"), FP32 compute, in ``layout``: NHWC
    input, KRSC filters and NHWC output, or NCHW, KCRS and NCHW. ``tensor_cores=False`` drops the plans
    cuDNN marks as using tensor cores (for "float": TF32), so the baseline computes in FP32 like the
    kernels it is compared with."""

    def __init__(
        self,
        n: int,
        c: int,
        h: int,
        w: int,
        k: int,
        r: int = 3,
        s: int = 3,
        pad: int = 1,
        stride: int = 1,
        dtype: str = "half",
        tensor_cores: bool = True,
        layout: str = "nhwc",
    ):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.shapes = operand_shapes(n, c, h, w, k, r, s, pad, stride, layout)
        self.dtype = DTYPES[dtype]
        if why := missing():
            raise RuntimeError(why)  # rather than an ImportError from deep inside the frontend
        import cudnn

        self.layout = layout
        io = {"half": cudnn.data_type.HALF, "float": cudnn.data_type.FLOAT}[dtype]
        f32 = cudnn.data_type.FLOAT
        p, q = self.shapes["y"][1:3] if layout == "nhwc" else self.shapes["y"][2:]

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
        self.y = g.conv_fprop(
            image=self.x,
            weight=self.w,
            padding=[pad, pad],
            stride=[stride, stride],
            dilation=[1, 1],
            compute_data_type=f32,
            name="conv",
        )
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
        """A function that enqueues plan ``index`` on (x, w) -> out: GPU arrays of the graph's dtype,
        shapes and layout (``device_pointers`` says which is wrong)."""
        pointers = device_pointers(x, w, out, self.shapes, self.dtype)
        pack = dict(zip((self.x, self.w, self.y), pointers, strict=True))
        import cupy

        workspace = cupy.empty(max(1, self.graph.get_workspace_size_plan_at_index(index)), dtype=cupy.uint8)
        return lambda: self.graph.execute_plan_at_index(pack, workspace.data.ptr, index, handle=self.handle)

    def time_plans(self, x, w, out, repeat: int = 20) -> list[PlanTiming]:
        """Every plan the heuristics offered, timed on the same inputs; plans that did not run say why
        (among them those deselected: tensor-core plans when ``tensor_cores=False``)."""
        from .timing import benchmark

        device_pointers(x, w, out, self.shapes, self.dtype)  # wrong arrays are the caller's error, not a plan's
        rows = []
        for i in range(self.plan_count()):
            name = self.plan_name(i)
            try:
                t = benchmark(self.launcher(i, x, w, out), warmup=3, repeat=repeat)
                rows.append(PlanTiming(i, name, t.median_ms))
            except Exception as err:  # deselected, or a plan the heuristics list but this GPU cannot build or run
                rows.append(PlanTiming(i, name, None, f"{type(err).__name__}: {str(err)[:80]}"))
        return rows

    def fastest_launcher(self, x, w, out, repeat: int = 20):
        """The launcher of the fastest plan on these operands, every plan timed first (``time_plans``)."""
        return self.launcher(self.fastest(self.time_plans(x, w, out, repeat=repeat)).index, x, w, out)

    @staticmethod
    def fastest(plans: list[PlanTiming]) -> PlanTiming:
        """The fastest plan that ran; an error naming how many were tried when none did."""
        ran = [p for p in plans if p.ms is not None]
        if not ran:
            raise RuntimeError(f"none of cuDNN's {len(plans)} plans ran on this problem")
        return min(ran, key=lambda p: p.ms)


def autotuned_torch():
    """PyTorch set up as its users run convolutions fastest: ``cudnn.benchmark`` on (the first call of a
    shape times cuDNN's algorithms and keeps the fastest) and TF32 off (FP32 stays FP32); None, with the
    reason printed, where PyTorch is not installed."""
    try:
        import torch
    except ImportError as err:
        print(f"PyTorch left out: {err}")
        return None
    torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, False
    return torch
