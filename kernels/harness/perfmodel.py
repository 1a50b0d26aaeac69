"""The instruction-efficiency performance model (Konstantinidis & Cotronis 2017, as DIGEST 002 uses it).

A compute-bound kernel runs at the FP32 peak times its instruction efficiency

    E = N_fp32 * W_c / (N_fp32 * W_c + N_ldst * W_ldst + N_other * W_other),   W_c = 1,

where the weights say how many FP32 instructions fit in the issue time of one instruction of each
class (W = FP32 rate / that class's rate, both measured on the same GPU), times an occupancy ratio
for problems too small to keep every SM's schedulers busy -- or, with few warps per scheduler, too
latency-bound to (``scheduler_cycles``: a register scoreboard over one loop iteration of the SASS,
with latencies measured on the GPU, gives ``issue_efficiency``). Counts come either from the SASS
(static counts times loop trip counts, ``sass_counts``) or from Nsight Compute (``read_ncu_csv``).
Everything here is arithmetic and text parsing: it runs, and is tested, without a GPU.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import re
from dataclasses import dataclass

from . import sass

# Nsight Compute metrics the model reads: all warp instructions, FP32 and memory thread instructions.
NCU_METRICS = (
    "smsp__inst_executed.sum",
    "smsp__sass_thread_inst_executed_op_fp32_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_memory_pred_on.sum",
)


def ncu_stall_metric(reason: str) -> str:
    """The Nsight Compute metric for warps stalled for ``reason`` (long_scoreboard, barrier, wait, ...):
    the warps waiting for it, summed over the cycles, per instruction issued."""
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


FP32_OPS = {
    "FFMA",
    "FADD",
    "FMUL",
    "FMNMX",
    "FSEL",
    "FSET",
    "FSETP",
    "FCHK",
    "FSWZADD",
    "FFMA32I",
    "FADD32I",
    "FMUL32I",
}
LDST_OPS = {
    "LD",
    "LDG",
    "LDS",
    "LDL",
    "LDC",
    "LDSM",
    "LDGSTS",
    "ST",
    "STG",
    "STS",
    "STL",
    "ATOM",
    "ATOMS",
    "ATOMG",
    "RED",
    "LDGDEPBAR",
}


@dataclass(frozen=True)
class Counts:
    """Executed warp instructions by class (any consistent scope: per thread, per warp, whole kernel)."""

    fp32: float
    ldst: float
    other: float

    @property
    def total(self) -> float:
        return self.fp32 + self.ldst + self.other

    def scaled(self, factor: float) -> Counts:
        return Counts(self.fp32 * factor, self.ldst * factor, self.other * factor)


@dataclass(frozen=True)
class Weights:
    compute: float
    ldst: float
    other: float


def weights(fp32_rate: float, ldst_rate: float, other_rate: float) -> Weights:
    """Weights from measured instruction rates (instructions per second, any common scale)."""
    for name, v in (("fp32_rate", fp32_rate), ("ldst_rate", ldst_rate), ("other_rate", other_rate)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return Weights(1.0, fp32_rate / ldst_rate, fp32_rate / other_rate)


def taking_turns(counts: Counts, w: Weights) -> float:
    """Issue slots by E's rule: the classes take turns, each instruction costing its class's weight."""
    return counts.fp32 * w.compute + counts.ldst * w.ldst + counts.other * w.other


def side_by_side(counts: Counts, w: Weights) -> float:
    """Issue slots if the pipes work side by side: the larger of the issue (one slot per instruction)
    and each class's own pipe time (its weighted count). The alternative the chapter tests."""
    return max(counts.total, counts.fp32 * w.compute, counts.ldst * w.ldst, counts.other * w.other)


SLOT_RULES = {"E: classes take turns": taking_turns, "pipes side by side": side_by_side}


def efficiency(counts: Counts, w: Weights, slots=taking_turns) -> float:
    """Instruction efficiency E in [0, 1]: the FP32 instructions' slots over all slots, as the rule
    ``slots`` charges them (E's own, ``taking_turns``, by default)."""
    if min(counts.fp32, counts.ldst, counts.other) < 0:
        raise ValueError(f"instruction counts must be >= 0, got {counts}")
    denominator = slots(counts, w)
    if denominator <= 0:
        raise ValueError("no instructions counted")
    return counts.fp32 * w.compute / denominator


SMEM_RESERVED = 1024  # shared memory the driver reserves for each resident block (sm_80, sm_90)


def blocks_per_sm(
    threads: int,
    registers: int,
    smem_bytes: int,
    *,
    max_threads: int = 2048,
    regs_per_sm: int = 65536,
    smem_per_sm: int = 233472,
    max_blocks: int = 32,
    reg_granule: int = 256,
    smem_reserved: int = SMEM_RESERVED,
    sub_partitions: int = 4,
) -> int:
    """Resident blocks per SM allowed by threads, registers and shared memory (H100 defaults), as
    cuda_occupancy.h counts them: a warp's registers are allocated in granules, and each of the SM's
    ``sub_partitions`` holds whole warps in its share of the register file; each block also reserves
    ``smem_reserved`` bytes of shared memory."""
    if threads < 1 or registers < 1 or smem_bytes < 0:
        raise ValueError(f"need threads >= 1, registers >= 1, smem >= 0; got {threads}, {registers}, {smem_bytes}")
    warps = math.ceil(threads / 32)
    limits = [
        max_threads // (warps * 32),
        register_warps(registers, regs_per_sm, reg_granule, sub_partitions) // warps,
        max_blocks,
        smem_per_sm // (smem_bytes + smem_reserved),
    ]
    return max(0, min(limits))


def _warp_registers(registers: int, reg_granule: int) -> int:
    """Registers one warp is allocated at ``registers`` per thread: whole granules."""
    return math.ceil(registers * 32 / reg_granule) * reg_granule


def register_warps(registers: int, regs_per_sm: int = 65536, reg_granule: int = 256, sub_partitions: int = 4) -> int:
    """Warps an SM's register file holds at ``registers`` per thread: whole warps in each
    sub-partition's share (cudaOccMaxBlocksPerSMRegsLimit), so 48 registers give 40 warps, not 42."""
    return regs_per_sm // sub_partitions // _warp_registers(registers, reg_granule) * sub_partitions


def register_warps_beside(
    full: int, other: int, regs_per_sm: int = 65536, reg_granule: int = 256, sub_partitions: int = 4
) -> int:
    """Warps of a kernel with ``other`` registers a thread that still fit in an SM's register file once it
    holds as many warps of a kernel with ``full`` registers as it can (each sub-partition's share apart)."""
    left = regs_per_sm // sub_partitions % _warp_registers(full, reg_granule)  # per sub-partition
    return register_warps(other, left * sub_partitions, reg_granule, sub_partitions)


def _eta(efficiency, warps: int) -> float:
    eta = efficiency(warps) if efficiency else 1.0
    if not 0 < eta <= 1:
        raise ValueError(f"efficiency({warps}) must be in (0, 1], got {eta}")
    return eta


def tail_bounds(blocks: int, sms: int, resident_blocks: int) -> tuple[int, int]:
    """The fewest and the most blocks of a launch's last, partial wave of r blocks that its busiest SM
    can run: spread over the SMs, ceil(r / sms); clustered on the first SMs to free, min(resident_blocks, r).
    (0, 0) if the launch ends in a full wave."""
    rest = blocks % (sms * resident_blocks)
    return math.ceil(rest / sms), min(resident_blocks, rest)


def wave_blocks(
    blocks: int,
    sms: int,
    warps_per_block: int,
    resident_blocks: int,
    schedulers: int = 4,
    efficiency=None,
    tail_per_sm: int | None = None,
) -> list[int]:
    """Blocks the busiest SM runs in each wave of a launch: ``resident_blocks`` per full wave, then the
    last, partial wave of r blocks.

    A launch that is one partial wave is spread over the SMs: ceil(r / sms) on the busiest. A tail
    after full waves goes to the slots that free first. If the full waves are latency-bound
    (``efficiency`` < 1 for their warps per scheduler), every warp moves at the pace of its own
    dependencies, an SM's blocks finish together, and the first SMs to free their slots take
    min(resident_blocks, r) blocks each. If they are issue-bound, the schedulers favour older warps,
    an SM's blocks finish one after another, and the tail spreads as a single wave does.
    ``tail_per_sm``: the busiest SM's tail where a profiler counted it, instead of either rule."""
    if min(blocks, sms, warps_per_block, resident_blocks, schedulers) < 1:
        raise ValueError("blocks, sms, warps_per_block, resident_blocks and schedulers must be >= 1")
    full = blocks // (sms * resident_blocks)
    spread, cluster = tail_bounds(blocks, sms, resident_blocks)
    if not cluster:
        return [resident_blocks] * full
    tail = spread
    if tail_per_sm is not None:
        if not spread <= tail_per_sm <= cluster:
            raise ValueError(f"tail_per_sm must be in [{spread}, {cluster}], got {tail_per_sm}")
        tail = tail_per_sm
    elif full and _eta(efficiency, math.ceil(resident_blocks * warps_per_block / schedulers)) < 1:
        tail = cluster
    return [resident_blocks] * full + [tail]


def occupancy_ratio(
    blocks: int,
    sms: int,
    warps_per_block: int,
    resident_blocks: int,
    schedulers: int = 4,
    efficiency=None,
    tail_per_sm: int | None = None,
) -> float:
    """The fraction of the machine's issue slots a launch can use, from blocks, SMs and warps.

    Blocks go out in waves of up to ``resident_blocks`` per SM (``wave_blocks``: how many the busiest
    SM runs in each, and where a partial last wave goes). A wave lasts as long as its busiest
    scheduler needs: each of an SM's ``schedulers`` issues only for its own warps, ceil(blocks on the
    SM x warps_per_block / schedulers) of them, so an SM with fewer warps than schedulers leaves some
    idle (DIGEST 002's min(active warps, 1)). ``efficiency(W)``: the fraction of its time a scheduler
    with W warps can issue (``issue_efficiency``; latency), 1 if not given. ``tail_per_sm``: see
    ``wave_blocks``. The ratio is the ideal time (every scheduler of every SM busy) over the sum of
    the waves' times."""
    time = 0.0
    for per_sm in wave_blocks(blocks, sms, warps_per_block, resident_blocks, schedulers, efficiency, tail_per_sm):
        warps = math.ceil(per_sm * warps_per_block / schedulers)
        time += warps / _eta(efficiency, warps)
    return blocks * warps_per_block / (sms * schedulers) / time


@dataclass(frozen=True)
class Prediction:
    gflops: float
    ms: float
    efficiency: float
    occupancy: float
    bound: str

    def __str__(self) -> str:
        return (
            f"{self.gflops:,.0f} GFLOP/s ({self.ms:.4g} ms): E = {self.efficiency:.3f}, "
            f"occupancy ratio = {self.occupancy:.3f}, {self.bound}-bound"
        )


def predict(
    flops: float,
    counts: Counts,
    w: Weights,
    *,
    peak_gflops: float,
    occupancy: float = 1.0,
    bytes_moved: float | None = None,
    bandwidth_gbps: float | None = None,
    wavefronts: float | None = None,
    wavefront_rate: float | None = None,
    fp32_flops: float | None = None,
    epilogue_bytes: float | None = None,
    slots=taking_turns,
) -> Prediction:
    """Predicted rate: peak x E x occupancy ratio, unless a memory side is slower -- DRAM (bytes /
    bandwidth) or the L1 data pipe (``wavefronts`` / ``wavefront_rate``) -- plus the epilogue.

    A warp's global access costs the L1 one wavefront per distinct 128-byte line it touches, so an
    uncoalesced load (32 lines) occupies the pipe 32 times as long as the one issue slot the
    instruction count charges. ``wavefront_rate`` is the measured rate of conflict-free LDS.32, one
    wavefront each (per second, the whole GPU).

    ``fp32_flops``: the FLOPs one counted FP32 instruction does (64 for a warp's FFMA), for counts of a
    whole launch. Then FP32 instructions beyond flops / fp32_flops -- a tile's padding, computed and
    thrown away -- cost issue slots without adding useful FLOPs; without it every one is useful.

    ``epilogue_bytes``: what the launch moves after its blocks' main loops (the output stores; a split
    reduction's zero fill and read-modify-writes), at ``bandwidth_gbps``. The blocks of a wave start
    together on the same work and reach their epilogue together, so no other block's FMAs hide it: its
    time is added to the bound's, not overlapped.

    ``slots``: the rule that charges the instructions' issue slots (``efficiency``)."""
    if flops <= 0 or peak_gflops <= 0 or not 0 < occupancy <= 1:
        raise ValueError(f"need flops > 0, peak > 0 and 0 < occupancy <= 1; got {flops}, {peak_gflops}, {occupancy}")
    e = efficiency(counts, w, slots)
    useful = 1.0
    if fp32_flops is not None:
        if fp32_flops <= 0 or counts.fp32 <= 0:
            raise ValueError(f"need fp32_flops > 0 and FP32 instructions counted; got {fp32_flops}, {counts.fp32}")
        useful = flops / (counts.fp32 * fp32_flops)
    bounds = {"compute": flops / (peak_gflops * e * useful * occupancy * 1e9) * 1e3}
    if bytes_moved is not None:
        if bytes_moved < 0 or not bandwidth_gbps or bandwidth_gbps <= 0:
            raise ValueError(
                f"need bytes_moved >= 0 and a positive bandwidth_gbps; got {bytes_moved}, {bandwidth_gbps}"
            )
        bounds["memory"] = bytes_moved / (bandwidth_gbps * 1e9) * 1e3
    if wavefronts is not None:
        if not wavefront_rate or wavefront_rate <= 0 or wavefronts < 0:
            raise ValueError(f"need wavefronts >= 0 and a positive wavefront_rate; got {wavefronts}, {wavefront_rate}")
        bounds["L1"] = wavefronts / wavefront_rate * 1e3
    bound = max(bounds, key=bounds.get)
    ms = bounds[bound]
    if epilogue_bytes is not None:
        if epilogue_bytes < 0 or not bandwidth_gbps or bandwidth_gbps <= 0:
            raise ValueError(
                f"need epilogue_bytes >= 0 and a positive bandwidth_gbps; got {epilogue_bytes}, {bandwidth_gbps}"
            )
        ms += epilogue_bytes / (bandwidth_gbps * 1e9) * 1e3
    return Prediction(flops / (ms * 1e-3) / 1e9, ms, e, occupancy, bound)


# --- counts from Nsight Compute -------------------------------------------------------------


def counts_from_ncu(inst_executed: float, fp32_thread: float, memory_thread: float, warp_size: int = 32) -> Counts:
    """Warp-instruction classes from the three NCU_METRICS (thread counts / 32: full warps assumed)."""
    fp32, ldst = fp32_thread / warp_size, memory_thread / warp_size
    if fp32 + ldst > inst_executed * 1.0001:
        raise ValueError("FP32 + memory instructions exceed all executed instructions: metrics mixed up?")
    return Counts(fp32, ldst, max(0.0, inst_executed - fp32 - ldst))


def ncu_csv_table(text: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of ``ncu --csv`` output in the long format (one row per kernel and metric:
    "Kernel Name", "Metric Name", "Metric Value", ...); lines before the header (ncu's ==PROF==
    messages, program output) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Metric Name"' in line), None)
    if start is None:
        raise ValueError('no ncu CSV header (a line with "Metric Name") found')
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return table[0], table[1:]


def ncu_launch_values(text: str):
    """(launch ID, kernel name without its parameter list, metric, value) for every row of ``ncu --csv``
    output: the ID tells apart launches of kernels with the same name, in launch order."""
    header, rows = ncu_csv_table(text)
    for row in (dict(zip(header, values, strict=True)) for values in rows):
        yield (
            row.get("ID"),
            re.sub(r"\(.*", "", row["Kernel Name"]).strip(),
            row.get("Metric Name"),
            float(row["Metric Value"].replace(",", "")),
        )


def ncu_launch_rows(text: str, names, metrics: dict[str, str], problem: str) -> list[dict]:
    """Results rows from ``ncu --csv`` output of one launch per name in ``names``, in launch order: metric
    "ncu <label>" for each ``metrics`` entry (label: ncu metric). A RuntimeError if ncu profiled another
    number of launches."""
    names = list(names)
    values = list(ncu_launch_values(text))
    launch_ids = list(dict.fromkeys(launch for launch, _, _, _ in values))
    if len(launch_ids) != len(names):
        raise RuntimeError(f"ncu profiled {len(launch_ids)} launches, expected {len(names)}: {', '.join(names)}")
    by_launch = dict(zip(launch_ids, names, strict=True))
    labels = {metric: label for label, metric in metrics.items()}
    return [
        {"kernel": by_launch[launch], "problem": problem, "metric": f"ncu {labels[metric]}", "value": value, "unit": ""}
        for launch, _, metric, value in values
        if metric in labels
    ]


def ncu_values(text: str):
    """(kernel name without its parameter list, metric, value) for every row of ``ncu --csv`` output."""
    for _, kernel, metric, value in ncu_launch_values(text):
        yield kernel, metric, value


def read_ncu_csv(text: str) -> dict[str, Counts]:
    """Counts per kernel name from ``ncu --csv --metrics <NCU_METRICS>`` output (summed over launches)."""
    totals: dict[str, dict[str, float]] = {}
    for kernel, metric, value in ncu_values(text):
        if metric not in NCU_METRICS:
            continue
        totals.setdefault(kernel, {}).setdefault(metric, 0.0)
        totals[kernel][metric] += value
    out = {}
    for kernel, m in totals.items():
        missing = set(NCU_METRICS) - m.keys()
        if missing:
            raise ValueError(f"ncu CSV lacks {sorted(missing)} for kernel {kernel}")
        out[kernel] = counts_from_ncu(*(m[name] for name in NCU_METRICS))
    return out


def read_ncu_metric(text: str, metric: str) -> dict[str, float]:
    """One metric per kernel name from ``ncu --csv`` output (a rate or percentage: the last launch's)."""
    return {kernel: value for kernel, name, value in ncu_values(text) if name == metric}


# --- counts from the SASS -------------------------------------------------------------------
# Parsing and loop finding are harness.sass's; this part only classifies and multiplies by trips.


@dataclass(frozen=True)
class Loop:
    start: int  # address of the first instruction of the body (the branch target)
    end: int  # address of the last backward branch to it
    depth: int  # 0 = outermost


def classify(opcode: str, predicate: str = "") -> str:
    """'fp32', 'ldst' or 'other' for a SASS opcode, with or without modifiers (FFMA, LDS.128, ...).

    An instruction guarded by ``@!PT`` (never true: ptxas pads cp.async sequences with ``@!PT LDS``)
    takes an issue slot but never reaches its pipe: 'other', as ncu's predicated-on counts see it."""
    if predicate == "@!PT":
        return "other"
    base = opcode.split(".")[0]
    if base in FP32_OPS:
        return "fp32"
    if base in LDST_OPS:
        return "ldst"
    return "other"


def parse_sass(text: str, kernel: str | None = None) -> list[sass.Instruction]:
    """Instructions of one kernel (the only one if ``kernel`` is None) from nvdisasm or cuobjdump text.

    Padding after the last EXIT or branch (the NOP tail) is dropped: it never executes.
    """
    return list(_parse_sass(text, kernel))


@functools.lru_cache(maxsize=256)
def _parse_sass(text: str, kernel: str | None) -> tuple[sass.Instruction, ...]:
    """``parse_sass``, once per text: the model reads one kernel's SASS for many predictions."""
    instructions = sass.select(sass.parse(text), kernel, "the SASS text")
    ends = [i for i, ins in enumerate(instructions) if ins.base in ("EXIT", "BRA", "RET")]
    if not ends:
        raise ValueError("no SASS instructions (or no EXIT) found in the text")
    return tuple(instructions[: ends[-1] + 1])


def find_loops(instructions: list[sass.Instruction]) -> list[Loop]:
    """Loops as backward branches, outermost first; branches back to one target form one loop.
    A branch to itself (the trap after EXIT) is not a loop."""
    ends: dict[int, int] = {}
    for body in sass.loops(instructions):
        if len(body) > 1:
            ends[body[0].address] = max(ends.get(body[0].address, 0), body[-1].address)
    spans = sorted(ends.items(), key=lambda se: (se[0], -se[1]))
    return [
        Loop(start, end, sum(1 for s, e in spans if (s, e) != (start, end) and s <= start and end <= e))
        for start, end in spans
    ]


def static_counts(instructions: list[sass.Instruction], start: int | None = None, end: int | None = None) -> Counts:
    """Instruction classes over an address range (whole kernel by default), each counted once."""
    n = {"fp32": 0, "ldst": 0, "other": 0}
    for ins in instructions:
        if (start is None or ins.address >= start) and (end is None or ins.address <= end):
            n[classify(ins.opcode, ins.predicate)] += 1
    return Counts(**n)


def sass_counts(instructions: list[sass.Instruction], trips: list[float]) -> Counts:
    """Executed instructions per warp: each instruction once, times the trip count of every loop
    around it. ``trips[i]`` is the iterations of ``find_loops(...)[i]`` per entry into it.

    Assumes every instruction of a loop body runs on every iteration (branches inside a loop are
    taken as always executed), the usual case for the guarded loads of a tiled kernel.
    """
    loops = find_loops(instructions)
    if len(trips) != len(loops):
        raise ValueError(f"the SASS has {len(loops)} loops but {len(trips)} trip counts were given: {loops}")
    n = {"fp32": 0.0, "ldst": 0.0, "other": 0.0}
    for ins in instructions:
        factor = 1.0
        for loop, trip in zip(loops, trips, strict=True):
            if loop.start <= ins.address <= loop.end:
                factor *= trip
        n[classify(ins.opcode, ins.predicate)] += factor
    return Counts(**n)


# --- latency: one scheduler's cycles per loop iteration, from the SASS -------------------------
# The issue-slot model above assumes a scheduler always has a warp ready. With few warps per
# scheduler that fails when one warp's loop body waits longer on its own results (shared loads,
# global loads feeding shared stores, barriers) than the other warps take to issue theirs.


@dataclass(frozen=True)
class Latencies:
    """Cycles from issue until a result can be used, measured on the GPU: fixed-latency ALU/FMA,
    shared-memory load (also used for other variable-latency MIO results: LDC, S2R, MUFU), global
    load (``global_``: an L2 hit in a small working set; ``l1``: an L1 hit; ``l2_far``: an L2 hit in a
    working set larger than the near half of the L2 -- callers that know where their loads hit pick one;
    0 if not measured), and the time a warp spends in a barrier when its block's warps arrive together."""

    alu: float
    shared: float
    global_: float
    barrier: float
    l1: float = 0.0
    l2_far: float = 0.0


SHARED_LATENCY_OPS = {"LDS", "LDSM", "LDC", "S2R", "S2UR", "MUFU", "I2F", "F2I", "SHFL", "POPC", "FLO", "BREV"}
GLOBAL_LATENCY_OPS = {"LD", "LDG", "LDL", "ATOM", "ATOMG"}
NO_DESTINATION = {
    "ST",
    "STS",
    "STG",
    "STL",
    "RED",
    "BAR",
    "BRA",
    "BSSY",
    "BSYNC",
    "WARPSYNC",
    "NOP",
    "EXIT",
    "LDGSTS",
    "DEPBAR",
    "LDGDEPBAR",
    "BREAK",
    "CALL",
    "RET",
    "YIELD",
    "MEMBAR",
    "FENCE",
    "CCTL",
    "ARRIVES",
    "SYNCS",
    "ERRBAR",
    "BPT",
    "RPCMOV",
}
_REGISTER = re.compile(r"(?<![\w.])(U?R|U?P)(\d+)(?:\.64)?")


def _width(opcode: str) -> int:
    """32-bit registers a load writes or a store reads: LDS.128 -> 4, .64 / IMAD.WIDE / CS2R -> 2."""
    if ".128" in opcode:
        return 4
    if ".64" in opcode or ".WIDE" in opcode or opcode.startswith("CS2R"):
        return 2
    return 1


def _names(operand: str, width: int = 1) -> set[str]:
    """Register names in one operand (RZ, PT, URZ excluded); ``R4.64`` or a ``width`` > 1 spans several."""
    out = set()
    for m in _REGISTER.finditer(operand):
        n = 2 if m.group(0).endswith(".64") else width
        out |= {f"{m.group(1)}{int(m.group(2)) + i}" for i in range(n)}
    return out


def register_operands(ins: sass.Instruction) -> tuple[set[str], set[str]]:
    """(registers written, registers read) by one instruction: the first operand is the destination
    (plus a predicate in second place: ISETP's second result, LEA's/IADD3's carry; or in first place,
    before it, for an atomic), except for stores, branches and barriers, which only read. Memory
    operands in brackets are always read. (``sass.register_reads`` lists the same reads by operand slot,
    with .reuse flags, for register banks.)"""
    ops = [o.strip() for o in ins.operands.split(",")] if ins.operands else []
    reads = _names(ins.predicate)
    if ins.base in NO_DESTINATION or not ops:
        data = _width(ins.opcode) if ins.base.startswith(("ST", "RED")) else 1
        for o in ops:
            reads |= _names(o, 1 if "[" in o else data)
        return set(), reads
    if ins.base.startswith("ATOM") and re.fullmatch(r"!?U?P(\d+|T)", ops[0]):
        # ATOMG.E.ADD PT, R3, [R2.64], R5: an atomic may put its predicate result first
        pred, ops = ops[0], ops[1:]
    else:
        pred = None
    writes = _names(ops[0], _width(ins.opcode) if "[" not in ops[0] else 1)
    rest = ops[1:]
    if pred:
        writes |= _names(pred)
    elif rest and re.fullmatch(r"U?P\d", rest[0]):
        writes |= _names(rest[0])
        rest = rest[1:]
    for o in rest:
        reads |= _names(o)
    return writes, reads


def latency_of(ins: sass.Instruction, lat: Latencies) -> float:
    """Cycles until the result of ``ins`` can be read (its class's latency in ``lat``)."""
    if ins.base in GLOBAL_LATENCY_OPS:
        return lat.global_
    if ins.base in SHARED_LATENCY_OPS:
        return lat.shared
    return lat.alu


def _depbar_keep(ins: sass.Instruction) -> int:
    """How many of the most recent cp.async groups ``DEPBAR.LE SB0, n`` lets stay in flight."""
    m = re.search(r"SB0,\s*(0x[0-9a-fA-F]+|\d+)", ins.operands)
    return int(m.group(1), 0) if m else 0


def scheduler_cycles(
    body: list[sass.Instruction],
    lat: Latencies,
    warps: int = 1,
    warps_per_block: int = 1,
    iterations: int = 3,
    slot_weights: Weights | None = None,
    spread: bool = False,
) -> float:
    """Cycles one scheduler needs per iteration of ``body`` (instructions in issue order, inner loops
    already unrolled into it) with ``warps`` identical warps, in steady state: the mean of
    ``iterations`` iterations after the first, all warps starting together as a launch's blocks do
    (``spread``: block b of B starts b / B of the way through the body instead, the blocks out of step).

    Each cycle the scheduler issues one instruction of the next ready warp after the last one that
    issued (loose round robin). A warp issues in order; an instruction waits until every register it
    reads is ready, or a load still writes a register it overwrites (a register scoreboard): after
    ``lat.alu`` cycles for ALU/FMA results, ``lat.shared`` for shared/MIO loads, ``lat.global_`` for
    global loads. A barrier waits until the ``warps_per_block`` warps of its block on this scheduler
    have arrived (its warps on the other schedulers run the same schedule), then ``lat.barrier``.
    cp.async (LDGSTS) copies land after the global latency; DEPBAR.LE SB0, n waits until all but the n
    most recent commit groups (LDGDEPBAR) have landed. Branches are taken as falling through, as
    ``sass_counts`` counts.

    ``slot_weights``: each instruction holds the scheduler for its class's weight (``classify``), the
    issue slots E charges it, so that a warp's wait is hidden only behind the slots E charges the
    other warps; None: one cycle each."""
    if not body:
        raise ValueError("empty loop body")
    if warps < 1 or warps_per_block < 1 or warps % warps_per_block:
        raise ValueError(f"need warps >= 1, a multiple of warps_per_block >= 1; got {warps}, {warps_per_block}")
    # The notebooks ask for the same (body, latencies, warps, ...) many times (a stage's prediction with
    # and without held slots, several rules): simulate each once per process.
    return _simulate(tuple(body), lat, warps, warps_per_block, iterations, slot_weights, spread)


# Kinds of instruction the scoreboard treats specially (``_simulate``).
_PLAIN, _COPY, _COMMIT, _WAIT, _BARRIER = range(5)
_KIND = {"LDGSTS": _COPY, "LDGDEPBAR": _COMMIT, "DEPBAR": _WAIT, "BAR": _BARRIER}


@functools.lru_cache(maxsize=4096)
def _simulate(
    body: tuple, lat: Latencies, warps: int, warps_per_block: int, iterations: int, slot_weights, spread: bool
) -> float:
    """``scheduler_cycles``' simulation. Each instruction's operands, latency and slots are worked out once
    (registers numbered, read from lists), and a warp's earliest issue time is kept between cycles: it
    changes only when that warp issues or its barrier releases it."""
    n = len(body)
    number: dict[str, int] = {}
    per_class = {"fp32": 1.0, "ldst": 1.0, "other": 1.0}
    if slot_weights is not None:
        per_class = {"fp32": slot_weights.compute, "ldst": slot_weights.ldst, "other": slot_weights.other}
    seen: dict[int, tuple] = {}  # an unrolled body repeats its inner loops' instructions: work each out once
    for ins in body:
        if id(ins) not in seen:
            w_names, r_names = register_operands(ins)
            seen[id(ins)] = (
                tuple(number.setdefault(r, len(number)) for r in r_names),
                tuple(number.setdefault(r, len(number)) for r in w_names),
                latency_of(ins, lat),
                ins.base in GLOBAL_LATENCY_OPS or ins.base in SHARED_LATENCY_OPS,  # a load: no overtaking
                _KIND.get(ins.base, _PLAIN),
                _depbar_keep(ins) if ins.base == "DEPBAR" else 0,
                per_class[classify(ins.opcode, ins.predicate)],
            )
    reads, writes, latency, lands, kind, keep, slot = (
        list(column) for column in zip(*(seen[id(i)] for i in body), strict=True)
    )
    blocks = warps // warps_per_block
    first = [(w // warps_per_block) * n // blocks if spread else 0 for w in range(warps)]
    last_pc = [f + n * iterations for f in first]
    pc = list(first)
    ready = [[0.0] * len(number) for _ in range(warps)]  # register -> cycle its value can be read
    loading = [[0.0] * len(number) for _ in range(warps)]  # register -> cycle a load's write lands
    groups = [[] for _ in range(warps)]  # landing times of committed cp.async groups, oldest first
    pending = [0.0] * warps  # latest landing of cp.asyncs not yet committed
    hold = [0.0] * warps  # earliest cycle the warp may issue again (barrier, DEPBAR)
    in_barrier = [False] * warps
    at_barrier: dict[int, list[int]] = {}  # block -> warps waiting in its barrier
    iteration_end = [[0.0] * iterations for _ in range(warps)]
    inf = math.inf

    def issue_time(w: int) -> float:
        if pc[w] >= last_pc[w] or in_barrier[w]:
            return inf
        k = pc[w] % n
        t = hold[w]
        ready_w, loading_w = ready[w], loading[w]
        for r in reads[k]:
            if ready_w[r] > t:
                t = ready_w[r]
        for r in writes[k]:
            if loading_w[r] > t:
                t = loading_w[r]
        if kind[k] == _WAIT:
            g = groups[w]
            for x in g[: max(0, len(g) - keep[k])]:
                if x > t:
                    t = x
        return t

    times = [issue_time(w) for w in range(warps)]
    now, last = 0.0, -1
    while True:
        soonest = min(times)
        if soonest == inf:
            break
        if soonest > now:
            now = soonest
        w = last
        while True:  # the next ready warp after the last one that issued
            w = w + 1 if w + 1 < warps else 0
            if times[w] <= now:
                break
        k = pc[w] % n
        done = now + latency[k]
        for r in writes[k]:
            ready[w][r] = done
            if lands[k]:
                loading[w][r] = done
        if kind[k] == _COPY:
            pending[w] = max(pending[w], now + lat.global_)
        elif kind[k] == _COMMIT:
            groups[w].append(pending[w])
        elif kind[k] == _WAIT:
            groups[w] = groups[w][max(0, len(groups[w]) - keep[k]) :] if keep[k] else []
        busy = slot[k]
        hold[w] = now + busy
        pc[w] += 1
        if (pc[w] - first[w]) % n == 0:
            iteration_end[w][(pc[w] - first[w]) // n - 1] = now + busy
        released = ()
        if kind[k] == _BARRIER:
            block = w // warps_per_block
            waiting = at_barrier.setdefault(block, [])
            waiting.append(w)
            in_barrier[w] = True
            if len(waiting) == warps_per_block:
                for v in waiting:
                    hold[v] = now + lat.barrier
                    in_barrier[v] = False
                released = at_barrier.pop(block)
        times[w] = issue_time(w)
        for v in released:
            times[v] = issue_time(v)
        last, now = w, now + busy  # one issue per cycle, held for the instruction's slots
    ends = [max(e[i] for e in iteration_end) for i in range(iterations)]
    return (ends[-1] - ends[0]) / (iterations - 1) if iterations > 1 else ends[-1]


def expand_loop(instructions: list[sass.Instruction], loop: Loop, trips: dict[int, float]) -> list[sass.Instruction]:
    """One iteration of ``loop``'s body in issue order, with each loop nested inside it repeated by its
    trip count (``trips``: loop start address -> iterations per entry; rounded to whole iterations)."""
    inner = [
        lp
        for lp in find_loops(instructions)
        if loop.start <= lp.start and lp.end <= loop.end and (lp.start, lp.end) != (loop.start, loop.end)
    ]
    body = [i for i in instructions if loop.start <= i.address <= loop.end]
    for lp in sorted(inner, key=lambda lp: -lp.depth):  # innermost first
        n = max(1, round(trips.get(lp.start, 1)))
        start = next(k for k, i in enumerate(body) if i.address == lp.start)
        stop = max(k for k, i in enumerate(body) if i.address <= lp.end) + 1
        body = body[:start] + body[start:stop] * n + body[stop:]
    return body


def issue_efficiency(warps: float, issue_cycles: float, latency_cycles: float) -> float:
    """The fraction of the time a scheduler does useful work: its ``warps`` warps need ``issue_cycles``
    (weighted issue slots) each per iteration, and the iteration takes ``latency_cycles``
    (``scheduler_cycles``) when latency, not throughput, sets the pace: min(1, warps x issue / latency)."""
    if warps <= 0 or issue_cycles <= 0 or latency_cycles <= 0:
        raise ValueError(
            f"need positive warps, issue and latency cycles; got {warps}, {issue_cycles}, {latency_cycles}"
        )
    return min(1.0, warps * issue_cycles / latency_cycles)
