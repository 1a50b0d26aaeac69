"""Sphinx fix-ups for the rendered book, each one found by the browser check (tests/test_browser.py).

sphinx-thebe 0.3.1 and sphinx-togglebutton add their inline scripts both to the HTML builder and to
Sphinx's registry; with Sphinx 7.4 each page gets them twice, and the second copy of thebe's
redeclares a `const`: a SyntaxError in every reader's console. Identical scripts are dropped here.
"""


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        # An inline script comes once with filename None and once with '' (registry copy): same script.
        key = (getattr(script, "filename", script) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
