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
    with pytest.raises(ValueError, match="finite times above zero"):
        timing.rates(timing.Timing((0.0,)))
    slow_outlier = timing.rates(timing.Timing((1.0, 2.0, 100.0)), flops=4e9)  # the median, not the mean
    assert slow_outlier["ms"] == 2.0 and slow_outlier["GFLOP/s"] == pytest.approx(2000.0)


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
@pytest.mark.parametrize("kwargs", [{"repeat": 0}, {"batches": 0}, {"warmup": -1}])
def test_per_call_validates_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        timing.per_call(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="fn"):
        timing.per_call(42)


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
@pytest.mark.parametrize("flush_l2", [False, True])
def test_benchmark_calls_and_returns_what_it_says(flush_l2):
    """warmup calls, one call to measure the enqueue time, then ``repeat`` timed calls rotating through
    ``args``; one finite positive time per timed call. How long the work takes is not asserted: timings
    belong to the notebooks."""
    import cupy

    buffers = [cupy.empty(1 << 20, np.float32) for _ in range(3)]
    calls = []

    def fill(i):
        calls.append(i)
        buffers[i].fill(1.0)

    t = timing.benchmark(fill, args=[(0,), (1,), (2,)], warmup=4, repeat=7, flush_l2=flush_l2)
    assert calls == [i % 3 for i in range(4)] + [0] + [i % 3 for i in range(7)]
    assert len(t.times_ms) == 7 and all(np.isfinite(x) and x > 0 for x in t.times_ms), t.times_ms
    assert "median of 7" in str(t)
    assert all(bool((b == 1.0).all()) for b in buffers)


@pytest.mark.gpu
def test_per_call_times_each_batch_of_calls():
    """``batches`` x ``repeat`` calls after ``warmup``, one finite positive time per batch."""
    import cupy

    buf = cupy.empty(1 << 20, np.float32)
    calls = []

    def fill():
        calls.append(1)
        buf.fill(2.0)

    t = timing.per_call(fill, warmup=2, repeat=4, batches=3)
    assert len(calls) == 2 + 3 * 4
    assert len(t.times_ms) == 3 and all(np.isfinite(x) and x > 0 for x in t.times_ms), t.times_ms
    assert bool((buf == 2.0).all())
