"""Show kernels and tables in a notebook: the source comes from its file in ``kernels/``, never a copy."""

from __future__ import annotations

import difflib
from pathlib import Path

from .cuda_cpp import source_path


def _language(p: Path) -> str:
    return {".py": "python", ".cu": "cuda", ".cuh": "cuda"}.get(p.suffix, "text")


def source(path: str | Path, *, start: str | None = None, end: str | None = None):
    """A highlighted kernel file (relative to kernels/).

    ``start`` skips the lines before the first that contains it (keeping a decorator just above);
    ``end`` stops before the next line, after the first shown, that contains it."""
    from IPython.display import Code

    p = source_path(path)
    lines = p.read_text().splitlines(keepends=True)
    first = 0
    if start is not None:
        hits = [i for i, line in enumerate(lines) if start in line]
        if not hits:
            raise ValueError(f"{p.name} has no line containing {start!r}")
        first = hits[0]
        while first > 0 and lines[first - 1].lstrip().startswith("@"):
            first -= 1
    last = len(lines)
    if end is not None:
        stops = [i for i in range(first + 1, len(lines)) if end in lines[i]]
        if not stops:
            raise ValueError(f"{p.name} has no line containing {end!r} after the start")
        last = stops[0]
    return Code("".join(lines[first:last]).rstrip() + "\n", language=_language(p))


def diff(old: str | Path, new: str | Path, context: int = 3):
    """A unified diff between two kernel versions: the one idea the newer file adds."""
    from IPython.display import Code

    a, b = source_path(old), source_path(new)
    lines = difflib.unified_diff(
        a.read_text().splitlines(keepends=True),
        b.read_text().splitlines(keepends=True),
        fromfile=a.name,
        tofile=b.name,
        n=context,
    )
    return Code("".join(lines), language="diff")


def table(rows: list[dict], columns: list[str] | None = None, formats: dict | None = None):
    """A Markdown table from dicts; ``formats`` maps a column to a format spec such as '.3f'."""
    from IPython.display import Markdown

    if not rows:
        raise ValueError("table: no rows to show")
    columns = columns or list(rows[0])
    formats = formats or {}

    def cell(row, col):
        value = row.get(col, "")
        if value is None or value == "":
            return "--"
        return format(value, formats[col]) if col in formats and isinstance(value, (int, float)) else str(value)

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(cell(r, c) for c in columns) + " |\n" for r in rows)
    return Markdown(head + body)


def verdicts(results, *, what: str = "check"):
    """One table for a section's correctness checks (``check.CheckResult``: anything with ``name``, ``ok``,
    ``atol``, ``rtol`` and ``reason()``): a row per check with its tolerance and verdict, a failure's reason
    beside it, and a last row counting them. A wall of PASS lines, as one table."""
    from IPython.display import Markdown

    results = list(results) if not isinstance(results, (str, bytes)) and hasattr(results, "__iter__") else None
    if not results:
        raise ValueError("verdicts: expected a non-empty list of check results (check.compare's)")
    odd = [r for r in results if not isinstance(getattr(r, "ok", None), bool) or not hasattr(r, "reason")]
    if odd:
        raise TypeError(f"verdicts: expected check results with a bool `ok` and a reason(), got {odd[0]!r:.80}")

    def bound(r):
        return f"max abs error <= {r.atol:g}" + ("" if r.rtol is None else f", relative <= {r.rtol:g}")

    passed = sum(r.ok for r in results)
    head = f"| {what} | tolerance | verdict |\n|---|---|---|\n"
    body = "".join(f"| {r.name} | {bound(r)} | {'pass' if r.ok else 'FAILED: ' + r.reason()} |\n" for r in results)
    total = f"| **all {len(results)}** | | **{passed} passed, {len(results) - passed} failed** |\n"
    return Markdown(head + body + total)
