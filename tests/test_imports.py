"""The package's imports go one way: no circle among the harness's modules, no harness module importing a
chapter's code and no chapter importing another's, except where the allow-lists below say why. The graph
is read from the source with ast, so imports inside functions count as much as those at the top."""

import ast
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
HARNESS = "kernels.harness"

# Harness modules that import a chapter's code, each with why it stays.
HARNESS_USES_CHAPTER = {
    # ceilings.measure() times the machine chapter's copy and FMA kernels (and compiles its smem_read.cu,
    # a path, not an import): the machine chapter is where the ceilings are shown, and the notebooks
    # import `ceilings` from the harness, which every chapter's roofline reads.
    ("kernels.harness.ceilings", "kernels.machine.copy"): "the machine chapter's copy kernel is the copy ceiling",
    ("kernels.harness.ceilings", "kernels.machine.fma"): "the machine chapter's FMA kernel is the FMA ceiling",
}

# Chapter modules that import another chapter's code, each with why it stays.
CHAPTER_USES_CHAPTER = {
    # model.measure_latencies() measures this GPU's L1 and L2 hit latencies with the probes chapter's
    # pointer chase, in the same run as the rates the model uses with them. The stored probes rows
    # (harness/quantities.py) may come from another GPU or an older run, and the chase is shown and
    # explained in the probes chapter, so it stays there.
    ("kernels.conv.model", "kernels.probes.memory"): "this GPU's hit latencies, measured now by the probes' chase",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(KERNELS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in KERNELS.rglob("*.py")}


def _imports(name: str, path: Path) -> dict[str, int]:
    """The package's modules that ``name`` imports anywhere in its file, each with its first line."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: level 1 is this package, 2 its parent, ...
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, the module mod.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target in MODULES and target != name:
                found.setdefault(target, node.lineno)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, dict]) -> list[list[str]]:
    """One circle through each back edge of a depth-first walk (none where the graph has no circle)."""
    found, done, stack = [], set(), []

    def visit(node):
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in stack:
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt)
        stack.pop()
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node)
    return found


def _chapter(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 and parts[1] != "harness" else None


def _describe(cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {GRAPH[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def test_the_graph_sees_top_level_function_level_and_relative_imports():
    assert "kernels.harness.device" in GRAPH["kernels.harness.check"]  # from . import device, at the top
    assert "kernels.harness.cuda_cpp" in GRAPH["kernels.harness.timing"]  # inside a function
    assert "kernels.harness.perfmodel" in GRAPH["kernels.conv.model"]  # from ..harness import perfmodel


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}, [["a", "b", "c", "a"]]),
    ],
)
def test_cycles_finds_a_circle_and_only_a_circle(graph, expected):
    assert _cycles(graph) == expected


def test_the_harness_has_no_import_circle():
    harness = {m: {t: line for t, line in GRAPH[m].items() if t.startswith(HARNESS)} for m in GRAPH}
    harness = {m: ts for m, ts in harness.items() if m.startswith(HARNESS)}
    cycles = _cycles(harness)
    assert not cycles, "import circles in the harness:\n" + "\n".join(map(_describe, cycles))


@pytest.mark.parametrize(
    "importer, allowed",
    [(HARNESS, HARNESS_USES_CHAPTER), ("chapter", CHAPTER_USES_CHAPTER)],
    ids=["harness-imports-chapter", "chapter-imports-other-chapter"],
)
def test_imports_of_chapter_code_are_only_the_allowed_ones(importer, allowed):
    found = {
        (m, t)
        for m, targets in GRAPH.items()
        for t in targets
        if _chapter(t) and (m.startswith(HARNESS) if importer == HARNESS else _chapter(m) not in (None, _chapter(t)))
    }
    assert found - set(allowed) == set(), "import chapter code (move it to the harness, or allow it with why)"
    assert set(allowed) - found == set(), "allowed but no longer imported: drop from the allow-list"
