"""What the probes share: compiling and loading their CUDA C++ (with arch.cuh on the include path),
the SM clock, the parameter checks that run before any launch, and the row format.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from ..harness import ceilings, cuda_cpp, device, results
from ..harness.check import positive_int

HERE = Path(__file__).resolve().parent
CHAPTER = "probes"


def lanes_per_sm(cc: str | None = None) -> int:
    """FP32 lanes per SM of a compute capability ("80") or target ("sm_80"); default this GPU's own (under
    BOOK_MAX_CC too: a capped compile target does not change the chip's lanes)."""
    props = device.target_properties()
    cc = re.sub(r"\D", "", cc or props.get("hardware_cc", props["cc"]))
    if cc not in ceilings.FP32_LANES_PER_SM:
        raise ValueError(f"no FP32 lane count known for compute capability {cc}")
    return ceilings.FP32_LANES_PER_SM[cc]


def options(defines: dict | None = None) -> tuple:
    """NVRTC -D options (cuda_cpp already puts the source's folder, hence arch.cuh, on the include path)."""
    return tuple(f"-D{k}={v}" for k, v in (defines or {}).items())


def build(name: str, arch: str | None = None, defines: dict | None = None) -> cuda_cpp.Compiled:
    """Compile ``kernels/probes/<name>`` with NVRTC for ``arch`` (default ``device.target_arch()``);
    works without a GPU."""
    return cuda_cpp.compile_cubin(HERE / name, arch or device.target_arch(), options(defines))


def load(name: str, function: str, defines: dict | None = None):
    """Load one kernel of ``kernels/probes/<name>`` through CuPy (needs a GPU), once per session."""
    return _load(name, function, tuple(sorted((defines or {}).items())))


@cache
def _load(name: str, function: str, defines: tuple):
    return cuda_cpp.load(HERE / name, function, options(dict(defines)))


def require_gpu(what: str):
    if not device.on_gpu():
        raise RuntimeError(f"{what} needs a GPU; in the simulator the probe is compiled only")


def free_gpu_bytes() -> int | None:
    """Free GPU memory now (None without a GPU)."""
    if not device.on_gpu():
        return None
    import cupy

    return int(cupy.cuda.runtime.memGetInfo()[0])


def working_set(nbytes, name: str = "working set", *, copies: int = 1) -> int:
    """A buffer size that fits in free GPU memory (``copies`` buffers of it must fit)."""
    nbytes = positive_int(nbytes, name)
    free = free_gpu_bytes()
    if free is not None and copies * nbytes > 0.9 * free:
        raise ValueError(
            f"{name} of {nbytes / 2**20:.1f} MiB (x{copies}) is larger than the GPU's free "
            f"memory ({free / 2**20:.0f} MiB, keeping 10% spare)"
        )
    return nbytes


def sms() -> int:
    return device.target_properties()["sms"]


def number(problem: str) -> int:
    """The first integer in a results row's problem text ("block 16x16x1" -> 16, "stride 64 B" -> 64)."""
    m = re.search(r"\d+", problem)
    if not m:
        raise ValueError(f"no number in {problem!r}")
    return int(m.group())


def row(kernel: str, problem: str, metric: str, value: float, unit: str) -> dict:
    """One results row (the harness's results.record columns; a size or count it is about goes in ``problem``,
    which ``number`` reads back)."""
    return {"kernel": kernel, "problem": problem, "metric": metric, "value": float(value), "unit": unit}


_clock_mhz: float | None = None


def clock_mhz() -> float:
    """The SM clock measured by the clock probe (``memory.run_clock``), measured once per session; a
    short spin, since only %globaltimer's reading is used (the host's check wants the long one)."""
    global _clock_mhz
    if _clock_mhz is None:
        from .memory import run_clock

        _clock_mhz = next(r["value"] for r in run_clock(spin=2**24) if r["metric"] == "sm clock")
    return _clock_mhz


def stored_gpu() -> str:
    """The GPU whose stored rows the chapters read: this one, or the reference GPU without one."""
    return device.slug(device.properties()["name"]) if device.on_gpu() else results.REFERENCE_GPU


def stated_max_clock_mhz() -> float:
    """The SM clock's maximum as the driver states it: this GPU's, or without one the reference GPU's
    as the machine chapter stored it."""
    if device.on_gpu():
        return float(device.properties()["max_sm_clock_mhz"])
    rows = [
        r
        for r in results.load("machine", results.REFERENCE_GPU)
        if r["kernel"] == "device" and r["metric"] == "max_sm_clock_mhz"
    ]
    if not rows:
        raise LookupError("no stored max_sm_clock_mhz row: run the machine chapter on a GPU")
    return float(max(rows, key=lambda r: r["date"])["value"])


def clock_history() -> list[tuple[str, float, float | None]]:
    """(date, SM clock, the host timer's clock or None) of every stored run of the clock probe on
    ``stored_gpu()``, oldest first (the runs before the host's check have None)."""
    runs: dict[str, dict] = {}
    for r in results.load(CHAPTER, stored_gpu()):
        if r["kernel"] == "clock":
            runs.setdefault(r["date"], {})[r["metric"]] = float(r["value"])
    return [(date, m["sm clock"], m.get("sm clock, host timer")) for date, m in sorted(runs.items()) if "sm clock" in m]


# --- seeds and the results table -----------------------------------------------------------------

SEEDS = HERE.parents[1] / "data" / "seeds"
MI25_CUS, MI25_LANES_PER_CU = 64, 64  # source 003: 64 compute units of 4 x 16-lane SIMDs
MI25_CLOCK_MHZ = 1536.0  # source 003's rated clock, by which it converts every time to cycles (not measured)


def seeds(name: str) -> list[dict]:
    """Rows of data/seeds/<name>.csv (probes_mi25, probes_hopper_published)."""
    import csv

    with (SEEDS / f"{name}.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _pick(rows, kernel: str, metric: str, problem: str | None = None) -> float | None:
    hits = [
        float(r["value"])
        for r in rows
        if r["kernel"] == kernel and r["metric"] == metric and (problem is None or r["problem"] == problem)
    ]
    return hits[-1] if hits else None


def mi25_value(kernel: str, metric: str, problem: str | None = None) -> float:
    """One number of data/seeds/probes_mi25.csv, for the prose that sets it beside ours."""
    value = _pick(seeds("probes_mi25"), kernel, metric, problem)
    if value is None:
        raise KeyError(f"no MI25 seed row for kernel={kernel!r}, metric={metric!r}, problem={problem!r}")
    return value


def _ratio(a, b):
    return a / b if a is not None and b else None


def mi25_padding() -> dict[str, dict[int, float]]:
    """The MI25's padding bandwidths: kernel -> {channels per thread: GB/s} (the channel count opens
    each seed row's note)."""
    out = {}
    for r in seeds("probes_mi25"):
        if r["probe"] == "padding":
            out.setdefault(r["kernel"], {})[int(r["note"].split()[0])] = float(r["value"])
    return out


def mi25_ratios() -> dict[str, float]:
    """The MI25's ratios that the chapters set beside ours, all from data/seeds/probes_mi25.csv."""
    mi25 = seeds("probes_mi25")
    divergence = [r for r in mi25 if r["probe"] == "divergence"]
    tail = {number(r["problem"]): float(r["value"]) for r in mi25 if r["kernel"] == "fma tail"}
    (b0, rate0), (b1, rate1) = sorted(tail.items())
    padding = mi25_padding()
    return {
        # the source gives the rates of 64 and 65 blocks; a launch's time is blocks / rate
        "tail": (b1 / rate1) / (b0 / rate0),
        "divergent": _pick(divergence, "fma divergent", "FMA per cycle per SM")
        / _pick(divergence, "fma v0 chain", "FMA per cycle per SM"),
        "swapped": _pick(divergence, "fma swapped", "FMA per cycle per SM")
        / _pick(divergence, "fma v0 chain", "FMA per cycle per SM"),
        "banks": _pick(mi25, "smem banks", "latency", "stride 16") / _pick(mi25, "smem banks", "latency", "stride 1"),
        "channels": _pick(mi25, "channels", "bandwidth", "shrink 256 B")
        / _pick(mi25, "channels", "bandwidth", "shrink 65536 B"),
        "padding": padding["padding v2 constant"][16] / padding["padding v0 local"][16],
        "reduction": _pick(mi25, "reduce tree 4", "time") / _pick(mi25, "reduce tree 2", "time"),
        "batchnorm": _pick(mi25, "batchnorm", "throughput", "1 pass 4 threads per column")
        / _pick(mi25, "batchnorm", "throughput", "3 passes"),
    }


def summary(rows: list[dict], sms: int | None = None, cc: str | None = None) -> list[dict]:
    """The chapter's one table: our number, the MI25's, the range published for the H100 (column
    "published Hopper"), and a verdict.

    ``rows``: our results rows (measured now or stored); ``sms``: the GPU's SM count (for the tail);
    ``cc``: its compute capability (for the per-lane rates; default this GPU's, or the reference's)."""
    lanes = lanes_per_sm(cc)
    ratios = mi25_ratios()
    mi25, pub = seeds("probes_mi25"), {r["metric"]: r for r in seeds("probes_hopper_published")}
    fma_best = max(
        [
            float(r["value"])
            for r in rows
            if r["kernel"] in ("fma v0 chain", "fma v1 unroll 100", "fma v2 double loop")
            and r["metric"] == "FMA per cycle per SM"
        ],
        default=None,
    )
    launch_best = max([float(r["value"]) for r in rows if r["kernel"] == "launch"], default=None)
    tail = None
    if sms:
        t = {
            number(r["problem"]): float(r["value"]) for r in rows if r["kernel"] == "fma tail" and r["metric"] == "time"
        }
        tail = _ratio(t.get(sms + 1), t.get(sms))
    sms_ = sms or None
    fma_v3 = max(
        [
            float(r["value"])
            for r in rows
            if r["kernel"] == "fma v3 immediate" and r["metric"] == "FMA per cycle per SM"
        ],
        default=None,
    )
    channel = [float(r["value"]) for r in rows if r["kernel"] == "strided lines"]
    bn = {
        r["kernel"]: float(r["value"])
        for r in rows
        if r["kernel"].startswith("batchnorm") and r["metric"] == "throughput" and r["problem"].endswith("TPC 4")
    }
    bn3 = next(
        (float(r["value"]) for r in rows if r["kernel"] == "batchnorm v0 three passes" and r["metric"] == "throughput"),
        None,
    )
    entries = [
        ("SM clock", _pick(rows, "clock", "sm clock"), MI25_CLOCK_MHZ, "MHz", None),
        (
            "launch: best threads per cycle, whole GPU",
            launch_best,
            _pick(mi25, "launch", "threads per cycle", "block 1024x1x1"),
            "threads/cycle",
            None,
        ),
        (
            "launch: best threads per cycle per SM (CU)",
            _ratio(launch_best, sms_),
            _ratio(_pick(mi25, "launch", "threads per cycle", "block 1024x1x1"), MI25_CUS),
            "threads/cycle/SM",
            None,
        ),
        (
            "FMA per cycle per SM (CU), one chain per thread",
            fma_best,
            _pick(mi25, "fma v2 double loop", "FMA per cycle per SM", "1 x 1024 threads"),
            "FMA/cycle/SM",
            None,
        ),
        (
            "FMA per cycle per lane, one chain per thread",
            _ratio(fma_best, lanes),
            _ratio(_pick(mi25, "fma v2 double loop", "FMA per cycle per SM", "1 x 1024 threads"), MI25_LANES_PER_CU),
            "FMA/cycle/lane",
            None,
        ),
        ("FMA per cycle per lane, no bank conflict (v3)", _ratio(fma_v3, lanes), None, "FMA/cycle/lane", None),
        ("tail: time(SMs + 1 blocks) / time(SMs)", tail, ratios["tail"], "ratio", None),
        (
            "divergent / plain FMA rate",
            _ratio(
                _pick(rows, "fma divergent", "FMA per cycle per SM"),
                _pick(rows, "fma v0 chain", "FMA per cycle per SM", f"{sms} x 1024 threads"),
            ),
            ratios["divergent"],
            "ratio",
            None,
        ),
        (
            "L1 hit latency",
            _pick(rows, "chase", "L1 hit latency"),
            _pick(mi25, "chase", "L1 hit latency"),
            "cycles",
            "L1 hit latency",
        ),
        (
            "L2 hit latency (near)",
            _pick(rows, "chase", "L2 hit latency"),
            _pick(mi25, "chase", "L2 hit latency"),
            "cycles",
            "L2 hit latency",
        ),
        ("L2 hit latency (far)", _pick(rows, "chase", "L2 far latency"), None, "cycles", "L2 far latency"),
        (
            "HBM latency",
            _pick(rows, "chase", "HBM latency"),
            _pick(mi25, "chase", "HBM latency"),
            "cycles",
            "HBM latency",
        ),
        (
            "shared-memory latency",
            _pick(rows, "smem chase", "shared-memory latency"),
            _pick(mi25, "smem chase", "shared-memory latency"),
            "cycles",
            None,
        ),
        (
            "bank conflicts: stride 16 / stride 1",
            _ratio(_pick(rows, "smem banks", "latency", "stride 16"), _pick(rows, "smem banks", "latency", "stride 1")),
            ratios["banks"],
            "ratio",
            None,
        ),
        (
            "NCHW index bandwidth",
            _pick(rows, "nchw index", "bandwidth", "N*H*W = 1024x56x56"),
            _pick(mi25, "nchw index", "bandwidth"),
            "GB/s",
            None,
        ),
        (
            "channels: worst / best stride GB/s",
            _ratio(min(channel, default=None), max(channel, default=None)),
            ratios["channels"],
            "ratio",
            None,
        ),
        (
            "sin (fp64): cycles per call, one warp's chain",
            _pick(rows, "math", "latency", "sin (fp64)"),
            _pick(mi25, "math", "cycles per call"),
            "cycles",
            None,
        ),
        (
            "padding 16 ch: constant / local-memory GB/s",
            _ratio(
                *[
                    _pick([r for r in rows if r["problem"].endswith(" 16 ch/thread")], k, "bandwidth")
                    for k in ("padding v2 constant", "padding v0 local")
                ]
            ),
            ratios["padding"],
            "ratio",
            None,
        ),
        (
            "reduction: tree 4 / tree 2 time",
            _ratio(_pick(rows, "reduce tree 4", "time"), _pick(rows, "reduce tree 2", "time")),
            ratios["reduction"],
            "ratio",
            None,
        ),
        (
            "BatchNorm: 1 pass (4 threads/column) / 3 passes",
            _ratio(bn.get("batchnorm v2 registers"), bn3),
            ratios["batchnorm"],
            "ratio",
            None,
        ),
    ]
    out = []
    for name, ours, theirs, unit, published in entries:
        entry = {
            "probe": name,
            "ours": ours,
            "MI25": theirs if theirs is not None else "--",
            "unit": unit,
            "published Hopper": "--",
            "verdict": "--",
        }
        if published and published in pub:
            low, high = float(pub[published]["low"]), float(pub[published]["high"])
            entry["published Hopper"] = f"{low:g}" if low == high else f"{low:g}-{high:g}"
            if ours is not None:
                entry["verdict"] = "agrees (within 15%)" if 0.85 * low <= ours <= 1.15 * high else "differs: see text"
        out.append(entry)
    return out
