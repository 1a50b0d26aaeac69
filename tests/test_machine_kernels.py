"""The machine chapter's ceiling kernels against float64 references (simulator on a CPU)."""

import dataclasses

import numpy as np
import pytest

from kernels.harness import ceilings, check, device
from kernels.machine.copy import copy_kernel, copy_kernel_x4
from kernels.machine.fma import CHAINS, flops, fma_kernel, reference


@pytest.mark.parametrize("kernel", [copy_kernel, copy_kernel_x4])
@pytest.mark.parametrize("n, blocks, threads", [(1, 1, 32), (97, 2, 32), (1000, 3, 64)])
def test_copy_kernels_copy_every_element(kernel, n, blocks, threads, rng, xp):
    src = xp.asarray(rng.random(n, dtype=np.float32))
    dst = check.poison(xp.empty_like(src))
    kernel[blocks, threads](dst, src)
    check.assert_close(dst, src, atol=0.0)


@pytest.mark.parametrize("threads, iters, unroll", [(32, 1, 1), (45, 3, 2), (40, 2, 16)])
def test_fma_chains_match_float64_recurrence(threads, iters, unroll, rng, xp):
    b = np.float32(rng.uniform(0.9, 1.0))
    c = np.float32(rng.uniform(0.0, 0.01))
    out = check.poison(xp.empty(threads, dtype=np.float32))
    fma_kernel(unroll)[(threads + 31) // 32, 32](out, iters, b, c)
    check.assert_close(out, reference(threads, iters * unroll, float(b), float(c)), atol=1e-5)


def test_fma_flop_count_and_bad_unroll():
    assert flops(threads=10, iters=3, unroll=2) == 2 * CHAINS * 60
    with pytest.raises(ValueError, match="unroll"):
        fma_kernel(0)


def test_peaks_from_properties():
    h100 = {"cc": "90", "sms": 132, "max_sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "bus_width_bits": 5120}
    p = ceilings.peaks(h100)
    assert p["fp32_gflops"] == pytest.approx(66908.16)
    assert p["dram_gbps"] == pytest.approx(3352.32)
    assert p["smem_gbps"] == pytest.approx(33454.08)
    with pytest.raises(ValueError, match="compute capability 12"):
        ceilings.peaks(h100 | {"cc": "12"})


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_measuring_ceilings_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="needs a GPU"):
        ceilings.measure()


@pytest.mark.gpu
def test_smem_read_kernel_sums_what_it_reads():
    import cupy

    from kernels.harness.cuda_cpp import load

    kernel = load("machine/smem_read.cu", "smem_read")
    blocks, threads, iters, step = 3, 128, 37, 32
    out = check.poison(cupy.empty(blocks * threads, dtype=cupy.float32))
    kernel((blocks,), (threads,), (out, cupy.int32(iters), cupy.int32(step)))
    t = np.arange(threads)
    idx = (t[:, None] + step * np.arange(iters)[None, :]) & 1023
    expected = np.tile((4.0 * idx + 6.0).sum(axis=1), blocks)
    check.assert_close(out, expected, atol=0.0, rtol=1e-6)


@pytest.mark.gpu
def test_ceilings_are_measured():
    c = dataclasses.asdict(ceilings.measure())
    assert set(c) == {"copy_gbps", "fma_gflops", "smem_gbps"}
    assert all(isinstance(v, float) and np.isfinite(v) and v > 0 for v in c.values())
    with pytest.raises(ValueError, match="GPU memory"):
        ceilings.measure_copy(1 << 50)


def test_the_device_table_reads_in_words_and_units():
    from kernels.machine import properties

    stored = {"cc": 90.0, "sms": 132.0, "l2_bytes": 52428800.0, "smem_per_sm_bytes": 233472.0, "warp_size": 32.0}
    rows = {r["property"]: (r["value"], r["unit"]) for r in properties.table_rows(stored)}
    assert rows["compute capability"] == ("9.0", "--")
    assert rows["L2 cache"] == ("50", "MiB") and rows["shared memory per SM"] == ("228", "KiB")
    assert rows["streaming multiprocessors (SMs)"] == ("132", "--")
    assert set(device.REFERENCE_PROPERTIES) - {"name"} <= set(properties.PROPERTIES)
    with pytest.raises(KeyError, match="no words for the device properties"):
        properties.table_rows({"max_sm_clock": 1980})


def test_copies_from_dram_fill_the_l2_four_times_over():
    from kernels.machine.copy import pairs_from_dram

    l2 = 50 << 20
    assert pairs_from_dram(2 << 20, l2) == 50  # 50 pairs of 4 MiB: 200 MiB
    assert pairs_from_dram(24 << 20, l2) == 5
    assert pairs_from_dram(1 << 30, l2) == 1
    with pytest.raises(ValueError, match="nbytes"):
        pairs_from_dram(0, l2)


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_timing_a_copy_and_the_sanitizer_driver_need_a_gpu(capsys):
    from kernels.machine import copy, memcheck

    with pytest.raises(RuntimeError, match="needs a GPU"):
        copy.memcpy_gbps(1 << 20)
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        copy.memcpy_gbps(1 << 20, pairs=0)
    assert check.sanitized(memcheck.checks) == 1 and "needs a CUDA GPU" in capsys.readouterr().out


def test_the_sanitizer_driver_checks_every_kernel_of_the_chapter(rng):
    """What runs under compute-sanitizer on a GPU runs here in the simulator, but the CUDA-only parts."""
    from kernels.machine import memcheck

    results = memcheck.checks(rng)
    names = " ".join(r.name for r in results)
    on_gpu = ("memcpy", "smem_read") if device.on_gpu() else ()
    assert all(k in names for k in ("copy_kernel n=", "copy_kernel_x4", "fma_chains unroll=16", *on_gpu))
    assert all(r.ok for r in results), [str(r) for r in results if not r.ok]


@pytest.mark.gpu
def test_a_copy_cycling_through_pairs_is_timed():
    from kernels.machine.copy import memcpy_gbps

    rates = [memcpy_gbps(1 << 20, pairs=p, repeat=3) for p in (1, 3)]
    assert all(np.isfinite(r) and r > 0 for r in rates)
