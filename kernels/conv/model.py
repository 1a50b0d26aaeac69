"""The performance model applied to the convolution stages: SASS instruction counts times loop trips,
weights from instruction rates measured on this GPU, occupancy from the launch, the latency term
(one tile step of the SASS through perfmodel's scoreboard, latencies measured here), and predictions.

SASS comes from the same compilers the GPU uses, for the GPU the notebook runs on (the reference
GPU's sm_90 without one): NVRTC for the CUDA C++ stages (works on any machine) and Numba's PTX
through ptxas for the Numba stages (needs real ``numba.cuda``, so not in the simulator).
``harness.sass`` turns a cubin into text (nvdisasm or cuobjdump).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..harness import cuda_cpp, device, disk_cache, perfmodel, sass
from . import cuda_stages, registry
from .common import Problem

# The model's functions take a stage's name (or its registry.StageSpec) and read the facts they need from
# the record of the kernel it launches (registry.launched: AUTOTUNE's is SPLIT-K's).


# Nsight Compute metrics the chapter records beside perfmodel.NCU_METRICS (scripts/conv_counts.py --ncu) and
# reads: two checks of the model's assumptions; for reading the misses, where the instructions went and
# why the schedulers' warps waited.
NCU_CHECKS = {
    "L1 hit %": "l1tex__t_sector_hit_rate.pct",  # model.l1_hit_rate
    "busiest SM's blocks": "sm__ctas_launched.max",
}  # where the last wave went
NCU_PIPES = {
    "issue %": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "LSU": "sm__inst_executed_pipe_lsu.sum",
    "ADU": "sm__inst_executed_pipe_adu.sum",
    "ALU %": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "FMA-heavy %": "sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active",
}
NCU_STALLS = {
    label: perfmodel.ncu_stall_metric(reason)
    for label, reason in (  # why warps did not issue
        ("math pipe busy", "math_pipe_throttle"),
        ("dispatch", "dispatch_stall"),
        ("ALU/FMA latency", "wait"),
        ("shared load latency", "short_scoreboard"),
        ("memory latency", "long_scoreboard"),
        ("barrier", "barrier"),
        ("global load queue full", "lg_throttle"),
        ("shared load queue full", "mio_throttle"),
        ("ready, not picked", "not_selected"),
    )
}


def _ptxas() -> str:
    """ptxas (Numba's PTX -> cubin), wherever ``device.cuda_program`` finds it."""
    path = device.cuda_program("ptxas")
    if not path:
        raise FileNotFoundError("ptxas not found on PATH, in $CUDA_HOME/bin or in the nvidia pip wheels")
    return path


def _gpu_kernel(stage: str | registry.StageSpec) -> registry.StageSpec:
    """The record of the GPU kernel ``stage`` launches; SEQ, on the CPU, has none."""
    spec = registry.launched(stage)
    if not spec.gpu:
        raise ValueError(f"stage {spec.name} runs on the CPU: it has no GPU kernel to model")
    return spec


def numba_kernel(stage: str | registry.StageSpec) -> tuple[Callable, str]:
    """(Python function, Numba signature) of a Numba stage's kernel, as the book times it."""
    spec = _gpu_kernel(stage)
    if spec.language != "numba":
        raise ValueError(f"stage {spec.name} is {spec.language}, not Numba: cuda_stages.compile_info compiles it")
    # a stage with a tile builds its kernel per tile
    kernel = spec.module.make_kernel(**spec.tile) if spec.tile else getattr(spec.module, spec.kernel)
    y = "float32[:,::1]" if spec.y_matrix else "float32[:,:,:,::1]"
    return kernel.py_func, f"(float32[:,:,:,::1], float32[:,:,:,::1], {y})"


def numba_cubin(stage: str | registry.StageSpec, arch: str | None = None) -> tuple[bytes, str]:
    """(cubin, ptxas log) of a Numba stage, compiled for ``arch`` (``device.target_arch()``) outside the
    simulator."""
    numba_kernel(stage)  # a stage that is not Numba's is refused here
    arch = arch or device.target_arch()
    if device.MODE == device.SIM:
        raise RuntimeError("Numba's PTX needs the real numba.cuda; the simulator cannot compile kernels")
    return _numba_cubin(registry.launched(stage).name, arch)


@functools.cache  # each prediction of a stage reads its SASS: compile it once
def _numba_cubin(stage: str, arch: str) -> tuple[bytes, str]:
    func, signature = numba_kernel(stage)
    from numba import cuda

    # On disk, named by what decides the code: the stage's module and the one it imports its Stage from,
    # its tile, the signature, the target and the compilers (the notebooks of one run compile it once).
    spec = registry.launched(stage)
    sources = [Path(spec.module.__file__).read_bytes(), Path(__file__).with_name("common.py").read_bytes()]
    ptxas = subprocess.run([_ptxas(), "--version"], capture_output=True, text=True).stdout
    name = disk_cache.key(*sources, spec.tile, signature, arch, device.software(), ptxas)
    if (entry := disk_cache.get("numba", name)) is not None:
        log, cubin = disk_cache.unpack(entry)
        return cubin, log
    cc = (int(arch[3:-1]), int(arch[-1]))
    ptx, _ = cuda.compile_ptx(func, signature, cc=cc)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "k.ptx").write_text(ptx)
        out = subprocess.run(
            [_ptxas(), f"-arch={arch}", "-v", "-o", f"{d}/k.cubin", f"{d}/k.ptx"],
            capture_output=True,
            text=True,
            check=True,
        )
        cubin, log = Path(d, "k.cubin").read_bytes(), out.stderr + out.stdout
    disk_cache.put("numba", name, disk_cache.pack(log, cubin))
    return cubin, log


def cuda_stage(stage: str | registry.StageSpec) -> str:
    """The stage whose kernel ``stage`` launches: AUTOTUNE runs SPLIT-K with the tile it chose."""
    return registry.launched(stage).name


def compiled(
    stage: str | registry.StageSpec, tile: dict | None = None, arch: str | None = None
) -> tuple[str, cuda_cpp.Resources]:
    """(SASS text, registers/shared memory) of one stage, for ``arch`` (``device.target_arch()``)."""
    spec = _gpu_kernel(stage)
    arch = arch or device.target_arch()
    if spec.language == "numba":
        cubin, log = numba_cubin(spec, arch)
        resources = cuda_cpp.parse_ptxas_log(log, arch)
    else:
        c = cuda_stages.compile_info(spec.name, tile, arch)
        cubin, resources = c.cubin, c.resources
    if len(resources) != 1:
        raise RuntimeError(f"expected one kernel in the cubin of {spec.name}, found {len(resources)}")
    # ptxas reports static shared memory only; occupancy needs the dynamic part the launch adds too.
    dynamic = spec.dynamic_smem_bytes(tile or spec.tile)
    return sass.disassemble_text(cubin), dataclasses.replace(resources[0], smem_bytes=resources[0].smem_bytes + dynamic)


def launch_shape(stage: str | registry.StageSpec, p: Problem, tile: dict | None = None) -> tuple[int, int]:
    """(blocks, threads per block) of a stage's launch on problem ``p``."""
    spec = _gpu_kernel(stage)
    if spec.tile is None:  # untiled: blocks of THREADS, a thread per output channel and TP pixels of a row
        tp, threads = spec.pixels_per_thread(), spec.module.THREADS
        return math.ceil(p.n * p.h * math.ceil(p.w / tp) * p.k / threads), threads
    grid, block = spec.geometry(tile or spec.tile, p)
    return grid[0] * grid[1] * grid[2], block[0] * block[1]


def _chunks(p: Problem, tile: dict) -> int:
    return math.ceil(p.c / tile["BKC"])


# The trip counts of a source's loops (registry.StageSpec.loops), by how many loops the SASS kept.
LOOP_TRIPS = {
    ("c",): {1: lambda p, t: [p.c]},  # r and s are unrolled
    ("c", "r"): {2: lambda p, t: [p.c, 3]},  # s and the TP pixels are unrolled
    ("tap", "chunk"): {
        2: lambda p, t: [9, _chunks(p, t)],
        1: lambda p, t: [9 * _chunks(p, t) / t.get("SPLIT", 1)],  # one flattened step loop (per slice, on average)
    },
    ("chunk", "group"): {  # channel chunks, groups of 4 channels; taps unrolled
        2: lambda p, t: [_chunks(p, t), t["BKC"] // 4],
        1: lambda p, t: [_chunks(p, t)],  # BKC = 4: the group loop has one trip and is gone
    },
}


def trips(stage: str | registry.StageSpec, p: Problem, tile: dict | None, n_loops: int) -> list[float] | None:
    """Loop trip counts per entry, outermost first, for the loop structure the SASS shows; None when
    the compiled loops are not the ones the source suggests (then use ncu counts instead). SHARED is
    such a case: LLVM versions its strided copy loops, so which copy runs how often is not static."""
    spec = registry.launched(stage)
    rule = LOOP_TRIPS.get(spec.loops, {}).get(n_loops)
    return rule(p, tile or spec.tile) if rule else None


def sass_counts(
    stage: str | registry.StageSpec, p: Problem, tile: dict | None = None, sass: str | None = None
) -> perfmodel.Counts | None:
    """Warp instructions the whole launch executes, from the SASS; None if the loops are not understood."""
    sass = sass if sass is not None else compiled(cuda_stage(stage), tile)[0]
    instructions = perfmodel.parse_sass(sass)
    t = trips(stage, p, tile, len(perfmodel.find_loops(instructions)))
    if t is None:
        return None
    blocks, threads = launch_shape(stage, p, tile)
    return perfmodel.sass_counts(instructions, t).scaled(blocks * math.ceil(threads / 32))


def l1_wavefronts(stage: str, p: Problem) -> float | None:
    """L1 wavefronts (distinct 128-byte lines per warp access, summed) of NAIVE and COALESCING, from
    their access pattern; None for the other stages. BLOCK TILING's warp accesses touch one line
    each, as COALESCING's do: one wavefront per load, which E's W_ldst already charges. The tiled
    stages' global traffic is small beside their shared-memory loads (already in the ldst count).

    NAIVE and COALESCING: a warp is 32 output channels of one pixel (K a multiple of 32, as in both
    problems; otherwise warps straddle pixels and this is an estimate); every in-image tap and input
    channel loads one input value (one address: one line) and 32 filter values, which NCHW's filter
    layout puts 9C words apart (32 lines) and (3, 3, C, K) puts side by side (one line). A pixel has
    (valid rows) x (valid columns) in-image taps, which sums to (3H - 2)(3W - 2) over an image. The
    one store per warp touches 32 lines in NCHW (HW words apart), one in NHWC."""
    spec = registry.launched(stage)
    if not (spec.gpu and spec.tile is None and spec.thread_pixels == 1):  # not one thread per output value
        return None
    lines = 32 if spec.layout == "nchw" else 1
    warps_per_pixel = math.ceil(p.k / 32)
    loads = p.n * warps_per_pixel * p.c * (3 * p.h - 2) * (3 * p.w - 2)
    return loads * (1 + lines) + p.pixels * warps_per_pixel * lines


def epilogue_bytes(stage: str, p: Problem, tile: dict | None = None) -> float:
    """Bytes a stage moves after its main loops, for ``perfmodel.predict``: every stage writes y once;
    SPLIT-K (and AUTOTUNE with SPLIT > 1) zeroes y first (a separate launch) and each of its slices
    reads and writes y with atomics: (1 + 2 x SPLIT) x y."""
    y = 4 * p.pixels * p.k
    spec = registry.launched(stage)
    split = (tile or spec.tile).get("SPLIT", 1) if spec.split_k else 1
    return y * (1 + 2 * split if split > 1 else 1)


def hot_loop(instructions: list[sass.Instruction]) -> perfmodel.Loop:
    """The loop whose iteration the latency model simulates: the innermost loop that holds a barrier
    (one tile step: copy, barrier, FMAs), else the innermost loop."""
    loops = perfmodel.find_loops(instructions)
    if not loops:
        raise ValueError("the SASS has no loop")
    synced = [lp for lp in loops if any(i.base == "BAR" and lp.start <= i.address <= lp.end for i in instructions)]
    return max(synced or loops, key=lambda lp: lp.depth)


# An SM's L1 data cache and shared memory together (one array), in KB, by compute capability: the
# sizes the CUDA C++ Programming Guide gives for each architecture.
L1_SMEM_KB = {"80": 192, "86": 128, "87": 192, "89": 128, "90": 256}


def l1_smem_bytes(props: dict) -> int:
    """The L1 + shared memory array of one SM of the GPU ``props`` describes (the chip's own capability,
    ``hardware_cc``, where ``BOOK_MAX_CC`` lowered the compile target); for a compute capability the table
    does not list, its shared memory alone (a lower bound)."""
    kb = L1_SMEM_KB.get(props.get("hardware_cc", props.get("cc", "")))
    return kb * 1024 if kb else props["smem_per_sm_bytes"]


@functools.lru_cache(maxsize=32)
def tap_reuse(p: Problem, bm: int, split: int = 1) -> float:
    """The fraction of a tiled stage's input loads (one per pixel, tap and channel chunk) that read a
    pixel its block already loaded at an earlier tap: blocks own runs of ``bm`` consecutive NHWC pixels;
    zero-padding taps load nothing. With ``split`` slices each block reuses only among its own slice's
    taps (tap t in slice t x split // 9: exact when split divides 9)."""
    m = np.arange(p.pixels)
    row, col = np.divmod(m % (p.h * p.w), p.w)
    # The pixels a block loads lie within w + 1 of its own run: numbered from there, a (block, pixel) pair
    # is one index of a dense array, and marking them counts the distinct pairs without sorting.
    width = bm + 2 * p.w + 2
    base = (m // bm) * width + m % bm + p.w + 1
    slices: dict[int, list[int]] = {}
    for tap in range(9):
        slices.setdefault(tap * split // 9, []).append(tap)
    loads = distinct = 0
    for taps in slices.values():  # slices share no loads
        seen = np.zeros(((p.pixels - 1) // bm + 1) * width, dtype=bool)
        for tap in taps:
            dr, dc = tap // 3 - 1, tap % 3 - 1
            r, c = row + dr, col + dc
            inside = (r >= 0) & (r < p.h) & (c >= 0) & (c < p.w)
            seen[base[inside] + dr * p.w + dc] = True
            loads += int(np.count_nonzero(inside))
        distinct += int(np.count_nonzero(seen))
    return 1.0 - distinct / loads


def resident_blocks(
    stage: str, p: Problem, resources: cuda_cpp.Resources, tile: dict | None = None, props: dict | None = None
) -> int:
    """Blocks of the stage's launch that fit on one SM at once (at least 1)."""
    props = props or device.properties()
    threads = launch_shape(stage, p, tile)[1]
    return max(
        1,
        perfmodel.blocks_per_sm(
            threads,
            max(resources.registers, 1),
            resources.smem_bytes,
            max_threads=props["max_threads_per_sm"],
            regs_per_sm=props["regs_per_sm"],
            smem_per_sm=props["smem_per_sm_bytes"],
        ),
    )


def l1_hit_rate(
    stage: str, p: Problem, resources: cuda_cpp.Resources, tile: dict | None = None, props: dict | None = None
) -> float:
    """Predicted fraction of a tiled stage's global load sectors that hit L1 (to check against ncu's
    l1tex__t_sector_hit_rate).

    The tile loops run the taps outside the channel chunks: per tap a block loads its BM pixels, shifted
    by the tap, over all C channels, and BN filter columns over all C. A pixel loaded at one tap comes
    back at the next taps that reach it; it is still in L1 if what the SM's resident blocks load in
    between -- one tap's sweep, resident x C x (BM + BN) x 4 bytes -- fits in the L1 that their shared
    memory leaves (of ``l1_smem_bytes``). Then input sectors hit at the ``tap_reuse`` rate and filter
    sectors (BN : BM of the input's) are taken as misses; otherwise nothing hits. HALO TILE's
    cp.async.cg copies skip L1: 0."""
    spec = registry.launched(stage)
    if spec.language != "cuda" or spec.cp_async:  # the Numba stages' hits are not modelled
        return 0.0
    t = tile or spec.tile
    props = props or device.properties()
    bm, bn = spec.tile_shape(t)
    resident = resident_blocks(spec, p, resources, t, props)
    sweep = resident * p.c * (bm + bn) * 4
    if sweep > l1_smem_bytes(props) - resident * (resources.smem_bytes + perfmodel.SMEM_RESERVED):
        return 0.0
    return tap_reuse(p, bm, t.get("SPLIT", 1)) * bm / (bm + bn)


def latency_efficiency(
    stage: str,
    p: Problem,
    w: perfmodel.Weights,
    lat: perfmodel.Latencies,
    tile: dict | None = None,
    sass: str | None = None,
    l1_hit: float = 0.0,
    slots=perfmodel.taking_turns,
    held: bool = True,
    spread: bool = False,
):
    """efficiency(W) for ``perfmodel.occupancy_ratio``: the share of a scheduler's time that W warps of
    this stage keep issuing, from one iteration of its hot loop -- weighted issue slots per warp (the
    model's E weights, charged by ``slots``: E's rule by default) against the cycles
    ``perfmodel.scheduler_cycles`` simulates. A tiled stage's global load hits L1 with probability
    ``l1_hit`` (``l1_hit_rate``) and otherwise waits the far-L2 latency (``lat.l2_far``; ``lat.global_``
    if not measured): the stages' inputs are far larger than the near L2 probe's working set. A loop
    without a barrier re-reads input and filter lines that its own and neighbouring warps touched (L1
    latency). ``held``: each instruction holds the scheduler for the slots E charges it (its class's
    weight), so that a warp's wait hides only behind the slots of the other warps -- the issue the
    efficiency is measured against; False: one cycle each, the pace of the dependencies alone (and
    with ``slots`` other than E's). ``spread``: the blocks an SM holds run out of step (see
    ``perfmodel.scheduler_cycles``) instead of together. None when the loops are not understood (no trip counts)."""
    sass = sass if sass is not None else compiled(cuda_stage(stage), tile)[0]
    instructions = perfmodel.parse_sass(sass)
    loops = perfmodel.find_loops(instructions)
    t = trips(stage, p, tile, len(loops))
    if t is None:
        return None
    body = perfmodel.expand_loop(
        instructions, hot_loop(instructions), {lp.start: n for lp, n in zip(loops, t, strict=True)}
    )
    if not 0 <= l1_hit <= 1:
        raise ValueError(f"l1_hit must be in [0, 1], got {l1_hit}")
    if not any(i.base == "BAR" for i in body):
        lat = dataclasses.replace(lat, global_=lat.l1)  # no tiles: loads re-read lines L1 holds
    else:
        lat = dataclasses.replace(lat, global_=l1_hit * lat.l1 + (1 - l1_hit) * (lat.l2_far or lat.global_))
    per_class = {"fp32": 0, "ldst": 0, "other": 0}
    for ins in body:
        per_class[perfmodel.classify(ins.opcode, ins.predicate)] += 1
    issue = slots(perfmodel.Counts(**per_class), w)
    warps_per_block = math.ceil(launch_shape(stage, p, tile)[1] / 32)
    per_scheduler = max(1, warps_per_block // 4)  # a block's warps on one scheduler (barrier partners)
    weights = w if held and slots is perfmodel.taking_turns else None
    cache: dict[int, float] = {}

    def efficiency(warps: int) -> float:
        if warps not in cache:
            partners = per_scheduler if warps % per_scheduler == 0 else 1
            cycles = perfmodel.scheduler_cycles(body, lat, warps, partners, slot_weights=weights, spread=spread)
            cache[warps] = perfmodel.issue_efficiency(warps, issue, cycles)
        return cache[warps]

    return efficiency


@dataclasses.dataclass(frozen=True)
class Waves:
    """How a stage's launch goes out in waves of blocks."""

    blocks: int
    warps_per_block: int
    resident: int  # blocks that fit on one SM at once
    tail: int | None  # the last wave's blocks on the busiest SM, where a profiler placed them
    per_sm: list[int]  # blocks the busiest SM runs in each wave (perfmodel.wave_blocks)


def waves(
    stage: str,
    p: Problem,
    resources: cuda_cpp.Resources,
    tile: dict | None = None,
    props: dict | None = None,
    efficiency=None,
    busiest_sm_blocks: int | None = None,
) -> Waves:
    """The launch's waves; ``busiest_sm_blocks``: the most blocks one SM ran over the launch, where a
    profiler counted it (ncu's sm__ctas_launched.max), to charge the last partial wave as it was placed
    rather than by ``perfmodel.wave_blocks``' rule. Waves can charge a tail of one to ``resident``
    blocks; an SM that ran more took blocks freed early in a full wave, and is charged one full wave more."""
    props = props or device.properties()
    blocks, threads = launch_shape(stage, p, tile)
    resident = resident_blocks(stage, p, resources, tile, props)
    full = blocks // (props["sms"] * resident)
    spread, cluster = perfmodel.tail_bounds(blocks, props["sms"], resident)
    tail = None
    if busiest_sm_blocks is not None and cluster:
        tail = min(max(busiest_sm_blocks - full * resident, spread), cluster)
    warps = math.ceil(threads / 32)
    return Waves(
        blocks,
        warps,
        resident,
        tail,
        perfmodel.wave_blocks(blocks, props["sms"], warps, resident, efficiency=efficiency, tail_per_sm=tail),
    )


def _occupancy(wv: Waves, sms: int, efficiency) -> float:
    """The occupancy ratio of ``wv`` as placed (its last wave where ``waves`` put it) at ``efficiency``."""
    partial = wv.blocks % (sms * wv.resident)
    return perfmodel.occupancy_ratio(
        wv.blocks,
        sms,
        wv.warps_per_block,
        wv.resident,
        efficiency=efficiency,
        tail_per_sm=wv.per_sm[-1] if partial else None,
    )


def occupancy(
    stage: str,
    p: Problem,
    resources: cuda_cpp.Resources,
    tile: dict | None = None,
    props: dict | None = None,
    efficiency=None,
    busiest_sm_blocks: int | None = None,
) -> float:
    """``perfmodel.occupancy_ratio`` of the stage's ``waves``."""
    props = props or device.properties()
    return _occupancy(waves(stage, p, resources, tile, props, efficiency, busiest_sm_blocks), props["sms"], efficiency)


@dataclasses.dataclass(frozen=True)
class StagePrediction:
    """The model's prediction for one launch, with the inputs it was made from."""

    prediction: perfmodel.Prediction
    counts: perfmodel.Counts
    counted_from: str  # "SASS", or "given" (counts passed in: ncu's, where the loops are not understood)
    tile: dict | None
    resources: cuda_cpp.Resources
    l1_hit: float  # l1_hit_rate
    efficiency: object  # the latency term's efficiency(W); None where the loops are not understood
    waves: Waves
    # place(busiest_sm_blocks): the same prediction with the last wave charged where a profiler counted
    # it (see ``waves``), without compiling or simulating again
    place: Callable[[int | None], StagePrediction] = dataclasses.field(repr=False, compare=False)


def predict(
    stage: str,
    p: Problem,
    w: perfmodel.Weights,
    lat: perfmodel.Latencies,
    *,
    fma_gflops: float,
    copy_gbps: float,
    wavefront_rate: float,
    tile: dict | None = None,
    props: dict | None = None,
    counts: perfmodel.Counts | None = None,
    busiest_sm_blocks: int | None = None,
    slots=perfmodel.taking_turns,
    held: bool = True,
    spread: bool = False,
) -> StagePrediction | None:
    """Everything the chapter's model says about ``stage`` on ``p``: SASS counts (``counts`` where the
    SASS loops are not understood; None if there are neither), the L1 hit rate and the latency term,
    the occupancy ratio of the launch's waves, and ``perfmodel.predict`` with the L1 wavefront bound
    and the epilogue. The rates are this GPU's: weights ``w``, latencies ``lat``, the FMA ceiling, the
    copy bandwidth and the LDS.32 wavefront rate (per second). ``slots``: the rule that charges the
    issue slots, E's by default (``perfmodel.SLOT_RULES``). The waves run at the latency term's pace
    with E's slots held (``latency_efficiency``); where the last, partial wave goes is decided by the pace
    of the dependencies alone (``held=False``): whether warps wait on their own results, not whether
    the issue slots hide those waits. ``held=False`` here: the model without held slots for both (as it
    was before the autotune candidates tested it). ``spread``: the scoreboard runs an SM's blocks out of
    step rather than together (the notebook's test of that assumption)."""
    sass, res = compiled(cuda_stage(stage), tile)
    c, counted_from = sass_counts(stage, p, tile, sass=sass), "SASS"
    if c is None:
        c, counted_from = counts, "given"
    if c is None:
        return None
    props = props or device.properties()
    hit = l1_hit_rate(stage, p, res, tile, props)
    eff = latency_efficiency(stage, p, w, lat, tile, sass, l1_hit=hit, slots=slots, held=held, spread=spread)
    pace = eff  # the pace the last wave's placement follows: the dependencies alone
    if eff and held and slots is perfmodel.taking_turns:
        pace = latency_efficiency(stage, p, w, lat, tile, sass, l1_hit=hit, held=False, spread=spread)

    def place(busiest: int | None) -> StagePrediction:
        wv = waves(stage, p, res, tile, props, pace, busiest)
        pr = perfmodel.predict(
            p.flops,
            c,
            w,
            peak_gflops=fma_gflops,
            occupancy=_occupancy(wv, props["sms"], eff),
            fp32_flops=64,
            wavefronts=l1_wavefronts(stage, p),
            wavefront_rate=wavefront_rate,
            epilogue_bytes=epilogue_bytes(stage, p, tile),
            bandwidth_gbps=copy_gbps,
            slots=slots,
        )
        return StagePrediction(pr, c, counted_from, tile, res, hit, eff, wv, place)

    return place(busiest_sm_blocks)


def measure_latencies() -> perfmodel.Latencies:
    """The scoreboard's latencies on this GPU, in cycles: FFMA chain, shared-load chain and barrier
    (conv/rates.cu's latency_probe, one 4-warp block), and global loads hitting L1, the L2 in a 4 MiB
    working set and the L2 in one of 3/4 of its size (L1 skipped; the probes chapter's pointer chases)."""
    import cupy
    import numpy as np

    from ..probes import memory

    iters = 1024
    probe = cuda_cpp.load("conv/rates.cu", "latency_probe")
    cycles = cupy.zeros(3, dtype=cupy.int64)
    sink = cupy.zeros(128, dtype=cupy.float32)
    for _ in range(2):  # the first launch warms the instruction cache
        probe((1,), (128,), (cycles, sink, np.int32(iters), np.float32(0.999), np.float32(0.001)))
    alu, shared, barrier = (float(c) / (iters * 16) for c in cycles.get())
    hits = {r["metric"]: float(r["value"]) for r in memory.run_hit_latencies()}
    return perfmodel.Latencies(
        alu=alu,
        shared=shared,
        global_=hits["L2 hit latency"],
        barrier=barrier,
        l1=hits["L1 hit latency"],
        l2_far=hits["L2 far latency"],
    )


def _probe_launch() -> tuple[int, int, int]:
    """(blocks, threads per block, loop iterations) of the rate probes: 8 blocks of 256 threads per SM."""
    return device.properties()["sms"] * 8, 256, 4096


def measure_rates(repeat: int = 20) -> dict:
    """Instruction rates on this GPU in warp instructions per second: FP32 (FFMA), integer, LDS.32 (the
    model's load/store rate) and, to check that one weight serves global loads too, LDG.32 hitting L1."""
    import cupy

    from ..harness import ceilings, timing

    blocks, threads, iters = _probe_launch()
    out = cupy.empty(blocks * threads, dtype=cupy.int32)

    def rate(kernel: str, args: tuple, per_iteration: int) -> float:
        """Warp instructions per second of ``kernel``, which issues ``per_iteration`` of the timed kind
        per thread and loop iteration."""
        k = cuda_cpp.load("conv/rates.cu", kernel)
        t = timing.benchmark(lambda: k((blocks,), (threads,), args), repeat=repeat)
        return blocks * threads / 32 * iters * per_iteration / (t.median_ms * 1e-3)

    step = (cupy.int32(iters), cupy.int32(32))
    other = rate("iadd_rate", (out, cupy.int32(iters), cupy.int32(3), cupy.int32(5)), 8 * 2)  # (add, xor) x 8 chains
    ldst = rate("lds_rate", (out, *step), 8)
    global_ld = rate("ldg_rate", (cupy.arange(4096, dtype=cupy.int32), out, *step), 8)
    fp32 = ceilings.measure_fma() * 1e9 / 2 / 32  # FLOP/s -> FFMA warp instr/s
    return {"fp32": fp32, "ldst": ldst, "other": other, "ldg": global_ld}


MIX_LOADS = (0, 2, 4, 8, 16)  # loads per iteration of conv/rates.cu's mix_rate, beside 8 (add, xor) chains


def mix_counts(loads: int, arch: str | None = None) -> perfmodel.Counts:
    """SASS counts of one iteration of the mix_rate loop with ``loads`` loads (compiled for ``arch``,
    ``device.target_arch()``), where the loop's body is one iteration."""
    text = sass.disassemble_text(
        cuda_cpp.compile_cubin("conv/rates.cu", arch or device.target_arch(), (f"-DMIX_LOADS={loads}",)).cubin
    )
    instructions = perfmodel.parse_sass(text, "mix_rate")
    (loop,) = perfmodel.find_loops(instructions)
    return perfmodel.static_counts(instructions, loop.start, loop.end)


def mix_slots(counts: perfmodel.Counts, w: perfmodel.Weights) -> dict:
    """Issue slots of one iteration (FFMA slots, one per scheduler and cycle) by the two rules of
    ``perfmodel.SLOT_RULES``: E's, where the classes take turns, and pipes side by side."""
    return {name: rule(counts, w) for name, rule in perfmodel.SLOT_RULES.items()}


def measure_mix(rates: dict, loads: tuple = MIX_LOADS, repeat: int = 20) -> list[dict]:
    """E's assumption tested on this GPU: mix_rate (8 integer chains and ``loads`` L1-hit loads per
    iteration) timed, in issue slots per iteration and warp at the FP32 rate of ``rates``
    (``measure_rates``), beside its instruction count and ``mix_slots`` of its SASS counts with the
    weights of ``rates``. Rows for ``results.record``: kernel "mix", problem "<n> loads"."""
    import cupy

    from ..harness import timing

    w = perfmodel.weights(rates["fp32"], rates["ldst"], rates["other"])
    blocks, threads, iters = _probe_launch()
    words = cupy.arange(8192, dtype=cupy.int32)  # 32 KB: stays in L1
    out = cupy.empty(blocks * threads, dtype=cupy.int32)
    rows = []
    for n in loads:
        # the cubin whose SASS mix_counts reads (compile_cubin caches it): the counts are the timed code's
        k = cuda_cpp.load("conv/rates.cu", "mix_rate", (f"-DMIX_LOADS={n}",), arch=device.target_arch())
        args = (words, out, cupy.int32(iters), cupy.int32(32), cupy.int32(3), cupy.int32(5))
        t = timing.benchmark(lambda k=k, args=args: k((blocks,), (threads,), args), repeat=repeat)
        c = mix_counts(n)
        measured = t.median_ms * 1e-3 * rates["fp32"] / (blocks * threads / 32 * iters)  # FFMA slots per warp
        slots = {"instructions": c.total, "measured": measured, **mix_slots(c, w)}
        rows += [
            {"kernel": "mix", "problem": f"{n} loads", "metric": m, "value": v, "unit": "slots"}
            for m, v in slots.items()
        ]
    return rows
