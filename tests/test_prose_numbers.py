"""scripts/prose_numbers.py: after a rerun, the numbers the prose quotes that the run moved."""

import json
import subprocess

import nbformat

import prose_numbers


def notebook(prose: str, printed: str) -> dict:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("run()")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells = [code, nbformat.v4.new_markdown_cell(prose)]
    return json.loads(nbformat.writes(nb))


PROSE = "The SM clock measured 1978.3 MHz; HALO TILE reached 46,770 GFLOP/s (about 46.8 thousand), 1.29x."


def test_moved_lists_quoted_numbers_the_rerun_changed():
    old = notebook(PROSE, "clock 1978.3 MHz\nHALO TILE 46770.1 GFLOP/s, ratio 1.29\n")
    new = notebook(PROSE, "clock 1981.4 MHz\nHALO TILE 46414.0 GFLOP/s, ratio 1.29\n")
    # 46.8 is 46770 in other units: numbers are compared as printed, so the re-read must catch that one
    assert [n for _, n, _ in prose_numbers.moved(old, new)] == ["1978.3", "46770"]
    cell, _, context = prose_numbers.moved(old, new)[0]
    assert cell == 1 and "measured 1978.3 MHz" in context


def test_moved_ignores_changes_that_round_to_the_quoted_number():
    old = notebook(PROSE, "clock 1978.3 MHz\nHALO TILE 46770.1 GFLOP/s, ratio 1.29\n")
    new = notebook(PROSE, "clock 1978.31 MHz\nHALO TILE 46770.4 GFLOP/s, ratio 1.291\n")
    assert prose_numbers.moved(old, new) == []


def test_unmatched_lists_prose_decimals_no_output_prints():
    nb = notebook("Measured 0.93 and 1.29 on 2048 threads.", "ratio 1.29\n")
    assert [n for _, n, _ in prose_numbers.unmatched(nb)] == ["0.93"]


def test_command_compares_with_the_committed_notebook(tmp_path, capsys):
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps(notebook(PROSE, "clock 1978.3 MHz\n")))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "chapter.ipynb"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "run"], check=True)
    assert prose_numbers.main([str(path)]) == 0
    path.write_text(json.dumps(notebook(PROSE, "clock 1981.4 MHz\n")))
    assert prose_numbers.main([str(path)]) == 1
    assert "cell 1: 1978.3:" in capsys.readouterr().out
    assert prose_numbers.main([str(path), "--against", "no-such-rev"]) == 2
