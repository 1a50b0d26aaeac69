"""Launch the CUDA C++ versions (V3, V4-1, V4 and later .cu files) through CuPy.

Their block geometry is a set of compile-time constants in each .cu file; the grid is computed from
those same constants, read from the source, so the two cannot disagree.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

from kernels.harness import cuda_cpp, device

from . import registry
from .common import planes

GPU_TILE: dict = {}  # the geometry is fixed in each .cu file
SIM_TILE: dict = {}
_CONSTANT = re.compile(r"constexpr int (\w+) = ([^;]+);")
HEADER = cuda_cpp.source_path("ssim/ssim_common.cuh")  # the constants every .cu file includes


def unsupported(version: str, props: dict) -> str | None:
    """Why the GPU described by ``props`` (device.properties()) cannot run ``version``, or None.

    Only the compute capability matters: every version's static shared memory (5 KB at most) is far
    below the 48 KB any GPU gives a block."""
    needs = registry.get(version).needs_cc
    if int(props["cc"]) < needs:
        return f"{version} copies rows with cp.async, which needs sm_{needs} or later; this GPU is sm_{props['cc']}"
    return None


def runnable(versions) -> list[str]:
    """The ``versions`` the target GPU can run (``device.target_properties()``: this GPU, or without one the
    reference GPU, under ``BOOK_MAX_CC`` as capped), printing one line for each left out."""
    props = device.target_properties()
    kept = []
    for v in versions:
        if why := unsupported(v, props):
            print(f"left out on this GPU: {why}")
        else:
            kept.append(v)
    return kept


def require_runnable(version: str) -> None:
    """A RuntimeError saying why, where the target GPU (``runnable``'s) cannot run ``version`` (instead of a
    compiler error)."""
    if why := unsupported(version, device.target_properties()):
        raise RuntimeError(why)


def _record(version: str) -> registry.Version:
    record = registry.get(version)
    if record.language != "cuda":
        raise ValueError(f"{version} is a Numba version, not CUDA C++")
    return record


def source(version: str) -> str:
    """The .cu path (relative to kernels/) of a CUDA C++ version."""
    return f"ssim/{_record(version).file}"


def kernel_name(version: str) -> str:
    """The entry point of a CUDA C++ version's map kernel."""
    return _record(version).kernel


@cache
def constants(path: str) -> dict:
    """The ``constexpr int`` constants of an SSIM .cu file (``path`` under kernels/), its header's first."""
    text = HEADER.read_text() + cuda_cpp.source_path(path).read_text()
    consts: dict = {}
    for name, expr in _CONSTANT.findall(text):
        consts[name] = int(eval(expr, {"__builtins__": {}}, dict(consts)))  # our own simple integer expressions
    return consts


def geometry(version: str) -> dict:
    """threads per block, output columns and rows per block, as the .cu file defines them."""
    consts = constants(source(version))
    return {"threads": consts.get("kThreads", consts["kCols"]), "cols": consts["kCols"], "rows": consts["kRows"]}


@cache
def kernel(version: str):
    require_runnable(version)
    return cuda_cpp.load(source(version), kernel_name(version))


def launch(version, img1, img2, out, derivs):
    n, c, h, w = img1.shape
    g = geometry(version)
    grid = ((w + g["cols"] - 1) // g["cols"], (h + g["rows"] - 1) // g["rows"], n * c)
    d = derivs or (out, out, out)  # never written when training == 0
    kernel(version)(
        grid,
        (g["threads"],),
        (*(planes(a) for a in (img1, img2, out, *d)), np.int32(h), np.int32(w), np.int32(derivs is not None)),
    )


@cache
def mean_kernel(version: str):
    require_runnable(version)
    return cuda_cpp.load(source(version), kernel_name(version) + "_mean")


def mean_launch(version: str, shape) -> tuple:
    """(grid, block) of ``version``'s fused-mean kernels for images of ``shape`` (N, C, H, W)."""
    n, c, h, w = shape
    g = geometry(version)
    return ((w + g["cols"] - 1) // g["cols"], (h + g["rows"] - 1) // g["rows"], n * c), (g["threads"],)


def launch_mean(version, img1, img2, sums, valid: bool, derivs=None):
    """Add each plane's SSIM values (of the valid map with ``valid``) to ``sums``, N*C float64 zeros; with
    ``derivs`` (three arrays like img1) also write the derivative maps of every pixel: a training forward."""
    grid, block = mean_launch(version, img1.shape)
    size = (np.int32(img1.shape[2]), np.int32(img1.shape[3]), np.int32(valid))
    if derivs is None:
        mean_kernel(version)(grid, block, (planes(img1), planes(img2), sums, *size))
    else:
        train_mean_kernel(version)(grid, block, (planes(img1), planes(img2), *(planes(d) for d in derivs), sums, *size))


@cache
def train_mean_kernel(version: str):
    require_runnable(version)
    return cuda_cpp.load(source(version), kernel_name(version) + "_train_mean")
