"""The implicit-GEMM chapter's published answers and kernels and typical wrong ones, attached to its exercises.

The wrong ones are mistakes students make; the tests prove the checker fails them and says why.
The student edition leaves this file out (scripts/student_edition.py).
"""

import numpy as np
from numba import cuda, float32

from kernels.harness import device, results
from kernels.harness.exercise import attach

from .exercises import TILE, im2col_element, pixel_of

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


# --- igemm-ex-tile: the implicit GEMM's tiled inner loop -------------------------------------------------------


@cuda.jit
def igemm_tile(y, x, b):
    a_tile = cuda.shared.array((TILE, TILE), float32)  # A[m0 + i, kk0 + j]: TILE pixels, TILE taps
    b_tile = cuda.shared.array((TILE, TILE), float32)  # B[kk0 + i, k0 + j]: TILE taps, TILE filters
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_img, height, width, n_out = y.shape
    pixels, taps = n_img * height * width, b.shape[0]
    m = cuda.blockIdx.y * TILE + ty  # this thread's pixel: its row of A and of the output
    k = cuda.blockIdx.x * TILE + tx  # its filter: its column of B and of the output
    acc = float32(0.0)
    for kk0 in range(0, taps, TILE):
        # each thread loads one element of each tile; the lanes of a warp run along a row of A (neighbouring
        # channels of one input pixel) and along a row of B (neighbouring filters): both loads coalesced
        kk = kk0 + tx
        a_tile[ty, tx] = im2col_element(x, m, kk) if m < pixels and kk < taps else float32(0.0)
        kk = kk0 + ty
        b_tile[ty, tx] = b[kk, k] if kk < taps and k < n_out else float32(0.0)
        cuda.syncthreads()  # both tiles written
        for j in range(TILE):
            acc += a_tile[ty, j] * b_tile[j, tx]  # a broadcast of A's row, a row of B: no bank conflict
        cuda.syncthreads()  # every thread done with the tiles before the next step overwrites them
    if m < pixels and k < n_out:
        n, row, col = pixel_of(m, height, width)
        y[n, row, col, k] = acc


def tile_grid(y, b):
    pixels = y.shape[0] * y.shape[1] * y.shape[2]
    return (b.shape[1] + TILE - 1) // TILE, (pixels + TILE - 1) // TILE


def launch_igemm_tile(y, x, b):
    igemm_tile[tile_grid(y, b), (TILE, TILE)](y, x, b)


# Mistakes of igemm-ex-tile


@cuda.jit
def igemm_no_tiles(y, x, b):
    k, m = cuda.grid(2)
    n_img, height, width, n_out = y.shape
    if m < n_img * height * width and k < n_out:
        acc = float32(0.0)
        for kk in range(b.shape[0]):  # two global reads per multiply-add, as step 1
            acc += im2col_element(x, m, kk) * b[kk, k]
        n, row, col = pixel_of(m, height, width)
        y[n, row, col, k] = acc


def launch_igemm_no_tiles(y, x, b):
    igemm_no_tiles[tile_grid(y, b), (TILE, TILE)](y, x, b)


@cuda.jit
def igemm_tile_one_barrier(y, x, b):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_img, height, width, n_out = y.shape
    pixels, taps = n_img * height * width, b.shape[0]
    m = cuda.blockIdx.y * TILE + ty
    k = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for kk0 in range(0, taps, TILE):
        kk = kk0 + tx
        a_tile[ty, tx] = im2col_element(x, m, kk) if m < pixels and kk < taps else float32(0.0)
        kk = kk0 + ty
        b_tile[ty, tx] = b[kk, k] if kk < taps and k < n_out else float32(0.0)
        cuda.syncthreads()
        for j in range(TILE):
            acc += a_tile[ty, j] * b_tile[j, tx]
        # no second barrier: a fast thread's next loads overwrite what a slow one still reads
    if m < pixels and k < n_out:
        n, row, col = pixel_of(m, height, width)
        y[n, row, col, k] = acc


def launch_igemm_tile_one_barrier(y, x, b):
    igemm_tile_one_barrier[tile_grid(y, b), (TILE, TILE)](y, x, b)


@cuda.jit
def igemm_tile_a_transposed(y, x, b):
    a_tile = cuda.shared.array((TILE, TILE), float32)  # A stored tap-major: a_tile[j, i] = A[m0 + i, kk0 + j]
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_img, height, width, n_out = y.shape
    pixels, taps = n_img * height * width, b.shape[0]
    m = cuda.blockIdx.y * TILE + ty
    k = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for kk0 in range(0, taps, TILE):
        kk = kk0 + tx
        a_tile[tx, ty] = im2col_element(x, m, kk) if m < pixels and kk < taps else float32(0.0)  # lanes a column
        kk = kk0 + ty
        b_tile[ty, tx] = b[kk, k] if kk < taps and k < n_out else float32(0.0)
        cuda.syncthreads()
        for j in range(TILE):
            acc += a_tile[j, ty] * b_tile[j, tx]
        cuda.syncthreads()
    if m < pixels and k < n_out:
        n, row, col = pixel_of(m, height, width)
        y[n, row, col, k] = acc


def launch_igemm_tile_a_transposed(y, x, b):
    igemm_tile_a_transposed[tile_grid(y, b), (TILE, TILE)](y, x, b)


attach(
    "igemm-ex-tile",
    solution=launch_igemm_tile,
    wrong={
        "no tiles: step 1 in fp32": (launch_igemm_no_tiles, "redundant global reads"),
        "no barrier before the next step's loads": (launch_igemm_tile_one_barrier, "a shared-memory race"),
        "the A tile stored tap-major": (launch_igemm_tile_a_transposed, "bank conflicts"),
    },
)
