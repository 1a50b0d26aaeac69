"""scripts/book_from.py (make book RESULTS_FROM=<gpu>): the book's sources with another GPU's rerun in place."""

import json

import nbformat
import pytest

import book_from
from kernels.harness.glue import MIME_PREFIX


def notebook(values: dict) -> str:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("glue(...)")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={MIME_PREFIX + "text/plain": repr(v)},
            metadata={"scrapbook": {"name": k, "mime_prefix": MIME_PREFIX}},
        )
        for k, v in values.items()
    ]
    nb.cells = [cell, nbformat.v4.new_markdown_cell("{glue:text}`ms:.3f` ms, {glue:text}`verdict`")]
    return nbformat.writes(nb)


def test_the_rerun_replaces_the_committed_notebook_and_its_numbers_are_counted(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_x.ipynb").write_text(notebook({"ms": 0.43, "sms": 132, "verdict": "met"}))
    (tmp_path / "notebooks" / "02_y.ipynb").write_text(notebook({"ms": 1.0}))
    rerun = tmp_path / "build" / "rerun" / "gpu-b"
    rerun.mkdir(parents=True)
    (rerun / "01_x.ipynb").write_text(notebook({"ms": 0.39, "sms": 132, "verdict": "missed"}))
    out, replaced = book_from.stage("gpu-b", tmp_path)
    assert replaced == ["01_x.ipynb"] and out == tmp_path / "build" / "book-gpu-b"
    assert json.loads((out / "notebooks" / "01_x.ipynb").read_text()) == json.loads((rerun / "01_x.ipynb").read_text())
    assert (out / "notebooks" / "02_y.ipynb").read_text() == (tmp_path / "notebooks" / "02_y.ipynb").read_text()
    assert not (out / "build" / "rerun").exists()
    counts = book_from.compare(tmp_path / "notebooks" / "01_x.ipynb", out / "notebooks" / "01_x.ipynb")
    assert counts == {"numbers": 2, "numbers changed": 1, "words": 1, "words changed": 1}


def test_no_rerun_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no rerun of gpu-c"):
        book_from.stage("gpu-c", tmp_path)
