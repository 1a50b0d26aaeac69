"""Every third-party package the code imports is pinned: in requirements.txt, or in requirements-gpu.txt
for the optional GPU extras. Imports are read (ast) from kernels/, scripts/, tests/, book/_ext/ and the
notebooks' code cells."""

import ast
import json
import sys
from pathlib import Path

from kernels.harness import colab

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("kernels", "scripts", "tests", "book/_ext")
# import name -> distribution, where the two differ beyond '_' and '-'
DISTRIBUTION = {
    "skimage": "scikit-image",
    "cupy": "cupy-cuda12x",
    "cupyx": "cupy-cuda12x",  # CuPy's SciPy-like extras ship in the same wheel
    "yaml": "pyyaml",
    "IPython": "ipython",
    "cuda": "cuda-bindings",
    "nvidia": "nvidia-cuda-runtime-cu12",  # the wheels' shared namespace
    "cudnn": "nvidia-cudnn-frontend",
}
# this repository's own modules: the package, and the scripts and test helpers imported from their folders
OWN = {"kernels"} | {p.stem for folder in SOURCES for p in (ROOT / folder).glob("*.py")}
# built from source at a commit scripts/build_ssim_peers.py pins, not installed from an index
PINNED_BY_COMMIT = {"fused_ssim"}


def top_level_imports(source: str) -> set:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def imports() -> dict:
    """{top-level import name: files importing it}, over the Python files and the notebooks' code cells."""
    found = {}
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            for name in top_level_imports(path.read_text()):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for name in top_level_imports("".join(cell["source"])):
                    found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def pinned() -> set:
    """The distributions pinned with '==' in requirements.txt and requirements-gpu.txt."""
    specs = {**colab.pins(ROOT / "requirements.txt"), **colab.pins(ROOT / "requirements-gpu.txt")}
    return {name for name, spec in specs.items() if "==" in spec}


def distribution(module: str) -> str:
    return DISTRIBUTION.get(module, module).lower().replace("_", "-")


def test_every_third_party_import_is_pinned():
    found = imports()
    local = OWN | PINNED_BY_COMMIT
    third_party = {m: files for m, files in found.items() if m not in sys.stdlib_module_names and m not in local}
    assert {"numpy", "numba", "scipy"} <= set(third_party), "the import scan found too little to prove anything"
    unpinned = {
        f"{m} ({distribution(m)}, imported by {files[0]})"
        for m, files in third_party.items()
        if distribution(m) not in pinned()
    }
    assert not unpinned, "imported but not pinned in requirements*.txt: " + ", ".join(sorted(unpinned))


def test_import_scan_sees_notebook_cells_and_nested_imports():
    source = "import os\nfrom a.b import c\ndef f():\n    import d.e as g\nfrom . import h\n"
    assert top_level_imports(source) == {"os", "a", "d"}
    assert any(f.endswith(".ipynb") for files in imports().values() for f in files), "notebook cells not scanned"
