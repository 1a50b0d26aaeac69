"""NCHW index generation (source 003, section 8), launched from CUDA C++ (nchw.cu) because the
source's problem takes microseconds: a Numba launch's Python dispatch would be most of the time.
"""

from __future__ import annotations

import math

import numpy as np

from ..harness import check, timing
from ..harness.check import positive_int
from . import common
from .common import row


def plan(shape, block: int = 256) -> tuple:
    """Grid and block for (N, C, H, W), or a ValueError naming the broken constraint."""
    if len(shape) != 4:
        raise ValueError(f"shape must be (N, C, H, W), got {shape}")
    n, c, h, w = (positive_int(v, name) for v, name in zip(shape, "NCHW", strict=True))
    check.block_shape((block,))
    if n * c * h * w >= 2**31:
        raise ValueError(f"N*C*H*W = {n * c * h * w} overflows the kernel's int32 offsets (must be < 2^31)")
    if n > check.MAX_GRID_DIM[1]:
        raise ValueError(f"N = {n} exceeds the grid's y limit {check.MAX_GRID_DIM[1]}")
    return (math.ceil(h * w / block), n), (block,)


def generate(buf, shape, block: int = 256):
    """Fill buf (int32, N*H*W) with the NCHW offsets of channel 0."""
    grid, blk = plan(shape, block)
    n, c, h, w = shape
    check.require_array(buf, "buf", dtype=np.int32, shape=(n * h * w,))
    common.require_gpu("the NCHW index kernel")
    common.load("nchw.cu", "nhw_index")(grid, blk, (buf, np.int32(h), np.int32(w), np.int32(c)))


def reference(shape) -> np.ndarray:
    n, c, h, w = shape
    return (np.arange(n)[:, None] * c * h * w + np.arange(h * w)[None, :]).ravel()


def check_nchw(shape=(3, 5, 7, 9), block: int = 64) -> check.CheckResult:
    """The kernel on a poisoned buffer against the NumPy offsets (GPU)."""
    plan(shape, block)
    common.require_gpu("checking the NCHW index kernel")
    import cupy

    n, c, h, w = shape
    buf = check.poison(cupy.empty(n * h * w, dtype=cupy.int32))
    generate(buf, shape, block)
    return check.compare(buf, reference(shape), atol=0.0, name=f"NHW offsets {shape}")


def run_nchw(shape=(1024, 64, 56, 56), *, block: int = 256, repeat: int = 20) -> list[dict]:
    """GB/s of the index stream, and the same with an empty kernel's time subtracted (launch cost)."""
    plan(shape, block)
    n, c, h, w = shape
    nbytes = common.working_set(4 * n * h * w)
    common.require_gpu("the NCHW index probe")
    import cupy

    buf = cupy.empty(n * h * w, dtype=cupy.int32)
    t = timing.benchmark(lambda: generate(buf, shape, block), warmup=3, repeat=repeat)
    empty = common.load("launch.cu", "null_kernel")
    t0 = timing.benchmark(lambda: empty((1,), (1,), (buf,)), warmup=3, repeat=repeat)
    problem = f"N*H*W = {n}x{h}x{w}"
    rows = [
        row("nchw index", problem, "time", t.median_ms * 1e3, "us"),
        row("nchw index", problem, "bandwidth", nbytes / (t.median_ms * 1e-3) / 1e9, "GB/s"),
        row("empty kernel", "1 x 1 thread", "time", t0.median_ms * 1e3, "us"),
    ]
    if t.median_ms > t0.median_ms:
        rows.append(
            row(
                "nchw index",
                problem,
                "bandwidth without launch",
                nbytes / ((t.median_ms - t0.median_ms) * 1e-3) / 1e9,
                "GB/s",
            )
        )
    return rows
