"""HALO AUTOTUNE: the HALO TILE kernel with its tile chosen per problem by timing.

HALO TILE's 16 x 16 tile fits conv1's 224 x 224 images but not conv2's 14 x 14 ones, whose tiles
compute a quarter padding. A thread owns TP pixels of a tile row; where 7 divides the image width and
8 does not, TP = 7 fits two threads to a 14-pixel row. How the tile's output channels and chunk depth
then trade registers, blocks and barriers is hard to predict, so, as AUTOTUNE did for SPLIT-K, we time
a handful of candidates per problem and keep the fastest.
"""

from __future__ import annotations

from itertools import product

from ..harness import device
from . import cuda_stages, registry
from .common import Problem, require_problem

NAME = registry.get("HALO AUTOTUNE").runs  # the kernel it tunes: HALO TILE
KEYS = ("TH", "TW", "BN", "BKC", "TP")
METRIC = "halo_autotune_ms"  # the results rows of every candidate's time
PIXELS = (8, 7)  # pixels per thread along a row; two threads own a tile row


def candidates(p: Problem, smem_bytes: int | None = None) -> list[dict]:
    """Tiles worth trying on ``p``: HALO TILE's 16 rows; 8 pixels per thread, and 7 where 7 divides the
    image width; 32 or 64 output channels; chunks of 16 or 32 input channels. Only tiles whose shared
    memory one block may have (``smem_bytes``: this GPU's opt-in limit by default; without a GPU, the
    reference GPU's)."""
    require_problem(p)
    limit = device.target_properties()["smem_per_block_optin_bytes"] if smem_bytes is None else smem_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"smem_bytes must be a positive integer, got {limit!r}")
    spec = registry.get(NAME)
    out = []
    for tp, bn, bkc in product(PIXELS, (32, 64), (16, 32)):
        tile = dict(TH=16, TW=2 * tp, BN=bn, BKC=bkc, TP=tp)
        if (tp == 8 or p.w % tp == 0) and spec.dynamic_smem_bytes(tile) <= limit:
            out.append(tile)
    return out


def tune(x, f, y, p: Problem, tiles: list[dict] | None = None, repeat: int = 10) -> tuple[dict, list[dict]]:
    """Time every candidate tile on (x, f, y); return the fastest tile and one row per candidate."""
    return cuda_stages.time_tiles(NAME, tiles or candidates(p), x, f, y, p, repeat)


def stage(tile: dict):
    """The tuned stage: HALO TILE compiled with ``tile``, under its own name."""
    return cuda_stages.tuned("HALO AUTOTUNE", tile)


def label(tile: dict) -> str:
    """A candidate's name in the results rows: "HALO TILE 16 x 14, BN 64, BKC 32, TP 7"."""
    return f"{NAME} {tile['TH']} x {tile['TW']}, BN {tile['BN']}, BKC {tile['BKC']}, TP {tile['TP']}"


def parse(text: str) -> dict:
    """The tile a ``label`` names."""
    return cuda_stages.parse_label(NAME, KEYS, text)


def useful(p: Problem, tile: dict) -> float:
    """The share of the pixels that tiles of ``tile`` compute on ``p`` that lie in the image: the tiles at
    the bottom and right edges overhang it by rows and columns of padding, computed all the same."""
    require_problem(p)
    return p.h * p.w / (-(-p.h // tile["TH"]) * tile["TH"] * -(-p.w // tile["TW"]) * tile["TW"])
