"""Auto-checked exercises of the convolution chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/03_conv.ipynb.
The published solution and typical wrong kernels are in solutions.py. The questions' answers are
computed when a student checks them: from the model (``model``, ``perfmodel``) and from the chapter's
run stored for this GPU (``stored_run``), never typed here.
"""

import math

import numpy as np

from kernels.harness import perfmodel
from kernels.harness.accesses import COALESCED
from kernels.harness.exercise import Exercise, Part, Question, register

from . import common, cuda_stages, model, stored_run, winograd
from .common import R, S, reference

# --- conv-ex-coalescing: NAIVE's threads and loops, the data in NHWC ------------------------------
# launch(y, x, f): x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K).


def coalescing_inputs(rng, size):
    """x (N, H, W, C) and f (3, 3, C, K) in [-1, 1) for size = (N, C, K, H, W)."""
    n, c, k, h, w = size
    return (rng.uniform(-1, 1, (n, h, w, c)).astype(np.float32), rng.uniform(-1, 1, (R, S, c, k)).astype(np.float32))


def coalescing_reference(x_nhwc, f_rsck):
    """common.reference (NCHW, KCRS) on the same data, returned in NHWK."""
    y = reference(x_nhwc.transpose(0, 3, 1, 2), f_rsck.transpose(3, 2, 0, 1))
    return y.transpose(0, 2, 3, 1)


register(
    Exercise(
        label="conv-ex-coalescing",
        task="COALESCING from NAIVE: y[n, h, w, k] = sum over c, r, s of x[n, h+r-1, w+s-1, c] * f[r, s, c, k], "
        "zero-padded; x NHWC, f (3, 3, C, K); launch(y, x, f)",
        make_inputs=coalescing_inputs,
        reference=coalescing_reference,
        # (N, C, K, H, W): 32 output channels, so that a warp of the channel-fastest numbering covers one
        # pixel and its accesses can be coalesced; output counts 480, 1344 and 32, none a multiple of the block
        sizes=((1, 4, 32, 5, 3), (2, 3, 32, 7, 3), (1, 1, 32, 1, 1)),
        atol=1e-4,
        expect=(COALESCED,),
    )
)


# --- questions: answers computed from the model and from the chapter's stored run -------------------


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


register(
    Question(
        label="conv-ex-predict",
        task="REGISTER TILING on conv1 with BKC = 8 and 16: other instructions per FFMA and E",
        parts={
            "other_per_ffma_bkc8": Part(
                lambda: _reg_tiling(8).other / _reg_tiling(8).fp32,
                "divide model.sass_counts(...).other by .fp32 for the stage's default tile on conv1",
            ),
            "other_per_ffma_bkc16": Part(
                lambda: _reg_tiling(16).other / _reg_tiling(16).fp32,
                "the same with dict(BM=128, BN=64, BKC=16), compiled again (model.compiled(stage, tile))",
            ),
            "E_bkc8": Part(
                lambda: _reg_e(8),
                "perfmodel.efficiency(counts, weights) with W_ldst and W_other of the stored run",
                rtol=0.03,
            ),
            "E_bkc16": Part(lambda: _reg_e(16), "the same E with the BKC = 16 counts", rtol=0.03),
        },
    )
)

register(
    Question(
        label="conv-ex-occupancy",
        task="DOUBLE BUFFER on conv2: blocks launched, blocks resident per SM, occupancy ratio",
        parts={
            "blocks": Part(
                lambda: model.launch_shape("DOUBLE BUFFER", _conv("conv2"))[0],
                "pixel tiles of 128 times channel tiles of 64, each rounded up",
            ),
            "resident": Part(
                lambda: _resident("DOUBLE BUFFER", "conv2"),
                "perfmodel.blocks_per_sm with 128 threads and the compile table's registers and shared memory",
                rtol=0,
            ),
            "occupancy": Part(
                lambda: _occupancy_ratio("DOUBLE BUFFER", "conv2"),
                "the issue slots used over those available: the busiest SM runs ceil(blocks / SMs) blocks",
            ),
        },
    )
)

register(
    Question(
        label="conv-ex-l1",
        task="DOUBLE BUFFER: KB loaded between two taps (conv1, conv2), tap reuse and predicted L1 hit rate (conv1)",
        parts={
            "conv1_kb": Part(
                lambda: _tap_kb("conv1"), "3 blocks x C channels x (128 pixels + 64 filter columns) x 4 bytes"
            ),
            "conv2_kb": Part(lambda: _tap_kb("conv2"), "the same with conv2's C"),
            "reuse": Part(
                lambda: model.tap_reuse(_conv("conv1"), 128),
                "count the distinct pixels the nine taps of a 128-pixel run read, against the loads",
                rtol=0.05,
            ),
            "hit": Part(
                lambda: model.l1_hit_rate(
                    "DOUBLE BUFFER", _conv("conv1"), model.compiled("DOUBLE BUFFER")[1], props=stored_run.load().props
                ),
                "only input sectors can hit: weigh the reuse by the input's share of a step's sectors",
                rtol=0.05,
            ),
        },
    )
)

register(
    Question(
        label="conv-ex-lastwave",
        task="SPLIT-K on conv2: blocks left after the first wave, the busiest SM's blocks spread or clustered, "
        "and the placement the model chooses (spread or cluster)",
        parts={
            "left": Part(
                lambda: (
                    model.launch_shape("SPLIT-K", _conv("conv2"))[0]
                    - stored_run.load().props["sms"] * _resident("SPLIT-K", "conv2")
                ),
                "subtract one full wave: SMs x resident blocks",
                rtol=0,
            ),
            "busiest_spread": Part(lambda: _tail("spread"), "a full wave plus ceil(leftovers / SMs)", rtol=0),
            "busiest_cluster": Part(lambda: _tail("cluster"), "a full wave plus as many as one SM holds", rtol=0),
            "placement": Part(_placement, "perfmodel.wave_blocks clusters the tail only after latency-bound waves"),
        },
    )
)

register(
    Question(
        label="conv-ex-stalls",
        task="From the stored ncu run: BLOCK TILING's largest stall on conv1 (a stall column's name), the two "
        "columns that would show loads holding up issue, COALESCING's L1 hit % and memory-latency stall on conv2",
        parts={
            "block_wait": Part(
                lambda: _largest_stall("BLOCK TILING", "conv1"),
                "the largest column of the stall table in BLOCK TILING's conv1 row, 'ready, not picked' aside",
            ),
            "queue_columns": Part(
                lambda: {label for label in model.NCU_STALLS if "queue" in label},
                "the stall columns a warp waits in when the load/store pipe cannot take another load",
            ),
            "coal_conv2_l1_pct": Part(
                lambda: 100 * stored_run.read_ncu().l1_hit[("COALESCING", "conv2")],
                "ncu's L1 hit rate of COALESCING on conv2 (the profile's tables)",
                rtol=0.05,
            ),
            "coal_conv2_memory_latency": Part(
                lambda: _ncu("stalls", "COALESCING", "conv2")["memory latency"],
                "the 'memory latency' stall of COALESCING on conv2",
                rtol=0.05,
            ),
        },
    )
)

register(
    Question(
        label="conv-ex-banks",
        task="WINOGRAD's loads of V: passes a quarter warp's float4 load takes with runs of 8 and of 4 tiles a "
        "thread, and the shared-memory wavefronts the runs of 4 save on conv1 (millions)",
        parts={
            "passes_run8": Part(
                lambda: winograd.v_load_passes(one_pass=False)[0],
                "accesses.bank_degree of threads 0-7's byte addresses 4 * 8 * tg, 16 bytes each",
                rtol=0,
            ),
            "passes_run4": Part(lambda: winograd.v_load_passes(one_pass=True)[0], "the same with 4 * 4 * tg", rtol=0),
            "saved_millions": Part(
                lambda: (
                    winograd.v_loads(_conv("conv1"))
                    * 4
                    * (winograd.v_load_passes(one_pass=False)[0] - winograd.v_load_passes(one_pass=True)[0])
                    / 1e6
                ),
                "loads of V (2 per channel, in every warp of every block) x the quarters of a warp x the passes saved",
            ),
        },
    )
)
