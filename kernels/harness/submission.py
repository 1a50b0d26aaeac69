"""Grade a submitted file in a process of its own, so that it can neither stop, hang nor crash a batch.

``grade(label, path, timeout)`` runs ``python -m kernels.harness.grading LABEL FILE RESULT`` with
this interpreter and environment (``NUMBA_ENABLE_CUDASIM`` included). That process loads the file,
checks its ``launch`` and writes the verdict to RESULT; a file counts as graded only through it. A
process still running after ``timeout`` seconds is killed with everything it started; one that ends
without a verdict crashed or exited by itself, and the verdict says which (a ``sys.exit`` is caught
and named). The file runs in the process that writes its verdict, so a submission written to cheat
the checker itself can still forge one: grade in a container or a throw-away account.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .cuda_cpp import KERNELS

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


def grade(label: str, path: Path, timeout: float = TIMEOUT) -> Verdict:
    """Check the ``launch`` of the file at ``path`` against exercise ``label`` in a new process."""
    root = str(KERNELS.parent)  # the child imports this checkout's kernels, wherever it runs
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        result, stderr = Path(tmp) / "verdict.json", Path(tmp) / "stderr"
        with open(stderr, "wb") as err:
            # Files, not pipes: a process the submission leaves behind cannot hold the grader waiting.
            proc = subprocess.Popen(
                [sys.executable, "-m", "kernels.harness.grading", label, str(path), str(result)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                _kill_session(proc)
        if code is None:
            return Verdict(
                path,
                label,
                "TIMEOUT",
                [
                    f"TIMEOUT  {label}: still running after {timeout:g} s, so stopped: an endless loop, or a kernel "
                    "far too slow for the simulator (smaller blocks? or grade with a larger --timeout)"
                ],
            )
        if result.exists():
            found = json.loads(result.read_text())
            return Verdict(path, label, found["status"], found["lines"])
        tail = stderr.read_text(errors="replace").splitlines()[-STDERR_LINES:]
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


def _kill_session(proc: subprocess.Popen):
    """Kill the grading process and whatever it started (they share its session), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # all ended already
        pass
    proc.wait()


def table(verdicts: list[Verdict]) -> str:
    """One line per file: file, exercise, verdict."""
    rows = [("file", "exercise", "verdict")] + [(str(v.path), v.label, v.status) for v in verdicts]
    wide = [max(len(row[i]) for row in rows) for i in (0, 1)]
    return "\n".join(f"{f:<{wide[0]}}  {e:<{wide[1]}}  {s}" for f, e, s in rows)
