"""Every SSIM version, once: its name, file, chapter and what its kernel needs. ``common`` and
``cuda_versions`` derive their lists from ``REGISTRY``; a new version is one more ``Version`` here.

The block geometry of a CUDA C++ version is not repeated here: it is read from its .cu file
(``cuda_versions.geometry``), and a Numba version's default tiles are its module's GPU_TILE and SIM_TILE.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHAPTERS = ("worklog", "beyond")  # notebook 02 (the worklog's versions), notebook 02b (ours)
CP_ASYNC_CC = 80  # cp.async, the copy_async of ssim_common.cuh, is an sm_80 instruction
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Version:
    """One kernel version. ``file`` is in kernels/ssim/: a Numba module (.py) or a CUDA C++ source (.cu)."""

    name: str  # as the notebooks and the results tables write it
    file: str
    chapter: str  # one of CHAPTERS
    kernel: str | None = None  # a .cu file's extern "C" entry point
    cp_async: bool = False  # copies rows with cp.async (V3-V6's __pipeline_memcpy_async runs anywhere)
    # ``<kernel>_mean`` sums SSIM and writes no map; ``<kernel>_train_mean`` also writes the derivative maps
    fused_mean: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"name must be letters, digits, '-' or '_' (it becomes a glue name and one command-line "
                f"word), got {self.name!r}"
            )
        if self.chapter not in CHAPTERS:
            raise ValueError(f"{self.name}: chapter must be one of {CHAPTERS}, got {self.chapter!r}")
        if not self.file.endswith((".py", ".cu")):
            raise ValueError(f"{self.name}: file must be a .py or .cu file, got {self.file!r}")
        if (self.kernel is not None) != (self.language == "cuda"):
            raise ValueError(f"{self.name}: kernel (the entry point) is given for a .cu file and only for one")
        if (self.cp_async or self.fused_mean) and self.language != "cuda":
            raise ValueError(f"{self.name}: cp_async and fused_mean are properties of a .cu file")

    @property
    def language(self) -> str:
        return "cuda" if self.file.endswith(".cu") else "numba"

    @property
    def module(self) -> str:
        """The module that launches it: its own for a Numba version, the one loader for all .cu files."""
        return "kernels.ssim." + ("cuda_versions" if self.language == "cuda" else self.file.removesuffix(".py"))

    @property
    def needs_cc(self) -> int:
        """The least compute capability (as 80 for sm_80) that runs it; 0 where any GPU does."""
        return CP_ASYNC_CC if self.cp_async else 0


# In the order of the worklog, then ours: the order of every list, table and plot.
REGISTRY = (
    Version("Naive", "v0_naive.py", "worklog"),
    Version("V1", "v1_no_redundancy.py", "worklog"),
    Version("V2", "v2_tile_x.py", "worklog"),
    Version("V3-0", "v3_0_pipeline_local.py", "worklog"),
    Version("V3-1", "v3_1_pipeline_registers.py", "worklog"),
    Version("V3-1-cpp", "v3_1.cu", "worklog", kernel="ssim_v3_1"),  # ours: V3-1 in CUDA C++, isolating V3's loads
    Version("V3", "v3.cu", "worklog", kernel="ssim_v3"),
    Version("V4-1", "v4_1.cu", "worklog", kernel="ssim_v4_1"),
    Version("V4", "v4.cu", "worklog", kernel="ssim_v4"),
    Version("V5", "v5.cu", "beyond", kernel="ssim_v5"),
    Version("V6", "v6.cu", "beyond", kernel="ssim_v6"),
    Version("V7", "v7.cu", "beyond", kernel="ssim_v7", cp_async=True),
    Version("V8", "v8.cu", "beyond", kernel="ssim_v8", cp_async=True),
    Version("V9", "v9.cu", "beyond", kernel="ssim_v9", cp_async=True),
    Version("V10", "v10.cu", "beyond", kernel="ssim_v10", cp_async=True),
    Version("V11", "v11.cu", "beyond", kernel="ssim_v11", cp_async=True),
    Version("V12", "v12.cu", "beyond", kernel="ssim_v12", cp_async=True),
    Version("V13", "v13.cu", "beyond", kernel="ssim_v13", cp_async=True, fused_mean=True),
    Version("V14", "v14.cu", "beyond", kernel="ssim_v14", cp_async=True),
    Version("V15", "v15.cu", "beyond", kernel="ssim_v15", cp_async=True, fused_mean=True),  # V13, shift follows data
)
_BY_NAME = {v.name: v for v in REGISTRY}


def get(name: str) -> Version:
    """The record of version ``name``; a ValueError naming the versions for any other name."""
    if not isinstance(name, str) or name not in _BY_NAME:
        raise ValueError(f"unknown SSIM version {name!r}; choose from {list(_BY_NAME)}")
    return _BY_NAME[name]
