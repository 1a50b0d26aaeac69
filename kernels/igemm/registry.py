"""The implicit-GEMM steps, one record each (``REGISTRY``), the views the chapter reads of them, and what
follows from a record alone: a step's shared memory, the GPUs that can run it, its name in the results.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..harness import device

BLOCK_M = BLOCK_N = 128  # the block tile of steps 2-6 (the source's 128x128)
THREADS = 128  # steps 2-5: 4 warps of 64x64
WGMMA_THREADS = 256  # step 6: 2 warpgroups of 64x128
WS_BLOCK_N = 256  # steps 7-10: 128x256 tiles, one copying and two multiplying warpgroups (steps 11-12: 128x128)
WS_THREADS = 384
WS_REGISTERS = 168  # their setmaxnreg split adds up to 384 threads x 168 registers
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
    x_bypass_l1: bool = False  # can be rebuilt with the input gather through cp.async.cg (past the L1)
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


def _lineage(first: Step, *children: tuple) -> tuple[Step, ...]:
    """``first``, then each child (stem, title, {field: value}) as the step before it with those fields
    changed: the next number, the source igemm/<stem>.cu with its entry point igemm_<stem>, and the idea
    the step adds (or a fact of its parent it drops). A record says what its step changes, as its source
    does against its parent's."""
    steps = [first]
    for stem, title, idea in children:
        parent = steps[-1]
        number, source, kernel = parent.number + 1, f"igemm/{stem}.cu", f"igemm_{stem}"
        steps.append(replace(parent, number=number, source=source, kernel=kernel, title=title, **idea))
    return tuple(steps)


# The one list of steps, in order; everything else asks it. Steps 6-12 keep one wgmma batch in flight:
# 3 stages at least; 5 of steps 7-10's 48 KB no longer fit, 6 of step 11's 32 KB do. (Step 1's blocks
# are v1_naive.THREADS wide.)
REGISTRY = _lineage(
    Step(1, "igemm/v1_naive.py", "igemm_naive", "naive implicit GEMM", THREADS),
    ("v2_wmma", "tensor cores through WMMA", {"needs": ("WMMA", 70)}),
    ("v3_ldmatrix", "a bank-conflict-free shared layout", {"needs": ("mma.sync.m16n8k16", 80)}),
    (
        "v4_cp_async",
        "a multi-stage cp.async pipeline",
        {
            "stages": (2, 5),
            "default_stages": 3,
            "stage_bytes": STAGE_BYTES,
            "needs": ("cp.async", 80),
            "x_bypass_l1": True,
        },
    ),
    ("v5_epilogue", "the fused epilogue", {"epilogue": True}),
    (
        "v6_wgmma",
        "Hopper's warpgroup MMA (wgmma)",
        {
            "threads": WGMMA_THREADS,
            "stages": (3, 5),
            "default_stages": 4,
            "stage_bytes": WGMMA_STAGE_BYTES,
            "needs": None,  # wgmma wants sm_90a itself, not "this or newer"
            "wgmma": True,
            "x_bypass_l1": False,
            "split_k": True,
            "max_registers": 128,  # two blocks of 256 threads per SM
        },
    ),
    (
        "v7_warp_specialized",
        "warp specialization, a 128x256 tile and a persistent grid",
        {
            "threads": WS_THREADS,
            "stages": (3, 4),
            "stage_bytes": WS_STAGE_BYTES,
            "specialized": True,
            "split_k": False,
            "max_registers": WS_REGISTERS,
        },
    ),
    ("v8_tma_filters", "the filter tile through the Tensor Memory Accelerator (TMA)", {"tma_filters": True}),
    ("v9_tma_store", "the output tile through shared memory and TMA stores", {"tma_store": True}),
    ("v10_tma_im2col", "the input tile through the TMA engine's im2col mode", {"tma_im2col": True}),
    (
        "v11_ping_pong",
        "two consumer warpgroups taking turns on their own tiles (ping-pong)",
        {
            "stages": (4, 6),
            "default_stages": 5,
            "stage_bytes": WGMMA_STAGE_BYTES,
            "ping_pong": True,
            "narrow_stages": 8,
        },
    ),
    (
        "v12_split_fixup",
        "split K inside the persistent grid, each split adding its share of the tile's partials",
        {"split_k": True, "fixup": True, "narrow_stages": None},
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
