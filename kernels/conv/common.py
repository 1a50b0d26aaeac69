"""What every convolution stage shares: the problems, the float64 reference, the FLOP count, the two
layouts, and the one wrapper that validates a stage's arguments and launches it.

The convolution is direct, 3x3, stride 1, zero-padded so the output is as large as the input:
    y[n, k, h, w] = sum over c, r, s of x[n, c, h + r - 1, w + s - 1] * f[k, c, r, s]
Layout "nchw": x (N, C, H, W), f (K, C, 3, 3), y (N, K, H, W).
Layout "nhwc": x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K) -- channels innermost, so the threads
of a warp that own neighbouring output channels touch neighbouring words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..harness import check, device

R = S = 3  # filter height and width
LAYOUTS = ("nchw", "nhwc")


@dataclass(frozen=True)
class Problem:
    name: str
    n: int
    c: int
    k: int
    h: int
    w: int

    def __post_init__(self):
        # A negative or fractional size would give negative FLOPs and shapes NumPy refuses deep inside.
        if not isinstance(self.name, str):
            raise TypeError(f"Problem: name must be a string, got {self.name!r}")
        for axis in ("n", "c", "k", "h", "w"):
            check.positive_int(getattr(self, axis), f"Problem {self.name!r}: {axis}")

    @property
    def flops(self) -> int:
        """Two operations (multiply, add) per filter tap, as the source counts them."""
        return 2 * self.n * self.k * self.h * self.w * self.c * R * S

    @property
    def bytes_compulsory(self) -> int:
        """Bytes every kernel must move through DRAM at least once: input, filter, output."""
        return 4 * (self.n * self.c * self.h * self.w + self.k * self.c * R * S + self.n * self.k * self.h * self.w)

    @property
    def pixels(self) -> int:
        return self.n * self.h * self.w


PROBLEMS = {
    # The source's two problems (DIGEST 002): a large early layer and a small deep one.
    "conv1": Problem("conv1", n=16, c=64, k=64, h=224, w=224),
    "conv2": Problem("conv2", n=16, c=512, k=512, h=14, w=14),
    # CPU runs: the simulator executes every thread in Python. Sizes avoid multiples of any tile.
    "tiny": Problem("tiny", n=1, c=3, k=5, h=7, w=7),
    # The smallest odd problem the vectorised (CUDA C++) stages accept: channels a multiple of 4.
    "odd4": Problem("odd4", n=1, c=12, k=20, h=13, w=13),
}


def require_problem(p) -> None:
    if not isinstance(p, Problem):
        raise TypeError(f"p: expected a Problem (one of PROBLEMS: {list(PROBLEMS)}), got {type(p).__name__} {p!r}")


def shapes(p: Problem, layout: str) -> tuple[tuple, tuple, tuple]:
    """Shapes of (x, f, y) in ``layout``."""
    if layout == "nchw":
        return (p.n, p.c, p.h, p.w), (p.k, p.c, R, S), (p.n, p.k, p.h, p.w)
    if layout == "nhwc":
        return (p.n, p.h, p.w, p.c), (R, S, p.c, p.k), (p.n, p.h, p.w, p.k)
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


FILTER_AXES = {"nchw": "(K, C, 3, 3)", "nhwc": "(3, 3, C, K)"}
INPUT_AXES = {"nchw": "(N, C, H, W)", "nhwc": "(N, H, W, C)"}


def problem_of(x_shape: tuple, f_shape: tuple, layout: str) -> Problem:
    """Read the problem back from array shapes, checking that input and filter agree; arrays in the
    other layout are named as such (a transposed filter would otherwise read as a 5x3 filter)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    other = LAYOUTS[1 - LAYOUTS.index(layout)]
    fix = (
        "convert NCHW/KCRS arrays with to_layout(x, f, 'nhwc')"
        if layout == "nhwc"
        else "transpose x to NCHW and f to KCRS"
    )
    taps = {"nchw": tuple(f_shape[2:]), "nhwc": tuple(f_shape[:2])}
    if taps[layout] != (R, S) and taps[other] == (R, S):
        raise ValueError(
            f"f: this stage takes {layout} filters {FILTER_AXES[layout]}, got shape {tuple(f_shape)}, "
            f"the {other} layout {FILTER_AXES[other]}: {fix}"
        )
    if layout == "nchw":
        (n, c, h, w), (k, fc, r, s) = x_shape, f_shape
    else:
        (n, h, w, c), (r, s, fc, k) = x_shape, f_shape
    if (r, s) != (R, S):
        raise ValueError(f"filter: only 3x3 filters are supported, got {r}x{s} ({layout} filter shape {f_shape})")
    if fc != c:
        hint = ""
        if (x_shape[3] if layout == "nchw" else x_shape[1]) == fc:
            hint = f"; x of shape {tuple(x_shape)} looks like {other} {INPUT_AXES[other]}: {fix}"
        raise ValueError(f"filter has {fc} input channels but the input has {c} ({layout} layout){hint}")
    return Problem("given", n=n, c=c, k=k, h=h, w=w)


def random_inputs(p: Problem, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fresh float32 input (NCHW) and filter (KCRS) in [-1, 1), on the host."""
    require_problem(p)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (p.n, p.c, p.h, p.w)).astype(np.float32)
    f = rng.uniform(-1, 1, (p.k, p.c, R, S)).astype(np.float32)
    return x, f


def to_layout(x_nchw, f_kcrs, layout: str):
    """Input and filter, given in NCHW/KCRS, rearranged (contiguous) for ``layout``; works for NumPy and CuPy."""
    if layout == "nchw":
        return x_nchw, f_kcrs
    for name, a, axes in (("x_nchw", x_nchw, "(N, C, H, W)"), ("f_kcrs", f_kcrs, "(K, C, 3, 3)")):
        if len(getattr(a, "shape", ())) != 4:
            raise ValueError(f"{name}: expected a 4-D array {axes}, got shape {getattr(a, 'shape', type(a).__name__)}")
    if layout == "nhwc":
        xp = device.xp() if not isinstance(x_nchw, np.ndarray) else np
        return (xp.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1)), xp.ascontiguousarray(f_kcrs.transpose(2, 3, 1, 0)))
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def output_to_nchw(y, layout: str) -> np.ndarray:
    """A stage's output as a host NCHW array, to compare with the reference."""
    y = check.to_host(y)
    return y if layout == "nchw" else np.ascontiguousarray(y.transpose(0, 3, 1, 2))


def reference(x_nchw, f_kcrs) -> np.ndarray:
    """The convolution in float64 NumPy, NCHW: nine shifted matrix products over the padded input."""
    x = check.to_host(x_nchw).astype(np.float64)
    f = check.to_host(f_kcrs).astype(np.float64)
    if x.ndim != 4 or f.ndim != 4:
        raise ValueError(f"x and f: expected 4-D NCHW and KCRS arrays, got shapes {x.shape} and {f.shape}")
    problem_of(x.shape, f.shape, "nchw")
    n, c, h, w = x.shape
    padded = np.zeros((n, c, h + 2, w + 2))
    padded[:, :, 1:-1, 1:-1] = x
    y = np.zeros((n, f.shape[0], h, w))
    for r in range(R):
        for s in range(S):
            y += np.einsum("nchw,kc->nkhw", padded[:, :, r : r + h, s : s + w], f[:, :, r, s], optimize=True)
    return y


def tolerance(p: Problem) -> float:
    """Absolute tolerance for float32 sums of 9*C products of values in [-1, 1).

    Rounding error grows with the number of terms; 1e-5 relative (the chapter's bound) is checked
    separately on the Frobenius norm.
    """
    require_problem(p)
    return 1e-6 * 9 * p.c * 4


@dataclass(frozen=True)
class Stage:
    """One version of the kernel: its layout, the constraints it needs and how to launch it.

    ``launch(x, f, y, problem)`` enqueues the kernel and returns without synchronising.
    ``c_multiple``/``k_multiple``: input/output channel counts must be multiples of these (vector loads).
    """

    name: str
    layout: str
    launch: Callable
    device: bool = True  # False for the CPU stage
    c_multiple: int = 1
    k_multiple: int = 1
    needs_gpu: bool = False  # CUDA C++ stages cannot run in the simulator
    options: dict = field(default_factory=dict)


def validate(stage: Stage, x, f, y=None) -> Problem:
    """Check every argument against what ``stage`` supports; raise naming the broken constraint."""
    if not isinstance(stage, Stage):
        raise TypeError(
            f"stage: expected a Stage object (s1_naive.STAGE, one of stages.all_gpu(), ...), "
            f"got {type(stage).__name__} {stage!r}"
        )
    if stage.layout not in LAYOUTS:
        raise ValueError(f"stage {stage.name}: unknown layout {stage.layout!r}")
    if stage.device:
        check.require_array(x, "x", dtype=np.float32, ndim=4)
        check.require_array(f, "f", dtype=np.float32, ndim=4)
    else:
        for a, name in ((x, "x"), (f, "f")):
            if not isinstance(a, np.ndarray):
                raise TypeError(
                    f"{name}: stage {stage.name} runs on the CPU and needs a NumPy array, got {type(a).__name__}"
                )
            if a.dtype != np.float32 or a.ndim != 4 or not a.flags.c_contiguous or a.size == 0:
                raise ValueError(
                    f"{name}: expected a non-empty C-contiguous float32 4-D array, got {a.dtype} of shape {a.shape}"
                )
    p = problem_of(tuple(x.shape), tuple(f.shape), stage.layout)
    if p.c % stage.c_multiple:
        raise ValueError(
            f"stage {stage.name} loads {stage.c_multiple} input channels at once: C must be a "
            f"multiple of {stage.c_multiple}, got C = {p.c}"
        )
    if p.k % stage.k_multiple:
        raise ValueError(
            f"stage {stage.name} stores {stage.k_multiple} output channels at once: K must be a "
            f"multiple of {stage.k_multiple}, got K = {p.k}"
        )
    if p.n * max(p.c, p.k) * p.h * p.w >= 2**31:
        raise ValueError("tensors with 2**31 or more elements are not supported (32-bit indices)")
    if y is not None:
        y_shape = shapes(p, stage.layout)[2]
        if stage.device:
            check.require_array(y, "y", dtype=np.float32, shape=y_shape)
        elif not (isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == y_shape and y.flags.c_contiguous):
            raise ValueError(f"y: expected a C-contiguous float32 NumPy array of shape {y_shape}")
        check.require_output(y, "y", {"x": x, "f": f})
    if stage.needs_gpu and device.MODE != device.GPU:
        raise RuntimeError(f"stage {stage.name} is CUDA C++ and needs a GPU; in the simulator it is compiled only")
    if stage.c_multiple % 4 == 0:
        for a, name in ((x, "x"), (f, "f"), (y, "y")):
            if a is not None and check.address(a) % 16:
                raise ValueError(f"{name}: stage {stage.name} moves float4s and needs a 16-byte aligned array")
    return p


def launcher(stage: Stage, x, f, y) -> Callable[[], None]:
    """Validate once and return a zero-argument function that launches ``stage`` (for timing)."""
    if y is None:
        raise TypeError("y: expected the output array the launches write (shapes(p, stage.layout)[2]), got None")
    p = validate(stage, x, f, y)
    return lambda: stage.launch(x, f, y, p)


def run(stage: Stage, x, f):
    """Allocate a poisoned output, run ``stage`` on (x, f) in its layout and return y (same layout)."""
    p = validate(stage, x, f)
    y_shape = shapes(p, stage.layout)[2]
    xp = np if not stage.device else device.xp()
    y = check.poison(xp.empty(y_shape, dtype=np.float32))
    stage.launch(x, f, y, p)
    return y


def check_stage(stage: Stage, p: Problem, seed: int | None = None) -> check.CheckResult:
    """Run ``stage`` on fresh random inputs of problem ``p`` and compare with the float64 reference.

    Passes when max|err| is within ``tolerance(p)`` and the relative Frobenius error is <= 1e-5.
    """
    x, f = random_inputs(p, seed)
    xs, fs = to_layout(x, f, stage.layout)
    if stage.device:
        xs, fs = device.xp().asarray(xs), device.xp().asarray(fs)
    y = run(stage, xs, fs)
    return check.compare(
        output_to_nchw(y, stage.layout),
        _seeded_reference(p, int(seed)) if isinstance(seed, (int, np.integer)) else reference(x, f),
        atol=tolerance(p),
        rtol=1e-5,
        name=f"{stage.name} on {p.n}x{p.c}x{p.h}x{p.w} -> {p.k}",
    )


@lru_cache(maxsize=4)
def _seeded_reference(p: Problem, seed: int) -> np.ndarray:
    """The reference of ``random_inputs(p, seed)``: the same for every stage checked with that seed, so
    computed once (conv2's takes seconds)."""
    return reference(*random_inputs(p, seed))
