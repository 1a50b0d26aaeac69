"""The convolution stages' one table (kernels/conv/registry.py): every stage file has a record, the lists
the chapter uses are views of it, and the model reads a stage's properties, never its name."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from kernels.conv import common, cuda_stages, model, registry, stages, stored_run
from kernels.harness import cuda_cpp, device

CONV = Path(registry.__file__).parent
GPU = [s for s in registry.REGISTRY if s.gpu]


def test_every_stage_file_has_a_record_and_every_record_a_file():
    files = {f"conv/{p.name}" for p in CONV.iterdir() if re.fullmatch(r"s\d+_\w+\.(py|cu)", p.name)}
    assert sorted(s.file for s in registry.REGISTRY) == sorted(files)
    assert len(set(registry.NAMES)) == len(registry.NAMES)


def test_records_agree_with_their_sources():
    """A Numba record names its module's Stage and kernel; a CUDA C++ record a kernel its .cu file defines."""
    for s in registry.REGISTRY:
        if s.module:
            assert (s.module.STAGE.name, s.module.STAGE.layout) == (s.name, s.layout)
            assert Path(s.module.__file__) == CONV.parent / s.file
            assert f"def {s.kernel}(" in Path(s.module.__file__).read_text()
        elif s.runs:
            assert s.kernel == registry.get(s.runs).kernel
        else:
            entry = rf"__global__ void (__launch_bounds__\([^)]*\)\s*)?{s.kernel}\("
            assert re.search(entry, (CONV.parent / s.file).read_text()), s
        assert s.language in ("numba", "cuda") and s.layout in common.LAYOUTS


def test_the_chapter_lists_are_views_of_the_registry():
    assert list(stages.FILES.items()) == [(s.name, s.file) for s in registry.REGISTRY]
    assert stages.GPU_STAGES == tuple(s.name for s in GPU if not s.runs)
    cuda = [s for s in registry.REGISTRY if s.file.endswith(".cu")]
    assert list(cuda_stages.FILES.items()) == [(s.name, (s.file, s.kernel)) for s in cuda]
    assert list(cuda_stages.DEFAULTS.items()) == [(s.name, s.tile) for s in cuda]
    assert cuda_stages.MIN_CC == {s.name: s.min_cc for s in cuda if s.min_cc}
    for s in registry.REGISTRY:
        assert stages.tile_of(s.name) == s.tile
    assert [s.name for s in stages.all_gpu()] == list(stages.GPU_STAGES)
    assert [s.name for s in stages.numba_stages()] == [s.name for s in registry.REGISTRY if s.language == "numba"]
    for name, built in cuda_stages.STAGES.items():
        spec = registry.get(name)
        assert (built.name, built.layout, built.options, built.c_multiple, built.k_multiple) == (
            name,
            spec.layout,
            spec.tile,
            spec.vector,
            spec.vector,
        )


def test_an_unknown_stage_is_refused_naming_the_stages():
    for call in (
        lambda: registry.get("FOO"),
        lambda: stages.tile_of("FOO"),
        lambda: model.cuda_stage("FOO"),
        lambda: model.launch_shape("FOO", common.PROBLEMS["conv2"]),
    ):
        with pytest.raises(ValueError, match=r"unknown convolution stage 'FOO'; the stages are \['SEQ', 'NAIVE'"):
            call()
    with pytest.raises(TypeError, match="stage: expected a stage name"):
        registry.get(3)
    spec = registry.get("HALO TILE")
    assert registry.get(spec) is spec and registry.launched("AUTOTUNE") is registry.get("SPLIT-K")
    assert registry.launched("HALO AUTOTUNE") is registry.get("HALO TILE")
    assert set(stored_run.TUNERS) == set(stored_run.TUNED)  # every autotuner has its module, and no other
    for name, tuner in stored_run.TUNERS.items():
        assert tuner.NAME == registry.get(name).runs


@pytest.mark.parametrize("spec", [s for s in GPU if s.language == "numba"], ids=lambda s: s.name)
def test_the_model_compiles_the_kernel_a_numba_stage_launches(spec):
    """The record's kernel, built with the timed tile where the stage has one; y as its launch passes it."""
    func, signature = model.numba_kernel(spec.name)
    assert func.__name__ == spec.kernel
    if spec.tile:
        assert func is spec.module.make_kernel(**spec.tile).py_func
    y = f"float32[{':,' * (1 if spec.y_matrix else 3)}::1]"
    assert signature == f"(float32[:,:,:,::1], float32[:,:,:,::1], {y})"


def test_seq_has_no_gpu_kernel_to_model():
    with pytest.raises(ValueError, match="SEQ runs on the CPU"):
        model.launch_shape("SEQ", common.PROBLEMS["conv2"])


def _compared_strings(node: ast.Compare) -> list[str]:
    """The string constants a comparison tests against, also inside a tuple, list or set."""
    found = []
    for operand in (node.left, *node.comparators):
        items = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
        found += [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return found


def test_no_code_of_the_chapter_compares_stage_names():
    """Facts about a stage live in its record: code reads properties instead of testing names."""
    assert _compared_strings(ast.parse('x == "SPLIT-K" or x in ("NAIVE", "SHARED")').body[0].value.values[1]) == [
        "NAIVE",
        "SHARED",
    ]
    found = [
        f"{path.name}:{node.lineno}"
        for path in sorted(CONV.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Compare) and set(_compared_strings(node)) & set(registry.NAMES)
    ]
    assert not found, f"stage names compared in {found}"


@pytest.mark.parametrize("spec", GPU, ids=lambda s: s.name)
def test_the_model_reads_properties_not_names(spec):
    """A copy of a record under another name gets the same launch, trips, traffic and L1 terms."""
    renamed = dataclasses.replace(spec, name=f"{spec.name} (copy)")
    resources = cuda_cpp.Resources(
        "k", "sm_90", registers=128, spill_stores=0, spill_loads=0, stack_bytes=0, smem_bytes=12 * 1024
    )
    props = device.REFERENCE_PROPERTIES
    for p in (common.PROBLEMS["conv1"], common.PROBLEMS["conv2"]):
        assert model.launch_shape(renamed, p) == model.launch_shape(spec.name, p)
        assert model.epilogue_bytes(renamed, p) == model.epilogue_bytes(spec.name, p)
        assert model.l1_wavefronts(renamed, p) == model.l1_wavefronts(spec.name, p)
        assert model.l1_hit_rate(renamed, p, resources, props=props) == model.l1_hit_rate(
            spec.name, p, resources, props=props
        )
        for n_loops in range(4):
            assert model.trips(renamed, p, None, n_loops) == model.trips(spec.name, p, None, n_loops)


def test_every_stage_has_a_glue_name():
    assert set(registry.NAMES) <= set(stored_run.SLUG)
    assert len(set(stored_run.SLUG.values())) == len(stored_run.SLUG)


def test_shared_cpp_is_shared_in_cuda_cpp():
    """The stage between SHARED and VECTORIZE & UNROLL changes the language only: SHARED's tile, launch
    and one-word loads (any C and K), compiled by NVRTC; its loops are the ones the model counts."""
    names = list(registry.NAMES)
    assert names.index("SHARED C++") == names.index("SHARED") + 1 == names.index("VECTORIZE & UNROLL") - 1
    numba, cpp = registry.get("SHARED"), registry.get("SHARED C++")
    assert cpp.language == "cuda" and cpp.vector == 1 and not cpp.multiples
    assert cpp.tile == {k.upper(): v for k, v in numba.tile.items()}
    t = numba.tile
    for p in (common.PROBLEMS["conv1"], common.PROBLEMS["conv2"], common.Problem("odd", n=1, c=5, k=6, h=13, w=5)):
        # s4_shared's launch: blocks of (bn, by) threads over (pixels / (by x tm), K / bn)
        grid = (-(-p.pixels // (t["by"] * t["tm"])), -(-p.k // t["bn"]), 1)
        assert cuda_stages.geometry(cpp.name, cpp.tile, p) == (grid, (t["bn"], t["by"], 1))
        assert model.launch_shape(cpp.name, p) == model.launch_shape(numba.name, p)
    assert cuda_stages.STAGES[cpp.name].c_multiple == cuda_stages.STAGES[cpp.name].k_multiple == 1
    assert model.sass_counts(cpp.name, common.PROBLEMS["conv2"]) is not None, "the SASS keeps the tap and chunk loops"
