"""Grade a submitted file: it runs in a process of its own, and this process, which never runs its code,
decides the verdict.

``grade(exercise, path, timeout)`` starts ``python -m kernels.harness.grading`` (``grading.serve``) on the
file, in a copy of kernels/ without its solutions and answers (``edition``: the student edition's kernels),
with this interpreter and environment (``NUMBA_ENABLE_CUDASIM`` included). The exercise's inputs go to that
process through a pipe, and what the launch left (``grading.Outcome``: the output, the inputs, the threads,
what the kernels were handed and, in the simulator, every access) comes back through another; the verdict
is this process's judgement of it (``exercise.Exercise.judge``), never a verdict the file wrote. The
submission's process fences itself in before it loads the file (``grading.fence``): it cannot signal this
process or its ancestors, nor leave its process group, so ending the group ends every process it started,
whatever session it asked for. A file still running after ``timeout`` seconds is stopped; one that ends
without an outcome crashed or exited by itself, and the verdict says which.

What the submission sends is data, and data can be forged: a file written to fake an outcome (an access log,
a copy of the expected output made by a kernel) is not caught here, and it can read and write whatever the
account grading it can. Grade in a container or a throw-away account, on a copy of the repository without
kernels/*/solutions.py (book/teachers.md, "Grading with the checker").
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import grading
from .cuda_cpp import KERNELS

# What the student edition (scripts/student_edition.py) and the submissions' copy of kernels/ leave out.
TEACHER_ONLY = ("kernels/*/solutions.py", "kernels/*/answers.py")
TIMEOUT = 120.0  # seconds per file; a published solution takes a few in the simulator
STDERR_LINES = 8  # of a crashed process, shown under its verdict


@dataclass
class Verdict:
    """What became of one file: PASS or FAIL (the checker's report), TIMEOUT, CRASH or EXIT."""

    path: Path
    label: str
    status: str
    lines: list

    @property
    def ok(self) -> bool:
        return self.status == "PASS"

    def __str__(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def edition():
    """A temporary folder holding a copy of kernels/ without what the student edition leaves out
    (TEACHER_ONLY: the solutions and the answers), for submissions to import."""
    root = KERNELS.parent
    with tempfile.TemporaryDirectory(prefix="grade-edition-") as tmp:

        def ignored(folder, names):
            here = Path(folder).relative_to(root)
            return [
                n
                for n in names
                if n == "__pycache__" or any(fnmatch.fnmatch((here / n).as_posix(), p) for p in TEACHER_ONLY)
            ]

        shutil.copytree(KERNELS, Path(tmp) / "kernels", ignore=ignored)
        yield Path(tmp)


class _Child:
    """The submission's process seen from here: a runner (``exercise.Exercise.judge``) whose every call sends
    one request and reads back one outcome, checked, before ``deadline`` (time.monotonic()). ``watched``: the
    exercise's ``watched`` (False where the launch is the exercise's own, of a CUDA C++ kernel)."""

    def __init__(self, requests: int, outcomes: int, deadline: float, watched: bool = True):
        self.requests, self.outcomes, self.deadline, self.watched = requests, outcomes, deadline, watched

    def __call__(self, inputs, shape, dtype, fill, record):
        request = {"inputs": list(inputs), "shape": tuple(shape), "dtype": np.dtype(dtype).str}
        request |= {"fill": fill, "record": bool(record), "watched": self.watched}
        grading.send(self.requests, request, self.deadline)
        outcome = grading.unpack_outcome(grading.recv(self.outcomes, self.deadline))
        arrays = [x for x in inputs if isinstance(x, np.ndarray)]
        expected = [(int(np.prod(shape)) + grading.GUARD,)] + [(x.size + grading.GUARD,) for x in arrays]
        got = [a.shape for a in (outcome.out, *outcome.inputs)]
        if got != expected or len(outcome.input_spans) != len(arrays):
            raise grading.Malformed(f"buffers of shapes {got} where the launch had {expected}")
        return outcome


def grade(ex, path: Path, timeout: float = TIMEOUT, *, kernels_copy: Path | None = None, rng=None) -> Verdict:
    """Check the ``launch`` of the file at ``path`` against ``ex`` (an ``exercise.Exercise``: one that asks for
    a kernel), the file running in a process of its own that imports kernels/ from ``kernels_copy`` (a folder
    from ``edition()``; a fresh one by default)."""
    if callable(getattr(ex, "grade_file", None)):  # a CUDA C++ exercise: compiled here, run as its launch
        return ex.grade_file(path, timeout, kernels_copy=kernels_copy, rng=rng)
    if not callable(getattr(ex, "judge", None)):
        raise TypeError(f"ex: expected an exercise that asks for a kernel (exercise.get(label)), got {ex!r}")
    label = ex.label
    if kernels_copy is None:
        with edition() as fresh:
            return grade(ex, path, timeout, kernels_copy=fresh, rng=rng)
    path = Path(path).resolve()
    env = {**os.environ, "PYTHONPATH": str(kernels_copy)}  # kernels/ from the copy only
    requests_read, requests = os.pipe()
    outcomes, outcomes_write = os.pipe()
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kernels.harness.grading",
                str(path),
                str(requests_read),
                str(outcomes_write),
                ",".join(map(str, grading.protected_ids(os.getpid()))),
            ],
            cwd=kernels_copy,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            pass_fds=(requests_read, outcomes_write),
            start_new_session=True,  # its own process group: ending it ends whatever the file started
        )
        os.close(requests_read)
        os.close(outcomes_write)
        deadline = time.monotonic() + timeout
        try:
            status, lines = _judge(ex, _Child(requests, outcomes, deadline, getattr(ex, "watched", True)), rng)
        finally:
            os.close(requests)
            os.close(outcomes)
            code = _end(proc)
        if status not in (TIMEOUT_STATUS, GONE):
            return Verdict(path, label, status, lines)
        stderr.seek(0)
        tail = stderr.read().decode(errors="replace").splitlines()[-STDERR_LINES:]
    if status == TIMEOUT_STATUS:
        return Verdict(
            path,
            label,
            "TIMEOUT",
            [
                f"TIMEOUT  {label}: still running after {timeout:g} s, so stopped: an endless loop, or a kernel "
                "far too slow for the simulator (smaller blocks? or grade with a larger --timeout)"
            ],
        )
    if code < 0:
        status, why = "CRASH", f"the process was killed by signal {signal.Signals(-code).name}"
    elif code == 0:
        status, why = "EXIT", "the submission ended the process (exit status 0, e.g. os._exit(0))"
    else:
        status, why = "CRASH", f"the process ended with exit status {code} (a crash, or os._exit({code}))"
    lines = [f"{status}  {label}: {why} before it was graded"]
    if tail:
        lines += ["  the last lines of its stderr:"] + [f"    {line}" for line in tail]
    return Verdict(path, label, status, lines)


TIMEOUT_STATUS, GONE = "TIMEOUT", "gone"  # no verdict yet: the deadline passed, or the process ended


def _judge(ex, child: _Child, rng) -> tuple[str, list]:
    """(status, report lines) for a file whose outcomes came back; (TIMEOUT_STATUS or GONE, []) otherwise."""
    try:
        hello = grading.recv(child.outcomes, child.deadline)
        if "fence" in hello:
            raise RuntimeError(
                f"cannot grade here: the submission's process could not fence itself in ({hello['fence']}); "
                "grading needs Linux with seccomp (x86_64 or aarch64)"
            )
        if not hello.get("loaded"):
            if "exit" in hello:
                return "EXIT", [
                    f"EXIT  {ex.label}: the submission called sys.exit({hello['exit']}) before it was graded"
                ]
            return "FAIL", [f"FAIL  {ex.label}: the file does not load ({hello.get('why')})"]
        report = ex.judge(child, rng)
        return ("PASS" if report.ok else "FAIL"), report.lines
    except grading.TimedOut:
        return TIMEOUT_STATUS, []
    except grading.Gone:
        return GONE, []
    except grading.Malformed as exc:
        return "FAIL", [f"FAIL  {ex.label}: the submission's process sent something that is not an outcome ({exc})"]


def _end(proc: subprocess.Popen) -> int:
    """End the submission's process group (every process it started: the fence keeps them in it), reap the
    process and return its exit status. A process that forks as the group ends is ended in a next round."""
    code = None
    for _ in range(200):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # no process left in the group
            pass
        code = proc.wait() if code is None else code
        if not group_members(proc.pid):
            break
        time.sleep(0.01)
    return code


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (a zombie, ended and waiting for its parent, is not)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while we looked
            continue
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            members.append(int(stat.parent.name))
    return members


def table(verdicts: list[Verdict]) -> str:
    """One line per file: file, exercise, verdict."""
    rows = [("file", "exercise", "verdict")] + [(str(v.path), v.label, v.status) for v in verdicts]
    wide = [max(len(row[i]) for row in rows) for i in (0, 1)]
    return "\n".join(f"{f:<{wide[0]}}  {e:<{wide[1]}}  {s}" for f, e, s in rows)
