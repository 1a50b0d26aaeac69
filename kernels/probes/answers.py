"""The expected answers of the probes chapters' questions (exercises.py), for the checker and the tests.

Teacher-only: the student edition leaves this file out and checks digests of these values instead. Every
answer is a number or a set, computed when the student checks: from the exercise's own data (register and
bank arithmetic) or from the stored run of the probes on the GPU the page ran on (the checker refuses
another GPU's rows).
"""

from __future__ import annotations

import math

from kernels.harness import device, quantities, results, sass
from kernels.harness.check import positive_int
from kernels.harness.exercise import answers

from . import common, launch_bound, memory

STEP = 1.5  # a block count "steps up" where its time exceeds the one-block time by this factor


def tail_sweep() -> dict[int, dict[str, float]]:
    """{blocks: {"time": ms, "FMA per cycle": rate}} of the newest stored tail sweep (section 2's
    blocks sweep): this GPU's, or the reference GPU's without a GPU or without rows."""
    slugs = [results.REFERENCE_GPU]
    if device.on_gpu():
        slugs.insert(0, common.stored_gpu())
    for slug in slugs:
        rows = [r for r in results.latest(common.CHAPTER, slug).values() if r["kernel"] == "fma tail"]
        if rows:
            sweep: dict[int, dict[str, float]] = {}
            for r in rows:
                sweep.setdefault(common.number(r["problem"]), {})[r["metric"]] = float(r["value"])
            return sweep
    raise LookupError("no stored fma tail rows: run notebooks/04a_probes_compute.ipynb on a GPU")


def first_step(sweep: dict[int, dict[str, float]]) -> int:
    """The smallest block count whose time exceeds STEP times the one-block time."""
    if not isinstance(sweep, dict) or not sweep or not all(isinstance(v, dict) and "time" in v for v in sweep.values()):
        raise ValueError(f"sweep: expected {{blocks: {{'time': ms, ...}}}} with at least one row, got {sweep!r}")
    one = sweep[min(sweep)]["time"]
    steps = [b for b in sorted(sweep) if sweep[b]["time"] > STEP * one]
    if not steps:
        raise ValueError(f"the tail sweep never steps above {STEP} times its one-block time: it is too short")
    return steps[0]


def _wave_rate_growth() -> float:
    sweep = tail_sweep()
    full = first_step(sweep) - 1  # the last block count of the first wave
    return sweep[full]["FMA per cycle"] / sweep[min(sweep)]["FMA per cycle"]


def _rate_kept() -> float:
    sweep = tail_sweep()
    step = first_step(sweep)
    return sweep[step]["FMA per cycle"] / sweep[step - 1]["FMA per cycle"]


answers(
    "probes-ex-wave",
    step_blocks=lambda: first_step(tail_sweep()),
    rate_growth=_wave_rate_growth,
    rate_kept=_rate_kept,
)


SCHEDULERS = 4  # warp schedulers (sub-partitions) per SM since Volta


WARP = 32


def fma_latency_whole_cycles() -> int:
    """The measured FFMA latency (section 13's FFMA baseline), rounded up to whole cycles."""
    return math.ceil(quantities.fma_latency_cycles()[0])


def threads_to_hide(chains_per_thread: int) -> int:
    """Threads per SM whose independent FFMAs keep every scheduler issuing, one per cycle."""
    positive_int(chains_per_thread, "chains_per_thread")
    warps_per_scheduler = math.ceil(fma_latency_whole_cycles() / chains_per_thread)
    return SCHEDULERS * warps_per_scheduler * WARP


answers(
    "probes-ex-warps",
    one_chain=lambda: threads_to_hide(1),
    four_chains=lambda: threads_to_hide(4),
)


REGBANK_FFMAS = ("FFMA R0, R0, R2, R3", "FFMA R5, R5, R2, 1e-08", "FFMA R4, R5, R7, R9", "FFMA R1, R2, R4, R6")
# The two published descriptions of two register banks (even and odd numbers) that the deep dive on register banks
# sets out: registers one bank delivers per cycle. Ampere (Huerta et al.): one read port per bank, one register for
# the whole warp per cycle. Volta and Turing (Jia et al.): each bank 64 bits wide, two registers per cycle, so that
# an instruction waits only when all three of its sources lie in one bank.
REGISTERS_PER_BANK_CYCLE = {"ampere": 1, "volta": 2}


def operand_cycles(text: str, model: str = "ampere") -> int:
    """Cycles to collect the register operands of one instruction such as ``FFMA R0, R0, R2, R3`` from two banks,
    without a reuse cache, under ``model`` (REGISTERS_PER_BANK_CYCLE): the fuller bank's distinct registers over
    what it delivers per cycle."""
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"text: expected an instruction such as 'FFMA R0, R0, R2, R3', got {text!r}")
    if model not in REGISTERS_PER_BANK_CYCLE:
        raise ValueError(f"model: expected one of {sorted(REGISTERS_PER_BANK_CYCLE)}, got {model!r}")
    opcode, _, operands = text.strip().partition(" ")
    reads = {r for _, r, _ in sass.register_reads(sass.Instruction(0, "", opcode, operands, ""))}
    per_bank = [sum(r % 2 == b for r in reads) for b in range(2)]
    return max(1, *(math.ceil(n / REGISTERS_PER_BANK_CYCLE[model]) for n in per_bank))


def _collide(model: str) -> set[int]:
    return {n for n, text in enumerate(REGBANK_FFMAS, 1) if operand_cycles(text, model) > 1}


def _worst_cycles(model: str) -> int:
    return max(operand_cycles(text, model) for text in REGBANK_FFMAS)


answers(
    "probes-ex-regbanks",
    collide_ampere=lambda: _collide("ampere"),
    cycles_ampere=lambda: _worst_cycles("ampere"),
    collide_volta=lambda: _collide("volta"),
    cycles_volta=lambda: _worst_cycles("volta"),
)


BANK_STRIDES = range(1, 34)  # the strides the bank-conflict probe sweeps


def float2_ways(stride: int) -> int:
    """The most distinct 4-byte words one bank serves when lane l reads the 8-byte element l * stride:
    a warp's 64-bit access is served per half-warp, so each half of the warp counts on its own."""
    positive_int(stride, "stride")
    ways = 1
    for half in (range(0, 16), range(16, 32)):
        words = {(2 * lane * stride + k) % memory.SMEM_WORDS for lane in half for k in (0, 1)}
        ways = max(ways, max(sum(w % memory.BANKS == b for w in words) for b in range(memory.BANKS)))
    return ways


answers(
    "probes-ex-banks",
    strides=lambda: {s for s in BANK_STRIDES if memory.bank_ways(s) == 1},
    float2_strides=lambda: {s for s in BANK_STRIDES if float2_ways(s) == 1},
)


def bytes_in_flight() -> float:
    """The machine chapter's copy rate times the measured HBM latency: GB/s x ns = bytes."""
    return quantities.copy_gbps()[0] * quantities.dram_latency_ns()[0]


answers(
    "probes-ex-little",
    mb_in_flight=lambda: bytes_in_flight() / 1e6,
    kb_per_sm=lambda: bytes_in_flight() / device.target_properties()["sms"] / 1e3,
)


PAD_SHAPE, PAD_P = (1024, 1024, 7, 7), 3  # the memory chapter's padding problem, at one channel per thread


def pad_blocks() -> int:
    """The blocks of the padding kernel at one channel per thread: one per output plane."""
    return math.prod(memory.padding_plan("v2 constant", 1, PAD_SHAPE, PAD_P)[0])


def pad_launch_us() -> float:
    """Those blocks at part I's stored launch rate (blocks of PAD_BLOCK threads) and SM clock."""
    rate, _ = quantities.stored(common.CHAPTER, "launch", "threads per cycle", f"block {memory.PAD_BLOCK}x1x1")
    return launch_bound.launch_floor_us(pad_blocks() * memory.PAD_BLOCK, rate, quantities.sm_clock_mhz()[0])


answers(
    "probes-ex-launch",
    blocks=pad_blocks,
    launch_us=pad_launch_us,
)
