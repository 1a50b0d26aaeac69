"""Is a one-int-per-thread stream bound by block launch? The store-only stream buf[x] = x of n int32,
written three ways, and the same grid with no work:

- v0 "one per thread" (store_v0_one.cu): ceil(n / 256) blocks of 256 threads, one store each -- the
  shape of the memory chapter's divergence, padding, reduction and NCHW kernels;
- v1 "grid-stride" (store_v1_grid_stride.cu): a loop over a grid that just fills the GPU (SMs x the
  blocks of 256 one SM holds), each block started once;
- v2 "unrolled" (store_v2_unrolled.cu): ``elems`` stores per thread, ceil(n / (256 elems)) blocks;
- "empty blocks": launch.cu's empty kernel on v0's grid, the cost of starting those blocks alone, and on
  one block, the launch's fixed cost (``block_cost`` draws the line through the two).

All three write the same bytes to the same addresses; only the number of blocks started differs. The
prediction: if block launch bounds v0, the empty grid takes about as long as v0 (both near
``launch_floor_us`` from the compute chapter's launch rate), and v1 and v2 run well above v0, near the
copy rate, with v2 rising as ``elems`` grows until it meets v1. If HBM's write path bounds v0 instead,
the empty grid takes a small part of v0's time and all three stores run at about the same rate.
"""

from __future__ import annotations

import math

import numpy as np

from ..harness import device, timing
from ..harness.check import CheckResult, compare, finite_number, poison, positive_int, require_array
from . import common
from .common import row

BLOCK = 256
FILES = {
    "one per thread": "store_v0_one.cu",
    "grid-stride": "store_v1_grid_stride.cu",
    "unrolled": "store_v2_unrolled.cu",
}
ELEMS = (2, 4, 8, 16)  # the ints per thread that ``measure`` and ``check`` try for v2
MAX_ELEMS = 64  # a fully unrolled loop of stores; more would only lengthen the kernel
MAX_N = 2**30  # int32 indices: an index plus one grid-stride step (or one unrolled block) stays below 2^31
CHECK_BLOCKS = 3  # a grid-stride grid small enough that every odd n takes several trips round the loop


def full_grid(props: dict | None = None) -> int:
    """Blocks of BLOCK threads that fill the GPU: SMs x the blocks one SM holds by its thread limit
    (``props``: device.properties(); default this GPU's, or the reference GPU's without one)."""
    props = props or device.target_properties()
    sms = positive_int(props["sms"], "sms")
    per_sm = positive_int(props["max_threads_per_sm"], "max_threads_per_sm") // BLOCK
    if per_sm < 1:
        raise ValueError(f"max_threads_per_sm must be >= {BLOCK} (one block), got {props['max_threads_per_sm']}")
    return sms * per_sm


def plan(variant: str, n: int, *, elems: int = 8, blocks: int | None = None) -> int:
    """The grid (blocks of BLOCK threads) of one variant for ``n`` ints, or a ValueError naming the
    broken constraint. ``elems`` is v2's ints per thread; ``blocks`` v1's grid (default ``full_grid()``)."""
    if variant not in FILES:
        raise ValueError(f"variant must be one of {sorted(FILES)}, got {variant!r}")
    n = positive_int(n, "n", maximum=MAX_N)
    elems = positive_int(elems, "elems", maximum=MAX_ELEMS)
    if blocks is not None:
        blocks = positive_int(blocks, "blocks", maximum=MAX_N // BLOCK)  # keeps x + stride below 2^31
    if variant == "one per thread":
        return math.ceil(n / BLOCK)
    if variant == "unrolled":
        return math.ceil(n / (BLOCK * elems))
    return blocks or full_grid()


def launch_floor_us(n: int, threads_per_cycle: float, clock_mhz: float) -> float:
    """Microseconds to start v0's grid, ceil(n / BLOCK) blocks of BLOCK threads, at the compute chapter's
    launch rate (``threads_per_cycle``: the empty kernel's threads started per SM-clock cycle, whole
    GPU, for blocks of BLOCK): v0's time if block launch bounds it."""
    blocks = plan("one per thread", n)
    rate = finite_number(threads_per_cycle, "threads_per_cycle", positive=True)
    mhz = finite_number(clock_mhz, "clock_mhz", positive=True)
    return blocks * BLOCK / rate / mhz


def block_cost(rows) -> tuple[float, float]:
    """(µs of one launch of one empty block, ns per further block) from the "empty blocks" rows of
    ``measure`` (the newest run among stored rows): the line through its two empty grids."""
    empty = [r for r in rows if r["kernel"] == "empty blocks" and r["metric"] == "time"]
    if not empty:
        raise ValueError("rows: no 'empty blocks' time rows (from launch_bound.measure)")
    date = max(r.get("date", "") for r in empty)
    times = {int(r["problem"].split(" x ")[0]): float(r["value"]) for r in empty if r.get("date", "") == date}
    if 1 not in times or len(times) != 2:
        raise ValueError(f"rows: expected the empty grid of 1 block and one larger grid, got grids {sorted(times)}")
    grid = max(times)
    return times[1], (times[grid] - times[1]) / (grid - 1) * 1e3


def store(variant: str, buf, *, elems: int = 8, blocks: int | None = None):
    """Write buf[x] = x (int32, one dimension) with one variant; see ``plan`` for the options."""
    buf = require_array(buf, "buf", dtype=np.int32, ndim=1)
    n = buf.shape[0]
    grid = plan(variant, n, elems=elems, blocks=blocks)
    common.require_gpu("the launch-bound store stream")
    defines = {"ELEMS": elems} if variant == "unrolled" else None
    common.load(FILES[variant], "store", defines)((grid,), (BLOCK,), (buf, np.int32(n)))


def cases(elems=ELEMS) -> list[tuple[str, dict]]:
    """(variant, options for ``store``) of every case ``check`` runs: v0, v1 on the full grid and on
    CHECK_BLOCKS blocks, v2 at each of ``elems``."""
    if isinstance(elems, (str, bytes)) or not hasattr(elems, "__iter__"):
        raise TypeError(f"elems: expected a sequence of ints per thread, got {elems!r}")
    elems = [positive_int(e, "elems", maximum=MAX_ELEMS) for e in elems]
    return [
        ("one per thread", {}),
        ("grid-stride", {}),
        ("grid-stride", {"blocks": CHECK_BLOCKS}),
        *(("unrolled", {"elems": e}) for e in elems),
    ]


def describe(variant: str, options: dict) -> str:
    """A case's name: the variant and the option it was given."""
    if "elems" in options:
        return f"{variant}, {options['elems']} ints per thread"
    if "blocks" in options:
        return f"{variant}, {options['blocks']} blocks"
    return variant


def check_store(variant: str, n: int = 4099, **options) -> CheckResult:
    """One variant on a poisoned buffer of ``n`` ints against NumPy's arange (GPU)."""
    plan(variant, n, **options)
    common.require_gpu("checking the launch-bound store stream")
    import cupy

    buf = poison(cupy.empty(n, dtype=cupy.int32))
    store(variant, buf, **options)
    return compare(buf, np.arange(n), atol=0.0, name=f"{describe(variant, options)}, n = {n}")


def check(n: int = 4099, elems=ELEMS) -> list[CheckResult]:
    """Every case of ``cases(elems)`` at ``n`` ints (GPU); pick n off the multiples of 256, of
    256 x elems and of the grids."""
    positive_int(n, "n", maximum=MAX_N)
    return [check_store(variant, n, **options) for variant, options in cases(elems)]


def measure(n: int = 2**26, *, elems=ELEMS, repeat: int = 20) -> list[dict]:
    """Time (µs) and GB/s of the n-int store stream for each variant, and the time of v0's grid of
    empty blocks and of one empty block (the launch's fixed cost); GB/s counts the 4n bytes stored."""
    plans = [(variant, options, plan(variant, n, **options)) for variant, options in cases(elems)]
    plans = [p for p in plans if p[1].get("blocks") is None]  # the small grid is for the check only
    positive_int(repeat, "repeat")
    nbytes = common.working_set(4 * n)
    common.require_gpu("the launch-bound probe")
    import cupy

    buf = cupy.empty(n, dtype=cupy.int32)
    rows = []
    for variant, options, grid in plans:
        t = timing.benchmark(lambda v=variant, o=options: store(v, buf, **o), warmup=2, repeat=repeat)
        kernel = f"store {describe(variant, options)}"
        problem = f"{n} ints, {grid} blocks of {BLOCK}"
        rows += [
            row(kernel, problem, "time", t.median_ms * 1e3, "us"),
            row(kernel, problem, "bandwidth", nbytes / (t.median_ms * 1e-3) / 1e9, "GB/s"),
        ]
    empty = common.load("launch.cu", "null_kernel")
    for grid in (plan("one per thread", n), 1):
        t = timing.benchmark(lambda g=grid: empty((g,), (BLOCK,), (buf,)), warmup=2, repeat=repeat)
        rows.append(row("empty blocks", f"{grid} x {BLOCK} threads", "time", t.median_ms * 1e3, "us"))
    return rows
