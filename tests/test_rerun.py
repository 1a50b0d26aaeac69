"""scripts/rerun.py: chapter names, and the reference column when BOOK_RESULTS points elsewhere."""

import re
import subprocess

import nbformat
import pytest

import rerun
from kernels.harness import results

NOTEBOOKS = sorted((rerun.ROOT / "notebooks").glob("*.ipynb"))
ROOT = rerun.ROOT

ENV = {
    "date": "2099-01-01T00:00:00Z",
    "commit": "abc",
    "gpu": "Student GPU",
    "gpu_slug": "student-gpu",
    "driver": "1.0",
    "cuda_runtime": "13.0",
    "sm_clock_mhz": 1500,
    "mem_clock_mhz": 1000,
}


def test_reference_column_comes_from_the_repository_when_book_results_is_elsewhere(tmp_path, monkeypatch):
    """A student's fresh BOOK_RESULTS folder holds no reference rows: they must still be compared."""
    committed = results.latest("machine", results.REFERENCE_GPU, results.REPOSITORY)
    key, ref_row = next(iter(sorted(committed.items())))
    monkeypatch.setattr(results, "RESULTS", tmp_path)  # what BOOK_RESULTS=tmp_path sets
    ours = 2 * float(ref_row["value"])
    results.record(
        "machine",
        [{"kernel": key[0], "problem": key[1], "metric": key[2], "value": ours, "unit": ref_row["unit"]}],
        env=ENV,
    )
    lines = rerun.comparison("student-gpu", ENV["date"], rerun.reference_rows(results.REFERENCE_GPU))
    assert len(lines) == 2
    assert lines[1].split()[-1] == "2.000"  # not "-": the reference row was found


def test_only_this_runs_rows_are_listed(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    row = {"kernel": "k", "problem": "p", "metric": "GB/s", "value": 1.0, "unit": "GB/s"}
    results.record("machine", [row], env=ENV | {"date": "2000-01-01T00:00:00Z"})
    results.record("machine", [row | {"kernel": "k2"}], env=ENV)
    lines = rerun.comparison("student-gpu", ENV["date"], {})
    assert [line.split()[1] for line in lines[1:]] == ["k2"]


@pytest.mark.parametrize(
    "chapter, stems",
    [
        ("first_kernels", ["00_first_kernels"]),
        ("machine", ["01_machine"]),
        (
            "ssim",
            ["02_ssim_worklog", "02b_ssim_beyond", "02b_ssim_beyond_deep_profile", "02b_ssim_beyond_deep_training"],
        ),
        (
            "probes",
            [
                "04a_probes_compute",
                "04a_probes_compute_deep_regbanks",
                "04b_probes_memory",
                "04b_probes_memory_deep_caches",
                "04b_probes_memory_deep_launch",
            ],
        ),
        (
            "implicit_gemm",
            ["05_implicit_gemm", "05_implicit_gemm_deep_profile", "05_implicit_gemm_deep_shapes"],
        ),  # its deep dives rerun with it
    ],
)
def test_chapter_names_match_notebooks_by_prefix(chapter, stems):
    assert [p.stem for p in rerun.chapter_notebooks(chapter)] == stems


def test_a_whole_notebook_name_reruns_that_page_alone():
    assert [p.stem for p in rerun.chapter_notebooks("03_conv")] == ["03_conv"]
    assert [p.stem for p in rerun.chapter_notebooks("03_conv_deep_profile")] == ["03_conv_deep_profile"]


def test_unknown_chapter_lists_the_names():
    with pytest.raises(SystemExit, match="chapters: .*implicit_gemm"):
        rerun.chapter_notebooks("igemm")


def test_update_is_refused_on_a_gpu_other_than_the_reference_unless_forced():
    with pytest.raises(SystemExit, match=r"not the reference GPU .*--force-update \(make rerun UPDATE=1 FORCE=1\)"):
        rerun.check_update("nvidia-h200", force=False)
    rerun.check_update("nvidia-h200", force=True)  # told explicitly
    rerun.check_update(results.REFERENCE_GPU, force=False)


def test_rerun_all_measures_before_it_quotes():
    """Chapters that quote the machine's and the probes' numbers (quantities.py) from this GPU's rows run
    after the chapters that measure them, so a fresh GPU's book never quotes the reference GPU's."""
    help_text = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True)
    order = re.search(r"every chapter, in turn \(([^)]*)\)", help_text.stdout).group(1).split()
    assert sorted(order) == sorted({re.sub(r"^\d+[a-z]?_", "", p.stem) for p in NOTEBOOKS if "_deep_" not in p.stem})
    measuring = ("machine", "probes_compute", "probes_memory")
    quoting = [
        c
        for c in order
        if c not in measuring and any("quantities." in p.read_text() for p in rerun.chapter_notebooks(c))
    ]
    assert quoting and all(order.index(c) > max(map(order.index, measuring)) for c in quoting), (order, quoting)


@pytest.mark.parametrize("chapter", ["", "  "])
def test_an_empty_chapter_name_is_refused_not_taken_for_every_notebook(chapter):
    with pytest.raises(SystemExit, match="chapter: expected a chapter's name"):
        rerun.chapter_notebooks(chapter)


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('profile = "full"', metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


LAB_RUN = {"gpu": "Test GPU", "commit": "abc"}


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A checkout with a committed notebook, executed into its own build/rerun/."""
    monkeypatch.setattr(rerun, "ROOT", tmp_path)
    (tmp_path / "notebooks").mkdir()
    return tmp_path


def test_a_failed_run_leaves_the_committed_notebook_as_it_was(book):
    committed = _notebook(book / "notebooks" / "01_x.ipynb", "print('first')", "raise RuntimeError('boom')")
    before = committed.read_bytes()
    with pytest.raises(SystemExit, match=r"01_x\.ipynb failed .*build/rerun/test-gpu/01_x\.ipynb; "):
        rerun.execute(committed, committed, LAB_RUN, parameters={"profile": "ci"})
    assert committed.read_bytes() == before
    assert "boom" in (book / "build" / "rerun" / "test-gpu" / "01_x.ipynb").read_text()
    assert [p.name for p in (book / "notebooks").iterdir()] == ["01_x.ipynb"]  # no temporary file left


def test_a_clean_run_replaces_the_committed_notebook_with_its_run(book):
    committed = _notebook(book / "notebooks" / "01_x.ipynb", "print(profile)")
    assert rerun.execute(committed, committed, LAB_RUN, parameters={"profile": "ci"}) == committed
    executed = nbformat.read(committed, as_version=4)
    assert executed.metadata["lab_run"] == LAB_RUN
    assert executed.cells[-1].outputs[0]["text"] == "ci\n"
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "remove-cell" in injected[0].metadata.tags
    assert (book / "build" / "rerun" / "test-gpu" / "01_x.ipynb").read_bytes() == committed.read_bytes()
