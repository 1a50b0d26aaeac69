"""Bad input to the public functions of kernels/ (issue 33): each case gets an error that names the
argument and the constraint, or correct behaviour, never a bare KeyError, an AttributeError, NaN or
a silent result.

FIXED lists the cases that failed the audit (a bare or misleading error, or none); CHECKED the cases
the same audit tried that were already right and must stay so. CONTRIBUTING.md ("Bad input") quotes
the counts of both tables. Arrays come from ``device.xp()`` so that every case also holds on a GPU,
where a launcher must refuse before it launches.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels.conv import common as conv
from kernels.conv import cuda_stages, s1_naive, s2_coalescing, s4_shared, s9_autotune, s11_halo_autotune
from kernels.harness import ceilings, check, cudnn_conv, device, results, roofline, show, timing
from kernels.igemm import banks
from kernels.igemm import common as ig
from kernels.igemm import memcheck as ig_memcheck
from kernels.igemm import profile as ig_profile
from kernels.igemm import shapes as ig_shapes
from kernels.machine import copy as machine_copy
from kernels.machine import fma
from kernels.probes import batchnorm, compute, memory, nchw, reduction
from kernels.ssim import backward, bench
from kernels.ssim import common as ssim

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
xp = device.xp()


def f32(*shape):
    return xp.zeros(shape, np.float32)


def tiny(layout):
    """The tiny conv problem's (x, f) in ``layout``, as device arrays."""
    return tuple(map(xp.asarray, conv.to_layout(*conv.random_inputs(conv.PROBLEMS["tiny"], seed=0), layout)))


def tiny_nchw_x_rsck_f():
    (x, _), (_, f) = tiny("nchw"), tiny("nhwc")
    return x, f


def tiny_nhwc_x_kcrs_f():
    (x, _), (_, f) = tiny("nhwc"), tiny("nchw")
    return x, f


def overlapping(total, first_shape, second_shape, offset=0):
    """Two views of one buffer: the first ``first_shape`` from the start, the second from ``offset``."""
    buf = f32(total)
    return (
        buf[: int(np.prod(first_shape))].reshape(first_shape),
        buf[offset : offset + int(np.prod(second_shape))].reshape(second_shape),
    )


def pad_with_overlap():
    x, out = overlapping(25, (1, 1, 3, 3), (1, 1, 5, 5))
    return memory.pad("v0 local", x, out, 1, 1)


def igemm_in_place():
    """A 1x1 convolution with as many filters as channels: the output has the input's shape."""
    x = xp.zeros((1, 5, 6, 8), np.float16)
    return ig.conv(1, x, xp.zeros((8, 1, 1, 8), np.float16), pad=0, out=x)


H100 = {"cc": "90", "smem_per_block_optin_bytes": 227 * 1024}
IMG = (1, 1, 11, 11)


# (id "function: case", call, error, message pattern)
FIXED = [
    # harness.check
    (
        "check.positive_int: inf",
        lambda: check.positive_int(float("inf"), "n"),
        ValueError,
        "n must be an integer, got inf",
    ),
    (
        "check.positive_int: NaN",
        lambda: check.positive_int(float("nan"), "n"),
        ValueError,
        "n must be an integer, got nan",
    ),
    (
        "check.compare: complex output",
        lambda: check.compare(np.ones(3, complex), np.ones(3), atol=0),
        TypeError,
        r"out \(output\): expected a real number dtype .* got complex128",
    ),
    (
        "check.compare: complex reference",
        lambda: check.compare(np.ones(3), np.ones(3, np.complex64), atol=0),
        TypeError,
        "ref .* got complex64",
    ),
    (
        "check.compare: strings",
        lambda: check.compare(np.array(["1"]), np.ones(1), atol=0),
        TypeError,
        "real number dtype",
    ),
    (
        "check.compare: objects",
        lambda: check.compare(np.array([1.0], object), np.ones(1), atol=0),
        TypeError,
        "real number dtype",
    ),
    (
        "check.compare: NaN atol",
        lambda: check.compare(np.ones(3), np.ones(3), atol=float("nan")),
        ValueError,
        "atol .* must be a finite number >= 0, got nan",
    ),
    (
        "check.compare: negative rtol",
        lambda: check.compare(np.ones(3), np.ones(3), atol=0, rtol=-1),
        ValueError,
        "rtol .* must be a finite number >= 0",
    ),
    ("check.poison: a list", lambda: check.poison([1.0]), TypeError, "poison: expected an array to fill, got list"),
    ("check.overlaps: a list", lambda: check.overlaps([1.0], f32(2)), TypeError, "got list"),
    ("check.memcheck: a string", lambda: check.memcheck("-m kernels.igemm.memcheck"), TypeError, "list of strings"),
    # harness.timing
    ("timing.Timing: no samples", lambda: timing.Timing(()), ValueError, "at least one time, got none"),
    ("timing.Timing: NaN sample", lambda: timing.Timing((1.0, float("nan"))), ValueError, "expected finite times"),
    (
        "timing.rates: NaN flops",
        lambda: timing.rates(timing.Timing((1.0,)), flops=float("nan")),
        ValueError,
        "flops must be a finite number >= 0",
    ),
    ("timing.rates: not a Timing", lambda: timing.rates(2.0), TypeError, "expected a Timing"),
    (
        "timing.benchmark: fractional repeat",
        lambda: timing.benchmark(lambda: None, repeat=2.5),
        ValueError,
        "repeat must be an integer, got 2.5",
    ),
    (
        "timing.benchmark: negative warmup",
        lambda: timing.benchmark(lambda: None, warmup=-1),
        ValueError,
        "warmup must be >= 0",
    ),
    # harness.roofline, ceilings, cudnn_conv
    (
        "roofline.floor: NaN flops",
        lambda: roofline.floor(float("nan"), 1, gflops=1, gbps=1),
        ValueError,
        "flops must be a finite number >= 0",
    ),
    (
        "roofline.floor: infinite bandwidth",
        lambda: roofline.floor(1, 1, gflops=1, gbps=float("inf")),
        ValueError,
        "gbps .* finite positive",
    ),
    (
        "roofline.attainable: NaN intensity",
        lambda: roofline.attainable(float("nan"), gflops=1, gbps=1),
        ValueError,
        "intensity must be a finite positive number",
    ),
    (
        "roofline.attainable: negative ceiling",
        lambda: roofline.attainable(1, gflops=-1, gbps=1),
        ValueError,
        "gflops .* finite positive",
    ),
    (
        "ceilings.measure_copy: fractional nbytes",
        lambda: ceilings.measure_copy(2.5e6 + 0.5),
        ValueError,
        "nbytes must be an integer",
    ),
    pytest.param(
        "ceilings.measure_copy: no GPU",
        lambda: ceilings.measure_copy(2**20),
        RuntimeError,
        "measuring the copy ceiling needs a GPU",
        marks=NO_GPU,
    ),
    pytest.param(
        "ceilings.measure_fma: no GPU",
        lambda: ceilings.measure_fma(),
        RuntimeError,
        "measuring the FMA ceiling needs a GPU",
        marks=NO_GPU,
    ),
    pytest.param(
        "ceilings.measure_smem: no GPU",
        lambda: ceilings.measure_smem(),
        RuntimeError,
        "measuring the shared-memory ceiling needs a GPU",
        marks=NO_GPU,
    ),
    (
        "cudnn_conv.operand_shapes: zero batch",
        lambda: cudnn_conv.operand_shapes(0, 8, 5, 5, 8, 3, 3, 1, 1, "nhwc"),
        ValueError,
        "n must be >= 1",
    ),
    (
        "cudnn_conv.operand_shapes: negative pad",
        lambda: cudnn_conv.operand_shapes(1, 8, 5, 5, 8, 3, 3, -1, 1, "nhwc"),
        ValueError,
        "pad must be >= 0",
    ),
    (
        "cudnn_conv.operand_shapes: filter too large",
        lambda: cudnn_conv.operand_shapes(1, 8, 2, 2, 8, 5, 5, 0, 1, "nhwc"),
        ValueError,
        "larger than the padded 2x2 input",
    ),
    pytest.param(
        "cudnn_conv.ConvFprop: no cuDNN",
        lambda: cudnn_conv.ConvFprop(1, 8, 5, 5, 8),
        RuntimeError,
        "cuDNN is not available",
        marks=pytest.mark.skipif(cudnn_conv.missing() is None, reason="cuDNN is installed"),
    ),
    # conv
    (
        "conv.cuda_stages.stage: unknown name",
        lambda: cuda_stages.stage("FOO"),
        ValueError,
        r"unknown CUDA C\+\+ stage 'FOO'; known: \['DOUBLE BUFFER'",
    ),
    (
        "conv.cuda_stages.compile_info: unknown name",
        lambda: cuda_stages.compile_info("FOO"),
        ValueError,
        "unknown CUDA C",
    ),
    (
        "conv.cuda_stages.stage: tile not a dict",
        lambda: cuda_stages.stage("SPLIT-K", [128, 64, 8, 3]),
        TypeError,
        "tile must be a dict such as",
    ),
    (
        "conv.common.run: a stage name",
        lambda: conv.run("NAIVE", *tiny("nchw")),
        TypeError,
        "stage: expected a Stage object .* got str 'NAIVE'",
    ),
    (
        "conv.common.run: NCHW arrays to an NHWC stage",
        lambda: conv.run(s2_coalescing.STAGE, *tiny("nchw")),
        ValueError,
        r"takes nhwc filters \(3, 3, C, K\), got shape \(5, 3, 3, 3\), the nchw layout",
    ),
    (
        "conv.common.run: NHWC arrays to an NCHW stage",
        lambda: conv.run(s1_naive.STAGE, *tiny("nhwc")),
        ValueError,
        r"takes nchw filters \(K, C, 3, 3\), got shape \(3, 3, 3, 5\), the nhwc layout",
    ),
    (
        "conv.common.run: NCHW input to an NHWC stage",
        lambda: conv.run(s2_coalescing.STAGE, *tiny_nchw_x_rsck_f()),
        ValueError,
        r"x of shape \(1, 3, 7, 7\) looks like nchw",
    ),
    (
        "conv.common.run: NHWC input to an NCHW stage",
        lambda: conv.run(s1_naive.STAGE, *tiny_nhwc_x_kcrs_f()),
        ValueError,
        r"x of shape \(1, 7, 7, 3\) looks like nhwc",
    ),
    (
        "conv.common.check_stage: a problem name",
        lambda: conv.check_stage(s1_naive.STAGE, "tiny"),
        TypeError,
        "p: expected a Problem .* got str 'tiny'",
    ),
    ("conv.common.tolerance: a problem name", lambda: conv.tolerance("tiny"), TypeError, "expected a Problem"),
    (
        "conv.common.reference: channels disagree",
        lambda: conv.reference(np.zeros((1, 3, 7, 7)), np.zeros((5, 4, 3, 3))),
        ValueError,
        "filter has 4 input channels but the input has 3",
    ),
    (
        "conv.s9_autotune.candidates: a problem name",
        lambda: s9_autotune.candidates("conv1"),
        TypeError,
        "expected a Problem",
    ),
    (
        "conv.s11_halo_autotune.candidates: a problem name",
        lambda: s11_halo_autotune.candidates("conv2"),
        TypeError,
        "expected a Problem",
    ),
    (
        "conv.s4_shared.stage: bool tile",
        lambda: s4_shared.stage(by=True, bn=4, tm=2, bkc=2),
        ValueError,
        "by must be an integer, got True",
    ),
    (
        "conv.s4_shared.stage: shared memory",
        lambda: s4_shared.stage(by=8, bn=32, tm=100, bkc=16),
        ValueError,
        "53248 bytes of shared memory",
    ),
    # igemm
    ("igemm.gemm_problem: k = 0", lambda: ig.gemm_problem(0), ValueError, "k must be >= 1, got 0"),
    ("igemm.gemm_problem: n = 0", lambda: ig.gemm_problem(64, n=0), ValueError, "n must be >= 1"),
    ("igemm.gemm_problem: fractional k", lambda: ig.gemm_problem(64.5), ValueError, "k must be an integer"),
    (
        "igemm.reference: channels disagree",
        lambda: ig.reference(np.zeros((1, 5, 6, 8), np.float16), np.zeros((8, 3, 3, 4), np.float16)),
        ValueError,
        r"same channels .* \(1, 5, 6, 8\) and \(8, 3, 3, 4\)",
    ),
    (
        "igemm.compare: a problem name",
        lambda: ig.compare(np.zeros(3), np.zeros(3), "CI_PROBLEM"),
        TypeError,
        "problem: expected a Problem",
    ),
    (
        "igemm.random_inputs: a problem name",
        lambda: ig.random_inputs("CI_PROBLEM", np.random.default_rng()),
        TypeError,
        "problem: expected a Problem",
    ),
    ("igemm.unsupported: step 13", lambda: ig.unsupported(13, H100), ValueError, "step must be one of"),
    ("igemm.fit_head_tail: one K", lambda: ig.fit_head_tail([64], [1.0]), ValueError, "two or more different K"),
    ("igemm.k_half: flat fit", lambda: ig.k_half(1.0, 0.0), ValueError, "per_k_ms .* finite positive"),
    (
        "igemm.banks.address: unknown layout",
        lambda: banks.address("swizzled", 0, 0),
        ValueError,
        "layout must be one of",
    ),
    (
        "igemm.banks.wavefronts: 3-byte accesses",
        lambda: banks.wavefronts([0] * 32, nbytes=3),
        ValueError,
        r"one of \(4, 8, 16\) bytes, got 3",
    ),
    pytest.param(
        "igemm.banks.measure: no GPU",
        lambda: banks.measure(),
        RuntimeError,
        "bank-conflict measurement needs a GPU",
        marks=NO_GPU,
    ),
    # ssim
    ("ssim.mean: empty map", lambda: ssim.mean(f32(1, 1, 0, 0)), ValueError, r"empty map of shape \(1, 1, 0, 0\)"),
    (
        "ssim.crop_valid: map smaller than the window",
        lambda: ssim.crop_valid(f32(1, 1, 5, 5)),
        ValueError,
        "at least 11x11",
    ),
    (
        "ssim.test_images: negative height",
        lambda: ssim.test_images((1, 1, -1, 11)),
        ValueError,
        r"shape\[2\] must be >= 1",
    ),
    ("ssim.work: negative channels", lambda: ssim.work((1, -1, 11, 11)), ValueError, r"shape\[1\] must be >= 1"),
    ("ssim.v2_ffma_total: zero-wide block", lambda: ssim.v2_ffma_total(10, 10, 0, 4), ValueError, "bx must be >= 1"),
    # probes
    (
        "probes.memory.pad: fractional padding",
        lambda: memory.pad("v0 local", f32(1, 1, 3, 3), f32(1, 1, 6, 6), 1, 1.5),
        ValueError,
        r"p \(padding\) must be an integer, got 1.5",
    ),
    (
        "probes.memory.padding_plan: fractional padding",
        lambda: memory.padding_plan("v0 local", 1, (1, 1, 3, 3), 0.5),
        ValueError,
        r"p \(padding\) must be an integer",
    ),
    ("probes.memory.pad: out overlaps x", pad_with_overlap, ValueError, "out must not overlap x"),
    (
        "probes.memory.run_chase: fractional warm",
        lambda: memory.run_chase(None, steps=1, warm=0.5),
        ValueError,
        "warm must be an integer",
    ),
    (
        "probes.memory.store_divergent: fractional mask",
        lambda: memory.store_divergent(xp.zeros(8, np.int32), 1.5),
        ValueError,
        "an integer 0 <= divergence < 32, got 1.5",
    ),
    ("probes.memory.bank_ways: no lanes", lambda: memory.bank_ways(1, lanes=0), ValueError, "lanes must be >= 1"),
    (
        "probes.reduction.block_sums: partial overlaps x",
        lambda: reduction.block_sums("tree 2", *overlapping(100, (100,), (2,)), block=64),
        ValueError,
        "partial must not overlap x",
    ),
    (
        "probes.reduction.reference: block 0",
        lambda: reduction.reference(np.ones(10), 0),
        ValueError,
        "block must be >= 1",
    ),
    (
        "probes.batchnorm.normalize: y overlaps x",
        lambda: batchnorm.normalize("v0 three passes", *overlapping(40, (4, 8), (4, 8), offset=1)),
        ValueError,
        "y must not overlap x",
    ),
    # machine
    (
        "machine.copy: short dst",
        lambda: machine_copy.copy(f32(3), f32(4), blocks=1),
        ValueError,
        "dst has 3 elements, src 4: a copy needs equal sizes",
    ),
    (
        "machine.copy: dtypes differ",
        lambda: machine_copy.copy(xp.zeros(4), f32(4), blocks=1),
        TypeError,
        "dst: expected dtype float32, got float64",
    ),
    (
        "machine.copy: dst overlaps src",
        lambda: machine_copy.copy(*overlapping(9, (8,), (8,), offset=1), blocks=1),
        ValueError,
        "dst must not overlap src",
    ),
    (
        "machine.copy: 2-D arrays",
        lambda: machine_copy.copy(f32(2, 2), f32(2, 2), blocks=1),
        ValueError,
        "src: expected 1 dimensions",
    ),
    ("machine.copy: no blocks", lambda: machine_copy.copy(f32(4), f32(4), blocks=0), ValueError, "blocks must be >= 1"),
    (
        "machine.copy: block too large",
        lambda: machine_copy.copy(f32(4), f32(4), blocks=1, threads=2048),
        ValueError,
        "block.x must be <= 1024",
    ),
    (
        "machine.copy: another kernel",
        lambda: machine_copy.copy(f32(4), f32(4), fma.fma_kernel(1), blocks=1),
        ValueError,
        "kernel must be copy_kernel or copy_kernel_x4",
    ),
    (
        "machine.memcpy_d2d: host arrays",
        lambda: machine_copy.memcpy_d2d(np.zeros(4), np.zeros(4)),
        TypeError,
        "dst: expected a CuPy array on the GPU, got ndarray",
    ),
    ("machine.fma_kernel: fractional unroll", lambda: fma.fma_kernel(2.5), ValueError, "unroll must be an integer"),
]

CHECKED = [
    (
        "igemm.best_step: a tuple",
        lambda: ig.best_step((256, 14, 14, 256, 512)),
        TypeError,
        "problem: expected a Problem",
    ),
    (
        "igemm.best_step: C = 3",
        lambda: ig.best_step(ig.FIRST_LAYER),
        ValueError,
        "C = 3 is not a multiple of 8.*pad the channels with zeros",
    ),
    ("check.positive_int: a string", lambda: check.positive_int("3", "n"), ValueError, "n must be an integer, got '3'"),
    ("check.compare: a list", lambda: check.compare([1.0], np.ones(1), atol=0), TypeError, "got list"),
    (
        "check.compare: shapes differ",
        lambda: check.compare(np.ones(2), np.ones(3), atol=0),
        ValueError,
        "does not match reference shape",
    ),
    ("check.require_array: a list", lambda: check.require_array([1.0], "x"), TypeError, "x: expected"),
    ("check.poison: strings", lambda: check.poison(np.array(["a"])), TypeError, "cannot poison an array of dtype str"),
    ("check.block_shape: zero", lambda: check.block_shape((0,)), ValueError, "block.x must be >= 1"),
    ("check.block_shape: four axes", lambda: check.block_shape((1, 1, 1, 1)), ValueError, "1 to 3 dimensions"),
    ("check.block_shape: a string", lambda: check.block_shape("32"), ValueError, "block.x must be an integer"),
    ("timing.rates: zero time", lambda: timing.rates(timing.Timing((0.0,))), ValueError, "above zero"),
    ("roofline.floor: negative bytes", lambda: roofline.floor(1, -1, gflops=1, gbps=1), ValueError, ">= 0"),
    ("show.source: no such file", lambda: show.source("machine/nope.py"), FileNotFoundError, "no kernel source"),
    ("show.source: no such line", lambda: show.source("machine/fma.py", start="zzz"), ValueError, "no line containing"),
    ("show.table: no rows", lambda: show.table([]), ValueError, "no rows"),
    ("device.resolve_profile: unknown", lambda: device.resolve_profile("fast"), ValueError, "'full' or 'ci'"),
    (
        "conv.common.to_layout: upper case",
        lambda: conv.to_layout(*tiny("nchw"), "NHWC"),
        ValueError,
        "layout must be one of",
    ),
    (
        "conv.common.run: float64",
        lambda: conv.run(s2_coalescing.STAGE, *(a.astype(np.float64) for a in tiny("nhwc"))),
        TypeError,
        "expected dtype float32",
    ),
    (
        "conv.cuda_stages.stage: SPLIT 0",
        lambda: cuda_stages.stage("SPLIT-K", dict(BM=128, BN=64, BKC=8, SPLIT=0)),
        ValueError,
        "positive integers",
    ),
    (
        "igemm.conv: step as a string",
        lambda: ig.conv("2", xp.zeros((1, 5, 6, 8), np.float16), xp.zeros((8, 3, 3, 8), np.float16)),
        ValueError,
        "step must be one of",
    ),
    (
        "igemm.conv: fractional pad",
        lambda: ig.conv(1, xp.zeros((1, 5, 6, 8), np.float16), xp.zeros((8, 3, 3, 8), np.float16), pad=1.5),
        ValueError,
        "pad must be an integer >= 0, got 1.5",
    ),
    ("igemm.conv: out is x", igemm_in_place, ValueError, "out must not overlap x"),
    ("igemm.gemm_problem: m not a multiple of 64", lambda: ig.gemm_problem(64, m=100), ValueError, "multiple of 64"),
    ("ssim.run: unknown version", lambda: ssim.run("V99", f32(*IMG), f32(*IMG)), ValueError, "unknown SSIM version"),
    ("ssim.run: float64", lambda: ssim.run("Naive", xp.zeros(IMG), f32(*IMG)), TypeError, "img1: expected dtype"),
    (
        "ssim.run: smaller than the window",
        lambda: ssim.run("Naive", f32(1, 1, 5, 5), f32(1, 1, 5, 5)),
        ValueError,
        "at least 11x11",
    ),
    (
        "ssim.run: out is img1",
        lambda: (lambda a: ssim.run("Naive", a, f32(*IMG), out=a))(f32(*IMG)),
        ValueError,
        "out must not overlap img1",
    ),
    (
        "ssim.run: zero-wide tile",
        lambda: ssim.run("Naive", f32(*IMG), f32(*IMG), tile={"bx": 0}),
        ValueError,
        "tile bx must be >= 1",
    ),
    ("ssim.verify: one shape, not a list", lambda: ssim.verify("Naive", IMG), TypeError, "list of .* shapes"),
    ("ssim.test_images: unknown kind", lambda: ssim.test_images(IMG, kind="noise"), ValueError, "kind must be"),
    (
        "ssim.backward.run: wrong shape",
        lambda: backward.run(*(f32(*IMG) for _ in range(5)), f32(1, 1, 11, 12)),
        ValueError,
        "d_s12: expected shape",
    ),
    (
        "probes.memory.padding_plan: unknown version",
        lambda: memory.padding_plan("v9", 1, (1, 1, 3, 3), 1),
        ValueError,
        "version must be one of",
    ),
    ("probes.memory.chain_order: no slots", lambda: memory.chain_order(0, "random"), ValueError, "slots must be >= 1"),
    (
        "probes.reduction.block_sums: unknown variant",
        lambda: reduction.block_sums("tree", f32(100), f32(2), block=64),
        ValueError,
        "variant must be one of",
    ),
    (
        "probes.reduction.block_sums: fractional block",
        lambda: reduction.block_sums("tree 2", f32(100), f32(2), block=2.5),
        ValueError,
        "block must be an integer",
    ),
    ("probes.nchw.plan: three axes", lambda: nchw.plan((1, 2, 3), 64), ValueError, r"shape must be \(N, C, H, W\)"),
    (
        "probes.nchw.generate: int64 buffer",
        lambda: nchw.generate(xp.zeros(6, np.int64), (1, 1, 2, 3)),
        TypeError,
        "buf: expected dtype int32",
    ),
    (
        "probes.batchnorm.plan: 3 threads per column",
        lambda: batchnorm.plan("v2 registers", 128, 10, 3),
        ValueError,
        "threads per column must be one of",
    ),
    (
        "probes.compute.launch_grid: empty block",
        lambda: compute.launch_grid((0,), 10, 10),
        ValueError,
        "block.x must be >= 1",
    ),
    (
        "probes.compute.check_fma: unknown variant",
        lambda: compute.check_fma("v9"),
        ValueError,
        "variant must be one of",
    ),
]


# The second audit: cases that were silent (a wrong number) or obscure (an error from NumPy or deep
# inside a kernel thread), each now refused with the constraint named.
IG_TINY = ig.Problem(1, 5, 6, 8, 8)
SECOND_AUDIT = [
    (
        "ssim.run: images far outside [0, 1]",
        lambda: ssim.run("V2", *(xp.asarray(1000 + 0.01 * a) for a in ssim.test_images((1, 1, 11, 11), seed=0))),
        ValueError,
        r"img1 has 121 pixels outside \[0, 1\], the data range SSIM's constants C1 and C2 assume",
    ),
    (
        "conv.s9_autotune.candidates: sms=True",
        lambda: s9_autotune.candidates(conv.PROBLEMS["tiny"], sms=True),
        ValueError,
        "sms must be an integer, got True",
    ),
    (
        "conv.Problem: a negative batch",
        lambda: conv.Problem("x", -1, 3, 5, 6, 7),
        ValueError,
        "Problem 'x': n must be >= 1, got -1",
    ),
    ("igemm.k_half: NaN head", lambda: ig.k_half(float("nan"), 1.0), ValueError, "head_ms .* must be a finite number"),
    (
        "timing.Timing: a negative time",
        lambda: timing.Timing((-1.0, 2.0, 3.0)),
        ValueError,
        "times_ms: expected finite times above zero",
    ),
    ("timing.Timing: zero times", lambda: timing.Timing((0.0, 0.0)), ValueError, "finite times above zero"),
    ("timing.Timing: a string time", lambda: timing.Timing(("1",)), TypeError, "expected real numbers of milliseconds"),
    ("timing.Timing: one number", lambda: timing.Timing(5.0), TypeError, "times_ms: expected a sequence of times"),
    (
        "machine.copy_kernel: int32 dst, float32 src",
        lambda: machine_copy.copy_kernel[2, 32](xp.zeros(64, np.int32), xp.ones(64, np.float32)),
        TypeError,
        "copy_kernel copies without converting, so both need one dtype; got dst int32 and src float32",
    ),
    (
        "conv.check_stage: a negative height",
        lambda: conv.check_stage(s1_naive.STAGE, conv.Problem("odd", 1, 3, 5, -4, 7)),
        ValueError,
        "Problem 'odd': h must be >= 1, got -4",
    ),
    (
        "conv.check_stage: a fractional batch",
        lambda: conv.check_stage(s1_naive.STAGE, conv.Problem("odd", 1.5, 3, 5, 4, 7)),
        ValueError,
        "Problem 'odd': n must be an integer, got 1.5",
    ),
    (
        "conv.to_layout: a 3-D input",
        lambda: conv.to_layout(np.zeros((3, 7, 7), np.float32), np.zeros((5, 3, 3, 3), np.float32), "nhwc"),
        ValueError,
        r"x_nchw: expected a 4-D array \(N, C, H, W\), got shape \(3, 7, 7\)",
    ),
    (
        "conv.launcher: no output",
        lambda: conv.launcher(s1_naive.STAGE, *tiny("nchw"), None)(),
        TypeError,
        "y: expected the output array the launches write",
    ),
    (
        "igemm.random_inputs: no rng",
        lambda: ig.random_inputs(IG_TINY, None),
        TypeError,
        "rng: expected a NumPy Generator",
    ),
    (
        "igemm.reference: negative padding",
        lambda: ig.reference(*ig.random_inputs(IG_TINY, np.random.default_rng(0)), pad=-1),
        ValueError,
        "pad must be >= 0, got -1",
    ),
    (
        "probes.memory.pad_reference: negative padding",
        lambda: memory.pad_reference(np.zeros((1, 1, 3, 3)), -1),
        ValueError,
        r"p \(padding\) must be >= 0, got -1",
    ),
    (
        "ssim.test_images: a negative seed",
        lambda: ssim.test_images((1, 1, 11, 11), seed=-1),
        ValueError,
        "seed .* must be >= 0, got -1",
    ),
    ("ssim.mean: a list", lambda: ssim.mean([[1.0]]), TypeError, "ssim_map: expected a NumPy or CuPy array"),
    (
        "results.record: one row, not a list",
        lambda: results.record("machine", {"kernel": "k", "problem": "p", "metric": "m", "value": 1.0, "unit": "u"}),
        TypeError,
        r"rows: expected a list of rows, got one row \(a dict\)",
    ),
    (
        "results.record: an env without gpu_slug",
        lambda: results.record(
            "machine",
            [{"kernel": "k", "problem": "p", "metric": "m", "value": 1.0, "unit": "u"}],
            env=dict.fromkeys(results.ENV_COLUMNS, ""),
        ),
        ValueError,
        r"env: lacks \['gpu_slug'\]",
    ),
    (
        "results.measured_or_stored: kernels=None",
        lambda: results.measured_or_stored("machine", list, kernels=None),
        TypeError,
        "kernels: expected a kernel's name or a tuple of names, got None",
    ),
]


def _params(table):
    return [case if hasattr(case, "values") else pytest.param(*case) for case in table]


def _ids(table):
    return [(case.values if hasattr(case, "values") else case)[0] for case in table]


@pytest.mark.parametrize("name, call, error, match", _params(FIXED), ids=_ids(FIXED))
def test_fixed_case_names_the_constraint(name, call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("name, call, error, match", _params(SECOND_AUDIT), ids=_ids(SECOND_AUDIT))
def test_second_audit_case_names_the_constraint(name, call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("name, call, error, match", _params(CHECKED), ids=_ids(CHECKED))
def test_checked_case_still_names_the_constraint(name, call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_host_buffer_is_refused_before_the_pointer_chase_on_a_gpu(monkeypatch):
    monkeypatch.setattr(device, "MODE", device.GPU)
    with pytest.raises(TypeError, match=r"buf \(from build_chain\): expected a device array"):
        memory.run_chase(np.zeros(8, np.uint64), steps=1)


@pytest.mark.parametrize("kernel", [machine_copy.copy_kernel, machine_copy.copy_kernel_x4])
def test_copy_kernels_never_write_past_a_short_dst(kernel, rng):
    """Launched directly (as chapter 01 does), a kernel stops at the shorter array."""
    src = xp.asarray(rng.random(40, dtype=np.float32))
    dst = check.poison(xp.empty(33, np.float32))
    kernel[1, 8](dst, src)
    check.assert_close(dst, check.to_host(src)[:33], atol=0.0)


@pytest.mark.parametrize("kernel", [machine_copy.copy_kernel, machine_copy.copy_kernel_x4])
def test_copy_launcher_copies_every_element(kernel, rng):
    src = xp.asarray(rng.random(97, dtype=np.float32))
    dst = check.poison(xp.empty_like(src))
    machine_copy.copy(dst, src, kernel, blocks=2, threads=16)
    check.assert_close(dst, src, atol=0.0)


@NO_GPU
@pytest.mark.parametrize(
    "main",
    [lambda: ig_memcheck.main([2]), lambda: bench.main(["V1"]), ig_profile.main, banks.main, ig_shapes.main],
    ids=["igemm.memcheck", "ssim.bench", "igemm.profile", "igemm.banks", "igemm.shapes"],
)
def test_entry_points_without_a_gpu_say_so_and_fail(main, capsys):
    assert main() == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out


@NO_GPU
@pytest.mark.parametrize("module", ["kernels.igemm.memcheck", "kernels.ssim.bench", "kernels.igemm.shapes"])
def test_modules_run_without_a_gpu_exit_nonzero_with_one_line(module):
    proc = subprocess.run([sys.executable, "-m", module], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip().count("\n") == 0 and "needs a CUDA GPU" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ig_memcheck.main([13]), r"steps must be among \[1, 2"),
        (lambda: bench.main(["V99"]), "unknown SSIM version"),
    ],
    ids=["igemm.memcheck: step 13", "ssim.bench: unknown version"],
)
def test_entry_points_refuse_unknown_arguments_first(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_an_in_process_check_whose_launch_calls_sys_exit_reports_it(capsys):
    """The second audit's last case: the notebook's own check, not a batch, and a launch that calls sys.exit."""
    from kernels.harness import exercise

    report = exercise.check("machine-ex-saxpy", lambda out, x, y, a: sys.exit(0))
    assert not report.ok and "`launch` called sys.exit(0): a launch must return" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_copy_kernels_take_any_one_dtype(dtype, rng):
    """float64 too: a dtype compares equal to None (np.dtype(None) is float64), so the check must not use ==."""
    src = xp.asarray((rng.random(40) * 100).astype(dtype))
    dst = check.poison(xp.empty_like(src))
    machine_copy.copy_kernel[1, 8](dst, src)
    check.assert_close(dst, check.to_host(src), atol=0.0)
