"""All stages in order, as the notebook, the tests and scripts/conv_counts.py list them."""

from __future__ import annotations

from ..harness import device
from . import cuda_stages, s0_seq, s1_naive, s2_coalescing, s3_block_tiling, s4_shared
from .common import Stage

GPU_STAGES = (
    "NAIVE",
    "COALESCING",
    "BLOCK TILING",
    "SHARED",
    "VECTORIZE & UNROLL",
    "REGISTER TILING",
    "DOUBLE BUFFER",
    "SPLIT-K",
    "HALO TILE",
)
FILES = {
    "SEQ": "conv/s0_seq.py",
    "NAIVE": "conv/s1_naive.py",
    "COALESCING": "conv/s2_coalescing.py",
    "BLOCK TILING": "conv/s3_block_tiling.py",
    "SHARED": "conv/s4_shared.py",
    **{name: path for name, (path, _) in cuda_stages.FILES.items()},
    "AUTOTUNE": "conv/s9_autotune.py",
}


def all_gpu(props: dict | None = None) -> list[Stage]:
    """The GPU stages with their full-size tiles (Numba ones also run in the simulator); with ``props``
    (device.properties() keys), only those that GPU can run."""
    every = [
        s1_naive.STAGE,
        s2_coalescing.STAGE,
        s3_block_tiling.STAGE,
        s4_shared.STAGE,
        cuda_stages.S5,
        cuda_stages.S6,
        cuda_stages.S7,
        cuda_stages.S8,
        cuda_stages.S10,
    ]
    skipped = unsupported(props) if props is not None else {}
    return [s for s in every if s.name not in skipped]


def unsupported(props: dict) -> dict[str, str]:
    """{stage: why it cannot run} for the GPU ``props`` describes; empty on the H100 the book was run on."""
    why = {name: cuda_stages.unsupported(name, cuda_stages.DEFAULTS[name], props) for name in cuda_stages.FILES}
    return {name: reason for name, reason in why.items() if reason}


def numba_stages() -> list[Stage]:
    """SEQ (on the CPU) and the Numba stages, as this mode can run them: on a GPU with the tiles the
    timing uses; in the simulator, where each thread is a Python thread, SHARED with a smaller tile."""
    shared = s4_shared.STAGE if device.on_gpu() else s4_shared.stage(**s4_shared.SIM_TILE)
    return [s0_seq.STAGE, s1_naive.STAGE, s2_coalescing.STAGE, s3_block_tiling.STAGE, shared]


def tile_of(name: str) -> dict | None:
    if name == "SHARED":
        return dict(s4_shared.GPU_TILE)
    return dict(cuda_stages.DEFAULTS[name]) if name in cuda_stages.DEFAULTS else None
