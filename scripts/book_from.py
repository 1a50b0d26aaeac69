"""The book as another GPU's rerun writes it: `make book RESULTS_FROM=<gpu-slug>`.

    python scripts/book_from.py nvidia-h200

Copies the book's sources to build/book-<gpu>/, puts the notebooks that `make rerun` executed on that
GPU (build/rerun/<gpu>/) in place of the committed ones, and prints, per chapter, how many of the numbers
its prose quotes (its glue values) differ from the committed run's: the pages built from that folder
quote the rerun's numbers, since a glue role reads the notebook it sits in.
"""

from __future__ import annotations

import argparse
import json
import shutil
from ast import literal_eval
from pathlib import Path

from kernels.harness import glue

ROOT = Path(__file__).resolve().parents[1]
SKIP = (".git", ".venv", "build", "_build", ".device-wheels", ".gpu", "__pycache__")


def stage(gpu: str, root: Path = ROOT) -> tuple[Path, list[str]]:
    """build/book-<gpu>/ with the rerun's notebooks in place; (that folder, the notebooks replaced)."""
    reruns = sorted((root / "build" / "rerun" / gpu).glob("*.ipynb"))
    if not reruns:
        raise SystemExit(f"no rerun of {gpu} in build/rerun/{gpu}/: run `make rerun CHAPTER=...` on that GPU first")
    out = root / "build" / f"book-{gpu}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(root, out, ignore=shutil.ignore_patterns(*SKIP))
    if (root / "build" / "mathjax").exists():  # the MathJax the book serves (make book unpacks it)
        (out / "build").mkdir()
        (out / "build" / "mathjax").symlink_to(root / "build" / "mathjax")
    for nb in reruns:
        shutil.copyfile(nb, out / "notebooks" / nb.name)
    return out, [nb.name for nb in reruns]


def numbers(notebook: Path) -> dict[str, float | str]:
    """A notebook's glue values, numbers as numbers."""
    values = {}
    for name, text in glue.stored(json.loads(notebook.read_text())).items():
        try:
            values[name] = literal_eval(text)
        except (ValueError, SyntaxError):
            values[name] = text
    return values


def compare(committed: Path, rerun: Path) -> dict[str, int]:
    """How many glued numbers and words the rerun changed against the committed notebook."""
    old, new = numbers(committed), numbers(rerun)
    shared = old.keys() & new.keys()
    nums = [k for k in shared if isinstance(new[k], (int, float))]
    words = [k for k in shared if isinstance(new[k], str)]
    return {
        "numbers": len(nums),
        "numbers changed": sum(new[k] != old[k] for k in nums),
        "words": len(words),
        "words changed": sum(new[k] != old[k] for k in words),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gpu", help="the GPU's folder name under build/rerun/, e.g. nvidia-h200")
    gpu = parser.parse_args().gpu
    out, replaced = stage(gpu)
    print(f"{out.relative_to(ROOT)}: the book's sources with {len(replaced)} notebooks of the {gpu} rerun")
    print(f"{'chapter':<26} {'numbers':>8} {'changed':>8} {'words':>6} {'changed':>8}")
    for name in replaced:
        c = compare(ROOT / "notebooks" / name, out / "notebooks" / name)
        print(f"{name:<26} {c['numbers']:>8} {c['numbers changed']:>8} {c['words']:>6} {c['words changed']:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
