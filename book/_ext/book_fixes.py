"""Sphinx fix-ups for the rendered book.

Found by the browser check (tests/test_browser.py): sphinx-thebe 0.3.1 and sphinx-togglebutton add their
inline scripts both to the HTML builder and to Sphinx's registry; with Sphinx 7.4 each page gets them
twice, and the second copy of thebe's redeclares a `const`: a SyntaxError in every reader's console.
Identical scripts are dropped here.

`literalinclude` with `:diff:` heads its diff with both files' absolute paths, the building machine's
folders on the page; they are made relative to the book's root here.
"""
import os

from docutils import nodes


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        # An inline script comes once with filename None and once with '' (registry copy): same script.
        key = (getattr(script, "filename", script) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _relative_diff_headers(app, doctree):
    root = os.path.normpath(app.srcdir) + os.sep
    for block in doctree.findall(nodes.literal_block):
        if block.get("language") == "udiff" and root in block.rawsource:
            text = "".join(line.replace(root, "", 1) if line.startswith(("--- ", "+++ ")) else line
                           for line in block.rawsource.splitlines(keepends=True))
            block.rawsource = text  # the HTML writer highlights a block only while its rawsource is its text
            block[:] = [nodes.Text(text)]


def setup(app):
    app.connect("doctree-read", _relative_diff_headers)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
