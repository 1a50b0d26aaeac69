"""BatchNorm variants (source 003, section 16): normalize each pixel's column of ``batch`` values
(x is batch x pixels, row-major) to zero mean and unit variance over the batch -- the statistics
of one feature across a mini-batch, as the source computes them (no scale and shift).

v0 reads every value three times, v1 twice, v2 once with the column held in registers by TPC
threads; TPC sets the registers per thread, the source's 2-vs-4-threads experiment.
"""

from __future__ import annotations

import math

import numpy as np

from ..harness import check, timing
from ..harness.check import positive_int
from . import common
from .common import row

VERSIONS = {
    "v0 three passes": "batchnorm_v0_three_pass.cu",
    "v1 two passes": "batchnorm_v1_two_pass.cu",
    "v2 registers": "batchnorm_v2_registers.cu",
}
EPS = 1e-5
BLOCK = 256  # whole warps: v2's shuffles need every lane of a warp
THREADS_PER_COLUMN = (1, 2, 4, 8, 16, 32)


def plan(version: str, batch: int, pixels: int, tpc: int = 1) -> tuple:
    """(grid, block, defines) for one launch, or a ValueError naming the broken constraint."""
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {sorted(VERSIONS)}, got {version!r}")
    batch, pixels = positive_int(batch, "batch"), positive_int(pixels, "pixels")
    if batch * pixels >= 2**31:
        raise ValueError(f"batch x pixels = {batch * pixels} must be < 2^31 (int32 indices)")
    if version != "v2 registers":
        return (math.ceil(pixels / BLOCK),), (BLOCK,), None
    if tpc not in THREADS_PER_COLUMN:
        raise ValueError(
            f"threads per column must be one of {THREADS_PER_COLUMN} (a power of two within a warp), got {tpc}"
        )
    if batch % tpc:
        raise ValueError(f"batch = {batch} must be a multiple of threads per column = {tpc}")
    if batch // tpc > 256:
        raise ValueError(
            f"batch / threads per column = {batch // tpc} values per thread; at most 256 "
            "(the unrolled kernel would take minutes to compile)"
        )
    return (math.ceil(pixels * tpc / BLOCK),), (BLOCK,), {"BATCH": batch, "TPC": tpc}


def reference(x: np.ndarray) -> np.ndarray:
    """float64 BatchNorm over axis 0 (the batch), biased variance, epsilon EPS."""
    x = np.asarray(x, dtype=np.float64)
    return (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + EPS)


def normalize(version: str, x, y, tpc: int = 1):
    """Launch one version on x (batch x pixels float32) into y (same shape)."""
    x = check.require_array(x, "x", dtype=np.float32, ndim=2)
    check.require_array(y, "y", dtype=np.float32, shape=x.shape)
    check.require_output(y, "y", {"x": x})  # a shifted y would overwrite columns other threads still read
    batch, pixels = x.shape
    grid, block, defines = plan(version, batch, pixels, tpc)
    common.require_gpu("the BatchNorm kernels")
    common.load(VERSIONS[version], "batchnorm", defines)(grid, block, (x, y, np.int32(pixels), np.int32(batch)))


def resources(arch: str | None = None, batch: int = 128) -> list[dict]:
    """Registers and spills per version (v2 per threads-per-column), from ptxas (compile only;
    ``arch`` defaults to ``device.target_arch()``)."""
    out = []
    for version, path in VERSIONS.items():
        for tpc in THREADS_PER_COLUMN if version == "v2 registers" else (1,):
            defines = plan(version, batch, 1024, tpc)[2]
            res = common.build(path, arch, defines).resources[0]
            out.append(
                {
                    "version": version,
                    "threads per column": tpc,
                    "values per thread": batch // tpc,
                    "registers": res.registers,
                    "spill stores (B)": res.spill_stores,
                }
            )
    return out


def check_batchnorm(version: str, tpc: int = 1, *, batch: int = 128, pixels: int = 333, seed: int | None = None):
    """One version on fresh random input (offset mean) with poisoned output, against float64 (GPU)."""
    plan(version, batch, pixels, tpc)
    common.require_gpu("checking the BatchNorm kernels")
    import cupy

    host = np.random.default_rng(seed).standard_normal((batch, pixels), dtype=np.float32) * 2 + 1
    y = check.poison(cupy.empty((batch, pixels), dtype=cupy.float32))
    normalize(version, cupy.asarray(host), y, tpc)
    # float32 sums of `batch` values, and v1's E[x^2] - mean^2 cancellation (mean 1, spread 2)
    return check.compare(y, reference(host), atol=2e-4 * math.log2(batch), name=f"BatchNorm {version}, TPC {tpc}")


def run_batchnorm(cases, *, batch: int = 128, pixels: int = 64 * 56 * 56, repeat: int = 10) -> list[dict]:
    """Gvalues/s (batch x pixels values normalized per second) and GB/s of compulsory traffic (one
    4-byte read and one 4-byte write per value) per case (version, threads per column)."""
    for version, tpc in cases:
        plan(version, batch, pixels, tpc)
    common.working_set(4 * batch * pixels, copies=2)
    common.require_gpu("the BatchNorm probe")
    import cupy

    x = cupy.random.standard_normal((batch, pixels), dtype=cupy.float32)
    y = cupy.empty_like(x)
    rows = []
    for version, tpc in cases:
        t = timing.benchmark(lambda version=version, tpc=tpc: normalize(version, x, y, tpc), warmup=2, repeat=repeat)
        problem = f"{batch} x {pixels}, TPC {tpc}"
        rows += [
            row(
                f"batchnorm {version}",
                problem,
                "throughput",
                batch * pixels / (t.median_ms * 1e-3) / 1e9,
                "Gvalues/s",
            ),
            row(
                f"batchnorm {version}",
                problem,
                "bandwidth",
                8 * batch * pixels / (t.median_ms * 1e-3) / 1e9,
                "GB/s",
            ),
        ]
    return rows
