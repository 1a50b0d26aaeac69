"""Memory probes (source 003, sections 6-8, 10-12, 15): the SM clock, pointer-chase latency with a
working-set sweep, cache-line and sector size, memory divergence, shared-memory latency and bank
conflicts, memory channels, and the padding kernel's local-memory spill.

Latencies come from clock64() around one thread's dependent loads, in SM cycles; ns use the clock
that ``run_clock`` measures against %globaltimer. Each ``run_<probe>`` checks its parameters
before anything is launched, then needs a GPU.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..harness import check, device, timing
from ..harness.check import positive_int
from . import common
from .common import row

SMEM_WORDS = 2048  # the shared table of smem.cu
BANKS = 32
PADDING_FILES = {
    "v0 local": "padding_v0_local.cu",
    "v1 runtime": "padding_v1_runtime.cu",
    "v2 constant": "padding_v2_constant.cu",
}
MAX_PAD_CHANNELS = 16  # the per-thread array of padding_v0/v1
PAD_BLOCK = 256


# --- the clock -----------------------------------------------------------------------------------


def run_clock(spin: int = 2**31) -> list[dict]:
    """The SM clock in MHz: clock64() cycles over %globaltimer nanoseconds while one thread spins, and
    the same cycles over the host's clock around the launch, a check of the GPU's timer (the launch and
    the copy back add a fraction of a millisecond: about 0.02% of the default spin, about a second)."""
    positive_int(spin, "spin", maximum=2**40)
    common.require_gpu("the clock probe")
    import cupy

    kernel = common.load("clock.cu", "clock_rate")
    out = cupy.zeros(2, dtype=cupy.int64)
    kernel((1,), (1,), (np.int64(1), out))  # the first launch loads the module: not timed
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    kernel((1,), (1,), (np.int64(spin), out))
    cycles, ns = (int(v) for v in out.get())
    host_ns = (time.perf_counter() - start) * 1e9
    if ns <= 0:
        raise RuntimeError(f"%globaltimer did not advance over {cycles} cycles")
    problem = f"spin {spin} cycles"
    return [
        row("clock", problem, "sm clock", cycles / ns * 1e3, "MHz"),
        row("clock", problem, "sm clock, host timer", cycles / host_ns * 1e3, "MHz"),
        row("clock", problem, "spin time", ns / 1e6, "ms"),
    ]


def ns(cycles: float) -> float:
    return cycles / common.clock_mhz() * 1e3


# --- pointer chains ------------------------------------------------------------------------------


def chain_order(slots: int, order: str, seed: int = 0) -> np.ndarray:
    """next[i]: the slot visited after slot i, one cycle through all ``slots`` slots.

    'sequential' walks 0, 1, 2, ...; 'random' a random single cycle (defeats any prefetcher and
    spreads the walk over the L2's partitions)."""
    positive_int(slots, "slots")
    if order == "sequential":
        visit = np.arange(slots)
    elif order == "random":
        visit = np.random.default_rng(seed).permutation(slots)
    else:
        raise ValueError(f"order must be 'sequential' or 'random', got {order!r}")
    nxt = np.empty(slots, dtype=np.int64)
    nxt[visit] = np.roll(visit, -1)
    return nxt


def _chain_params(nbytes: int, stride: int) -> int:
    stride = positive_int(stride, "stride")
    if stride % 8:
        raise ValueError(f"stride must be a multiple of 8 bytes (one 64-bit address per slot), got {stride}")
    nbytes = common.working_set(nbytes)
    if nbytes < stride:
        raise ValueError(f"working set ({nbytes} B) must hold at least one stride ({stride} B)")
    return nbytes // stride


def build_chain(nbytes: int, stride: int, order: str = "random", seed: int = 0):
    """A device buffer of ``nbytes`` whose slots (``stride`` bytes apart) hold the next slot's address."""
    slots = _chain_params(nbytes, stride)
    common.require_gpu("a pointer chain")
    import cupy

    buf = cupy.zeros(nbytes // 8, dtype=cupy.uint64)
    host = np.zeros(nbytes // 8, dtype=np.uint64)
    words = stride // 8
    host[np.arange(slots) * words] = np.uint64(buf.data.ptr) + chain_order(slots, order, seed).astype(
        np.uint64
    ) * np.uint64(stride)
    buf.set(host)
    return buf


def run_chase(buf, *, steps: int, warm: int = 0, l2_only: bool = False, flush: bool = False) -> float:
    """Cycles per dependent load walking ``buf`` (from ``build_chain``) for ``steps`` loads."""
    positive_int(steps, "steps", maximum=2**31 - 1)
    check.nonnegative_int(warm, "warm", maximum=2**31 - 1)
    common.require_gpu("the pointer chase")
    check.require_array(buf, "buf (from build_chain)", dtype=np.uint64, ndim=1)
    import cupy

    kernel = common.load("chase.cu", "chase_l2" if l2_only else "chase")
    cycles = cupy.zeros(1, dtype=cupy.int64)
    sink = cupy.zeros(1, dtype=cupy.uint64)
    if flush:
        timing.L2Flush()()
    kernel((1,), (1,), (np.uint64(buf.data.ptr), np.int32(warm), np.int32(steps), cycles, sink))
    return int(cycles.get()[0]) / steps


def latency_sizes(l2_bytes: int) -> list[int]:
    """Working sets from 4 KiB to 4 x L2: factors of two, eighths of L2 from L2 / 4 to 2 x L2
    (where the L2's near and far halves would show), and 4 x L2 itself, the HBM latency's set."""
    positive_int(l2_bytes, "l2_bytes")
    sizes = {2**k for k in range(12, int(math.log2(4 * l2_bytes)) + 1)}
    sizes |= {int(k / 8 * l2_bytes) // 4096 * 4096 for k in range(2, 17)}
    sizes.add(4 * l2_bytes // 4096 * 4096)
    return sorted(sizes)


def run_latency_sweep(sizes, *, stride: int = 128, steps: int = 8192, l2_only: bool = False) -> list[dict]:
    """Load latency vs working set (random chase, one load per ``stride`` bytes): L1, L2, HBM plateaus.

    The chain is walked once untimed (every slot, so the whole set is touched) when it could fit
    in L2; beyond 2 x L2 warming cannot help and is skipped, and L2 is flushed instead (writing the
    chain from the host leaves its last part in L2)."""
    for nbytes in sizes:
        _chain_params(nbytes, stride)
    positive_int(steps, "steps")
    common.require_gpu("the latency sweep")
    l2 = device.properties()["l2_bytes"]
    kernel = "chase l2" if l2_only else "chase"
    rows = []
    for nbytes in sizes:
        buf = build_chain(nbytes, stride, "random")
        slots = nbytes // stride
        warm = nbytes <= 2 * l2
        cyc = run_chase(buf, steps=steps, warm=slots if warm else 0, l2_only=l2_only, flush=not warm)
        del buf
        problem = f"{nbytes} B working set, stride {stride}"
        rows += [
            row(kernel, problem, "latency", cyc, "cycles"),
            row(kernel, problem, "latency ns", ns(cyc), "ns"),
        ]
    return rows


def hit_cases(l2_bytes: int) -> list[tuple]:
    """(metric, working set, L1 skipped, warmed) of each hit latency: L1 hit (16 KiB), L2 hit (4 MiB,
    well inside the near half of an H100's or H200's L2; a quarter of a smaller L2), L2 far hit (3/4 of
    L2: more than the near half can hold) and HBM (random over 4 x L2)."""
    positive_int(l2_bytes, "l2_bytes")
    return [
        ("L1 hit latency", 16 * 1024, False, True),
        ("L2 hit latency", min(4 * 2**20, l2_bytes // 4 // 4096 * 4096), True, True),
        ("L2 far latency", int(0.75 * l2_bytes) // 4096 * 4096, True, True),
        ("HBM latency", 4 * l2_bytes, False, False),
    ]


def run_hit_latencies(*, steps: int = 8192) -> list[dict]:
    """The numbers of the results table (``hit_cases``), cycles per load."""
    positive_int(steps, "steps")
    common.require_gpu("the hit-latency probe")
    rows = []
    for metric, nbytes, l2_only, warm in hit_cases(device.properties()["l2_bytes"]):
        buf = build_chain(nbytes, 128, "random")
        cyc = run_chase(buf, steps=steps, warm=nbytes // 128 if warm else 0, l2_only=l2_only, flush=not warm)
        del buf
        rows += [
            row("chase", f"{nbytes} B working set", metric, cyc, "cycles"),
            row("chase", f"{nbytes} B working set", metric + " ns", ns(cyc), "ns"),
        ]
    return rows


def run_cache_line(strides=(8, 16, 32, 64, 128, 256, 512), *, steps: int = 4096) -> list[dict]:
    """Mean latency of a cold sequential walk vs stride: reads that share a fetched sector/line hit.

    Each stride walks fresh memory after an L2 flush, so the first read of every sector misses."""
    positive_int(steps, "steps")
    sizes = [(s, steps * s) for s in strides]
    for s, nbytes in sizes:
        _chain_params(nbytes, s)
    common.require_gpu("the cache-line probe")
    rows = []
    for stride, nbytes in sizes:
        buf = build_chain(nbytes, stride, "sequential")
        cyc = run_chase(buf, steps=steps, flush=True)
        del buf
        rows.append(row("chase cold", f"stride {stride} B", "latency", cyc, "cycles"))
    return rows


# --- 8. memory divergence ------------------------------------------------------------------------

DIVERGENCE_BLOCK = 256


def _divergence_params(n: int, divergence: int) -> int:
    n = positive_int(n, "n", maximum=2**30)
    if isinstance(divergence, bool) or not isinstance(divergence, (int, np.integer)) or not 0 <= divergence < 32:
        raise ValueError(f"divergence is a lane mask: an integer 0 <= divergence < 32, got {divergence!r}")
    return n


def store_divergent(buf, divergence: int):
    """Write buf[x] = x (int32) through the two-address-expression kernel."""
    buf = check.require_array(buf, "buf", dtype=np.int32, ndim=1)
    n = _divergence_params(buf.shape[0], divergence)
    common.require_gpu("the memory-divergence kernel")
    mask = (1 << max(1, (n - 1).bit_length())) - 1  # covers every x: both branches store to buf[x]
    common.load("mem_divergence.cu", "store_divergent")(
        (math.ceil(n / DIVERGENCE_BLOCK),),
        (DIVERGENCE_BLOCK,),
        (buf, np.int32(n), np.int32(divergence), np.int32(mask)),
    )


def check_mem_divergence(divergence: int, n: int = 1000) -> check.CheckResult:
    """The kernel on a poisoned buffer against arange (GPU)."""
    _divergence_params(n, divergence)
    common.require_gpu("checking the memory-divergence kernel")
    import cupy

    buf = check.poison(cupy.empty(n, dtype=cupy.int32))
    store_divergent(buf, divergence)
    return check.compare(buf, np.arange(n), atol=0.0, name=f"divergent stores, mask {divergence}")


def run_mem_divergence(divergences=(0, 1, 3, 7, 15, 31), *, n: int = 2**26, repeat: int = 20) -> list[dict]:
    """GB/s of the int32 store stream for each lane mask (0: no lane takes the second expression)."""
    for d in divergences:
        _divergence_params(n, d)
    common.working_set(4 * n)
    common.require_gpu("the memory-divergence probe")
    import cupy

    buf = cupy.empty(n, dtype=cupy.int32)
    rows = []
    for d in divergences:
        t = timing.benchmark(lambda d=d: store_divergent(buf, d), warmup=2, repeat=repeat)
        rows.append(
            row(
                "store divergent",
                f"mask {d}, {n} ints",
                "bandwidth",
                4 * n / (t.median_ms * 1e-3) / 1e9,
                "GB/s",
            )
        )
    return rows


# --- 12. memory channels -------------------------------------------------------------------------

CHANNEL_BLOCK = 256


def channel_strides() -> list[int]:
    """Bytes between the lines of the channel probe: powers of two 128 B .. 64 KiB, and each of
    4 KiB .. 64 KiB padded by one 128-byte line (the source's SGEMM fix padded by 16 floats, 64 B;
    on NVIDIA that splits every line over two 128-byte segments)."""
    powers = [2**k for k in range(7, 17)]
    return sorted(powers + [s + 128 for s in powers if s >= 4096])


def channel_footprint(stride: int, lines: int) -> int:
    """Bytes from the first line the channel probe reads to the end of the last."""
    return (lines - 1) * stride + 128


def channels_that_fit(strides, lines: int, props: dict) -> tuple[list[int], str | None]:
    """The ``strides`` whose footprint fits in 90% of the GPU's memory (``props``: device.properties()),
    and one line naming those left out (None if none is). Each stride kept reads the same ``lines``
    lines as on a larger GPU, so the strides compare as they do there."""
    limit = 0.9 * props["global_mem_bytes"]
    fits = [s for s in strides if channel_footprint(s, lines) <= limit]
    out = [s for s in strides if s not in fits]
    if not out:
        return fits, None
    return fits, (
        f"left out on this GPU: the channel probe at strides {', '.join(map(str, out))} B, whose "
        f"{lines} lines span up to {channel_footprint(max(out), lines) / 2**20:,.0f} MiB, more than "
        f"90% of the GPU's {props['global_mem_bytes'] / 2**20:,.0f} MiB"
    )


def _channel_params(stride: int, lines: int) -> int:
    stride = positive_int(stride, "stride")
    if stride < 128:
        raise ValueError(
            f"stride must be >= 128 bytes (each warp reads a 128-byte line; a shorter stride "
            f"reads overlapping lines), got {stride}"
        )
    if stride % 64:
        raise ValueError(f"stride must be a multiple of 64 bytes, got {stride}")
    positive_int(lines, "lines", maximum=2**30)
    return common.working_set(channel_footprint(stride, lines), "footprint")


def run_channels(strides, *, lines: int = 2**18, repeat: int = 10) -> list[dict]:
    """GB/s reading ``lines`` 128-byte lines spaced ``stride`` bytes apart, L2 flushed before each run."""
    footprints = [_channel_params(s, lines) for s in strides]
    common.require_gpu("the memory-channel probe")
    import cupy

    kernel = common.load("channels.cu", "strided_lines")
    buf = cupy.zeros(max(footprints) // 4 + 32, dtype=cupy.float32)
    blocks = common.sms() * 8
    sink = cupy.empty(blocks * CHANNEL_BLOCK, dtype=cupy.float32)
    rows = []
    for s in strides:
        t = timing.benchmark(
            lambda s=s: kernel((blocks,), (CHANNEL_BLOCK,), (buf, np.int64(s // 4), np.int32(lines), sink)),
            warmup=1,
            repeat=repeat,
            flush_l2=True,
        )
        rows.append(
            row(
                "strided lines",
                f"stride {s} B, {lines} lines",
                "bandwidth",
                128 * lines / (t.median_ms * 1e-3) / 1e9,
                "GB/s",
            )
        )
    return rows


# --- shared memory -------------------------------------------------------------------------------


def bank_ways(stride: int, *, lanes: int = 32, banks: int = BANKS, words: int = SMEM_WORDS) -> int:
    """The most distinct 4-byte words one bank must serve when lane l reads word (l * stride) % words."""
    for value, name in ((stride, "stride"), (lanes, "lanes"), (banks, "banks"), (words, "words")):
        positive_int(value, name)
    addresses = {(lane * stride) % words for lane in range(lanes)}
    per_bank = np.bincount([a % banks for a in addresses], minlength=banks)
    return int(per_bank.max())


def run_smem_latency(*, steps: int = 4096, words: int = 256) -> list[dict]:
    """Cycles per dependent shared-memory load, one thread (a random cycle over ``words`` words)."""
    positive_int(steps, "steps")
    positive_int(words, "words", maximum=SMEM_WORDS)
    common.require_gpu("the shared-memory latency probe")
    import cupy

    kernel = common.load("smem.cu", "smem_latency")
    nxt = cupy.asarray(chain_order(words, "random").astype(np.int32))
    cycles = cupy.zeros(1, dtype=cupy.int64)
    sink = cupy.zeros(1, dtype=cupy.int32)
    kernel((1,), (32,), (nxt, np.int32(words), np.int32(steps), cycles, sink))
    cyc = int(cycles.get()[0]) / steps
    return [
        row("smem chase", f"{words} words", "shared-memory latency", cyc, "cycles"),
        row("smem chase", f"{words} words", "shared-memory latency ns", ns(cyc), "ns"),
    ]


def run_bank_conflicts(strides=range(1, 34), *, steps: int = 4096) -> list[dict]:
    """Cycles per warp-wide shared load when lane l reads word l * stride, for each stride."""
    strides = [positive_int(s, "stride", maximum=SMEM_WORDS) for s in strides]
    positive_int(steps, "steps")
    common.require_gpu("the bank-conflict probe")
    import cupy

    kernel = common.load("smem.cu", "smem_banks")
    cycles = cupy.zeros(1, dtype=cupy.int64)
    sink = cupy.zeros(32, dtype=cupy.int32)
    rows = []
    for s in strides:
        kernel((1,), (32,), (np.int32(s), np.int32(steps), cycles, sink))
        rows.append(
            row(
                "smem banks",
                f"stride {s}",
                "latency",
                int(cycles.get()[0]) / steps,
                "cycles",
            )
        )
    return rows


# --- 15. the padding kernel ----------------------------------------------------------------------


def pad_reference(x: np.ndarray, p: int) -> np.ndarray:
    """Zero padding of the last two axes by ``p``, in float64."""
    p = check.nonnegative_int(p, "p (padding)")
    if np.ndim(x) != 4:
        raise ValueError(f"x: expected a 4-D array (N, C, H, W), got shape {np.shape(x)}")
    return np.pad(np.asarray(x, dtype=np.float64), ((0, 0), (0, 0), (p, p), (p, p)))


def padding_plan(version: str, channels: int, shape, p: int) -> tuple:
    """Grid and block of the padding kernel, or a ValueError naming the broken constraint."""
    if version not in PADDING_FILES:
        raise ValueError(f"version must be one of {sorted(PADDING_FILES)}, got {version!r}")
    if len(shape) != 4:
        raise ValueError(f"shape must be (N, C, H, W), got {shape}")
    n, c, h, w = (positive_int(v, name) for v, name in zip(shape, "NCHW", strict=True))
    positive_int(channels, "channels", maximum=MAX_PAD_CHANNELS)
    p = check.nonnegative_int(p, "p (padding)")  # a fraction would leave part of the border unwritten
    if c % channels:
        raise ValueError(f"C = {c} must be a multiple of channels per thread = {channels}")
    grid = (math.ceil((h + 2 * p) * (w + 2 * p) / PAD_BLOCK), c // channels, n)
    if grid[1] > check.MAX_GRID_DIM[1] or grid[2] > check.MAX_GRID_DIM[2]:
        raise ValueError(f"grid {grid} exceeds the device's limits {check.MAX_GRID_DIM}")
    return grid, (PAD_BLOCK,)


def pad(version: str, x, out, channels: int, p: int):
    """Launch one padding version: x is (N, C, H, W) float32, out (N, C, H + 2p, W + 2p)."""
    x = check.require_array(x, "x", dtype=np.float32, ndim=4)
    n, c, h, w = x.shape
    grid, block = padding_plan(version, channels, x.shape, p)
    check.require_array(out, "out", dtype=np.float32, shape=(n, c, h + 2 * p, w + 2 * p))
    check.require_output(out, "out", {"x": x})
    common.require_gpu("the padding kernel")
    defines = {"CHANNELS": channels} if version == "v2 constant" else None
    kernel = common.load(PADDING_FILES[version], "pad", defines)
    kernel(grid, block, (x, out, np.int32(channels), np.int32(c), np.int32(h), np.int32(w), np.int32(p)))


def check_padding(
    version: str, channels: int, *, shape=(2, 32, 7, 7), p: int = 3, seed: int | None = None
) -> check.CheckResult:
    """One padding version on fresh random input with poisoned output, against NumPy (GPU)."""
    padding_plan(version, channels, shape, p)
    common.require_gpu("checking the padding kernel")
    import cupy

    x = cupy.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))
    out = check.poison(cupy.empty((*shape[:2], shape[2] + 2 * p, shape[3] + 2 * p), dtype=cupy.float32))
    pad(version, x, out, channels, p)
    return check.compare(out, pad_reference(x.get(), p), atol=0.0, name=f"padding {version}, {channels} ch")


def run_padding(versions, channels_list, *, shape=(1024, 1024, 7, 7), p: int = 3, repeat: int = 10) -> list[dict]:
    """GB/s (bytes read + written) of each padding version and channels per thread."""
    plan = [(v, ch) for v in versions for ch in channels_list]
    for v, ch in plan:
        padding_plan(v, ch, shape, p)
    n, c, h, w = shape
    nbytes = 4 * n * c * (h * w + (h + 2 * p) * (w + 2 * p))
    common.working_set(nbytes)
    common.require_gpu("the padding probe")
    import cupy

    x = cupy.random.random(shape, dtype=cupy.float32)
    out = cupy.empty((n, c, h + 2 * p, w + 2 * p), dtype=cupy.float32)
    rows = []
    for version, ch in plan:
        t = timing.benchmark(lambda version=version, ch=ch: pad(version, x, out, ch, p), warmup=2, repeat=repeat)
        rows.append(
            row(
                f"padding {version}",
                f"{n}x{c}x{h}x{w} pad {p}, {ch} ch/thread",
                "bandwidth",
                nbytes / (t.median_ms * 1e-3) / 1e9,
                "GB/s",
            )
        )
    return rows
