"""Compute probes (source 003, sections 1-5 and 13): thread launch rate, FMA throughput and the
tail, the register limit, uniform registers, warp divergence and math-function costs.

Each ``run_<probe>`` checks its parameters first (ValueError, before anything is launched), then
needs a GPU, and returns results rows for ``results.record("probes", rows)``.
"""

from __future__ import annotations

import math

import numpy as np

from ..harness import check, device, perfmodel, quantities, sass, timing
from ..harness.check import positive_int
from . import common
from .common import row

FMA_KERNELS = {  # variant -> (file, kernel)
    "v0 chain": ("fma_v0_chain.cu", "fma_chain"),
    "v1 unroll 100": ("fma_v1_unroll100.cu", "fma_unroll100"),
    "v2 double loop": ("fma_v2_double_loop.cu", "fma_double_loop"),
    "v3 immediate": ("fma_v3_immediate.cu", "fma_immediate"),
    "v4 two chains": ("fma_v4_two_chains.cu", "fma_two_chains"),
    "divergent": ("divergence_v0_branch.cu", "fma_divergent"),
    "swapped": ("divergence_v1_swap.cu", "fma_swapped"),
}
INNER = 100  # the double loop's unrolled inner trip count
DOUBLE_LOOPS = ("v2 double loop", "v3 immediate", "v4 two chains")  # take outer = iters / INNER
IMMEDIATE_ADDEND = np.float32(1e-8)  # fma_v3_immediate.cu's ADDEND
WARP, SCHEDULERS_PER_SM = quantities.WARP, quantities.SCHEDULERS_PER_SM
LIVE_COUNTS = (32, 64, 128, 192, 224, 240, 256, 320)
SECOND_READ = "FFMA with 2 operand-read cycles"  # fma_loop_report's column: issue_cycles charges these twice


# --- 1. thread launch rate ------------------------------------------------------------------------


def launch_shapes() -> dict[str, list[tuple]]:
    """The source's block shapes: 1D powers of two, 2D k x k, 3D k x k x k."""
    return {
        "1D": [(2**i, 1, 1) for i in range(11)],
        "2D": [(k, k, 1) for k in range(1, 33)],
        "3D": [(k, k, k) for k in range(1, 11)],
    }


def launch_grid(shape, total_threads: int, max_blocks: int) -> int:
    """Blocks for about ``total_threads`` threads, at most ``max_blocks`` (tiny blocks would take seconds)."""
    threads = math.prod(check.block_shape(shape))
    blocks = min(max(1, total_threads // threads), positive_int(max_blocks, "max_blocks"))
    return positive_int(blocks, "blocks", maximum=check.MAX_GRID_DIM[0])


def run_launch_rate(shapes, *, total_threads: int = 2**28, max_blocks: int = 2**21, repeat: int = 5) -> list[dict]:
    """Threads started per SM-clock cycle by an empty kernel, for each block shape."""
    positive_int(total_threads, "total_threads")
    plan = [(check.block_shape(s), launch_grid(s, total_threads, max_blocks)) for s in shapes]
    common.require_gpu("the launch-rate probe")
    import cupy

    kernel = common.load("launch.cu", "null_kernel")
    dummy = cupy.empty(1, dtype=cupy.float32)
    mhz = common.clock_mhz()
    rows = []
    for shape, blocks in plan:
        t = timing.benchmark(
            lambda blocks=blocks, shape=shape: kernel((blocks,), shape, (dummy,)), warmup=2, repeat=repeat
        )
        threads = math.prod(shape)
        rate = blocks * threads / (t.median_ms * 1e-3) / (mhz * 1e6)
        rows.append(
            row(
                "launch",
                "block {}x{}x{}".format(*shape),
                "threads per cycle",
                rate,
                "threads/cycle",
            )
        )
    return rows


# --- 2. FMA throughput, 5. divergence ------------------------------------------------------------


def fma_reference(
    threads: int, block: int, iters: int, *, swap_lane0: bool = False, variant: str = "v0 chain"
) -> np.ndarray:
    """float64 value each thread stores after ``iters`` FMAs of ``sum = t0 * sum + t1`` (closed form).

    t0 and t1 are computed in float32 exactly as the kernels do; lane 0 of each warp swaps them
    when ``swap_lane0`` (the divergence probes). "v3 immediate" adds a literal instead of t1;
    "v4 two chains" runs two chains of iters / 2 steps from 0 and 1 and stores their sum."""
    x = np.arange(threads)
    t0 = (x.astype(np.float32) / (x + 1).astype(np.float32)).astype(np.float64)
    t1 = np.full(threads, np.float32(1) / np.float32(100000000), dtype=np.float64)
    if variant == "v3 immediate":
        t1[:] = IMMEDIATE_ADDEND
    if swap_lane0:
        lane0 = (x % block) % WARP == 0
        t0[lane0], t1[lane0] = t1[lane0].copy(), t0[lane0].copy()

    def chain(start, n):  # s_n = t0^n s_0 + t1 (1 - t0^n) / (1 - t0); t0 < 1 always
        return t0**n * start + t1 * (1 - t0**n) / (1 - t0)

    if variant == "v4 two chains":
        return chain(0.0, iters // 2) + chain(1.0, iters // 2)
    return chain(0.0, iters)


def _fma_plan(variant: str, threads: int, blocks: int, iters: int) -> tuple[int, int]:
    """(argument, FMAs per thread) for a variant: the double loop takes outer = iters / 100."""
    if variant not in FMA_KERNELS:
        raise ValueError(f"variant must be one of {sorted(FMA_KERNELS)}, got {variant!r}")
    check.block_shape((threads,))
    positive_int(blocks, "blocks", maximum=check.MAX_GRID_DIM[0])
    positive_int(iters, "iters", maximum=2**31 - 1)
    if variant in DOUBLE_LOOPS:
        if iters % INNER:
            raise ValueError(
                f"the double loop runs {INNER} FMAs per outer step: iters must be a multiple of {INNER}, got {iters}"
            )
        return iters // INNER, iters
    return iters, iters


def _fma_launch(variant: str, threads: int, blocks: int, iters: int):
    arg, _ = _fma_plan(variant, threads, blocks, iters)
    import cupy

    kernel = common.load(*FMA_KERNELS[variant])
    out = cupy.empty(threads * blocks, dtype=cupy.float32)
    return out, (lambda: kernel((blocks,), (threads,), (out, np.int32(arg))))


def check_fma(variant: str, *, threads: int = 256, blocks: int = 2, iters: int = 1000) -> check.CheckResult:
    """Run a variant once on poisoned output and compare with the float64 closed form (GPU)."""
    _fma_plan(variant, threads, blocks, iters)
    common.require_gpu("checking an FMA probe")
    out, launch = _fma_launch(variant, threads, blocks, iters)
    check.poison(out)
    launch()
    return fma_compare(variant, out, threads, blocks, iters)


def fma_rtol(iters: int) -> float:
    """Relative error bound of an ``iters``-step chain. Each fmaf rounds once (2^-24 relative); with t0,
    t1 and the start >= 0, the rounding at step n - j reaches the result scaled by t0^j <= s_n / s_(n-j),
    so the chain's relative error is below iters x 2^-24 (v4 adds one rounding for s0 + s1); twice that."""
    return 2 * (iters + 1) * 2.0**-24


def fma_compare(variant: str, out, threads: int, blocks: int, iters: int) -> check.CheckResult:
    """Compare one variant's output with the closed form, element by element, relative to each value.

    A relative bound is as tight for thread 1's value (about 2e-8) as for lane 0's of the divergence
    probes (about 1). Thread x's chain levels off after a few times x + 1 steps, so the threads with
    x + 1 near iters or above still change measurably at every step: a wrong step count fails."""
    _fma_plan(variant, threads, blocks, iters)
    ref = fma_reference(
        threads * blocks, threads, iters, swap_lane0=variant in ("divergent", "swapped"), variant=variant
    )
    got = check.to_host(out).astype(np.float64)
    # where the chain is 0 (thread 0 of the divergence probes: t1 = 0), only an exact 0 passes
    rel = np.divide(got - ref, ref, out=np.where(got == ref, 0.0, np.inf), where=ref != 0)
    return check.compare(
        rel, np.zeros_like(ref), atol=fma_rtol(iters), name=f"FMA {variant}, per element |out / float64 - 1|"
    )


def run_fma(variants, threads_list, *, blocks: int = 1, iters: int = 2**19 - 88, repeat: int = 10) -> list[dict]:
    """FMA per cycle per SM for each variant and block size (``blocks`` blocks, one per SM)."""
    plan = [(v, t, _fma_plan(v, t, blocks, iters)[1]) for v in variants for t in threads_list]
    common.require_gpu("the FMA probe")
    mhz, sms = common.clock_mhz(), common.sms()
    rows = []
    for variant, threads, fmas in plan:
        _, launch = _fma_launch(variant, threads, blocks, iters)
        t = timing.benchmark(launch, warmup=2, repeat=repeat)
        per_sm = blocks * threads * fmas / (t.median_ms * 1e-3) / (mhz * 1e6) / min(blocks, sms)
        rows.append(
            row(
                f"fma {variant}",
                f"{blocks} x {threads} threads",
                "FMA per cycle per SM",
                per_sm,
                "FMA/cycle/SM",
            )
        )
    return rows


# One warp per scheduler, 100 dependent FFMAs per trip: the chain quantities.fma_latency_cycles reads for every page.
LATENCY_VARIANT, LATENCY_THREADS = quantities.CHAIN_VARIANT, quantities.CHAIN_THREADS
LATENCY_PROBLEM = f"1 x {LATENCY_THREADS} threads"  # run_fma's name of one block of LATENCY_THREADS


def chain_latency_cycles(rows: list[dict]) -> float:
    """The cycles between one warp's dependent FFMAs: ``run_fma`` rows of LATENCY_VARIANT with one block of
    LATENCY_THREADS threads, one warp on each scheduler. A warp issues an FFMA only once the previous one's
    result is ready (``quantities.chain_latency``)."""
    found = [r for r in rows if r["kernel"] == f"fma {LATENCY_VARIANT}" and r["problem"] == LATENCY_PROBLEM]
    if not found:
        raise ValueError(f"rows: no row of fma {LATENCY_VARIANT} at {LATENCY_PROBLEM} (run_fma's, with one block)")
    return quantities.chain_latency(float(found[-1]["value"]))


def tail_blocks(sms: int) -> list[int]:
    """Block counts for the tail sweep: 1 .. 2 x SMs + 1, dense around each multiple of the SM count."""
    positive_int(sms, "sms")
    coarse = set(range(1, 2 * sms + 2, max(1, sms // 12)))
    edges = {k * sms + d for k in (1, 2) for d in (-1, 0, 1)}
    return sorted(b for b in coarse | edges if 1 <= b <= 2 * sms + 1)


def run_fma_tail(blocks_list, *, threads: int = 1024, iters: int = 2**18 - 44, repeat: int = 5) -> list[dict]:
    """Whole-GPU FMA per cycle and time for 1..k x SM-count blocks (the double loop)."""
    plan = [(b, _fma_plan("v2 double loop", threads, b, iters)[1]) for b in blocks_list]
    common.require_gpu("the FMA tail probe")
    mhz = common.clock_mhz()
    rows = []
    for blocks, fmas in plan:
        _, launch = _fma_launch("v2 double loop", threads, blocks, iters)
        t = timing.benchmark(launch, warmup=1, repeat=repeat)
        rate = blocks * threads * fmas / (t.median_ms * 1e-3) / (mhz * 1e6)
        problem = f"{blocks} x {threads} threads"
        rows += [
            row("fma tail", problem, "FMA per cycle", rate, "FMA/cycle"),
            row("fma tail", problem, "time", t.median_ms, "ms"),
        ]
    return rows


# --- 3. the register limit -----------------------------------------------------------------------


def warps_per_sm(registers: int) -> int:
    """Resident warps an SM of this GPU (the reference H100 without one) can hold at ``registers`` per
    thread (``perfmodel.register_warps``: whole warps in each sub-partition's quarter of the register
    file, as cuda_occupancy.h counts them)."""
    registers = positive_int(registers, "registers", maximum=255)
    props = device.target_properties()
    return min(
        props["max_threads_per_sm"] // WARP,
        perfmodel.register_warps(registers, props["regs_per_sm"], sub_partitions=SCHEDULERS_PER_SM),
    )


def register_report(live_counts=LIVE_COUNTS, arch: str | None = None) -> list[dict]:
    """ptxas's registers and spills for the live-values kernel at each LIVE, and the warps per SM they
    leave on this GPU (compile only, no GPU; ``arch`` defaults to ``device.target_arch()``)."""
    out = []
    for live in live_counts:
        positive_int(live, "live", maximum=1024)
        res = common.build("registers.cu", arch, {"LIVE": live}).resources[0]
        out.append(
            {
                "live values": live,
                "registers": res.registers,
                "spill stores (B)": res.spill_stores,
                "spill loads (B)": res.spill_loads,
                "warps per SM": warps_per_sm(res.registers),
            }
        )
    return out


def run_registers(
    live_counts=LIVE_COUNTS, *, iters: int = 256, threads: int = 128, blocks_per_sm: int = 16, repeat: int = 5
) -> list[dict]:
    """FMA per cycle per SM of the live-values kernel: the cost of spilling past 255 registers."""
    for live in live_counts:
        positive_int(live, "live", maximum=1024)
    positive_int(iters, "iters")
    check.block_shape((threads,))
    common.require_gpu("the register probe")
    import cupy

    mhz, sms = common.clock_mhz(), common.sms()
    blocks = sms * blocks_per_sm
    n = blocks * threads
    rows = []
    for live in live_counts:
        kernel = common.load("registers.cu", "live_values", {"LIVE": live})
        src = cupy.random.random(live * n, dtype=cupy.float32)
        out = cupy.empty(n, dtype=cupy.float32)
        t = timing.benchmark(
            lambda kernel=kernel, src=src, out=out: kernel((blocks,), (threads,), (src, out, np.int32(iters))),
            warmup=2,
            repeat=repeat,
        )
        rate = n * iters * live / (t.median_ms * 1e-3) / (mhz * 1e6) / sms
        rows.append(row("registers", f"LIVE={live}", "FMA per cycle per SM", rate, "FMA/cycle/SM"))
    return rows


# --- 13. math functions --------------------------------------------------------------------------

# name -> (MATH_FN in math_funcs.cu, precision, float64 step, tolerance of a chain of about 10 steps).
# The values stay in [0.2, 1], so the absolute tolerance is about a relative one. Each is tight enough
# that 9 or 11 steps instead of 10 fail (tests/test_probes.py). The sine chains settle fastest: an
# error shrinks by |cos(x + 1)| <= cos(1) = 0.54 per step, so a chain's error stays below about 2.2
# steps' worth of one step's error: sinf's 2 ulp plus the rounding of x + 1 (1.8e-7), __sinf's
# documented 2^-21.41 absolute error in [-pi, pi] plus that rounding (4.2e-7). The tolerances below are
# 4 to 5 times those bounds.
MATH_FUNCS = {
    "FFMA (baseline)": (0, "fp32", lambda x: x * 0.5 + 0.5, 1e-6),
    "sinf": (1, "fp32", lambda x: np.sin(x + 1), 2e-6),
    "__sinf": (2, "fp32", lambda x: np.sin(x + 1), 4e-6),
    "sin (fp64)": (3, "fp64", lambda x: np.sin(x + 1), 1e-13),
    "expf": (4, "fp32", lambda x: np.exp(-x), 1e-5),
    "__expf": (5, "fp32", lambda x: np.exp(-x), 1e-4),
    "exp (fp64)": (6, "fp64", lambda x: np.exp(-x), 1e-13),
    "expf(a) * expf(b)": (7, "fp32", lambda x: np.exp(-1.5 * x), 1e-5),
    "expf(a + b)": (8, "fp32", lambda x: np.exp(-1.5 * x), 1e-5),
    "sqrtf(x) < b": (9, "fp32", lambda x: np.where(np.sqrt(x) < np.float32(0.8), 0.5 * x + 0.5, 0.5 * x), 1e-6),
    "x < b * b": (10, "fp32", lambda x: np.where(x < np.float32(0.64), 0.5 * x + 0.5, 0.5 * x), 1e-6),
    "DFMA (baseline)": (11, "fp64", lambda x: x * 0.5 + 0.5, 1e-15),
}
MATH_BLOCK = 256
MATH_UNROLL = 8  # math_funcs.cu's #pragma unroll


def _math_function(name: str) -> tuple:
    if name not in MATH_FUNCS:
        raise ValueError(f"math function must be one of {sorted(MATH_FUNCS)}, got {name!r}")
    return MATH_FUNCS[name]


def math_reference(name: str, threads: int, iters: int) -> np.ndarray:
    """float64 value of every thread's chain: start (t % 64) / 64, then ``iters`` steps."""
    step = _math_function(name)[2]
    x = (np.arange(threads) % 64) / 64.0
    for _ in range(iters):
        x = step(x)
    return x


def _math_launch(name: str, blocks: int, threads: int, iters: int):
    fn, precision = _math_function(name)[:2]
    import cupy

    kernel = common.load("math_funcs.cu", "math_chain", {"MATH_FN": fn})
    out = cupy.empty(blocks * threads, dtype=cupy.float64 if precision == "fp64" else cupy.float32)
    cycles = cupy.zeros(1, dtype=cupy.int64)
    return out, cycles, (lambda: kernel((blocks,), (threads,), (out, np.int32(iters), cycles)))


def check_math(name: str, *, iters: int = 10) -> check.CheckResult:
    """A 10-step chain on 2 blocks of 64 threads, poisoned output, against float64 (GPU)."""
    _math_function(name)
    positive_int(iters, "iters")  # any count: the unrolled loop's remainder code runs the rest
    common.require_gpu("checking a math-function probe")
    out, _, launch = _math_launch(name, 2, 64, iters)
    check.poison(out)
    launch()
    return math_compare(name, out, iters)


def math_compare(name: str, out, iters: int) -> check.CheckResult:
    """Compare 128 threads' chains of ``iters`` steps with float64, element by element."""
    atol = _math_function(name)[3]
    return check.compare(out, math_reference(name, 128, positive_int(iters, "iters")), atol=atol, name=name)


def math_report(names=tuple(MATH_FUNCS), arch: str | None = None) -> list[dict]:
    """SASS instructions per step (the 8-times unrolled loop body less its 3 loop instructions, over
    8; a slow path's instructions count whether taken or not) and the special ones per step: MUFU
    (the special-function unit) and FP64 arithmetic -- compile only."""
    out = []
    for name in names:
        ins = sass.disassemble(common.build("math_funcs.cu", arch, {"MATH_FN": _math_function(name)[0]}))
        body = max(sass.loops(ins), key=len)  # the outer (step) loop holds any inner ones
        ops = sass.opcodes(body)
        out.append(
            {
                "function": name,
                "precision": _math_function(name)[1],
                "instructions per step": (len(body) - 3) / MATH_UNROLL,
                "MUFU": ops["MUFU"] / MATH_UNROLL,
                "FP64 (DFMA/DMUL/DADD)": (ops["DFMA"] + ops["DMUL"] + ops["DADD"]) / MATH_UNROLL,
            }
        )
    return out


def run_math(
    names, *, latency_iters: int = 4096, throughput_iters: int = 2**14, blocks_per_sm: int = 4, repeat: int = 5
) -> list[dict]:
    """Per function: cycles per step of one warp's dependent chain (latency), and steps per cycle per
    SM with ``blocks_per_sm`` blocks of 256 threads on every SM (throughput)."""
    for name in names:
        _math_function(name)
    for n, what in ((latency_iters, "latency_iters"), (throughput_iters, "throughput_iters")):
        if positive_int(n, what) % MATH_UNROLL:
            raise ValueError(f"{what} must be a multiple of {MATH_UNROLL} (the unrolled loop), got {n}")
    positive_int(blocks_per_sm, "blocks_per_sm", maximum=8)
    common.require_gpu("the math-function probe")
    mhz, sms = common.clock_mhz(), common.sms()
    rows = []
    for name in names:
        _, cycles, launch = _math_launch(name, 1, WARP, latency_iters)
        launch()
        latency = int(cycles.get()[0]) / latency_iters
        blocks = blocks_per_sm * sms
        _, _, launch = _math_launch(name, blocks, MATH_BLOCK, throughput_iters)
        t = timing.benchmark(launch, warmup=1, repeat=repeat)
        rate = blocks * MATH_BLOCK * throughput_iters / (t.median_ms * 1e-3) / (mhz * 1e6) / sms
        rows += [
            row("math", name, "latency", latency, "cycles"),
            row("math", name, "throughput", rate, "steps/cycle/SM"),
        ]
    return rows


# --- SASS evidence -------------------------------------------------------------------------------


def hot_loop(instructions, opcode: str):
    """The loop body holding the most ``opcode`` instructions (e.g. the FMA loop), or [] if none."""
    bodies = [b for b in sass.loops(instructions) if any(i.base == opcode for i in b)]
    return max(bodies, key=lambda b: sum(i.base == opcode for i in b), default=[])


def timed_loop(instructions, opcode: str):
    """``hot_loop`` among the loops between a kernel's first and last clock read (SR_CLOCKLO): the
    timed loop, not an untimed warm-up loop that ptxas may have unrolled further."""
    clocks = [i.address for i in instructions if "SR_CLOCK" in i.operands]
    if len(clocks) < 2:
        raise ValueError(f"a timed loop lies between two clock reads; the kernel has {len(clocks)}")
    inside = [i for i in instructions if clocks[0] < i.address < clocks[-1]]
    return hot_loop(inside, opcode)


def issue_cycles(body) -> int:
    """Issue cycles of one trip through a loop body on one scheduler: one per instruction, two for an
    FFMA that reads two registers of one bank from the register file (``sass.bank_conflict``; operands
    flagged ``.reuse`` by the instruction before come from the reuse cache). With two banks, each read
    once per cycle (as published for Ampere), that is every FFMA reading three distinct registers."""
    return len(body) + sass.bank_conflicts(body, "FFMA")


def fma_loop_report(arch: str | None = None) -> list[dict]:
    """Per FMA variant: the hottest loop's FFMAs, other instructions and FFMAs charged a second read cycle, and the
    issue-bound rate they predict with enough warps: 4 schedulers x 32 threads x FFMAs / issue cycles,
    at most the FP32 lanes per SM of ``arch`` (default ``device.target_arch()``)."""
    arch = arch or device.target_arch()
    lanes = common.lanes_per_sm(arch)
    out = []
    for variant, (path, name) in FMA_KERNELS.items():
        ins = sass.disassemble(common.build(path, arch), name)
        body = hot_loop(ins, "FFMA")
        ffma = sum(i.base == "FFMA" for i in body)
        out.append(
            {
                "variant": variant,
                "FFMA in loop": ffma,
                "other in loop": len(body) - ffma,
                SECOND_READ: sass.bank_conflicts(body, "FFMA"),
                # with 64 lanes (sm_75, sm_80) a warp's FFMA holds its scheduler's 16 lanes two cycles
                "predicted FMA/cycle/SM": min(SCHEDULERS_PER_SM * WARP * ffma / issue_cycles(body), float(lanes))
                if body
                else 0.0,
                "FFMA loops": sum(sum(i.base == "FFMA" for i in b) >= 4 for b in sass.loops(ins)),
            }
        )
    return out


def uniform_report(arch: str | None = None) -> list[dict]:
    """Uniform-datapath instructions and FFMAs fed by uniform/constant operands, per kernel (compile only)."""
    compiled = common.build("uniform.cu", arch)
    out = []
    for name in ("poly_uniform", "poly_per_thread"):
        ins = sass.disassemble(compiled, name)
        ffma = [i for i in ins if i.base == "FFMA"]
        out.append(
            {
                "kernel": name,
                "instructions": len(ins),
                "uniform datapath": sum(i.uniform for i in ins),
                "FFMA": len(ffma),
                "FFMA with UR/c[] operand": sum(("UR" in i.operands) or ("c[" in i.operands) for i in ffma),
                "global loads": sum(i.base == "LDG" for i in ins),
            }
        )
    return out
