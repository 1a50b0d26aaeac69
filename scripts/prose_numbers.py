"""After a GPU rerun: the numbers the prose quotes that the run has moved.

    python scripts/prose_numbers.py notebooks/04b_probes_memory.ipynb [--against REV] [--unmatched]

Lists every number of a markdown cell that the notebook's outputs at REV (default HEAD: the
committed notebook) contained and its outputs now do not: the prose quoted a measurement that the
rerun changed. ``--unmatched`` lists instead every decimal number of the markdown that no output
of the notebook contains: noisier (predictions, published figures, arithmetic), but it also finds
a number copied from a run older than the committed one. Numbers are compared as printed (and
rounded as prose rounds them), not converted to other units, so this helps the re-read of every
quoted number after a rerun; it does not replace it. Exit status 1 when anything is listed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _text(output: dict) -> str:
    data = output.get("data", {})
    parts = [output.get("text", "")] + [data.get(kind, "") for kind in ("text/plain", "text/markdown")]
    return "".join("".join(p) for p in parts)


def output_numbers(nb: dict) -> set[str]:
    """Every number the notebook's outputs print, without thousands separators, and each rounded
    as prose rounds it (0 to 3 decimals, 2 or 3 significant digits)."""
    found = set()
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            for token in NUMBER.findall(_text(output)):
                value = float(token.replace(",", ""))
                found |= {token.replace(",", ""), f"{value:.2g}", f"{value:.3g}"}
                found |= {f"{value:.{decimals}f}" for decimals in range(4)}
    return found


def prose_numbers(nb: dict):
    """(cell index, number, a line of context) for every number of two digits or more in markdown."""
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for match in NUMBER.finditer(text):
            number = match.group().replace(",", "")
            if sum(ch.isdigit() for ch in number) >= 2:
                context = text[max(0, match.start() - 60) : match.end() + 30].replace("\n", " ")
                yield index, number, context


def moved(old: dict, new: dict) -> list[tuple[int, str, str]]:
    """Numbers of ``new``'s prose that ``old``'s outputs printed and ``new``'s outputs do not."""
    before, now = output_numbers(old), output_numbers(new)
    return [row for row in prose_numbers(new) if row[1] in before and row[1] not in now]


def unmatched(nb: dict) -> list[tuple[int, str, str]]:
    """Decimal numbers of the prose that no output of the notebook prints."""
    now = output_numbers(nb)
    return [row for row in prose_numbers(nb) if "." in row[1] and row[1] not in now]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--against", default="HEAD", help="the git revision whose outputs the prose quoted")
    parser.add_argument("--unmatched", action="store_true", help="list prose decimals that no output prints")
    args = parser.parse_args(argv)
    new = json.loads(args.notebook.read_text())
    if args.unmatched:
        rows = unmatched(new)
    else:
        path = args.notebook.resolve()  # REV:./name is the file at REV, relative to the working directory
        shown = subprocess.run(
            ["git", "show", f"{args.against}:./{path.name}"], cwd=path.parent, capture_output=True, text=True
        )
        if shown.returncode:
            print(f"no {args.notebook} at {args.against}: {shown.stderr.strip()}", file=sys.stderr)
            return 2
        rows = moved(json.loads(shown.stdout), new)
    for index, number, context in rows:
        print(f"cell {index}: {number}: ...{context}...")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
