"""The two-number floor and the roofline plot.

A kernel must do ``flops`` operations and move at least ``bytes_moved`` bytes through DRAM; over the
measured FP32 rate and copy bandwidth these give two times, and the larger is the floor no version
can beat by much.
"""

from __future__ import annotations

from dataclasses import dataclass

from .check import finite_number


@dataclass(frozen=True)
class Floor:
    compute_ms: float
    memory_ms: float

    @property
    def floor_ms(self) -> float:
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_ms >= self.compute_ms else "compute"

    def __str__(self) -> str:
        return (
            f"compute {self.compute_ms:.4g} ms, memory {self.memory_ms:.4g} ms -> "
            f"floor {self.floor_ms:.4g} ms ({self.bound}-bound)"
        )


def floor(flops: float, bytes_moved: float, *, gflops: float, gbps: float) -> Floor:
    """The floor of a kernel at ``gflops`` GFLOP/s and ``gbps`` GB/s."""
    finite_number(flops, "flops")
    finite_number(bytes_moved, "bytes_moved")
    _ceilings(gflops, gbps)
    return Floor(compute_ms=flops / (gflops * 1e9) * 1e3, memory_ms=bytes_moved / (gbps * 1e9) * 1e3)


def attainable(intensity: float, *, gflops: float, gbps: float) -> float:
    """The roofline: GFLOP/s attainable at ``intensity`` FLOP/byte."""
    finite_number(intensity, "intensity", positive=True)
    _ceilings(gflops, gbps)
    return min(gflops, intensity * gbps)


def plot(
    *,
    gflops: float,
    gbps: float,
    points: dict | None = None,
    roofs: dict | None = None,
    ax=None,
    title: str = "Roofline",
):
    """Log-log roofline: the DRAM slope, the FP32 roof, extra ``roofs`` {label: GFLOP/s or (GB/s, 'bw')},
    and ``points`` {label: (FLOP/byte, GFLOP/s)}."""
    import matplotlib.pyplot as plt
    import numpy as np

    _ceilings(gflops, gbps)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))  # the page column, text at full size
    ridge = gflops / gbps
    x = np.logspace(np.log10(ridge) - 3, np.log10(ridge) + 2, 200)
    ax.loglog(
        x,
        np.minimum(gflops, x * gbps),
        "k-",
        lw=2,
        label=f"DRAM {gbps / 1e3:.2f} TB/s, FP32 {gflops / 1e3:.1f} TFLOP/s",
    )
    for label, value in (roofs or {}).items():
        if isinstance(value, tuple):  # a bandwidth slope (GB/s, "bw")
            ax.loglog(x, np.minimum(gflops, x * value[0]), "--", label=label)
        else:
            ax.axhline(value, ls="--", lw=1, label=label)
    for label, (intensity, rate) in (points or {}).items():
        ax.loglog([intensity], [rate], "o")
        ax.annotate(label, (intensity, rate), textcoords="offset points", xytext=(6, -15), fontsize=9)
    ax.axvline(ridge, color="grey", lw=0.5)
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=9, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    return ax


def _ceilings(gflops: float, gbps: float):
    finite_number(gflops, "gflops (the FP32 ceiling)", positive=True)
    finite_number(gbps, "gbps (the DRAM ceiling)", positive=True)
