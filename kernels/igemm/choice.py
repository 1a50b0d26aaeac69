"""Which step to run on a problem (``best_step``): a model of each step's time, calibrated on the
chapter's stored run, and the head-and-main-loop fit that it and the chapter's GEMM sweep share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..harness import check, device
from .problems import PROBLEM, Problem, k_steps, refusal, require_problem, split_plan
from .registry import (
    BLOCK_M,
    FIXUP_TILE,
    REGISTRY,
    STAGE_BYTES,
    default_stages,
    smem_bytes,
    step_info,
    stored_name,
    unsupported,
)


def fit_head_tail(ks, ms) -> tuple[float, float]:
    """Least squares  time = head + K * per_k  (the source's head / main loop / tail model)."""
    if len(ks) != len(ms) or len(set(ks)) < 2:
        raise ValueError(
            f"ks and ms: a line needs times at two or more different K, as many as K values; "
            f"got {len(ms)} times at K = {list(ks)}"
        )
    per_k, head = np.polyfit(np.asarray(ks, float), np.asarray(ms, float), 1)
    return float(head), float(per_k)


def k_half(head_ms: float, per_k_ms: float) -> float:
    """The K at which the fixed cost equals the main loop: half the asymptotic rate."""
    check.finite_number(per_k_ms, "per_k_ms (the time per unit of K)", positive=True)
    if isinstance(head_ms, bool) or not isinstance(head_ms, (int, float, np.integer, np.floating)):
        raise ValueError(f"head_ms (the fixed cost) must be a real number, got {head_ms!r}")
    if not np.isfinite(head_ms):
        raise ValueError(f"head_ms (the fixed cost) must be a finite number, got {head_ms!r}")
    return head_ms / per_k_ms


# A model, not a timing: each step's tile (128x128, 128x256 for steps 7-10, 128x64 for step 11's narrow
# build) cuts the GEMM into tiles; the SMs run them in waves of SMs x blocks per SM (as shared memory,
# threads and registers allow); a tile costs its padded work, K rounded up to the step's K step, plus its
# head: what the tile costs besides its K steps (the prologue, the epilogue that no step overlaps with
# its math), in K steps.
# The chapter's depth sweep measures the head of the steps it times (stored_heads); the others are
# charged one K step. What one SM's blocks reach per second comes from the chapter's own stored run
# on the source problem: the rate that makes this model give that run's time. A block alone on an SM
# is taken to reach it too.
SLOT_RESERVED_BYTES = 1024  # the shared memory the runtime keeps per block


@dataclass(frozen=True)
class Choice:
    """A step and the parameters best_step picked for it, with the model's reasons."""

    step: int
    stages: int | None
    tile: tuple[int, int]  # (rows of M, columns of N) per block tile
    tiles: int  # block tiles of the problem
    slots: int  # blocks of the step that fit on one SM at once
    waves: int  # rounds of the SMs' slots over the tiles
    fill: float  # the useful fraction of the padded tile work
    estimate_ms: float | None  # the model's time; None where no stored rate calibrates it
    splits: int = 1  # blocks sharing each tile's K steps (split K); `tiles` counts them all

    @property
    def narrow(self) -> bool:
        """Built narrower than the step's own tiles (step 11's NARROW_N-wide build)."""
        return self.tile[1] != step_info(self.step).block_n

    @property
    def kwargs(self) -> dict:
        """The arguments ``launcher`` and ``conv`` take for it."""
        kwargs = {"stages": self.stages} if self.stages is not None else {}
        kwargs |= {"block_n": self.tile[1]} if self.narrow else {}
        return kwargs | ({"splits": self.splits} if self.splits > 1 else {})

    @property
    def name(self) -> str:
        return stored_name(self.step, self.stages, self.splits, self.tile[1])


def variants(problem: Problem, props: dict | None = None) -> list[tuple[int, int | None, int]]:
    """Every (step, stages, block_n) of the tensor-core steps that ``props``'s GPU (default: this one, or
    the reference GPU without one) can run on ``problem``: each depth at the step's own tile width, and
    step 11's narrow build at its deepest (its stages are a quarter smaller). Steps that refuse the layer
    (``refusal``) are left out; where every one does, the first one's refusal is raised."""
    require_problem(problem)
    tensor_core = [info for info in REGISTRY if info.cuda_cpp]
    takes = [info for info in tensor_core if refusal(info.number, problem) is None]
    if not takes:
        raise ValueError(refusal(tensor_core[0].number, problem))
    props = props or device.target_properties()
    out = []
    for info in takes:
        out += [(info.number, d, n) for d, n in info.builds if unsupported(info.number, props, d, n) is None]
    return out


def tile_model(
    step: int,
    stages: int | None,
    problem: Problem,
    props: dict,
    splits: int = 1,
    head: float = 1.0,
    block_n: int | None = None,
) -> tuple:
    """(tile, tiles, slots, waves, padded FLOP per tile) of ``step`` on ``problem``; with ``splits``
    (split K) a tile is one block's share: every output tile counts once per split, over its K steps.
    ``head``: what a tile costs besides its K steps, in K steps (stored_heads); ``block_n``: the tile
    width of the build (default: the step's own)."""
    info = step_info(step)
    m, n, kd = problem.gemm
    tile = (BLOCK_M, block_n or info.block_n)
    k_step = 64 if info.wgmma else 32
    k_tiles = k_steps(problem, step) if info.wgmma else -(-kd // k_step)
    if splits > 1:
        k_tiles, splits = split_plan(problem, splits, step)
    tiles = -(-m // tile[0]) * -(-n // tile[1]) * splits
    smem = smem_bytes(step, stages, tile[1]) if info.pipelined else STAGE_BYTES  # steps 2-3: one A and B tile
    by_smem = props["smem_per_sm_bytes"] // (smem + SLOT_RESERVED_BYTES)
    by_registers = props["regs_per_sm"] // (info.threads * -(-info.max_registers // 8) * 8)  # 8-register units
    # One block per SM for steps 7-12. A ping-pong block holds two tiles, but its consumers take turns at
    # the tensor cores, so its tiles count one after another, as one slot's.
    slots = max(1, min(props["max_threads_per_sm"] // info.threads, by_smem, by_registers))
    waves = -(-tiles // (props["sms"] * slots))
    tile_flops = 2 * tile[0] * tile[1] * (k_tiles + head) * k_step
    return tile, tiles, slots, waves, tile_flops


def _cost(step: int, stages: int | None, problem: Problem, props: dict, *options, **named) -> float:
    """The model's time in units of one SM's time per FLOP: waves x tiles sharing an SM x tile work, with
    the ``options`` (splits, head, block_n) that ``tile_model`` takes."""
    _, tiles, slots, waves, tile_flops = tile_model(step, stages, problem, props, *options, **named)
    sharing = min(slots, -(-tiles // props["sms"]))  # blocks on the busiest SM at once
    return waves * sharing * tile_flops


def launch_ms() -> float:
    """What any kernel costs before its work: the probes' empty kernel, timed with events around it."""
    from ..harness import quantities

    return quantities.empty_kernel_us()[0] / 1e3


def split_reduce_ms(problem: Problem, splits: int) -> float:
    """Split K's second kernel: one more launch and its traffic, ``splits`` fp32 partials read and the
    fp16 output written, at the machine chapter's copy rate."""
    from ..harness import quantities

    _, splits = split_plan(problem, splits)
    gbps, _ = quantities.copy_gbps()
    outputs = problem.gemm[0] * problem.gemm[1]
    return launch_ms() + (4 * splits + 2) * outputs / gbps / 1e6


# Step 12's fixup waits through a chain of memory round trips, each one DRAM latency: the partial's stores
# and fence, counting in, seeing the other splits in, reading the shares, counting out.
FIXUP_ROUND_TRIPS = 5


def fixup_ms(problem: Problem, splits: int, step: int) -> float:
    """Step 12's fixup: FIXUP_ROUND_TRIPS DRAM latencies (the probes'), and its workspace's traffic. Every
    unit writes its fp32 partial tile and reads back its share of all of them, all units at once, so the
    whole workspace goes out and back at the GPU's rate, not an SM's: the machine chapter's copy rate (a
    copy small enough for the L2 runs about as fast)."""
    from ..harness import quantities

    _, splits = split_plan(problem, splits, step)
    workspace = 4 * FIXUP_TILE * problem.tiles(step_info(step).block_n) * splits
    latency_ms = FIXUP_ROUND_TRIPS * quantities.dram_latency_ns()[0] / 1e6
    return latency_ms + 2 * workspace / quantities.copy_gbps()[0] / 1e6


def estimate_ms(
    step: int,
    stages: int | None,
    problem: Problem,
    props: dict,
    rate: float,
    splits: int = 1,
    head: float = 1.0,
    block_n: int | None = None,
) -> float:
    """The model's time of (step, stages) at tile width ``block_n`` (default: the step's own) on ``problem``
    at ``rate`` (its stored_rates entry, calibrated with the same ``head``): the launch, the tiles' work,
    and split K's partial sums (a second kernel, or step 12's fixup)."""
    work = _cost(step, stages, problem, props, splits, head, block_n) / rate
    if splits > 1 and step_info(step).fixup:
        return launch_ms() + work + fixup_ms(problem, splits, step)
    return launch_ms() + work + (split_reduce_ms(problem, splits) if splits > 1 else 0.0)


# The chapter's depth sweep: the source problem with 64 to 512 input channels, 9 to 72 K steps per tile.
DEPTH_SWEEP = {f"C={c}": Problem(n=PROBLEM.n, h=PROBLEM.h, w=PROBLEM.w, c=c, k=PROBLEM.k) for c in (64, 128, 256, 512)}


def depth_fit(ms: dict) -> tuple[float, float]:
    """(fixed ms besides the launch, ms per K step of a block's tiles): the line through a step's times
    ``ms`` ({DEPTH_SWEEP name: ms}) against each problem's K steps per tile. Over a persistent grid the
    busiest block runs the same number of tiles at every depth, so fixed / per K step is what one tile
    costs besides its K steps, in K steps: its head."""
    names = list(DEPTH_SWEEP)
    fixed, per_step = fit_head_tail([k_steps(DEPTH_SWEEP[n]) for n in names], [ms[n] for n in names])
    return fixed - launch_ms(), per_step


def stored_heads(gpu_slug: str | None = None) -> dict:
    """{step: its tile's head in K steps} from the depth sweeps in the chapter's stored run (the
    reference GPU's, or ``gpu_slug``'s); the steps without one are charged one K step by the model."""
    from ..harness import results

    rows = results.latest("igemm", gpu_slug or results.REFERENCE_GPU)
    heads = {}
    for info in REGISTRY:
        keys = {name: (f"v{info.number}_depth_sweep", name, "ms") for name in DEPTH_SWEEP}
        if all(key in rows for key in keys.values()):
            fixed, per_step = depth_fit({name: float(rows[key]["value"]) for name, key in keys.items()})
            heads[info.number] = fixed / per_step
    return heads


def stored_rates(props: dict, gpu_slug: str | None = None, heads: dict | None = None) -> dict:
    """{(step, stages, block_n): the model's cost per ms} that make the model (estimate_ms, launch included,
    each step's ``heads`` entry, default stored_heads) give the chapter's stored times of the source
    problem (the reference GPU's run, or ``gpu_slug``'s); empty where none is stored."""
    from ..harness import results

    rows = results.latest("igemm", gpu_slug or results.REFERENCE_GPU)
    heads = stored_heads(gpu_slug) if heads is None else heads
    launch = launch_ms()
    rates = {}
    for step, stages, block_n in variants(PROBLEM, props):
        names = [stored_name(step, stages, block_n=block_n)]
        if stages == default_stages(step) and block_n == step_info(step).block_n:
            names.append(stored_name(step, None))  # v5_epilogue: the default depth without its count
        for name in names:
            row = rows.get((name, "source problem", "ms"))
            if row and float(row["value"]) > launch:
                cost = _cost(step, stages, PROBLEM, props, head=heads.get(step, 1.0), block_n=block_n)
                rates[(step, stages, block_n)] = cost / (float(row["value"]) - launch)
                break
    return rates


def best_step(
    problem: Problem,
    props: dict | None = None,
    rates: dict | None = None,
    heads: dict | None = None,
    steps: tuple | None = None,
) -> Choice:
    """The step and pipeline depth the model expects fastest on ``problem``, for the GPU ``props``
    describes (default: this one, or the reference GPU without one).

    ``rates`` ({(step, stages, block_n): rate}) calibrates each variant with the tile heads ``heads`` ({step: K
    steps}, one K step where absent); by default both come from the chapter's stored run (stored_heads,
    stored_rates), and given rates come with the heads they were calibrated with (default none). Only
    variants with a rate compete, and only those of ``steps`` where given. Without any (no stored run),
    the fallback: the variant with the fewest waves x tiles sharing an SM x tile work, ties to the later
    step at its default depth. It never picks a step that refuses the layer: shapes no tensor-core step
    takes (C or K not a multiple of 8, over 2^31 elements) raise the steps' own refusal, and so do
    ``steps`` that all refuse it (a stride or padding their input gather cannot describe)."""
    require_problem(problem)
    props = props or device.target_properties()
    eligible = [v for v in variants(problem, props) if steps is None or v[0] in steps]
    if not eligible and steps is not None:
        refused = [why for step in steps if (why := refusal(step, problem))]
        if len(refused) == len(steps):
            raise ValueError(f"steps: {refused[0]}")
        raise ValueError(f"steps: none of {tuple(steps)} runs on a GPU of compute capability {props['cc']}")
    if not eligible:
        raise ValueError(f"problem: no tensor-core step runs on a GPU of compute capability {props['cc']}")
    if rates is None:
        heads = stored_heads() if heads is None else heads
        rates = stored_rates(props, heads=heads)
    heads = heads or {}
    timed = [v for v in eligible if v in rates]

    def summary(step, stages, block_n, ms, splits=1):
        tile, tiles, slots, waves, tile_flops = tile_model(step, stages, problem, props, splits, block_n=block_n)
        fill = problem.flops / (tiles * tile_flops)
        return Choice(step, stages, tile, tiles, slots, waves, fill, ms, splits)

    if timed:
        # Split K for the steps that take it: every split that leaves each block two K steps or more (one
        # copied while one is multiplied), its second kernel's time added.
        timed = [
            (*v, s)
            for v in timed
            for s in (range(1, k_steps(problem, v[0]) // 2 + 1) if step_info(v[0]).split_k else (1,))
            if s == 1 or split_plan(problem, s, v[0])[1] == s  # each count of splits once
        ]
        ms = {v: estimate_ms(v[0], v[1], problem, props, rates[v[:3]], v[3], heads.get(v[0], 1.0), v[2]) for v in timed}
        # ties: the later step, the wider tile, the fewer splits
        step, stages, block_n, splits = min(timed, key=lambda v: (ms[v], -v[0], -v[2], v[3]))
        return summary(step, stages, block_n, ms[(step, stages, block_n, splits)], splits)
    defaults = [v for v in eligible if v[1] == default_stages(v[0]) and v[2] == step_info(v[0]).block_n]
    step, stages, block_n = min(defaults, key=lambda v: (_cost(v[0], v[1], problem, props), -v[0]))
    return summary(step, stages, block_n, None)
