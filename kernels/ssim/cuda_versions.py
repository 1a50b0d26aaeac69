"""Launch the CUDA C++ versions (V3, V4-1, V4 and later .cu files) through CuPy.

Their block geometry is a set of compile-time constants in each .cu file; the grid is computed from
those same constants, read from the source, so the two cannot disagree.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

from kernels.harness import cuda_cpp, device

from .common import CUDA_VERSIONS, VERSIONS, planes

GPU_TILE: dict = {}  # the geometry is fixed in each .cu file
SIM_TILE: dict = {}
_CONSTANT = re.compile(r"constexpr int (\w+) = ([^;]+);")
HEADER = cuda_cpp.source_path("ssim/ssim_common.cuh")  # the constants every .cu file includes
# V7 on copy rows with cp.async (copy_async in ssim_common.cuh), an sm_80 instruction; V3-V6 use
# __pipeline_memcpy_async, which compiles to plain copies before sm_80.
ASYNC_COPY = CUDA_VERSIONS[CUDA_VERSIONS.index("V7") :]


def unsupported(version: str, props: dict) -> str | None:
    """Why the GPU described by ``props`` (device.properties()) cannot run ``version``, or None.

    Only the compute capability matters: every version's static shared memory (5 KB at most) is far
    below the 48 KB any GPU gives a block."""
    if version in ASYNC_COPY and int(props["cc"]) < 80:
        return f"{version} copies rows with cp.async, which needs sm_80 or later; this GPU is sm_{props['cc']}"
    return None


def runnable(versions) -> list[str]:
    """The ``versions`` this GPU can run, printing one line for each left out (all of them without a
    GPU, where the reference GPU's stored runs stand in)."""
    if not device.on_gpu():
        return list(versions)
    kept = []
    for v in versions:
        if why := unsupported(v, device.properties()):
            print(f"left out on this GPU: {why}")
        else:
            kept.append(v)
    return kept


def require_runnable(version: str) -> None:
    """A RuntimeError saying why, where this GPU cannot run ``version`` (instead of a compiler error)."""
    if device.on_gpu() and (why := unsupported(version, device.properties())):
        raise RuntimeError(why)


def source(version: str) -> str:
    """The .cu path (relative to kernels/) of a CUDA C++ version."""
    name = VERSIONS[version]
    if not name.endswith(".cu"):
        raise ValueError(f"{version} is a Numba version, not CUDA C++")
    return f"ssim/{name}"


def kernel_name(version: str) -> str:
    return "ssim_" + VERSIONS[version][:-3]


@cache
def geometry(version: str) -> dict:
    """threads per block, output columns and rows per block, as the .cu file defines them."""
    text = HEADER.read_text() + cuda_cpp.source_path(source(version)).read_text()
    consts: dict = {}
    for name, expr in _CONSTANT.findall(text):
        consts[name] = int(eval(expr, {"__builtins__": {}}, dict(consts)))  # our own simple integer expressions
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
def has_fused_mean(version: str) -> bool:
    """Whether the .cu file has a second kernel, ssim_<file>_mean, that sums SSIM without a map (V13 on)."""
    return f"{kernel_name(version)}_mean(" in cuda_cpp.source_path(source(version)).read_text()


@cache
def mean_kernel(version: str):
    require_runnable(version)
    return cuda_cpp.load(source(version), kernel_name(version) + "_mean")


def launch_mean(version, img1, img2, sums, valid: bool):
    """Add each plane's SSIM values (of the valid map with ``valid``) to ``sums``, N*C float64 zeros."""
    n, c, h, w = img1.shape
    g = geometry(version)
    grid = ((w + g["cols"] - 1) // g["cols"], (h + g["rows"] - 1) // g["rows"], n * c)
    mean_kernel(version)(
        grid, (g["threads"],), (planes(img1), planes(img2), sums, np.int32(h), np.int32(w), np.int32(valid))
    )
