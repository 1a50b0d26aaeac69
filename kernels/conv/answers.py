"""The expected answers of the convolution chapter's questions (exercises.py), for the checker and the tests.

Teacher-only: the student edition leaves this file out and checks digests of these values instead. The
answers are computed when a student checks them: from the model (``model``, ``perfmodel``) and from the
chapter's run stored for the GPU the page ran on (``stored_run``), never typed here.
"""

import math

from kernels.harness import perfmodel
from kernels.harness.exercise import answers

from . import common, cuda_stages, model, stored_run, winograd


def _conv(name: str) -> common.Problem:
    return common.PROBLEMS[name]


def _reg_tiling(bkc: int):
    """REGISTER TILING's SASS counts on conv1 with BKC = ``bkc`` (the stage's other tile sizes)."""
    tile = dict(cuda_stages.DEFAULTS["REGISTER TILING"], BKC=bkc)
    return model.sass_counts("REGISTER TILING", _conv("conv1"), tile, sass=model.compiled("REGISTER TILING", tile)[0])


def _reg_e(bkc: int) -> float:
    return perfmodel.efficiency(_reg_tiling(bkc), stored_run.load().w)


def _resident(stage: str, pname: str) -> int:
    return model.resident_blocks(stage, _conv(pname), model.compiled(stage)[1], props=stored_run.load().props)


def _occupancy_ratio(stage: str, pname: str) -> float:
    """The occupancy ratio of the stage's launch from its blocks alone, latency aside."""
    blocks, threads = model.launch_shape(stage, _conv(pname))
    sms = stored_run.load().props["sms"]
    return perfmodel.occupancy_ratio(blocks, sms, math.ceil(threads / 32), _resident(stage, pname))


def _tap_kb(pname: str) -> float:
    """What three DOUBLE BUFFER blocks load between two taps: one tap's sweep over all C channels."""
    bm, bn = cuda_stages.tile_shape("DOUBLE BUFFER", cuda_stages.DEFAULTS["DOUBLE BUFFER"])
    return 3 * _conv(pname).c * (bm + bn) * 4 / 1e3


def _tail(which: str) -> int:
    """Blocks SPLIT-K's busiest SM runs on conv2 in all, its last wave spread or clustered."""
    blocks = model.launch_shape("SPLIT-K", _conv("conv2"))[0]
    resident = _resident("SPLIT-K", "conv2")
    spread, cluster = perfmodel.tail_bounds(blocks, stored_run.load().props["sms"], resident)
    return resident + (spread if which == "spread" else cluster)


def _placement() -> str:
    """Where the model puts SPLIT-K's last wave on conv2, with this GPU's stored rates and latencies."""
    run = stored_run.load()
    sp = model.predict("SPLIT-K", _conv("conv2"), run.w, run.lat, props=run.props, **run.gpu_rates)
    _, cluster = perfmodel.tail_bounds(sp.waves.blocks, run.props["sms"], sp.waves.resident)
    return "cluster" if sp.waves.per_sm[-1] == cluster else "spread"


def _ncu(table: str, stage: str, pname: str) -> dict:
    found = getattr(stored_run.read_ncu(), table).get((stage, pname))
    if found is None:
        raise LookupError(f"no stored ncu {table} of {stage} on {pname}: run scripts/conv_counts.py --ncu on a GPU")
    return found


def _largest_stall(stage: str, pname: str) -> str:
    """The reason the stage's warps waited for most, ready warps that were not picked aside."""
    stalls = {k: v for k, v in _ncu("stalls", stage, pname).items() if k != "ready, not picked"}
    return max(stalls, key=stalls.get)


answers(
    "conv-ex-predict",
    other_per_ffma_bkc8=lambda: _reg_tiling(8).other / _reg_tiling(8).fp32,
    other_per_ffma_bkc16=lambda: _reg_tiling(16).other / _reg_tiling(16).fp32,
    E_bkc8=lambda: _reg_e(8),
    E_bkc16=lambda: _reg_e(16),
)


answers(
    "conv-ex-occupancy",
    blocks=lambda: model.launch_shape("DOUBLE BUFFER", _conv("conv2"))[0],
    resident=lambda: _resident("DOUBLE BUFFER", "conv2"),
    occupancy=lambda: _occupancy_ratio("DOUBLE BUFFER", "conv2"),
)


answers(
    "conv-ex-l1",
    conv1_kb=lambda: _tap_kb("conv1"),
    conv2_kb=lambda: _tap_kb("conv2"),
    reuse=lambda: model.tap_reuse(_conv("conv1"), 128),
    hit=lambda: model.l1_hit_rate(
        "DOUBLE BUFFER", _conv("conv1"), model.compiled("DOUBLE BUFFER")[1], props=stored_run.load().props
    ),
)


answers(
    "conv-ex-lastwave",
    left=lambda: (
        model.launch_shape("SPLIT-K", _conv("conv2"))[0]
        - stored_run.load().props["sms"] * _resident("SPLIT-K", "conv2")
    ),
    busiest_spread=lambda: _tail("spread"),
    busiest_cluster=lambda: _tail("cluster"),
    placement=_placement,
)


answers(
    "conv-ex-stalls",
    block_wait=lambda: _largest_stall("BLOCK TILING", "conv1"),
    queue_columns=lambda: {label for label in model.NCU_STALLS if "queue" in label},
    coal_conv2_l1_pct=lambda: 100 * stored_run.read_ncu().l1_hit[("COALESCING", "conv2")],
    coal_conv2_memory_latency=lambda: _ncu("stalls", "COALESCING", "conv2")["memory latency"],
)


answers(
    "conv-ex-banks",
    passes_run8=lambda: winograd.v_load_passes(one_pass=False)[0],
    passes_run4=lambda: winograd.v_load_passes(one_pass=True)[0],
    saved_millions=lambda: (
        winograd.v_loads(_conv("conv1"))
        * 4
        * (winograd.v_load_passes(one_pass=False)[0] - winograd.v_load_passes(one_pass=True)[0])
        / 1e6
    ),
)
