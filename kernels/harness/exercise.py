"""Auto-checked exercises: run a student's kernel against the float64 reference and say, in plain
words, what is wrong; check a student's numbers and words against the expected answers.

The student writes ``launch(out, *inputs)``: it launches their kernel (``@cuda.jit``) so that it
fills ``out``. The checker runs it on fresh random inputs of several sizes (odd ones, not multiples
of a tile; the largest first), in the simulator on a CPU and on the GPU when there is one. Every
output is poisoned first and every array sits in a larger buffer whose tail is poisoned too, so that
a forgotten element, a write past the end and a read past the end all show. A failure is explained:
unwritten elements and where they are (the tail, the borders, a repeating pattern) and, from the
threads the launch had, whether the grid is too small or the index misses (a block size written
into it, rows and columns swapped), NaN, an offset or a factor, a transpose or a shift, an index
outside an array, a kernel that does not compile, an output written by host code rather than by a
kernel, an output that no kernel computed from the inputs (a kernel handed an answer made on the host).

An exercise about performance also declares what a correct kernel's memory accesses must look
like (``expect``: coalesced, each input read once, no bank conflicts). In the simulator the checker
counts every access (``accesses.py``), fails a correct kernel that misses one, saying why, and fails
a kernel that never read an input; it reports races on shared memory (a missing
``cuda.syncthreads()``) too. On a GPU it checks the results only, and says so.

A chapter registers its exercises in ``kernels/<chapter>/exercises.py`` under the label of the
notebook's ``{exercise}`` directive: what grading needs, and no answer. The answers of its questions
are computed in ``kernels/<chapter>/answers.py`` (``answers``), from the exercise's data or the stored
run of the GPU the page ran on (``page_gpu``), never another GPU's; its ``solutions.py`` attaches the
published solutions and deliberately wrong kernels, for the book's tests. The student edition leaves
both files out (``submission.TEACHER_ONLY``): it checks answers against salted digests of the expected values
(``answer_digests``), and grades kernels without any solution. A notebook cell (or a teacher grading
files) then runs::

    from kernels.harness import exercise
    exercise.check("machine-ex-saxpy", launch)
    exercise.answer("machine-ex-floor", flops=..., bytes=...)

    python -m kernels.harness.exercise check machine-ex-saxpy alice.py bob.py   # each defines launch

The command grades each file in a process of its own, which sends its outputs back to the grading
process (``submission.py``). In grading mode (``--grading``, or BOOK_GRADING=1) a report says what is
wrong and where, but not the hints that say how to fix it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import accesses, device, results, submission
from .check import compare, poison_value
from .cuda_cpp import KERNELS
from .grading import Outcome, run_case, sentinel_value

DIGESTS = "answer_digests.json"  # kernels/<chapter>/: the edition's digests of its questions' answers
_REGISTRY: dict[str, Exercise | Question] = {}
_SOLUTIONS: dict[str, Solutions] = {}
_ANSWERS: dict[str, dict[str, Callable]] = {}
_GRADING = os.environ.get("BOOK_GRADING", "").strip().lower() in ("1", "true", "yes")


def set_grading(on: bool = True) -> None:
    """Grading mode: reports say what is wrong and where, without the hints that say how to fix it."""
    global _GRADING
    _GRADING = bool(on)


def _hinted(observation: str, hint: str, joint: str = ". Likely: ") -> str:
    """``observation``, followed by ``hint`` outside grading mode."""
    return observation + (f"{joint}{hint}" if hint and not _GRADING else "")


def _observation(sentence: str) -> str:
    """In grading mode, a sentence of ``accesses.problems`` less its advice: what follows its first sentence."""
    if not _GRADING:
        return sentence
    return re.split(r"\. (?=[A-Z])", sentence, maxsplit=1)[0]


@dataclass(frozen=True)
class ReadBudget:
    """The most global reads of the inputs a kernel may make, for an exercise about reuse (a tile in shared
    memory or in registers): ``per`` reads for each unit of work, ``work(*inputs)`` the units (e.g. the
    multiply-adds the output needs), ``unit`` their name, ``hint`` how a kernel stays within it. Counted in
    the simulator."""

    per: float
    work: Callable
    unit: str
    hint: str


@dataclass(frozen=True)
class Exercise:
    """One auto-checked exercise.

    ``make_inputs(rng, size)`` returns the arguments after ``out`` (host NumPy arrays or scalars);
    ``reference(*inputs)`` the expected output in float64. ``expect`` names what the accesses of a
    correct kernel must also be (``accesses.EXPECTATIONS``), ``reads`` how few global reads it may make
    (``ReadBudget``), and ``max_threads`` how many threads a launch may run at most (a fixed grid, for a
    grid-stride loop). ``watched=False`` for a launch the exercise makes itself rather than the student's
    Numba kernels (a CUDA C++ kernel, ``cuda_exercise``): no kernel launch is watched then.
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
    reads: ReadBudget | None = None
    max_threads: int | None = None
    watched: bool = True

    def check(self, launch: Callable, rng: np.random.Generator | None = None) -> Report:
        """Run ``launch`` here, in this process, and judge it."""
        return self.judge(_InProcess(launch, self.watched), rng)

    def judge(self, runner: Callable, rng: np.random.Generator | None = None) -> Report:
        """Judge the outcomes ``runner(inputs, shape, dtype, fill, record)`` returns (``Outcome``): a launch
        run here, or in a process of its own that sends them back (``submission.grade``)."""
        return _check_cases(
            runner,
            self.reference,
            self.make_inputs,
            sizes=self.sizes,
            atol=self.atol,
            rtol=self.rtol,
            out_dtype=self.out_dtype,
            name=self.label,
            rng=rng,
            device_only=self.watched,
            expect=self.expect,
            reads=self.reads,
            max_threads=self.max_threads,
        )


@dataclass(frozen=True)
class Part:
    """One answer of a ``Question``: a number matches the expected one within ``rtol``, a collection of
    numbers as a set, a word case-blind. ``hint`` says what to look at again, without the answer;
    ``uses`` names the earlier parts this answer is computed from, so that feedback can say which
    answers follow from a wrong one. The expected value is computed in the chapter's answers.py."""

    hint: str
    rtol: float = 0.02
    uses: tuple = ()


@dataclass(frozen=True)
class Question:
    """An exercise whose answers are numbers or words (a count, a prediction, a choice), one ``Part``
    each. The explanations an exercise also asks for are for the teacher (book/teachers.md)."""

    label: str
    task: str
    parts: dict

    def check(self, answers: dict, rng=None, expected: dict | None = None) -> Report:
        """``answers`` maps each part's name to the student's value; None (not answered yet) fails.
        ``expected`` ({part: function}) replaces the answers registered for the label (for tests)."""
        if not isinstance(answers, dict):
            raise TypeError(f"{self.label}: answers: expected a dict {{part: value}}, got {type(answers).__name__}")
        unknown = set(answers) - set(self.parts)
        if unknown:
            raise ValueError(f"{self.label}: no part named {sorted(unknown)}; the parts are {list(self.parts)}")
        right = _judge_answers(self, answers, expected)
        return _answer_report(self, answers, right)


def _depends(question: Question) -> dict[str, set]:
    """Every part's earlier parts it follows from, directly or through others."""
    out: dict[str, set] = {}
    for name, part in question.parts.items():
        out[name] = set(part.uses).union(*(out.get(u, set()) for u in part.uses))
    return out


def _answer_report(question: Question, answers: dict, right: dict[str, bool]) -> Report:
    """One line per part, then the verdict; the first wrong part named, with the later answers that follow
    from it (their own hints held back: the fix is upstream)."""
    depends = _depends(question)
    wrong = [n for n in question.parts if answers.get(n) is not None and not right[n]]
    first = wrong[0] if wrong else None
    follows = [n for n in question.parts if first in depends[n]]
    lines = []
    for name, part in question.parts.items():
        if answers.get(name) is None:
            lines.append(f"  {name}: not answered yet")
        elif right[name]:
            lines.append(f"  {name}: right")
        elif name in follows:
            lines.append(f"  {name}: not yet (it follows from {first})")
        else:
            lines.append(_hinted(f"  {name}: not yet", part.hint, ". "))
    ok = all(answers.get(n) is not None and right[n] for n in question.parts)
    verdict = f"PASS  {question.label}" if ok else f"FAIL  {question.label}"
    if first:
        verdict += f": the first wrong part is {first}"
        if follows:
            verdict += f"; {_listed(follows)} follow{'s' if len(follows) == 1 else ''} from it"
    return Report(question.label, ok, [*lines, verdict])


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


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
    if not _real(given):
        return False
    return bool(np.isclose(float(given), float(want), rtol=rtol, atol=0.0))


def _real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


# --- the expected answers: computed by the teacher's answers.py, or the edition's digests ------------


def answers(label: str, **expected: Callable) -> None:
    """Register the functions that compute the expected answer of each part of question ``label``
    (a chapter's answers.py calls this; the student edition has none)."""
    question = get(label)
    if not isinstance(question, Question):
        raise TypeError(f"{label} asks for a kernel: its expected output is its exercise's reference")
    if set(expected) != set(question.parts) or not all(callable(f) for f in expected.values()):
        raise ValueError(f"{label}: expected one function for each of the parts {list(question.parts)}")
    if label in _ANSWERS:
        raise ValueError(f"{label}: answers registered twice")
    _ANSWERS[label] = dict(expected)


def page_gpu() -> str:
    """The GPU whose run this page shows: this GPU (a notebook run on it records and reads its own rows), or
    without one the reference GPU, whose stored rows the simulator's pages show."""
    return device.slug(device.properties()["name"]) if device.on_gpu() else results.REFERENCE_GPU


def _chapter(label: str) -> str:
    return label.split("-ex-")[0]


def _teacher_answers(label: str) -> dict[str, Callable] | None:
    """The functions of label's chapter's answers.py, where this copy has that file (not the student edition)."""
    chapter = _chapter(label)
    if label not in _ANSWERS and (KERNELS / chapter / "answers.py").is_file():
        importlib.import_module(f"kernels.{chapter}.answers")
    return _ANSWERS.get(label)


def expected_values(question: Question, expected: dict | None = None) -> tuple[dict, str | None]:
    """({part: expected value}, the GPU slug whose stored rows they came from, or None for answers that read
    none), computed by the teacher's functions. A value that would come from another GPU than the page's
    (``page_gpu``) is an error naming both: run the chapter that measures it on this GPU first."""
    functions = expected or _teacher_answers(question.label)
    if functions is None:
        raise LookupError(f"{question.label}: no answers.py in this copy (the student edition checks digests)")
    with results.reading() as read:
        values = {name: functions[name]() for name in question.parts}
    page = page_gpu()
    others = sorted(read - {page})
    if others:
        raise LookupError(
            f"{question.label}: this page ran on {page}, but its expected answers would come from the stored "
            f"run of {', '.join(others)}: run the chapter that measures them on {page} first "
            "(make rerun CHAPTER=...), so that the answers are this GPU's"
        )
    return values, (page if read else None)


def _judge_answers(question: Question, answers: dict, expected: dict | None) -> dict[str, bool]:
    """{part: whether the student's answer matches}, from the teacher's functions or the edition's digests."""
    if expected is not None or _teacher_answers(question.label) is not None:
        values, _ = expected_values(question, expected)
        return {
            n: answers.get(n) is not None and _matches(answers[n], values[n], question.parts[n].rtol)
            for n in question.parts
        }
    path = KERNELS / _chapter(question.label) / DIGESTS
    stored = json.loads(path.read_text()).get(question.label) if path.is_file() else None
    if stored is None:
        raise LookupError(f"{question.label}: neither answers.py nor {DIGESTS} in {path.parent}: no answers to check")
    if stored["gpu"] not in (None, page_gpu()):
        raise LookupError(
            f"{question.label}: the answers this edition can check come from the run of {stored['gpu']}; this page "
            f"ran on {page_gpu()}: hand your answers in to your teacher"
        )
    return {
        n: answers.get(n) is not None and _digest_matches(answers[n], stored["parts"][n], stored["salt"], question, n)
        for n in question.parts
    }


# A digest names the buckets of a number's tolerance band (in log steps of a quarter of rtol): a value is
# accepted within rtol of the answer, and always within three quarters of it; words and exact numbers by
# their own token. Salted, so that a table of tokens computed for another edition does not apply.


def _token_hash(salt: str, question: Question, part: str, token: str) -> str:
    return hashlib.sha256(f"{salt}|{question.label}|{part}|{token}".encode()).hexdigest()[:24]


def _step(rtol: float) -> float:
    return math.log1p(rtol) / 4


def _tokens(value, rtol: float) -> list[str]:
    """The tokens an answer ``value`` accepts (words, numbers; a collection has one list per element)."""
    if isinstance(value, str):
        return [f"w:{value.strip().lower()}"]
    value = float(value)
    if rtol == 0 or value == 0:
        return [f"x:{value!r}"]
    if not 0 < rtol < 1:
        raise ValueError(f"rtol: a digest needs 0 <= rtol < 1, got {rtol}")
    sign, size, h = "+" if value > 0 else "-", math.log(abs(value)), _step(rtol)
    low, high = size + math.log1p(-rtol), size + math.log1p(rtol)
    return [f"n:{sign}:{b}" for b in range(math.ceil(low / h), math.floor(high / h))]


def _given_tokens(given, rtol: float) -> set[str]:
    if isinstance(given, str):
        return {f"w:{given.strip().lower()}"}
    if not _real(given) or not math.isfinite(float(given)):
        return set()
    value = float(given)
    exact = {f"x:{value!r}"}
    if rtol == 0 or value == 0:
        return exact
    return exact | {f"n:{'+' if value > 0 else '-'}:{math.floor(math.log(abs(value)) / _step(rtol))}"}


def _digest_of(value, rtol: float, salt: str, question: Question, part: str) -> dict:
    if isinstance(value, (set, frozenset, list, tuple)):
        elements = [_digest_of(v, rtol, salt, question, part) for v in sorted(set(value), key=repr)]
        return {"elements": elements}
    return {"hashes": sorted(_token_hash(salt, question, part, t) for t in _tokens(value, rtol))}


def _digest_matches(given, digest: dict, salt: str, question: Question, part: str) -> bool:
    rtol = question.parts[part].rtol
    if "elements" in digest:
        if isinstance(given, (str, bytes)):
            return False
        try:
            given = set(given)
        except TypeError:
            return False
        return len(given) == len(digest["elements"]) and all(
            any(_digest_matches(g, e, salt, question, part) for e in digest["elements"]) for g in given
        )
    return bool({_token_hash(salt, question, part, t) for t in _given_tokens(given, rtol)} & set(digest["hashes"]))


def answer_digests(salt: str) -> dict[str, dict]:
    """{chapter: {label: {"gpu", "salt", "parts"}}}: the digests of every question's expected answers, for the
    student edition (computed here, with the teacher's answers.py, for the page's GPU)."""
    out: dict[str, dict] = {}
    for question in all_exercises():
        if isinstance(question, Question):
            values, gpu = expected_values(question)
            parts = {n: _digest_of(values[n], p.rtol, salt, question, n) for n, p in question.parts.items()}
            out.setdefault(_chapter(question.label), {})[question.label] = {"gpu": gpu, "salt": salt, "parts": parts}
    return out


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

    def _ipython_display_(self):
        """Nothing more: ``check`` and ``answer`` printed the report (a cell ending with one shows no repr)."""


def register(ex: Exercise | Question) -> Exercise | Question:
    if ex.label in _REGISTRY and _REGISTRY[ex.label] is not ex:
        raise ValueError(f"exercise label {ex.label!r} is registered twice")
    if "-ex-" not in ex.label:
        raise ValueError(f"exercise label {ex.label!r} must read '<chapter>-ex-<name>', like the notebook's")
    if isinstance(ex, Question):
        if not ex.parts or not all(isinstance(p, Part) for p in ex.parts.values()):
            raise ValueError(f"{ex.label}: parts must map each answer's name to a Part, got {ex.parts!r}")
        names = list(ex.parts)
        for i, (name, part) in enumerate(ex.parts.items()):
            if not set(part.uses) <= set(names[:i]):
                raise ValueError(f"{ex.label}: part {name} may use only earlier parts {names[:i]}, got {part.uses}")
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


def get(label: str) -> Exercise | Question:
    """The exercise of that label, importing its chapter's ``exercises`` module on first use."""
    if not isinstance(label, str):
        raise TypeError(f"label: expected an exercise's label such as 'machine-ex-saxpy', got {label!r}")
    chapter = _chapter(label)
    if chapter in _chapters_with_exercises():
        importlib.import_module(f"kernels.{chapter}.exercises")
    if label not in _REGISTRY:
        known = ", ".join(e.label for e in all_exercises()) or "none"
        raise KeyError(f"no auto-checked exercise {label!r}; registered: {known}")
    return _REGISTRY[label]


def all_exercises() -> list[Exercise | Question]:
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
    return _check_cases(
        _InProcess(launch, device_only),
        reference,
        make_inputs,
        sizes=sizes,
        atol=atol,
        rtol=rtol,
        out_dtype=out_dtype,
        name=name,
        rng=rng,
        device_only=device_only,
        expect=expect,
    )


def _check_cases(
    runner,
    reference,
    make_inputs,
    *,
    sizes,
    atol,
    rtol,
    out_dtype,
    name,
    rng,
    device_only,
    expect,
    reads: ReadBudget | None = None,
    max_threads: int | None = None,
):
    """check_kernel's verdict on the outcomes of ``runner`` (``Exercise.judge``)."""
    rng = rng or np.random.default_rng()
    bound = f"max|err| <= {atol:g}" + ("" if rtol is None else f", rel <= {rtol:g}")
    lines = []
    counted = []
    rates = []  # global reads per unit of work, at each size (``reads``)
    cases = []
    for size in sizes:
        inputs = tuple(make_inputs(rng, size))
        cases.append((size, inputs, np.asarray(reference(*inputs), dtype=np.float64)))
    limits = {"reads": reads, "max_threads": max_threads}
    for size, inputs, want in sorted(cases, key=lambda case: -case[2].size):  # stable: ties keep their order
        problems, counts, rate = _judge(
            runner, inputs, want, np.dtype(out_dtype), atol, rtol, device_only, expect, **limits
        )
        if problems:
            lines.append(f"FAIL  {name} size={size}: {bound}")
            lines += [f"  - {p}" for p in problems]
            return Report(name, False, lines)
        lines.append(f"pass  {name} size={size}")
        counted += [counts] if counts else []
        rates += [] if rate is None else [rate]
    if expect and counted:
        lines.append("  " + accesses.summary(counted, expect))
    if reads and rates:
        lines.append(
            f"  global reads (counted in the simulator): at most {max(rates):.2f} per {reads.unit}, "
            f"within the {reads.per:g} allowed"
        )
    if (expect or reads) and not counted:
        counted_what = [*expect] + ([f"global reads per {reads.unit}"] if reads else [])
        lines.append(
            f"  note: the accesses ({', '.join(counted_what)}) are counted in the simulator only "
            "(NUMBA_ENABLE_CUDASIM=1); on a GPU only the results were checked"
        )
    lines.append(f"PASS  {name}: {len(sizes)} sizes, {bound}")
    return Report(name, True, lines)


# --- judging one size (the launch runs in grading.run_case) ----------------------------------------------


class _InProcess:
    """A runner that runs ``launch`` in this process (``Outcome`` per call); ``device_only=False`` lets host
    code write ``out`` (check_kernel's)."""

    def __init__(self, launch: Callable, device_only: bool = True):
        self.launch, self.device_only = launch, device_only

    def __call__(self, inputs, shape, dtype, fill, record) -> Outcome:
        return run_case(self.launch, inputs, shape, dtype, fill, record, self.device_only)


def _unfed(outcome: Outcome, inputs, want, atol: float) -> list[str]:
    """Sentences for an output no kernel computed from the inputs: no launch took one, or a launch was handed
    the answer."""
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    if arrays and not outcome.fed:
        return [
            _hinted(
                "no kernel launch took an input array: `out` was not computed from the inputs by a kernel",
                "pass the inputs to the kernel and compute every element there",
            )
        ]
    for name, handed in outcome.handed:
        got = np.asarray(handed, dtype=np.float64).ravel()
        if got.size == want.size and np.all(np.isfinite(got)) and np.allclose(got, want.ravel(), atol=atol, rtol=0):
            return [
                _hinted(
                    f"a kernel was handed the answer: its argument `{name}` held the expected output before it ran",
                    "compute the output in a kernel from the inputs, not on the host",
                )
            ]
    return []


def _unread(outcome: Outcome, inputs, counts) -> list[str]:
    """A sentence for each array input that no kernel read (counted in the simulator)."""
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    reads = [a.origin + a.address for a in counts.log if a.space == "global" and not a.write]
    return [
        _hinted(
            f"no kernel read input argument {pos + 1} (of shape {arrays[pos].shape})",
            "`out` must be computed from all the inputs",
            ": ",
        )
        for pos, spans in enumerate(outcome.input_spans)
        if not any(first <= r < end for first, end in spans for r in reads)
    ]


def _read_rate(outcome: Outcome, inputs, counts, reads: ReadBudget) -> float:
    """The global reads of the inputs (the bytes of any array input or its copies) per unit of ``reads``."""
    spans = [s for spans in outcome.input_spans for s in spans if s is not None]
    n = sum(
        any(first <= a.origin + a.address < end for first, end in spans)
        for a in counts.log
        if a.space == "global" and not a.write
    )
    return n / max(float(reads.work(*inputs)), 1.0)


def _over_budget(rate: float, reads: ReadBudget) -> list[str]:
    """A sentence where a correct kernel read its inputs more often than ``reads`` allows."""
    if rate <= reads.per:
        return []
    return [
        _hinted(
            f"redundant global reads: the kernel read its inputs {rate:.2f} times per {reads.unit} where at most "
            f"{reads.per:g} would do",
            reads.hint,
        )
    ]


def _too_many_threads(outcome: Outcome, max_threads: int) -> list[str]:
    """A sentence where the launches that wrote ``out`` ran more threads than the exercise allows."""
    ran = int(np.prod(outcome.threads)) if outcome.threads else 0
    if ran <= max_threads:
        return []
    return [
        _hinted(
            f"the launch ran {ran} threads where this exercise allows at most {max_threads}",
            "keep the grid the task names and let each thread loop over the elements, "
            "i += cuda.gridsize(1) (a grid-stride loop)",
        )
    ]


def _judge(runner, inputs, want, out_dtype, atol, rtol, device_only, expect=(), reads=None, max_threads=None):
    """The problems found at one size (sentences; none if it passed), the accesses counted, if any, and the
    global reads per unit of ``reads``'s work, where it is counted."""
    record = not device.on_gpu() and (bool(expect) or reads is not None or device_only)
    outcome = runner(inputs, want.shape, out_dtype, poison_value(out_dtype), record)
    counts = accesses.Counts(outcome.log) if outcome.log is not None else None
    rate = _read_rate(outcome, inputs, counts, reads) if reads and counts else None
    if outcome.problem is not None:
        return [_hinted(*outcome.problem, ": ")], counts, rate
    if device_only and (unfed := _unfed(outcome, inputs, want, atol)):
        return unfed, counts, rate
    problems = _unread(outcome, inputs, counts) if device_only and counts else []
    problems += _too_many_threads(outcome, max_threads) if max_threads else []
    n = want.size
    tail = outcome.out[n:]
    if not _all_equal(tail, sentinel_value(out_dtype)):
        k = int(np.count_nonzero(~_equal(tail, sentinel_value(out_dtype))))
        problems.append(
            _hinted(
                f"the kernel wrote {k} elements outside an array, past the end of `out` (which has {n})",
                "a missing or wrong bounds check (`if i < out.size:`); on a GPU such writes land in whatever "
                "memory follows",
            )
        )
    arrays = [x for x in inputs if isinstance(x, np.ndarray)]
    for pos, (host, now) in enumerate(zip(arrays, outcome.inputs, strict=True)):
        if not np.array_equal(now[: host.size], host.ravel(), equal_nan=host.dtype.kind in "fc"):
            problems.append(
                _hinted(
                    f"the kernel changed its input argument {pos + 1} (of shape {host.shape})",
                    "it should only read it",
                    "; ",
                )
            )
        overrun = ~_equal(now[host.size :], poison_value(host.dtype))
        if overrun.any():
            problems.append(
                _hinted(
                    f"the kernel wrote {int(overrun.sum())} elements outside an array, past the end of its input "
                    f"argument {pos + 1} (which has {host.size})",
                    "a missing or wrong bounds check or a wrong index; on a GPU such writes land in whatever "
                    "memory follows",
                )
            )
    got_host = outcome.out[:n].reshape(want.shape)
    result = compare(got_host, want, atol=atol, rtol=rtol)
    if result.ok:
        over = _over_budget(rate, reads) if rate is not None else []
        return (
            problems
            + ([_observation(p) for p in accesses.problems(counts, expect)] if counts and expect else [])
            + over,
            counts,
            rate,
        )
    # A race on shared memory explains wrong values: say it first.
    problems += [_observation(p) for p in accesses.problems(counts)] if counts else []
    unwritten = None
    if result.n_nonfinite:
        # Run again with a finite second poison: what still holds it was never written at all.
        again = runner(inputs, want.shape, out_dtype, sentinel_value(out_dtype), False)
        if again.problem is None:
            unwritten = _equal(again.out[:n].reshape(want.shape), sentinel_value(out_dtype))
    # explain() knows the usual patterns; any other failure is still named, by the comparison's reason.
    threads = outcome.threads
    return (
        problems
        + (
            explain(got_host.astype(np.float64), want, atol=atol, rtol=rtol, unwritten=unwritten, threads=threads)
            or [result.reason()]
        ),
        counts,
        rate,
    )


def _equal(a: np.ndarray, value) -> np.ndarray:
    return np.isnan(a) if isinstance(value, float) and np.isnan(value) else a == value


def _all_equal(a: np.ndarray, value) -> bool:
    return bool(_equal(a, value).all())


# --- explaining ---------------------------------------------------------------------------------


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
            _hinted(
                f"{int(unwritten.sum())} of {want.size} output elements were never written "
                f"(they still hold the poison): {where}",
                hint,
            )
        )
    if computed_nan.any():
        where, hint = _describe_where(computed_nan)
        out.append(
            _hinted(
                f"{int(computed_nan.sum())} elements are NaN or Inf where the reference is finite: {where}",
                "a read past the end of an input (the checker poisons what follows each array), of "
                "uninitialized shared memory, or a division by zero" + (f"; {hint}" if hint else ""),
            )
        )
    if wrong.any():
        out += _explain_values(got, want, diff, wrong, both, atol)
    elif not out and rtol is not None:
        out.append(
            _hinted(
                f"every element is within max|err| <= {atol:g}, but the relative error over the whole output "
                f"exceeds {rtol:g}",
                "small errors everywhere, e.g. a different rounding or summation order",
                ": ",
            )
        )
    return out


def _explain_values(got, want, diff, wrong, both, atol) -> list[str]:
    n_wrong = int(wrong.sum())
    worst = np.unravel_index(int(np.argmax(np.abs(diff))), want.shape)
    example = (
        f"the largest error is at index {tuple(int(i) for i in worst)}: got {got[worst]:.6g}, "
        f"expected {want[worst]:.6g}"
    )
    pattern = None if _GRADING else _global_pattern(got, want, diff, both, atol)  # a pattern gives the fix away
    if pattern:
        return [pattern, example]
    where, hint = _describe_where(wrong)
    first = _hinted(f"{n_wrong} of {want.size} elements are wrong ({where})", hint)
    max_err = float(np.abs(diff).max())
    if max_err < 100 * atol and not _GRADING:
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
        "--grading",
        action="store_true",
        help="grading mode: say what is wrong and where, without the hints that say how to fix it",
    )
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
    before = _GRADING
    set_grading(before or args.grading)
    try:
        with submission.edition() as edition:  # the submissions import kernels/ without its solutions and answers
            for path in args.files:
                print(f"== {path}", flush=True)
                verdicts.append(submission.grade(ex, path, args.timeout, kernels_copy=edition))
                print(verdicts[-1], flush=True)
    finally:
        set_grading(before)
    failed = sum(not v.ok for v in verdicts)
    print()
    print(submission.table(verdicts))
    print(f"{len(verdicts) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    from kernels.harness import exercise as _registered  # one registry: the module chapters import

    sys.exit(_registered.main())
