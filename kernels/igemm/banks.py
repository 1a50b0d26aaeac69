"""Bank arithmetic for the 128x32 fp16 tile, and the experiment that times it (``smem_layout.cu``).

Shared memory has 32 banks of 4 bytes. A warp's 16-byte accesses are served a quarter-warp (8
threads, 128 bytes) at a time; within a quarter, two threads that touch different words of one bank
are serialized. The wavefronts a warp needs are the sum over its quarters of the worst bank's count
of distinct words: 4 for a conflict-free warp of 16-byte accesses.

Run ``python -m kernels.igemm.banks`` under Nsight Compute to count the conflicts:
    ncu --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,\\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum python -m kernels.igemm.banks
"""

from __future__ import annotations

import sys

BANKS, WORD = 32, 4
ACCESS_BYTES = (4, 8, 16)  # the widths wavefronts() models: a word, a pair, a 16-byte vector
# (row stride, chunk stride) in bytes; a chunk is 8 halves of one row.
LAYOUTS = {
    "row-major, 64-byte rows": (64, 16),
    "4 blocks of 128x8, no gap": (16, 2048),
    "4 blocks of 128x8, 32-byte gap": (16, 2080),
}
SOURCE_LAYOUT = "4 blocks of 128x8, 32-byte gap"


def address(layout: str, row: int, chunk: int) -> int:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    row_stride, chunk_stride = LAYOUTS[layout]
    return chunk * chunk_stride + row * row_stride


def store_addresses(layout: str) -> list[int]:
    """The copy-in: lane t writes 16 bytes of (row t // 4, chunk t % 4)."""
    return [address(layout, t // 4, t % 4) for t in range(32)]


def ldmatrix_addresses(layout: str) -> list[int]:
    """ldmatrix.x4 of a 16x16 A fragment: lane l gives row l % 16 of chunk l // 16."""
    return [address(layout, lane % 16, lane // 16) for lane in range(32)]


def banks(addr: int, nbytes: int = 16) -> list[int]:
    """The banks one access of ``nbytes`` at byte ``addr`` touches."""
    return [(addr // WORD + i) % BANKS for i in range(nbytes // WORD)]


def wavefronts(addresses: list[int], nbytes: int = 16) -> int:
    """Shared-memory wavefronts for one warp's accesses of ``nbytes`` each."""
    if nbytes not in ACCESS_BYTES:
        raise ValueError(f"nbytes: a thread's shared-memory access is one of {ACCESS_BYTES} bytes, got {nbytes!r}")
    per_phase = 128 // nbytes
    total = 0
    for start in range(0, len(addresses), per_phase):
        words: dict[int, set] = {}
        for a in addresses[start : start + per_phase]:
            for i in range(nbytes // WORD):
                word = a // WORD + i
                words.setdefault(word % BANKS, set()).add(word)
        total += max(len(w) for w in words.values())
    return total


def table() -> list[dict]:
    """Predicted wavefronts per warp (4 = conflict-free) for both patterns in every layout."""
    return [
        {
            "layout": name,
            "copy-in (st.shared.v4)": wavefronts(store_addresses(name)),
            "fragment read (ldmatrix.x4)": wavefronts(ldmatrix_addresses(name)),
        }
        for name in LAYOUTS
    ]


def measure(iters: int = 4096, blocks_per_sm: int = 8, threads: int = 512, repeat: int = 20) -> list[dict]:
    """Time both patterns in every layout on the GPU: ms and shared-memory GB/s."""
    from ..harness import cuda_cpp, device
    from ..harness.timing import benchmark

    if not device.on_gpu():
        raise RuntimeError("the bank-conflict measurement needs a GPU; wavefronts() gives the model's counts")
    import cupy

    blocks = device.properties()["sms"] * blocks_per_sm
    out = cupy.empty(blocks * threads, dtype=cupy.uint32)
    rows = []
    for pattern in ("tile_store", "tile_ldmatrix"):
        kernel = cuda_cpp.load("igemm/smem_layout.cu", pattern)
        for name, (row_stride, chunk_stride) in LAYOUTS.items():
            args = (out, cupy.int32(iters), cupy.int32(row_stride), cupy.int32(chunk_stride))
            t = benchmark(lambda kernel=kernel, args=args: kernel((blocks,), (threads,), args), repeat=repeat)
            gbps = blocks * threads * iters * 16 / (t.median_ms * 1e-3) / 1e9
            rows.append({"kernel": pattern, "problem": name, "metric": "GB/s", "value": gbps, "unit": "GB/s"})
    return rows


def main() -> int:
    """Launch each pattern and layout once, for a profiler to count the conflicts."""
    from ..harness import cuda_cpp, device

    if not device.on_gpu():
        print("needs a CUDA GPU; without one there is nothing to profile")
        return 1
    import cupy

    out = cupy.empty(512, dtype=cupy.uint32)
    for pattern in ("tile_store", "tile_ldmatrix"):
        kernel = cuda_cpp.load("igemm/smem_layout.cu", pattern)
        for name, (row_stride, chunk_stride) in LAYOUTS.items():
            kernel((1,), (128,), (out, cupy.int32(64), cupy.int32(row_stride), cupy.int32(chunk_stride)))
            cupy.cuda.runtime.deviceSynchronize()
            print(f"{pattern:14s} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
