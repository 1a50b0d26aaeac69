"""CUDA C++ kernels: compile with NVRTC (works without a GPU) and load through CuPy (needs one).

On a CPU machine the compile still proves the source is valid for each target and reports what
ptxas allocated (registers, spills, stack, shared memory); only running it needs a GPU.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import device, disk_cache

KERNELS = Path(__file__).resolve().parents[1]
TARGETS = ("sm_80", "sm_90")
STD_OPTIONS = ("-std=c++17",)


def include_dirs() -> list[str]:
    """CUDA headers: the system toolkit where there is one, else the pip wheels' copies."""
    include = device.cuda_home() / "include"
    if (include / "cuda_runtime.h").exists():
        return [str(include)]  # never mix two toolkits' headers
    dirs = []
    try:
        import nvidia

        for base in map(Path, nvidia.__path__):
            for sub in ("cuda_runtime", "cuda_nvcc", "cuda_cccl"):
                if (base / sub / "include").is_dir():
                    dirs.append(str(base / sub / "include"))
    except ImportError:
        pass
    return dirs


@dataclass(frozen=True)
class Resources:
    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    smem_bytes: int


@dataclass(frozen=True)
class Compiled:
    path: str
    arch: str
    cubin: bytes
    log: str

    @property
    def resources(self) -> list[Resources]:
        return parse_ptxas_log(self.log, self.arch)


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas_log(log: str, arch: str) -> list[Resources]:
    """Read ptxas's ``-v`` report: one Resources per entry function, in the order compiled."""
    out, name, frame = [], None, (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name, frame = m.group(1), (0, 0, 0)
        elif (m := _FRAME.search(line)) and name:
            frame = tuple(int(g) for g in m.groups())
        elif (m := _USED.search(line)) and name:
            regs, smem = int(m.group(1)), int(m.group(2) or 0)
            out.append(Resources(name, arch, regs, frame[1], frame[2], frame[0], smem))
            name = None
    return out


def source_path(path: str | Path) -> Path:
    """A kernel source file: ``path`` itself if absolute, else relative to kernels/."""
    p = Path(path)
    if not p.is_absolute():
        p = KERNELS / p
    if not p.is_file():
        raise FileNotFoundError(f"no kernel source at {p} (paths are relative to kernels/)")
    return p


def _check_arch(arch: str) -> None:
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"arch: expected a target like 'sm_90', got {arch!r}")


def compile_cubin(path: str | Path, arch: str = "sm_90", options: tuple = ()) -> Compiled:
    """Compile one .cu file with NVRTC for ``arch``; raise with the compiler's log on error.

    The file's own folder is on the include path, so a chapter's shared header is found.
    Each (source text, arch, options) is compiled once per process."""
    _check_arch(arch)
    src = source_path(path)
    return _compile(str(src), src.read_bytes(), arch, tuple(options))


HEADERS = (".cuh", ".h", ".hpp")


def _headers(src: Path, options: tuple) -> list[tuple[int, str, bytes]]:
    """(folder's place on the include path, name, bytes) of every header a compile of ``src`` can include
    from its own folder or one that ``options`` adds with -I: what, beside the source, decides the cubin."""
    folders = [src.parent] + [Path(o[2:]) for o in options if o.startswith("-I")]
    return [
        (n, f.name, f.read_bytes())
        for n, d in enumerate(folders)
        if d.is_dir()
        for f in sorted(d.iterdir())
        if f.suffix in HEADERS and f.is_file()
    ]


@cache
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


@cache
def _compile(path: str, source: bytes, arch: str, options: tuple) -> Compiled:
    src = Path(path)
    opts = [
        f"-arch={arch}",
        "-Xptxas=-v",
        *STD_OPTIONS,
        *options,
        f"-I{src.parent}",
        *(f"-I{d}" for d in include_dirs()),
    ]
    # One entry on disk per source, headers, options and compiler: later processes (the other notebooks,
    # a rerun) load the cubin and ptxas's report instead of compiling again.
    # Named by content, not by folder: a copy of a source in a temporary folder (bench.hot_loop's) is found again.
    named = [o if o != f"-I{src.parent}" else "-I<the source's folder>" for o in opts]
    name = disk_cache.key(src.name, source, _headers(src, options), named, nvrtc_version())
    if (entry := disk_cache.get("nvrtc", name)) is not None:
        return Compiled(str(src), arch, *reversed(disk_cache.unpack(entry)))
    log, cubin = _nvrtc(src, source, opts)
    if b"__global__" in source and not _ENTRY.search(log):
        # NVRTC 13 sometimes answers with the cubin but no ptxas report: a compile it has seen before
        # (in this process or, through the CUDA cache on disk, in an earlier one), and on the H200 even
        # with CUDA_CACHE_DISABLE set here or a define that changes the source's hash. A new process
        # with the cache off from its start compiles for real; the resources tables need its report.
        log = _log_from_fresh_process(src, opts)
    disk_cache.put("nvrtc", name, disk_cache.pack(log, cubin))
    return Compiled(str(src), arch, cubin, log)


def _log_from_fresh_process(src: Path, opts: list) -> str:
    code = (
        "import json, sys; from pathlib import Path; from kernels.harness import cuda_cpp; "
        "path, opts = json.loads(sys.argv[1]); "
        "print(json.dumps(cuda_cpp._nvrtc(Path(path), Path(path).read_bytes(), opts)[0]))"
    )
    env = {
        **os.environ,
        "CUDA_CACHE_DISABLE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(KERNELS.parent), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps([str(src), opts])], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _nvrtc(src: Path, source: bytes, opts: list, ptx: bool = False) -> tuple[str, bytes]:
    """(ptxas log, cubin) of one NVRTC compile (with ``ptx``, for a compute_XX target: (log, PTX)); a
    RuntimeError with the log if it fails."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source, src.name.encode(), 0, [], [])
    _nvrtc_ok(err, "create")
    saved = os.environ.get("CUDA_CACHE_DISABLE")
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    finally:
        if saved is None:
            del os.environ["CUDA_CACHE_DISABLE"]
        else:
            os.environ["CUDA_CACHE_DISABLE"] = saved
    # NVRTC writes into the buffers it is given: a fresh bytearray each, never a bytes object (b" " * 1
    # is the interpreter's one shared b" ", which an empty log's NUL would overwrite for every caller)
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace").rstrip("\x00 ")
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        nvrtc.nvrtcDestroyProgram(prog)
        raise RuntimeError(f"NVRTC failed to compile {src.name} for {opts[0].removeprefix('-arch=')}:\n{log}")
    _, size = (nvrtc.nvrtcGetPTXSize if ptx else nvrtc.nvrtcGetCUBINSize)(prog)
    binary = bytearray(size)
    (nvrtc.nvrtcGetPTX if ptx else nvrtc.nvrtcGetCUBIN)(prog, binary)
    nvrtc.nvrtcDestroyProgram(prog)
    return log, bytes(binary)


def _nvrtc_ok(err, what):
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC {what} failed: {err}")


@cache
def compile_source(code: str, arch: str = "sm_90", name: str = "exercise.cu", options: tuple = ()) -> Compiled:
    """``compile_cubin`` for CUDA C++ held as text, not in a file of kernels/ (a student's exercise kernel):
    NVRTC for ``arch``, the CUDA headers on the include path; a RuntimeError with the compiler's log if it
    fails. ``name`` names the source in that log."""
    _check_arch(arch)
    if not isinstance(code, str):
        raise TypeError(f"code: expected CUDA C++ source text, got {type(code).__name__}")
    opts = [f"-arch={arch}", *STD_OPTIONS, *options, *(f"-I{d}" for d in include_dirs())]
    log, cubin = _nvrtc(Path(name), code.encode(), opts)
    return Compiled(name, arch, cubin, log)


def all_sources() -> list[Path]:
    return sorted(KERNELS.rglob("*.cu"))


@cache
def _cubin_dir() -> Path:
    """The one folder of this process for the cubins that ``load`` hands CuPy, removed at exit. The
    files stay while the process runs: CuPy reads a cubin again for another device."""
    folder = Path(tempfile.mkdtemp(prefix="cubin-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@cache
def load(path: str | Path, name: str, options: tuple = (), arch: str | None = None):
    """A CuPy RawKernel-like function for kernel ``name`` in a .cu file (needs a GPU); compiled once.

    ``arch`` (e.g. "sm_90a") builds for that exact target with ``compile_cubin`` instead of CuPy's
    choice (the device's plain sm_XX), for target-specific instructions such as Hopper's wgmma. Under
    ``BOOK_MAX_CC`` the others (no ``arch``, or the capped ``device.target_arch()``) are built as PTX for the
    capped capability, which the driver compiles for this GPU (``device.capped_ptx_target``)."""
    if device.MODE != device.GPU:
        raise RuntimeError(f"running {Path(path).name} needs a GPU; in the simulator it is compiled only")
    import cupy

    if arch is not None and not (device.capped_ptx_target() and arch == device.target_arch()):
        cubin = compile_cubin(path, arch, options).cubin
        # Named by content: CuPy caches a loaded module by its path, so two variants must not share one.
        file = _cubin_dir() / f"{Path(path).stem}_{arch}_{hashlib.sha256(cubin).hexdigest()[:16]}.cubin"
        file.write_bytes(cubin)
        return cupy.RawModule(path=str(file)).get_function(name)
    src = source_path(path)
    return _module(src.read_text(), src, (*options, f"-I{src.parent}")).get_function(name)


def _module(code: str, src: Path, options: tuple):
    """A CuPy RawModule of ``code`` built for this GPU: under ``BOOK_MAX_CC`` as PTX for the capped capability
    (``device.capped_ptx_target``), which the driver compiles for the GPU it has."""
    import cupy

    if virtual := device.capped_ptx_target():
        opts = [f"-arch={virtual}", *STD_OPTIONS, *options, *(f"-I{d}" for d in include_dirs())]
        _, ptx = _nvrtc(src, code.encode(), opts, ptx=True)
        file = _cubin_dir() / f"{src.stem}_{virtual}_{hashlib.sha256(ptx).hexdigest()[:16]}.ptx"
        file.write_bytes(ptx)
        return cupy.RawModule(path=str(file))
    return cupy.RawModule(code=code, options=(*STD_OPTIONS, *options, *(f"-I{d}" for d in include_dirs())))


@cache
def load_source(code: str, name: str, label: str = "exercise.cu"):
    """``load`` for CUDA C++ held as text (a student's exercise kernel): its kernel ``name``, built for this
    GPU (needs one); ``label`` names the source in the compiler's log."""
    if device.MODE != device.GPU:
        raise RuntimeError(f"running {label} needs a GPU; in the simulator it is compiled only")
    return _module(code, Path(label), ()).get_function(name)
