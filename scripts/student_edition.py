"""Write the student edition: the repository with the solutions taken out of every chapter notebook.

    python scripts/student_edition.py      # or: make student

build/student/ receives the repository's tracked files (the notebooks import ``kernels`` from it, and
read their stored results from data/), with each notebooks/*.ipynb replaced by its student edition;
build/student.zip holds the same folder, to hand out. In a notebook it removes

- every ``{solution}`` directive of the Markdown (any fence: ```, ```` around nested code, :::);
- papermill's injected-parameters cell, and every cell tagged ``exercise-answer`` (ANSWER_TAG): a cell that
  computes or shows an exercise's answer, source and outputs;
- the glue values that only a solution quotes, and the statements that compute them: a solution's
  number, and the formula that gives it, would otherwise stay in the code and its stored outputs.

The exercises stay, with their ``exercise.check(...)`` lines; the other outputs stay too (the reference
GPU's results). The edition leaves out the teacher-only files (``submission.TEACHER_ONLY``):
kernels/<chapter>/solutions.py, the published solutions and wrong kernels of the auto-checked exercises,
and kernels/<chapter>/answers.py, which computes the questions' expected answers. In their place each
chapter gets answer_digests.json, salted digests of those answers as the committed run gives them (computed
in the simulator, so on the reference GPU's rows): the checker checks a student's answers against them and
grades kernels without any solution, and the tests that need the teacher's files skip.
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "build" / "student"
# A fenced {solution} directive: the closing fence is the opening one repeated, so the ``` of nested
# code inside a ```` fence does not close it.
SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}.*?^(?P=fence)[ \t]*(?:\n|\Z)", re.M | re.S)
GLUE_NAME = re.compile(r"\{glue(?::\w+)?\}[` ]\s*([\w-]+)")
ANSWER_TAG = "exercise-answer"  # a cell that computes or shows an exercise's answer: left out of the edition
DROPPED_TAGS = {"injected-parameters", ANSWER_TAG}


def _glue_pattern(arg: ast.expr) -> re.Pattern | None:
    """The names a glue call's first argument can take: "v4_ms", or f"chain_pct_{w}" as chain_pct_.+."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return re.compile(re.escape(arg.value))
    if isinstance(arg, ast.JoinedStr):
        return re.compile("".join(re.escape(p.value) if isinstance(p, ast.Constant) else ".+" for p in arg.values))
    return None


def _glues_only(stmt: ast.stmt, names: set, hidden: set) -> bool:
    """Whether ``stmt`` does nothing but glue names of ``hidden`` (a glue call, or a loop of them)."""
    if isinstance(stmt, ast.For):
        return not stmt.orelse and all(_glues_only(s, names, hidden) for s in stmt.body)
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "glue" and call.args):
        return False
    pattern = _glue_pattern(call.args[0])
    glued = {n for n in names if pattern and pattern.fullmatch(n)}
    return bool(glued) and glued <= hidden


def _without_glues(source: str, names: set, hidden: set) -> str:
    """``source`` less its top-level statements that only glue ``hidden`` names, with the comment lines
    right above each (they say what the statement computes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.split("\n")
    drop = set()
    for stmt in tree.body:
        if _glues_only(stmt, names, hidden):
            first = stmt.lineno - 1
            while first > 0 and lines[first - 1].lstrip().startswith("#"):
                first -= 1
            drop.update(range(first, stmt.end_lineno))
    if not drop:
        return source
    return "\n".join(line for i, line in enumerate(lines) if i not in drop).strip("\n")


def student_notebook(nb: dict) -> dict:
    """The student edition of notebook ``nb`` (nbformat 4 JSON as a dict); ``nb`` is left as it was."""
    from kernels.harness.glue import stored

    nb = copy.deepcopy(nb)
    markdown = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    solutions = "\n".join(m.group(0) for m in SOLUTION.finditer(markdown))
    hidden = set(GLUE_NAME.findall(solutions)) - set(GLUE_NAME.findall(SOLUTION.sub("", markdown)))
    names = set(stored(nb))
    cells = []
    for cell in nb["cells"]:
        if DROPPED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and SOLUTION.search(source):
            source = re.sub(r"\n{3,}", "\n\n", SOLUTION.sub("", source)).strip("\n")
        elif cell["cell_type"] == "code" and hidden:
            source = _without_glues(source, names, hidden)
            cell["outputs"] = [
                o
                for o in cell.get("outputs", [])
                if o.get("metadata", {}).get("scrapbook", {}).get("name") not in hidden
            ]
        if source.strip() or not "".join(cell["source"]).strip():  # a cell emptied here goes
            cell["source"] = source
            cells.append(cell)
    nb["cells"] = cells
    return nb


def write_edition(out: Path, root: Path = ROOT, salt: str | None = None) -> list[Path]:
    """Copy ``root``'s tracked files but the teacher-only ones into ``out`` (a fresh folder), every
    notebooks/*.ipynb as its student edition, each chapter's answer digests beside its exercises.py (salted
    with ``salt``, a fresh random one by default); return the notebooks written."""
    from kernels.harness import exercise, submission

    if not (root / ".git").exists():  # inside a checkout, git would list the enclosing repository's files
        raise SystemExit(f"{root} is not a git checkout: the student edition copies its tracked files")
    tracked = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, text=True, check=True
    ).stdout.split("\0")
    notebooks = sorted(root.glob("notebooks/*.ipynb"))
    for name in tracked:
        source = root / name
        teacher_only = any(fnmatch.fnmatch(name, pattern) for pattern in submission.TEACHER_ONLY)
        if name and source.is_file() and source not in notebooks and not teacher_only:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out / name)
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    for path in notebooks:
        nb = nbformat.from_dict(student_notebook(nbformat.read(path, as_version=4)))
        nbformat.write(nb, out / "notebooks" / path.name)  # validates
    for chapter, digests in exercise.answer_digests(salt or secrets.token_hex(16)).items():
        (out / "kernels" / chapter / exercise.DIGESTS).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    return notebooks


def main() -> int:
    # The digests are the committed book's answers: the simulator's, on the reference GPU's rows, even on a
    # machine with a GPU (set before the harness, imported below, picks the mode).
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from kernels.harness import exercise, submission

    shutil.rmtree(OUT, ignore_errors=True)
    notebooks = write_edition(OUT)
    archive = shutil.make_archive(str(OUT), "zip", root_dir=OUT.parent, base_dir=OUT.name)
    print(
        f"{OUT.relative_to(ROOT)}/: the repository for students, its {len(notebooks)} notebooks without their "
        f"solutions; {Path(archive).relative_to(ROOT)} holds it. Hand out the zip: students unzip it, "
        "`make test` in the folder sets up .venv, then they open notebooks/ (book/teachers.md). "
        f"Left out: {', '.join(submission.TEACHER_ONLY)}, the exercises' published solutions and expected answers "
        f"(each chapter's {exercise.DIGESTS} checks the answers instead)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
