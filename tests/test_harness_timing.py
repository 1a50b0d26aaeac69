import numpy as np
import pytest

from kernels.harness import device, timing


def test_timing_statistics():
    t = timing.Timing((1.0, 2.0, 3.0, 4.0, 100.0))
    assert t.median_ms == 3.0
    assert t.min_ms == 1.0
    assert t.spread == pytest.approx((4.0 - 2.0) / 3.0)
    assert "median of 5" in str(t)


def test_rates():
    r = timing.rates(timing.Timing((2.0,)), flops=4e9, bytes_moved=6e9)
    assert r["GFLOP/s"] == pytest.approx(2000.0) and r["GB/s"] == pytest.approx(3000.0)
    with pytest.raises(ValueError, match="positive"):
        timing.rates(timing.Timing((0.0,)))


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_benchmark_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="timing needs a GPU"):
        timing.benchmark(lambda: None)


@pytest.mark.gpu
def test_benchmark_validates_arguments():
    with pytest.raises(TypeError, match="callable"):
        timing.benchmark(42)
    with pytest.raises(ValueError, match="repeat"):
        timing.benchmark(lambda: None, repeat=0)
    with pytest.raises(ValueError, match="at least one"):
        timing.benchmark(lambda x: None, args=[])


@pytest.mark.gpu
def test_benchmark_times_real_work_and_scales_with_size():
    import cupy
    small, large = cupy.empty(1 << 20, np.float32), cupy.empty(1 << 26, np.float32)
    t_small = timing.benchmark(lambda: small.fill(1.0), repeat=20, flush_l2=True)
    t_large = timing.benchmark(lambda: large.fill(1.0), repeat=20)
    assert len(t_small.times_ms) == 20
    assert t_large.median_ms > 4 * t_small.median_ms  # 64x the bytes: far more than 4x the time
