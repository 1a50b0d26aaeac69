"""Auto-checked exercises: run a student's kernel against the float64 reference and say, in plain
words, what is wrong.

The student writes ``launch(out, *inputs)``: it launches their kernel (``@cuda.jit``) so that it
fills ``out``. The checker runs it on fresh random inputs of several sizes (odd ones, not multiples
of a tile; the largest first), in the simulator on a CPU and on the GPU when there is one. Every
output is poisoned first and every array sits in a larger buffer whose tail is poisoned too, so that
a forgotten element, a write past the end and a read past the end all show. A failure is explained:
unwritten elements and where they are (the tail, the borders, a repeating pattern) and, from the
threads the launch had, whether the grid is too small or the index misses (a block size written
into it, rows and columns swapped), NaN, an offset or a factor, a transpose or a shift, an index
outside an array, a kernel that does not compile, an output written by host code rather than by a
kernel.

An exercise about performance also declares what a correct kernel's memory accesses must look
like (``expect``: coalesced, each input read once, no bank conflicts). In the simulator the checker
then counts every access (``accesses.py``) and fails a correct kernel that misses one, saying why;
it reports races on shared memory (a missing ``cuda.syncthreads()``) too. On a GPU it checks the
results only, and says so.

A chapter registers its exercises in ``kernels/<chapter>/exercises.py`` under the label of the
notebook's ``{exercise}`` directive: what grading needs, and no answer. Its ``solutions.py`` attaches
the published solution and deliberately wrong kernels to them, for the book's tests; the student
edition leaves that file out, and nothing here needs it to grade. A notebook cell (or a teacher
grading files) then runs::

    from kernels.harness import exercise
    exercise.check("machine-ex-saxpy", launch)

    python -m kernels.harness.exercise check machine-ex-saxpy alice.py bob.py   # each defines launch

The command grades each file in a process of its own (``submission.py``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import accesses, device, submission
from .check import compare, poison_value, to_host
from .cuda_cpp import KERNELS

# Elements of poison after every array: a kernel overrunning by up to a block of 1024 threads writes
# (or reads) here instead of into another allocation, where the damage would go unseen.
GUARD = 1024
_REGISTRY: dict[str, Exercise] = {}
_SOLUTIONS: dict[str, Solutions] = {}


@dataclass(frozen=True)
class Exercise:
    """One auto-checked exercise.

    ``make_inputs(rng, size)`` returns the arguments after ``out`` (host NumPy arrays or scalars);
    ``reference(*inputs)`` the expected output in float64. ``expect`` names what the accesses of a
    correct kernel must also be (``accesses.EXPECTATIONS``).
    """

    label: str
    task: str
    make_inputs: Callable
    reference: Callable
    sizes: tuple
    atol: float
    rtol: float | None = None
    out_dtype: type = np.float32
    expect: tuple = ()

    def check(self, launch: Callable, rng: np.random.Generator | None = None) -> Report:
        return check_kernel(
            launch,
            self.reference,
            self.make_inputs,
            sizes=self.sizes,
            atol=self.atol,
            rtol=self.rtol,
            out_dtype=self.out_dtype,
            name=self.label,
            rng=rng,
            expect=self.expect,
        )


@dataclass(frozen=True)
class Part:
    """One answer of a ``Question``: ``expected()`` computes it when the student checks (from the
    exercise's data or from this GPU's stored run); a number matches within ``rtol``, a collection
    of numbers as a set, a word case-blind. ``hint`` says what to look at again, without the answer."""

    expected: Callable
    hint: str
    rtol: float = 0.02


@dataclass(frozen=True)
class Question:
    """An exercise whose answers are numbers or words (a count, a prediction, a choice), one ``Part``
    each. The explanations an exercise also asks for are for the teacher (book/teachers.md)."""

    label: str
    task: str
    parts: dict

    def check(self, answers: dict, rng=None) -> Report:
        """``answers`` maps each part's name to the student's value; None (not answered yet) fails."""
        if not isinstance(answers, dict):
            raise TypeError(f"{self.label}: answers: expected a dict {{part: value}}, got {type(answers).__name__}")
        unknown = set(answers) - set(self.parts)
        if unknown:
            raise ValueError(f"{self.label}: no part named {sorted(unknown)}; the parts are {list(self.parts)}")
        lines, ok = [], True
        for name, part in self.parts.items():
            given = answers.get(name)
            if given is None:
                lines.append(f"  {name}: not answered yet")
                ok = False
            elif _matches(given, part.expected(), part.rtol):
                lines.append(f"  {name}: right")
            else:
                lines.append(f"  {name}: not yet. {part.hint}")
                ok = False
        verdict = f"PASS  {self.label}" if ok else f"FAIL  {self.label}"
        return Report(self.label, ok, [*lines, verdict])


def _matches(given, want, rtol: float) -> bool:
    if isinstance(want, str):
        return isinstance(given, str) and given.strip().lower() == want.lower()
    if isinstance(want, (set, frozenset, list, tuple)):
        try:
            return len(set(given)) == len(set(want)) and all(
                any(_matches(g, w, rtol) for w in want) for g in set(given)
            )
        except TypeError:
            return False
    if isinstance(given, (bool, str)) or not isinstance(given, (int, float, np.integer, np.floating)):
        return False
    return bool(np.isclose(float(given), float(want), rtol=rtol, atol=0.0))


@dataclass(frozen=True)
class Solutions:
    """An exercise's published ``launch``, and ``wrong``: a name for each deliberately wrong ``launch``,
    mapped to ``(launch, words)``, words its report must contain. The tests run both, proving the
    checker can pass, fail and explain."""

    solution: Callable
    wrong: dict


@dataclass
class Report:
    """The verdict of every size checked, then, on a failure, what went wrong in plain words."""

    name: str
    ok: bool
    lines: list

    def __str__(self) -> str:
        return "\n".join(self.lines)


def register(ex: Exercise | Question) -> Exercise | Question:
    if ex.label in _REGISTRY and _REGISTRY[ex.label] is not ex:
        raise ValueError(f"exercise label {ex.label!r} is registered twice")
    if "-ex-" not in ex.label:
        raise ValueError(f"exercise label {ex.label!r} must read '<chapter>-ex-<name>', like the notebook's")
    if isinstance(ex, Question):
        if not ex.parts or not all(isinstance(p, Part) for p in ex.parts.values()):
            raise ValueError(f"{ex.label}: parts must map each answer's name to a Part, got {ex.parts!r}")
        _REGISTRY[ex.label] = ex
        return ex
    if not ex.sizes:
        raise ValueError(f"{ex.label}: name at least one size to check")
    if set(ex.expect) - set(accesses.EXPECTATIONS):
        raise ValueError(f"{ex.label}: expect must be among {list(accesses.EXPECTATIONS)}, got {list(ex.expect)}")
    _REGISTRY[ex.label] = ex
    return ex


def attach(label: str, solution: Callable, wrong: dict) -> None:
    """Attach the published solution and the wrong kernels (``Solutions``) to exercise ``label``."""
    get(label)
    if not wrong:
        raise ValueError(f"{label}: name at least one wrong kernel, to prove the checker can fail it")
    if label in _SOLUTIONS:
        raise ValueError(f"{label}: solutions attached twice")
    _SOLUTIONS[label] = Solutions(solution, dict(wrong))


def _chapters_with(module: str) -> list[str]:
    return sorted(p.parent.name for p in KERNELS.glob(f"*/{module}.py"))


def _chapters_with_exercises() -> list[str]:
    return _chapters_with("exercises")


def get(label: str) -> Exercise:
    """The exercise of that label, importing its chapter's ``exercises`` module on first use."""
    chapter = label.split("-ex-")[0]
    if chapter in _chapters_with_exercises():
        importlib.import_module(f"kernels.{chapter}.exercises")
    if label not in _REGISTRY:
        known = ", ".join(e.label for e in all_exercises()) or "none"
        raise KeyError(f"no auto-checked exercise {label!r}; registered: {known}")
    return _REGISTRY[label]


def all_exercises() -> list[Exercise]:
    for chapter in _chapters_with_exercises():
        importlib.import_module(f"kernels.{chapter}.exercises")
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def all_solutions() -> dict[str, Solutions]:
    """Every published solution, by label, importing the chapters' ``solutions`` modules on first use:
    empty in the student edition, which has none."""
    for chapter in _chapters_with("solutions"):
        importlib.import_module(f"kernels.{chapter}.solutions")
    return dict(sorted(_SOLUTIONS.items()))


def check(exercise: str | Exercise, launch: Callable) -> Report:
    """Check a student's ``launch`` against a registered exercise, print the report and return it."""
    ex = exercise if isinstance(exercise, (Exercise, Question)) else get(exercise)
    if isinstance(ex, Question):
        raise TypeError(f"{ex.label} asks for answers, not a kernel: exercise.answer({ex.label!r}, part=value, ...)")
    report = ex.check(launch)
    print(report)
    return report


def answer(label: str, **answers) -> Report:
    """Check a student's answers to a ``Question``, print which parts are right and return the report."""
    ex = get(label)
    if not isinstance(ex, Question):
        raise TypeError(f"{label} asks for a kernel: exercise.check({label!r}, launch)")
    report = ex.check(answers)
    print(report)
    return report


def check_kernel(
    launch: Callable,
    reference: Callable,
    make_inputs: Callable,
    *,
    sizes,
    atol: float,
    rtol: float | None = None,
    out_dtype=np.float32,
    name: str = "kernel",
    rng: np.random.Generator | None = None,
    device_only: bool = True,
    expect=(),
) -> Report:
    """Run ``launch(out, *inputs)`` at every size and compare ``out`` with ``reference(*inputs)``.

    The size with the largest output runs first: a mistake shows there with the most elements to
    place it (an offset, a period, a tail), where one element would only say "wrong"; the smaller
    sizes follow, for the mistakes only they show. Stops at the first size that fails and explains
    that failure. The verdict lines name the sizes and tolerances but no measured error, so they
    read the same on a GPU and in the simulator.
    ``device_only=False`` lets host code fill ``out``: for the checker's own tests, whose host-side
    launches stand in for a kernel's mistakes. With ``expect`` (``accesses.EXPECTATIONS``), the
    simulator also counts the accesses and fails a kernel that misses one.
    """
    rng = rng or np.random.default_rng()
    bound = f"max|err| <= {atol:g}" + ("" if rtol is None else f", rel <= {rtol:g}")
    lines = []
    counted = []
    cases = []
    for size in sizes:
        inputs = tuple(make_inputs(rng, size))
        cases.append((size, inputs, np.asarray(reference(*inputs), dtype=np.float64)))
    for size, inputs, want in sorted(cases, key=lambda case: -case[2].size):  # stable: ties keep their order
        problems, counts = _run_and_explain(launch, inputs, want, np.dtype(out_dtype), atol, rtol, device_only, expect)
        if problems:
            lines.append(f"FAIL  {name} size={size}: {bound}")
            lines += [f"  - {p}" for p in problems]
            return Report(name, False, lines)
        lines.append(f"pass  {name} size={size}")
        counted += [counts] if counts else []
    if expect and counted:
        lines.append("  " + accesses.summary(counted, expect))
    elif expect:
        lines.append(
            f"  note: the accesses ({', '.join(expect)}) are counted in the simulator only "
            "(NUMBA_ENABLE_CUDASIM=1); on a GPU only the results were checked"
        )
    lines.append(f"PASS  {name}: {len(sizes)} sizes, {bound}")
    return Report(name, True, lines)


# --- running one size ---------------------------------------------------------------------------


def _sentinel_value(dtype: np.dtype):
    """A second poison, finite and unlikely to be computed: an element holding it after the second
    run was never written (rather than computed as NaN)."""
    return np.finfo(dtype).min if dtype.kind in "fc" else np.iinfo(dtype).min


def _guarded(data: np.ndarray | None, shape, dtype, fill, guard=None):
    """A device array of ``shape`` that is the head of a buffer with GUARD poisoned elements after it.

    Returns (view, buffer). ``data`` (host) fills the view; without it the view holds ``fill`` too.
    The guard holds ``guard`` (default: ``fill``).
    """
    xp = device.xp()
    n = int(np.prod(shape))
    host = np.full(n + GUARD, fill if guard is None else guard, dtype=dtype)
    host[:n] = fill
    if data is not None:
        host[:n] = np.ascontiguousarray(data, dtype=dtype).ravel()
    buf = xp.asarray(host)
    return buf[:n].reshape(shape), buf


def _synchronize():
    if device.on_gpu():
        import cupy

        cupy.cuda.Device().synchronize()


# A launch must fill `out` with a kernel: one that computes the answer with NumPy (or copies it into the
# CuPy array on a GPU) would otherwise pass. While `launch` runs, every Numba kernel launch is wrapped:
# a snapshot of `out`'s whole buffer is taken as each launch ends, and compared with the buffer as the
# next launch starts and as `launch` returns. A difference there was written by something other than a
# kernel. Comparing snapshots, rather than trying to forbid host writes, works the same for NumPy,
# CuPy and Numba arrays and for every way of writing (slicing, np.copyto, .set(), copy_to_device).
# Kernels launched outside Numba (a CuPy RawKernel) are not seen: the exercises ask for @cuda.jit ones.
# The launches that changed `out` also leave their threads along x, y and z: where the last elements were
# never written, they tell a grid too small from an index that never reaches the end.


def _launch_entry():
    """The class and method that every Numba kernel launch goes through in this mode."""
    if device.on_gpu():
        from numba.cuda.dispatcher import _LaunchConfiguration  # kernel[grid, block] returns one

        return _LaunchConfiguration, "__call__"
    from numba.cuda.simulator.kernel import FakeCUDAKernel  # also runs device functions: skipped below

    return FakeCUDAKernel, "__call__"


def _threads_of(kernel) -> tuple:
    """A configured launch's threads along x, y and z (Numba has made its grid and block 3 integers each)."""
    grid, block = (kernel.griddim, kernel.blockdim) if device.on_gpu() else (kernel.grid_dim, kernel.block_dim)
    return tuple(g * b for g, b in zip(grid, block, strict=True))


class _KernelWrites:
    """Whether anything but a Numba kernel launch wrote ``buf`` while ``watching()``, and the threads
    of the launches that did (see above)."""

    def __init__(self, buf):
        self.buf = buf
        self.launches = 0
        self.host_wrote = False
        self.writers = []  # (threads along x, y, z) of each launch that changed buf
        self._depth = 0
        self._seen = self._snapshot()

    def _snapshot(self) -> np.ndarray:
        _synchronize()
        return np.array(to_host(self.buf)).view(np.uint8)  # bytes: NaN equals NaN

    def _check_unchanged(self):
        self.host_wrote |= not np.array_equal(self._snapshot(), self._seen)

    def _wrap(self, call):
        def launch_kernel(kernel, *args, **kwargs):
            # A device function (the simulator routes those through here too) or a call made while a
            # kernel runs is part of that kernel.
            if self._depth or getattr(kernel, "_device", False):
                return call(kernel, *args, **kwargs)
            before = self._snapshot()
            self.host_wrote |= not np.array_equal(before, self._seen)
            self._depth += 1
            try:
                return call(kernel, *args, **kwargs)
            finally:
                self._depth -= 1
                self.launches += 1
                self._seen = self._snapshot()
                if not np.array_equal(self._seen, before):
                    self.writers.append(_threads_of(kernel))

        return launch_kernel

    @contextmanager
    def watching(self):
        cls, name = _launch_entry()
        call = getattr(cls, name)
        setattr(cls, name, self._wrap(call))
        try:
            yield self
        finally:
            setattr(cls, name, call)
        self._check_unchanged()

    def threads(self) -> tuple | None:
        """The most threads along x, y and z of the launches that wrote ``buf``; None if none did."""
        return tuple(max(t) for t in zip(*self.writers, strict=True)) if self.writers else None

    def problem(self) -> str | None:
        if self.launches == 0:
            return (
                "no kernel ran: the output was written by host code"
                if self.host_wrote
                else "no kernel ran: `launch` launched no @cuda.jit kernel and `out` was never written"
            )
        if self.host_wrote:
            return (
                "the output was written by host code outside the kernel launches (before, between "
                "or after them): only a kernel may write `out`"
            )
        return None


def _launch_once(launch, inputs, want_shape, out_dtype, fill, device_only, record=False):
    """Run the student's launch on guarded copies; returns (out, out_buf, in_bufs, problem, counts, threads),
    where ``problem`` is a sentence for an exception or for an output that no kernel wrote, ``counts`` the
    accesses counted where ``record`` (in the simulator), else None, and ``threads`` those of the launches
    that wrote ``out`` (``_KernelWrites.threads``)."""
    args, in_bufs = [], []
    for x in inputs:
        if isinstance(x, np.ndarray):
            view, buf = _guarded(x, x.shape, x.dtype, poison_value(x.dtype))
            args.append(view)
            in_bufs.append((x, buf))
        else:
            args.append(x)
    # The output's guard holds the finite sentinel, not NaN: an overrun that reads the inputs' NaN
    # guards writes NaN, which a NaN guard would hide (it did, on the GPU).
    out, out_buf = _guarded(None, want_shape, out_dtype, fill, guard=_sentinel_value(out_dtype))
    writes = _KernelWrites(out_buf)
    try:
        with writes.watching(), accesses.recording() if record else nullcontext() as log:
            returned = launch(out, *args)
    except Exception as exc:  # noqa: BLE001 -- whatever the student's code raises is explained, not re-raised
        return out, out_buf, in_bufs, explain_exception(exc), None, None
    counts = accesses.Counts(log) if record else None
    if hasattr(returned, "shape") and returned is not out:
        return (
            out,
            out_buf,
            in_bufs,
            (
                "`launch` returned an array instead of filling `out`: the checker "
                "grades `out`, which a kernel must write"
            ),
            counts,
            None,
        )
    return out, out_buf, in_bufs, writes.problem() if device_only else None, counts, writes.threads()


def _run_and_explain(launch, inputs, want, out_dtype, atol, rtol, device_only, expect=()):
    """The problems found at one size (sentences; none if it passed) and the accesses counted, if any."""
    got, out_buf, in_bufs, problem, counts, threads = _launch_once(
        launch,
        inputs,
        want.shape,
        out_dtype,
        poison_value(out_dtype),
        device_only,
        record=bool(expect) and not device.on_gpu(),
    )
    if problem is not None:
        return [problem], counts
    problems = []
    n = want.size
    tail = to_host(out_buf)[n:]
    if not _all_equal(tail, _sentinel_value(out_dtype)):
        k = int(np.count_nonzero(~_equal(tail, _sentinel_value(out_dtype))))
        problems.append(
            f"the kernel wrote {k} elements outside an array, past the end of `out` (which has "
            f"{n}): a missing or wrong bounds check (`if i < out.size:`); on a GPU such writes "
            "land in whatever memory follows"
        )
    for pos, (host, buf) in enumerate(in_bufs):
        now = to_host(buf)
        if not np.array_equal(now[: host.size], host.ravel(), equal_nan=host.dtype.kind in "fc"):
            problems.append(
                f"the kernel changed its input argument {pos + 1} (of shape {host.shape}); it should only read it"
            )
        overrun = ~_equal(now[host.size :], poison_value(host.dtype))
        if overrun.any():
            problems.append(
                f"the kernel wrote {int(overrun.sum())} elements outside an array, past the end "
                f"of its input argument {pos + 1} (which has {host.size}): a missing or wrong "
                "bounds check or a wrong index; on a GPU such writes land in whatever memory follows"
            )
    got_host = to_host(got)
    result = compare(got_host, want, atol=atol, rtol=rtol)
    if result.ok:
        return problems + (accesses.problems(counts, expect) if counts else []), counts
    # A race on shared memory explains wrong values: say it first.
    problems += accesses.problems(counts) if counts else []
    unwritten = None
    if result.n_nonfinite:
        # Run again with a finite second poison: what still holds it was never written at all.
        again, _, _, problem, _, _ = _launch_once(
            launch, inputs, want.shape, out_dtype, _sentinel_value(out_dtype), device_only
        )
        if problem is None:
            unwritten = _equal(to_host(again), _sentinel_value(out_dtype))
    # explain() knows the usual patterns; any other failure is still named, by the comparison's reason.
    return problems + (
        explain(got_host.astype(np.float64), want, atol=atol, rtol=rtol, unwritten=unwritten, threads=threads)
        or [result.reason()]
    ), counts


def _equal(a: np.ndarray, value) -> np.ndarray:
    return np.isnan(a) if isinstance(value, float) and np.isnan(value) else a == value


def _all_equal(a: np.ndarray, value) -> bool:
    return bool(_equal(a, value).all())


# --- explaining ---------------------------------------------------------------------------------


def explain_exception(exc: BaseException) -> str:
    """One plain sentence for an exception raised by a launch."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    kind = type(exc).__name__
    if isinstance(exc, IndexError):
        return (
            f"the kernel indexed outside an array ({text}): a missing bounds check (`if i < n:`) or a "
            "wrong index. The simulator stops there; on a GPU the same bug is an illegal memory "
            "access or silently wrong data"
        )
    if "ILLEGAL_ADDRESS" in text.upper() or "illegal memory access" in text.lower():
        return (
            "the kernel made an illegal memory access: an index outside an array. The CUDA context is "
            "now unusable -- restart the Python kernel, then run the check in the simulator "
            "(NUMBA_ENABLE_CUDASIM=1) or under compute-sanitizer to see which index"
        )
    if kind in ("TypingError", "LoweringError", "UnsupportedError", "NumbaError") or "numba" in type(exc).__module__:
        return f"the kernel does not compile ({kind}): {text}"
    return f"the launch raised {kind}: {text}"


def _describe_where(mask: np.ndarray, unwritten: bool = False, threads: tuple | None = None) -> tuple[str, str]:
    """Where the marked elements are, and a hint about what usually causes that pattern.

    ``unwritten``: the marked elements were never written, so a tail points at the grid; ``threads``
    (the launch's threads along x, y and z) then tells a grid too small from an index that misses.
    Elements written but wrong at the end point at what the last threads read instead.
    """
    n, k = mask.size, int(np.count_nonzero(mask))
    if k == n:
        return "every element", ""
    swapped = _swapped(mask, threads) if unwritten else None
    if swapped:
        return swapped
    flat = mask.ravel()
    first = int(np.argmax(flat))
    if mask.ndim >= 2:
        for axis in range(mask.ndim):
            idx = np.moveaxis(mask, axis, 0)
            rows = idx.reshape(idx.shape[0], -1)
            hit = rows.all(axis=1)
            if (rows.any(axis=1) == hit).all() and hit.any():
                at = np.flatnonzero(hit)
                if at[-1] == mask.shape[axis] - 1 and (np.diff(at) == 1).all():
                    return (
                        f"the last {at.size} indices along axis {axis} (from {at[0]} on)",
                        _tail_hint(unwritten, threads, mask.shape, axis),
                    )
    if not flat[:first].any() and flat[first:].all():
        last = "the last element" if k == 1 else f"the last {k} in memory order (from flat index {first} on)"
        return last, _tail_hint(unwritten, threads, mask.shape)
    if mask.ndim >= 2:
        depth = _border_depth(mask)
        if depth is not None:
            return (
                f"only within {depth} element{'s' if depth > 1 else ''} of the border",
                "the interior is right, so look at the edges: the halo loads, the zero padding, "
                "the bounds checks of the neighbours read",
            )
    period = _period(flat)
    if period is not None:
        positions = np.flatnonzero(flat[:period])
        shown = ", ".join(str(p) for p in positions[:6]) + (", ..." if positions.size > 6 else "")
        return (
            f"a pattern repeating every {period} elements (positions {shown} of each group)",
            "a pattern with a period points at the thread/block index arithmetic "
            "(blockIdx * blockDim + threadIdx, a stride, a tile size)",
        )
    at = tuple(int(i) for i in np.unravel_index(first, mask.shape))
    return f"{k} of {n} elements, the first at index {at}", ""


def _launch_dims(threads: tuple) -> int:
    """How many dimensions a launch uses: 2 for a grid of (x, y) threads with more than one along y."""
    return max((d + 1 for d, t in enumerate(threads) if t > 1), default=1)


def _tail_hint(unwritten: bool, threads: tuple | None, shape: tuple, axis: int | None = None) -> str:
    """Why the last elements (along ``axis``, else in memory order) are wrong or were never written.

    A launch with as many dimensions as the output runs x along its last axis, y along the one before;
    a 1-D launch runs along memory order. Where that launch had enough threads, the grid is not short:
    the index never reaches the end.
    """
    if not unwritten:
        return "only at the end: look at what the last block's threads past the end read or leave unset (a sum needs 0)"
    dims = None if threads is None else _launch_dims(threads)
    if axis is not None and dims == len(shape):
        dim, extent, what = len(shape) - 1 - axis, shape[axis], f"the {shape[axis]} indices of axis {axis}"
    elif axis is None and dims == 1:
        dim, extent, what = 0, int(np.prod(shape)), f"the {int(np.prod(shape))} elements"
    else:
        return (
            "the grid or the loop stops short of the end: round the block count up, "
            "(n + threads - 1) // threads, or use a grid-stride loop"
        )
    along = f"{threads[dim]} threads" + ("" if dims == 1 else f" along {'xyz'[dim]}")
    if threads[dim] < extent:
        return (
            f"the launch has {along} for {what}: round the block count up, (n + threads - 1) // threads, "
            "or use a grid-stride loop"
        )
    return (
        f"the launch has {along} for {what}, enough for all, yet the index never reaches the last ones: "
        "it ignores the block size or the block index (e.g. blockIdx.x * 32 in blocks of 64 threads); "
        f"cuda.grid({dims}) computes it from the launch"
    )


def _swapped(mask: np.ndarray, threads: tuple | None) -> tuple[str, str] | None:
    """(where, hint) for a 2-D output written only in its top-left corner because rows and columns are
    swapped between the grid and the index: the launch had enough threads the other way round."""
    if threads is None or mask.ndim != 2 or _launch_dims(threads) != 2:
        return None
    rows, cols = mask.shape
    x, y = threads[:2]
    for high, wide, kernel_swapped in ((x, y, True), (y, x, False)):
        box = np.ones(mask.shape, bool)
        box[:high, :wide] = False
        if np.array_equal(mask, box) and wide >= rows and high >= cols:
            where = f"all but the top-left {min(high, rows)} x {min(wide, cols)} corner (rows x columns)"
            fix = (
                "with x along a row, but the index takes x as the row: `c, r = cuda.grid(2)`"
                if kernel_swapped
                else "only with x down the rows, but the index takes x as the column: size x from the columns"
            )
            return where, (
                f"rows and columns swapped: the launch has {x} threads along x and {y} along y, enough for "
                f"{rows} rows and {cols} columns {fix}"
            )
    return None


def _border_depth(mask: np.ndarray, max_depth: int = 8) -> int | None:
    """The smallest d such that every marked element lies within d of an edge, if the interior is clean."""
    grids = np.indices(mask.shape)
    dist = np.min([np.minimum(g, s - 1 - g) for g, s in zip(grids, mask.shape, strict=True)], axis=0)
    depth = int(dist[mask].max()) + 1
    if depth > max_depth or (dist >= depth).sum() == 0:
        return None
    return depth


def _period(flat: np.ndarray) -> int | None:
    """The shortest period of the pattern, among the lengths a block, a warp or a tile gives."""
    candidates = [*range(2, 65), *range(96, 1025, 32)]
    for p in (p for p in candidates if 2 * p <= flat.size):
        pattern = flat[:p]
        if pattern.any() and not pattern.all() and np.array_equal(flat[p:], flat[:-p]):
            return p
    return None


def explain(
    got: np.ndarray,
    want: np.ndarray,
    *,
    atol: float,
    rtol: float | None = None,
    unwritten: np.ndarray | None = None,
    threads: tuple | None = None,
) -> list[str]:
    """Plain sentences for what differs between ``got`` and ``want`` (float64 host arrays, same shape).

    ``unwritten`` marks elements known never to have been written (from a second, differently
    poisoned run); without it every NaN counts as computed. ``threads``, the threads along x, y and z
    of the launches that wrote the output, tells a grid too small from an index that misses the end.
    """
    finite = np.isfinite(want)
    nonfinite = ~np.isfinite(got) & finite
    unwritten = np.zeros(want.shape, bool) if unwritten is None else (unwritten & finite)
    computed_nan = nonfinite & ~unwritten
    both = finite & np.isfinite(got)
    diff = np.where(both, got - want, 0.0)
    wrong = both & (np.abs(diff) > atol)
    out = []
    if unwritten.any():
        where, hint = _describe_where(unwritten, unwritten=True, threads=threads)
        out.append(
            f"{int(unwritten.sum())} of {want.size} output elements were never written "
            f"(they still hold the poison): {where}" + (f". Likely: {hint}" if hint else "")
        )
    if computed_nan.any():
        where, hint = _describe_where(computed_nan)
        out.append(
            f"{int(computed_nan.sum())} elements are NaN or Inf where the reference is finite: {where}. "
            "Likely: a read past the end of an input (the checker poisons what follows each array), "
            "of uninitialized shared memory, or a division by zero" + (f"; {hint}" if hint else "")
        )
    if wrong.any():
        out += _explain_values(got, want, diff, wrong, both, atol)
    elif not out and rtol is not None:
        out.append(
            f"every element is within max|err| <= {atol:g}, but the relative error over the whole "
            f"output exceeds {rtol:g}: small errors everywhere, e.g. a different rounding or summation order"
        )
    return out


def _explain_values(got, want, diff, wrong, both, atol) -> list[str]:
    n_wrong = int(wrong.sum())
    worst = np.unravel_index(int(np.argmax(np.abs(diff))), want.shape)
    example = (
        f"the largest error is at index {tuple(int(i) for i in worst)}: got {got[worst]:.6g}, "
        f"expected {want[worst]:.6g}"
    )
    pattern = _global_pattern(got, want, diff, both, atol)
    if pattern:
        return [pattern, example]
    where, hint = _describe_where(wrong)
    first = f"{n_wrong} of {want.size} elements are wrong ({where})" + (f". Likely: {hint}" if hint else "")
    max_err = float(np.abs(diff).max())
    if max_err < 100 * atol:
        first += (
            f"; the errors are small (largest {max_err:.3g} against a tolerance of {atol:g}): a different "
            "formula or precision (a float64 constant, a missing fma, a different summation order)"
        )
    return [first, example]


def _global_pattern(got, want, diff, both, atol) -> str | None:
    """A single cause that explains every element: transpose, shift, constant offset or factor."""
    if want.ndim == 2 and want.shape[0] == want.shape[1] > 1 and np.allclose(got, want.T, atol=atol, rtol=0):
        return "the output is the transpose of the expected one: rows and columns (x and y, i and j) are swapped"
    for axis in range(want.ndim):
        for shift in (1, -1, 2, -2):
            if want.shape[axis] <= 2 * abs(shift) + 1:
                continue
            moved = np.roll(want, shift, axis=axis)
            inner = [slice(None)] * want.ndim
            inner[axis] = slice(shift, None) if shift > 0 else slice(None, shift)
            inner = tuple(inner)
            if np.allclose(got[inner], moved[inner], atol=atol, rtol=0) and not np.allclose(
                got[inner], want[inner], atol=atol, rtol=0
            ):
                return (
                    f"the output is the expected one shifted by {shift} along axis {axis}: "
                    f"out[i] holds what belongs at i {'-' if shift > 0 else '+'} {abs(shift)}, "
                    "an off-by-one in an index"
                )
    if not both.all() or want.size < 8:  # a few elements fit any offset or factor
        return None
    d = diff[both]
    if np.ptp(d) <= 2 * atol and abs(d.mean()) > atol:
        return (
            f"every element is off by the same constant, {d.mean():.4g}: a term added once too often or "
            "missing (an initial value, a bias, the + c of an fma)"
        )
    safe = both & (np.abs(want) > 1e3 * atol)
    if safe.sum() >= max(2, want.size // 2):
        ratio = got[safe] / want[safe]
        r = float(np.median(ratio))
        if abs(r - 1) > 1e-3 and np.allclose(got[both], r * want[both], atol=atol, rtol=1e-3):
            twice = " (twice: is one contribution added twice?)" if abs(r - 2) < 1e-3 else ""
            return (
                f"every element is {r:.4g} times the expected value{twice}: a scale factor missing, applied "
                "twice or wrong"
            )
    return None


# --- grading files from the command line --------------------------------------------------------


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.harness.exercise", description="List the auto-checked exercises, or grade submissions."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every registered exercise and its task")
    grade = sub.add_parser(
        "check", help="check files that each define launch(out, *inputs), each in a process of its own"
    )
    grade.add_argument("label")
    grade.add_argument("files", nargs="+", type=Path)
    grade.add_argument(
        "--timeout",
        type=_seconds,
        default=submission.TIMEOUT,
        help="seconds a file may run before it is stopped (default %(default)g)",
    )
    args = parser.parse_args(argv)
    if args.command == "list":
        for ex in all_exercises():
            print(f"{ex.label:<28} {ex.task}")
        return 0
    try:
        ex = get(args.label)
    except KeyError as exc:
        parser.error(exc.args[0])
    if isinstance(ex, Question):
        parser.error(f"{ex.label} asks for answers, not a kernel: students check them in the notebook")
    verdicts = []
    for path in args.files:
        print(f"== {path}", flush=True)
        verdicts.append(submission.grade(ex.label, path, args.timeout))
        print(verdicts[-1], flush=True)
    failed = sum(not v.ok for v in verdicts)
    print()
    print(submission.table(verdicts))
    print(f"{len(verdicts) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    from kernels.harness import exercise as _registered  # one registry: the module chapters import

    sys.exit(_registered.main())
