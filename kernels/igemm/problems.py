"""The convolution the steps compute: the problem, the chapter's problems, the float32 reference and its
verdict, the layers a step refuses, argument validation, and how a step cuts the problem's K.

The convolution, in the layouts cuDNN's NHWC kernels use:
    x (N, H, W, C) fp16, w (K, R, S, C) fp16  ->  y (N, P, Q, K) fp16, accumulated in fp32,
    y[n, p, q, k] = sum over r, s, c of x[n, p*stride - pad + r, q*stride - pad + s, c] * w[k, r, s, c]
seen as a GEMM  Y[M, K] = A[M, RSC] @ B[K, RSC]^T  with M = N*P*Q: row m of A is the input patch under
output pixel m ("img2col"), never materialized; row k of B is filter k as it lies in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..harness import check, cudnn_conv, device
from .registry import BLOCK_M, BLOCK_N, EPILOGUE, REGISTRY, SPECIALIZED, WS_BLOCK_N, Step, step_info

CHUNK = 8  # fp16 channels per 16-byte load: C and K must be multiples of it
MAX_ELEMENTS = 2**31 - 1  # the CUDA C++ steps index with 32-bit integers
IM2COL_MAX_STRIDE = 8  # steps 10-12: the TMA engine's traversal stride is at most 8
IM2COL_CORNER = 128  # steps 10-12: a 4D im2col map's box corners (-pad, pad - (R - 1)) lie in [-128, 127]


@dataclass(frozen=True)
class Problem:
    """One convolution; ``k`` is the number of output channels (the GEMM's N)."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int = 3
    s: int = 3
    pad: int = 1
    stride: int = 1

    def __post_init__(self):
        # positive integer sizes and stride, a padding >= 0 and an output of a pixel at least, each
        # refused in words naming the constraint
        cudnn_conv.operand_shapes(self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.pad, self.stride, "nhwc")

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad - self.r) // self.stride + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad - self.s) // self.stride + 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, N, K) of the implicit GEMM."""
        return self.n * self.p * self.q, self.k, self.r * self.s * self.c

    @property
    def flops(self) -> int:
        m, n, k = self.gemm
        return 2 * m * n * k

    @property
    def x_shape(self) -> tuple:
        return (self.n, self.h, self.w, self.c)

    @property
    def w_shape(self) -> tuple:
        return (self.k, self.r, self.s, self.c)

    @property
    def y_shape(self) -> tuple:
        return (self.n, self.p, self.q, self.k)

    @property
    def bytes_compulsory(self) -> int:
        """fp16 input, filter and output, each moved through DRAM once."""
        return 2 * (int(np.prod(self.x_shape)) + int(np.prod(self.w_shape)) + int(np.prod(self.y_shape)))

    def grid(self) -> tuple[int, int]:
        """Blocks of the tensor-core steps: 128-row tiles of M by 128-column tiles of N."""
        m, n, _ = self.gemm
        return -(-m // BLOCK_M), -(-n // BLOCK_N)

    def ws_tiles(self) -> int:
        """Steps 7-10's 128x256 tiles, in the order their blocks walk them."""
        return self.tiles(WS_BLOCK_N)

    def tiles(self, block_n: int = BLOCK_N) -> int:
        """Output tiles of 128 rows by ``block_n`` columns."""
        m, n, _ = self.gemm
        return -(-m // BLOCK_M) * -(-n // block_n)

    def label(self) -> str:
        return (
            f"x[{self.n},{self.h},{self.w},{self.c}] * w[{self.k},{self.r},{self.s},{self.c}] "
            f"pad {self.pad} stride {self.stride}"
        )


# The source's problem (DIGEST 004): M = 50176, N = 512, K = 2304, 118.4 GFLOP.
PROBLEM = Problem(n=256, h=14, w=14, c=256, k=512)
# Small enough for the simulator, and odd: M = 60, N = 24 and K = 144 are no multiples of any tile.
CI_PROBLEM = Problem(n=2, h=5, w=6, c=16, k=24)
# Shapes the tensor-core steps must get right on a GPU: ragged M, N and K, stride 2, 1x1 filters.
ODD_PROBLEMS = (
    Problem(n=3, h=7, w=9, c=40, k=136),
    Problem(n=1, h=13, w=11, c=8, k=8, pad=1, stride=2),
    Problem(n=2, h=9, w=9, c=24, k=64, r=1, s=1, pad=0),
    Problem(n=5, h=14, w=14, c=256, k=512),
)
FIRST_LAYER = Problem(n=2, h=9, w=9, c=3, k=16)  # C = 3: only the naive step takes it


def gemm_problem(k: int, m: int = 4096, n: int = 4096) -> Problem:
    """A plain GEMM as a 1x1 convolution: M = 64 x (m/64) pixels, N = n filters, K = k channels."""
    k, m, n = (check.positive_int(v, name) for v, name in ((k, "k"), (m, "m"), (n, "n")))
    if m % 64:
        raise ValueError(f"m must be a multiple of 64 (64 x m/64 pixels), got {m}")
    return Problem(n=1, h=64, w=m // 64, c=k, k=n, r=1, s=1, pad=0)


def require_problem(problem) -> None:
    if not isinstance(problem, Problem):
        raise TypeError(
            f"problem: expected a Problem (such as CI_PROBLEM or gemm_problem(k)), got "
            f"{type(problem).__name__} {problem!r}"
        )


def random_inputs(problem: Problem, rng: np.random.Generator, xp=np) -> tuple:
    """x and w uniform in [-1, 1), fp16, as ``xp`` arrays."""
    require_problem(problem)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a NumPy Generator, np.random.default_rng(seed), got {type(rng).__name__}")
    x = rng.uniform(-1, 1, problem.x_shape).astype(np.float16)
    w = rng.uniform(-1, 1, problem.w_shape).astype(np.float16)
    return xp.asarray(x), xp.asarray(w)


def array_module(a):
    """The array module for arrays like ``a``: NumPy for host arrays and in the simulator, else CuPy."""
    return np if isinstance(a, np.ndarray) else device.xp()


def reference(
    x, w, *, pad: int = 1, stride: int = 1, bias=None, alpha: float = 1.0, relu: bool = False, dtype=np.float32
):
    """The convolution in ``dtype`` (NumPy or CuPy, following ``x``): one matrix product per filter tap.

    Float32 is enough to judge fp16 inputs (its rounding is 2^-24 against fp16's 2^-11) and keeps the
    full problem fast on a GPU; tests on small sizes pass ``dtype=np.float64``.
    """
    pad = check.nonnegative_int(pad, "pad")
    stride = check.positive_int(stride, "stride")
    xp = array_module(x)
    if len(x.shape) != 4 or len(w.shape) != 4 or w.shape[3] != x.shape[3]:
        raise ValueError(
            f"x and w: expected NHWC input and KRSC filters with the same channels (last axis), "
            f"got shapes {tuple(x.shape)} and {tuple(w.shape)}"
        )
    n, h, wd, c = x.shape
    k, r, s, _ = w.shape
    p, q = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    padded = xp.zeros((n, h + 2 * pad, wd + 2 * pad, c), dtype=dtype)
    padded[:, pad : pad + h, pad : pad + wd, :] = x
    wf = w.astype(dtype)
    y = xp.zeros((n * p * q, k), dtype=dtype)
    for i in range(r):
        for j in range(s):
            patch = padded[:, i : i + stride * (p - 1) + 1 : stride, j : j + stride * (q - 1) + 1 : stride, :]
            y += patch.reshape(-1, c) @ wf[:, i, j, :].T
    y = alpha * y
    if bias is not None:
        y += xp.asarray(bias, dtype=dtype)
    if relu:
        y = xp.maximum(y, 0)
    return y.reshape(n, p, q, k)


def compare(out, ref, problem: Problem, name: str | None = None, scale: float = 1.0) -> check.CheckResult:
    """The chapter's verdict for inputs uniform in [-1, 1): relative Frobenius error <= 1e-2, and no
    element off by more than 1e-2 sqrt(RSC) x ``scale`` -- 3% of the outputs' standard deviation
    sqrt(RSC)/3, yet over 10 times fp16's rounding of the largest outputs -- so a wrong row cannot hide
    in the norm."""
    require_problem(problem)
    atol = 1e-2 * np.sqrt(problem.gemm[2]) * scale
    return check.compare(out, ref, atol=float(f"{atol:.3g}"), rtol=1e-2, name=name or problem.label())


def refusal(step: int, problem: Problem) -> str | None:
    """Why ``step`` cannot take the layer ``problem`` -- its channels, its size, or a stride or padding
    that its input gather cannot describe -- naming the constraint and the latest step that takes the
    layer; None if it can."""
    require_problem(problem)
    why = _broken_limit(step_info(step), problem)
    if why is None:
        return None
    return why.format(taker=max(s.number for s in REGISTRY if _broken_limit(s, problem) is None))


def _broken_limit(info: Step, problem: Problem) -> str | None:
    """The first limit of the step ``info`` that ``problem`` breaks, in words whose ``{taker}`` refusal
    fills in; None if it breaks none."""
    c, k = problem.c, problem.k
    if info.cuda_cpp:  # 16-byte loads and stores of 8 fp16 channels, 32-bit indices
        if c % CHUNK:
            return (
                f"C = {c} is not a multiple of {CHUNK}: the tensor-core steps load {CHUNK} fp16 "
                f"channels (16 bytes) at a time; pad the channels with zeros "
                f"(a first layer's C = 3 becomes 8) or use step {{taker}}"
            )
        if k % CHUNK:
            return (
                f"K = {k} output channels is not a multiple of {CHUNK}: the tensor-core steps "
                f"store {CHUNK} channels at a time; pad the filters with zeros or use step {{taker}}"
            )
        for name, shape in (("x", problem.x_shape), ("w", problem.w_shape), ("y", problem.y_shape)):
            if int(np.prod(shape)) > MAX_ELEMENTS:
                return (
                    f"{name} has {int(np.prod(shape))} elements; the CUDA C++ steps index "
                    f"with 32-bit integers (at most {MAX_ELEMENTS}): split the batch"
                )
    if info.tma_im2col:  # the TMA engine's traversal stride, and its box corners along H and W
        if problem.stride > IM2COL_MAX_STRIDE:
            return (
                f"stride {problem.stride}: step {info.number} gathers the input with the TMA engine, whose "
                f"im2col stride is at most {IM2COL_MAX_STRIDE}; use step {{taker}}, whose threads gather it"
            )
        corners = (-problem.pad, problem.pad - (problem.r - 1), problem.pad - (problem.s - 1))
        if not all(-IM2COL_CORNER <= v < IM2COL_CORNER for v in corners):
            return (
                f"pad {problem.pad} with a {problem.r}x{problem.s} filter: step {info.number}'s im2col box "
                f"corners {corners} must lie in [-{IM2COL_CORNER}, {IM2COL_CORNER - 1}]; use step {{taker}}, "
                f"whose threads gather it"
            )
    return None


def validate(step: int, x, w, out=None, *, pad: int = 1, stride: int = 1, bias=None) -> Problem:
    """Check every argument of ``step`` and return the Problem it describes; errors name the constraint."""
    info = step_info(step)
    check.require_array(x, "x (NHWC input)", dtype=np.float16, ndim=4)
    check.require_array(w, "w (KRSC filters)", dtype=np.float16, ndim=4)
    n, h, wd, c = x.shape
    k, r, s, cw = w.shape
    if cw != c:
        hint = ""
        if w.shape[1] == c:
            hint = " -- it looks like KCRS (PyTorch's layout): pass w.transpose(0, 2, 3, 1) made contiguous"
        elif x.shape[1] == cw:
            hint = " -- x looks like NCHW: pass x.transpose(0, 2, 3, 1) made contiguous"
        raise ValueError(
            f"w: expected KRSC filters whose last axis matches x's channels C = {c} (NHWC); "
            f"got w of shape {tuple(w.shape)}{hint}"
        )
    if isinstance(pad, bool) or not (isinstance(pad, (int, np.integer)) and pad >= 0):
        raise ValueError(f"pad must be an integer >= 0, got {pad!r}")
    if isinstance(stride, bool) or not (isinstance(stride, (int, np.integer)) and stride >= 1):
        raise ValueError(f"stride must be an integer >= 1, got {stride!r}")
    problem = Problem(n, h, wd, c, k, r, s, int(pad), int(stride))
    if why := refusal(step, problem):
        raise ValueError(why)
    if out is not None:
        check.require_array(out, "out (NPQK output)", dtype=np.float16, shape=problem.y_shape)
    if bias is not None:
        if not info.epilogue:
            raise ValueError(
                f"step {step} computes the plain convolution; bias, alpha and ReLU are fused in steps {EPILOGUE}"
            )
        check.require_array(bias, "bias", dtype=np.float32, shape=(k,))
        if info.specialized and check.address(bias) % 8:
            raise ValueError(
                f"bias: steps {SPECIALIZED} read it two channels (8 bytes) at a time, so it "
                f"must be 8-byte aligned (a slice such as b[1:] may not be: pass a copy)"
            )
    if out is not None:
        check.require_output(out, "out", {"x": x, "w": w, "bias": bias})
    if info.cuda_cpp:
        for name, a in (("x", x), ("w", w), ("out", out)):
            if a is not None and check.address(a) % 16:
                raise ValueError(f"{name}: the tensor-core steps need 16-byte aligned arrays")
    return problem


def k_steps(problem: Problem, step: int | None = None) -> int:
    """The 64-tap K steps of the wgmma steps' main loop on ``problem``; counted tap by tap, each tap's
    C rounded up to 64, for a ``step`` that loads the input by im2col TMA."""
    if step is not None and step_info(step).tma_im2col:
        return problem.r * problem.s * -(-problem.c // 64)
    return -(-problem.gemm[2] // 64)


def split_plan(problem: Problem, splits: int, step: int | None = None) -> tuple[int, int]:
    """(K steps per split, splits that get any): ``splits`` shares of ``step``'s K steps (k_steps), the
    last one short."""
    steps = k_steps(problem, step)
    if not (isinstance(splits, (int, np.integer)) and not isinstance(splits, bool) and 1 <= splits <= steps):
        raise ValueError(f"splits must be an integer from 1 to the problem's {steps} K steps of 64, got {splits!r}")
    per = -(-steps // int(splits))
    return per, -(-steps // per)
