"""What the chapter's pages glue, and the word they glue where a step did not run: on a GPU that leaves
steps out (``BOOK_MAX_CC``, or an older GPU), every name the Markdown quotes still gets a value."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..harness import glue as _glue

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOT_RUN = "(not run on this GPU)"
_KEY = re.compile(r"\{glue:text\}`([A-Za-z_][\w-]*)")


def quoted(notebook: str) -> list[str]:
    """The glue names the Markdown of ``notebook`` (its name, without .ipynb) quotes, in order, once each."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return list(dict.fromkeys(_KEY.findall(text)))


class Glue:
    """``glue`` that remembers what it stored, so that a page can fill in what it did not (``fill``)."""

    def __init__(self):
        self.names: set[str] = set()

    def __call__(self, name: str, value) -> None:
        _glue.glue(name, value)
        self.names.add(name)

    def fill(self, notebook: str) -> list[str]:
        """Glue NOT_RUN under every name ``notebook``'s Markdown quotes that no cell stored; those names."""
        missing = [name for name in quoted(notebook) if name not in self.names]
        for name in missing:
            self(name, NOT_RUN)
        return missing
