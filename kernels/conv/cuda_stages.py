"""The CUDA C++ stages as Stage objects: compile-time tile sizes go in as -D options, and one launch
convention serves every .cu file: kernel(x, f, y, n, h, w, c, k) on NHWC tensors. SPLIT-K's SPLIT
is not a compile-time constant but the grid's z extent. HALO TILE's blocks tile the image in 2-D
(TH x TW pixels of one image) instead of the flattened pixel index.

Compiled (NVRTC) on any machine; launched through CuPy on a GPU only.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..harness import cuda_cpp, device, timing
from . import registry
from .common import Problem, Stage, launcher

# Views of the registry's CUDA C++ stages (those with a .cu file), in its order.
CUDA = tuple(s for s in registry.REGISTRY if s.file.endswith(".cu"))
FILES = {s.name: (s.file, s.kernel) for s in CUDA}
DEFAULTS = {s.name: s.tile for s in CUDA}
MIN_CC = {s.name: s.min_cc for s in CUDA if s.min_cc}
RUNTIME_KEYS = ("SPLIT",)  # tile keys that change the launch, not the compiled code


def options(tile: dict) -> tuple:
    return tuple(f"-D{key}={value}" for key, value in sorted(tile.items()) if key not in RUNTIME_KEYS)


SMEM_PER_BLOCK = 227 * 1024  # the most shared memory one block may opt in to on sm_90 (sm_80: 163 KB)


def dynamic_smem_bytes(name: str, tile: dict) -> int:
    """Dynamic shared memory of one block (``registry.StageSpec.dynamic_smem_bytes``); AUTOTUNE's is SPLIT-K's."""
    return registry.launched(name).dynamic_smem_bytes(tile)


def tile_shape(name: str, tile: dict) -> tuple[int, int]:
    """(pixels, output channels) one block computes."""
    return registry.launched(name).tile_shape(tile)


def geometry(name: str, tile: dict, p: Problem) -> tuple[tuple, tuple]:
    """(grid, block) for problem ``p``: blocks tile pixels in x and output channels in y."""
    return registry.launched(name).geometry(tile, p)


def check_name(name: str) -> None:
    if name not in FILES:
        raise ValueError(f"unknown CUDA C++ stage {name!r}; known: {sorted(FILES)}")


def check_tile(name: str, tile: dict) -> None:
    """Reject tile sizes the kernel's static layout cannot hold, before the compiler does."""
    check_name(name)
    spec = registry.get(name)
    if not isinstance(tile, dict):
        raise TypeError(f"{name}: tile must be a dict such as {spec.tile}, got {type(tile).__name__}")
    if set(tile) != set(spec.tile):
        raise ValueError(f"{name}: tile must set exactly {sorted(spec.tile)}, got {sorted(tile)}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in tile.values()):
        raise ValueError(f"{name}: tile sizes must be positive integers, got {tile}")
    if tile.get("SPLIT", 1) > 64:  # the project's cap; the grid's z extent would allow 65535
        raise ValueError(f"{name}: SPLIT must be at most 64, got {tile['SPLIT']}")
    for key, multiple in spec.multiples.items():
        if tile[key] % multiple:
            raise ValueError(f"{name}: {key} must be a multiple of {multiple}, got {tile}")
    if spec.halo and tile["TW"] % tile["TP"]:
        raise ValueError(f"{name}: TW must be a multiple of TP (a thread owns TP pixels of a tile row), got {tile}")
    if spec.dynamic_smem_bytes(tile) > SMEM_PER_BLOCK:
        raise ValueError(
            f"{name}: the tile needs {spec.dynamic_smem_bytes(tile)} bytes of shared memory, "
            f"more than the {SMEM_PER_BLOCK} one block may use: {tile}"
        )
    threads = spec.threads(tile)
    if not 32 <= threads <= 1024:
        raise ValueError(f"{name}: {threads} threads per block; the tile must give 32 to 1024")


def unsupported(name: str, tile: dict, props: dict) -> str | None:
    """Why the GPU ``props`` describes (device.properties() keys) cannot run stage ``name`` with ``tile``:
    an instruction its architecture lacks, or more shared memory than one block may have; None if it can."""
    spec = registry.get(name)
    cc = int(props["cc"])
    if cc < spec.min_cc:
        return f"{name} needs sm_{spec.min_cc} or newer ({spec.min_cc_for}); this GPU is sm_{cc}"
    smem = spec.dynamic_smem_bytes(tile)
    if smem > props["smem_per_block_optin_bytes"]:
        return (
            f"{name} with tile {tile} needs {smem / 1024:.0f} KB of shared memory per block; this GPU "
            f"allows {props['smem_per_block_optin_bytes'] / 1024:.0f} KB"
        )
    return None


@cache
def _kernel(name: str, opts: tuple, smem: int = 0):
    path, kernel = FILES[name]
    k = cuda_cpp.load(path, kernel, options=opts)
    if smem > 48 * 1024:  # beyond 48 KB a kernel must opt in to dynamic shared memory
        k.max_dynamic_shared_size_bytes = smem
    return k


def kernel(name: str, tile: dict | None = None):
    """Stage ``name``'s kernel for ``tile`` (default: its own), compiled for this GPU: what its launch runs
    (scripts/precompile.py builds each one ahead of the notebooks)."""
    check_name(name)
    tile = tile or DEFAULTS[name]
    check_tile(name, tile)
    return _kernel(name, options(tile), registry.get(name).dynamic_smem_bytes(tile))


def compile_info(name: str, tile: dict | None = None, arch: str = "sm_90"):
    """ptxas's report (registers, spills, shared memory) for one stage and tile, without a GPU."""
    check_name(name)
    tile = tile or DEFAULTS[name]
    check_tile(name, tile)
    return cuda_cpp.compile_cubin(FILES[name][0], arch, options(tile))


def stage(name: str, tile: dict | None = None) -> Stage:
    check_name(name)
    tile = tile or DEFAULTS[name]
    check_tile(name, tile)
    tile = dict(tile)  # a copy: the launch must not see later changes to the caller's dict
    opts = options(tile)
    spec = registry.get(name)
    smem = spec.dynamic_smem_bytes(tile)

    def launch(x, f, y, p):
        if why := unsupported(name, tile, device.properties()):
            raise RuntimeError(why)  # rather than the compiler's or the driver's error
        import cupy

        grid, block = spec.geometry(tile, p)
        # CuPy views, not copies, of any device array: the launch takes only CuPy's (validate accepts Numba's too)
        x, f, y = (cupy.asarray(a) for a in (x, f, y))
        if grid[2] > 1:  # the slices add into y
            y.fill(0)
        _kernel(name, opts, smem)(
            grid, block, (x, f, y, *(np.int32(v) for v in (p.n, p.h, p.w, p.c, p.k))), shared_mem=smem
        )

    vector = spec.vector
    return Stage(name, spec.layout, launch, c_multiple=vector, k_multiple=vector, needs_gpu=True, options=tile)


def time_tiles(name: str, tiles: list[dict], x, f, y, p: Problem, repeat: int = 10) -> tuple[dict, list[dict]]:
    """Time stage ``name`` with every tile of ``tiles`` on (x, f, y); return the fastest tile and one row
    per tile (the tile, ms, GFLOP/s). The autotuners' measurement."""
    rows = []
    for tile in tiles:
        t = timing.benchmark(launcher(stage(name, tile), x, f, y), warmup=2, repeat=repeat)
        rows.append({**tile, "ms": t.median_ms, "GFLOP/s": p.flops / (t.median_ms * 1e-3) / 1e9})
    if not rows:
        raise ValueError(f"no candidate tiles for problem {p}")
    best = min(rows, key=lambda r: r["ms"])
    return {k: best[k] for k in tiles[0]}, rows


def parse_label(name: str, keys: tuple, text: str) -> dict:
    """The tile an autotuner's results label names ("<name> 16 x 14, BN 64, ..."): its numbers in order,
    one for each of ``keys``."""
    numbers = text[len(name) :].replace(",", " ").split()[::2][: len(keys)]
    return dict(zip(keys, (int(v) for v in numbers), strict=True))


def tuned(name: str, tile: dict) -> Stage:
    """Autotuner ``name`` (a registry record with ``runs``) as a stage: the kernel it runs, compiled with
    the ``tile`` it chose, under its own name."""
    s = stage(registry.get(name).runs, tile)
    return Stage(
        name, s.layout, s.launch, c_multiple=s.c_multiple, k_multiple=s.k_multiple, needs_gpu=True, options=tile
    )


STAGES = {name: stage(name) for name in FILES}  # with their default tiles
S4_1, S5, S6, S7, S8, S10 = STAGES.values()
