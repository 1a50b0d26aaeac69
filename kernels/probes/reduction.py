"""Block sums in shared memory (source 003, section 14): a tree that reads 2, 4 or 8 values per
step, and a version with warp shuffles.

Each block sums ``block`` consecutive elements into ``partial[block index]``. A tree step with
fan-in F cuts the active threads by F and costs one barrier, so F = 4 needs half the steps (and
barriers, and dependent shared-memory round trips) of F = 2. The shuffle version keeps the first
five levels in registers (no shared memory, no barrier) and uses shared memory once per warp.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ..harness import check, device, timing
from ..harness.check import positive_int
from . import common
from .common import row

FAN_INS = (2, 4, 8)
WARP = 32
FULL_MASK = 0xFFFFFFFF


@lru_cache(maxsize=None)
def tree_sum(fan_in: int, block: int):
    """The tree kernel for one fan-in and block size (both compile-time constants)."""
    positive_int(block, "block", maximum=check.MAX_THREADS_PER_BLOCK)
    positive_int(fan_in, "fan_in", maximum=block)
    if fan_in < 2:
        raise ValueError(f"fan_in must be >= 2, got {fan_in}")

    @cuda.jit
    def kernel(x, partial):
        buf = cuda.shared.array(block, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * block + t
        buf[t] = x[i] if i < x.size else float32(0)
        cuda.syncthreads()
        active = block
        while active > 1:
            step = (active + fan_in - 1) // fan_in
            if t < step:  # reads only indices >= step, which no thread writes in this step
                acc = buf[t]
                for k in range(1, fan_in):
                    j = t + k * step
                    if j < active:
                        acc += buf[j]
                buf[t] = acc
            cuda.syncthreads()
            active = step
        if t == 0:
            partial[cuda.blockIdx.x] = buf[0]

    return kernel


@lru_cache(maxsize=None)
def shuffle_sum(block: int):
    """Warp shuffles inside each warp, then the first warp sums the per-warp results."""
    positive_int(block, "block", maximum=check.MAX_THREADS_PER_BLOCK)
    if block % WARP:
        raise ValueError(f"the shuffle sum needs whole warps: block must be a multiple of {WARP}, got {block}")
    warps = block // WARP

    @cuda.jit
    def kernel(x, partial):
        sums = cuda.shared.array(WARP, float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * block + t
        v = x[i] if i < x.size else float32(0)
        offset = WARP // 2
        while offset > 0:
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if t % WARP == 0:
            sums[t // WARP] = v
        cuda.syncthreads()
        if t < WARP:
            v = sums[t] if t < warps else float32(0)
            offset = WARP // 2
            while offset > 0:
                v += cuda.shfl_down_sync(FULL_MASK, v, offset)
                offset //= 2
            if t == 0:
                partial[cuda.blockIdx.x] = v

    return kernel


def variants() -> list[str]:
    return [f"tree {f}" for f in FAN_INS] + ["shuffle"]


def kernel_for(variant: str, block: int):
    """The kernel of ``variant`` for blocks of ``block`` threads (both checked)."""
    if variant == "shuffle":
        kernel = shuffle_sum(block)
        if not device.on_gpu():
            raise RuntimeError("the shuffle variant needs a GPU: the simulator has no warp shuffles")
        return kernel
    if variant.startswith("tree ") and variant[5:].isdigit():
        return tree_sum(int(variant[5:]), block)
    raise ValueError(f"variant must be one of {variants()}, got {variant!r}")


def block_sums(variant: str, x, partial, block: int = 256):
    """Sum each run of ``block`` elements of x (float32, 1D) into partial (ceil(n / block) elements)."""
    kernel = kernel_for(variant, block)
    check.require_array(x, "x", dtype=np.float32, ndim=1)
    blocks = math.ceil(x.shape[0] / block)
    check.require_array(partial, "partial", dtype=np.float32, shape=(blocks,))
    check.require_output(partial, "partial", {"x": x})
    kernel[blocks, block](x, partial)


def reference(x: np.ndarray, block: int) -> np.ndarray:
    """float64 sum of each run of ``block`` elements."""
    positive_int(block, "block")
    x = np.asarray(x, dtype=np.float64)
    return np.add.reduceat(x, np.arange(0, x.size, block))


def tolerance(block: int) -> float:
    """float32 rounding of a sum of ``block`` values in [0, 1): about log2(block) roundings of <= block."""
    return block * math.log2(max(block, 2)) * 2.0**-23


def check_block_sums(
    variant: str, *, n: int = 64 * 5 + 3, block: int = 64, seed: int | None = None
) -> check.CheckResult:
    """One variant on fresh random input (n not a multiple of block: a partial last block) with poisoned
    output, against float64 (the shuffle variant needs a GPU: the simulator has no warp shuffles)."""
    x = np.random.default_rng(seed).random(positive_int(n, "n"), dtype=np.float32)
    kernel_for(variant, block)
    xp = device.xp()
    partial = check.poison(xp.empty(math.ceil(n / block), dtype=np.float32))
    block_sums(variant, xp.asarray(x), partial, block)
    return check.compare(partial, reference(x, block), atol=tolerance(block), name=f"block sums, {variant}")


def run_reduction(variant_list, *, n: int = 2**26, block: int = 256, repeat: int = 20) -> list[dict]:
    """GB/s and time of each variant summing n float32 from DRAM (256 MiB by default: long enough
    that Numba's Python-side launch cost hides behind the previous launch)."""
    for v in variant_list:
        kernel_for(v, block)
    n = common.working_set(positive_int(n, "n") * 4) // 4
    common.require_gpu("the reduction probe")
    import cupy

    x = cupy.random.random(n, dtype=cupy.float32)
    partial = cupy.empty(math.ceil(n / block), dtype=cupy.float32)
    rows = []
    for v in variant_list:
        t = timing.benchmark(lambda v=v: block_sums(v, x, partial, block), warmup=3, repeat=repeat)
        problem = f"{n} floats, block {block}"
        rows += [
            row(f"reduce {v}", problem, "time", t.median_ms, "ms"),
            row(f"reduce {v}", problem, "bandwidth", 4 * n / (t.median_ms * 1e-3) / 1e9, "GB/s"),
        ]
    return rows
