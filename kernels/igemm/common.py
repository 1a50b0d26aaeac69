"""What every implicit-GEMM step shares: the problem, the float32 reference, the FLOP count, argument
validation, and the one launcher that runs any step.

The convolution, in the layouts cuDNN's NHWC kernels use:
    x (N, H, W, C) fp16, w (K, R, S, C) fp16  ->  y (N, P, Q, K) fp16, accumulated in fp32,
    y[n, p, q, k] = sum over r, s, c of x[n, p*stride - pad + r, q*stride - pad + s, c] * w[k, r, s, c]
seen as a GEMM  Y[M, K] = A[M, RSC] @ B[K, RSC]^T  with M = N*P*Q: row m of A is the input patch under
output pixel m ("img2col"), never materialized; row k of B is filter k as it lies in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from ..harness import check, device

BLOCK_M = BLOCK_N = 128  # the block tile of steps 2-6 (the source's 128x128)
THREADS = 128  # steps 2-5: 4 warps of 64x64
WGMMA_THREADS = 256  # step 6: 2 warpgroups of 64x128
WS_BLOCK_N = 256  # steps 7-10: 128x256 tiles, one copying and two multiplying warpgroups (steps 11-12: 128x128)
WS_THREADS = 384
WS_REGISTERS = 168  # their setmaxnreg split adds up to 384 threads x 168 registers
CHUNK = 8  # fp16 channels per 16-byte load: C and K must be multiples of it
# Steps 3-5: one 128x32 tile = 4 blocks of 128 rows x 8 halves (2048 B), 32 B apart (the source's gap).
CHUNK_STRIDE_BYTES = 128 * 16 + 32
TILE_BYTES = 4 * CHUNK_STRIDE_BYTES
STAGE_BYTES = 2 * TILE_BYTES  # one A tile and one B tile
EPILOGUE_BYTES = BLOCK_M * (BLOCK_N + 8) * 2  # steps 5-6 re-tile the fp16 output with 8 halves of padding per row
WGMMA_STAGE_BYTES = 2 * BLOCK_M * 64 * 2  # step 6: A and B tiles of 128 rows x 64 halves, swizzled
WS_STAGE_BYTES = (BLOCK_M + WS_BLOCK_N) * 64 * 2  # steps 7-10: 128 rows of A and 256 of B, 64 halves each
TMA_STORE_COLS = 64  # steps 9-12: output channels per TMA store box (128-byte rows, the 128-byte swizzle)
WS_STAGING_BYTES = 2 * BLOCK_M * TMA_STORE_COLS * 2  # steps 9-12: two fp16 boxes (11-12: one per consumer)
WGMMA_ALIGN = 1024  # steps 6-12's swizzled tiles start on 1024-byte boundaries
MAX_ELEMENTS = 2**31 - 1  # the CUDA C++ steps index with 32-bit integers
IM2COL_MAX_STRIDE = 8  # steps 10-12: the TMA engine's traversal stride is at most 8
IM2COL_CORNER = 128  # steps 10-12: a 4D im2col map's box corners (-pad, pad - (R - 1)) lie in [-128, 127]
SPLIT_REDUCE_THREADS = 256  # per block of igemm_split_reduce, 8 outputs each
FIXUP_TILE = BLOCK_M * BLOCK_N  # step 12: fp32 partials per unit (a 128x128 tile)
NARROW_N = 64  # step 11's narrow build: 128x64 tiles (64x64 wgmma), for layers with 64 output channels


@dataclass(frozen=True)
class Step:
    """One step of the chapter: where it lives and what its launcher and a GPU need to know of it."""

    number: int
    source: str  # under kernels/, as cuda_cpp.load takes it
    kernel: str  # the entry point's name in the source
    title: str  # the idea, as the first line of the source names it
    threads: int  # per block
    stages: tuple[int, int] | None = None  # (min, max) pipeline depth: STAGES buffers of dynamic shared memory
    default_stages: int | None = None
    stage_bytes: int | None = None  # shared memory of one stage
    needs: tuple[str, int] | None = None  # its newest instruction, and the compute capability NVRTC first takes it for
    wgmma: bool = False  # built for sm_90a (Hopper's wgmma): compute capability 9.0 exactly
    epilogue: bool = False  # takes alpha, bias and ReLU
    specialized: bool = False  # warp-specialized: 128x256 tiles, a grid of `blocks` walking them
    ping_pong: bool = False  # its two consumer warpgroups take turns, each on a whole 128x128 tile
    x_bypass_l1: bool = False  # can be rebuilt with the input gather as first written (cp.async.cg)
    tma_filters: bool = False  # reads the filters through a TMA descriptor instead of a pointer
    tma_store: bool = False  # writes the output through a staging tile and a TMA descriptor
    tma_im2col: bool = False  # reads the input through an im2col TMA descriptor, K steps tap by tap
    split_k: bool = False  # can split each tile's K steps over blocks (``splits``), adding fp32 partials
    fixup: bool = False  # a tile's splits add the partials themselves, each its share; else igemm_split_reduce
    narrow_stages: int | None = None  # also builds NARROW_N-wide tiles (-DBLOCK_N), with at most this many stages
    max_registers: int = 255  # per thread, at most (tests/test_igemm.py checks each compile): bounds blocks per SM

    @property
    def pipelined(self) -> bool:
        return self.stages is not None

    @property
    def block_n(self) -> int:
        """Output channels per block tile: 256 for steps 7-10, 128 for the others and for ping-pong."""
        return WS_BLOCK_N if self.specialized and not self.ping_pong else BLOCK_N

    @property
    def widths(self) -> tuple:
        """The tile widths (output channels per tile) the step builds: its block_n, and NARROW_N if narrow."""
        return (self.block_n, NARROW_N) if self.narrow_stages else (self.block_n,)

    def stage_range(self, block_n: int | None = None) -> tuple | None:
        """(fewest, most) stages of the build ``block_n`` wide (default: the step's own width)."""
        if block_n in (None, self.block_n) or not self.pipelined:
            return self.stages
        return (self.stages[0], self.narrow_stages)

    @property
    def builds(self) -> tuple:
        """(stages, block_n) of the builds best_step weighs: each depth at the step's own width, and the
        narrow build at its deepest (its stages are a quarter smaller, so more of them fit)."""
        return tuple((d, self.block_n) for d in self.depths) + tuple((self.narrow_stages, n) for n in self.widths[1:])

    @property
    def depths(self) -> tuple:
        """Every pipeline depth the step takes; (None,) for a step without a pipeline."""
        return tuple(range(self.stages[0], self.stages[1] + 1)) if self.pipelined else (None,)

    @property
    def cuda_cpp(self) -> bool:
        """CUDA C++ on the tensor cores (steps 2 on), not Numba."""
        return self.source.endswith(".cu")


# The one list of steps, in order; everything below asks it. Steps 6-12 keep one wgmma batch in flight:
# 3 stages at least; 5 of steps 7-10's 48 KB no longer fit, 6 of step 11's 32 KB do. (Step 1's blocks
# are v1_naive.THREADS wide.)
REGISTRY = (
    Step(1, "igemm/v1_naive.py", "igemm_naive", "naive implicit GEMM", THREADS),
    Step(2, "igemm/v2_wmma.cu", "igemm_v2_wmma", "tensor cores through WMMA", THREADS, needs=("WMMA", 70)),
    Step(
        3,
        "igemm/v3_ldmatrix.cu",
        "igemm_v3_ldmatrix",
        "a bank-conflict-free shared layout",
        THREADS,
        needs=("mma.sync.m16n8k16", 80),
    ),
    Step(
        4,
        "igemm/v4_cp_async.cu",
        "igemm_v4_cp_async",
        "a multi-stage cp.async pipeline",
        THREADS,
        stages=(2, 5),
        default_stages=3,
        stage_bytes=STAGE_BYTES,
        needs=("cp.async", 80),
        x_bypass_l1=True,
    ),
    Step(
        5,
        "igemm/v5_epilogue.cu",
        "igemm_v5_epilogue",
        "the fused epilogue",
        THREADS,
        stages=(2, 5),
        default_stages=3,
        stage_bytes=STAGE_BYTES,
        needs=("cp.async", 80),
        epilogue=True,
        x_bypass_l1=True,
    ),
    Step(
        6,
        "igemm/v6_wgmma.cu",
        "igemm_v6_wgmma",
        "Hopper's warpgroup MMA (wgmma)",
        WGMMA_THREADS,
        stages=(3, 5),
        default_stages=4,
        stage_bytes=WGMMA_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        split_k=True,
        max_registers=128,  # two blocks of 256 threads per SM
    ),
    Step(
        7,
        "igemm/v7_warp_specialized.cu",
        "igemm_v7_warp_specialized",
        "warp specialization, a 128x256 tile and a persistent grid",
        WS_THREADS,
        stages=(3, 4),
        default_stages=4,
        stage_bytes=WS_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        specialized=True,
        max_registers=WS_REGISTERS,
    ),
    Step(
        8,
        "igemm/v8_tma_filters.cu",
        "igemm_v8_tma_filters",
        "the filter tile through the Tensor Memory Accelerator (TMA)",
        WS_THREADS,
        stages=(3, 4),
        default_stages=4,
        stage_bytes=WS_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        specialized=True,
        tma_filters=True,
        max_registers=WS_REGISTERS,
    ),
    Step(
        9,
        "igemm/v9_tma_store.cu",
        "igemm_v9_tma_store",
        "the output tile through shared memory and TMA stores",
        WS_THREADS,
        stages=(3, 4),
        default_stages=4,
        stage_bytes=WS_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        specialized=True,
        tma_filters=True,
        tma_store=True,
        max_registers=WS_REGISTERS,
    ),
    Step(
        10,
        "igemm/v10_tma_im2col.cu",
        "igemm_v10_tma_im2col",
        "the input tile through the TMA engine's im2col mode",
        WS_THREADS,
        stages=(3, 4),
        default_stages=4,
        stage_bytes=WS_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        specialized=True,
        tma_filters=True,
        tma_store=True,
        tma_im2col=True,
        max_registers=WS_REGISTERS,
    ),
    Step(
        11,
        "igemm/v11_ping_pong.cu",
        "igemm_v11_ping_pong",
        "two consumer warpgroups taking turns on their own tiles (ping-pong)",
        WS_THREADS,
        stages=(4, 6),
        default_stages=5,
        stage_bytes=WGMMA_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        specialized=True,
        tma_filters=True,
        tma_store=True,
        tma_im2col=True,
        ping_pong=True,
        narrow_stages=8,
        max_registers=WS_REGISTERS,
    ),
    Step(
        12,
        "igemm/v12_split_fixup.cu",
        "igemm_v12_split_fixup",
        "split K inside the persistent grid, each split adding its share of the tile's partials",
        WS_THREADS,
        stages=(4, 6),
        default_stages=5,
        stage_bytes=WGMMA_STAGE_BYTES,
        wgmma=True,
        epilogue=True,
        specialized=True,
        tma_filters=True,
        tma_store=True,
        tma_im2col=True,
        ping_pong=True,
        split_k=True,
        fixup=True,
        max_registers=WS_REGISTERS,
    ),
)
_BY_NUMBER = {s.number: s for s in REGISTRY}
# Views of the registry, for the notebook and the error messages.
STEPS = {s.number: (s.source, s.kernel) for s in REGISTRY}
PIPELINED = tuple(s.number for s in REGISTRY if s.pipelined)
EPILOGUE = tuple(s.number for s in REGISTRY if s.epilogue)
WGMMA = tuple(s.number for s in REGISTRY if s.wgmma)
SPECIALIZED = tuple(s.number for s in REGISTRY if s.specialized)
SPLIT_K = tuple(s.number for s in REGISTRY if s.split_k)
STAGE_RANGE = {s.number: s.stages for s in REGISTRY if s.pipelined}
NEEDS = {s.number: s.needs for s in REGISTRY if s.needs}


def step_info(step) -> Step:
    """The registry's record of ``step``; a ValueError naming the steps for anything else."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step not in _BY_NUMBER:
        raise ValueError(f"step must be one of {sorted(_BY_NUMBER)}, got {step!r}")
    return _BY_NUMBER[step]


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


def _module(a):
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
    xp = _module(x)
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


def require_tensor_core_shape(problem: Problem) -> None:
    """The shape constraints of the CUDA C++ steps (2-10), each error naming its remedy."""
    c, k = problem.c, problem.k
    if c % CHUNK:
        raise ValueError(
            f"C = {c} is not a multiple of {CHUNK}: the tensor-core steps load {CHUNK} fp16 "
            f"channels (16 bytes) at a time; pad the channels with zeros "
            f"(a first layer's C = 3 becomes 8) or use step 1"
        )
    if k % CHUNK:
        raise ValueError(
            f"K = {k} output channels is not a multiple of {CHUNK}: the tensor-core steps "
            f"store {CHUNK} channels at a time; pad the filters with zeros"
        )
    for name, shape in (("x", problem.x_shape), ("w", problem.w_shape), ("y", problem.y_shape)):
        if int(np.prod(shape)) > MAX_ELEMENTS:
            raise ValueError(
                f"{name} has {int(np.prod(shape))} elements; the CUDA C++ steps index "
                f"with 32-bit integers (at most {MAX_ELEMENTS}): split the batch"
            )


def require_im2col_geometry(problem: Problem, step: int) -> None:
    """What the TMA engine's im2col mode can describe: a traversal stride up to 8, and box corners
    (-pad, and pad - (R - 1) along H, pad - (S - 1) along W) within [-128, 127]. The remedy named is the
    last step before ``step`` whose threads gather the input."""
    gather = max(s.number for s in REGISTRY if s.number < step and s.cuda_cpp and not s.tma_im2col)
    if problem.stride > IM2COL_MAX_STRIDE:
        raise ValueError(
            f"stride {problem.stride}: step {step} gathers the input with the TMA engine, whose im2col "
            f"stride is at most {IM2COL_MAX_STRIDE}; use step {gather}, whose threads gather it"
        )
    corners = (-problem.pad, problem.pad - (problem.r - 1), problem.pad - (problem.s - 1))
    if not all(-IM2COL_CORNER <= v < IM2COL_CORNER for v in corners):
        raise ValueError(
            f"pad {problem.pad} with a {problem.r}x{problem.s} filter: step {step}'s im2col box corners "
            f"{corners} must lie in [-{IM2COL_CORNER}, {IM2COL_CORNER - 1}]; use step {gather}, whose "
            f"threads gather it"
        )


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
    if problem.p < 1 or problem.q < 1:
        raise ValueError(f"the {r}x{s} filter is larger than the padded {h}x{wd} input (pad {pad})")
    if info.cuda_cpp:
        require_tensor_core_shape(problem)
    if info.tma_im2col:
        require_im2col_geometry(problem, step)
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


def smem_bytes(step: int, stages: int, block_n: int | None = None) -> int:
    """Dynamic shared memory of a pipelined step: the stages, or step 5's re-tiled output if larger
    (the wgmma steps add room to align their tiles to 1024 bytes; steps 9-12 add their staging tiles).
    ``block_n``: step 11's narrow build, whose stages hold NARROW_N filter rows, not 128."""
    info = step_info(step)
    if not info.pipelined:
        raise ValueError(f"step: only steps {PIPELINED} have dynamic shared memory; step {step}'s is static")
    pipeline = stages * stage_bytes(step, block_n) + (WS_STAGING_BYTES if info.tma_store else 0)
    if info.wgmma:
        return pipeline + WGMMA_ALIGN
    return max(pipeline, EPILOGUE_BYTES) if info.epilogue else pipeline


def stage_bytes(step: int, block_n: int | None = None) -> int | None:
    """Shared memory of one pipeline stage of ``step`` at tile width ``block_n`` (default: its own); a
    narrow build's stage holds 128 input rows and ``block_n`` filter rows of 64 halves."""
    info = step_info(step)
    return info.stage_bytes if block_n in (None, info.block_n) else (BLOCK_M + block_n) * 64 * 2


def swizzle128(row: int, chunk: int) -> int:
    """Steps 6-12's shared layout (as swizzle128 in hopper.cuh): byte offset of 16-byte chunk ``chunk``
    (0-7) of row ``row`` in a tile of 128-byte rows, the chunk index XORed with row % 8 (wgmma's
    128-byte swizzle)."""
    return row * 128 + ((chunk ^ (row & 7)) << 4)


def default_stages(step: int) -> int | None:
    """The pipeline depth ``step`` runs with unless told; None for a step without a pipeline."""
    return step_info(step).default_stages


def threads(step: int) -> int:
    return step_info(step).threads


def unsupported(step: int, props: dict, stages: int | None = None, block_n: int | None = None) -> str | None:
    """Why the GPU ``props`` describes (``device.properties()``) cannot run ``step`` with ``stages``
    (default: the step's own) at tile width ``block_n`` (default: its own): an instruction it lacks, or
    more shared memory than a block may have; None if it can."""
    info = step_info(step)
    cc = int(props["cc"])
    here = f"this GPU is {cc / 10:.1f}"
    if info.wgmma and cc != 90:
        return f"step {step} uses wgmma, which needs a Hopper GPU built for sm_90a (compute capability 9.0); {here}"
    if info.needs and cc < info.needs[1]:
        what, need = info.needs
        return f"step {step} uses {what}, which needs compute capability {need / 10:.1f} (sm_{need}) or newer; {here}"
    if info.pipelined:
        stages = info.default_stages if stages is None else stages
        smem, limit = smem_bytes(step, stages, block_n), props["smem_per_block_optin_bytes"]
        if smem > limit:
            return (
                f"step {step} with {stages} stages needs {smem:,} B of shared memory per block; "
                f"this GPU allows {limit:,} B"
            )
    return None


_SAID: set[str] = set()


def left_out(step: int, stages: int | None = None, block_n: int | None = None) -> bool:
    """True on a GPU that cannot run ``step`` with ``stages`` at tile width ``block_n``, after printing
    why -- once per reason, so a step's later variants and measurements pass quietly; False in the
    simulator."""
    why = device.on_gpu() and unsupported(step, device.properties(), stages, block_n)
    if why and why not in _SAID:
        _SAID.add(why)
        print(f"left out on this GPU: {why}", flush=True)
    return bool(why)


@cache
def cuda_kernel(step: int, stages: int = 3, x_bypass_l1: bool = False, block_n: int | None = None):
    """The compiled CUDA C++ kernel of ``step`` (2-12), with its dynamic shared memory allowed.

    ``x_bypass_l1`` rebuilds step 4 or 5 with the input gather as first written (cp.async.cg, past the L1);
    ``block_n`` (NARROW_N) builds step 11's 128x64 tiles."""
    from ..harness import cuda_cpp

    if device.on_gpu() and (why := unsupported(step, device.properties(), stages, block_n)):
        raise RuntimeError(why)  # before compiling: NVRTC's or the driver's error would not say why
    info = step_info(step)
    if not info.pipelined:
        return cuda_cpp.load(info.source, info.kernel)
    options = (f"-DSTAGES={stages}",) + (("-DX_BYPASS_L1",) if x_bypass_l1 else ())
    options += (f"-DBLOCK_N={block_n}",) if block_n not in (None, info.block_n) else ()
    if info.wgmma:
        kernel = cuda_cpp.load(info.source, info.kernel, options=options, arch="sm_90a")
        if info.specialized and kernel.num_regs != WS_REGISTERS:
            # setmaxnreg only moves registers the block holds: with another count the consumers'
            # request would never be granted and the kernel would hang.
            raise RuntimeError(
                f"step {step} was compiled to {kernel.num_regs} registers per thread; its "
                f"setmaxnreg split needs exactly {WS_REGISTERS}"
            )
    else:
        kernel = cuda_cpp.load(info.source, info.kernel, options=options)
    kernel.max_dynamic_shared_size_bytes = smem_bytes(step, stages, block_n)
    return kernel


def launcher(
    step: int,
    x,
    w,
    out,
    *,
    pad: int = 1,
    stride: int = 1,
    bias=None,
    alpha: float = 1.0,
    relu: bool = False,
    stages: int | None = None,
    x_bypass_l1: bool = False,
    blocks: int | None = None,
    splits: int | None = None,
    block_n: int | None = None,
) -> Callable[[], None]:
    """Validate once, then return a function that only enqueues the kernel (what timing needs).

    ``stages`` (the pipelined steps): the pipeline depth, by default the step's own. ``blocks`` (the
    persistent steps): how many blocks walk over the tiles (each split of a tile is a unit of its own);
    by default one per unit up to one per SM. ``splits`` (the split-K steps): how many blocks share
    each tile's K steps (default 1); above 1 a workspace of fp32 partials, which the tile's last split
    adds (fixup) or a second kernel adds. ``block_n`` (step 11): output channels per tile, the step's own
    or NARROW_N (whose default depth is the most stages it takes)."""
    problem = validate(step, x, w, out, pad=pad, stride=stride, bias=bias)
    info = step_info(step)
    if not info.epilogue and (alpha != 1.0 or relu):
        raise ValueError(f"step {step} computes the plain convolution; alpha and ReLU are fused in steps {EPILOGUE}")
    if stages is not None and not info.pipelined:
        raise ValueError(f"stages sets the pipeline depth of steps {PIPELINED} only; step {step} has none")
    if block_n is not None and block_n not in info.widths:
        widths = " or ".join(str(b) for b in info.widths)
        raise ValueError(f"block_n: step {step} builds tiles {widths} output channels wide, got {block_n!r}")
    narrow = block_n is not None and block_n != info.block_n
    width = block_n if narrow else info.block_n
    if stages is None:
        stages = info.narrow_stages if narrow else info.default_stages
    if info.pipelined:
        low, high = info.stage_range(width)
        if not (isinstance(stages, int) and low <= stages <= high):
            wide = f" {width} wide" if narrow else ""
            raise ValueError(f"stages of step {step}{wide} must be an integer from {low} to {high}, got {stages!r}")
    if x_bypass_l1 and not info.x_bypass_l1:
        rebuilt = " or ".join(str(s.number) for s in REGISTRY if s.x_bypass_l1)
        raise ValueError(f"x_bypass_l1 rebuilds step {rebuilt} only")
    if blocks is not None and not info.specialized:
        raise ValueError(f"blocks sets the grid of steps {SPECIALIZED} only")
    if splits is not None and not info.split_k:
        raise ValueError(f"splits divides K over the blocks of steps {SPLIT_K} only")
    k_per_split, splits = split_plan(problem, 1 if splits is None else splits, step)
    units = problem.tiles(width) * splits  # what a persistent grid's blocks walk
    if blocks is not None and not (isinstance(blocks, (int, np.integer)) and 1 <= blocks <= units):
        what = "tiles" if splits == 1 else f"units of {splits} splits per tile"
        raise ValueError(f"blocks must be an integer from 1 to the {units} {what}, got {blocks!r}")
    sms = device.target_properties()["sms"]
    if info.fixup and splits > 1 and blocks is not None and not splits <= blocks <= sms:
        raise ValueError(
            f"blocks: step {step}'s {splits} splits of a tile wait for each other, so every block must be "
            f"resident at once: from {splits} to the {sms} SMs, got {blocks!r}"
        )
    if not info.cuda_cpp:
        from .v1_naive import THREADS as NAIVE_THREADS
        from .v1_naive import igemm_naive

        naive_blocks = -(-int(np.prod(problem.y_shape)) // NAIVE_THREADS)
        kernel = igemm_naive[naive_blocks, NAIVE_THREADS]
        return lambda: kernel(x, w, out, problem.pad, problem.stride)
    # Raises a clear error in the simulator, or on a GPU that cannot run the step.
    kernel = cuda_kernel(step, stages, x_bypass_l1, width if narrow else None)
    import cupy

    i32 = cupy.int32
    pr = problem
    args = (
        input_tensor_map(x, problem) if info.tma_im2col else x,
        filter_tensor_map(w, width) if info.tma_filters else w,
        output_tensor_map(out) if info.tma_store else out,
        i32(pr.n),
        i32(pr.h),
        i32(pr.w),
        i32(pr.c),
        i32(pr.k),
        i32(pr.r),
        i32(pr.s),
        i32(pr.p),
        i32(pr.q),
        i32(pr.pad),
        i32(pr.stride),
    )
    if info.epilogue:
        if bias is None:
            bias = cupy.zeros(pr.k, dtype=cupy.float32)
        epilogue = (bias, cupy.float32(alpha), i32(bool(relu)))
        args += epilogue
    # Split K: the fp32 partials, and the kernel that adds them and applies the epilogue (reduce_args),
    # or (fixup) a tile-sized slot per unit and the tiles' arrival counters, which each launch leaves zero.
    partial = out  # unread without a split
    if splits > 1:
        partial = cupy.empty(units * FIXUP_TILE if info.fixup else splits * out.size, dtype=cupy.float32)
    if info.fixup:
        arrivals = cupy.zeros(problem.tiles(width) if splits > 1 else 1, dtype=cupy.uint32)
        args += (partial, arrivals, i32(k_per_split), out)  # the shares of split tiles are stored directly
    elif info.split_k:
        args += (partial, i32(k_per_split))
    if splits > 1 and not info.fixup:  # only the split-K steps, which all have the epilogue
        reduce_args = (partial, i32(splits), i32(out.size // pr.k), i32(pr.k), *epilogue, out)
        reduce_grid = (-(-out.size // (8 * SPLIT_REDUCE_THREADS)),)
    shared = smem_bytes(step, stages, width) if info.pipelined else 0
    grid = problem.grid() + (splits,)
    if info.specialized:
        grid = (int(blocks) if blocks else min(units, sms),)
    block = (info.threads,)
    reduce = split_reduce_kernel(step, stages) if splits > 1 and not info.fixup else None

    def launch():
        kernel(grid, block, args, shared_mem=shared)
        if reduce is not None:
            reduce(reduce_grid, (SPLIT_REDUCE_THREADS,), reduce_args)

    # Steps 8-12's args hold only descriptors of x's, w's and out's addresses: the launcher keeps them alive
    # itself, or a temporary could be freed, and its memory reused, while the TMA engine uses it.
    launch.x, launch.w, launch.out = x, w, out
    return launch


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


@cache
def split_reduce_kernel(step: int, stages: int):
    """Split K's second kernel, from the module of ``step``'s kernel at ``stages``."""
    from ..harness import cuda_cpp

    return cuda_cpp.load(step_info(step).source, "igemm_split_reduce", options=(f"-DSTAGES={stages}",), arch="sm_90a")


def _encode(mode: str, what: str, rank: int, address: int, *layout):
    """The driver's ``cuTensorMapEncode<mode>`` (Tiled or Im2col) of an fp16 tensor of ``rank``
    dimensions at ``address``, laid out as ``layout`` says (the mode's sizes, strides, box and element
    strides), with what every map of the chapter shares: the 128-byte swizzle, L2 promotion by 256 B,
    zeros read and nothing written outside. Returns the 128-byte device array a kernel reads; a
    RuntimeError naming ``what`` if the driver refuses."""
    import cupy
    from cuda.bindings import driver as cu

    (err,) = cu.cuInit(0)
    if err == cu.CUresult.CUDA_SUCCESS:
        err, tensor_map = getattr(cu, f"cuTensorMapEncode{mode}")(
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            rank,
            address,
            *layout,
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncode{mode} failed for {what}: {err}")
    return cupy.asarray(np.array(tensor_map.opaque, dtype=np.uint64))


def _tensor_map(a, rows: int, cols: int, box: tuple[int, int]):
    """A TMA descriptor of the fp16 array ``a`` seen as a (rows, cols) row-major matrix, in boxes of
    ``box`` = (box rows, box cols). It holds a's address: build it for every new array."""
    from cuda.bindings.driver import cuuint32_t as u32
    from cuda.bindings.driver import cuuint64_t as u64

    return _encode(
        "Tiled",
        f"an array of shape {tuple(a.shape)}",
        2,
        a.data.ptr,
        # sizes from the innermost dimension out, then the row stride in bytes
        [u64(cols), u64(rows)],
        [u64(2 * cols)],
        [u32(box[1]), u32(box[0])],
        [u32(1), u32(1)],
    )


def filter_tensor_map(w, rows: int = WS_BLOCK_N):
    """Steps 8-11's TMA descriptor of the KRSC filters seen as a (K, RSC) matrix: boxes of ``rows`` rows
    (the step's block_n) x 64 taps, the tile a K step multiplies."""
    return _tensor_map(w, w.shape[0], w.size // w.shape[0], (rows, 64))


def input_tensor_map(x, problem: Problem):
    """Step 10's im2col TMA descriptor of the NHWC input: one load gathers 128 output pixels x 64
    channels for one filter tap, in the 128-byte swizzle, zeros outside the image. The box corners are
    where the filter's corner may stand (-pad to pad - (R - 1) past each edge); the traversal stride is
    the convolution's. It holds x's address: build it for every new array."""
    from cuda.bindings.driver import cuuint32_t as u32
    from cuda.bindings.driver import cuuint64_t as u64

    n, h, w, c = problem.x_shape
    return _encode(
        "Im2col",
        problem.label(),
        4,
        x.data.ptr,
        [u64(c), u64(w), u64(h), u64(n)],  # innermost first, like the strides and corners
        [u64(2 * c), u64(2 * c * w), u64(2 * c * w * h)],
        [-problem.pad, -problem.pad],
        [problem.pad - (problem.s - 1), problem.pad - (problem.r - 1)],
        64,
        BLOCK_M,
        [u32(1), u32(problem.stride), u32(problem.stride), u32(1)],
    )


def output_tensor_map(y):
    """Steps 9-11's TMA descriptor of the NPQK output seen as an (M, K) matrix: boxes of 128 rows x 64
    channels, a quarter of a 128x256 tile's staged output."""
    return _tensor_map(y, y.size // y.shape[-1], y.shape[-1], (BLOCK_M, TMA_STORE_COLS))


def conv(
    step: int,
    x,
    w,
    *,
    pad: int = 1,
    stride: int = 1,
    bias=None,
    alpha: float = 1.0,
    relu: bool = False,
    stages: int | None = None,
    out=None,
    x_bypass_l1: bool = False,
    blocks: int | None = None,
    splits: int | None = None,
    block_n: int | None = None,
):
    """Run one step and return its output (poisoned first, so nothing unwritten can pass)."""
    if out is None:
        problem = validate(step, x, w, pad=pad, stride=stride, bias=bias)
        out = check.poison(_module(x).empty(problem.y_shape, dtype=np.float16))
    launcher(
        step,
        x,
        w,
        out,
        pad=pad,
        stride=stride,
        bias=bias,
        alpha=alpha,
        relu=relu,
        stages=stages,
        x_bypass_l1=x_bypass_l1,
        blocks=blocks,
        splits=splits,
        block_n=block_n,
    )()
    return out


def fit_head_tail(ks, ms) -> tuple[float, float]:
    """Least squares  time = head + K * per_k  (the source's head / main loop / tail model)."""
    if len(ks) != len(ms) or len(set(ks)) < 2:
        raise ValueError(
            f"ks and ms: a line needs times at two or more different K, as many as K values; "
            f"got {len(ms)} times at K = {list(ks)}"
        )
    per_k, head = np.polyfit(np.asarray(ks, float), np.asarray(ms, float), 1)
    return float(head), float(per_k)


def k_half(head_ms: float, per_k_ms: float) -> float:
    """The K at which the fixed cost equals the main loop: half the asymptotic rate."""
    check.finite_number(per_k_ms, "per_k_ms (the time per unit of K)", positive=True)
    if isinstance(head_ms, bool) or not isinstance(head_ms, (int, float, np.integer, np.floating)):
        raise ValueError(f"head_ms (the fixed cost) must be a real number, got {head_ms!r}")
    if not np.isfinite(head_ms):
        raise ValueError(f"head_ms (the fixed cost) must be a finite number, got {head_ms!r}")
    return head_ms / per_k_ms


# ---- Choosing a step per problem --------------------------------------------------------------------
# A model, not a timing: each step's tile (128x128, 128x256 for steps 7-10, 128x64 for step 11's narrow
# build) cuts the GEMM into tiles; the SMs run them in waves of SMs x blocks per SM (as shared memory,
# threads and registers allow); a tile costs its padded work, K rounded up to the step's K step, plus its
# head: what the tile costs besides its K steps (the prologue, the epilogue that no step overlaps with
# its math), in K steps.
# The chapter's depth sweep measures the head of the steps it times (stored_heads); the others are
# charged one K step. What one SM's blocks reach per second comes from the chapter's own stored run
# on the source problem: the rate that makes this model give that run's time. A block alone on an SM
# is taken to reach it too.
SLOT_RESERVED_BYTES = 1024  # the shared memory the runtime keeps per block


@dataclass(frozen=True)
class Choice:
    """A step and the parameters best_step picked for it, with the model's reasons."""

    step: int
    stages: int | None
    tile: tuple[int, int]  # (rows of M, columns of N) per block tile
    tiles: int  # block tiles of the problem
    slots: int  # blocks of the step that fit on one SM at once
    waves: int  # rounds of the SMs' slots over the tiles
    fill: float  # the useful fraction of the padded tile work
    estimate_ms: float | None  # the model's time; None where no stored rate calibrates it
    splits: int = 1  # blocks sharing each tile's K steps (split K); `tiles` counts them all

    @property
    def narrow(self) -> bool:
        """Built narrower than the step's own tiles (step 11's NARROW_N-wide build)."""
        return self.tile[1] != step_info(self.step).block_n

    @property
    def kwargs(self) -> dict:
        """The arguments ``launcher`` and ``conv`` take for it."""
        kwargs = {"stages": self.stages} if self.stages is not None else {}
        kwargs |= {"block_n": self.tile[1]} if self.narrow else {}
        return kwargs | ({"splits": self.splits} if self.splits > 1 else {})

    @property
    def name(self) -> str:
        return stored_name(self.step, self.stages, self.splits, self.tile[1])


def stored_name(step: int, stages: int | None, splits: int = 1, block_n: int | None = None) -> str:
    """The kernel name of (step, stages) in the chapter's results: the source's stem, the tile width where
    narrower than the step's own, the stages where the step has a pipeline, the splits of K where more
    than one (v6_wgmma_3stages_split15, v11_ping_pong_64wide_8stages; the chapter named step 5's default
    v5_epilogue)."""
    info = step_info(step)
    stem = info.source.rsplit("/", 1)[-1].split(".")[0]
    stem += f"_{block_n}wide" if block_n not in (None, info.block_n) else ""
    name = stem if stages is None else f"{stem}_{stages}stages"
    return name + (f"_split{splits}" if splits > 1 else "")


def variants(problem: Problem, props: dict | None = None) -> list[tuple[int, int | None, int]]:
    """Every (step, stages, block_n) of the tensor-core steps that ``props``'s GPU (default: this one, or
    the reference GPU without one) can run on ``problem``: each depth at the step's own tile width, and
    step 11's narrow build at its deepest (its stages are a quarter smaller); the shape errors of the
    steps where none can."""
    require_problem(problem)
    require_tensor_core_shape(problem)
    props = props or device.target_properties()
    out = []
    for info in REGISTRY:
        if not info.cuda_cpp:
            continue
        out += [(info.number, d, n) for d, n in info.builds if unsupported(info.number, props, d, n) is None]
    return out


def tile_model(
    step: int,
    stages: int | None,
    problem: Problem,
    props: dict,
    splits: int = 1,
    head: float = 1.0,
    block_n: int | None = None,
) -> tuple:
    """(tile, tiles, slots, waves, padded FLOP per tile) of ``step`` on ``problem``; with ``splits``
    (split K) a tile is one block's share: every output tile counts once per split, over its K steps.
    ``head``: what a tile costs besides its K steps, in K steps (stored_heads); ``block_n``: the tile
    width of the build (default: the step's own)."""
    info = step_info(step)
    m, n, kd = problem.gemm
    tile = (BLOCK_M, block_n or info.block_n)
    k_step = 64 if info.wgmma else 32
    k_tiles = k_steps(problem, step) if info.wgmma else -(-kd // k_step)
    if splits > 1:
        k_tiles, splits = split_plan(problem, splits, step)
    tiles = -(-m // tile[0]) * -(-n // tile[1]) * splits
    smem = smem_bytes(step, stages, tile[1]) if info.pipelined else STAGE_BYTES  # steps 2-3: one A and B tile
    by_smem = props["smem_per_sm_bytes"] // (smem + SLOT_RESERVED_BYTES)
    by_registers = props["regs_per_sm"] // (info.threads * -(-info.max_registers // 8) * 8)  # 8-register units
    # One block per SM for steps 7-12. A ping-pong block holds two tiles, but its consumers take turns at
    # the tensor cores, so its tiles count one after another, as one slot's.
    slots = max(1, min(props["max_threads_per_sm"] // info.threads, by_smem, by_registers))
    waves = -(-tiles // (props["sms"] * slots))
    tile_flops = 2 * tile[0] * tile[1] * (k_tiles + head) * k_step
    return tile, tiles, slots, waves, tile_flops


def _cost(
    step: int,
    stages: int | None,
    problem: Problem,
    props: dict,
    splits: int = 1,
    head: float = 1.0,
    block_n: int | None = None,
) -> float:
    """The model's time in units of one SM's time per FLOP: waves x tiles sharing an SM x tile work."""
    _, tiles, slots, waves, tile_flops = tile_model(step, stages, problem, props, splits, head, block_n)
    sharing = min(slots, -(-tiles // props["sms"]))  # blocks on the busiest SM at once
    return waves * sharing * tile_flops


def launch_ms() -> float:
    """What any kernel costs before its work: the probes' empty kernel, timed with events around it."""
    from ..harness import quantities

    return quantities.empty_kernel_us()[0] / 1e3


def split_reduce_ms(problem: Problem, splits: int) -> float:
    """Split K's second kernel: one more launch and its traffic, ``splits`` fp32 partials read and the
    fp16 output written, at the machine chapter's copy rate."""
    from ..harness import quantities

    _, splits = split_plan(problem, splits)
    gbps, _ = quantities.copy_gbps()
    outputs = problem.gemm[0] * problem.gemm[1]
    return launch_ms() + (4 * splits + 2) * outputs / gbps / 1e6


# Step 12's fixup waits through a chain of memory round trips, each one DRAM latency: the partial's stores
# and fence, counting in, seeing the other splits in, reading the shares, counting out.
FIXUP_ROUND_TRIPS = 5


def fixup_ms(problem: Problem, splits: int, step: int) -> float:
    """Step 12's fixup: FIXUP_ROUND_TRIPS DRAM latencies (the probes'), and its workspace's traffic. Every
    unit writes its fp32 partial tile and reads back its share of all of them, all units at once, so the
    whole workspace goes out and back at the GPU's rate, not an SM's: the machine chapter's copy rate (a
    copy small enough for the L2 runs about as fast)."""
    from ..harness import quantities

    _, splits = split_plan(problem, splits, step)
    workspace = 4 * FIXUP_TILE * problem.tiles(step_info(step).block_n) * splits
    latency_ms = FIXUP_ROUND_TRIPS * quantities.dram_latency_ns()[0] / 1e6
    return latency_ms + 2 * workspace / quantities.copy_gbps()[0] / 1e6


def estimate_ms(
    step: int,
    stages: int | None,
    problem: Problem,
    props: dict,
    rate: float,
    splits: int = 1,
    head: float = 1.0,
    block_n: int | None = None,
) -> float:
    """The model's time of (step, stages) at tile width ``block_n`` (default: the step's own) on ``problem``
    at ``rate`` (its stored_rates entry, calibrated with the same ``head``): the launch, the tiles' work,
    and split K's partial sums (a second kernel, or step 12's fixup)."""
    work = _cost(step, stages, problem, props, splits, head, block_n) / rate
    if splits > 1 and step_info(step).fixup:
        return launch_ms() + work + fixup_ms(problem, splits, step)
    return launch_ms() + work + (split_reduce_ms(problem, splits) if splits > 1 else 0.0)


# The chapter's depth sweep: the source problem with 64 to 512 input channels, 9 to 72 K steps per tile.
DEPTH_SWEEP = {f"C={c}": Problem(n=PROBLEM.n, h=PROBLEM.h, w=PROBLEM.w, c=c, k=PROBLEM.k) for c in (64, 128, 256, 512)}


def depth_fit(ms: dict) -> tuple[float, float]:
    """(fixed ms besides the launch, ms per K step of a block's tiles): the line through a step's times
    ``ms`` ({DEPTH_SWEEP name: ms}) against each problem's K steps per tile. Over a persistent grid the
    busiest block runs the same number of tiles at every depth, so fixed / per K step is what one tile
    costs besides its K steps, in K steps: its head."""
    names = list(DEPTH_SWEEP)
    fixed, per_step = fit_head_tail([k_steps(DEPTH_SWEEP[n]) for n in names], [ms[n] for n in names])
    return fixed - launch_ms(), per_step


def stored_heads(gpu_slug: str | None = None) -> dict:
    """{step: its tile's head in K steps} from the depth sweeps in the chapter's stored run (the
    reference GPU's, or ``gpu_slug``'s); the steps without one are charged one K step by the model."""
    from ..harness import results

    rows = results.latest("igemm", gpu_slug or results.REFERENCE_GPU)
    heads = {}
    for info in REGISTRY:
        keys = {name: (f"v{info.number}_depth_sweep", name, "ms") for name in DEPTH_SWEEP}
        if all(key in rows for key in keys.values()):
            fixed, per_step = depth_fit({name: float(rows[key]["value"]) for name, key in keys.items()})
            heads[info.number] = fixed / per_step
    return heads


def stored_rates(props: dict, gpu_slug: str | None = None, heads: dict | None = None) -> dict:
    """{(step, stages, block_n): the model's cost per ms} that make the model (estimate_ms, launch included,
    each step's ``heads`` entry, default stored_heads) give the chapter's stored times of the source
    problem (the reference GPU's run, or ``gpu_slug``'s); empty where none is stored."""
    from ..harness import results

    rows = results.latest("igemm", gpu_slug or results.REFERENCE_GPU)
    heads = stored_heads(gpu_slug) if heads is None else heads
    launch = launch_ms()
    rates = {}
    for step, stages, block_n in variants(PROBLEM, props):
        names = [stored_name(step, stages, block_n=block_n)]
        if stages == default_stages(step) and block_n == step_info(step).block_n:
            names.append(stored_name(step, None))  # v5_epilogue: the default depth without its count
        for name in names:
            row = rows.get((name, "source problem", "ms"))
            if row and float(row["value"]) > launch:
                cost = _cost(step, stages, PROBLEM, props, head=heads.get(step, 1.0), block_n=block_n)
                rates[(step, stages, block_n)] = cost / (float(row["value"]) - launch)
                break
    return rates


def best_step(
    problem: Problem,
    props: dict | None = None,
    rates: dict | None = None,
    heads: dict | None = None,
    steps: tuple | None = None,
) -> Choice:
    """The step and pipeline depth the model expects fastest on ``problem``, for the GPU ``props``
    describes (default: this one, or the reference GPU without one).

    ``rates`` ({(step, stages, block_n): rate}) calibrates each variant with the tile heads ``heads`` ({step: K
    steps}, one K step where absent); by default both come from the chapter's stored run (stored_heads,
    stored_rates), and given rates come with the heads they were calibrated with (default none). Only
    variants with a rate compete, and only those of ``steps`` where given. Without any (no stored run),
    the fallback: the variant with the fewest waves x tiles sharing an SM x tile work, ties to the later
    step at its default depth. Shapes no tensor-core step takes (C or K not a multiple of 8, over 2^31
    elements) raise the steps' own errors."""
    require_problem(problem)
    props = props or device.target_properties()
    eligible = [v for v in variants(problem, props) if steps is None or v[0] in steps]
    if not eligible and steps is not None:
        raise ValueError(f"steps: none of {tuple(steps)} runs on a GPU of compute capability {props['cc']}")
    if not eligible:
        raise ValueError(f"problem: no tensor-core step runs on a GPU of compute capability {props['cc']}")
    if rates is None:
        heads = stored_heads() if heads is None else heads
        rates = stored_rates(props, heads=heads)
    heads = heads or {}
    timed = [v for v in eligible if v in rates]

    def summary(step, stages, block_n, ms, splits=1):
        tile, tiles, slots, waves, tile_flops = tile_model(step, stages, problem, props, splits, block_n=block_n)
        fill = problem.flops / (tiles * tile_flops)
        return Choice(step, stages, tile, tiles, slots, waves, fill, ms, splits)

    if timed:
        # Split K for the steps that take it: every split that leaves each block two K steps or more (one
        # copied while one is multiplied), its second kernel's time added.
        timed = [
            (*v, s)
            for v in timed
            for s in (range(1, k_steps(problem, v[0]) // 2 + 1) if step_info(v[0]).split_k else (1,))
            if s == 1 or split_plan(problem, s, v[0])[1] == s  # each count of splits once
        ]
        ms = {v: estimate_ms(v[0], v[1], problem, props, rates[v[:3]], v[3], heads.get(v[0], 1.0), v[2]) for v in timed}
        # ties: the later step, the wider tile, the fewer splits
        step, stages, block_n, splits = min(timed, key=lambda v: (ms[v], -v[0], -v[2], v[3]))
        return summary(step, stages, block_n, ms[(step, stages, block_n, splits)], splits)
    defaults = [v for v in eligible if v[1] == default_stages(v[0]) and v[2] == step_info(v[0]).block_n]
    step, stages, block_n = min(defaults, key=lambda v: (_cost(v[0], v[1], problem, props), -v[0]))
    return summary(step, stages, block_n, None)
