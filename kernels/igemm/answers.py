"""The expected answers of the implicit-GEMM chapter's questions (exercises.py), for the checker and the tests.

Teacher-only: the student edition leaves this file out and checks digests of these values instead. Every
answer is computed when the student checks: the bank arithmetic by ``banks``, K from the fit of the GEMM
sweep stored for the GPU the page ran on and from the source's V100 chart, the register arithmetic from the
numbers the exercise gives.
"""

import csv
from pathlib import Path

from kernels.harness import device, results
from kernels.harness.exercise import answers

from . import banks
from .choice import fit_head_tail, k_half

SEEDS = Path(__file__).resolve().parents[2] / "data" / "seeds" / "igemm_v100.csv"


def copy_in_addresses(gap: int) -> list[int]:
    """A warp's copy-in when the 4 blocks of 128 rows x 16 bytes lie 2048 + ``gap`` bytes apart:
    thread t writes chunk t % 4 of row t // 4."""
    return [(t % 4) * (2048 + gap) + (t // 4) * 16 for t in range(32)]


def fragment_addresses(gap: int) -> list[int]:
    """ldmatrix.x4 of a 16x16 fragment in the same layout: lane l gives row l % 16 of chunk l // 16."""
    return [(lane // 16) * (2048 + gap) + (lane % 16) * 16 for lane in range(32)]


def first_banks(gap: int) -> set[int]:
    """The banks threads 0-7 start at (as a set: which banks the first quarter-warp starts on)."""
    return {banks.banks(a)[0] for a in copy_in_addresses(gap)[:8]}


def smallest_gap() -> int:
    """The smallest gap, in 16-byte steps above none, that makes both patterns conflict-free (4 wavefronts)."""
    return next(
        g
        for g in range(16, 2048, 16)
        if banks.wavefronts(copy_in_addresses(g)) == 4 and banks.wavefronts(fragment_addresses(g)) == 4
    )


answers(
    "igemm-ex-banks",
    banks_2048=lambda: first_banks(0),
    banks_2080=lambda: first_banks(32),
    gap_bytes=smallest_gap,
)


def sweep_fit(kernel: str) -> tuple[float, float]:
    """(head ms, ms per unit of K) fitted to the newest stored sweep of ``kernel`` (cublas_gemm, igemm_gemm):
    this GPU's rows where it has them, else the reference GPU's, as the notebook shows them."""
    slugs = ([device.environment()["gpu_slug"]] if device.on_gpu() else []) + [results.REFERENCE_GPU]
    for slug in slugs:
        rows = {
            key[1]: float(r["value"])
            for key, r in results.latest("igemm", slug).items()
            if key[0] == kernel and key[2] == "ms" and key[1].startswith("K=")
        }
        if len(rows) >= 2:
            ks = sorted(rows, key=lambda p: int(p[2:]))
            return fit_head_tail([int(p[2:]) for p in ks], [rows[p] for p in ks])
    raise LookupError(f"no stored GEMM sweep of {kernel!r}: run notebooks/05_implicit_gemm.ipynb on a GPU")


def k_at(fraction: float, kernel: str) -> float:
    """The K at which ``kernel`` reaches ``fraction`` of its asymptotic rate: R(K) = R_inf K / (K + K_1/2)."""
    return fraction / (1 - fraction) * k_half(*sweep_fit(kernel))


def v100_k_half() -> float:
    """K_1/2 that the source's V100 chart implies: R(32) / R_inf = 32 / (32 + K_1/2)."""
    rows = {r["problem"]: float(r["value"]) for r in csv.DictReader(SEEDS.open()) if r["kernel"] == "cuDNN GEMM"}
    return 32 * (rows["M=N=4096 K large (plateau)"] / rows["M=N=4096 K=32"] - 1)


answers(
    "igemm-ex-khalf",
    k90_cublas=lambda: k_at(0.9, "cublas_gemm"),
    k90_ours=lambda: k_at(0.9, "igemm_gemm"),
    v100_khalf=v100_k_half,
)


def bytes_per_mac(wm: int, wn: int) -> float:
    """Shared-memory bytes per multiply-add: (wm + wn) x 16 halves read per 16-wide slice, wm wn 16 MACs."""
    return (wm + wn) * 16 * 2 / (wm * wn * 16)


def warp_tile_limit() -> str:
    """What stops 64x128: its fp32 accumulators per thread against the registers a thread can address."""
    return "registers" if 64 * 128 // 32 > 255 else "shared memory"


answers(
    "igemm-ex-warptile",
    bytes_32x32=lambda: bytes_per_mac(32, 32),
    bytes_64x64=lambda: bytes_per_mac(64, 64),
    bytes_64x128=lambda: bytes_per_mac(64, 128),
    limit=warp_tile_limit,
)


THREADS, WARPGROUP, BLOCK_REGISTERS = 384, 128, 168  # the block of step 7 and ptxas's registers per thread


PRODUCER, CONSUMER = 104, 200  # setmaxnreg's counts in v7_warp_specialized.cu


def setmaxnreg(producer: int = PRODUCER, consumer: int = CONSUMER) -> dict[str, int]:
    """Registers the producer warpgroup frees and the two consumer warpgroups take."""
    return {
        "freed": WARPGROUP * (BLOCK_REGISTERS - producer),
        "taken": (THREADS - WARPGROUP) * (consumer - BLOCK_REGISTERS),
    }


answers(
    "igemm-ex-setmaxnreg",
    freed=lambda: setmaxnreg()["freed"],
    taken=lambda: setmaxnreg()["taken"],
    freed_with_112=lambda: setmaxnreg(producer=112)["freed"],
    accumulators=lambda: 128 * 256 // WARPGROUP,
)
