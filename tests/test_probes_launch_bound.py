"""The launch-bound probe (kernels/probes/launch_bound.py): its three store kernels compile without spills
and leave the full grid resident, each variant's grid writes every index once (the kernels' index
arithmetic emulated in NumPy), bad arguments fail before launch with the argument named, and (GPU) every
variant writes arange(n) over a poisoned buffer at odd sizes."""

import math

import numpy as np
import pytest

from gpus import A100, H100, RTX_4090, T4
from kernels.harness import device
from kernels.probes import common, compute, memcheck
from kernels.probes import launch_bound as lb

cpu_only = pytest.mark.skipif(device.on_gpu(), reason="checks the CPU path")
BUILDS = [(name, None) for name in lb.FILES.values()] + [(lb.FILES["unrolled"], {"ELEMS": e}) for e in lb.ELEMS]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name, defines", BUILDS)
def test_stores_compile_without_spills_and_the_full_grid_stays_resident(name, defines, arch):
    (res,) = common.build(name, arch, defines).resources
    assert res.kernel == "store" and res.spill_stores == res.spill_loads == res.stack_bytes == 0
    # full_grid() counts blocks by the thread limit: registers must not cut the blocks an SM holds
    per_sm = lb.full_grid(H100) // H100["sms"] * lb.BLOCK
    assert compute.warps_per_sm(res.registers) * H100["warp_size"] >= per_sm


@pytest.mark.parametrize("props", [H100, A100, RTX_4090, T4], ids=lambda p: p["name"])
def test_full_grid_fills_every_sm_to_its_thread_limit(props):
    blocks = lb.full_grid(props)
    assert blocks % props["sms"] == 0
    per_sm = blocks // props["sms"]
    assert per_sm * lb.BLOCK <= props["max_threads_per_sm"] < (per_sm + 1) * lb.BLOCK


def test_full_grid_refuses_an_sm_smaller_than_a_block():
    with pytest.raises(ValueError, match="max_threads_per_sm must be >= 256"):
        lb.full_grid({"sms": 4, "max_threads_per_sm": 128})


def written(variant, n, grid, elems=1):
    """The indices the kernel of ``variant`` stores (x < n), in NumPy: the .cu files' index arithmetic."""
    thread = np.arange(grid * lb.BLOCK)
    if variant == "one per thread":
        x = thread
    elif variant == "unrolled":
        block, t = np.divmod(thread, lb.BLOCK)
        x = (block * lb.BLOCK * elems + t)[:, None] + lb.BLOCK * np.arange(elems)[None, :]
    else:
        x = thread[:, None] + grid * lb.BLOCK * np.arange(math.ceil(n / (grid * lb.BLOCK)))[None, :]
    return np.sort(x[x < n])


@pytest.mark.parametrize("n", [1, 255, 257, 4099, 270_339])  # 270_339: the H100's full grid of threads + 3
@pytest.mark.parametrize("variant, options", lb.cases())
def test_each_plan_writes_every_index_once(variant, options, n):
    grid = lb.plan(variant, n, **options)
    assert np.array_equal(written(variant, n, grid, options.get("elems", 1)), np.arange(n))
    if variant != "grid-stride":  # v0 and v2 start no block without work
        assert (grid - 1) * lb.BLOCK * options.get("elems", 1) < n


def test_only_the_block_count_differs_between_the_variants():
    n = 2**26
    grids = {lb.describe(v, o): lb.plan(v, n, **o) for v, o in lb.cases()}
    assert grids["one per thread"] == n // lb.BLOCK
    assert grids["grid-stride"] == lb.full_grid() and grids["grid-stride, 3 blocks"] == lb.CHECK_BLOCKS
    for e in lb.ELEMS:
        assert grids[f"unrolled, {e} ints per thread"] * e == grids["one per thread"]


def test_launch_floor_scales_with_the_blocks_and_the_rate():
    base = lb.launch_floor_us(2**26, 200.0, 2000.0)
    assert base == 2**26 / 200.0 / 2000.0  # every thread of 2^18 full blocks, started at 200 per cycle
    assert lb.launch_floor_us(2**27, 200.0, 2000.0) == 2 * base
    assert lb.launch_floor_us(2**26, 100.0, 2000.0) == 2 * base
    assert lb.launch_floor_us(2**26 - 255, 200.0, 2000.0) == base  # a partial last block starts all 256


def empty_rows(fixed_us, ns_per_block, grid, date=""):
    return [
        common.row("empty blocks", f"{g} x {lb.BLOCK} threads", "time", fixed_us + (g - 1) * ns_per_block / 1e3, "us")
        | {"date": date}
        for g in (grid, 1)
    ]


def test_block_cost_is_the_line_through_the_newest_run_of_empty_grids():
    stores = [common.row("store one per thread", "4099 ints, 17 blocks of 256", "time", 9.0, "us")]
    old, new = empty_rows(3.0, 0.5, 2**18, "2026-01-01"), empty_rows(2.0, 0.25, 2**16 + 1, "2026-02-01")
    assert lb.block_cost(stores + old + new) == pytest.approx((2.0, 0.25))
    assert lb.block_cost(old) == pytest.approx((3.0, 0.5))
    with pytest.raises(ValueError, match="no 'empty blocks' time rows"):
        lb.block_cost(stores)
    with pytest.raises(ValueError, match=r"got grids \[1\]"):
        lb.block_cost(old[1:])


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda: lb.plan("one per thread", 0), ValueError, "n must be >= 1"),
        (lambda: lb.plan("one per thread", -5), ValueError, "n must be >= 1"),
        (lambda: lb.plan("one per thread", 2.5), ValueError, "n must be an integer"),
        (lambda: lb.plan("one per thread", True), ValueError, "n must be an integer"),
        (lambda: lb.plan("one per thread", "4096"), ValueError, "n must be an integer"),
        (lambda: lb.plan("one per thread", None), ValueError, "n must be an integer"),
        (lambda: lb.plan("one per thread", 2**30 + 1), ValueError, "n must be <= 1073741824"),
        (lambda: lb.plan("two per thread", 100), ValueError, "variant must be one of"),
        (lambda: lb.plan("unrolled", 100, elems=0), ValueError, "elems must be >= 1"),
        (lambda: lb.plan("unrolled", 100, elems=65), ValueError, "elems must be <= 64"),
        (lambda: lb.plan("unrolled", 100, elems=1.5), ValueError, "elems must be an integer"),
        (lambda: lb.plan("grid-stride", 100, blocks=0), ValueError, "blocks must be >= 1"),
        (lambda: lb.plan("grid-stride", 100, blocks=2**22 + 1), ValueError, "blocks must be <= 4194304"),
        (lambda: lb.cases(8), TypeError, "elems: expected a sequence"),
        (lambda: lb.cases([4, 0]), ValueError, "elems must be >= 1"),
        (lambda: lb.check(0), ValueError, "n must be >= 1"),
        (lambda: lb.check(4099, elems="8"), TypeError, "elems: expected a sequence"),
        (lambda: lb.check_store("unrolled", 4099, elems=-1), ValueError, "elems must be >= 1"),
        (lambda: lb.measure(0), ValueError, "n must be >= 1"),
        (lambda: lb.measure(2**20, elems=(100,)), ValueError, "elems must be <= 64"),
        (lambda: lb.measure(2**20, repeat=0), ValueError, "repeat must be >= 1"),
        (lambda: lb.launch_floor_us(0, 200.0, 2000.0), ValueError, "n must be >= 1"),
        (lambda: lb.launch_floor_us(2**20, 0.0, 2000.0), ValueError, "threads_per_cycle must be a finite positive"),
        (lambda: lb.launch_floor_us(2**20, float("nan"), 2000.0), ValueError, "threads_per_cycle must be a finite"),
        (lambda: lb.launch_floor_us(2**20, 200.0, "2000"), ValueError, "clock_mhz must be a real number"),
    ],
)
def test_bad_arguments_name_the_constraint(bad, error, match):
    with pytest.raises(error, match=match):
        bad()


# The launcher checks its buffer before it needs a GPU (xp: NumPy here, CuPy on a GPU).
@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda xp: xp.zeros(100, np.float32), TypeError, "buf: expected dtype int32, got float32"),
        (lambda xp: xp.zeros(100, np.int64), TypeError, "buf: expected dtype int32, got int64"),
        (lambda xp: xp.zeros((4, 25), np.int32), ValueError, "buf: expected 1 dimensions"),
        (lambda xp: xp.zeros(0, np.int32), ValueError, "buf: empty array"),
        (lambda xp: xp.zeros(200, np.int32)[::2], ValueError, "buf: expected a C-contiguous array"),
    ],
)
def test_store_refuses_a_bad_buffer(make, error, match, xp):
    with pytest.raises(error, match=match):
        lb.store("one per thread", make(xp))


def test_store_checks_its_options_before_it_needs_a_gpu(xp):
    with pytest.raises(ValueError, match="elems must be <= 64"):
        lb.store("unrolled", xp.zeros(100, np.int32), elems=128)


@cpu_only
def test_launches_need_a_gpu_on_the_cpu():
    with pytest.raises(RuntimeError, match="needs a GPU"):
        lb.store("grid-stride", np.zeros(100, np.int32))
    with pytest.raises(RuntimeError, match="needs a GPU"):
        lb.check(4099)
    with pytest.raises(RuntimeError, match="needs a GPU"):
        lb.measure(2**20)


def test_working_set_larger_than_gpu_memory(monkeypatch):
    monkeypatch.setattr(common, "free_gpu_bytes", lambda: 2**30)
    with pytest.raises(ValueError, match="larger than the GPU's free memory"):
        lb.measure(2**30)


def test_memcheck_runs_every_case_of_the_probe():
    names = [name for name, _ in memcheck.memory_runs()]
    assert all(f"check {lb.describe(v, o)}" in names for v, o in lb.cases()) and "launch bound" in names


# Odd sizes: off the multiples of 256, of 256 x elems and of both grids; the last is the full grid + 3.
@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 255, 4099, 16 * 256 * 5 + 7, None])
def test_every_variant_writes_arange_over_a_poisoned_buffer(n):
    n = n or lb.full_grid() * lb.BLOCK + 3
    for result in lb.check(n):
        assert result.ok, str(result)


@pytest.mark.gpu
def test_measure_gives_a_time_and_a_rate_per_variant_and_the_empty_grids():
    rows = lb.measure(4099, elems=(2,), repeat=3)
    stores = [r for r in rows if r["kernel"].startswith("store ")]
    assert [r["kernel"] for r in stores[::2]] == [
        "store one per thread",
        "store grid-stride",
        "store unrolled, 2 ints per thread",
    ]
    assert [(r["metric"], r["unit"]) for r in stores] == [("time", "us"), ("bandwidth", "GB/s")] * 3
    empty = [(r["kernel"], common.number(r["problem"])) for r in rows[-2:]]
    assert empty == [("empty blocks", 17), ("empty blocks", 1)]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)
    assert all(math.isfinite(v) for v in lb.block_cost(rows))  # rows straight from measure, no date
