"""The implicit-GEMM chapter's published answers and typical wrong ones, attached to its exercises.

The wrong answers are mistakes students make; the tests prove the checker fails them and names the part.
The student edition leaves this file out (scripts/student_edition.py).
"""

import numpy as np

from kernels.harness import device, results
from kernels.harness.exercise import attach

# --- igemm-ex-banks ------------------------------------------------------------------------------------
# S = 2048 is 512 words, 0 mod 32: threads 0-3 start at bank 0, 4-7 at bank 4. S = 2080 is 520 words,
# 8 mod 32: 8 (t mod 4) + 4 (t / 4). A 16-byte gap puts thread 1 and thread 4 both on bank 4.
BANKS_2080 = {0, 8, 16, 24, 4, 12, 20, 28}
attach(
    "igemm-ex-banks",
    {"banks_2048": {0, 4}, "banks_2080": BANKS_2080, "gap_bytes": 32},
    {
        "16-byte gap": ({"banks_2048": {0, 4}, "banks_2080": BANKS_2080, "gap_bytes": 16}, "gap_bytes: not yet"),
        "banks in bytes": (
            {"banks_2048": [0, 16], "banks_2080": {4 * b for b in BANKS_2080}, "gap_bytes": 32},
            "banks_2048: not yet",
        ),
    },
)


# --- igemm-ex-khalf ------------------------------------------------------------------------------------
def _k90(kernel: str) -> float:
    """9 K_1/2 from a least-squares line through the stored sweep's (K, ms), solved here without common.py."""
    slugs = ([device.environment()["gpu_slug"]] if device.on_gpu() else []) + [results.REFERENCE_GPU]
    for slug in slugs:
        points = [
            (int(problem[2:]), float(row["value"]))
            for (name, problem, metric), row in results.latest("igemm", slug).items()
            if name == kernel and metric == "ms" and problem.startswith("K=")
        ]
        if len(points) >= 2:
            k, ms = np.array(points).T
            (per_k, head), *_ = np.linalg.lstsq(np.stack([k, np.ones_like(k)], axis=1), ms, rcond=None)
            return 9 * head / per_k
    raise LookupError(f"no stored sweep of {kernel!r}")


attach(
    "igemm-ex-khalf",
    {"k90_cublas": _k90("cublas_gemm"), "k90_ours": _k90("igemm_gemm"), "v100_khalf": 32 * (95 / 20 - 1)},
    {
        "K_1/2 for K_90": (
            {"k90_cublas": _k90("cublas_gemm") / 9, "k90_ours": _k90("igemm_gemm"), "v100_khalf": 120},
            "k90_cublas: not yet",
        ),
        "ratio the wrong way up": (
            {"k90_cublas": _k90("cublas_gemm"), "k90_ours": _k90("igemm_gemm"), "v100_khalf": 32 * (20 / 95 - 1)},
            "v100_khalf: not yet",
        ),
    },
)

# --- igemm-ex-warptile ---------------------------------------------------------------------------------
attach(
    "igemm-ex-warptile",
    {"bytes_32x32": 1 / 8, "bytes_64x64": 1 / 16, "bytes_64x128": 3 / 64, "limit": "registers"},
    {
        "halves, not bytes": (
            {"bytes_32x32": 1 / 16, "bytes_64x64": 1 / 32, "bytes_64x128": 3 / 128, "limit": "registers"},
            "bytes_32x32: not yet",
        ),
        "blames shared memory": (
            {"bytes_32x32": 1 / 8, "bytes_64x64": 1 / 16, "bytes_64x128": 3 / 64, "limit": "shared memory"},
            "limit: not yet",
        ),
    },
)

# --- igemm-ex-setmaxnreg -------------------------------------------------------------------------------
attach(
    "igemm-ex-setmaxnreg",
    {"freed": 128 * 64, "taken": 256 * 32, "freed_with_112": 128 * 56, "accumulators": 256},
    {
        "one warp, not a warpgroup": (
            {"freed": 32 * 64, "taken": 256 * 32, "freed_with_112": 128 * 56, "accumulators": 256},
            "freed: not yet",
        ),
        "accumulators per warp": (
            {"freed": 128 * 64, "taken": 256 * 32, "freed_with_112": 128 * 56, "accumulators": 1024},
            "accumulators: not yet",
        ),
    },
)
