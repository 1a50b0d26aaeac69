"""The rendered book in a real browser: headless Chromium opens every page of _build/html, with the
network blocked, and finds no console errors, failed requests, broken images, broken links within the
book, unrendered math, code that scrolls sideways or figures too short to read. Full-page
screenshots of every page are kept in _build/screenshots/ (scripts/browser_check.py does the work).
Without Chromium these tests are skipped, unless BOOK_REQUIRE_BROWSER is set (`make test` sets it
where CI is set; .ci/run installs Chromium)."""

import os
import re
import shutil
import struct
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

import browser_check

book_fixes = pytest.importorskip("book_fixes", reason="the book's build tools (docutils) are not installed")

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"

CHROMIUM = browser_check.find_chromium()
if CHROMIUM is None and not os.environ.get("BOOK_REQUIRE_BROWSER"):  # one line in the test summary
    pytest.skip("no Chromium: the browser check is skipped (.ci/run installs it in CI)", allow_module_level=True)
PAGES = browser_check.pages(HTML) if HTML.exists() else []
MATH = '<span class="math notranslate nohighlight">\\(a^2 + b^2\\)</span>'


def unavailable(why):
    if os.environ.get("BOOK_REQUIRE_BROWSER"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        pytest.fail("no Chromium, and BOOK_REQUIRE_BROWSER is set: .ci/run installs it")
    return CHROMIUM


@pytest.fixture(scope="module")
def book():
    if not (HTML / "index.html").exists():
        unavailable("the book is not built (make book)")
    return HTML


@pytest.fixture(scope="module")
def reports(book, chromium):
    return {r.page: r for r in browser_check.run(book, ROOT / "_build" / "screenshots", chromium)}


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_cleanly(page, reports):
    assert not reports[page].problems, "\n".join(reports[page].problems)


def png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_chapters_have_screenshots_and_rendered_math(reports):
    chapters = [r for p, r in reports.items() if p.startswith("notebooks/")]
    assert chapters, "no chapter page was checked"
    for r in chapters:
        assert r.screenshot and r.screenshot.stat().st_size > 10_000, f"{r.page}: no real screenshot"
        width, height = png_size(r.screenshot)
        assert height > 2 * browser_check.WINDOW["height"], f"{r.page}: only the first screen ({width}x{height})"
    assert sum(r.math for r in reports.values()) > 0, "no page has math: the math check proves nothing"


def test_pages_load_mathjax_from_the_book(book):
    with_math = [p for p in PAGES if 'class="math' in (book / p).read_text()]
    assert with_math, "no page has math"
    for page in with_math:
        scripts = re.findall(r'<script[^>]+src="([^"]*mathjax[^"]*)"', (book / page).read_text(), re.IGNORECASE)
        assert scripts, f"{page}: no MathJax script"
        for src in scripts:
            local = (book / page).parent.joinpath(src.split("?")[0]).resolve()
            assert local.is_file(), f"{page}: {src} not in the book"


def page_with_math(root: Path, mathjax_src: str) -> str:
    (root / "math.html").write_text(
        f'<html><head><script async src="{mathjax_src}"></script></head><body><p>{MATH}</p></body></html>'
    )
    return "math.html"


def test_math_renders_offline_from_the_book_static(tmp_path, chromium):
    try:
        book_fixes.copy_mathjax(tmp_path / "_static")
    except FileNotFoundError as err:
        unavailable(str(err))
    page = page_with_math(tmp_path, "_static/" + book_fixes.MATHJAX_PATH)
    (report,) = browser_check.run(tmp_path, tmp_path / "shots", chromium, only=[page])
    assert report.math == 1 and not report.problems, report.problems


def test_math_from_a_cdn_fails_offline(tmp_path, chromium):
    page = page_with_math(tmp_path, "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js")
    (report,) = browser_check.run(tmp_path, tmp_path / "shots", chromium, only=[page])
    problems = "\n".join(report.problems)
    assert "math not rendered" in problems and "raw TeX on the page" in problems
    assert "needs the network: https://cdn.jsdelivr.net/" in problems


def page_with_code_and_figure(root: Path, css: str = "") -> str:
    """A page shaped like a chapter's: a highlighted code cell with one long line, and a figure as wide
    as the old results page's launch-rate strip (4848 x 396 px)."""
    plt.imsave(root / "strip.png", np.zeros((396, 4848, 3)))
    long_line = "x = " + " + ".join(f"value_{i}" for i in range(60))
    (root / "code.html").write_text(
        f"<html><head>{css}</head><body><article style='width: 800px'>"
        f"<div class='highlight'><pre>{long_line}\nshort line</pre></div>"
        f"<div class='cell_output'><img src='strip.png' style='max-width: 100%'></div>"
        f"<div style='height: 3000px'>a page taller than the window</div></article></body></html>"
    )
    return "code.html"


def test_sideways_code_short_figures_and_the_whole_page_are_seen(tmp_path, chromium):
    page = page_with_code_and_figure(tmp_path)
    (report,) = browser_check.run(tmp_path, tmp_path / "shots", chromium, only=[page])
    problems = "\n".join(report.problems)
    assert "code scrolls sideways: 'x = value_0 + value_1" in problems
    assert re.search(r"figure strip.png shown \d+ px tall \(under 150\): too small to read", problems)
    assert png_size(report.screenshot)[1] > 3000, "the screenshot stops at the first screen"


def test_the_books_css_wraps_code(tmp_path, chromium):
    shutil.copy(book_fixes.STATIC / book_fixes.CSS, tmp_path)
    page = page_with_code_and_figure(tmp_path, f"<link rel='stylesheet' href='{book_fixes.CSS}'>")
    (report,) = browser_check.run(tmp_path, tmp_path / "shots", chromium, only=[page])
    assert not [p for p in report.problems if "sideways" in p], report.problems


def test_link_check_finds_missing_pages_and_anchors(tmp_path):
    (tmp_path / "a.html").write_text('<h1 id="top">A</h1>')
    base = "http://127.0.0.1:1/"
    assert browser_check.check_link(base + "a.html#top", base, tmp_path, {}) is None
    assert browser_check.check_link("https://example.org/x.html", base, tmp_path, {}) is None
    assert "missing anchor" in browser_check.check_link(base + "a.html#gone", base, tmp_path, {})
    assert "broken link to b.html" in browser_check.check_link(base + "b.html", base, tmp_path, {})
