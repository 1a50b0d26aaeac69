"""Time GPU work with CUDA events: warm up, repeat, report the median and the spread.

Each repetition is bracketed by its own pair of events recorded on the default stream, which both
CuPy and Numba launches use. A Numba launch costs tens of microseconds of Python; for a short
kernel the GPU would sit idle between launches, and an event pair would time the host's latency.
So a one-thread kernel first holds the GPU busy while the host enqueues every repetition; then
they run back to back. Work between repetitions (an L2 flush) stays outside the events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from . import check, device


@dataclass(frozen=True)
class Timing:
    """Per-launch times in milliseconds."""

    times_ms: tuple

    def __post_init__(self):
        # An empty, non-finite or non-positive sample would turn the median, and every rate from it, into
        # NaN, infinity or a negative rate.
        times = self.times_ms
        if isinstance(times, (str, bytes)) or not hasattr(times, "__len__"):
            raise TypeError(f"times_ms: expected a sequence of times in ms, such as (0.5, 0.52), got {times!r}")
        if len(times) == 0:
            raise ValueError("times_ms: a timing needs at least one time, got none")
        real = (int, float, np.integer, np.floating)
        if not all(isinstance(t, real) and not isinstance(t, (bool, np.bool_)) for t in times):
            raise TypeError(f"times_ms: expected real numbers of milliseconds, got {times!r}")
        if not all(np.isfinite(t) and t > 0 for t in times):
            raise ValueError(f"times_ms: expected finite times above zero, got {times}")

    @property
    def median_ms(self) -> float:
        return float(np.median(self.times_ms))

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median: 0.02 means the middle half lies within 2%."""
        q1, q3 = np.percentile(self.times_ms, [25, 75])
        return float((q3 - q1) / self.median_ms)

    @property
    def min_ms(self) -> float:
        return float(min(self.times_ms))

    def __str__(self) -> str:
        return f"{self.median_ms:.4f} ms (median of {len(self.times_ms)}, IQR {100 * self.spread:.1f}%)"


class L2Flush:
    """Overwrite a buffer twice the size of L2 so the next launch starts with a cold cache."""

    def __init__(self):
        import cupy

        size = 2 * device.properties()["l2_bytes"]
        self._buf = cupy.empty(size // 4, dtype=cupy.float32)

    def __call__(self):
        self._buf.fill(1.0)


def benchmark(
    fn: Callable, args: Sequence[tuple] | None = None, *, warmup: int = 5, repeat: int = 50, flush_l2: bool = False
) -> Timing:
    """Time ``fn`` with CUDA events.

    ``fn`` must only enqueue GPU work (no host synchronisation). With ``args``, repetition i calls
    ``fn(*args[i % len(args)])``: pass several input sets whose total exceeds L2 to time from DRAM
    without a flush. ``flush_l2=True`` clears L2 before every repetition instead.
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable that launches the kernel, got {type(fn).__name__}")
    check.nonnegative_int(warmup, "warmup")
    check.positive_int(repeat, "repeat")
    if args is not None and len(args) == 0:
        raise ValueError("args: expected at least one argument tuple")
    if device.MODE != device.GPU:
        raise RuntimeError("timing needs a GPU; this run uses the CUDA simulator")
    import cupy

    def call(i):
        if args is None:
            fn()
        else:
            fn(*args[i % len(args)])

    for i in range(warmup):
        call(i)
    flush = L2Flush() if flush_l2 else None
    t0 = time.perf_counter()
    call(0)
    enqueue_s = time.perf_counter() - t0
    cupy.cuda.Device().synchronize()
    _hold_gpu(min(0.5, 1.5 * repeat * (enqueue_s + 50e-6)))
    events = []
    for i in range(repeat):
        if flush:
            flush()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        call(i)
        end.record()
        events.append((start, end))
    events[-1][1].synchronize()
    return Timing(tuple(cupy.cuda.get_elapsed_time(s, e) for s, e in events))


def per_call(fn: Callable, *, warmup: int = 5, repeat: int = 50, batches: int = 5) -> Timing:
    """Wall-clock milliseconds per call as a loop runs ``fn``: ``repeat`` calls back to back, one
    synchronisation, the host's clock around both; one time per batch. Unlike ``benchmark`` the GPU is
    not held, so the host's launch cost counts wherever it exceeds the GPU's work: what a training
    loop pays."""
    if not callable(fn):
        raise TypeError(f"fn: expected a callable that launches the kernel, got {type(fn).__name__}")
    check.nonnegative_int(warmup, "warmup")
    check.positive_int(repeat, "repeat")
    check.positive_int(batches, "batches")
    if device.MODE != device.GPU:
        raise RuntimeError("timing needs a GPU; this run uses the CUDA simulator")
    import cupy

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(batches):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        cupy.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) * 1e3 / repeat)
    return Timing(tuple(times))


def _hold_gpu(seconds: float):
    from .cuda_cpp import load

    load("harness/hold_gpu.cu", "hold_gpu")((1,), (1,), (np.uint64(seconds * 1e9),))


def rates(t: Timing, *, flops: float = 0.0, bytes_moved: float = 0.0) -> dict:
    """Achieved GFLOP/s and GB/s from the median time."""
    if not isinstance(t, Timing):
        raise TypeError(f"t: expected a Timing (from benchmark), got {type(t).__name__}")
    check.finite_number(flops, "flops")
    check.finite_number(bytes_moved, "bytes_moved")
    seconds = t.median_ms * 1e-3
    return {"ms": t.median_ms, "GFLOP/s": flops / seconds / 1e9, "GB/s": bytes_moved / seconds / 1e9}
