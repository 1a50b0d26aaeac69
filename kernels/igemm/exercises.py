"""Auto-checked exercises of the implicit-GEMM chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/05_implicit_gemm.ipynb. Every
answer is computed when the student checks: the bank arithmetic by ``banks``, K from the stored GEMM sweep's
fit (this GPU's rows, else the reference GPU's) and the source's V100 chart, the register arithmetic from the
numbers the exercise gives. The published answers and typical wrong ones are in solutions.py.
"""

import csv
from pathlib import Path

from kernels.harness import device, results
from kernels.harness.exercise import Part, Question, register

from . import banks
from .choice import fit_head_tail, k_half

SEEDS = Path(__file__).resolve().parents[2] / "data" / "seeds" / "igemm_v100.csv"

# --- igemm-ex-banks: the copy-in of the chunk-blocked tile -----------------------------------------


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


register(
    Question(
        label="igemm-ex-banks",
        task="the first banks of threads 0-7 with S = 2048 and S = 2080, and the smallest gap above 2048 that works",
        parts={
            "banks_2048": Part(lambda: first_banks(0), "first bank = (offset / 4) mod 32"),
            "banks_2080": Part(lambda: first_banks(32), "S = 2080 is 520 words: what is 520 mod 32?"),
            "gap_bytes": Part(smallest_gap, "try gaps of 16, 32, ... bytes; threads 1 and 4 must not share a bank"),
        },
    )
)

# --- igemm-ex-khalf: where the GEMM rate flattens ----------------------------------------------------


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


register(
    Question(
        label="igemm-ex-khalf",
        task="K at 90% of the asymptotic rate for cuBLAS and for our step (from the sweep's fit), "
        "and the V100's K_1/2 from its chart",
        parts={
            "k90_cublas": Part(lambda: k_at(0.9, "cublas_gemm"), "solve K / (K + K_1/2) = 0.9 with cuBLAS's fit", 0.05),
            "k90_ours": Part(lambda: k_at(0.9, "igemm_gemm"), "the same with our step's fitted K_1/2", 0.05),
            "v100_khalf": Part(v100_k_half, "solve R(32) / R_inf = 32 / (32 + K_1/2) with the chart's two rates", 0.05),
        },
    )
)

# --- igemm-ex-warptile: bytes per multiply-add of a warp tile ---------------------------------------


def bytes_per_mac(wm: int, wn: int) -> float:
    """Shared-memory bytes per multiply-add: (wm + wn) x 16 halves read per 16-wide slice, wm wn 16 MACs."""
    return (wm + wn) * 16 * 2 / (wm * wn * 16)


def warp_tile_limit() -> str:
    """What stops 64x128: its fp32 accumulators per thread against the registers a thread can address."""
    return "registers" if 64 * 128 // 32 > 255 else "shared memory"


register(
    Question(
        label="igemm-ex-warptile",
        task="bytes per multiply-add of 32x32, 64x64 and 64x128 warp tiles, and what limits the largest",
        parts={
            "bytes_32x32": Part(lambda: bytes_per_mac(32, 32), "2 (W_m + W_n) / (W_m W_n) bytes"),
            "bytes_64x64": Part(lambda: bytes_per_mac(64, 64), "2 (W_m + W_n) / (W_m W_n) bytes"),
            "bytes_64x128": Part(lambda: bytes_per_mac(64, 128), "2 (W_m + W_n) / (W_m W_n) bytes"),
            "limit": Part(warp_tile_limit, "count the fp32 accumulators one thread of the warp holds (one word)"),
        },
    )
)

# --- igemm-ex-setmaxnreg: step 7's register split ---------------------------------------------------

THREADS, WARPGROUP, BLOCK_REGISTERS = 384, 128, 168  # the block of step 7 and ptxas's registers per thread
PRODUCER, CONSUMER = 104, 200  # setmaxnreg's counts in v7_warp_specialized.cu


def setmaxnreg(producer: int = PRODUCER, consumer: int = CONSUMER) -> dict[str, int]:
    """Registers the producer warpgroup frees and the two consumer warpgroups take."""
    return {
        "freed": WARPGROUP * (BLOCK_REGISTERS - producer),
        "taken": (THREADS - WARPGROUP) * (consumer - BLOCK_REGISTERS),
    }


register(
    Question(
        label="igemm-ex-setmaxnreg",
        task="registers freed by the producer and taken by the consumers (104/200, then 112/200), "
        "and accumulators per thread of a 128x256 warpgroup tile",
        parts={
            "freed": Part(lambda: setmaxnreg()["freed"], "128 threads, each giving back what setmaxnreg drops"),
            "taken": Part(lambda: setmaxnreg()["taken"], "256 threads, each taking what it gets above 168"),
            "freed_with_112": Part(lambda: setmaxnreg(producer=112)["freed"], "the same with 112"),
            "accumulators": Part(lambda: 128 * 256 // WARPGROUP, "one fp32 accumulator per output, over 128 threads"),
        },
    )
)
