"""Hardware probes: sources compile (NVRTC), the SASS shows what each probe relies on, the pure
models and chain builders are right, bad parameters fail before launch, and (simulator) the
reductions match float64. GPU-marked tests check the CUDA C++ probes' outputs on a real GPU."""

import itertools
import math
import re

import numpy as np
import pytest

from gpus import A100, H100, RTX_4090, T4
from kernels.harness import cuda_cpp, device, results, sass
from kernels.probes import batchnorm, common, compute, memcheck, memory, nchw, reduction, report

try:
    from kernels.probes import answers  # teacher-only: the student edition has no answers.py
except ImportError:
    answers = None
needs_answers = pytest.mark.skipif(answers is None, reason="the student edition has no kernels/*/answers.py")

SOURCES = sorted(p.name for p in common.HERE.glob("*.cu"))
needs_sass = pytest.mark.skipif(not sass.available(), reason="no nvdisasm/cuobjdump (pip install nvidia-cuda-nvdisasm)")
cpu_only = pytest.mark.skipif(device.on_gpu(), reason="checks the CPU path")


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_probe_compiles(name, arch):
    compiled = common.build(name, arch)
    assert compiled.resources, f"{name}: ptxas reported no kernel"


@needs_sass
def test_chase_loads_are_dependent_global_loads():
    for kernel, opcode in (("chase", "LDG.E.64"), ("chase_l2", "LDG.E.64.STRONG.GPU")):
        ins = sass.disassemble(common.build("chase.cu"), kernel)
        body = compute.timed_loop(ins, "LDG")
        loads = [i for i in body if i.base == "LDG"]
        # the timed loop is chase.cu's `#pragma unroll 8`, between the two clock reads; ptxas unrolls
        # the untimed warm-up loop further, so the loop with the most loads is the wrong one
        clocks = [i.address for i in ins if "SR_CLOCK" in i.operands]
        assert clocks[0] < body[0].address and body[-1].address < clocks[-1]
        assert len(loads) == 8 and all(i.opcode == opcode for i in loads)
        # each load's address register is the destination of the load before it
        for prev, nxt in itertools.pairwise(loads):
            assert nxt.operands.split("[")[-1].startswith(prev.operands.split(",")[0])


@needs_sass
def test_timed_loop_needs_two_clock_reads():
    with pytest.raises(ValueError, match="between two clock reads; the kernel has 0"):
        compute.timed_loop(sass.disassemble(common.build("fma_v0_chain.cu"), "fma_chain"), "FFMA")


@needs_sass
def test_fma_loops_have_the_expected_shape():
    report = {r["variant"]: r for r in compute.fma_loop_report("sm_90")}
    assert report["v1 unroll 100"]["FFMA in loop"] == 100
    assert report["v2 double loop"]["FFMA in loop"] == 100
    assert 0 < report["v0 chain"]["FFMA in loop"] < 100
    # divergence: twice as many FMA loops as the swapped version (both paths are compiled)
    assert report["divergent"]["FFMA loops"] == 2 * report["swapped"]["FFMA loops"]
    # v2's FFMAs all read three registers (two cycles), v3's (immediate addend) two, v4's half from the reuse cache
    assert report["v2 double loop"][compute.SECOND_READ] == 100
    assert report["v3 immediate"][compute.SECOND_READ] == 0
    assert report["v4 two chains"][compute.SECOND_READ] < 100
    assert report["v3 immediate"]["predicted FMA/cycle/SM"] > 1.8 * report["v2 double loop"]["predicted FMA/cycle/SM"]
    # 64 FP32 lanes per SM on sm_80 cap every prediction
    assert max(r["predicted FMA/cycle/SM"] for r in compute.fma_loop_report("sm_80")) == 64


@needs_sass
def test_math_functions_sass():
    rows = {r["function"]: r for r in compute.math_report()}
    assert rows["FFMA (baseline)"]["instructions per step"] == 1
    assert (
        rows["__sinf"]["MUFU"] == 1
        and rows["sinf"]["instructions per step"] > 4 * rows["__sinf"]["instructions per step"]
    )
    assert rows["sin (fp64)"]["FP64 (DFMA/DMUL/DADD)"] > 5 and rows["sin (fp64)"]["MUFU"] == 0
    assert rows["expf(a) * expf(b)"]["MUFU"] == 2 * rows["expf(a + b)"]["MUFU"]
    assert rows["x < b * b"]["MUFU"] == 0 < rows["sqrtf(x) < b"]["MUFU"]


# Where each chain ends after 200 steps: the fixed point of x = f(x) (sin(x + 1) = x, by bisection;
# e^-x = x at the omega constant W(1); e^-1.5x = x at W(1.5) / 1.5), or the branch steps' 2-cycle.
MATH_LIMITS = {
    "FFMA (baseline)": 1.0,
    "DFMA (baseline)": 1.0,
    "sinf": 0.9345632107520242,
    "__sinf": 0.9345632107520242,
    "sin (fp64)": 0.9345632107520242,
    "expf": 0.5671432904097838,
    "__expf": 0.5671432904097838,
    "exp (fp64)": 0.5671432904097838,
    "expf(a) * expf(b)": 0.48390757184415084,
    "expf(a + b)": 0.48390757184415084,
}


@pytest.mark.parametrize("name", list(compute.MATH_FUNCS))
def test_math_reference_reaches_the_known_limit(name):
    x = compute.math_reference(name, 64, 200)
    if name in MATH_LIMITS:
        assert np.allclose(x, MATH_LIMITS[name], rtol=0, atol=1e-12)
    else:  # 0.5x + 0.5 below the threshold, 0.5x above: every chain alternates 1/3, 2/3
        assert np.allclose(np.minimum(abs(x - 1 / 3), abs(x - 2 / 3)), 0, atol=1e-12)


@pytest.mark.parametrize("name", list(compute.MATH_FUNCS))
def test_math_check_catches_a_wrong_step_count(name):
    ref = compute.math_reference(name, 128, 10)
    assert compute.math_compare(name, ref, 10).ok
    rounded = ref.astype(np.float32 if compute.MATH_FUNCS[name][1] == "fp32" else np.float64)
    assert compute.math_compare(name, rounded, 10).ok
    for wrong in (9, 11):
        assert not compute.math_compare(name, compute.math_reference(name, 128, wrong), 10).ok


@needs_sass
def test_padding_v0_uses_local_memory_and_v2_does_not():
    def local(version, defines=None):
        c = sass.counts(sass.disassemble(common.build(memory.PADDING_FILES[version], defines=defines), "pad"))
        return c["local store (spill)"] + c["local load (spill)"]

    assert local("v0 local") > 0
    assert local("v1 runtime") == 0
    assert all(local("v2 constant", {"CHANNELS": k}) == 0 for k in (1, 4, 16))


@needs_sass
def test_uniform_kernel_uses_uniform_datapath_and_constant_operands():
    rows = {r["kernel"]: r for r in compute.uniform_report()}
    assert rows["poly_uniform"]["FFMA with UR/c[] operand"] > 0
    assert rows["poly_per_thread"]["FFMA with UR/c[] operand"] == 0


def test_batchnorm_registers_grow_as_threads_per_column_shrink():
    regs = {r["threads per column"]: r["registers"] for r in batchnorm.resources() if r["version"] == "v2 registers"}
    assert regs[1] > regs[2] > regs[4] and regs[1] >= 128


def test_batchnorm_resources_compile_for_the_target_gpu(monkeypatch):
    archs = []
    compile_cubin = cuda_cpp.compile_cubin
    monkeypatch.setattr(
        cuda_cpp, "compile_cubin", lambda path, arch, opts: archs.append(arch) or compile_cubin(path, arch, opts)
    )
    monkeypatch.setattr(device, "on_gpu", lambda: True)
    monkeypatch.setattr(device, "properties", lambda: A100)
    batchnorm.resources()
    assert set(archs) == {"sm_80"}


def test_mi25_ratios_come_from_the_seeds():
    r = common.mi25_ratios()
    # the source's numbers: 21.383 / 10.963 ms, 21 / 44 and 43 / 44 FMA/cycle, 115 / 87 cycles,
    # 90 / 359 GB/s, 450 / 144 GB/s, 2.82 / 4.80 ms, 32 / 22 Gpixel/s
    assert r["tail"] == pytest.approx(21.383 / 10.963, rel=1e-3)
    assert (r["divergent"], r["swapped"], r["banks"]) == (21 / 44, 43 / 44, 115 / 87)
    assert (r["channels"], r["padding"], r["reduction"], r["batchnorm"]) == (90 / 359, 450 / 144, 2.82 / 4.80, 32 / 22)
    assert common.mi25_padding() == {"padding v0 local": {1: 44.0, 16: 144.0}, "padding v2 constant": {16: 450.0}}
    mi25 = {e["probe"]: e["MI25"] for e in common.summary([], 132)}
    assert mi25["tail: time(SMs + 1 blocks) / time(SMs)"] == r["tail"]
    assert common.mi25_value("registers", "max per thread", "scalar registers") == 102
    with pytest.raises(KeyError, match="no MI25 seed row for kernel='math', metric='latency'"):
        common.mi25_value("math", "latency")


def test_batchnorm_reference():
    x = np.random.default_rng(3).standard_normal((16, 5)) * 3 + 2
    y = batchnorm.reference(x)
    assert np.allclose(y.mean(axis=0), 0, atol=1e-12) and np.allclose(y.var(axis=0), 1, atol=1e-5)


def test_channel_strides_include_padded_powers_of_two():
    s = memory.channel_strides()
    assert 128 in s and 16384 in s and 16384 + 128 in s and all(v % 64 == 0 and v >= 128 for v in s)


@pytest.mark.parametrize("l2_bytes", [H100["l2_bytes"], 60 * 2**20, T4["l2_bytes"]])
def test_latency_sizes_reach_four_times_l2(l2_bytes):
    sizes = memory.latency_sizes(l2_bytes)
    assert sizes[0] == 4096 and sizes[-1] == 4 * l2_bytes // 4096 * 4096
    assert sizes == sorted(set(sizes)) and all(s % 4096 == 0 for s in sizes)


def test_channel_strides_that_do_not_fit_are_left_out():
    strides = memory.channel_strides()
    assert memory.channels_that_fit(strides, 2**18, H100) == (strides, None)
    fits, why = memory.channels_that_fit(strides, 2**18, T4)
    assert fits == [s for s in strides if s < 2**16]
    assert why == (
        "left out on this GPU: the channel probe at strides 65536, 65664 B, whose 262144 lines span "
        "up to 16,416 MiB, more than 90% of the GPU's 15,360 MiB"
    )


def test_l2_hit_working_set_is_4_mib_on_the_h100_and_inside_a_small_l2():
    l2_hit = {
        gpu: dict((m, n) for m, n, *_ in memory.hit_cases(p["l2_bytes"]))["L2 hit latency"]
        for gpu, p in (("H100", H100), ("H200", {"l2_bytes": 60 * 2**20}), ("T4", T4))
    }
    assert l2_hit["H100"] == l2_hit["H200"] == 4 * 2**20  # the committed rows
    assert 16 * 1024 < l2_hit["T4"] < T4["l2_bytes"] // 2 and l2_hit["T4"] % 4096 == 0


def test_register_limit_and_spills():
    rows = compute.register_report((64, 320))
    small, big = rows
    assert 64 <= small["registers"] < 255 and small["spill stores (B)"] == 0
    assert big["registers"] == 255 and big["spill stores (B)"] > 0
    assert small["warps per SM"] > big["warps per SM"]


def test_warps_per_sm_model(monkeypatch):
    monkeypatch.setattr(device, "on_gpu", lambda: False)  # the reference H100
    assert compute.warps_per_sm(32) == 64
    assert compute.warps_per_sm(64) == 32
    # cudaOccMaxBlocksPerSMRegsLimit: whole warps per sub-partition (16384 registers each), so 48
    # registers give 4 x 10 warps, not 65536 // 1536 = 42
    assert compute.warps_per_sm(48) == 40
    assert compute.warps_per_sm(168) == 12
    assert compute.warps_per_sm(255) == 8  # 256 per thread -> 8192 per warp
    with pytest.raises(ValueError, match="<= 255"):
        compute.warps_per_sm(256)


GPUS = {"A100": (A100, 64, 64), "RTX 4090": (RTX_4090, 128, 48), "H100": (H100, 128, 64)}  # (FP32 lanes, warps) per SM


@pytest.mark.parametrize("gpu", GPUS)
def test_lanes_and_warps_come_from_the_device(monkeypatch, gpu):
    props, lanes, warps = GPUS[gpu]
    monkeypatch.setattr(device, "on_gpu", lambda: True)
    monkeypatch.setattr(device, "properties", lambda: props)
    assert common.lanes_per_sm() == lanes
    assert compute.warps_per_sm(32) == warps  # 32 registers per thread would allow 64
    assert common.sms() == props["sms"] and device.target_arch() == f"sm_{props['cc']}"
    fma = common.row("fma v2 double loop", "1 x 1024 threads", "FMA per cycle per SM", 64.0, "FMA/cycle/SM")
    per_lane = {e["probe"]: e["ours"] for e in common.summary([fma])}
    assert per_lane["FMA per cycle per lane, one chain per thread"] == 64.0 / lanes


def test_without_a_gpu_the_reference_h100_is_used(monkeypatch):
    monkeypatch.setattr(device, "on_gpu", lambda: False)
    assert device.target_properties() is device.REFERENCE_PROPERTIES
    assert (common.lanes_per_sm(), compute.warps_per_sm(32), device.target_arch()) == (128, 64, "sm_90")
    # stored rows of another GPU (the results page) name its compute capability
    fma = common.row("fma v2 double loop", "1 x 1024 threads", "FMA per cycle per SM", 64.0, "FMA/cycle/SM")
    per_lane = {e["probe"]: e["ours"] for e in common.summary([fma], cc="80")}
    assert per_lane["FMA per cycle per lane, one chain per thread"] == 1.0


def test_clock_history_is_one_entry_per_stored_run_of_the_clock_probe(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "on_gpu", lambda: False)
    stored = [r for r in results.load("probes", results.REFERENCE_GPU) if r["kernel"] == "clock"]
    history = common.clock_history()
    assert [(d, sm) for d, sm, _ in history] == sorted(
        (r["date"], float(r["value"])) for r in stored if r["metric"] == "sm clock"
    )
    host = {r["date"]: float(r["value"]) for r in stored if r["metric"] == "sm clock, host timer"}
    assert [h for _, _, h in history] == [host.get(d) for d, _, _ in history]
    machine = [r for r in results.load("machine", results.REFERENCE_GPU) if r["metric"] == "max_sm_clock_mhz"]
    assert common.stated_max_clock_mhz() == float(max(machine, key=lambda r: r["date"])["value"])
    monkeypatch.setattr(results, "REPOSITORY", tmp_path)  # no stored runs at all
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert common.clock_history() == []
    with pytest.raises(LookupError, match="machine chapter"):
        common.stated_max_clock_mhz()


def test_lanes_per_sm_takes_a_target_and_refuses_an_unknown_one():
    assert common.lanes_per_sm("sm_80") == 64 and common.lanes_per_sm("sm_90a") == 128
    with pytest.raises(ValueError, match="compute capability 61"):
        common.lanes_per_sm("61")


def test_bank_ways():
    assert [memory.bank_ways(s) for s in (1, 2, 3, 4, 8, 16, 32, 33)] == [1, 2, 1, 4, 8, 16, 32, 1]
    assert all(memory.bank_ways(s) == math.gcd(s, 32) for s in range(1, 34))


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_chain_order_is_one_cycle(order):
    nxt = memory.chain_order(1000, order, seed=1)
    seen, i = set(), 0
    for _ in range(1000):
        seen.add(i)
        i = nxt[i]
    assert i == 0 and len(seen) == 1000


def fmaf_chains(variant, threads, block, iters):
    """The kernels' float32 chains with fmaf emulated: a product of two float32 is exact in float64,
    so rounding the float64 sum to float32 rounds once, as fmaf does (double rounding aside)."""
    x = np.arange(threads)
    t0 = x.astype(np.float32) / (x + 1).astype(np.float32)
    addend = compute.IMMEDIATE_ADDEND if variant == "v3 immediate" else np.float32(1) / np.float32(1e8)
    t1 = np.full(threads, addend, np.float32)
    if variant in ("divergent", "swapped"):
        lane0 = (x % block) % 32 == 0
        t0[lane0], t1[lane0] = t1[lane0].copy(), t0[lane0].copy()
    starts, steps = ((0, 1), iters // 2) if variant == "v4 two chains" else ((0,), iters)
    total = np.zeros(threads, np.float32)
    for start in starts:
        s = np.full(threads, start, np.float32)
        for _ in range(steps):
            s = (t0.astype(np.float64) * s + t1).astype(np.float32)
        total += s
    return total


FMA_CHECKED = [(96, 11), (256, 2)]  # the GPU test's launch and check_fma's default (the notebook's)


@pytest.mark.parametrize("threads, blocks", FMA_CHECKED)
@pytest.mark.parametrize("variant", list(compute.FMA_KERNELS))
def test_fma_check_passes_float32_chains_and_fails_wrong_ones(variant, threads, blocks):
    n, iters = threads * blocks, 1000
    assert compute.fma_compare(variant, fmaf_chains(variant, n, threads, iters), threads, blocks, iters).ok
    swap = variant in ("divergent", "swapped")
    # 999 steps: v4's two chains of iters // 2 steps would run 499 each, as with 998
    for wrong in (900, 999 if variant != "v4 two chains" else 998, 1002):
        ref = compute.fma_reference(n, threads, wrong, swap_lane0=swap, variant=variant)
        assert not compute.fma_compare(variant, ref, threads, blocks, iters).ok, wrong
    lanes_zeroed = compute.fma_reference(n, threads, iters, swap_lane0=swap, variant=variant)
    lanes_zeroed[(np.arange(n) % threads) % 32 != 0] = 0
    assert not compute.fma_compare(variant, lanes_zeroed, threads, blocks, iters).ok


def test_fma_check_needs_an_exact_zero_where_the_chain_is_zero():
    ref = compute.fma_reference(64, 64, 100, swap_lane0=True, variant="swapped")
    assert ref[0] == 0 and compute.fma_compare("swapped", ref, 64, 1, 100).ok
    ref[0] = 1e-30
    assert not compute.fma_compare("swapped", ref, 64, 1, 100).ok


def test_tail_blocks_bracket_the_sm_count():
    b = compute.tail_blocks(132)
    assert {1, 131, 132, 133, 264, 265} <= set(b) and max(b) == 265


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: compute.run_launch_rate([(2048,)]), "block.x must be <= 1024"),
        (lambda: compute.run_launch_rate([(32, 32, 2)]), "at most 1024"),
        (lambda: compute.run_launch_rate([(1, 1, 65)]), "block.z must be <= 64"),
        (lambda: compute.run_launch_rate([(0,)]), "block.x must be >= 1"),
        (lambda: compute.run_fma(["v0 chain"], [2048]), "block.x must be <= 1024"),
        (lambda: compute.run_fma(["v2 double loop"], [128], iters=150), "multiple of 100"),
        (lambda: compute.run_fma(["v9"], [128]), "variant must be one of"),
        (lambda: compute.run_fma_tail([0]), "blocks must be >= 1"),
        (lambda: memory.run_cache_line([0]), "stride must be >= 1"),
        (lambda: memory.run_cache_line([12]), "multiple of 8"),
        (lambda: memory.run_latency_sweep([64], stride=128), "at least one stride"),
        (lambda: memory.run_bank_conflicts([0]), "stride must be >= 1"),
        (lambda: memory.run_padding(["v0 local"], [32]), "channels must be <= 16"),
        (lambda: memory.run_padding(["v0 local"], [3]), "multiple of channels"),
        (lambda: nchw.run_nchw((4096, 4096, 56, 56)), "overflows"),
        (lambda: nchw.run_nchw((16384, 64, 56, 56)), "overflows"),
        (lambda: memory.run_mem_divergence([32]), "divergence is a lane mask"),
        (lambda: memory.run_channels([0]), "stride must be >= 1"),
        (lambda: memory.run_channels([200]), "multiple of 64"),
        (lambda: memory.run_channels([64]), "stride must be >= 128 bytes"),
        (lambda: compute.run_math(["tanf"]), "math function must be one of"),
        (lambda: compute.run_math(["sinf"], latency_iters=100), "multiple of 8"),
        (lambda: batchnorm.run_batchnorm([("v2 registers", 3)]), "threads per column must be one of"),
        (lambda: batchnorm.run_batchnorm([("v2 registers", 32)], batch=48), "multiple of threads per column"),
        (lambda: batchnorm.run_batchnorm([("v3", 1)]), "version must be one of"),
        (lambda: batchnorm.run_batchnorm([("v0 three passes", 1)], batch=2**16, pixels=2**16), "< 2\\^31"),
        (lambda: reduction.block_sums("tree 1", np.zeros(4, np.float32), np.zeros(1, np.float32), 4), "fan_in"),
        (
            lambda: reduction.block_sums("shuffle", np.zeros(40, np.float32), np.zeros(1, np.float32), 40),
            "multiple of 32",
        ),
        (
            lambda: reduction.block_sums("tree 2", np.zeros(100, np.float32), np.zeros(1, np.float32), 0),
            "block must be >= 1",
        ),
        (lambda: reduction.check_block_sums("tree 2", block=-64), "block must be >= 1"),
    ],
)
def test_bad_parameters_fail_before_launch(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


@pytest.mark.skipif(device.on_gpu(), reason="the simulator's refusal")
def test_shuffle_in_the_simulator_says_it_needs_a_gpu():
    with pytest.raises(RuntimeError, match="shuffle variant needs a GPU"):
        reduction.check_block_sums("shuffle")


def test_working_set_larger_than_gpu_memory(monkeypatch):
    monkeypatch.setattr(common, "free_gpu_bytes", lambda: 80 * 2**30)
    with pytest.raises(ValueError, match="larger than the GPU's free memory"):
        memory.run_latency_sweep([200 * 2**30])
    with pytest.raises(ValueError, match="larger than the GPU's free memory"):
        memory.run_padding(["v0 local"], [16], shape=(65535, 4096, 7, 7))
    with pytest.raises(ValueError, match="footprint .* larger than the GPU's free memory"):
        memory.run_channels([2**20], lines=2**18)


@cpu_only
def test_good_parameters_need_a_gpu_on_the_cpu():
    with pytest.raises(RuntimeError, match="needs a GPU"):
        compute.run_launch_rate([(256,)])
    with pytest.raises(RuntimeError, match="needs a GPU"):
        memory.run_cache_line([64])
    with pytest.raises(RuntimeError, match="needs a GPU"):
        compute.run_math(["sinf"])
    with pytest.raises(RuntimeError, match="needs a GPU"):
        batchnorm.run_batchnorm([("v1 two passes", 1)], pixels=100)


@cpu_only
def test_memcheck_script_needs_a_gpu_and_names_its_parts(capsys):
    assert memcheck.main(["compute"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().out
    with pytest.raises(ValueError, match="parts must be among"):
        memcheck.main(["caches"])


# The simulator has no warp shuffles, so the shuffle version is checked on a GPU only (whole warps).
# Blocks of 48 and 96 make uneven tree steps (j < active) for every fan-in.
@pytest.mark.parametrize(
    "variant, block",
    [
        (v, b) if v != "shuffle" else pytest.param(v, b, marks=pytest.mark.gpu)
        for v in reduction.variants()
        for b in (48, 96, 256)
        if v != "shuffle" or b % 32 == 0
    ],
)
def test_block_sums_match_float64(variant, block, rng):
    seed = int(rng.integers(2**32))
    result = reduction.check_block_sums(variant, n=block * 3 + 17, block=block, seed=seed)
    assert result.ok, f"{result} (seed {seed})"


# The wrappers check their arguments before they need a GPU (xp: NumPy here, CuPy on a GPU).
@pytest.mark.parametrize(
    "bad, error, match",
    [
        (
            lambda xp: reduction.block_sums("tree 2", xp.zeros(100, np.float32), xp.zeros(3, np.float32), 64),
            ValueError,
            r"partial: expected shape \(2,\)",
        ),
        (
            lambda xp: batchnorm.normalize("v0 three passes", xp.zeros((4, 8)), xp.zeros((4, 8), np.float32)),
            TypeError,
            "x: expected dtype float32, got float64",
        ),
        (
            lambda xp: batchnorm.normalize(
                "v0 three passes", xp.zeros((4, 8), np.float32), xp.zeros((8, 4), np.float32)
            ),
            ValueError,
            r"y: expected shape \(4, 8\)",
        ),
        (
            lambda xp: memory.pad(
                "v0 local", xp.zeros((1, 4, 5, 5), np.float32), xp.zeros((1, 4, 7, 7), np.float32), 4, 2
            ),
            ValueError,
            r"out: expected shape \(1, 4, 9, 9\)",
        ),
        (
            lambda xp: nchw.generate(xp.zeros(2 * 5 * 7, np.int32), (2, 3, 5, 6)),
            ValueError,
            r"buf: expected shape \(60,\)",
        ),
        (
            lambda xp: nchw.generate(xp.zeros(2 * 5 * 7, np.float32), (2, 3, 5, 7)),
            TypeError,
            "buf: expected dtype int32",
        ),
        (lambda xp: nchw.generate(xp.zeros(10, np.int32), (3, 5, 7)), ValueError, r"shape must be \(N, C, H, W\)"),
        (lambda xp: memory.store_divergent(xp.zeros((4, 8), np.int32), 1), ValueError, "buf: expected 1 dimensions"),
    ],
)
def test_wrappers_refuse_bad_arrays(bad, error, match, xp):
    with pytest.raises(error, match=match):
        bad(xp)


def test_nchw_reference():
    ref = nchw.reference((2, 3, 2, 2))
    assert ref.tolist() == [0, 1, 2, 3, 12, 13, 14, 15]


# --- on a GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(compute.FMA_KERNELS))
def test_fma_probes_compute_the_chain(variant):
    assert compute.check_fma(variant, threads=96, blocks=11, iters=1000).ok  # 1056 threads: see FMA_CHECKED


@pytest.mark.gpu
@pytest.mark.parametrize(
    "version, channels", [("v0 local", 4), ("v1 runtime", 8), ("v2 constant", 16), ("v2 constant", 1)]
)
def test_padding_matches_numpy(version, channels, rng):
    seed = int(rng.integers(2**32))
    # 9 x 11 = 99 pixels: one partial block; 21 x 23 = 483: two blocks of PAD_BLOCK = 256, the last partial
    for shape in ((3, 16, 5, 7), (2, 16, 17, 19)):
        result = memory.check_padding(version, channels, shape=shape, p=2, seed=seed)
        assert result.ok, f"{result} {shape} (seed {seed})"


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(compute.MATH_FUNCS))
def test_math_chains_match_float64(name):
    assert compute.check_math(name).ok


@pytest.mark.gpu
@pytest.mark.parametrize(
    "version, tpc, batch",
    [
        ("v0 three passes", 1, 128),
        ("v1 two passes", 1, 128),
        ("v0 three passes", 1, 37),
        ("v1 two passes", 1, 37),
        ("v2 registers", 32, 96),
        ("v2 registers", 4, 36),
    ]
    + [("v2 registers", k, 128) for k in batchnorm.THREADS_PER_COLUMN],
)
def test_batchnorm_matches_float64(version, tpc, batch, rng):
    # 333 pixels: a partial last warp; v2 keeps batch / TPC values per thread (3 and 9: not powers of two)
    seed = int(rng.integers(2**32))
    result = batchnorm.check_batchnorm(version, tpc, batch=batch, pixels=333, seed=seed)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.gpu
@pytest.mark.parametrize("divergence", [0, 1, 31])
def test_divergent_stores_write_every_element(divergence):
    assert memory.check_mem_divergence(divergence, n=1000).ok


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (2, 3, 13, 11)])  # 63 pixels: one block; 143: three, the last partial
def test_nchw_matches_numpy(shape):
    assert nchw.check_nchw(shape, block=64).ok


@pytest.mark.gpu
def test_clock_probe_gives_its_rows():
    rows = memory.run_clock(spin=2**24)
    assert [(r["metric"], r["unit"]) for r in rows] == [
        ("sm clock", "MHz"),
        ("sm clock, host timer", "MHz"),
        ("spin time", "ms"),
    ]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)


@pytest.mark.gpu
def test_memcheck_script_runs_every_probe_and_its_checks_pass(capsys):
    assert memcheck.main([]) == 0  # without the sanitizer: the chapters run it under compute-sanitizer
    out = capsys.readouterr().out
    names = [name for runs in memcheck.PARTS.values() for name, _ in runs()]
    checks = sum(name.startswith("check ") for name in names)
    assert out.rstrip().endswith(f"PASS  {checks} of {checks} checks") and "FAIL" not in out
    assert re.search(rf"timing probes run +{len(names) - checks} ", out), out


@pytest.mark.gpu
def test_latency_probes_give_their_rows():
    rows = memory.run_hit_latencies(steps=1024) + memory.run_smem_latency(steps=512)
    metrics = [m for m, *_ in memory.hit_cases(device.properties()["l2_bytes"])] + ["shared-memory latency"]
    assert [(r["metric"], r["unit"]) for r in rows] == [
        (m + s, u) for m in metrics for s, u in (("", "cycles"), (" ns", "ns"))
    ]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)


# --- how the chapters print verdicts and the results table, and the exercises' arithmetic --------


def test_verdicts_count_the_passes_and_show_only_the_failures():
    ok = check_result("probe a", True)
    bad = check_result("probe b", False)
    text = report.verdicts([ok, ok, bad], runs=[("launch rate", 3), ("tail", 4)])
    assert "PASS  probe a" not in text and str(bad) in text
    assert text.splitlines()[1].split() == ["checks", "2", "1"]
    assert text.splitlines()[2].split()[-2:] == ["2", "--"]
    assert text.endswith("FAIL  2 of 3 checks")
    assert report.verdicts([ok]).endswith("PASS  1 of 1 checks")


def check_result(name, ok):
    from kernels.harness.check import CheckResult

    return CheckResult(name, ok, 0.0, 0.0, 0, 1e-6, None)


def test_results_table_numbers_have_no_exponent():
    assert [report.number(v) for v in (1980.4, 2340.0, 748.2, 5.674, 0.4991, None)] == [
        "1980", "2340", "748", "5.67", "0.499", None
    ]  # fmt: skip
    with pytest.raises(TypeError, match="value: expected a number"):
        report.number("1980")
    stored = list(results.latest(common.CHAPTER, results.REFERENCE_GPU).values())
    rows = report.table_rows(common.summary(stored, 132))
    clock = next(r for r in rows if r["probe"] == "SM clock")
    assert clock["ours"].isdigit() and clock["MI25"].isdigit()
    assert not any("e+" in (r[c] or "") for r in rows for c in ("ours", "MI25"))


@needs_answers
@pytest.mark.parametrize("text", answers.REGBANK_FFMAS if answers else ())
def test_operand_cycles_agree_with_the_sass_bank_rule(text):
    opcode, _, operands = text.partition(" ")
    insn = sass.Instruction(0, "", opcode, operands, "")
    assert (answers.operand_cycles(text) > 1) == sass.bank_conflict(insn)


@needs_answers
def test_operand_cycles_count_the_fuller_bank():
    assert [answers.operand_cycles(t) for t in answers.REGBANK_FFMAS] == [2, 1, 3, 3]
    assert answers.operand_cycles("FFMA R1, RZ, R2, R2") == 1  # RZ is no register read; R2 read once


@needs_answers
def test_float2_strides_are_served_per_half_warp():
    assert all(answers.float2_ways(s) == 1 for s in range(1, 34, 2))
    assert answers.float2_ways(2) == 2 and answers.float2_ways(16) == 16


@needs_answers
def test_the_tail_step_is_read_from_the_sweep():
    sweep = {b: {"time": 1.0 if b <= 4 else 2.0, "FMA per cycle": float(min(b, 4))} for b in (1, 2, 4, 5, 8)}
    assert answers.first_step(sweep) == 5
    with pytest.raises(ValueError, match="never steps above"):
        answers.first_step({b: {"time": 1.0} for b in (1, 2, 3)})


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: report.verdicts(["PASS  a"]), TypeError, "checks: expected verdicts with a bool `ok`"),
        pytest.param(lambda: answers.first_step({}), ValueError, "sweep: expected", marks=needs_answers),
        pytest.param(
            lambda: answers.first_step({1: {"FMA per cycle": 1.0}}), ValueError, "sweep: expected", marks=needs_answers
        ),
        pytest.param(
            lambda: answers.threads_to_hide(0), ValueError, "chains_per_thread must be >= 1", marks=needs_answers
        ),
        pytest.param(
            lambda: answers.threads_to_hide(1.5),
            ValueError,
            "chains_per_thread must be an integer",
            marks=needs_answers,
        ),
        pytest.param(
            lambda: answers.operand_cycles(""), TypeError, "text: expected an instruction", marks=needs_answers
        ),
        pytest.param(
            lambda: answers.operand_cycles("FFMA R0, R1, R2, R3", model="fermi"),
            ValueError,
            "model: expected one of",
            marks=needs_answers,
        ),
        pytest.param(lambda: answers.float2_ways(0), ValueError, "stride must be >= 1", marks=needs_answers),
    ],
)
def test_report_and_exercise_helpers_refuse_bad_input(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call()


def test_the_chain_latency_is_four_warps_of_fmas_over_the_rate():
    rows = [
        {"kernel": "fma v2 double loop", "problem": "1 x 128 threads", "value": 32.0},
        {"kernel": "fma v2 double loop", "problem": "1 x 512 threads", "value": 64.0},
        {"kernel": "fma v3 immediate", "problem": "1 x 128 threads", "value": 16.0},
    ]
    assert compute.chain_latency_cycles(rows) == 4.0  # 4 schedulers x 32 FMAs every 4 cycles
    with pytest.raises(ValueError, match="no row of fma v2 double loop at 1 x 128 threads"):
        compute.chain_latency_cycles(rows[1:])


def test_the_stored_chain_latency_is_a_few_cycles():
    """The reference GPU's stored run: a dependent FFMA waits a few cycles, less than the math table's step."""
    stored = [r for r in results.latest(common.CHAPTER, results.REFERENCE_GPU).values()]
    stored = [{**r, "value": float(r["value"])} for r in stored]
    latency = compute.chain_latency_cycles(stored)
    step = results.value(stored, "math", "latency", "FFMA (baseline)")
    assert 2 < latency < step


@needs_answers
def test_operand_cycles_under_the_volta_rule_wait_only_for_three_sources_in_one_bank():
    assert [answers.operand_cycles(t, "volta") for t in answers.REGBANK_FFMAS] == [1, 1, 2, 2]
    with pytest.raises(ValueError, match="model: expected one of \\['ampere', 'volta'\\], got 'hopper'"):
        answers.operand_cycles("FFMA R0, R0, R2, R3", "hopper")


def test_every_probe_row_is_made_with_the_columns_row_takes():
    """common.row takes the five columns only (the store refuses other keys): a GPU-only probe that passed
    one more would fail on the GPU alone, so every call is checked here, in the source."""
    import ast
    import inspect

    allowed = list(inspect.signature(common.row).parameters)
    for path in sorted(common.HERE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "row":
                keys = [k.arg for k in node.keywords]
                assert set(keys) <= set(allowed) and len(node.args) + len(keys) == len(allowed), (
                    f"{path.name}:{node.lineno}: row() with {len(node.args)} values and keywords {keys}"
                )
