"""The model's fast paths give the numbers of the straightforward computations they replaced, exactly.

The scoreboard (perfmodel.scheduler_cycles) and the tap reuse (conv.model.tap_reuse) were rewritten to
run the notebooks' hundreds of predictions in seconds; the reference versions below are the plain
algorithms, kept here to check them on real SASS of the convolution stages and on small problems.
"""

import math

import numpy as np
import pytest

from kernels.conv import common, cuda_stages, model, s9_autotune, s11_halo_autotune
from kernels.harness import perfmodel, sass

LAT = perfmodel.Latencies(alu=4.1, shared=23.7, global_=280.5, barrier=21.3, l1=33.2, l2_far=512.0)
W = perfmodel.Weights(1.0, 2.73, 1.41)


def reference_cycles(body, lat, warps=1, warps_per_block=1, iterations=3, slot_weights=None, spread=False):
    """scheduler_cycles as first written: every warp's issue time worked out again every cycle."""
    operands = [perfmodel.register_operands(ins) for ins in body]
    slot = [1.0] * len(body)
    if slot_weights is not None:
        per_class = {"fp32": slot_weights.compute, "ldst": slot_weights.ldst, "other": slot_weights.other}
        slot = [per_class[perfmodel.classify(ins.opcode, ins.predicate)] for ins in body]
    blocks = warps // warps_per_block
    first = [(w // warps_per_block) * len(body) // blocks if spread else 0 for w in range(warps)]
    pc = list(first)
    ready = [dict() for _ in range(warps)]
    loading = [dict() for _ in range(warps)]
    groups = [[] for _ in range(warps)]
    pending = [0.0] * warps
    hold = [0.0] * warps
    at_barrier = {}
    iteration_end = [[0.0] * iterations for _ in range(warps)]
    loads = perfmodel.GLOBAL_LATENCY_OPS | perfmodel.SHARED_LATENCY_OPS

    def issue_time(w):
        if pc[w] >= first[w] + len(body) * iterations or any(w in waiting for waiting in at_barrier.values()):
            return math.inf
        ins = body[pc[w] % len(body)]
        writes, reads = operands[pc[w] % len(body)]
        t = max([hold[w]] + [ready[w].get(r, 0.0) for r in reads] + [loading[w].get(r, 0.0) for r in writes])
        if ins.base == "DEPBAR":
            t = max([t] + groups[w][: max(0, len(groups[w]) - perfmodel._depbar_keep(ins))])
        return t

    now, last = 0.0, -1
    while True:
        times = [issue_time(w) for w in range(warps)]
        if min(times) == math.inf:
            break
        now = max(now, min(times))
        w = next(v for v in ((last + 1 + k) % warps for k in range(warps)) if times[v] <= now)
        ins = body[pc[w] % len(body)]
        writes, _ = operands[pc[w] % len(body)]
        done = now + perfmodel.latency_of(ins, lat)
        for r in writes:
            ready[w][r] = done
            if ins.base in loads:
                loading[w][r] = done
        if ins.base == "LDGSTS":
            pending[w] = max(pending[w], now + lat.global_)
        elif ins.base == "LDGDEPBAR":
            groups[w].append(pending[w])
        elif ins.base == "DEPBAR":
            keep = perfmodel._depbar_keep(ins)
            groups[w] = groups[w][max(0, len(groups[w]) - keep) :] if keep else []
        busy = slot[pc[w] % len(body)]
        hold[w] = now + busy
        pc[w] += 1
        if (pc[w] - first[w]) % len(body) == 0:
            iteration_end[w][(pc[w] - first[w]) // len(body) - 1] = now + busy
        if ins.base == "BAR":
            waiting = at_barrier.setdefault(w // warps_per_block, [])
            waiting.append(w)
            if len(waiting) == warps_per_block:
                for v in waiting:
                    hold[v] = now + lat.barrier
                del at_barrier[w // warps_per_block]
        last, now = w, now + busy
    ends = [max(e[i] for e in iteration_end) for i in range(iterations)]
    return (ends[-1] - ends[0]) / (iterations - 1) if iterations > 1 else ends[-1]


def hot_body(stage, tile, p):
    """One iteration of a stage's hot loop, its inner loops unrolled, as model.latency_efficiency builds it."""
    text = model.compiled(model.cuda_stage(stage), tile)[0]
    instructions = perfmodel.parse_sass(text)
    loops = perfmodel.find_loops(instructions)
    trips = model.trips(stage, p, tile, len(loops))
    return perfmodel.expand_loop(
        instructions, model.hot_loop(instructions), {lp.start: n for lp, n in zip(loops, trips, strict=True)}
    )


def first_candidates(tuner, n):
    """The first ``n`` tiles a tuner times on conv1, and the problem."""
    p = common.PROBLEMS["conv1"]
    return [(tuner.NAME, tile, p) for tile in tuner.candidates(p)[:n]]


# the stages' own tiles (barriers; cp.async with DEPBAR for HALO TILE) and a few autotune candidates
CASES = [
    (name, cuda_stages.DEFAULTS[name], common.PROBLEMS[pname])
    for name, pname in (("REGISTER TILING", "conv1"), ("DOUBLE BUFFER", "conv2"), ("HALO TILE", "conv1"))
]


@pytest.fixture(scope="module")
def bodies():
    if not sass.available():
        pytest.skip("needs nvdisasm or cuobjdump")
    cases = CASES + first_candidates(s9_autotune, 2) + first_candidates(s11_halo_autotune, 1)
    return [(name, hot_body(name, tile, p)) for name, tile, p in cases]


@pytest.mark.parametrize(
    "warps, partners, weights, spread",
    [(1, 1, None, False), (2, 2, W, False), (4, 1, W, True), (3, 1, None, False), (4, 2, None, True)],
)
def test_the_scoreboard_gives_the_reference_cycles_on_real_sass(bodies, warps, partners, weights, spread):
    for name, body in bodies:
        fast = perfmodel.scheduler_cycles(body, LAT, warps, partners, slot_weights=weights, spread=spread)
        assert fast == reference_cycles(body, LAT, warps, partners, slot_weights=weights, spread=spread), name


def test_a_repeated_simulation_is_answered_from_memory(bodies):
    _, body = bodies[0]
    before = perfmodel._simulate.cache_info().hits
    first = perfmodel.scheduler_cycles(body, LAT, 2, 1)
    assert perfmodel.scheduler_cycles(list(body), LAT, 2, 1) == first
    assert perfmodel._simulate.cache_info().hits > before


def reference_tap_reuse(p, bm, split=1):
    """tap_reuse as first written: every (owner, pixel) key of every load, and np.unique."""
    m = np.arange(p.pixels)
    img, rest = np.divmod(m, p.h * p.w)
    row, col = np.divmod(rest, p.w)
    keys = []
    for tap in range(9):
        r, c = row + tap // 3 - 1, col + tap % 3 - 1
        inside = (r >= 0) & (r < p.h) & (c >= 0) & (c < p.w)
        owner = (m // bm) * split + tap * split // 9
        keys.append(owner[inside] * p.pixels + ((img * p.h + r) * p.w + c)[inside])
    keys = np.concatenate(keys)
    return 1.0 - len(np.unique(keys)) / len(keys)


@pytest.mark.parametrize("p", [common.PROBLEMS["odd4"], common.PROBLEMS["conv2"], common.Problem("x", 3, 1, 1, 5, 9)])
def test_tap_reuse_equals_the_reference_count(p):
    for bm in (1, 3, 16, 64, 128):
        for split in (1, 2, 3, 4, 9, 13):
            assert model.tap_reuse.__wrapped__(p, bm, split) == reference_tap_reuse(p, bm, split)
