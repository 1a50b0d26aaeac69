"""Correctness: poison outputs, compare with a float64 reference, and validate kernel arguments.

A verdict line (``str(result)``) names the check and its tolerance but not the measured error, so
it reads the same on a GPU and in the simulator; ``result.detail`` carries the numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import device

# Limits of every CUDA GPU since compute capability 3.0 (programming guide, "Technical Specifications").
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)


def to_host(x) -> np.ndarray:
    """A NumPy copy of a NumPy, CuPy or Numba device array."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return x.get()
    if hasattr(x, "copy_to_host"):  # Numba device array (real or simulated)
        return x.copy_to_host()
    raise TypeError(f"expected a NumPy, CuPy or Numba device array, got {type(x).__name__}")


def address(a) -> int:
    """The byte address of an array's first element: a device array's (CuPy, Numba) or a host array's."""
    iface = getattr(a, "__cuda_array_interface__", None) or getattr(a, "__array_interface__", None)
    if iface is None:
        raise TypeError(f"expected a NumPy, CuPy or Numba device array, got {type(a).__name__}")
    return iface["data"][0]


def poison_value(dtype):
    """The value ``poison`` fills with: NaN for floats (a comparison can never pass by accident), the
    maximum for integers, True for booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return np.nan
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    raise TypeError(f"cannot poison an array of dtype {dtype.name}: expected a float, integer or bool dtype")


def poison(x):
    """Fill an output before a kernel runs, so that any element the kernel forgets shows up
    (with ``poison_value``)."""
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        raise TypeError(f"poison: expected an array to fill, got {type(x).__name__}")
    dtype = np.dtype(x.dtype)
    value = poison_value(dtype)
    if hasattr(x, "copy_to_host") and not hasattr(x, "fill"):  # Numba device array
        x.copy_to_device(np.full(x.shape, value, dtype=dtype))
    else:
        x.fill(value)
    return x


@dataclass
class CheckResult:
    name: str
    ok: bool
    max_abs: float
    rel_fro: float
    n_nonfinite: int
    atol: float
    rtol: float | None
    n_special_mismatch: int = 0  # elements that differ where the reference is NaN or +-Inf

    def __str__(self) -> str:
        bound = f"max|err| <= {self.atol:g}" + ("" if self.rtol is None else f", rel <= {self.rtol:g}")
        why = "" if self.ok else f" ({self.reason()})"
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {bound}{why}"

    @property
    def detail(self) -> str:
        return (
            f"{self.name}: max|err| = {self.max_abs:.3g}, relative Frobenius = {self.rel_fro:.3g}, "
            f"non-finite = {self.n_nonfinite}"
        )

    def reason(self) -> str:
        if self.n_nonfinite:
            return f"{self.n_nonfinite} elements NaN/Inf where the reference is finite: unwritten or broken"
        if self.n_special_mismatch:
            return f"{self.n_special_mismatch} elements differ where the reference is NaN/Inf"
        return f"max|err| = {self.max_abs:.3g}, rel = {self.rel_fro:.3g}"


def compare(out, ref, *, atol: float, rtol: float | None = None, name: str = "output") -> CheckResult:
    """Compare a kernel's output with a reference computed in float64.

    Fails on any NaN/Inf where the reference is finite, on any other value where the reference is
    NaN or +-Inf (there the output must hold the same), on max |out - ref| > atol, and (if rtol is
    given) on ||out - ref||_F / ||ref||_F > rtol. A reference with no finite element is an error.
    Where both are CuPy arrays the comparison runs on the GPU: the same arithmetic, without copying a
    large output and its reference to the host.
    """
    xp = _module(out, ref)
    got = _real(out if xp is not np else to_host(out), f"out ({name})")
    want = _real(ref if xp is not np else to_host(ref), f"ref ({name})")
    finite_number(atol, f"atol ({name})")
    if rtol is not None:
        finite_number(rtol, f"rtol ({name})")
    if got.shape != want.shape:
        raise ValueError(f"{name}: output shape {got.shape} does not match reference shape {want.shape}")
    if got.size == 0:
        raise ValueError(f"{name}: empty output; a check needs at least one element")
    finite = xp.isfinite(want)
    if not bool(finite.any()):
        raise ValueError(f"{name}: the reference has no finite element; a tolerance cannot check it")
    nonfinite = int(xp.count_nonzero(~xp.isfinite(got) & finite))
    same = (got == want) | (xp.isnan(got) & xp.isnan(want))
    special = int(xp.count_nonzero(~finite & ~same))
    diff = xp.abs(got[finite] - want[finite])
    max_abs = float(diff.max())
    norm = float(xp.linalg.norm(want[finite]))
    rel = float(xp.linalg.norm(diff)) / norm if norm > 0 else max_abs
    ok = nonfinite == 0 and special == 0 and max_abs <= atol and (rtol is None or rel <= rtol)
    return CheckResult(name, ok, max_abs, rel, nonfinite, atol, rtol, special)


def assert_close(out, ref, *, atol: float, rtol: float | None = None, name: str = "output") -> CheckResult:
    result = compare(out, ref, atol=atol, rtol=rtol, name=name)
    assert result.ok, f"{result} -- {result.detail}"
    return result


def require_array(x, name: str, *, dtype=None, ndim: int | None = None, shape: tuple | None = None):
    """Check a kernel argument and say what was expected if it is wrong.

    On a GPU the argument must be a device array (CuPy or Numba), C-contiguous; in the simulator a
    NumPy array plays the device array. Returns the array unchanged.
    """
    # The simulator's Numba device arrays have copy_to_host but no __cuda_array_interface__.
    is_device = hasattr(x, "__cuda_array_interface__") or hasattr(x, "copy_to_host")
    if device.MODE == device.GPU and not is_device:
        kind = type(x).__name__
        hint = " (a host array: move it to the GPU with cupy.asarray)" if isinstance(x, np.ndarray) else ""
        raise TypeError(f"{name}: expected a device array (cupy.ndarray), got {kind}{hint}")
    if device.MODE != device.GPU and not (is_device or isinstance(x, np.ndarray)):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if dtype is not None and np.dtype(x.dtype) != np.dtype(dtype):
        got = np.dtype(x.dtype)
        if got.name == np.dtype(dtype).name:  # same type, other byte order ('>f4')
            raise TypeError(
                f"{name}: expected dtype {got.name} in native byte order, got {got.str}; use .astype(np.{got.name})"
            )
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype).name}, got {got.name}")
    if ndim is not None and len(x.shape) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}")
    if int(np.prod(x.shape)) == 0:
        raise ValueError(f"{name}: empty array of shape {tuple(x.shape)}")
    if not _c_contiguous(x):
        raise ValueError(f"{name}: expected a C-contiguous array (use cupy.ascontiguousarray)")
    return x


def overlaps(a, b) -> bool:
    """Whether two C-contiguous arrays (host or device) share a byte."""
    a_first, b_first = address(a), address(b)
    a_last = a_first + a.size * np.dtype(a.dtype).itemsize
    b_last = b_first + b.size * np.dtype(b.dtype).itemsize
    return a_first < b_last and b_first < a_last


def require_output(out, name: str, reads: dict):
    """Check an output already checked by ``require_array``: writable, and sharing no memory with the
    arrays the kernel reads (``reads``: name -> array or None), which it would overwrite while still
    reading them. Returns ``out``."""
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError(f"{name}: the output array is read-only")
    for other, a in reads.items():
        if a is not None and overlaps(out, a):
            raise ValueError(f"{name} must not overlap {other}: the kernel would overwrite values it still reads")
    return out


def positive_int(value, name: str, *, maximum: int | None = None) -> int:
    """An integer >= 1 (and <= maximum), or a ValueError naming the constraint."""
    return _integer(value, name, 1, maximum)


def nonnegative_int(value, name: str, *, maximum: int | None = None) -> int:
    """An integer >= 0 (and <= maximum), or a ValueError naming the constraint."""
    return _integer(value, name, 0, maximum)


def _integer(value, name: str, minimum: int, maximum: int | None) -> int:
    # A float counts if it holds an integer (2.0); inf and NaN do not (int() of them would raise).
    whole = isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def finite_number(value, name: str, *, positive: bool = False) -> float:
    """A real number, finite and >= 0 (> 0 with ``positive``), or a ValueError naming the constraint:
    a NaN would pass every ``<`` test and turn what it touches into NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite {'positive number' if positive else 'number >= 0'}, got {value!r}")
    return float(value)


def block_shape(shape) -> tuple:
    """A block shape (x, y, z) within the device's limits, padded with 1s."""
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not 1 <= len(shape) <= 3:
        raise ValueError(f"a block has 1 to 3 dimensions, got {shape}")
    shape = shape + (1,) * (3 - len(shape))
    for axis, size, limit in zip("xyz", shape, MAX_BLOCK_DIM, strict=True):
        positive_int(size, f"block.{axis}", maximum=limit)
    threads = shape[0] * shape[1] * shape[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"a block of {shape} has {threads} threads; the device allows at most {MAX_THREADS_PER_BLOCK}")
    return shape


MEMCHECK_ERRORS = 86  # compute-sanitizer's exit code when it finds errors, told apart from the program's own


def cuda_tool(name: str, shown: str) -> str | None:
    """The path of the CUDA toolkit's ``name`` (``ncu``, ``compute-sanitizer``; ``device.cuda_program``).
    Without a GPU to run it on, or without the program (a GPU machine may have only a driver), None and
    one line saying why and where to see ``shown``: in the committed GPU run."""
    if not device.on_gpu():
        print(f"{name} needs a GPU; for {shown}, see the GPU run of this chapter.")
        return None
    path = device.cuda_program(name)
    if not path:
        print(
            f"{name} is not on PATH, in {device.cuda_home() / 'bin'} or in an NVIDIA pip wheel (it comes with "
            f"the CUDA toolkit); for {shown}, see the committed GPU run of this chapter."
        )
    return path


SANITIZER_TOOLS = ("memcheck", "racecheck")


def _run_python_under(tool: list[str], args: list[str], timeout: int) -> subprocess.CompletedProcess:
    """``tool + [python, *args]`` from the repository's root, its output captured. The root goes on
    PYTHONPATH, so a script (python scripts/x.py) imports this checkout's kernels even where it is not
    installed (Colab clones the repository and puts it on the notebook's sys.path only)."""
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))
    return subprocess.run(
        [*tool, sys.executable, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def memcheck(args: list[str], timeout: int = 900, tail: int = 25, tool: str = "memcheck") -> bool | None:
    """Run ``python *args`` from the repository's root under compute-sanitizer's memcheck, which reports
    an out-of-bounds or misaligned access even where it does not change a result (``tool="racecheck"``:
    shared-memory races between threads of a block); print the end of its report and a verdict. True if
    clean; without a GPU or compute-sanitizer, one line and None."""
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise TypeError(f"args: expected a list of strings such as ['-m', 'kernels.igemm.memcheck'], got {args!r}")
    if tool not in SANITIZER_TOOLS:
        raise ValueError(f"tool: expected one of {SANITIZER_TOOLS}, got {tool!r}")
    sanitizer = cuda_tool("compute-sanitizer", "its verdict")
    if not sanitizer:
        return None
    tool_args = ["--tool", tool, "--report-api-errors", "no", "--error-exitcode", str(MEMCHECK_ERRORS)]
    proc = _run_python_under([sanitizer, *tool_args], args, timeout)
    print("\n".join(proc.stdout.splitlines()[-tail:]))
    print(proc.stderr[-1500:])
    verdict = {0: "clean", MEMCHECK_ERRORS: "errors found (report above)"}.get(
        proc.returncode, f"FAILED: the program exited with {proc.returncode}"
    )
    print(f"{tool}:", verdict)
    return proc.returncode == 0


def sanitized(checks) -> int:
    """The body of a script that ``memcheck`` runs: ``checks(rng)`` (a list of CheckResult, each kernel on a
    poisoned output) with every failure printed and a count of the verdicts; 1 if any failed. Without a GPU,
    one line and 1: the sanitizer has nothing to watch in the simulator."""
    from . import device

    if not device.on_gpu():
        print("needs a CUDA GPU; memcheck has nothing to check in the simulator")
        return 1
    results = checks(np.random.default_rng(0))
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(r)
    print(("PASS" if not failed else "FAIL") + f"  {len(results) - len(failed)} of {len(results)} checks")
    return 1 if failed else 0


def ncu_csv(args: list[str], metrics, kernels: str, shown: str, timeout: int = 600) -> str | None:
    """``ncu --csv`` over ``python *args`` from the repository's root: the named ``metrics`` of every
    launch of a kernel that ``kernels`` matches (ncu's --kernel-name, e.g. "regex:conv_"), as ncu prints
    them; without a GPU or ncu, one line saying where to see ``shown``, and None. A RuntimeError with
    the end of ncu's output where it fails."""
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise TypeError(f"args: expected a list of strings such as ['-m', 'kernels.conv.winograd'], got {args!r}")
    metrics = tuple(metrics) if not isinstance(metrics, str) else None
    if not metrics or not all(isinstance(m, str) for m in metrics):
        raise TypeError("metrics: expected names of ncu metrics, such as ('smsp__inst_executed.sum',), not one string")
    ncu = cuda_tool("ncu", shown)
    if not ncu:
        return None
    proc = _run_python_under([ncu, "--csv", "--kernel-name", kernels, "--metrics", ",".join(metrics)], args, timeout)
    if proc.returncode != 0 or '"Metric Name"' not in proc.stdout:
        raise RuntimeError(f"ncu failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
    return proc.stdout


def _module(*arrays):
    """CuPy where every one of ``arrays`` is a CuPy array (on a GPU), else NumPy."""
    if device.MODE != device.GPU:
        return np
    import cupy

    return cupy if all(isinstance(a, cupy.ndarray) for a in arrays) else np


def _real(a: np.ndarray, what: str) -> np.ndarray:
    """``a`` in float64; complex values (whose imaginary part the conversion would drop) and
    non-numbers (strings, objects, dates) are refused."""
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{what}: expected a real number dtype (bool, integer or float), got {a.dtype}")
    return a.astype(np.float64)


def _c_contiguous(x) -> bool:
    flags = getattr(x, "flags", None)
    if flags is not None:
        return bool(flags["C_CONTIGUOUS"] if not hasattr(flags, "c_contiguous") else flags.c_contiguous)
    strides = x.__cuda_array_interface__.get("strides")
    return strides is None
