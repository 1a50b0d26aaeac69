"""Quantities that more than one chapter quotes, read here once from the stored runs, so that every page
quoting one agrees with the others (the probes measure the latencies and the SM clock, the machine chapter
the copy rate).

Each comes from this run's GPU where its rows exist, else from the reference GPU's, with the name of the
GPU that measured it, so the prose can say where a number comes from.
"""

from __future__ import annotations

import functools
from pathlib import Path

from . import device, results


def _this_gpu() -> str:
    """This GPU's results folder, from its properties (read once): a model asks for these quantities
    hundreds of times, and ``device.environment()`` runs nvidia-smi and git on every call."""
    return device.slug(device.properties()["name"])


def _load(chapter: str, slug: str) -> tuple[dict, ...]:
    """``results.load``, read again only when one of the files it may read has changed."""
    paths = (Path(results.RESULTS) / slug / f"{chapter}.csv", results.REPOSITORY / slug / f"{chapter}.csv")
    stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None for p in paths)
    return _read(chapter, slug, str(results.RESULTS), stamps)


@functools.lru_cache(maxsize=64)
def _read(chapter: str, slug: str, _folder: str, _stamps: tuple) -> tuple[dict, ...]:
    return tuple(results.load(chapter, slug))


def stored(chapter: str, kernel: str, metric: str, problem: str | None = None) -> tuple[float, str]:
    """(value, GPU name) of the newest row of (kernel, metric[, problem]) in ``chapter``'s results."""
    slugs = [results.REFERENCE_GPU]
    if device.on_gpu():
        slugs.insert(0, _this_gpu())
    for slug in slugs:
        rows = [
            r
            for r in _load(chapter, slug)
            if r["kernel"] == kernel and r["metric"] == metric and problem in (None, r["problem"])
        ]
        if rows:
            newest = max(rows, key=lambda r: r["date"])
            return float(newest["value"]), newest["gpu"]
    raise LookupError(f"no stored {chapter} row of kernel {kernel!r}, metric {metric!r}: run that chapter on a GPU")


def dram_latency_ns() -> tuple[float, str]:
    """A dependent load that misses every cache (the memory probes' pointer chase), in nanoseconds."""
    return stored("probes", "chase", "HBM latency ns")


# The machine chapter's chain: variant v2 (100 dependent FFMAs a loop trip) in one block of 128 threads, one warp
# per scheduler; kernels/probes/compute.py runs it under these names.
CHAIN_VARIANT, CHAIN_THREADS = "v2 double loop", 128
WARP = 32
SCHEDULERS_PER_SM = 4  # sm_70 and later: four sub-partitions, each issuing one warp instruction per cycle


def chain_latency(fma_per_cycle_per_sm: float) -> float:
    """Cycles between one warp's dependent FFMAs when each of the 4 schedulers runs one warp: each issues 32 FMAs
    a latency, so the SM does 4 x 32 FMAs every latency."""
    return SCHEDULERS_PER_SM * WARP / fma_per_cycle_per_sm


def fma_latency_cycles() -> tuple[float, str]:
    """One FP32 FMA's latency: the machine chapter's dependent chain (``chain_latency``), not a loop's step,
    which adds its branch."""
    rate, gpu = stored("probes", f"fma {CHAIN_VARIANT}", "FMA per cycle per SM", f"1 x {CHAIN_THREADS} threads")
    return chain_latency(rate), gpu


def empty_kernel_us() -> tuple[float, str]:
    """One launch of an empty kernel, timed with CUDA events around it (the memory probes), in microseconds."""
    return stored("probes", "empty kernel", "time", "1 x 1 thread")


def sm_clock_mhz() -> tuple[float, str]:
    """The SM clock the compute probes measured (clock64() cycles over %globaltimer in a long spin), in MHz."""
    return stored("probes", "clock", "sm clock")


def host_clock_mhz() -> tuple[float, str]:
    """The same spin's cycles over the host's clock around the launch (the check of the GPU's timer), in MHz."""
    return stored("probes", "clock", "sm clock, host timer")


def copy_gbps() -> tuple[float, str]:
    """The driver's device-to-device copy on the largest buffer the machine chapter times (read + write)."""
    rows = [r for r in _load("machine", _machine_gpu()) if r["kernel"] == "memcpy"]
    if not rows:
        raise LookupError("no stored memcpy rows: run the machine chapter on a GPU")
    newest = max(r["date"] for r in rows)
    largest = max((r for r in rows if r["date"] == newest), key=lambda r: int(r["problem"].split()[0]))
    return float(largest["value"]), largest["gpu"]


def fma_gflops() -> tuple[float, str]:
    """The FP32 FMA ceiling the machine chapter measured: the best rate of its warps-per-SM sweep."""
    rows = [
        r
        for r in results.latest("machine", _machine_gpu()).values()
        if r["kernel"] == "fma_chains" and r["metric"] == "GFLOP/s"
    ]
    if not rows:
        raise LookupError("no stored fma_chains rows: run the machine chapter on a GPU")
    best = max(rows, key=lambda r: float(r["value"]))
    return float(best["value"]), best["gpu"]


def sm_count() -> tuple[int, str]:
    """The SMs of the GPU the machine chapter ran on (its device table)."""
    sms, gpu = stored("machine", "device", "sms")
    return int(sms), gpu


def _machine_gpu() -> str:
    if device.on_gpu():
        slug = _this_gpu()
        if any(r["kernel"] == "memcpy" for r in _load("machine", slug)):
            return slug
    return results.REFERENCE_GPU
