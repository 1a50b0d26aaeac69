"""Exercises that ask for a CUDA C++ kernel: the student edits a starter's source text, and the checker
compiles it with NVRTC (``cuda_cpp.compile_source``).

The starter and the solutions are text in Python modules, never files of kernels/: they are no kernel source
of the book, and the GPU verdict ledger (kernels/**/*.cu) does not track them. On a GPU the checker runs the
kernel through the exercise's own ``launch`` exactly as ``exercise.Exercise`` runs a Numba one: fresh random
inputs at odd sizes, poisoned outputs in guarded buffers, the float64 reference. On a CPU a CUDA C++ kernel
cannot run, so the checker compiles it and reads its SASS (``sass.py``) for what the exercise asks
(``SassRule``: 16-byte loads, no local memory, ...), and the verdict says that its results are checked on a
GPU only. Everywhere, a source that does not compile fails with the compiler's errors. A notebook cell runs::

    exercise.check("conv-ex-vec4", source)   # source: the kernel's text, edited from the starter

and the grading command takes .cu files: ``python -m kernels.harness.exercise check conv-ex-vec4 alice.cu``.
There the kernel is compiled in the grading process (compiling runs none of its code) and, on a GPU, run in a
process of its own (``submission.grade``), like a Python submission.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import cuda_cpp, device, sass, submission
from .exercise import Exercise, Report, _hinted

COMPILER_LINES = 8  # of a failed compile's log, in the report


@dataclass(frozen=True)
class SassRule:
    """What the SASS of a correct kernel shows: ``count(instructions)`` instructions of what ``what`` names,
    at least ``least`` and at most ``most``; ``hint`` says how a kernel gets there."""

    what: str
    count: Callable
    least: int = 0
    most: int | None = None
    hint: str = ""

    def wanted(self) -> str:
        """What the exercise wants, in words: "at least 1", "none", "between 2 and 4"."""
        if self.most is None:
            return f"at least {self.least}"
        return "none" if self.most == 0 else f"between {self.least} and {self.most}"

    def holds(self, n: int) -> bool:
        return n >= self.least and (self.most is None or n <= self.most)


def opcodes(*bases: str, width: str | None = None) -> Callable:
    """A ``SassRule.count``: the instructions whose opcode is one of ``bases`` (LDG, STS, ...), with the
    modifier ``width`` (e.g. "128") where given."""

    def count(instructions) -> int:
        return sum(i.base in bases and (width is None or width in i.opcode.split(".")[1:]) for i in instructions)

    return count


@dataclass(frozen=True)
class CudaExercise:
    """One auto-checked exercise whose kernel is CUDA C++.

    ``kernel`` is the entry point's name (``extern "C" __global__``); ``launch(kernel, out, *inputs)`` the
    exercise's own launch of the loaded kernel (grid, block and arguments: the student writes only the
    kernel); ``make_inputs``, ``reference``, ``sizes``, ``atol``, ``rtol`` and ``out_dtype`` as for an
    ``exercise.Exercise``; ``sass`` what its SASS must show (``SassRule``), for ``arch`` (default: this GPU's
    target, the reference GPU's without one)."""

    label: str
    task: str
    kernel: str
    launch: Callable
    make_inputs: Callable
    reference: Callable
    sizes: tuple
    atol: float
    sass: tuple = ()
    rtol: float | None = None
    out_dtype: type = np.float32
    arch: str | None = None
    expect: tuple = ()  # the access recorder sees no CUDA C++ kernel

    @property
    def numeric(self) -> Exercise:
        """The results' check: an ``Exercise`` whose launch is this exercise's, of the student's kernel."""
        return Exercise(
            self.label,
            self.task,
            self.make_inputs,
            self.reference,
            self.sizes,
            self.atol,
            self.rtol,
            self.out_dtype,
            watched=False,
        )

    def launcher(self, source: str) -> Callable:
        """``launch(out, *inputs)`` running the kernel of ``source`` with this exercise's launch (needs a GPU)."""

        def launch(out, *inputs):
            self.launch(cuda_cpp.load_source(source, self.kernel, f"{self.label}.cu"), out, *inputs)

        return launch

    def check(self, source: str, rng: np.random.Generator | None = None) -> Report:
        """Compile ``source`` and check its SASS; on a GPU run it and check its results too."""
        compiled = self._sass(source)
        if isinstance(compiled, Report):
            return compiled
        numeric = self.numeric.check(self.launcher(source), rng) if device.on_gpu() else None
        return self._report(numeric, *compiled)

    def grade_file(self, path: Path, timeout: float = submission.TIMEOUT, *, kernels_copy=None, rng=None):
        """``submission.grade`` for a .cu file: compiled here; on a GPU run in a process of its own."""
        path = Path(path).resolve()
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return submission.Verdict(path, self.label, "FAIL", [f"FAIL  {self.label}: the file does not load ({exc})"])
        compiled = self._sass(source)
        if isinstance(compiled, Report):
            return submission.Verdict(path, self.label, "FAIL", compiled.lines)
        if not device.on_gpu():
            report = self._report(None, *compiled)
            return submission.Verdict(path, self.label, "PASS" if report.ok else "FAIL", report.lines)
        with tempfile.TemporaryDirectory(prefix="grade-cuda-") as tmp:
            wrapper = Path(tmp) / f"{path.stem}_launch.py"
            wrapper.write_text(
                "from pathlib import Path\n\nfrom kernels.harness import exercise\n\n"
                f"launch = exercise.get({self.label!r}).launcher(Path({str(path)!r}).read_text())\n"
            )
            verdict = submission.grade(self.numeric, wrapper, timeout, kernels_copy=kernels_copy, rng=rng)
        if verdict.status not in ("PASS", "FAIL"):  # TIMEOUT, CRASH, EXIT: nothing to add
            return submission.Verdict(path, self.label, verdict.status, verdict.lines)
        numeric = Report(self.label, verdict.ok, verdict.lines)
        report = self._report(numeric, *compiled)
        return submission.Verdict(path, self.label, "PASS" if report.ok else "FAIL", report.lines)

    # --- the compile and the SASS -----------------------------------------------------------------------------

    def _sass(self, source: str) -> tuple[str, list, list] | Report:
        """(the arch, a line per rule that holds, a sentence per rule that does not), or a failing Report where
        ``source`` does not compile or has no kernel of this exercise's name."""
        arch = self.arch or device.target_arch()
        if not isinstance(source, str):
            raise TypeError(f"{self.label}: expected the kernel's CUDA C++ source as text, got {type(source).__name__}")
        try:
            compiled = cuda_cpp.compile_source(source, arch, f"{self.label}.cu")
        except RuntimeError as exc:
            log = [line for line in str(exc).splitlines()[1:] if line.strip()]
            errors = [line for line in log if "error" in line] or log
            return Report(
                self.label,
                False,
                [f"FAIL  {self.label}: the kernel does not compile for {arch}"]
                + [f"  {line}" for line in errors[:COMPILER_LINES]],
            )
        try:
            instructions = sass.disassemble(compiled, self.kernel)
        except ValueError:
            return Report(
                self.label,
                False,
                [
                    f'FAIL  {self.label}: the source has no kernel `{self.kernel}`: keep the starter\'s extern "C" '
                    f"__global__ void {self.kernel}(...)"
                ],
            )
        held, missed = [], []
        for rule in self.sass:
            n = rule.count(instructions)
            if rule.holds(n):
                held.append(f"  SASS ({arch}): {n} {rule.what}; the exercise wants {rule.wanted()}")
            else:
                found = f"its SASS ({arch}) has {n} {rule.what}; the exercise wants {rule.wanted()}"
                missed.append(_hinted(found, rule.hint))
        return arch, held, missed

    def _report(self, numeric: Report | None, arch: str, held: list, missed: list) -> Report:
        """One report of the results' check (None without a GPU) and the SASS's."""
        if numeric is not None and not numeric.ok:
            return Report(self.label, False, numeric.lines + [f"  - {m}" for m in missed])
        if missed:
            done = "its results are right, but" if numeric is not None else "it compiles, but"
            note = [] if numeric is not None else ["  (its results are checked on a GPU only)"]
            verdict = f"FAIL  {self.label}: {done} its SASS misses what the exercise asks"
            lines = [*(numeric.lines[:-1] if numeric else []), verdict, *(f"  - {m}" for m in missed), *note]
            return Report(self.label, False, lines)
        if numeric is not None:
            return Report(self.label, True, numeric.lines[:-1] + held + numeric.lines[-1:])
        return Report(
            self.label,
            True,
            held
            + [
                f"PASS  {self.label}: compiled for {arch}, and its SASS shows what the exercise asks; CUDA C++ cannot "
                "run in the simulator, so its results are checked on a GPU only"
            ],
        )
