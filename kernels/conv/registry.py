"""Every convolution stage's facts in one ordered table: its file, kernel, language, tile and what the
model needs to know about it. ``stages``, ``cuda_stages`` and ``model`` derive their lists and read
these properties instead of testing stage names.

Adding a stage: its file, and one ``StageSpec`` in ``REGISTRY`` (in book order);
tests/test_conv_registry.py checks that every s*.py and s*.cu file has a record and that the chapter's
lists follow the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType

from . import s0_seq, s1_naive, s2_coalescing, s3_block_tiling, s4_shared
from .common import Problem


@dataclass(frozen=True)
class StageSpec:
    """One stage's facts. Tile sizes are read from ``tile`` by key, so one rule serves every tiled stage:
    a block computes prod(tile[k] for k in pixel_keys) pixels x tile[channel_key] output channels, and
    each thread ``thread_pixels`` x ``thread_channels`` of them."""

    name: str
    file: str  # under kernels/
    kernel: str  # the kernel's entry name, as ptxas and ncu name it
    language: str  # "numba" (CPU or GPU) or "cuda" (CUDA C++, compiled by NVRTC)
    layout: str = "nhwc"
    gpu: bool = True  # False: SEQ runs on the CPU
    module: ModuleType | None = None  # a Numba stage's module (its STAGE; THREADS and TP where untiled)
    runs: str = ""  # the stage whose kernel this one launches with a tile chosen by timing (the autotuners)
    tile: dict | None = None  # the tile the book times; None: the stage has none, or chooses it per problem
    sim_tile: dict | None = None  # the smaller tile the simulator runs (each thread is a Python thread)
    vector: int = 1  # channels moved at once (float4): C and K must be multiples of it
    multiples: dict = field(default_factory=dict)  # tile key -> what it must be a multiple of
    pixel_keys: tuple = ()
    channel_key: str = ""
    # pixels one thread computes: a number, a tile key or (untiled: TP along a row) a constant of ``module``
    thread_pixels: int | str = 1
    thread_channels: int = 1
    halo: bool = False  # blocks own TH x TW pixels of one image and copy its halo to dynamic shared memory
    cp_async: bool = False  # copies global -> shared with cp.async.cg, which skips L1
    min_cc: int = 0  # the oldest compute capability that has what ``min_cc_for`` names
    min_cc_for: str = ""
    loops: tuple | None = None  # the source's loops the SASS keeps, outermost first; None: not known statically
    y_matrix: bool = False  # the Numba kernel takes y as a (pixels, K) matrix

    @property
    def split_k(self) -> bool:
        """Slices of the reduction over (tap, channel) run in parallel blocks (grid z) and add into y."""
        return "SPLIT" in (self.tile or {})

    def pixels_per_thread(self, tile: dict | None = None) -> int:
        """``thread_pixels`` as a number, for ``tile`` (a tiled stage)."""
        v = self.thread_pixels
        if isinstance(v, int):
            return v
        return tile[v] if self.tile is not None else getattr(self.module, v)

    def tile_shape(self, tile: dict) -> tuple[int, int]:
        """(pixels, output channels) one block computes."""
        return math.prod(tile[k] for k in self.pixel_keys), tile[self.channel_key]

    def threads(self, tile: dict) -> int:
        bm, bn = self.tile_shape(tile)
        return bm // self.pixels_per_thread(tile) * (bn // self.thread_channels)

    def geometry(self, tile: dict, p: Problem) -> tuple[tuple, tuple]:
        """(grid, block) of a tiled stage on problem ``p``: blocks tile pixels in x (a halo stage: image
        tiles) and output channels in y, reduction slices in z."""
        bm, bn = self.tile_shape(tile)
        if self.halo:
            th, tw = (tile[k] for k in self.pixel_keys)
            tiles = p.n * -(-p.h // th) * -(-p.w // tw)
            return (tiles, -(-p.k // bn), 1), (self.threads(tile), 1, 1)
        block = (bn // self.thread_channels, bm // self.pixels_per_thread(tile), 1)
        return ((p.pixels + bm - 1) // bm, (p.k + bn - 1) // bn, tile.get("SPLIT", 1)), block

    def dynamic_smem_bytes(self, tile: dict) -> int:
        """Dynamic shared memory of one block (a halo stage only): two buffers of the input halo, each row
        padded by 4 floats, and of the 9-tap filter chunk -- the constants of s10_halo_tile.cu."""
        if not self.halo:
            return 0
        a = (tile["TH"] + 2) * ((tile["TW"] + 2) * tile["BKC"] + 4)
        return 2 * 4 * (a + 9 * tile["BKC"] * tile["BN"])


def _numba(name: str, module: ModuleType, kernel: str, layout: str = "nhwc", **facts) -> StageSpec:
    file = f"conv/{module.__name__.rsplit('.', 1)[1]}.py"
    return StageSpec(name, file, kernel, "numba", layout, module=module, **facts)


# The CUDA C++ stages' implicit GEMM tiles: BKC channels per step, moved as float4 (a multiple of 4), and
# 8 x 8 outputs per thread, so BM and BN multiples of 16.
_GEMM = dict(
    vector=4,
    multiples={"BKC": 4, "BN": 16, "BM": 16},
    pixel_keys=("BM",),
    channel_key="BN",
    thread_pixels=8,
    thread_channels=8,
    loops=("tap", "chunk"),
)


def _cuda(name: str, file: str, kernel: str, tile: dict, **facts) -> StageSpec:
    return StageSpec(name, f"conv/{file}", kernel, "cuda", tile=tile, **{**_GEMM, **facts})


REGISTRY: tuple[StageSpec, ...] = (
    _numba("SEQ", s0_seq, "conv_seq", "nchw", gpu=False),
    _numba("NAIVE", s1_naive, "conv_naive", "nchw", loops=("c",)),
    _numba("COALESCING", s2_coalescing, "conv_coalescing", loops=("c",)),
    _numba("BLOCK TILING", s3_block_tiling, "conv_block_tiling", thread_pixels="TP", loops=("c", "r")),
    _numba(
        "SHARED",
        s4_shared,
        "conv_shared",
        tile=s4_shared.GPU_TILE,
        sim_tile=s4_shared.SIM_TILE,
        pixel_keys=("by", "tm"),
        channel_key="bn",
        thread_pixels="tm",
        # loops None: LLVM versions the strided copy loops, so which copy runs how often is not static
        y_matrix=True,
    ),
    _cuda(
        "SHARED C++",
        "s4_1_shared_cpp.cu",
        "conv_shared_cpp",
        {key.upper(): v for key, v in s4_shared.GPU_TILE.items()},  # SHARED's tile, so the two cannot drift
        vector=1,  # one-word loads: any C and K
        multiples={},
        pixel_keys=("BY", "TM"),
        thread_pixels="TM",
        thread_channels=1,
    ),
    _cuda(
        "VECTORIZE & UNROLL",
        "s5_vectorize_unroll.cu",
        "conv_vectorize_unroll",
        dict(BY=8, BN=32, TM=8, BKC=16),
        multiples={"BKC": 4, "BN": 4, "TM": 4},  # TM pixels x 1 channel per thread; float4 along BN and TM
        pixel_keys=("BY", "TM"),
        thread_pixels="TM",
        thread_channels=1,
    ),
    _cuda("REGISTER TILING", "s6_register_tiling.cu", "conv_register_tiling", dict(BM=128, BN=64, BKC=8)),
    _cuda("DOUBLE BUFFER", "s7_double_buffer.cu", "conv_double_buffer", dict(BM=128, BN=64, BKC=8)),
    _cuda("SPLIT-K", "s8_split_k.cu", "conv_split_k", dict(BM=128, BN=64, BKC=8, SPLIT=3)),
    _cuda(
        "HALO TILE",
        "s10_halo_tile.cu",
        "conv_halo_tile",
        dict(TH=16, TW=16, BN=64, BKC=16, TP=8),
        multiples={"BKC": 4, "BN": 16},  # and TW a multiple of TP: a thread owns TP columns of a row
        pixel_keys=("TH", "TW"),
        thread_pixels="TP",
        halo=True,
        cp_async=True,
        min_cc=80,
        min_cc_for="cp.async",
        loops=("chunk", "group"),  # channel chunks, groups of 4 channels; the taps unrolled
    ),
    StageSpec("AUTOTUNE", "conv/s9_autotune.py", "conv_split_k", "cuda", runs="SPLIT-K"),
    StageSpec("HALO AUTOTUNE", "conv/s11_halo_autotune.py", "conv_halo_tile", "cuda", runs="HALO TILE"),
)
NAMES = tuple(s.name for s in REGISTRY)
_BY_NAME = {s.name: s for s in REGISTRY}


def get(stage: str | StageSpec) -> StageSpec:
    """The record of ``stage`` (a name, or a record, returned as it is)."""
    if isinstance(stage, StageSpec):
        return stage
    if not isinstance(stage, str):
        raise TypeError(f"stage: expected a stage name (one of {list(NAMES)}), got {type(stage).__name__} {stage!r}")
    if stage not in _BY_NAME:
        raise ValueError(f"stage: unknown convolution stage {stage!r}; the stages are {list(NAMES)}")
    return _BY_NAME[stage]


def launched(stage: str | StageSpec) -> StageSpec:
    """The record of the kernel ``stage`` launches: its own, or (an autotuner) the stage it runs."""
    spec = get(stage)
    return get(spec.runs) if spec.runs else spec
