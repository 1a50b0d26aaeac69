"""The chapters' prose follows the run: no measured number typed into Markdown, no commit hash, every glue
the Markdown quotes stored in the notebook, and no machine path or stray warning among the outputs."""

import json
import re
from pathlib import Path

import pytest

from kernels.harness import glue

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

UNIT = (
    r"(?:ms|µs|us|ns|TFLOP/s|GFLOP/s|TFLOPS|GFLOPS|TB/s|GB/s|MB/s|GiB/s|cycles?|MHz|GHz|%|x|×"
    r"|KB|MB|GB|KiB|MiB|registers?)"
)
# A number and its unit (a shape such as 32 x 8 counts too: write it as math, $32 \times 8$).
NUMBER = re.compile(r"(?<![\w.`{+])(\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)\s?" + UNIT + r"(?![\w])")
# What the prose may quote without a glue role: code spans, math, links, and roles such as {glue:text}.
NOT_PROSE = re.compile(r"\{[\w:-]+\}`[^`]*`|`[^`]*`|\$\$.*?\$\$|\$[^$\n]*\$|https?://\S+|\]\([^)]*\)", re.S)
FENCE = re.compile(r"(`{3,}|:{3,})\s*(\S.*)?")
# Directives whose body is prose a reader reads (exercises and solutions too); other fenced blocks are code.
PROSE_DIRECTIVES = {"exercise", "solution", "admonition", "note", "tip", "important", "warning", "dropdown"}
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w/.-])")
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")

# Facts that are not measurements of this run, each named as what it is where the prose uses it.
ALLOWED: dict[str, set[str]] = {
    "references": {"80GB"},  # the source's GPU, an A100-80GB
    "rerun": {"90%", "64 KiB"},  # the channel probe's memory rule and its largest stride: facts of the code
}


def markdown(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def prose_lines(text: str, kept_directives=PROSE_DIRECTIVES) -> str:
    """``text`` without its code blocks and directive options, keeping the bodies of ``kept_directives``."""
    kept, stack = [], []  # stack: (fence, keep) of the open blocks
    for line in text.splitlines():
        fence = FENCE.fullmatch(line.strip())
        if fence:
            mark, info = fence.groups()
            if not info and stack and stack[-1][0] == mark:
                stack.pop()
            else:
                name = info.strip()[1:].split("}")[0] if info and info.strip().startswith("{") else ""
                stack.append((mark, name in kept_directives))
            continue
        if all(keep for _, keep in stack) and not re.match(r"\s*:[\w-]+:", line):
            kept.append(line)
    return "\n".join(kept)


# A chapter's core path is read in about an hour; deep-dive pages (notebooks/NN_<chapter>_deep_<topic>.ipynb,
# linked from the chapter) hold the derivations, profiler tables and side experiments.
CORE_WORDS = 3500
DEEP = "_deep_"
CHAPTERS = [p for p in NOTEBOOKS if DEEP not in p.stem]


def core_words(text: str) -> int:
    """Words of prose a reader reads on the core path: Markdown outside code, directive options,
    exercises and solutions (activities with their own time in the syllabus); a glue role is one word."""
    prose = prose_lines(text, PROSE_DIRECTIVES - {"exercise", "solution"})
    return len(re.findall(r"[A-Za-z0-9][\w'’.-]*", GLUE_ROLE.sub("N", prose)))


def typed_numbers(text: str, allowed=frozenset()) -> list[str]:
    """The unit-bearing numbers of Markdown ``text`` outside code, math, links and roles."""
    prose = NOT_PROSE.sub(" ", prose_lines(text))
    found = [re.sub(r"\s+", " ", m.group(0)) for m in NUMBER.finditer(prose)]
    return [f for f in found if f not in allowed]


def test_the_checker_finds_what_a_reader_would_call_typed():
    text = (
        "V4 took 0.43 ms, 1.8x V3 and 12% of the floor at 3,003 GB/s; a 32 x 8 block on sm_90; "
        "{glue:text}`v4_ms:.3f` ms; `0.5 ms` in code; $2 \\times 4$ KB.\n"
        "```{solution} ex\n:class: dropdown\nAbout 0.4 ms.\n```python\nt = 0.2  # ms\n```\n```\n"
        "```python\nx = 5  # 5 ms\n```\n"
    )
    assert typed_numbers(text) == ["0.43 ms", "1.8x", "12%", "3,003 GB/s", "32 x", "0.4 ms"]
    assert COMMIT.findall("at d7ab087 and 1c2327e, not in 2160x3840 or deadbeef") == ["d7ab087", "1c2327e"]


def test_core_words_count_prose_not_code_exercises_or_options():
    text = (
        "One {glue:text}`v4_ms:.3f` ms, two.\n```python\nx = 1\n```\n"
        "```{exercise}\n:label: a-ex-b\nFour more words.\n```\n```{note}\n:class: tip\nThree words here.\n```\n"
    )
    assert core_words(text) == 7


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_core_path_is_short(path):
    words = core_words(markdown(path))
    assert words <= CORE_WORDS, f"{path.name}: {words} words on the core path; move deep material to a deep-dive page"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if DEEP in p.stem], ids=lambda p: p.stem)
def test_deep_dive_is_linked_from_its_chapter(path):
    chapter = path.stem.split(DEEP)[0]
    core = [p for p in CHAPTERS if p.stem == chapter]
    assert core, f"{path.name}: no chapter notebook {chapter}.ipynb"
    assert path.stem in markdown(core[0]), f"{core[0].name} does not link its deep dive {path.stem}"


# The kernels' sources reach the pages (literalinclude): a time or rate in them would be one GPU's run.
SOURCE_MEASUREMENT = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|µs|us|ns|TFLOP/s|GFLOP/s|TFLOPS|TB/s|GB/s)(?!\w)|Measured \("
)
SOURCES = sorted(
    p for p in [*(ROOT / "kernels").rglob("*"), *(ROOT / "scripts").glob("*.py")] if p.suffix in {".py", ".cu", ".cuh"}
)


def code_lines(path: Path) -> list[str]:
    """A source file's lines, or the lines of a notebook's code cells."""
    if path.suffix != ".ipynb":
        return path.read_text().splitlines()
    cells = json.loads(path.read_text())["cells"]
    return [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()]


def test_sources_type_no_time_or_rate():
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in SOURCES + NOTEBOOKS
        for i, line in enumerate(code_lines(p), 1)
        if SOURCE_MEASUREMENT.search(line)
    ]
    assert SOURCES and not found, "a source states a measured time or rate; the notebook measures it:\n" + "\n".join(
        found
    )
    assert SOURCE_MEASUREMENT.search("// Measured (H100): about 0.19 ms") and not SOURCE_MEASUREMENT.search("1e-4f")


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.stem)
def test_prose_has_no_typed_measurement(path):
    text = markdown(path) if path.suffix == ".ipynb" else path.read_text()
    found = typed_numbers(text, ALLOWED.get(path.stem, set()))
    assert not found, f"{path.name} types numbers the run measures; glue them: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.stem)
def test_prose_names_no_commit(path):
    text = markdown(path) if path.suffix == ".ipynb" else path.read_text()
    assert not COMMIT.findall(text), f"{path.name} names a commit: write for the reader"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_quoted_glue_is_stored(path):
    stored = glue.stored(json.loads(path.read_text()))
    quoted = {role.rsplit(":", 1)[0] if ":" in role else role for role in GLUE_ROLE.findall(markdown(path))}
    assert quoted <= stored.keys(), f"{path.name} quotes glue names no cell stored: {sorted(quoted - stored.keys())}"
    assert quoted, f"{path.name} quotes no value from its run"


MACHINE_NOISE = re.compile(r"/opt/torch/|/work/main/|/root/|site-packages/|UserWarning|DeprecationWarning")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_show_no_machine_path_or_warning(path):
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
            assert not MACHINE_NOISE.search(text), f"{path.name} cell {index} shows {MACHINE_NOISE.search(text)[0]!r}"


def test_glue_stores_what_myst_nb_reads(monkeypatch):
    import numpy as np
    from IPython import display as ipy

    shown = []
    monkeypatch.setattr(ipy, "display", lambda data, raw, metadata: shown.append((data, metadata)))
    glue.glue("v4_ms", np.float64(0.4305))
    glue.glue("verdict", glue.word(0.43 < 0.2, "met", "missed"))
    cells = [{"outputs": [{"output_type": "display_data", "data": data, "metadata": meta}]} for data, meta in shown]
    assert glue.stored({"cells": cells}) == {"v4_ms": "0.4305", "verdict": "'missed'"}
    for bad, error in ((float("nan"), ValueError), (True, TypeError), ([1], TypeError)):
        with pytest.raises(error):
            glue.glue("x", bad)
    with pytest.raises(ValueError, match="glue name"):
        glue.glue("two words", 1.0)
