"""The student edition (scripts/student_edition.py, `make student`): no solution left, every exercise kept,
valid notebooks; and every {solution} of the book stays collapsed behind a dropdown."""

import ast
import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import student_edition
from kernels.harness import exercise, glue
from student_edition import SOLUTION, student_notebook

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXERCISE_LABEL = re.compile(r"\{exercise\}[^\n]*\n:label: ([\w-]+)")


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text, tags=(), outputs=()):
    return {
        "cell_type": "code",
        "metadata": {"tags": list(tags)},
        "source": text,
        "execution_count": None,
        "outputs": list(outputs),
    }


def glued(name, value):
    """The output kernels.harness.glue writes for ``glue(name, value)``."""
    return {
        "output_type": "display_data",
        "data": {glue.MIME_PREFIX + "text/plain": repr(value)},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": glue.MIME_PREFIX}},
    }


def sources(nb) -> str:
    """Every cell's source and every output's text: what a student can read in the notebook."""
    parts = []
    for cell in nb["cells"]:
        parts.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            parts.append("".join(output.get("text", "")))
            parts += ["".join(v) for v in output.get("data", {}).values() if isinstance(v, (str, list))]
    return "\n".join(parts)


SYNTHETIC = {
    "nbformat": 4,
    "nbformat_minor": 5,
    "metadata": {},
    "cells": [
        code('profile = "full"', tags=["parameters"]),
        code('# Parameters\nprofile = "ci"\n', tags=["injected-parameters", "remove-cell"]),
        code(
            'rate = 2.0\nglue("rate", rate)\n# the floor exercise: 12 bytes per element\nglue("floor_ms", 12 / rate)\n'
            'for w in (4, 8):  # the chain exercise\n    glue(f"pct_{w}", w / 4)\nprint(rate)',
            outputs=[
                glued("rate", 2.0),
                glued("floor_ms", 6.0),
                glued("pct_4", 1.0),
                glued("pct_8", 2.0),
                {"output_type": "stream", "name": "stdout", "text": "2.0\n"},
            ],
        ),
        md(
            "The rate is {glue:text}`rate:.1f`.\n\n"
            "```{exercise} Floor\n:label: syn-ex-floor\nCompute the floor.\n```\n\n"
            "```{solution} syn-ex-floor\n:class: dropdown\nTwelve bytes per element: {glue:text}`floor_ms:.1f` ms.\n"
            "Also {glue:text}`rate:.1f`, quoted outside a solution too.\n```\n\n"
            "````{exercise} Write it\n:label: syn-ex-write\nCheck it in a new cell:\n\n```python\n"
            'exercise.check("syn-ex-write", launch)\n```\n````\n'
            "````{solution} syn-ex-write\n:class: dropdown\nThe nested answer:\n\n```python\n"
            "def launch(out):\n    answer_kernel[1, 32](out)\n```\n\nAnd ``` inside a line.\n````\n\n"
            ":::{solution} syn-ex-floor\n:class: dropdown\n"
            "A colon-fenced answer, {glue:text}`pct_4:.0f`% and {glue:text}`pct_8:.0f`%.\n:::\n\n"
            "Closing words."
        ),
        md("```{solution} syn-ex-write\n:class: dropdown\nA cell holding only an answer.\n```\n"),
        md("No solution here, so left as written:\n```python\nx = 1\n\n\ny = 2\n```\n"),
    ],
}
for i, cell in enumerate(SYNTHETIC["cells"]):
    cell["id"] = f"cell-{i}"


def test_synthetic_notebook_loses_its_solutions_and_keeps_its_exercises():
    before = json.dumps(SYNTHETIC)
    nb = student_notebook(SYNTHETIC)
    assert json.dumps(SYNTHETIC) == before, "the input notebook was changed"
    nbformat.validate(nbformat.from_dict(nb))
    text = sources(nb)
    for gone in (
        "{solution}",
        "Twelve bytes",
        "nested answer",
        "answer_kernel",
        "inside a line",
        "colon-fenced",
        "only an answer",
        "floor_ms",
        "12 bytes per element",
        "pct_",
        "chain exercise",
        'profile = "ci"',
    ):
        assert gone not in text
    for kept in (
        "Compute the floor.",
        ":label: syn-ex-floor",
        ":label: syn-ex-write",
        'exercise.check("syn-ex-write", launch)',
        "Closing words.",
        'glue("rate", rate)',
        "print(rate)",
    ):
        assert kept in text
    assert [c["cell_type"] for c in nb["cells"]] == ["code", "code", "markdown", "markdown"]
    assert nb["cells"][-1]["source"] == SYNTHETIC["cells"][-1]["source"]
    ast.parse(nb["cells"][1]["source"])
    assert set(glue.stored(nb)) == {"rate"}, "only the glue a solution alone quotes goes"
    assert {"output_type": "stream", "name": "stdout", "text": "2.0\n"} in nb["cells"][1]["outputs"]


def solution_lines(nb) -> set:
    """The lines of ``nb``'s solutions that nothing else in it says (not a fence, an option or shared code)."""
    markdown = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    rest = SOLUTION.sub("", sources(nb))
    lines = {line.strip() for m in SOLUTION.finditer(markdown) for line in m.group(0).splitlines()[1:-1]}
    return {line for line in lines if len(line) > 8 and not line.startswith(":") and line not in rest}


from_git = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="the student edition is made from a git checkout")
SOLUTION_FILES = sorted(ROOT.glob("kernels/*/solutions.py"))
ANSWER_FILES = sorted(ROOT.glob("kernels/*/answers.py"))


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    """The student edition of this checkout, written once for the tests below."""
    out = tmp_path_factory.mktemp("edition") / "student"
    student_edition.write_edition(out)
    return out


@from_git
def test_edition_is_the_repository_with_every_notebook(edition):
    for path in NOTEBOOKS:
        written = nbformat.read(edition / "notebooks" / path.name, as_version=4)
        assert written == nbformat.from_dict(student_notebook(nbformat.read(path, as_version=4)))
    assert sorted(p.name for p in (edition / "notebooks").glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    assert (edition / "kernels" / "harness" / "exercise.py").is_file() and (edition / "Makefile").is_file()
    assert list((edition / "data" / "results").rglob("*.csv")), "the chapters read the stored results"
    assert not (edition / ".git").exists() and not (edition / "build").exists()


def defined(paths) -> set:
    """The names of the functions that the Python files at ``paths`` define at their top level."""
    return {
        node.name for path in paths for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)
    }


@from_git
@pytest.mark.skipif(not SOLUTION_FILES, reason="the student edition: no solutions.py to leave out")
def test_edition_has_no_published_solution(edition):
    assert not list(edition.rglob("solutions.py"))
    solutions = defined(SOLUTION_FILES)
    kernels = [sol.solution for sol in exercise.all_solutions().values() if callable(sol.solution)]
    assert kernels and {k.__name__ for k in kernels} <= solutions  # a Question's answers are a dict
    assert not solutions & defined((edition / "kernels").rglob("*.py")), (
        "a kernel file of the edition defines a solution's function"
    )


@from_git
@pytest.mark.skipif(not SOLUTION_FILES, reason="the student edition: no solutions.py to leave out")
def test_edition_grades_without_the_solutions(edition, tmp_path):
    """In the edition the checker grades a file, and no solution is registered: the published one, handed
    in as a student's file, passes there."""
    handed_in = tmp_path / "saxpy.py"
    source = (ROOT / "kernels" / "machine" / "solutions.py").read_text()
    kernel = source[source.index("@cuda.jit\ndef saxpy(") : source.index("def launch_saxpy_grid_rounded_down")]
    handed_in.write_text(f"from numba import cuda\n\nTHREADS = 64\n\n{kernel}\nlaunch = launch_saxpy\n")
    env = {**os.environ, "PYTHONPATH": str(edition)}
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kernels.harness import exercise\nprint(len(exercise.all_exercises()), len(exercise.all_solutions()))",
        ],
        cwd=edition,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert listed == [str(len(exercise.all_exercises())), "0"]
    graded = subprocess.run(
        [sys.executable, "-m", "kernels.harness.exercise", "check", "machine-ex-saxpy", str(handed_in)],
        cwd=edition,
        env=env,
        capture_output=True,
        text=True,
    )
    assert graded.returncode == 0 and "PASS  machine-ex-saxpy" in graded.stdout, graded.stdout + graded.stderr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_edition_has_no_solution_and_every_exercise(path):
    original = json.loads(path.read_text())
    student = nbformat.from_dict(student_notebook(original))
    nbformat.validate(student)
    text = sources(student)
    assert "{solution" not in text
    distinctive = solution_lines(original)
    assert distinctive or "{solution}" not in path.read_text(), "the test found no solution text to look for"
    assert not [line for line in distinctive if line in text]
    untouched = [
        "".join(c["source"])
        for c in original["cells"]
        if c["cell_type"] == "markdown" and "{solution}" not in "".join(c["source"])
    ]
    assert all(s in [c.source for c in student.cells] for s in untouched), "Markdown without a solution changed"
    labels = set(EXERCISE_LABEL.findall(sources(original)))
    assert labels <= set(EXERCISE_LABEL.findall(text))
    for ex in exercise.all_exercises():
        if ex.label in labels:
            call = "answer" if isinstance(ex, exercise.Question) else "check"
            assert f'exercise.{call}("{ex.label}"' in text, f"{ex.label}: the line that checks it is gone"
    quoted = set(student_edition.GLUE_NAME.findall(text))
    assert quoted <= set(glue.stored(student)), "a glue the Markdown still quotes was removed"
    only_solutions = set(student_edition.GLUE_NAME.findall(sources(original))) - quoted
    assert not only_solutions & set(glue.stored(student)), "a value only a solution quotes is still stored"
    for cell in student.cells:
        if cell.cell_type == "code":
            ast.parse(cell.source)


def shown_open(text: str) -> list[str]:
    """The opening line of each {solution} in ``text`` whose options lack ``:class: dropdown``."""
    return [
        m.group(1)
        for m in re.finditer(r"^([`:]{3,}\{solution\}.*)\n((?::\w.*\n)*)", text, flags=re.M)
        if not re.search(r"^:class:.*\bdropdown\b", m.group(2), flags=re.M)
    ]


def test_shown_open_finds_a_solution_without_dropdown():
    text = (
        "```{solution} a\n:label: a-sol\n:class: dropdown\nhidden\n```\n"
        "````{solution} b\nopen, though it says\n:class: dropdown\n````\n:::{solution} c\n:::\n"
    )
    assert shown_open(text) == ["````{solution} b", ":::{solution} c"]


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "book").rglob("*.md")), ids=lambda p: p.name)
def test_every_solution_is_a_dropdown(path):
    text = path.read_text()
    if path.suffix == ".ipynb":
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
    assert not shown_open(text), f"{path.name}: solutions shown open in the book; add :class: dropdown"


@from_git
@pytest.mark.skipif(not ANSWER_FILES, reason="the student edition: no answers.py to leave out")
def test_edition_has_no_expected_answer_only_their_digests(edition):
    """answers.py computes the questions' answers (formulas such as 12 bytes per element): the edition has
    none of its functions, and each chapter with questions has the digests instead."""
    assert not list(edition.rglob("answers.py"))
    computed = defined(ANSWER_FILES)
    assert computed and not computed & defined((edition / "kernels").rglob("*.py")), (
        "a kernel file of the edition defines a function of answers.py"
    )
    chapters = {q.label.split("-ex-")[0] for q in exercise.all_exercises() if isinstance(q, exercise.Question)}
    assert {p.parent.name for p in (edition / "kernels").glob(f"*/{exercise.DIGESTS}")} == chapters
    digests = "".join(p.read_text() for p in (edition / "kernels").glob(f"*/{exercise.DIGESTS}"))
    assert '"memory"' not in digests and "1200000000" not in digests, "a digest holds an answer in the clear"


CHECK_IN_EDITION = """
import json, sys
from kernels.harness import exercise
out = {}
for label, answers in json.loads(sys.stdin.read()).items():
    out[label] = str(exercise.get(label).check(answers))
print(json.dumps(out))
"""


def _plain(value):
    """An answer as JSON carries it (a set as a list)."""
    return sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value


@from_git
@pytest.mark.skipif(not SOLUTION_FILES, reason="the student edition: no solutions.py to check with")
def test_the_edition_checks_answers_as_the_teachers_checker_does(edition):
    """Every question's published answers pass in the edition, from the digests alone, and each typical wrong
    answer fails there with the words the teacher's checker gives."""
    cases = {}
    for label, sol in exercise.all_solutions().items():
        if isinstance(exercise.get(label), exercise.Question):
            cases[label] = {k: _plain(v) for k, v in sol.solution.items()}
            for name, (answers, _) in sol.wrong.items():
                cases[f"{label}#{name}"] = {k: _plain(v) for k, v in answers.items()}
    script = CHECK_IN_EDITION.replace("exercise.get(label)", "exercise.get(label.split('#')[0])")
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(cases),
        cwd=edition,
        env={**os.environ, "PYTHONPATH": str(edition), "NUMBA_ENABLE_CUDASIM": "1"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = json.loads(done.stdout)
    for key, report in reports.items():
        label, _, wrong = key.partition("#")
        if not wrong:
            assert report.endswith(f"PASS  {label}"), report
        else:
            words = exercise.all_solutions()[label].wrong[wrong][1]
            assert "FAIL" in report and words in report, f"{key}: {report}"


def test_a_cell_tagged_as_an_answer_is_left_out():
    nb = copy.deepcopy(SYNTHETIC)
    nb["cells"].insert(3, code("print(12 / rate)  # the floor", tags=["exercise-answer"], outputs=[]))
    nb["cells"][3]["id"] = "answer"
    student = student_notebook(nb)
    assert "print(12 / rate)" not in sources(student)
    assert len(student["cells"]) == len(student_notebook(SYNTHETIC)["cells"])
