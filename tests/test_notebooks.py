"""Every chapter notebook executes on this machine with profile "ci" (papermill, into a temporary folder)."""

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


# nbval executes every notebook in make test (in the simulator, 'full' falls back to 'ci'); papermill's
# parameter injection, which make rerun uses, is proven on the first chapter only, to keep CI's time.
@pytest.mark.parametrize("notebook", NOTEBOOKS[:1], ids=lambda p: p.stem)
def test_notebook_runs_with_ci_profile(notebook, tmp_path):
    import papermill

    out = tmp_path / notebook.name
    papermill.execute_notebook(
        str(notebook),
        str(out),
        parameters={"profile": "ci"},
        cwd=str(notebook.parent),
        kernel_name="python3",
        progress_bar=False,
    )
    executed = nbformat.read(out, as_version=4)
    errors = [
        o
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors


# Pages whose committed outputs come from the stored-rows (simulator) path, not a GPU run: their GPU rerun
# waits for device time (tests/test_book.py's one-GPU test is a strict xfail until then).
STORED_ROWS_PAGES = {"01_machine", "05_implicit_gemm_deep_shapes"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(notebook):
    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and "profile" in params[0].source, "one parameters cell holding `profile`"
    assert any("device.announce(profile)" in c.source for c in code), "the mode line comes from the harness"
    assert any("nbval-check-output" in c.metadata.get("tags", []) for c in code), "some outputs must be checked"
    assert any(c.get("outputs") for c in code), "committed with the outputs of a GPU run"
    if notebook.stem in STORED_ROWS_PAGES:  # no GPU run of its own: it must say whose stored rows it shows
        shown = "".join(o.get("text", "") for c in code for o in c.get("outputs", []) if o.output_type == "stream")
        assert "lab_run" not in nb.metadata and "timing needs a GPU: showing" in shown
    else:
        assert "lab_run" in nb.metadata and nb.metadata["lab_run"].get("gpu"), "metadata names the GPU of the run"
    if "_deep_" not in notebook.stem:  # a deep-dive page (test_prose.py) leaves the exercises to its chapter
        assert any("{exercise}" in c.source for c in nb.cells if c.cell_type == "markdown"), "exercises at the end"


def _discarded_tables(source: str) -> list[int]:
    """Lines where show.table(...) is a statement whose value Jupyter never displays: anywhere but the
    cell's last top-level statement (inside an if-block, say) its Markdown is built and thrown away."""
    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and node is not last
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "show.table"
    ]


def test_discarded_table_is_caught():
    assert _discarded_tables("if ok:\n    show.table(rows)\nelse:\n    print(1)") == [2]
    assert _discarded_tables("x = 1\nshow.table(rows)") == []
    assert _discarded_tables("if ok:\n    display(show.table(rows))") == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_table_is_displayed(notebook):
    nb = nbformat.read(notebook, as_version=4)
    lost = [(i, line) for i, c in enumerate(nb.cells) if c.cell_type == "code" for line in _discarded_tables(c.source)]
    assert not lost, f"show.table result never displayed (cell, line): {lost}; wrap it in display(...)"
