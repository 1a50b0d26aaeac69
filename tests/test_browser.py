"""The rendered book in a real browser: headless Chromium opens every page of _build/html and finds
no console errors, failed requests, broken images, broken links within the book or unrendered math.
Screenshots of every page are kept in _build/screenshots/ (scripts/browser_check.py does the work)."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "scripts"))
import browser_check  # noqa: E402

PAGES = browser_check.pages(HTML) if HTML.exists() else []


@pytest.fixture(scope="module")
def reports():
    def unavailable(why):
        if os.environ.get("BOOK_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    if not (HTML / "index.html").exists():
        unavailable("the book is not built (make book)")
    executable = browser_check.find_chromium()
    if executable is None:
        unavailable("no Chromium: make book-check installs Debian's package")
    if not (browser_check.MATHJAX_LOCAL / "es5" / "tex-mml-chtml.js").exists():
        unavailable(f"no local MathJax at {browser_check.MATHJAX_LOCAL}: make book-check unpacks it")
    return {r.page: r for r in browser_check.run(HTML, ROOT / "_build" / "screenshots", executable)}


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_cleanly(page, reports):
    assert not reports[page].problems, "\n".join(reports[page].problems)


def test_chapters_have_screenshots_and_rendered_math(reports):
    chapters = [r for p, r in reports.items() if p.startswith("notebooks/")]
    assert chapters, "no chapter page was checked"
    for r in chapters:
        assert r.screenshot and r.screenshot.stat().st_size > 10_000, f"{r.page}: no real screenshot"
    assert sum(r.math for r in reports.values()) > 0, "no page has math: the math check proves nothing"


def test_link_check_finds_missing_pages_and_anchors(tmp_path):
    (tmp_path / "a.html").write_text('<h1 id="top">A</h1>')
    base = "http://127.0.0.1:1/"
    assert browser_check.check_link(base + "a.html#top", base, tmp_path, {}) is None
    assert browser_check.check_link("https://example.org/x.html", base, tmp_path, {}) is None
    assert "missing anchor" in browser_check.check_link(base + "a.html#gone", base, tmp_path, {})
    assert "broken link to b.html" in browser_check.check_link(base + "b.html", base, tmp_path, {})
