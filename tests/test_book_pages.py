"""The book's own pages and the README agree with the code: what they say of the implicit-GEMM steps
follows its registry, the README's commands are the Makefile's, and a reader without a GPU is shown the
shortest way in first (`make lab`), which the landing page's "Next" continues into chapter 00."""

import re
from pathlib import Path

import pytest
import yaml

from kernels.igemm import common as ig

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "book").glob("*.md")), ROOT / "README.md"]
STEPS = re.compile(r"\b[Ss]teps (\d+) to (\d+)([^.;,|]*)")


def prose(path: Path) -> str:
    """The page's text without its tables (book/rerun.md's table is tested in test_cap.py), lines joined."""
    return " ".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("|"))


def step_range(steps) -> tuple[int, int]:
    numbers = sorted(steps)
    assert numbers == list(range(numbers[0], numbers[-1] + 1)), f"not a run of steps: {numbers}"
    return numbers[0], numbers[-1]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_what_a_page_says_of_the_steps_follows_the_registry(path):
    """'Steps a to b' followed by Hopper or wgmma names exactly the wgmma steps; followed by sm_80, the
    steps that need sm_80 and not Hopper; any other names steps that exist."""
    hopper = step_range(s.number for s in ig.REGISTRY if s.wgmma)
    sm80 = step_range(s.number for s in ig.REGISTRY if s.needs and s.needs[1] == 80)
    last = max(s.number for s in ig.REGISTRY)
    found = list(STEPS.finditer(prose(path)))
    assert found or path.stem != "syllabus", "the syllabus says which steps need which GPU"
    for m in found:
        said, clause = (int(m.group(1)), int(m.group(2))), m.group(3)
        if "Hopper" in clause or "wgmma" in clause:
            assert said == hopper, f"{path.name}: {m.group(0)!r}; the wgmma steps are {hopper}"
        elif "sm_80" in clause:
            assert said == sm80, f"{path.name}: {m.group(0)!r}; the steps that need sm_80 are {sm80}"
        else:
            assert 1 <= said[0] < said[1] <= last, f"{path.name}: {m.group(0)!r}; the steps are 1 to {last}"


def test_the_step_check_reads_a_wrong_sentence_as_wrong():
    m = STEPS.search("Steps 6 to 8 run only on Hopper; elsewhere students read them.")
    assert m.groups() == ("6", "8", " run only on Hopper")


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.M)) - {"help", "clean"}


def readme_commands() -> list[str]:
    table = (ROOT / "README.md").read_text().split("| command | what it does |", 1)[1]
    return re.findall(r"^\| `make ([\w-]+)[^`]*` \|", table, flags=re.M)


def test_the_readme_lists_every_make_command():
    assert "test" in readme_commands() and "lab" in readme_commands()
    assert set(readme_commands()) == makefile_targets(), "README.md's commands table and the Makefile's targets"


def test_the_readme_shows_make_lab_first():
    """Without a GPU the first command a reader meets is `make lab`, before `make test`'s 20 minutes."""
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert first_block.strip().splitlines()[-1] == "make lab"
    assert text.index("make lab") < text.index("make test")


def test_make_lab_runs_jupyterlab_in_the_simulator():
    recipe = (ROOT / "Makefile").read_text().split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "$(SETUP)" in recipe.splitlines()[0], "make lab creates the virtualenv first"
    assert re.search(r"^\tNUMBA_ENABLE_CUDASIM=1 \$\(PYTHON\) -m jupyterlab ", recipe, flags=re.M)
    pins = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^jupyterlab==\d", pins, flags=re.M), "requirements.txt pins JupyterLab"


def test_next_from_the_landing_page_is_chapter_00():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    first = toc["parts"][0]["chapters"][0]["file"]
    assert toc["root"] == "book/intro" and first == "notebooks/00_first_kernels"
