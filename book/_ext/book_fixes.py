"""Sphinx fix-ups for the rendered book.

sphinx-thebe 0.3.1 and sphinx-togglebutton add their inline scripts both to the HTML builder and to
Sphinx's registry; with Sphinx 7.4 each page gets them twice, and the second copy of thebe's
redeclares a `const`: a SyntaxError in every reader's console. Identical scripts are dropped here.

MathJax is served from the book itself, not from a CDN, so a reader offline sees math and not raw
LaTeX: the pages load ``_static/mathjax/tex-mml-chtml.js``, copied with its fonts and the TeX
extensions it loads on demand from the release ``make book`` unpacks from npm (mathjax@3.2.2).

`literalinclude` with `:diff:` heads its diff with both files' absolute paths, the building machine's
folders on the page; they are made relative to the book's root here.

Code blocks and printed outputs wrap at the column's edge instead of scrolling sideways
(``static/book_fixes.css``).
"""

import os
import shutil
from pathlib import Path

from docutils import nodes

MATHJAX = Path(__file__).resolve().parents[2] / "build" / "mathjax" / "package" / "es5"
MATHJAX_FILES = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions")
MATHJAX_PATH = "mathjax/tex-mml-chtml.js"  # relative to _static
STATIC = Path(__file__).resolve().parent / "static"
CSS = "book_fixes.css"  # in STATIC


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        # An inline script comes once with filename None and once with '' (registry copy): same script.
        key = (getattr(script, "filename", script) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def copy_mathjax(static: Path, source: Path = MATHJAX):
    """MathJax's files the pages need, from ``source`` (an unpacked es5 folder) into ``static``/mathjax."""
    if not (source / "tex-mml-chtml.js").is_file():
        raise FileNotFoundError(f"no MathJax at {source}: `make book` unpacks npm's mathjax@3.2.2 there (needs npm)")
    for part in MATHJAX_FILES:
        target = static / "mathjax" / part
        if (source / part).is_dir():
            shutil.copytree(source / part, target, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / part, target)


def _serve_mathjax(app, config):
    config.mathjax_path = MATHJAX_PATH


def _add_static(app, config):
    config.html_static_path = [*config.html_static_path, str(STATIC)]


def _copy_mathjax(app):
    if app.builder.format == "html":
        copy_mathjax(Path(app.outdir) / "_static")


def _relative_diff_headers(app, doctree):
    root = os.path.normpath(app.srcdir) + os.sep
    for block in doctree.findall(nodes.literal_block):
        if block.get("language") == "udiff" and root in block.rawsource:
            text = "".join(
                line.replace(root, "", 1) if line.startswith(("--- ", "+++ ")) else line
                for line in block.rawsource.splitlines(keepends=True)
            )
            block.rawsource = text  # the HTML writer highlights a block only while its rawsource is its text
            block[:] = [nodes.Text(text)]


def setup(app):
    app.connect("doctree-read", _relative_diff_headers)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    app.connect("config-inited", _serve_mathjax)
    app.connect("config-inited", _add_static)
    app.add_css_file(CSS)
    app.connect("builder-inited", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
