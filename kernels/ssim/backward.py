"""Backward: dL/dimg1 = G*(g dm_dmu1) + 2 img1 G*(g dm_dsigma1_sq) + img2 G*(g dm_dsigma12), where g is
dL/dmap and G the same zero-padded Gaussian blur (symmetric, so it is its own adjoint).

``run``: any dL/dmap, one tiled Numba kernel: the three products g * dm/d. are formed while loading the
tile (+5 px halo) into shared memory, then blurred separably, then combined with the two images at the
centre pixel. ``run_constant``: a dL/dmap that is one number for every pixel, as for a loss that is a
multiple of the map's sum or mean; on a GPU the CUDA C++ kernel of backward.cu, which reads no gradient map.
"""

from functools import cache

import numpy as np
from numba import cuda, float32

from kernels.harness import check, cuda_cpp, device

from . import common
from .common import GAUSS, RADIUS, WINDOW, planes, tile_params, validate
from .cuda_versions import constants

GPU_TILE = {"bx": 32, "by": 16}
SIM_TILE = {"bx": 8, "by": 8}


@cache
def build(bx: int, by: int):
    tile_shape = (3, by + 2 * RADIUS, bx + 2 * RADIUS)
    scratch_shape = (3, by + 2 * RADIUS, bx)
    nthreads = bx * by

    @cuda.jit
    def ssim_backward(img1, img2, grad, d_mu1, d_s11, d_s12, dimg1):
        p = cuda.blockIdx.z
        tid = cuda.threadIdx.y * bx + cuda.threadIdx.x
        x0, y0 = cuda.blockIdx.x * bx, cuda.blockIdx.y * by
        h, w = img1.shape[1], img1.shape[2]
        tile = cuda.shared.array(tile_shape, float32)
        scratch = cuda.shared.array(scratch_shape, float32)

        for i in range(tid, tile_shape[1] * tile_shape[2], nthreads):
            r, c = i // tile_shape[2], i % tile_shape[2]
            y, x = y0 - RADIUS + r, x0 - RADIUS + c
            if 0 <= y < h and 0 <= x < w:
                g = grad[p, y, x]
                tile[0, r, c] = g * d_mu1[p, y, x]
                tile[1, r, c] = g * d_s11[p, y, x]
                tile[2, r, c] = g * d_s12[p, y, x]
            else:
                tile[0, r, c] = float32(0.0)
                tile[1, r, c] = float32(0.0)
                tile[2, r, c] = float32(0.0)
        cuda.syncthreads()

        for i in range(tid, scratch_shape[1] * scratch_shape[2], nthreads):
            r, c = i // bx, i % bx
            s0 = s1 = s2 = float32(0.0)
            for k in range(WINDOW):
                g = GAUSS[k]
                s0 += g * tile[0, r, c + k]
                s1 += g * tile[1, r, c + k]
                s2 += g * tile[2, r, c + k]
            scratch[0, r, c] = s0
            scratch[1, r, c] = s1
            scratch[2, r, c] = s2
        cuda.syncthreads()

        ty, tx = cuda.threadIdx.y, cuda.threadIdx.x
        y, x = y0 + ty, x0 + tx
        if y < h and x < w:
            s0 = s1 = s2 = float32(0.0)
            for k in range(WINDOW):
                g = GAUSS[k]
                s0 += g * scratch[0, ty + k, tx]
                s1 += g * scratch[1, ty + k, tx]
                s2 += g * scratch[2, ty + k, tx]
            dimg1[p, y, x] = s0 + float32(2.0) * img1[p, y, x] * s1 + img2[p, y, x] * s2

    return ssim_backward


def run(img1, img2, grad_map, d_mu1, d_s11, d_s12, *, out=None, tile: dict | None = None, stream=0):
    """dL/dimg1 (N, C, H, W) from dL/dmap and the three derivative maps of a training-mode forward,
    launched on ``stream`` (a Numba stream; 0, the default stream)."""
    validate(img1, img2)
    shape = tuple(img1.shape)
    for name, a in (("grad_map", grad_map), ("d_mu1", d_mu1), ("d_s11", d_s11), ("d_s12", d_s12)):
        check.require_array(a, name, dtype=np.float32, shape=shape)
    if out is None:
        out = device.xp().empty(shape, dtype=np.float32)
    else:
        check.require_array(out, "out", dtype=np.float32, shape=shape)
        check.require_output(
            out,
            "out",
            {"img1": img1, "img2": img2, "grad_map": grad_map, "d_mu1": d_mu1, "d_s11": d_s11, "d_s12": d_s12},
        )
    t = tile_params("backward", GPU_TILE, SIM_TILE, tile)
    check.block_shape((t["bx"], t["by"]))
    n, c, h, w = shape
    grid = ((w + t["bx"] - 1) // t["bx"], (h + t["by"] - 1) // t["by"], n * c)
    build(t["bx"], t["by"])[grid, (t["bx"], t["by"]), stream](
        *(planes(a) for a in (img1, img2, grad_map, d_mu1, d_s11, d_s12, out))
    )
    return out


@cache
def b1_kernel():
    return cuda_cpp.load("ssim/backward.cu", "ssim_backward_b1")


def run_constant(img1, img2, d_mu1, d_s11, d_s12, g, *, out=None):
    """dL/dimg1 (N, C, H, W) where dL/dmap is ``g`` at every pixel (1 / pixels for the mean-SSIM loss):
    a real number, or a one-element float32 device array (a training loop's gradient, never copied to
    the host). On a GPU the CUDA C++ kernel (backward.cu); in the simulator the Numba kernel on a
    constant map."""
    xp = device.xp()
    g_dev = _device_g(g)
    if not device.on_gpu():
        grad = xp.broadcast_to(g_dev.reshape(1, 1, 1, 1), tuple(img1.shape)).copy()
        return run(img1, img2, grad, d_mu1, d_s11, d_s12, out=out)
    validate(img1, img2)
    shape = tuple(img1.shape)
    for name, a in (("d_mu1", d_mu1), ("d_s11", d_s11), ("d_s12", d_s12)):
        check.require_array(a, name, dtype=np.float32, shape=shape)
    if out is None:
        out = xp.empty(shape, dtype=np.float32)
    else:
        check.require_array(out, "out", dtype=np.float32, shape=shape)
        check.require_output(out, "out", {"img1": img1, "img2": img2, "d_mu1": d_mu1, "d_s11": d_s11, "d_s12": d_s12})
    grid, block = b1_launch(shape)
    args = (*(planes(a) for a in (img1, img2, d_mu1, d_s11, d_s12, out)), np.int32(shape[2]), np.int32(shape[3]), g_dev)
    b1_kernel()(grid, block, args)
    return out


def _device_g(g):
    """dL/dmap as a one-element float32 device array: ``g`` itself if it is one, else a new one holding it."""
    if hasattr(g, "shape"):
        check.require_array(g, "g", dtype=np.float32)
        if g.size != 1:
            raise ValueError(f"g: expected one dL/dmap value for every pixel, got an array of shape {g.shape}")
        return g.reshape(1)
    if isinstance(g, bool) or not isinstance(g, (int, float, np.integer, np.floating)) or not np.isfinite(g):
        raise ValueError(f"g: expected a finite real number or a one-element device array, got {g!r}")
    return device.xp().full(1, g, dtype=np.float32)


def b1_launch(shape) -> tuple:
    """(grid, block) of backward.cu for images of ``shape`` (N, C, H, W): one warp per output tile."""
    n, c, h, w = shape
    k = constants("ssim/backward.cu")
    return ((w + k["kCols"] - 1) // k["kCols"], (h + k["kRows"] - 1) // k["kRows"], n * c), (k["kThreads"],)


STEP_VERSIONS = {"F1": ("-DBACKWARD_LAG=0",), "F2": ()}  # step.cu's versions: their build options


def _step_options(version: str) -> tuple:
    """The build options of step.cu's ``version``; a ValueError naming the versions for any other."""
    if version not in STEP_VERSIONS:
        raise ValueError(f"version: expected one of {sorted(STEP_VERSIONS)}, got {version!r}")
    return STEP_VERSIONS[version]


@cache
def step_kernel(version: str = "F2"):
    """step.cu's kernel as ``version`` builds it (STEP_VERSIONS)."""
    return cuda_cpp.load("ssim/step.cu", "ssim_step_f1", _step_options(version))


def f1_launch(shape) -> tuple:
    """(grid, block) of step.cu for images of ``shape`` (N, C, H, W): one block of kThreads threads per
    strip of kOut columns and kRows rows."""
    n, c, h, w = shape
    k = constants("ssim/step.cu")
    return ((w + k["kOut"] - 1) // k["kOut"], (h + k["kRows"] - 1) // k["kRows"], n * c), (k["kThreads"],)


def step(img1, img2, g, *, valid: bool = False, out=None, sums=None, version: str = "F2"):
    """A whole training step of the loss g * (sum of the SSIM map, or of its valid map): (each plane's
    SSIM sum, float64 device array of N*C values; dL/dimg1), not synchronized. ``g`` as for
    ``run_constant``; ``sums`` (N*C float64, zeroed by the caller) and ``out`` may be given. On a GPU one
    launch of step.cu as ``version`` builds it (F1 or F2), which stores no derivative map; in the
    simulator a Numba forward and ``run``."""
    _step_options(version)  # refused before any work, also in the simulator, which builds no kernel
    n, c, h, w = validate(img1, img2)
    xp = device.xp()
    g_dev = _device_g(g)
    if out is None:
        out = xp.empty((n, c, h, w), dtype=np.float32)
    else:
        check.require_array(out, "out", dtype=np.float32, shape=(n, c, h, w))
        check.require_output(out, "out", {"img1": img1, "img2": img2})
    if sums is None:
        sums = xp.zeros(n * c, dtype=np.float64)
    else:
        check.require_array(sums, "sums", dtype=np.float64, shape=(n * c,))
    if not device.on_gpu():
        ssim_map, *derivs = common.run("V3-1", img1, img2, training=True)
        mask = common.mean_grad_map((n, c, h, w), 1.0, valid=valid, xp=xp, dtype=np.float32)
        sums += (ssim_map * mask).reshape(n * c, -1).sum(axis=1, dtype=np.float64)
        run(img1, img2, mask * g_dev.reshape(1, 1, 1, 1), *derivs, out=out)
        return sums, out
    grid, block = f1_launch((n, c, h, w))
    args = (planes(img1), planes(img2), planes(out), sums, np.int32(h), np.int32(w), np.int32(valid), g_dev)
    step_kernel(version)(grid, block, args)
    return sums, out
