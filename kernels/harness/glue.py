"""Numbers for the prose: a cell that measures (or reads stored rows) names each value the text quotes,
and the Markdown shows it with {glue:text}`name:.3f`, so a rerun on another GPU rewrites the prose too.

``glue`` writes the output MyST-NB's own ``glue`` writes (a display_data with scrapbook metadata), without
importing myst_nb: the GPU machine that executes the notebooks has no Sphinx stack.
"""

from __future__ import annotations

import math
import re

MIME_PREFIX = "application/papermill.record/"  # myst_nb.ext.glue.GLUE_PREFIX: stored, not shown
_NAME = re.compile(r"[A-Za-z_][\w-]*")


def glue(name: str, value) -> None:
    """Store ``value`` (a finite number or a string) under ``name`` in this cell's outputs, not shown."""
    from IPython.core.formatters import format_display_data
    from IPython.display import display

    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"glue name: expected letters, digits, '_' or '-', got {name!r}")
    if hasattr(value, "item"):  # a NumPy scalar: its repr (np.float64(...)) would not parse as a number
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"glue {name!r}: expected a number or a string, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"glue {name!r}: {value} is not a number the prose can quote")
    bundle, metadata = format_display_data(value)
    metadata["scrapbook"] = {"name": name, "mime_prefix": MIME_PREFIX}
    display({MIME_PREFIX + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def word(condition: bool, yes: str, no: str) -> str:
    """The word the result calls for ("faster" or "slower"), glued like a number."""
    return yes if condition else no


def stored(notebook: dict) -> dict[str, str]:
    """Every glued name of an executed notebook (nbformat JSON as a dict) and its text/plain value."""
    found = {}
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook")
            if scrap and "name" in scrap:
                data = output.get("data", {})
                found[scrap["name"]] = data.get(scrap.get("mime_prefix", "") + "text/plain", "")
    return found
