"""Every worklog version of the registry has its own step in notebook 02: a section, a timing cell, and a
place in the chain of steps, so a version added to the registry is not left to the notebook's loops alone."""

import ast
import json
import re
from pathlib import Path

from kernels.ssim import common

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_ssim_worklog.ipynb"


def sources(kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == kind]


def test_every_worklog_version_has_a_section_and_a_timing_cell():
    markdown, code = "\n".join(sources("markdown")), "\n".join(sources("code"))
    for v in common.WORKLOG:
        assert re.search(rf"^## {re.escape(v)}(?::|$)", markdown, re.M), f"no section '## {v}' in {NOTEBOOK.name}"
        assert f'measured["{v}"] = bench.timed("{v}", BENCH' in code, f"no timing cell for {v} in {NOTEBOOK.name}"


def test_the_steps_chain_the_worklog_versions_in_registry_order():
    """STEPS pairs each version with the one before it (V3-1-cpp splits V3-1 -> V3 into language and loads)."""
    (steps,) = [
        ast.literal_eval(node.value)
        for cell in sources("code")
        for node in ast.walk(ast.parse(cell))
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["STEPS"]
    ]
    assert steps == list(zip(common.WORKLOG[1:], common.WORKLOG[:-1], strict=True))
