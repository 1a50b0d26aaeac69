"""Pick the execution mode once -- a real GPU, the Numba CUDA simulator, or neither -- and describe the GPU.

The mode is chosen when this module is first imported, before anything imports ``numba.cuda``:
the simulator can only be switched on through ``NUMBA_ENABLE_CUDASIM`` before that import.
Set ``BOOK_MODE=gpu`` or ``BOOK_MODE=sim`` to force a mode. ``BOOK_MAX_CC=7.5`` (or 8.0, 8.6, 8.9) makes the
book treat the GPU as one of that compute capability (``capped``): it compiles for it and leaves out what such a
GPU cannot run.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

GPU, SIM, NONE = "gpu", "sim", "none"


def _cuda_device_count() -> tuple[int, str]:
    """(number of CUDA devices, why none where it is 0), through the driver library, without importing
    numba or cupy. A failing driver (e.g. 803, driver and library versions differ) is named by its
    error code, not reported as a machine without a GPU."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        call, code = "cuInit", lib.cuInit(0)
        if code == 0:
            call, code = "cuDeviceGetCount", lib.cuDeviceGetCount(ctypes.byref(count))
        if code != 0:
            return 0, f"{call} failed with {_cuda_error_name(lib, code)}"
        return count.value, "" if count.value else "the CUDA driver sees no device"
    return 0, "no CUDA driver library"


def _cuda_error_name(lib, code: int) -> str:
    """'error 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)', or 'error 803' where the driver cannot name it."""
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return f"error {code} ({name.value.decode()})"
    return f"error {code}"


def _select() -> tuple[str, str]:
    forced = os.environ.get("BOOK_MODE", "").lower()
    if forced not in ("", GPU, SIM):
        raise ValueError(f"BOOK_MODE must be 'gpu' or 'sim', got {forced!r}")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or forced == SIM:
        mode, reason = SIM, "simulator requested"
    elif (found := _cuda_device_count())[0] > 0:
        mode, reason = GPU, "CUDA GPU found"
    elif forced == GPU:
        raise RuntimeError(f"BOOK_MODE=gpu but no CUDA GPU is usable: {found[1]}")
    else:
        mode, reason = SIM, f"no CUDA GPU found: {found[1]}"
    if mode == SIM:
        if "numba.cuda" in sys.modules and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
            raise RuntimeError("numba.cuda was imported before kernels.harness; import the harness first")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        try:
            import numba_cuda  # noqa: F401  (the simulator ships with numba-cuda)
        except ImportError:
            return NONE, reason + " and numba-cuda is not installed"
    else:
        # CuPy arrays passed to Numba kernels would otherwise trigger a host-side stream sync on
        # every launch, which puts launch latency inside the timed region. We use one stream.
        os.environ.setdefault("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", "0")
        # Small grids are deliberate in correctness checks; the warning would differ between modes.
        os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    return mode, reason


# The compute capabilities BOOK_MAX_CC may name, each with the most shared memory a block of it may opt in
# to (the CUDA C++ Programming Guide's technical specifications): with the instructions the capability
# has, what decides whether a kernel can run there at all.
SMEM_PER_BLOCK_OPTIN = {"75": 64 * 1024, "80": 163 * 1024, "86": 99 * 1024, "89": 99 * 1024, "90": 227 * 1024}


def dotted(cc: str) -> str:
    """A compute capability as people write it: "75" -> "7.5", "100" -> "10.0"."""
    return f"{cc[:-1]}.{cc[-1]}"


def max_cc() -> str | None:
    """The compute capability ``BOOK_MAX_CC`` caps the GPU at, as "75" for 7.5; None where it is unset."""
    text = os.environ.get("BOOK_MAX_CC", "").strip()
    if not text:
        return None
    found = re.fullmatch(r"([1-9]\d*)\.(\d)", text)
    if not found:
        raise ValueError(f"BOOK_MAX_CC must be a compute capability such as 7.5 or 8.9, got {text!r}")
    return found[1] + found[2]


def capped(props: dict) -> dict:
    """``props`` (``properties()``'s keys) as the book sees them under ``BOOK_MAX_CC``: the capped compute
    capability, at most the shared memory per block it allows, and the cap in the name, so that the run's
    results go to a folder of their own; ``hardware_cc`` keeps the GPU's own capability. Everything else
    (SMs, clocks, caches, memory, shared memory per SM, resident threads) stays the GPU's: the kernels run
    on it. ``props`` itself where no cap is set or the cap is the GPU's own capability."""
    cap, own = max_cc(), props["cc"]
    if cap is None or cap == own:
        return props
    if int(cap) > int(own):
        raise ValueError(
            f"BOOK_MAX_CC={dotted(cap)} is above this GPU's compute capability {dotted(own)}: a cap can only lower it"
        )
    if cap not in SMEM_PER_BLOCK_OPTIN:
        known = ", ".join(map(dotted, SMEM_PER_BLOCK_OPTIN))
        raise ValueError(f"BOOK_MAX_CC={dotted(cap)} is not a compute capability the book knows ({known})")
    if cap == "90":  # Hopper's wgmma and TMA code is built for sm_90a, which runs on compute capability 9.0 only
        raise ValueError(f"BOOK_MAX_CC=9.0 runs sm_90a code, which a {dotted(own)} GPU cannot: cap it at 8.9 or lower")
    smem = min(props["smem_per_block_optin_bytes"], SMEM_PER_BLOCK_OPTIN[cap])
    name = f"{props['name']} capped at sm_{cap}"
    return props | {"cc": cap, "smem_per_block_optin_bytes": smem, "name": name, "hardware_cc": own}


MODE, REASON = _select()
if (_cap := max_cc()) in SMEM_PER_BLOCK_OPTIN and MODE == GPU:
    # Numba compiles for this capability from here on (its compiler rereads the variable): PTX for
    # compute_75, say, which the driver then compiles for the GPU it has.
    os.environ["NUMBA_FORCE_CUDA_CC"] = dotted(_cap)


def _serialize_simulator_shared_arrays() -> None:
    """numba-cuda's simulator gives a block's threads one shared array per call site: the first thread
    to ask allocates it, unlocked, so two threads can both allocate and one then works alone on a private
    copy, reading garbage where the others wrote. Rare, but it makes a correct kernel fail a test. Here
    the look-up and the allocation happen under one lock; the rest is the simulator's own method."""
    import threading
    import traceback

    import numpy as np
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    cls = kernelapi.FakeCUDAShared
    if getattr(cls.array, "serialized", False):
        return
    simulators_own = cls.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:  # an error, or the dynamic buffer: nothing is allocated
            return simulators_own(self, shape, dtype, alignment)
        site = traceback.extract_stack(sys._getframe(1), limit=1)[0][0:2]  # the kernel's file and line
        with lock:
            found = self._allocations.get(site)
            if found is None:
                as_numpy = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
                found = self._allocations[site] = np.empty(shape, as_numpy)
        return found

    array.serialized = True
    cls.array = array


if MODE == SIM:
    _serialize_simulator_shared_arrays()


def on_gpu() -> bool:
    return MODE == GPU


def cuda_home() -> Path:
    """The CUDA toolkit's folder: $CUDA_HOME, else /usr/local/cuda (which may not exist: a GPU machine
    can have only a driver, and the pip wheels then bring what the chapters need)."""
    return Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def cuda_program(name: str) -> str | None:
    """The path of a CUDA toolkit program (ptxas, nvdisasm, ncu, compute-sanitizer, ...): on PATH, else
    in $CUDA_HOME/bin, else in an NVIDIA pip wheel's bin folder; None if none has it."""
    dirs = [cuda_home() / "bin"]
    try:
        import nvidia

        dirs += [d for base in map(Path, nvidia.__path__) for d in sorted(base.glob("*/bin"))]
    except ImportError:
        pass
    return shutil.which(name) or next((str(d / name) for d in dirs if (d / name).is_file()), None)


def xp():
    """The array module of this mode: CuPy on a GPU, NumPy in the simulator."""
    if MODE == GPU:
        import cupy

        return cupy
    import numpy

    return numpy


def resolve_profile(profile: str) -> str:
    """'full' sizes need a GPU; in the simulator they would run for days, so fall back to 'ci'."""
    if profile not in ("full", "ci"):
        raise ValueError(f"profile must be 'full' or 'ci', got {profile!r}")
    return profile if MODE == GPU else "ci"


def announce(profile: str = "full") -> str:
    """Print (and return) the one line saying which mode and sizes this run uses."""
    used = resolve_profile(profile)
    if MODE == GPU:
        env = environment()
        line = (
            f"Mode: GPU -- {env['gpu']} (sm_{env['cc']}, {env['sms']} SMs, driver {env['driver']}, "
            f"CUDA {env['cuda_runtime']}); profile '{used}'."
        )
    elif MODE == SIM:
        line = (
            f"Mode: CUDA simulator ({REASON}) -- kernels run on the CPU at '{used}' sizes to check "
            f"correctness; timings need a GPU, so timing cells show the reference GPU's stored numbers."
        )
    else:
        line = f"Mode: none ({REASON}) -- kernels cannot run here; the chapter shows stored results only."
    print(line)
    return line


def slug(name: str) -> str:
    """A folder name for a GPU: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _git_commit() -> str:
    if os.environ.get("BOOK_COMMIT"):
        return os.environ["BOOK_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _nvidia_smi(query: str) -> list[str]:
    """The fields of ``nvidia-smi --query-gpu=query`` for CUDA device 0, the GPU that properties() and
    the kernels use. nvidia-smi numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES, so the GPU
    is named by its PCI bus id. Raises OSError, SubprocessError or IndexError where nvidia-smi cannot answer."""
    import cupy

    bus_id = cupy.cuda.runtime.deviceGetPCIBusId(0)
    out = subprocess.run(
        ["nvidia-smi", "-i", bus_id, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return [v.strip() for v in out.stdout.splitlines()[0].split(",")]


def current_clocks() -> dict:
    """SM and memory clocks (MHz) of CUDA device 0 as nvidia-smi reads them now; empty where it cannot."""
    if MODE != GPU:
        return {}
    try:
        sm, mem, max_sm, max_mem = (
            int(float(v)) for v in _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem")
        )
        return {"sm_clock_mhz": sm, "mem_clock_mhz": mem, "max_sm_clock_mhz": max_sm, "max_mem_clock_mhz": max_mem}
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return {}


def properties() -> dict:
    """The static properties of GPU 0 that the book's models use, as ``BOOK_MAX_CC`` caps them (``capped``)."""
    return capped(own_properties())


@cache
def own_properties() -> dict:
    """The static properties of GPU 0 (CuPy runtime queries), whatever ``BOOK_MAX_CC`` says."""
    if MODE != GPU:
        raise RuntimeError("device properties need a GPU; this run uses the CUDA simulator")
    import cupy

    rt = cupy.cuda.runtime
    p = rt.getDeviceProperties(0)
    attr = lambda code: rt.deviceGetAttribute(code, 0)  # noqa: E731
    # CUDA 13 dropped the clock fields from cudaDeviceProp; the attributes remain
    # (13 = cudaDevAttrClockRate, 36 = MemoryClockRate, 37 = GlobalMemoryBusWidth; kHz and bits).
    return {
        "name": p["name"].decode() if isinstance(p["name"], bytes) else p["name"],
        "cc": f"{p['major']}{p['minor']}",
        "sms": p["multiProcessorCount"],
        "max_sm_clock_mhz": attr(13) / 1000,
        "mem_clock_mhz": attr(36) / 1000,
        "bus_width_bits": attr(37),
        "l2_bytes": p["l2CacheSize"],
        "smem_per_sm_bytes": p["sharedMemPerMultiprocessor"],
        "smem_per_block_optin_bytes": p["sharedMemPerBlockOptin"],
        "regs_per_sm": p["regsPerMultiprocessor"],
        "max_threads_per_sm": p["maxThreadsPerMultiProcessor"],
        "warp_size": p["warpSize"],
        "global_mem_bytes": p["totalGlobalMem"],
    }


# The properties() of the reference GPU, the H100 the committed notebooks ran on: what the models take
# where a notebook runs without a GPU and shows that GPU's stored numbers.
REFERENCE_PROPERTIES = {
    "name": "NVIDIA H100 80GB HBM3",
    "cc": "90",
    "sms": 132,
    "l2_bytes": 52428800,
    "smem_per_sm_bytes": 233472,
    "smem_per_block_optin_bytes": 232448,
    "regs_per_sm": 65536,
    "max_threads_per_sm": 2048,
    "warp_size": 32,
    "global_mem_bytes": 85017493504,
}


def target_properties() -> dict:
    """``properties()`` of this GPU; without one, the reference GPU's (under ``BOOK_MAX_CC``, capped)."""
    return properties() if on_gpu() else capped(REFERENCE_PROPERTIES)


def target_arch() -> str:
    """The compile target of ``target_properties()``, e.g. "sm_90": the code CuPy and Numba build for
    this GPU, or for the reference GPU without one (under ``BOOK_MAX_CC``, for the capped capability)."""
    return f"sm_{target_properties()['cc']}"


def capped_ptx_target() -> str | None:
    """Where ``BOOK_MAX_CC`` lowers this GPU's capability, the virtual architecture its CUDA C++ is built
    for, e.g. "compute_75": the driver compiles that PTX for the GPU it has (a cubin built for sm_75 would
    not load on an sm_90 GPU). None otherwise, and without a GPU."""
    if not on_gpu() or max_cc() is None or properties()["cc"] == own_properties()["cc"]:
        return None
    return f"compute_{properties()['cc']}"


def environment() -> dict:
    """What a results row records: GPU, driver, CUDA, clocks, commit and date."""
    env = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _git_commit(),
        "mode": MODE,
    }
    if MODE != GPU:
        return env | {
            "gpu": "CUDA simulator",
            "gpu_slug": "simulator",
            "cc": "",
            "sms": 0,
            "driver": "",
            "cuda_runtime": "",
        }
    import cupy

    rt = cupy.cuda.runtime
    props = properties()
    drv = rt.driverGetVersion()
    run = rt.runtimeGetVersion()
    env |= {
        "gpu": props["name"],
        "gpu_slug": slug(props["name"]),
        "cc": props["cc"],
        "sms": props["sms"],
        "driver": _driver_version() or f"{drv // 1000}.{drv % 1000 // 10}",
        "cuda_runtime": f"{run // 1000}.{run % 1000 // 10}",
    }
    return env | current_clocks()


def software() -> dict:
    """Versions of what compiled and launched this run's kernels: Python, NumPy, Numba, numba-cuda and,
    on a GPU, CuPy, its NVRTC and cuDNN where it loads. A number can move with any of them, as with
    the driver and CUDA runtime that the results rows record; ``scripts/rerun.py`` keeps these in the
    executed notebook's metadata."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("numpy", "numba", "numba-cuda"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if MODE == GPU:
        import cupy

        from .cudnn_lib import version

        out["cupy"] = cupy.__version__
        out["nvrtc"] = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
        cudnn = version()
        if cudnn:
            out["cudnn"] = cudnn
    return out


def _driver_version() -> str:
    try:
        return _nvidia_smi("driver_version")[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""
