"""The built HTML book (make book): every chapter page exists, shows its figures and no error output."""

import os
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from kernels.harness import device

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def visit(entries):
        for entry in entries:
            files.append(entry["file"])
            visit(entry.get("sections", []))

    for part in toc.get("parts", []):
        visit(part["chapters"])
    return files


def test_every_notebook_is_in_the_table_of_contents():
    notebooks = {f"notebooks/{p.stem}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert notebooks <= set(toc_files()), f"not in _toc.yml: {sorted(notebooks - set(toc_files()))}"


@pytest.fixture(scope="module")
def html():
    if not (HTML / "index.html").exists():
        if os.environ.get("BOOK_REQUIRE_HTML"):
            pytest.fail("no built book at _build/html: run `make book` first")
        pytest.skip("the book is not built (make test builds it first)")
    return HTML


@pytest.mark.parametrize("page", toc_files())
def test_page_exists_without_error_output(page, html):
    text = (html / f"{page}.html").read_text()
    assert "Traceback (most recent call last)" not in text
    assert not re.search(r'class="[^"]*\bcell_output\b[^"]*"[^>]*>\s*<div class="output traceback', text)


@pytest.mark.parametrize("page", [f for f in toc_files() if f.startswith("notebooks/")])
def test_chapter_shows_its_figures_and_gpu(page, html):
    text = (html / f"{page}.html").read_text()
    nb = nbformat.read(ROOT / f"{page}.ipynb", as_version=4)
    n_figures = sum(
        1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    )
    images = re.findall(r'<img[^>]+src="([^"]+)"', text)
    local = [src for src in images if not src.startswith(("http", "data:"))]
    assert len(local) >= n_figures
    for src in local:
        assert (html / page).parent.joinpath(src).resolve().exists(), f"broken image {src}"
    # A page from the stored-rows path (no GPU run of its own) names the reference GPU whose rows it shows.
    gpu = nb.metadata.get("lab_run", {}).get("gpu") or device.REFERENCE_PROPERTIES["name"]
    assert gpu in text, f"the page should name the GPU of its run or of the rows it shows ({gpu})"


@pytest.mark.parametrize("page", [f for f in toc_files() if f.startswith("notebooks/")])
def test_chapter_tables_render_as_tables(page, html):
    """The harness's tables (show.table) are Markdown outputs: each must reach the page as an HTML
    table, not as a paragraph of pipes (CommonMark has no tables; _config.yml asks for GFM)."""
    text = (html / f"{page}.html").read_text()
    nb = nbformat.read(ROOT / f"{page}.ipynb", as_version=4)
    n_tables = sum(
        1
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "|---|" in "".join(o.get("data", {}).get("text/markdown", ""))
    )
    assert n_tables > 0 or "_deep_" in page, "a chapter shows its results as tables"  # a deep dive may print text
    assert len(re.findall(r"<table\b", text)) >= n_tables
    assert not re.search(r"\|(---|—)\|", text), "a Markdown table was rendered as text"


def test_next_from_the_landing_page_opens_chapter_00(html):
    text = (html / "book" / "intro.html").read_text()
    link = re.search(r'<a class="right-next"\s+href="([^"]+)"', text)
    assert link and link.group(1) == "../notebooks/00_first_kernels.html"


# --- one run per book: one GPU, one sitting ---------------------------------------------------------------

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SITTING_S = 900  # the book reruns whole on one lent GPU in one sitting (scripts/rerun_book.py)


@pytest.mark.xfail(
    strict=True,
    reason="01_machine and 05_implicit_gemm_deep_shapes hold outputs of the stored-rows (simulator) path, not of a GPU "
    "run: the sitting's device time ran out after 01's GPU run failed on a copy-kernel check fixed since",
)
def test_the_committed_book_is_one_gpus_run():
    by_gpu: dict[str, list[str]] = {}
    for nb in NOTEBOOKS:
        gpu = nbformat.read(nb, as_version=4).metadata.get("lab_run", {}).get("gpu", "no lab_run")
        by_gpu.setdefault(gpu, []).append(nb.stem)
    assert len(by_gpu) == 1, "the notebooks name more than one GPU: " + "; ".join(
        f"{gpu}: {', '.join(stems)}" for gpu, stems in sorted(by_gpu.items())
    )


def test_the_committed_book_reruns_in_one_sitting():
    seconds = {nb.stem: nbformat.read(nb, as_version=4).metadata["papermill"]["duration"] for nb in NOTEBOOKS}
    slowest = ", ".join(f"{stem} {s:.0f} s" for stem, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:5])
    assert sum(seconds.values()) <= SITTING_S, (
        f"papermill's durations sum to {sum(seconds.values()):.0f} s, over {SITTING_S} s; the slowest: {slowest}"
    )
