"""The SSIM versions are listed once, in kernels/ssim/registry.py: every file there, every list the
notebooks and scripts use derived from it, an unknown name refused with the choices, and no second
hand-written list of version names in the chapter's code or the scripts."""

import ast
import re
from pathlib import Path

import pytest

from gpus import H100, T4
from kernels.harness import cuda_cpp
from kernels.ssim import common, cuda_versions, registry
from kernels.ssim.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "kernels" / "ssim"


def test_every_version_file_is_in_the_registry_and_every_record_has_its_file():
    files = {p.name for p in FOLDER.glob("v*") if p.suffix in (".py", ".cu")}
    assert sorted(v.file for v in REGISTRY) == sorted(files)
    assert len({v.name for v in REGISTRY}) == len(REGISTRY)


def test_chapters_are_contiguous_worklog_first():
    """Notebook 02b steps from the worklog's last version into its first: the order must not interleave."""
    chapters = [v.chapter for v in REGISTRY]
    assert chapters == sorted(chapters, key=registry.CHAPTERS.index)


def test_derived_lists_follow_the_registry():
    assert common.VERSIONS == {v.name: v.file.removesuffix(".py") for v in REGISTRY}
    assert list(common.VERSIONS) == [v.name for v in REGISTRY]
    assert common.WORKLOG + common.BEYOND == list(common.VERSIONS)
    assert common.WORKLOG == [v.name for v in REGISTRY if v.chapter == "worklog"]
    assert common.NUMBA_VERSIONS == [v.name for v in REGISTRY if v.file.endswith(".py")]
    assert common.CUDA_VERSIONS == [v.name for v in REGISTRY if v.file.endswith(".cu")]
    assert common.fused_mean_versions() == [v.name for v in REGISTRY if v.fused_mean]
    for v in REGISTRY:
        assert common.version_module(v.name).__name__ == v.module
        assert (cuda_versions.unsupported(v.name, T4) is not None) == v.cp_async
        assert cuda_versions.unsupported(v.name, H100) is None
        if v.language == "cuda":
            assert cuda_versions.source(v.name) == f"ssim/{v.file}"
            assert cuda_versions.kernel_name(v.name) == v.kernel


@pytest.mark.parametrize("version", [v for v in REGISTRY if v.language == "cuda"], ids=lambda v: v.name)
def test_cuda_records_match_their_source(version):
    """The entry point is declared in the .cu file, and ``<kernel>_mean`` and ``<kernel>_train_mean`` exactly
    where the record says."""
    text = cuda_cpp.source_path(f"ssim/{version.file}").read_text()
    kernels = re.findall(r'extern "C" __global__ void (?:__\w+\([^)]*\)\s+)?(\w+)\(', text)
    assert version.kernel in kernels
    assert (f"{version.kernel}_mean" in kernels) == version.fused_mean
    assert (f"{version.kernel}_train_mean" in kernels) == version.fused_mean


@pytest.mark.parametrize("version", [v for v in REGISTRY if v.language == "numba"], ids=lambda v: v.name)
def test_numba_records_name_a_launcher_with_its_tiles(version):
    module = common.version_module(version.name)
    assert callable(module.launch) and module.GPU_TILE and module.SIM_TILE.keys() == module.GPU_TILE.keys()


@pytest.mark.parametrize("name", ["V99", "v7", None, 7, ["V7"]])
def test_an_unknown_version_is_refused_with_the_choices(name):
    choices = re.escape(str([v.name for v in REGISTRY]))
    with pytest.raises(ValueError, match=rf"unknown SSIM version {re.escape(repr(name))}; choose from {choices}"):
        registry.get(name)
    with pytest.raises(ValueError, match="unknown SSIM version"):
        cuda_versions.unsupported(name, H100)


def test_resources_refuse_an_unknown_version():
    """Not the Numba path's "needs a GPU compile": the name itself is wrong."""
    from kernels.ssim import bench

    with pytest.raises(ValueError, match="unknown SSIM version 'V99'; choose from"):
        bench.resources("V99")


def test_cuda_lookups_refuse_a_numba_version():
    for lookup in (cuda_versions.source, cuda_versions.kernel_name):
        with pytest.raises(ValueError, match="V1 is a Numba version, not CUDA C\\+\\+"):
            lookup("V1")


@pytest.mark.parametrize(
    "fields, match",
    [
        (("X", "x.cu", "worklog"), "X: kernel .* is given for a .cu file and only for one"),
        (("X", "x.py", "worklog", "ssim_x"), "X: kernel .* is given for a .cu file and only for one"),
        (("X", "x.cu", "later", "ssim_x"), r"X: chapter must be one of \('worklog', 'beyond'\), got 'later'"),
        (("X", "x.cuh", "worklog", "ssim_x"), "X: file must be a .py or .cu file, got 'x.cuh'"),
        (("X", "x.py", "worklog", None, True), "X: cp_async and fused_mean are properties of a .cu file"),
        # the notebooks glue f"{name.lower()}_registers" ('-' -> '_'); ssim_profile.py reads "V13 mean" as two words
        (("V3-1 C++", "v3_1.cu", "worklog", "ssim_v3_1"), r"name must be letters, digits.*got 'V3-1 C\+\+'"),
        ((None, "x.py", "worklog"), r"name must be letters, digits, '-' or '_'.*got None"),
    ],
)
def test_a_record_that_contradicts_itself_is_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        registry.Version(*fields)


def literal_version_lists(text: str) -> list[int]:
    """Lines of ``text`` (Python) holding a literal list, tuple, set or dict with 3 or more version names."""
    names = {v.name for v in REGISTRY}
    found = []
    for node in ast.walk(ast.parse(text)):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and items:
            named = [i for i in items if isinstance(i, ast.Constant) and i.value in names]
            if len(named) >= 3:
                found.append(node.lineno)
    return found


def test_the_guard_finds_a_hand_written_list():
    text = 'A = ("V3", "V4")\nB = {"Naive": "v0_naive", "V1": 1, "V2": 2}\nC = [x for x in ("V5", "V6", "V7")]\n'
    assert literal_version_lists(text) == [2, 3]


def test_no_second_hand_written_list_of_versions():
    sources = [*FOLDER.glob("*.py"), *(ROOT / "scripts").glob("*.py")]
    found = {
        f"{p.relative_to(ROOT)}:{line}"
        for p in sources
        if p.name != "registry.py"
        for line in literal_version_lists(p.read_text())
    }
    assert not found, "derive these from kernels/ssim/registry.py instead"
