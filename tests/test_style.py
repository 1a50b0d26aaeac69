"""The Python tree is ruff-clean: the lint rules and the format of pyproject.toml's [tool.ruff]
(`ruff check --fix . && ruff format .` fixes most of it; CONTRIBUTING.md, Style)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff(command):
    if importlib.util.find_spec("ruff") is None:
        if os.environ.get("CI"):
            pytest.fail("ruff is not installed, and CI must check the style: pip install -r requirements.txt")
        pytest.skip("ruff is not installed (pip install -r requirements.txt)")
    # --no-cache: the tests leave no cache folder behind (pytest runs with -p no:cacheprovider too)
    run = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, f"ruff {command[0]} found:\n{run.stdout}{run.stderr}"
