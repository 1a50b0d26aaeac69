"""The grading process of ``submission.grade``: ``python -m kernels.harness.grading LABEL FILE RESULT`` loads
FILE, checks its ``launch`` against exercise LABEL and writes the verdict to RESULT. A module of its own,
not ``submission``'s script block: ``exercise`` imports ``submission`` for its command line, and this
process needs the exercises' registry, so here the import goes the one way.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

from . import exercise  # the registry's module, the one the chapters' exercises import


def _load_launch(path: Path) -> Callable:
    spec = importlib.util.spec_from_file_location(f"submission_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "launch", None)):
        raise ValueError(f"{path}: defines no function `launch(out, *inputs)`")
    return module.launch


def _grade_here(ex, path: Path, result: Path):
    """Load the file, check its launch against the exercise ``ex`` and write the verdict to ``result``."""
    try:
        try:
            launch = _load_launch(path)
        except Exception as exc:  # noqa: BLE001 -- a file that does not load is a verdict, not a crash
            status, lines = "FAIL", [f"FAIL  {ex.label}: the file does not load ({type(exc).__name__}: {exc})"]
        else:
            report = ex.check(launch)
            status, lines = "PASS" if report.ok else "FAIL", report.lines
    except SystemExit as exc:
        status, lines = "EXIT", [f"EXIT  {ex.label}: the submission called sys.exit({exc.code!r}) before it was graded"]
    result.write_text(json.dumps({"status": status, "lines": lines}))


if __name__ == "__main__":
    _grade_here(exercise.get(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
