"""All stages in order, as the notebook, the tests and scripts/conv_counts.py list them: views of
``registry.REGISTRY``."""

from __future__ import annotations

from ..harness import device
from . import cuda_stages, registry
from .common import Stage

# The GPU stages with a kernel of their own (not SEQ, on the CPU, nor the autotuners, which run another's)
GPU_STAGES = tuple(s.name for s in registry.REGISTRY if s.gpu and not s.runs)
FILES = {s.name: s.file for s in registry.REGISTRY}


def _stage(spec: registry.StageSpec) -> Stage:
    """The stage with its full-size tile."""
    return spec.module.STAGE if spec.module else cuda_stages.STAGES[spec.name]


def all_gpu(props: dict | None = None) -> list[Stage]:
    """The GPU stages with their full-size tiles (Numba ones also run in the simulator); with ``props``
    (device.properties() keys), only those that GPU can run."""
    skipped = unsupported(props) if props is not None else {}
    return [_stage(registry.get(name)) for name in GPU_STAGES if name not in skipped]


def unsupported(props: dict) -> dict[str, str]:
    """{stage: why it cannot run} for the GPU ``props`` describes; empty on the H100 the book was run on."""
    why = {name: cuda_stages.unsupported(name, registry.get(name).tile, props) for name in GPU_STAGES}
    return {name: reason for name, reason in why.items() if reason}


def numba_stages() -> list[Stage]:
    """SEQ (on the CPU) and the Numba stages, as this mode can run them: on a GPU with the tiles the
    timing uses; in the simulator, where each thread is a Python thread, those with a tile with their
    smaller ``sim_tile``."""
    return [
        s.module.stage(**s.sim_tile) if s.sim_tile and not device.on_gpu() else s.module.STAGE
        for s in registry.REGISTRY
        if s.language == "numba"
    ]


def tile_of(name: str) -> dict | None:
    """A copy of the tile the book times ``name`` with; None for a stage without one."""
    tile = registry.get(name).tile
    return dict(tile) if tile is not None else None
