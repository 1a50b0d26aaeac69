"""The machine's ceilings, measured in the same run as the kernels they judge.

``measure()`` times three small kernels from ``kernels/machine``: a device-to-device copy (DRAM
bandwidth, bytes read + written), independent FMA chains (FP32 rate) and a conflict-free
shared-memory stream (shared-memory bandwidth). ``peaks()`` gives the theoretical numbers the
datasheet is built from: unit counts times clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import device
from .check import block_shape, positive_int
from .timing import benchmark

# FP32 lanes per SM by compute capability (CUDA programming guide, arithmetic instruction table).
FP32_LANES_PER_SM = {"70": 64, "75": 64, "80": 64, "86": 128, "87": 128, "89": 128, "90": 128, "100": 128, "120": 128}
SMEM_BYTES_PER_CLOCK_PER_SM = 128  # 32 banks x 4 bytes


@dataclass(frozen=True)
class Ceilings:
    """Measured rates: GB/s for memories, GFLOP/s for arithmetic."""

    copy_gbps: float
    fma_gflops: float
    smem_gbps: float


def peaks(props: dict | None = None) -> dict:
    """Theoretical DRAM GB/s, FP32 GFLOP/s and shared-memory GB/s from the device's units and clocks."""
    p = props or device.properties()
    lanes = fp32_lanes_per_sm(p)
    clock_ghz = p["max_sm_clock_mhz"] / 1000
    return {
        # double data rate: two transfers per memory clock
        "dram_gbps": 2 * p["mem_clock_mhz"] * 1e6 * p["bus_width_bits"] / 8 / 1e9,
        "fp32_gflops": 2 * lanes * p["sms"] * clock_ghz,
        "smem_gbps": SMEM_BYTES_PER_CLOCK_PER_SM * p["sms"] * clock_ghz,
    }


def fp32_lanes_per_sm(props: dict) -> int:
    """The FP32 lanes of one SM of the chip ``props`` describes: its own compute capability
    (``hardware_cc``) where ``BOOK_MAX_CC`` lowered the compile target, since the kernels run on that chip."""
    cc = props.get("hardware_cc", props["cc"])
    if cc not in FP32_LANES_PER_SM:
        raise ValueError(f"no FP32 lane count known for compute capability {cc}")
    return FP32_LANES_PER_SM[cc]


def measure_copy(nbytes: int = 1 << 30, repeat: int = 20) -> float:
    """GB/s of a device-to-device memcpy of ``nbytes`` (bytes read + written)."""
    from ..machine.copy import bytes_moved, memcpy_d2d

    if positive_int(nbytes, "nbytes") < 4:
        raise ValueError(f"nbytes must be at least 4, got {nbytes}")
    _require_gpu("measuring the copy ceiling")
    import cupy

    free = cupy.cuda.runtime.memGetInfo()[0]
    if 2 * nbytes > free:
        raise ValueError(f"a copy of {nbytes} bytes needs {2 * nbytes} bytes of GPU memory; {free} are free")
    src = cupy.random.random(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    t = benchmark(lambda: memcpy_d2d(dst, src), repeat=repeat)
    return bytes_moved(src.nbytes) / (t.median_ms * 1e-3) / 1e9


def measure_fma(
    iters: int = 512, unroll: int = 16, blocks_per_sm: int = 8, threads: int = 256, repeat: int = 20
) -> float:
    """GFLOP/s of independent FP32 FMA chains filling every SM."""
    for value, name in ((iters, "iters"), (unroll, "unroll"), (blocks_per_sm, "blocks_per_sm")):
        positive_int(value, name)
    block_shape(threads)
    _require_gpu("measuring the FMA ceiling")
    import cupy
    import numpy as np

    from ..machine.fma import flops, fma_kernel

    n = device.properties()["sms"] * blocks_per_sm * threads
    out = cupy.empty(n, dtype=cupy.float32)
    kernel = fma_kernel(unroll)[n // threads, threads]
    b, c = np.float32(0.999), np.float32(0.001)
    t = benchmark(lambda: kernel(out, iters, b, c), repeat=repeat)
    return flops(n, iters, unroll) / (t.median_ms * 1e-3) / 1e9


def measure_smem(iters: int = 4096, blocks_per_sm: int = 4, threads: int = 512, repeat: int = 20) -> float:
    """GB/s of conflict-free 16-byte shared-memory reads on every SM."""
    positive_int(iters, "iters", maximum=2**31 - 1)
    positive_int(blocks_per_sm, "blocks_per_sm")
    block_shape(threads)
    _require_gpu("measuring the shared-memory ceiling")
    import cupy

    from .cuda_cpp import load

    kernel = load("machine/smem_read.cu", "smem_read")
    blocks = device.properties()["sms"] * blocks_per_sm
    out = cupy.empty(blocks * threads, dtype=cupy.float32)
    t = benchmark(lambda: kernel((blocks,), (threads,), (out, cupy.int32(iters), cupy.int32(32))), repeat=repeat)
    return blocks * threads * iters * 16 / (t.median_ms * 1e-3) / 1e9


def measure() -> Ceilings:
    """All three ceilings (about a second on a recent GPU)."""
    _require_gpu("measuring ceilings")
    return Ceilings(copy_gbps=measure_copy(), fma_gflops=measure_fma(), smem_gbps=measure_smem())


def _require_gpu(what: str):
    if device.MODE != device.GPU:
        raise RuntimeError(f"{what} needs a GPU; this run uses the CUDA simulator")
