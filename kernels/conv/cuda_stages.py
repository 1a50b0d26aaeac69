"""The CUDA C++ stages as Stage objects: compile-time tile sizes go in as -D options, and one launch
convention serves every .cu file: kernel(x, f, y, n, h, w, c, k) on NHWC tensors. SPLIT-K's SPLIT
is not a compile-time constant but the grid's z extent. HALO TILE's blocks tile the image in 2-D
(TH x TW pixels of one image) instead of the flattened pixel index.

Compiled (NVRTC) on any machine; launched through CuPy on a GPU only.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..harness import cuda_cpp, device
from .common import Problem, Stage

FILES = {
    "VECTORIZE & UNROLL": ("conv/s5_vectorize_unroll.cu", "conv_vectorize_unroll"),
    "REGISTER TILING": ("conv/s6_register_tiling.cu", "conv_register_tiling"),
    "DOUBLE BUFFER": ("conv/s7_double_buffer.cu", "conv_double_buffer"),
    "SPLIT-K": ("conv/s8_split_k.cu", "conv_split_k"),
    "HALO TILE": ("conv/s10_halo_tile.cu", "conv_halo_tile"),
}
DEFAULTS = {
    "VECTORIZE & UNROLL": dict(BY=8, BN=32, TM=8, BKC=16),
    "REGISTER TILING": dict(BM=128, BN=64, BKC=8),
    "DOUBLE BUFFER": dict(BM=128, BN=64, BKC=8),
    "SPLIT-K": dict(BM=128, BN=64, BKC=8, SPLIT=3),
    "HALO TILE": dict(TH=16, TW=16, BN=64, BKC=16),
}
RUNTIME_KEYS = ("SPLIT",)  # tile keys that change the launch, not the compiled code


def options(tile: dict) -> tuple:
    return tuple(f"-D{key}={value}" for key, value in sorted(tile.items()) if key not in RUNTIME_KEYS)


SMEM_PER_BLOCK = 227 * 1024  # the most shared memory one block may opt in to on sm_90 (sm_80: 163 KB)
MIN_CC = {"HALO TILE": 80}  # cp.async, from sm_80 on


def dynamic_smem_bytes(name: str, tile: dict) -> int:
    """Dynamic shared memory of one block (HALO TILE only): two buffers of the input halo, each row
    padded by 4 floats, and of the 9-tap filter chunk -- the constants of s10_halo_tile.cu."""
    if name != "HALO TILE":
        return 0
    a = (tile["TH"] + 2) * ((tile["TW"] + 2) * tile["BKC"] + 4)
    return 2 * 4 * (a + 9 * tile["BKC"] * tile["BN"])


def tile_shape(name: str, tile: dict) -> tuple[int, int]:
    """(pixels, output channels) one block computes."""
    if name == "HALO TILE":
        return tile["TH"] * tile["TW"], tile["BN"]
    if name == "VECTORIZE & UNROLL":
        return tile["BY"] * tile["TM"], tile["BN"]
    return tile["BM"], tile["BN"]


def geometry(name: str, tile: dict, p: Problem) -> tuple[tuple, tuple]:
    """(grid, block) for problem ``p``: blocks tile pixels in x and output channels in y."""
    bm, bn = tile_shape(name, tile)
    if name == "HALO TILE":
        tiles = p.n * -(-p.h // tile["TH"]) * -(-p.w // tile["TW"])
        return (tiles, -(-p.k // bn), 1), (bn // 8 * bm // 8, 1, 1)
    block = (bn, tile["BY"], 1) if name == "VECTORIZE & UNROLL" else (bn // 8, bm // 8, 1)  # else 8 x 8 per thread
    return ((p.pixels + bm - 1) // bm, (p.k + bn - 1) // bn, tile.get("SPLIT", 1)), block


def check_name(name: str) -> None:
    if name not in FILES:
        raise ValueError(f"unknown CUDA C++ stage {name!r}; known: {sorted(FILES)}")


def check_tile(name: str, tile: dict) -> None:
    """Reject tile sizes the kernel's static layout cannot hold, before the compiler does."""
    check_name(name)
    if not isinstance(tile, dict):
        raise TypeError(f"{name}: tile must be a dict such as {DEFAULTS[name]}, got {type(tile).__name__}")
    if set(tile) != set(DEFAULTS[name]):
        raise ValueError(f"{name}: tile must set exactly {sorted(DEFAULTS[name])}, got {sorted(tile)}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in tile.values()):
        raise ValueError(f"{name}: tile sizes must be positive integers, got {tile}")
    if tile.get("SPLIT", 1) > 64:  # the project's cap; the grid's z extent would allow 65535
        raise ValueError(f"{name}: SPLIT must be at most 64, got {tile['SPLIT']}")
    if name == "HALO TILE":
        if tile["TW"] % 8:
            raise ValueError(f"{name}: TW must be a multiple of 8 (a thread owns 8 columns), got {tile}")
        if dynamic_smem_bytes(name, tile) > SMEM_PER_BLOCK:
            raise ValueError(
                f"{name}: the tile needs {dynamic_smem_bytes(name, tile)} bytes of shared memory, "
                f"more than the {SMEM_PER_BLOCK} one block may use: {tile}"
            )
    if tile["BKC"] % 4 or tile["BN"] % (4 if name == "VECTORIZE & UNROLL" else 16):
        raise ValueError(
            f"{name}: BKC must be a multiple of 4 and BN of {4 if name == 'VECTORIZE & UNROLL' else 16}, got {tile}"
        )
    if name == "VECTORIZE & UNROLL":
        threads = tile["BY"] * tile["BN"]
        if tile["TM"] % 4:
            raise ValueError(f"{name}: TM must be a multiple of 4, got {tile['TM']}")
    elif name == "HALO TILE":
        threads = tile["BN"] // 8 * tile["TH"] * tile["TW"] // 8
    else:
        if tile["BM"] % 16:
            raise ValueError(f"{name}: BM must be a multiple of 16, got {tile['BM']}")
        threads = tile["BM"] // 8 * tile["BN"] // 8
    if not 32 <= threads <= 1024:
        raise ValueError(f"{name}: {threads} threads per block; the tile must give 32 to 1024")


def unsupported(name: str, tile: dict, props: dict) -> str | None:
    """Why the GPU ``props`` describes (device.properties() keys) cannot run stage ``name`` with ``tile``:
    an instruction its architecture lacks, or more shared memory than one block may have; None if it can."""
    cc = int(props["cc"])
    if cc < MIN_CC.get(name, 0):
        return f"{name} needs sm_{MIN_CC[name]} or newer (cp.async); this GPU is sm_{cc}"
    smem = dynamic_smem_bytes(name, tile)
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
    smem = dynamic_smem_bytes(name, tile)

    def launch(x, f, y, p):
        if why := unsupported(name, tile, device.properties()):
            raise RuntimeError(why)  # rather than the compiler's or the driver's error
        import cupy

        grid, block = geometry(name, tile, p)
        # CuPy views, not copies, of any device array: the launch takes only CuPy's (validate accepts Numba's too)
        x, f, y = (cupy.asarray(a) for a in (x, f, y))
        if grid[2] > 1:  # the slices add into y
            y.fill(0)
        _kernel(name, opts, smem)(
            grid, block, (x, f, y, *(np.int32(v) for v in (p.n, p.h, p.w, p.c, p.k))), shared_mem=smem
        )

    return Stage(name, "nhwc", launch, c_multiple=4, k_multiple=4, needs_gpu=True, options=tile)


S5 = stage("VECTORIZE & UNROLL")
S6 = stage("REGISTER TILING")
S7 = stage("DOUBLE BUFFER")
S8 = stage("SPLIT-K")
S10 = stage("HALO TILE")
