"""How the probes chapters print what they checked and the results table: a count of verdicts with
only the failures in full (a line per PASS would be a wall), and numbers without exponents."""

from __future__ import annotations


def verdicts(checks, runs=()) -> str:
    """A small table of the checks (objects with ``ok`` whose ``str`` is the verdict line) and of the
    timing probes that ran (``(name, rows)`` pairs), then every failed check's verdict line."""
    checks = list(checks)
    odd = [c for c in checks if not isinstance(getattr(c, "ok", None), bool)]
    if odd:
        raise TypeError(f"checks: expected verdicts with a bool `ok` (check.CheckResult), got {odd[0]!r}")
    failed = [c for c in checks if not c.ok]
    table = [("", "passed", "failed"), ("checks", str(len(checks) - len(failed)), str(len(failed)))]
    if runs:
        table.append(("timing probes run", str(len(runs)), "--"))
    width = [max(len(row[i]) for row in table) for i in range(3)]
    lines = [f"{row[0]:<{width[0]}}  {row[1]:>{width[1]}}  {row[2]:>{width[2]}}".rstrip() for row in table]
    lines += [str(c) for c in failed]
    lines.append(("PASS" if not failed else "FAIL") + f"  {len(checks) - len(failed)} of {len(checks)} checks")
    return "\n".join(lines)


def number(value) -> str | None:
    """A table's number: whole from 100 on (a clock of 1980 MHz reads 1980, not 1.98e+03), three
    significant digits below; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"value: expected a number or None, got {type(value).__name__}")
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def table_rows(entries: list[dict], columns=("ours", "MI25")) -> list[dict]:
    """``entries`` (``common.summary``'s rows) with the numbers of ``columns`` formatted by ``number``
    (a placeholder such as "--" stays as it is)."""
    return [
        {**e, **{c: number(e[c]) for c in columns if isinstance(e.get(c), (int, float)) and not isinstance(e[c], bool)}}
        for e in entries
    ]
