"""A page, not a log: what the committed notebooks show a reader (issue-free wording: the book's rules of the page).

Counted on the stored outputs, as the rendered book shows them: a cell tagged remove-cell shows nothing,
remove-input hides its code, remove-output and hide-output its outputs."""

import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_VERDICT_LINES = 10  # more is a wall: one verdict table per section instead


def tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def shown_code(nb) -> list[str]:
    return [
        c.source
        for c in nb.cells
        if c.cell_type == "code" and not tags(c) & {"remove-cell", "remove-input", "injected-parameters"}
    ]


def shown_texts(nb) -> list[str]:
    """The plain text of every output a reader sees."""
    texts = []
    for c in nb.cells:
        if c.cell_type != "code" or tags(c) & {"remove-cell", "remove-output", "hide-output"}:
            continue
        for o in c.get("outputs", []):
            if o.output_type == "stream":
                texts.append(o.text)
            elif o.output_type in ("execute_result", "display_data") and "text/html" not in o.data:
                texts.append(o.data.get("text/plain", ""))
    return texts


def only_glue(source: str) -> bool:
    """True for a cell whose every statement is a glue(...) call."""
    try:
        body = ast.parse(source).body
    except SyntaxError:  # IPython magics: not a glue cell
        return False
    return bool(body) and all(
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and getattr(s.value.func, "id", "") == "glue"
        for s in body
    )


@pytest.fixture(scope="module", params=NOTEBOOKS, ids=lambda p: p.stem)
def nb(request):
    return nbformat.read(request.param, as_version=4)


def test_no_wall_of_verdict_lines(nb):
    lines = [ln for t in shown_texts(nb) for ln in t.splitlines() if re.match(r"\s*(PASS|FAIL)\b", ln)]
    assert len(lines) <= MAX_VERDICT_LINES, f"{len(lines)} PASS/FAIL lines shown, e.g. {lines[:3]}"


def test_no_bare_repr_and_no_recording_lines(nb):
    bare = [t for t in shown_texts(nb) if re.fullmatch(r"\s*(True|False|None|\w+Report\(.*|Report\(.*)\s*", t, re.S)]
    bare += [t for t in shown_texts(nb) if re.search(r"<\w+[ .][^>]* at 0x", t)]  # an object's default repr
    assert not bare, f"a cell's bare value is shown: {bare[0][:80]!r}"
    logged = [ln for t in shown_texts(nb) for ln in t.splitlines() if re.match(r"\s*(wrote|recorded) ", ln)]
    assert not logged, f"a recording line is shown: {logged[0]!r}"


def test_shown_code_has_no_lint_pragmas_and_no_glue_only_cell(nb):
    pragma = re.compile(r"#\s*(noqa|isort|type: ignore)")
    pragmas = [ln.strip() for s in shown_code(nb) for ln in s.splitlines() if pragma.search(ln)]
    assert not pragmas, f"a lint pragma in shown code: {pragmas[0]!r}"
    glue_cells = [s for s in shown_code(nb) if only_glue(s)]
    assert not glue_cells, f"a cell of glue calls is shown: {glue_cells[0][:80]!r}"
