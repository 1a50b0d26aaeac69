"""scripts/rerun_book.py and scripts/precompile.py: the whole book in one sitting, its variants compiled first."""

import pytest

import precompile
import rerun_book
from kernels.conv import cuda_stages, s9_autotune, s11_halo_autotune
from kernels.conv.common import PROBLEMS
from kernels.harness import device
from kernels.ssim import common as ssim

NOTEBOOKS = sorted((rerun_book.ROOT / "notebooks").glob("*.ipynb"))


def test_the_book_runs_every_notebook_once_measuring_chapters_first():
    order = rerun_book.book_notebooks(rerun_book.chapters())
    assert sorted(order) == NOTEBOOKS
    stems = [nb.stem for nb in order]
    measuring = [i for i, s in enumerate(stems) if s.startswith(("01_machine", "04a_", "04b_"))]
    assert measuring == list(range(len(measuring))), stems  # the machine and the probes before any other page


def test_only_picks_notebooks_in_the_books_order_and_names_a_wrong_one():
    order = rerun_book.book_notebooks(rerun_book.chapters())
    picked = rerun_book.select(order, "05_implicit_gemm_deep_shapes, 03_conv.ipynb")
    assert [nb.stem for nb in picked] == ["03_conv", "05_implicit_gemm_deep_shapes"]
    assert rerun_book.select(order, None) == order
    with pytest.raises(SystemExit, match="no notebook 03_convolution"):
        rerun_book.select(order, "03_convolution")


def test_a_resumed_run_skips_only_what_this_commit_executed(tmp_path):
    path = tmp_path / rerun_book.STATE
    assert rerun_book.load_state(path, "abc") == {}
    rerun_book.save_state(path, "abc", {"01_machine": 12.5})
    assert rerun_book.load_state(path, "abc") == {"01_machine": 12.5}
    assert rerun_book.load_state(path, "def") == {}  # another commit's run is not this one
    path.write_text("{not json")
    assert rerun_book.load_state(path, "abc") == {}


def test_without_a_gpu_one_line_and_status_1(capsys):
    if device.on_gpu():
        pytest.skip("this machine has a GPU")
    assert rerun_book.main([]) == 1
    assert len(capsys.readouterr().out.strip().splitlines()) == 1


def test_precompile_builds_what_the_registries_list():
    """Every CUDA C++ stage with its own tile and each autotuner's candidates on the chapter's problems (by
    what is compiled: SPLIT is chosen at launch), every CUDA C++ SSIM version, each build once."""
    jobs = precompile.jobs(gpu=False)
    compiled = {(args[0], cuda_stages.options(args[1])) for _, function, args in jobs if function == "compiled"}
    wanted = {(name, cuda_stages.options(tile)) for name, tile in cuda_stages.DEFAULTS.items()}
    for tuner in (s9_autotune, s11_halo_autotune):
        tiles = [tile for p in ("conv1", "conv2") for tile in tuner.candidates(PROBLEMS[p])]
        wanted |= {(tuner.NAME, cuda_stages.options(tile)) for tile in tiles}
    assert compiled == wanted
    assert {args[0] for _, function, args in jobs if function == "resources"} == set(ssim.CUDA_VERSIONS)
    assert len({repr(job) for job in jobs}) == len(jobs)


def test_a_job_reports_its_error_instead_of_raising():
    job, seconds, error = precompile.run(("kernels.conv.model", "compiled", ("NO SUCH STAGE", None)))
    assert error and "NO SUCH STAGE" in error and seconds >= 0


def test_a_budget_reads_each_notebooks_last_duration(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"duration": 12.5}
    nbformat.write(nb, tmp_path / "a.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "b.ipynb")
    assert rerun_book.last_duration(tmp_path / "a.ipynb") == 12.5
    assert rerun_book.last_duration(tmp_path / "b.ipynb") == 0.0  # never executed: nothing to wait for


def test_a_page_runs_after_the_pages_whose_rows_it_quotes():
    stems = [nb.stem for nb in rerun_book.book_notebooks(rerun_book.chapters())]
    assert len(stems) == len(set(stems))
    for page, quoted in rerun_book.RUN_FIRST.items():
        assert all(stems.index(q) < stems.index(page) for q in quoted)
