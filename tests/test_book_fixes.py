"""book/_ext/book_fixes.py on doctrees made by hand (the built book itself: test_book.py)."""

from types import SimpleNamespace

import pytest

nodes = pytest.importorskip("docutils.nodes", reason="the book's build tools (docutils) are not installed")
book_fixes = pytest.importorskip("book_fixes")


def test_diff_headers_name_the_files_relative_to_the_book(tmp_path):
    diff = (
        f"--- {tmp_path}/kernels/ssim/v0_naive.py\n+++ {tmp_path}/kernels/ssim/v1_no_redundancy.py\n"
        f"@@ -1 +1 @@\n-{tmp_path}/old\n+new\n"
    )
    listing = f"path = '{tmp_path}/kernels'\n"
    doc = nodes.section()
    doc += nodes.literal_block(diff, diff, language="udiff")
    doc += nodes.literal_block(listing, listing, language="python")
    book_fixes._relative_diff_headers(SimpleNamespace(srcdir=tmp_path), doc)
    expected = (
        f"--- kernels/ssim/v0_naive.py\n+++ kernels/ssim/v1_no_redundancy.py\n@@ -1 +1 @@\n-{tmp_path}/old\n+new\n"
    )
    assert [(b.astext(), b.rawsource) for b in doc.findall(nodes.literal_block)] == [
        (expected, expected),
        (listing, listing),
    ]
