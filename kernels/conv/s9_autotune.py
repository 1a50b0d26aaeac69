"""AUTOTUNE: the SPLIT-K kernel with its tile sizes and reduction slices chosen per problem by timing.

Large tiles reuse each loaded value more (fewer loads per FMA) but make fewer blocks: conv2 has
only 3136 pixels, so 128 x 64 tiles give 200 blocks for 132 SMs, and splitting the reduction buys
blocks back at the price of atomics. The best trade-off depends on the problem and the GPU, so we
measure instead of guessing (the source's suggested next step). SPLIT = 1 is DOUBLE BUFFER.
"""

from __future__ import annotations

import math
from itertools import product

from ..harness import check, device
from . import cuda_stages, registry
from .common import Problem, require_problem

NAME = registry.get("AUTOTUNE").runs  # the kernel it tunes: SPLIT-K
KEYS = ("BM", "BN", "BKC", "SPLIT")
METRIC = "autotune_ms"  # the results rows of every candidate's time


def candidates(p: Problem, sms: int | None = None) -> list[dict]:
    """Tiles worth trying on ``p``: 64 to 256 threads, no block wider than the channels it covers;
    reduction slices only while the output tiles alone give fewer than four blocks per SM (``sms``:
    this GPU's SM count by default; without a GPU, the reference GPU's)."""
    require_problem(p)
    sms = device.target_properties()["sms"] if sms is None else check.positive_int(sms, "sms")
    out = []
    for bm, bn, bkc in product((32, 64, 128, 256), (32, 64, 128), (8, 16)):
        threads = bm // 8 * bn // 8
        if not (64 <= threads <= 256 and bn <= max(32, p.k)):
            continue
        blocks = math.ceil(p.pixels / bm) * math.ceil(p.k / bn)
        for split in (1, 2, 3, 4, 6):
            if split == 1 or blocks < 4 * sms:
                out.append(dict(BM=bm, BN=bn, BKC=bkc, SPLIT=split))
    return out


def tune(x, f, y, p: Problem, tiles: list[dict] | None = None, repeat: int = 10) -> tuple[dict, list[dict]]:
    """Time every candidate tile on (x, f, y); return the fastest tile and one row per candidate."""
    return cuda_stages.time_tiles(NAME, tiles or candidates(p), x, f, y, p, repeat)


def stage(tile: dict):
    """The tuned stage: SPLIT-K compiled with ``tile``, under its own name."""
    return cuda_stages.tuned("AUTOTUNE", tile)


def label(tile: dict) -> str:
    """A candidate's name in the results rows: "SPLIT-K 64 x 128, BKC 16, SPLIT 2"."""
    return f"{NAME} {tile['BM']} x {tile['BN']}, BKC {tile['BKC']}, SPLIT {tile['SPLIT']}"


def parse(text: str) -> dict:
    """The tile a ``label`` names."""
    return cuda_stages.parse_label(NAME, KEYS, text)
