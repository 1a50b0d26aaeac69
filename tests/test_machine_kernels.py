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
