"""The SSIM chapter's published solution and typical wrong kernels, attached to its exercises.

The wrong kernels are mistakes students make; the tests prove the checker fails them and says why.
The student edition leaves this file out (submission.TEACHER_ONLY).
"""

import numpy as np
from numba import cuda, float32

from kernels.harness.exercise import attach  # first: the harness picks the simulator

from . import bench
from .answers import pipeline_depth, train_floor
from .common import GAUSS, RADIUS, WINDOW

BX, BY = 16, 8  # small blocks: the simulator runs every thread as a Python thread


# --- ssim-ex-blur-x: the x-pass, 11 Gaussian taps along a row with zero padding -----------------


@cuda.jit
def blur_x(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    if y < h and x < w:  # the last blocks reach past the image
        acc = float32(0.0)
        for k in range(WINDOW):
            xx = x + k - RADIUS
            if 0 <= xx < w:  # outside the image the padding is zero: the tap adds nothing
                acc += GAUSS[k] * img[y, xx]
        out[y, x] = acc


def grid_of(out):
    h, w = out.shape
    return (w + BX - 1) // BX, (h + BY - 1) // BY


def launch_blur_x(out, img):
    blur_x[grid_of(out), (BX, BY)](out, img)


@cuda.jit
def blur_x_interior_only(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    # "valid" instead of "same": the outputs whose window reaches into the padding are skipped
    if y < h and RADIUS <= x < w - RADIUS:
        acc = float32(0.0)
        for k in range(WINDOW):
            acc += GAUSS[k] * img[y, x + k - RADIUS]
        out[y, x] = acc


def launch_blur_x_interior_only(out, img):
    blur_x_interior_only[grid_of(out), (BX, BY)](out, img)


@cuda.jit
def blur_x_off_by_one(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    if y < h and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            xx = x + k - RADIUS - 1  # the window starts one pixel too far left
            if 0 <= xx < w:
                acc += GAUSS[k] * img[y, xx]
        out[y, x] = acc


def launch_blur_x_off_by_one(out, img):
    blur_x_off_by_one[grid_of(out), (BX, BY)](out, img)


_k = np.arange(WINDOW) - RADIUS
UNNORMALISED = np.exp(-(_k**2) / (2 * 1.5**2)).astype(np.float32)  # exp(-k^2 / 2 sigma^2), not divided by its sum


@cuda.jit
def blur_x_unnormalised(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    if y < h and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            xx = x + k - RADIUS
            if 0 <= xx < w:
                acc += UNNORMALISED[k] * img[y, xx]
        out[y, x] = acc


def launch_blur_x_unnormalised(out, img):
    blur_x_unnormalised[grid_of(out), (BX, BY)](out, img)


attach(
    "ssim-ex-blur-x",
    solution=launch_blur_x,
    wrong={
        "border outputs skipped": (launch_blur_x_interior_only, "of the border"),
        "window off by one": (launch_blur_x_off_by_one, "shifted by 1 along axis 1"),
        "taps not normalised": (launch_blur_x_unnormalised, "times the expected value"),
    },
)


# --- ssim-ex-blur-tile: the x-pass, each block's rows and their halo staged in shared memory ----------------

TILE_X, TILE_Y = 64, 2  # threads per block: two warps along a row, two rows
TILE_W = TILE_X + 2 * RADIUS  # a tile row: the block's pixels and RADIUS more each side (a constant for Numba)


@cuda.jit
def blur_x_tile(out, img):
    tile = cuda.shared.array((TILE_Y, TILE_W), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x, y = cuda.grid(2)
    h, w = img.shape
    inside = y < h  # a thread past the last row loads nothing, but still reaches the barrier
    tile[ty, tx + RADIUS] = img[y, x] if inside and x < w else float32(0.0)  # zero padding past the right edge
    if tx < RADIUS:  # the first RADIUS threads also load the left halo
        tile[ty, tx] = img[y, x - RADIUS] if inside and x >= RADIUS else float32(0.0)
    if tx >= TILE_X - RADIUS:  # and the last RADIUS threads the right halo
        tile[ty, tx + 2 * RADIUS] = img[y, x + RADIUS] if inside and x + RADIUS < w else float32(0.0)
    cuda.syncthreads()  # the neighbours' pixels are in the tile
    if inside and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            acc += GAUSS[k] * tile[ty, tx + k]  # tile column tx + k holds pixel x + k - RADIUS
        out[y, x] = acc


def tile_grid(out):
    h, w = out.shape
    return (w + TILE_X - 1) // TILE_X, (h + TILE_Y - 1) // TILE_Y


def launch_blur_x_tile(out, img):
    blur_x_tile[tile_grid(out), (TILE_X, TILE_Y)](out, img)


# Mistakes of ssim-ex-blur-tile


def launch_blur_x_from_global(out, img):
    """ssim-ex-blur-x's kernel in this exercise's blocks: right, but every pixel read by 11 threads."""
    blur_x[tile_grid(out), (TILE_X, TILE_Y)](out, img)


@cuda.jit
def blur_x_tile_no_barrier(out, img):
    tile = cuda.shared.array((TILE_Y, TILE_W), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x, y = cuda.grid(2)
    h, w = img.shape
    inside = y < h
    tile[ty, tx + RADIUS] = img[y, x] if inside and x < w else float32(0.0)
    if tx < RADIUS:
        tile[ty, tx] = img[y, x - RADIUS] if inside and x >= RADIUS else float32(0.0)
    if tx >= TILE_X - RADIUS:
        tile[ty, tx + 2 * RADIUS] = img[y, x + RADIUS] if inside and x + RADIUS < w else float32(0.0)
    # no cuda.syncthreads(): a thread may read its neighbours' slots before they are written
    if inside and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            acc += GAUSS[k] * tile[ty, tx + k]
        out[y, x] = acc


def launch_blur_x_tile_no_barrier(out, img):
    blur_x_tile_no_barrier[tile_grid(out), (TILE_X, TILE_Y)](out, img)


@cuda.jit
def blur_x_tile_no_halo(out, img):
    tile = cuda.shared.array((TILE_Y, TILE_W), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x, y = cuda.grid(2)
    h, w = img.shape
    inside = y < h
    tile[ty, tx + RADIUS] = img[y, x] if inside and x < w else float32(0.0)  # the halo slots are never written
    cuda.syncthreads()
    if inside and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            acc += GAUSS[k] * tile[ty, tx + k]
        out[y, x] = acc


def launch_blur_x_tile_no_halo(out, img):
    blur_x_tile_no_halo[tile_grid(out), (TILE_X, TILE_Y)](out, img)


attach(
    "ssim-ex-blur-tile",
    solution=launch_blur_x_tile,
    wrong={
        "taps read from global memory": (launch_blur_x_from_global, "redundant global reads"),
        "no barrier after the loads": (launch_blur_x_tile_no_barrier, "a shared-memory race"),
        "halo not loaded": (launch_blur_x_tile_no_halo, "NaN"),
    },
)


# --- the questions: the published answers, and typical wrong ones with the part their report must name ----

attach(
    "ssim-ex-naive-v1",
    solution={"flushes_removed": 5, "barriers_kept": 10},
    wrong={"V1's eleven barriers": ({"flushes_removed": 5, "barriers_kept": 11}, "barriers_kept: not yet")},
)
attach(
    "ssim-ex-v2-model",
    solution={"best_by": 128, "total_millions": 89.5},
    wrong={"the tallest tile": ({"best_by": 1024, "total_millions": 122.2}, "best_by: not yet")},
)
attach(
    "ssim-ex-partial-sums",
    solution={"sums_per_moment": 10, "registers": 100},
    wrong={"one sum per tap": ({"sums_per_moment": 11, "registers": 110}, "sums_per_moment: not yet")},
)


V6_PROFILED = bench.profile()[1]["V6"]["thread instructions / px"]  # read off the profiler table
attach(
    "ssim-ex-beyond-count",
    solution={"model": 195, "profiler": V6_PROFILED},
    wrong={"halo rows left out": ({"model": 174, "profiler": V6_PROFILED}, "model: not yet")},
)
DEPTH = pipeline_depth()
attach(
    "ssim-ex-beyond-depth",
    solution={"kb_in_flight": DEPTH["kb"], "rows_per_warp": DEPTH["rows"]},
    wrong={
        "the whole GPU's bytes, not one SM's": (
            {"kb_in_flight": DEPTH["kb"] * 100, "rows_per_warp": DEPTH["rows"] * 100},
            "kb_in_flight: not yet",
        )
    },
)
attach(
    "ssim-ex-beyond-unroll",
    solution={"fastest_unroll": 2, "ten_rows": "slower"},
    wrong={"the more unrolled the better": ({"fastest_unroll": 4, "ten_rows": "faster"}, "fastest_unroll: not yet")},
)
FLOOR = train_floor()
attach(
    "ssim-ex-train-floor",
    solution={"megabytes": FLOOR["megabytes"], "floor_ms": FLOOR["floor_ms"]},
    wrong={
        "the forward's map counted, the images read once": (
            {"megabytes": FLOOR["megabytes"] * 10 / 11, "floor_ms": FLOOR["floor_ms"] * 10 / 11},
            "megabytes: not yet",
        )
    },
)
