"""Implicit GEMM: the reference, the naive step in the simulator, argument validation, the bank
arithmetic and the CUDA C++ steps' compiles on a CPU; every step against the reference on a GPU."""

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpus import A100, H100, RTX_4090, T4
from kernels.harness import check, cuda_cpp, device, sass
from kernels.igemm import banks, problems, registry
from kernels.igemm import common as ig

CUDA_STEPS = [s.number for s in ig.REGISTRY if s.cuda_cpp]
SIM_PROBLEMS = [
    ig.CI_PROBLEM,
    ig.FIRST_LAYER,  # C = 3
    ig.Problem(n=1, h=7, w=5, c=8, k=6, stride=2),  # stride 2, output 4x3
    ig.Problem(n=1, h=4, w=6, c=5, k=3, r=1, s=1, pad=0),
    ig.Problem(n=1, h=5, w=5, c=2, k=4, r=5, s=3, pad=2),  # non-square filter
]


def direct_convolution(x, w, pad, stride):
    """The definition, one output at a time in float64: checks the vectorized reference."""
    n, h, wd, c = x.shape
    k, r, s, _ = w.shape
    p, q = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    y = np.zeros((n, p, q, k))
    for b, i, j in np.ndindex(n, p, q):
        for dr, ds in np.ndindex(r, s):
            hh, ww = i * stride - pad + dr, j * stride - pad + ds
            if 0 <= hh < h and 0 <= ww < wd:
                y[b, i, j] += w[:, dr, ds, :].astype(np.float64) @ x[b, hh, ww].astype(np.float64)
    return y


@pytest.mark.parametrize("problem", SIM_PROBLEMS, ids=lambda p: p.label())
def test_reference_matches_the_definition(problem, rng):
    x, w = ig.random_inputs(problem, rng)
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride, dtype=np.float64)
    assert ref.shape == problem.y_shape
    check.assert_close(ref, direct_convolution(x, w, problem.pad, problem.stride), atol=1e-12)


def test_reference_epilogue(rng):
    p = ig.CI_PROBLEM
    x, w = ig.random_inputs(p, rng)
    bias = rng.uniform(-3, 3, p.k).astype(np.float32)
    plain = ig.reference(x, w, dtype=np.float64)
    fused = ig.reference(x, w, bias=bias, alpha=0.5, relu=True, dtype=np.float64)
    check.assert_close(fused, np.maximum(0.5 * plain + bias, 0), atol=1e-12)


@pytest.mark.parametrize("problem", SIM_PROBLEMS, ids=lambda p: p.label())
def test_naive_step(problem, rng, xp):
    x, w = ig.random_inputs(problem, rng, xp)
    out = check.poison(xp.empty(problem.y_shape, dtype=np.float16))
    ig.launcher(1, x, w, out, pad=problem.pad, stride=problem.stride)()
    ref = ig.reference(check.to_host(x), check.to_host(w), pad=problem.pad, stride=problem.stride, dtype=np.float64)
    result = ig.compare(out, ref, problem)
    assert result.ok, f"{result} -- {result.detail}"


def test_compare_catches_one_wrong_row(rng):
    p = ig.CI_PROBLEM
    x, w = ig.random_inputs(p, rng)
    ref = ig.reference(x, w, dtype=np.float64)
    out = ref.astype(np.float16)
    assert ig.compare(out, ref, p).ok
    out[1, 2, 3, :] = 0  # one output pixel lost: the norm barely moves, max|err| does
    assert not ig.compare(out, ref, p).ok


def test_problem_arithmetic():
    m, n, k = ig.PROBLEM.gemm
    assert (m, n, k) == (50176, 512, 2304)
    assert ig.PROBLEM.flops == pytest.approx(118.4e9, rel=1e-3)
    assert ig.PROBLEM.grid() == (392, 4)
    assert ig.PROBLEM.ws_tiles() == 392 * 2 and ig.ODD_PROBLEMS[0].ws_tiles() == 2
    assert ig.CI_PROBLEM.grid() == (1, 1)
    assert ig.gemm_problem(32).gemm == (4096, 4096, 32)
    with pytest.raises(ValueError, match="multiple of 64"):
        ig.gemm_problem(32, m=100)


def test_shared_memory_budget():
    assert ig.TILE_BYTES == 8320 and ig.STAGE_BYTES == 16640  # the source's 16.25 KB
    assert ig.smem_bytes(4, 2) == 33280  # the source's 32.5 KB
    assert ig.smem_bytes(5, 2) == ig.EPILOGUE_BYTES > ig.smem_bytes(4, 2)
    assert ig.smem_bytes(5, 4) == 4 * ig.STAGE_BYTES
    assert ig.smem_bytes(6, 3) == 3 * 32768 + 1024 >= ig.EPILOGUE_BYTES + 1024  # output tile fits too
    assert ig.smem_bytes(6, 5) <= 227 * 1024  # Hopper's per-block limit
    assert ig.smem_bytes(7, 4) == 4 * 49152 + 1024 <= 227 * 1024  # 4 stages of 128x64 + 256x64 halves
    # Steps 9-10: 4 stages fit beside half the output tile (32 KB), not beside all of it (64 KB).
    assert ig.smem_bytes(9, 4) == 4 * 49152 + 32768 + 1024 <= 227 * 1024 < 4 * 49152 + 65536 + 1024
    assert ig.smem_bytes(10, 4) == ig.smem_bytes(9, 4)


def test_swizzle_is_conflict_free_and_a_permutation():
    # The copy-in of step 6: lane t writes chunk t % 8 of row t / 8 (16 bytes each): 4 wavefronts.
    assert banks.wavefronts([ig.swizzle128(t // 8, t % 8) for t in range(32)]) == 4
    # The tensor cores read one 16-byte chunk of 8 consecutive rows: 8 different bank groups.
    for chunk in range(8):
        assert len({(ig.swizzle128(r, chunk) % 128) // 16 for r in range(8)}) == 8
        assert banks.wavefronts([ig.swizzle128(r, chunk) for r in range(8)]) == 1
    # Unswizzled, the same read hits one bank group 8 times.
    assert banks.wavefronts([r * 128 + 16 * 3 for r in range(8)]) == 8
    offsets = {ig.swizzle128(r, c) for r in range(16) for c in range(8)}
    assert offsets == set(range(0, 16 * 128, 16))


def test_head_tail_fit_recovers_a_line():
    ks = np.array([32, 64, 128, 256, 512])
    head, per_k = ig.fit_head_tail(ks, 0.02 + 0.001 * ks)
    assert head == pytest.approx(0.02) and per_k == pytest.approx(0.001)
    assert ig.k_half(head, per_k) == pytest.approx(20)


# ---- the registry: one record per step -----------------------------------------------------------

IGEMM = Path(ig.__file__).parent
ROOT = IGEMM.parents[1]


def test_every_step_source_is_in_the_registry_and_every_record_has_its_source():
    on_disk = sorted(p.name for p in IGEMM.iterdir() if re.fullmatch(r"v\d+_\w+\.(py|cu)", p.name))
    assert sorted(Path(s.source).name for s in ig.REGISTRY) == on_disk
    for s in ig.REGISTRY:
        text = cuda_cpp.source_path(s.source).read_text()
        assert Path(s.source).name.startswith(f"v{s.number}_"), s
        assert re.search(rf"\b{s.kernel}\(", text), f"{s.source} defines no {s.kernel}"
        # The record's title is the idea the source's first line announces.
        assert text.lstrip('"/ ').startswith(f"Step {s.number}: {s.title}"), s


def test_the_registry_is_numbered_in_order_and_consistent():
    assert [s.number for s in ig.REGISTRY] == list(range(1, len(ig.REGISTRY) + 1))
    for s in ig.REGISTRY:
        assert ig.step_info(s.number) is s and ig.step_info(np.int64(s.number)) is s
        assert s.cuda_cpp == s.source.endswith(".cu") and s.threads % 128 == 0
        # A pipelined step has a depth range, a default inside it and a size per stage; others none.
        assert (s.stages is None) == (s.default_stages is None) == (s.stage_bytes is None), s
        if s.pipelined:
            assert s.stages[0] <= s.default_stages <= s.stages[1], s
        assert s.cuda_cpp or not (s.pipelined or s.needs or s.wgmma or s.epilogue), s
        assert not (s.needs and s.wgmma), s  # wgmma wants compute capability 9.0 exactly, not "or newer"
        assert (not s.specialized or s.wgmma) and (not s.tma_filters or s.specialized), s
        assert not s.tma_store or s.tma_filters, s  # the output map rides on the filters' TMA set-up
        assert not s.tma_im2col or s.tma_store, s  # and the input map on both
        # ping-pong: each consumer warpgroup owns a 128x128 tile of the persistent, specialized grid
        assert not s.ping_pong or (s.specialized and s.tma_store and s.block_n == ig.BLOCK_N), s
        assert s.block_n == (ig.WS_BLOCK_N if s.specialized and not s.ping_pong else ig.BLOCK_N), s
        # a narrow build: a ping-pong step's own tiles at NARROW_N wide, unsplit
        assert not s.narrow_stages or (s.ping_pong and not s.split_k and s.narrow_stages > s.stages[1]), s


def test_the_naive_step_launches_the_threads_its_record_says():
    from kernels.igemm import v1_naive

    assert ig.step_info(1).threads == v1_naive.THREADS


def test_the_views_are_the_registry():
    assert ig.STEPS == {s.number: (s.source, s.kernel) for s in ig.REGISTRY}
    assert list(ig.STEPS) == [s.number for s in ig.REGISTRY]
    for view, field in (
        (ig.PIPELINED, "pipelined"),
        (ig.EPILOGUE, "epilogue"),
        (ig.WGMMA, "wgmma"),
        (ig.SPECIALIZED, "specialized"),
    ):
        assert view == tuple(s.number for s in ig.REGISTRY if getattr(s, field)), field
    assert ig.STAGE_RANGE == {s.number: s.stages for s in ig.REGISTRY if s.pipelined}
    assert ig.NEEDS == {s.number: s.needs for s in ig.REGISTRY if s.needs}
    for s in ig.REGISTRY:
        assert ig.threads(s.number) == s.threads and ig.default_stages(s.number) == s.default_stages


@pytest.mark.parametrize("bad", [13, 0, -1, True, 2.0, "2", None])
def test_an_unknown_step_names_the_choices(bad):
    choices = re.escape(str(sorted(ig.STEPS)))
    with pytest.raises(ValueError, match=rf"^step must be one of {choices}, got {re.escape(repr(bad))}$"):
        ig.step_info(bad)
    with pytest.raises(ValueError, match="step must be one of"):
        ig.smem_bytes(bad, 3)


def test_only_pipelined_steps_have_dynamic_shared_memory():
    for step in sorted(set(ig.STEPS) - set(ig.PIPELINED)):
        with pytest.raises(
            ValueError, match=rf"only steps \(4, 5, 6, 7, 8, 9, 10, 11, 12\) have dynamic shared memory; step {step}"
        ):
            ig.smem_bytes(step, 3)


# A step's facts written outside the registry: a step compared with a number, tested against a literal
# list or a view, a literal tuple of step numbers, a dict keyed by them.
HAND_WRITTEN = (
    re.compile(r"\bstep\s*(==|!=|<=?|>=?)\s*\d"),
    re.compile(r"\bstep\s+(not\s+)?in\s+([(\[{]|[A-Z][A-Z_]*\b)"),
    re.compile(r"[(\[{]\s*[1-9](\s*,\s*[1-9])+\s*,?\s*[)\]}]"),
    re.compile(r"\{\s*[1-9]\s*:"),
)


EXERCISE_MODULES = ("exercises.py", "solutions.py", "answers.py")


def _hand_written(line: str) -> bool:
    return any(pattern.search(line) for pattern in HAND_WRITTEN)


def test_the_hand_written_patterns_catch_the_old_lists():
    old = [
        "PIPELINED = (4, 5, 6, 7, 8)  # steps whose shared memory is dynamic",
        "STAGE_RANGE = {4: (2, 5), 5: (2, 5), 6: (3, 5), 7: (3, 4), 8: (3, 4)}",
        'NEEDS = {2: ("WMMA", 70), 3: ("mma.sync.m16n8k16", 80)}',
        "    return 4 if step in WGMMA else 3",
        "    if x_bypass_l1 and step not in (4, 5):",
        "    return WGMMA_THREADS if step == 6 else THREADS",
        "    if step >= 2:",
    ]
    assert all(_hand_written(line) for line in old)
    assert not any(_hand_written(line) for line in ("    info = step_info(step)", "if steps and step not in steps:"))


def test_no_step_facts_outside_the_registry():
    """kernels/igemm asks the records (step_info) for a step's facts; only REGISTRY lists them. The exercise
    modules hold an exercise's own shapes and answers, which name no step."""
    found = []
    for path in sorted(p for p in IGEMM.glob("*.py") if p.name not in EXERCISE_MODULES):
        text = path.read_text()
        registry = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REGISTRY" for t in node.targets):
                registry = set(range(node.lineno, node.end_lineno + 1))
        found += [
            f"{path.name}:{i}: {line.strip()}"
            for i, line in enumerate(text.splitlines(), 1)
            if i not in registry and _hand_written(line)
        ]
    assert found == []


def test_the_notebook_uses_only_names_the_module_has():
    cells = json.loads((ROOT / "notebooks" / "05_implicit_gemm.ipynb").read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    used = set(re.findall(r"\big\.(\w+)", code))
    assert {"STEPS", "PIPELINED", "WGMMA", "default_stages"} <= used  # the pattern finds the views
    assert sorted(name for name in used if not hasattr(ig, name)) == []


def test_memcheck_and_the_profile_launch_registered_steps_at_allowed_depths():
    from kernels.igemm import memcheck, profile

    assert {1} | {step for step, _ in memcheck.ODD_RUNS} == set(ig.STEPS)  # step 1 runs on the first layer
    for step, options in [*memcheck.ODD_RUNS, *((step, options) for _, step, options in profile.VARIANTS)]:
        if "stages" in options:
            low, high = ig.step_info(step).stage_range(options.get("block_n"))
            assert low <= options["stages"] <= high, (step, options)
    for label, step, _ in profile.VARIANTS:
        assert label.startswith(Path(ig.step_info(step).source).stem), label


# ---- bad input -----------------------------------------------------------------------------------


def zeros(shape, dtype):
    """Zeros where this mode's kernels take their arrays: on the GPU, or in NumPy in the simulator."""
    return device.xp().zeros(shape, dtype)


def _inputs(problem=ig.CI_PROBLEM, xp=None):
    xp = xp or device.xp()
    return (xp.zeros(problem.x_shape, np.float16), xp.zeros(problem.w_shape, np.float16))


@pytest.mark.parametrize("step", [1, 2, 5])
def test_wrong_dtype_is_refused(step):
    x, w = _inputs()
    with pytest.raises(TypeError, match="float16"):
        ig.validate(step, x.astype(np.float32), w)
    with pytest.raises(TypeError, match="float16"):
        ig.validate(step, x, w.astype(np.float32))


def test_wrong_layouts_are_named():
    x, w = _inputs()
    with pytest.raises(ValueError, match="KCRS"):
        ig.validate(2, x, device.xp().ascontiguousarray(w.transpose(0, 3, 1, 2)))
    with pytest.raises(ValueError, match="NCHW"):
        ig.validate(2, device.xp().ascontiguousarray(x.transpose(0, 3, 1, 2)), w)
    with pytest.raises(ValueError, match="4 dimensions"):
        ig.validate(2, x[0], w)
    with pytest.raises(ValueError, match="C-contiguous"):
        ig.validate(1, x[:, :, ::2], w)


def test_first_layer_is_refused_by_the_tensor_core_steps_only():
    x, w = _inputs(ig.FIRST_LAYER)
    assert ig.validate(1, x, w) == ig.FIRST_LAYER
    for step in CUDA_STEPS:
        with pytest.raises(ValueError, match="C = 3 is not a multiple of 8.* or use step 1$"):
            ig.validate(step, x, w)
    p = ig.Problem(n=1, h=5, w=5, c=8, k=12)
    x, w = _inputs(p)
    for step in CUDA_STEPS:
        with pytest.raises(ValueError, match="K = 12 output channels is not a multiple of 8.* or use step 1$"):
            ig.validate(step, x, w)
    assert ig.validate(1, x, w) == p


# Layers some steps refuse, each with the constraint its refusal names and the latest step that takes it.
REFUSED = [
    (ig.Problem(n=1, h=5, w=5, c=12, k=8), r"C = 12 is not a multiple of 8", 1),
    (ig.Problem(n=1, h=5, w=5, c=8, k=20), r"K = 20 output channels is not a multiple of 8", 1),
    (ig.Problem(n=1, h=40, w=40, c=8, k=8, r=1, s=1, pad=0, stride=9), r"im2col stride is at most 8", 9),
    (ig.Problem(n=1, h=4, w=4, c=8, k=8, pad=129), r"box corners \(-129, 127, 127\) must lie in", 9),
    (ig.Problem(n=1, h=200, w=4, c=8, k=8, r=131, s=1, pad=0), r"box corners \(0, -130, 0\) must lie in", 9),
]


@pytest.mark.parametrize("problem, constraint, taker", REFUSED, ids=[p.label() for p, _, _ in REFUSED])
def test_a_refusal_names_the_constraint_and_the_step_that_takes_the_layer(problem, constraint, taker):
    """Every step past the one named refuses the layer in the same words; that step and all before it take
    it, and so does their validation."""
    x, w = zeros(problem.x_shape, np.float16), zeros(problem.w_shape, np.float16)
    for info in ig.REGISTRY:
        why = ig.refusal(info.number, problem)
        if info.number <= taker:
            assert why is None, why
            assert ig.validate(info.number, x, w, pad=problem.pad, stride=problem.stride) == problem
            continue
        assert re.search(rf"{constraint}.*use step {taker}\b", why), why
        assert "the tensor-core steps" in why or f"step {info.number}" in why, why  # who refuses
        with pytest.raises(ValueError, match=re.escape(why)):
            ig.validate(info.number, x, w, pad=problem.pad, stride=problem.stride)


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"stride": 0}, r"^stride must be >= 1, got 0$"),
        ({"pad": -1}, r"^pad must be >= 0, got -1$"),
        ({"n": 0}, r"^n must be >= 1, got 0$"),
        ({"c": True}, r"^c must be an integer, got True$"),
        ({"k": 2.5}, r"^k must be an integer, got 2.5$"),
        ({"h": 1, "w": 1, "pad": 0}, r"^the 3x3 filter is larger than the padded 1x1 input \(pad 0\)$"),
    ],
)
def test_a_problem_no_step_takes_is_refused_when_made(fields, match):
    """No step takes a stride below 1, a negative padding, an empty tensor or an empty output: the Problem
    says so itself, so best_step and the model never weigh one."""
    with pytest.raises(ValueError, match=match):
        ig.Problem(**{"n": 1, "h": 8, "w": 8, "c": 8, "k": 8, **fields})


def test_a_refusal_wants_a_problem():
    with pytest.raises(TypeError, match="problem: expected a Problem"):
        ig.refusal(2, (1, 8, 8, 8, 8))
    with pytest.raises(ValueError, match="step must be one of"):
        ig.refusal(13, ig.CI_PROBLEM)


def test_bad_geometry_and_arguments():
    x, w = _inputs()
    with pytest.raises(ValueError, match="larger than the padded"):
        ig.validate(1, x, zeros((4, 9, 9, 16), np.float16), pad=0)
    with pytest.raises(ValueError, match="stride"):
        ig.validate(1, x, w, stride=0)
    with pytest.raises(ValueError, match="pad"):
        ig.validate(1, x, w, pad=-1)
    with pytest.raises(ValueError, match="step must be one of"):
        ig.validate(13, x, w)
    with pytest.raises(ValueError, match="expected shape"):
        ig.validate(1, x, w, zeros((1, 2, 3, 4), np.float16))
    with pytest.raises(ValueError, match="fused in steps"):
        ig.validate(4, x, w, bias=zeros(ig.CI_PROBLEM.k, np.float32))
    with pytest.raises(ValueError, match="fused in steps"):
        ig.launcher(1, x, w, zeros(ig.CI_PROBLEM.y_shape, np.float16), relu=True)
    with pytest.raises(TypeError, match="float32"):
        ig.validate(5, x, w, bias=zeros(ig.CI_PROBLEM.k, np.float16))
    for bad in (dict(pad=True), dict(stride=True)):
        with pytest.raises(ValueError, match="must be an integer"):
            ig.validate(1, x, w, **bad)
    with pytest.raises(ValueError, match="step must be one of"):
        ig.validate(1.0, x, w)
    with pytest.raises(TypeError, match=r"out \(NPQK output\): expected a.* got list"):
        ig.validate(2, x, w, out=[[0]])


def test_output_overlapping_an_input_is_refused():
    p = ig.Problem(n=1, h=5, w=7, c=8, k=8)  # C == K: out has x's shape
    x, w = ig.random_inputs(p, np.random.default_rng(0))
    x, w = device.xp().asarray(x), device.xp().asarray(w)
    with pytest.raises(ValueError, match="out must not overlap x"):
        ig.conv(1, x, w, out=x)


def test_step_1_takes_numba_device_arrays(rng):
    from numba import cuda

    p = ig.Problem(n=1, h=3, w=5, c=3, k=4)
    x, w = ig.random_inputs(p, rng)
    result = ig.compare(ig.conv(1, cuda.to_device(x), cuda.to_device(w)), ig.reference(x, w), p)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.parametrize("step", ig.SPECIALIZED)
def test_misaligned_bias_is_refused_by_the_steps_that_read_it_in_pairs(step):
    """Steps 7-8 load bias as float2: a contiguous slice 4 bytes off an 8-byte boundary would fault."""
    x, w = _inputs()
    k = ig.CI_PROBLEM.k
    buf = zeros(k + 2, np.float32)
    start = 1 if check.address(buf) % 8 == 0 else 0
    bias = buf[start : start + k]
    assert bias.flags.c_contiguous and check.address(bias) % 8 == 4
    with pytest.raises(ValueError, match="8-byte aligned"):
        ig.validate(step, x, w, bias=bias)
    assert ig.validate(5, x, w, bias=bias) == ig.CI_PROBLEM  # step 5 reads one float at a time
    assert ig.validate(step, x, w, bias=buf[1 - start : 1 - start + k]) == ig.CI_PROBLEM


def _misaligned(a, alignment=16):
    """A C-contiguous copy of ``a`` whose data starts ``a.itemsize`` bytes past an ``alignment`` boundary."""
    buf = zeros(a.size + alignment, a.dtype)
    start = (-check.address(buf) // a.itemsize + 1) % (alignment // a.itemsize)
    view = buf[start : start + a.size].reshape(a.shape)
    view[...] = a
    assert view.flags.c_contiguous and check.address(view) % alignment == a.itemsize
    return view


def test_misaligned_arrays_are_refused_by_the_tensor_core_steps():
    """Steps 2-8 move 16 bytes at a time: an fp16 view 2 bytes off a 16-byte boundary would fault."""
    x, w = _inputs()
    out = zeros(ig.CI_PROBLEM.y_shape, np.float16)
    for step in (2, 5, 8):
        with pytest.raises(ValueError, match="x: the tensor-core steps need 16-byte aligned arrays"):
            ig.validate(step, _misaligned(x), w)
        with pytest.raises(ValueError, match="w: the tensor-core steps need 16-byte aligned arrays"):
            ig.validate(step, x, _misaligned(w))
        with pytest.raises(ValueError, match="out: the tensor-core steps need 16-byte aligned arrays"):
            ig.validate(step, x, w, _misaligned(out))
    assert ig.validate(1, _misaligned(x), _misaligned(w), _misaligned(out)) == ig.CI_PROBLEM


@pytest.mark.parametrize(
    "problem, limit, match",
    [
        (ig.CI_PROBLEM, 959, "x has 960 elements"),
        (ig.CI_PROBLEM, 3455, "w has 3456 elements"),
        (ig.Problem(n=2, h=8, w=8, c=8, k=16), 2047, "y has 2048 elements"),  # x 1024, w 1152
    ],
)
def test_tensors_past_32_bit_indices_are_refused(problem, limit, match, monkeypatch):
    """The CUDA C++ steps index with 32-bit integers: a small limit stands in for 2**31 - 1 elements."""
    monkeypatch.setattr(problems, "MAX_ELEMENTS", limit)
    x, w = _inputs(problem)
    with pytest.raises(
        ValueError,
        match=rf"{match}; the CUDA C\+\+ steps index with 32-bit integers "
        rf"\(at most {limit}\)",
    ):
        ig.validate(2, x, w)
    assert ig.validate(1, x, w) == problem  # step 1 (Numba) is not limited


def test_pipeline_depth_is_checked():
    x, w = _inputs()
    out = zeros(ig.CI_PROBLEM.y_shape, np.float16)
    with pytest.raises(ValueError, match="stages of step 6 must be an integer from 3 to 5"):
        ig.launcher(6, x, w, out, stages=2)
    with pytest.raises(ValueError, match="stages of step 4 must be an integer from 2 to 5"):
        ig.launcher(4, x, w, out, stages=6)
    with pytest.raises(ValueError, match="x_bypass_l1 rebuilds step 4 or 5 only"):
        ig.launcher(6, x, w, out, x_bypass_l1=True)
    with pytest.raises(ValueError, match="stages of step 7 must be an integer from 3 to 4"):
        ig.launcher(7, x, w, out, stages=5)
    with pytest.raises(ValueError, match="stages of step 11 64 wide must be an integer from 4 to 8, got 9"):
        ig.launcher(11, x, w, out, stages=9, block_n=64)
    with pytest.raises(ValueError, match="block_n: step 11 builds tiles 128 or 64 output channels wide, got 32"):
        ig.launcher(11, x, w, out, block_n=32)
    with pytest.raises(ValueError, match="block_n: step 10 builds tiles 256 output channels wide, got 64"):
        ig.launcher(10, x, w, out, block_n=64)
    with pytest.raises(ValueError, match=r"blocks sets the grid of steps \(7, 8, 9, 10, 11, 12\) only"):
        ig.launcher(6, x, w, out, blocks=1)
    with pytest.raises(ValueError, match="blocks must be an integer from 1 to the 1 tiles"):
        ig.launcher(7, x, w, out, blocks=2)
    for step in (1, 2, 3):  # no pipeline: a stage count would be silently ignored
        with pytest.raises(
            ValueError,
            match=rf"stages sets the pipeline depth of steps \(4, 5, 6, 7, 8, 9, 10, 11, 12\) only; step {step}",
        ):
            ig.launcher(step, x, w, out, stages=3)


@pytest.mark.parametrize("step", [s.number for s in ig.REGISTRY if s.tma_im2col])
def test_the_im2col_steps_take_the_limits_of_their_descriptor(step):
    """The TMA engine's im2col mode strides by at most 8 and keeps its box corners in [-128, 127]
    (REFUSED has the layers past them): the limits themselves pass."""
    edge = ig.Problem(n=1, h=20, w=20, c=8, k=8, r=3, s=3, pad=128, stride=8)
    x, w = zeros(edge.x_shape, np.float16), zeros(edge.w_shape, np.float16)
    assert ig.refusal(step, edge) is None
    assert ig.validate(step, x, w, pad=edge.pad, stride=edge.stride) == edge


def test_the_im2col_step_counts_its_k_steps_tap_by_tap():
    """Step 10 walks 64 channels of one tap per K step: C = 40 costs 9 K steps (one per tap), not the
    ceil(360 / 64) = 6 of the steps that run over R S C in one line."""
    step = next(s.number for s in ig.REGISTRY if s.tma_im2col)
    problem = ig.ODD_PROBLEMS[0]  # C = 40
    padded = ig.tile_model(step, 4, problem, H100)[4]
    assert padded == 2 * ig.BLOCK_M * ig.WS_BLOCK_N * (9 + 1) * 64
    assert ig.tile_model(step - 1, 4, problem, H100)[4] == 2 * ig.BLOCK_M * ig.WS_BLOCK_N * (6 + 1) * 64
    assert ig.tile_model(step, 4, ig.PROBLEM, H100) == ig.tile_model(step - 1, 4, ig.PROBLEM, H100)  # C = 256


def test_split_k_is_checked():
    x, w = _inputs()
    out = zeros(ig.CI_PROBLEM.y_shape, np.float16)
    for step in (5, 7, 8, 11):
        with pytest.raises(ValueError, match=r"splits divides K over the blocks of steps \(6, 12\) only"):
            ig.launcher(step, x, w, out, splits=2)
    steps = ig.k_steps(ig.CI_PROBLEM)  # 16 channels x 9 taps: 3 K steps of 64
    for bad in (0, steps + 1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=rf"splits must be an integer from 1 to the problem's {steps} K steps"):
            ig.launcher(6, x, w, out, splits=bad)
    taps = ig.k_steps(ig.CI_PROBLEM, 12)  # step 12 counts tap by tap: 9 taps of 16 channels, 9 K steps
    assert taps == 9
    for bad in (0, taps + 1):
        with pytest.raises(ValueError, match=rf"splits must be an integer from 1 to the problem's {taps} K steps"):
            ig.launcher(12, x, w, out, splits=bad)


def test_the_fixup_step_refuses_a_grid_its_splits_could_wait_on_forever():
    """Step 12's splits of a tile wait for each other: fewer blocks than splits, or more than the SMs
    (not all resident at once), could hang; the launcher says so before anything runs."""
    x, w = _inputs()
    out = zeros(ig.CI_PROBLEM.y_shape, np.float16)
    sms = device.target_properties()["sms"]
    for blocks in (1, 2):
        waits = rf"step 12's 3 splits of a tile wait for each other.*from 3 to the {sms} SMs"
        with pytest.raises(ValueError, match=waits):
            ig.launcher(12, x, w, out, splits=3, blocks=blocks)
    with pytest.raises(ValueError, match=r"from 1 to the 3 units of 3 splits per tile, got 4"):
        ig.launcher(12, x, w, out, splits=3, blocks=4)


@pytest.mark.parametrize("steps", [1, 2, 7, 36, 72])
def test_split_plan_covers_every_k_step_once(steps):
    problem = ig.Problem(n=1, h=4, w=4, c=64 * steps, k=8, r=1, s=1, pad=0)
    assert ig.k_steps(problem) == steps
    for splits in range(1, steps + 1):
        per, used = ig.split_plan(problem, splits)
        shares = [min(per, steps - z * per) for z in range(used)]
        assert sum(shares) == steps and min(shares) >= 1, (splits, per, used)
        assert used <= splits


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_cuda_steps_say_they_need_a_gpu():
    x, w = _inputs()
    with pytest.raises(RuntimeError, match="needs a GPU"):
        ig.conv(3, x, w)


# ---- which GPU runs which step -------------------------------------------------------------------


def _left_out(props, stages=None):
    return {step: why for step in ig.STEPS if (why := ig.unsupported(step, props, stages))}


def test_the_h100_runs_every_step_at_every_depth():
    assert _left_out(H100) == {}
    for step, (low, high) in ig.STAGE_RANGE.items():
        for stages in range(low, high + 1):
            assert ig.unsupported(step, H100, stages) is None
        info = ig.step_info(step)
        for narrow in info.widths[1:]:  # the narrow build's depth is the most stages that fit
            assert all(ig.unsupported(step, H100, d, narrow) is None for d in range(low, info.narrow_stages + 1))
            assert "shared memory" in ig.unsupported(step, H100, info.narrow_stages + 1, narrow)


@pytest.mark.parametrize("props", [A100, RTX_4090], ids=["A100", "RTX 4090"])
def test_ampere_and_ada_leave_out_the_wgmma_steps(props):
    why = _left_out(props)
    assert sorted(why) == [6, 7, 8, 9, 10, 11, 12]
    cc = f"{props['cc'][0]}.{props['cc'][1]}"
    assert all("wgmma" in w and "sm_90a" in w and f"this GPU is {cc}" in w for w in why.values())
    assert ig.unsupported(5, props, 5) is None  # 83,200 B fit in 99 KB


def test_a_newer_gpu_leaves_out_the_wgmma_steps_too():
    """wgmma exists only in sm_90a: a Blackwell GPU (compute capability 10.0) cannot run steps 6-12."""
    why = _left_out({**H100, "name": "NVIDIA B200", "cc": "100"})
    assert sorted(why) == [6, 7, 8, 9, 10, 11, 12]
    assert all("sm_90a" in w and "this GPU is 10.0" in w for w in why.values())


def test_the_t4_runs_steps_1_and_2_only():
    why = _left_out(T4)
    assert sorted(why) == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert "mma.sync.m16n8k16" in why[3] and "sm_80" in why[3] and "this GPU is 7.5" in why[3]
    assert "cp.async" in why[4] and "cp.async" in why[5] and "sm_80" in why[5]
    assert "wgmma" in why[6]


def test_shared_memory_over_the_opt_in_limit_is_named():
    small = {"cc": "80", "smem_per_block_optin_bytes": 65536}  # a T4's 64 KB, with sm_80's instructions
    assert ig.unsupported(4, small) is None  # 3 stages: 49,920 B
    why = ig.unsupported(4, small, 4)
    assert "4 stages" in why and "66,560 B of shared memory" in why and "65,536 B" in why
    assert "66,560 B" in ig.unsupported(5, small, 4)


def test_the_launcher_refuses_a_step_this_gpu_cannot_run(monkeypatch):
    """Before compiling anything: the reason, not NVRTC's or the driver's error. (On a "GPU" the
    launcher's checks want device arrays first, so this calls the kernel builder it goes through.)"""
    monkeypatch.setattr(device, "MODE", device.GPU)
    monkeypatch.setattr(device, "properties", lambda: A100)
    for step in ig.WGMMA:
        with pytest.raises(RuntimeError, match=rf"step {step} uses wgmma, which needs a Hopper GPU .* is 8\.0"):
            ig.cuda_kernel(step, ig.default_stages(step))
    monkeypatch.setattr(device, "properties", lambda: T4)
    with pytest.raises(RuntimeError, match=r"mma\.sync\.m16n8k16, which needs compute capability 8\.0"):
        ig.cuda_kernel(3)


def test_left_out_says_why_once(monkeypatch, capsys):
    monkeypatch.setattr(device, "MODE", device.GPU)
    monkeypatch.setattr(device, "properties", lambda: A100)
    monkeypatch.setattr(registry, "_SAID", set())
    assert ig.left_out(6, 3) and ig.left_out(6, 5) and not ig.left_out(5, 4)
    assert capsys.readouterr().out == f"left out on this GPU: {ig.unsupported(6, A100)}\n"
    monkeypatch.setattr(device, "MODE", device.SIM)
    assert not ig.left_out(6)  # the simulator only compiles


def test_profile_launches_what_the_gpu_can_run(capsys):
    from kernels.igemm import profile

    assert profile.runnable(H100) == list(profile.VARIANTS) and capsys.readouterr().out == ""
    assert [step for _, step, _ in profile.runnable(A100)] == [3, 4, 4, 5]
    assert capsys.readouterr().out.count("left out on this GPU: v") == 5
    assert profile.runnable(T4) == []


# ---- bank arithmetic -----------------------------------------------------------------------------


def test_bank_model_basics():
    assert banks.banks(0) == [0, 1, 2, 3] and banks.banks(124) == [31, 0, 1, 2]
    assert banks.wavefronts([16 * t for t in range(32)]) == 4  # contiguous: conflict-free
    assert banks.wavefronts([0] * 32) == 4  # one address: broadcast
    assert banks.wavefronts([128 * t for t in range(32)]) == 32  # 8-way in every quarter


def test_the_gap_makes_both_patterns_conflict_free():
    t = {r["layout"]: r for r in banks.table()}
    assert t["row-major, 64-byte rows"]["fragment read (ldmatrix.x4)"] == 16
    assert t["4 blocks of 128x8, no gap"]["copy-in (st.shared.v4)"] == 16
    src = t[banks.SOURCE_LAYOUT]
    assert src["copy-in (st.shared.v4)"] == src["fragment read (ldmatrix.x4)"] == 4
    assert banks.address(banks.SOURCE_LAYOUT, 0, 1) == 2080  # the source's 0, 2080, 4160, 6240


# ---- CUDA C++: compiles on a CPU -----------------------------------------------------------------


@pytest.mark.parametrize("arch", cuda_cpp.TARGETS)
@pytest.mark.parametrize("step, stages", [(2, None), (3, None), (4, 2), (4, 4), (5, 2), (5, 4)])
def test_steps_compile_without_spills(step, stages, arch):
    options = () if stages is None else (f"-DSTAGES={stages}",)
    compiled = cuda_cpp.compile_cubin(ig.STEPS[step][0], arch, options)
    (res,) = compiled.resources
    assert res.kernel == ig.STEPS[step][1]
    # 128 accumulators per thread: a spill would put them in local memory inside the main loop.
    assert res.spill_stores == 0 and res.spill_loads == 0, compiled.log
    assert res.registers <= ig.step_info(step).max_registers  # what best_step's blocks per SM assume


@pytest.mark.parametrize("stages", [3, 5])
def test_wgmma_step_compiles_for_sm90a(stages):
    compiled = cuda_cpp.compile_cubin(ig.STEPS[6][0], "sm_90a", (f"-DSTAGES={stages}",))
    res, reduce = sorted(compiled.resources, key=lambda r: r.kernel != ig.STEPS[6][1])
    assert (res.kernel, reduce.kernel) == (ig.STEPS[6][1], "igemm_split_reduce")  # split K's second kernel
    assert res.spill_stores == 0 and res.spill_loads == 0, compiled.log
    assert reduce.spill_stores == 0 and reduce.spill_loads == 0, compiled.log
    # 2 blocks of 256 threads per SM need <= 128 registers; a serialized wgmma pipeline is reported as C7510.
    assert res.registers <= ig.step_info(6).max_registers == 128 and "C7510" not in compiled.log, compiled.log
    if sass.available():
        assert sass.opcodes(sass.disassemble(compiled, ig.STEPS[6][1]))["HGMMA"] == 4  # 4 k16 slices of one K step


@pytest.mark.parametrize("step, stages", [(s, d) for s in ig.SPECIALIZED for d in ig.step_info(s).depths])
def test_warp_specialized_steps_compile_for_sm90a(step, stages):
    compiled = cuda_cpp.compile_cubin(ig.STEPS[step][0], "sm_90a", (f"-DSTAGES={stages}",))
    (res,) = compiled.resources
    assert res.kernel == ig.STEPS[step][1]
    # The producer's gather fits its 104 registers and the consumers' accumulators their 200, unspilled.
    assert res.spill_stores == 0 and res.spill_loads == 0, compiled.log
    # setmaxnreg only redistributes what the block holds: ptxas must give it 384 x 168.
    assert res.registers == ig.WS_REGISTERS == ig.step_info(step).max_registers, compiled.log
    assert "C7510" not in compiled.log, compiled.log
    if sass.available():
        ops = sass.opcodes(sass.disassemble(compiled))
        info = ig.step_info(step)
        # 4 k16 slices of 64x256, or (ping-pong) of two 64x128 halves of a warpgroup's own tile; dec and inc
        assert ops["HGMMA"] == (8 if info.ping_pong else 4) and ops["USETMAXREG"] == 2
        # One barrier after the mbarrier set-up; steps 9-10 add the consumers' two per pass of the epilogue;
        # step 11 its warpgroup's own two per pass, and the turns (a wait and an arrival on each of two);
        # step 12 two more around counting its split in.
        assert ops.get("BAR", 0) == (11 if info.fixup else 9 if info.ping_pong else 5 if info.tma_store else 1)
        # Steps 8-9: the filters come by TMA (UTMALDG); steps 10-11: the input too, and no cp.async is left.
        assert ops.get("LDGSTS", 0) == (0 if info.tma_im2col else 8 if info.tma_filters else 24)
        assert ops.get("UTMALDG", 0) == info.tma_filters + info.tma_im2col
        # Steps 9-10: the four boxes of the staged output tile by TMA (UTMASTG), step 11 the two of a
        # warpgroup's 128x128 tile; no plain global store.
        assert ops.get("UTMASTG", 0) == (2 if info.ping_pong else 4 if info.tma_store else 0)
        # Step 12 also stores its fp32 partials, and the shares of a split tile, with plain stores, and
        # counts each split in and out with one atomic each.
        assert (ops.get("STG", 0) == 0) == (info.tma_store and not info.fixup)
        assert ops.get("ATOMG", 0) == (2 if info.fixup else 0)


NARROW_BUILDS = [(s.number, d) for s in ig.REGISTRY for n in s.widths[1:] for d in (s.stages[0], s.narrow_stages)]


@pytest.mark.parametrize("step, stages", NARROW_BUILDS)
def test_the_narrow_build_compiles_for_sm90a(step, stages):
    """-DBLOCK_N=64: the same turns and registers, one store box per tile instead of two."""
    options = (f"-DSTAGES={stages}", f"-DBLOCK_N={ig.NARROW_N}")
    compiled = cuda_cpp.compile_cubin(ig.STEPS[step][0], "sm_90a", options)
    (res,) = compiled.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, compiled.log
    assert res.registers == ig.WS_REGISTERS and "C7510" not in compiled.log, compiled.log
    if sass.available():
        ops = sass.opcodes(sass.disassemble(compiled))
        # 4 k16 slices of two 64x64 halves; one epilogue pass: two barriers and one TMA store fewer
        assert ops["HGMMA"] == 8 and ops.get("BAR", 0) == 7 and ops.get("UTMASTG", 0) == 1


@pytest.mark.parametrize("step", ig.WGMMA)
@pytest.mark.parametrize("arch", cuda_cpp.TARGETS)
def test_wgmma_steps_build_empty_for_other_targets(arch, step):
    resources = cuda_cpp.compile_cubin(ig.STEPS[step][0], arch, ("-DSTAGES=4",)).resources
    (res,) = [r for r in resources if r.kernel == ig.STEPS[step][1]]
    assert res.registers < 16  # the stub: the launcher never runs it


def test_every_device_helper_is_defined_once():
    """The PTX wrappers live in igemm_common.cuh and hopper.cuh; a step keeps only those it alone uses,
    so a diff of two steps shows what the newer one changes, not a second copy of a helper."""
    import re
    from collections import Counter

    folder = cuda_cpp.source_path("igemm/hopper.cuh").parent
    helper = re.compile(r"^__device__ __forceinline__ [\w ]+?\b(\w+)\(", re.M)
    defined = Counter(name for path in sorted(folder.glob("*.cu*")) for name in helper.findall(path.read_text()))
    assert defined["smem_addr"] == defined["wgmma_64x256x16"] == 1  # the pattern finds the helpers
    assert [name for name, n in defined.items() if n > 1] == []


# ---- GPU: every step against the reference -------------------------------------------------------

GPU_PROBLEMS = list(ig.ODD_PROBLEMS) + [ig.CI_PROBLEM, ig.PROBLEM]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=lambda p: p.label())
@pytest.mark.parametrize("step", CUDA_STEPS)
def test_tensor_core_steps(step, problem, rng):
    import cupy

    x, w = ig.random_inputs(problem, rng, cupy)
    out = ig.conv(step, x, w, pad=problem.pad, stride=problem.stride)
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride)
    result = ig.compare(out, ref, problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ig.ODD_PROBLEMS[:2], ids=lambda p: p.label())
def test_naive_step_on_gpu(problem, rng):
    import cupy

    x, w = ig.random_inputs(problem, rng, cupy)
    out = ig.conv(1, x, w, pad=problem.pad, stride=problem.stride)
    result = ig.compare(out, ig.reference(x, w, pad=problem.pad, stride=problem.stride), problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "step, stages, bypass",
    [
        (4, 2, False),
        (4, 4, False),
        (5, 2, False),
        (5, 4, False),
        (6, 3, False),
        (6, 5, False),
        (7, 3, False),
        (7, 4, False),
        (8, 3, False),
        (8, 4, False),
        (4, 3, True),
        (5, 3, True),
    ],
)
def test_pipeline_depths(step, stages, bypass, rng):
    import cupy

    problem = ig.ODD_PROBLEMS[0]
    x, w = ig.random_inputs(problem, rng, cupy)
    out = ig.conv(step, x, w, stages=stages, x_bypass_l1=bypass)
    result = ig.compare(out, ig.reference(x, w), problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [1, 3, 16])
@pytest.mark.parametrize("step, stages", [(s, d) for s in ig.SPECIALIZED for d in ig.step_info(s).depths])
def test_warp_specialized_blocks_walk_the_tiles(step, stages, blocks, rng):
    """Fewer blocks than tiles: each block's stage ring and mbarrier phases run on across its tiles."""
    import cupy

    problem = ig.ODD_PROBLEMS[3]  # 8 x 2 tiles, ragged in M
    x, w = ig.random_inputs(problem, rng, cupy)
    bias = cupy.asarray(rng.uniform(-5, 5, problem.k).astype(np.float32))
    out = ig.conv(step, x, w, bias=bias, alpha=0.5, stages=stages, blocks=blocks)
    result = ig.compare(out, ig.reference(x, w, bias=bias, alpha=0.5), problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
def test_tma_launcher_keeps_a_temporary_filter_alive(rng):
    """Step 8's kernel reads w through a descriptor holding only its address: if the launcher did not
    keep w, the pool would hand w's memory to the next array (zeros here) and the output would be 0."""
    import cupy

    if why := ig.unsupported(8, device.properties()):
        pytest.skip(why)
    problem = ig.ODD_PROBLEMS[0]
    x, w = ig.random_inputs(problem, rng, cupy)
    out = check.poison(cupy.empty(problem.y_shape, dtype=cupy.float16))
    run = ig.launcher(8, x, w.copy(), out)  # nothing else refers to the copy
    cupy.zeros(w.shape, dtype=w.dtype)  # the pool reuses a freed block of w's size, if any: zeros it
    run()
    result = ig.compare(out, ig.reference(x, w), problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
def test_tma_store_launcher_keeps_a_temporary_output_alive(rng):
    """Step 9 writes through a descriptor holding only the output's address: were the launcher not to
    keep it, the pool would hand its memory to the next array, which the kernel would then overwrite."""
    import cupy

    step = next(s.number for s in ig.REGISTRY if s.tma_store)
    if why := ig.unsupported(step, device.properties()):
        pytest.skip(why)
    problem = ig.ODD_PROBLEMS[0]
    x, w = ig.random_inputs(problem, rng, cupy)
    run = ig.launcher(step, x, w, check.poison(cupy.empty(problem.y_shape, dtype=cupy.float16)))
    bystander = cupy.zeros(problem.y_shape, dtype=cupy.float16)  # would take a freed output's block
    run()
    assert not bystander.any()
    result = ig.compare(run.out, ig.reference(x, w), problem)
    assert result.ok, f"{result} -- {result.detail}"


# Geometry the engine now works out in step 10: filters that are not square, strides 2 and 3, 5x5 taps.
IM2COL_PROBLEMS = [
    ig.Problem(n=2, h=9, w=11, c=64, k=64, r=1, s=3, pad=1),
    ig.Problem(n=3, h=10, w=7, c=72, k=24, r=3, s=1, pad=0),
    ig.Problem(n=2, h=15, w=13, c=64, k=128, stride=2),
    ig.Problem(n=2, h=16, w=16, c=32, k=64, r=1, s=1, pad=0, stride=2),
    ig.Problem(n=1, h=20, w=20, c=16, k=16, r=5, s=5, pad=2, stride=3),
    ig.Problem(n=1, h=20, w=20, c=8, k=8, r=3, s=3, pad=128, stride=8),  # the descriptor's limits
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", IM2COL_PROBLEMS, ids=lambda p: p.label())
@pytest.mark.parametrize("step", sorted({n for s in ig.REGISTRY if s.tma_im2col for n in (s.number - 1, s.number)}))
def test_im2col_geometry(step, problem, rng):
    """The TMA engine's gather against the threads' gather of the step before, on the geometry the
    chapter's problems do not cover, with the epilogue, into a poisoned output (conv poisons it)."""
    import cupy

    if why := ig.unsupported(step, device.properties()):
        pytest.skip(why)
    x, w = ig.random_inputs(problem, rng, cupy)
    bias = cupy.asarray(rng.uniform(-5, 5, problem.k).astype(np.float32))
    out = ig.conv(step, x, w, pad=problem.pad, stride=problem.stride, bias=bias, alpha=0.75, relu=True)
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride, bias=bias, alpha=0.75, relu=True)
    result = ig.compare(out, ref, problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [1, 2, 3, 7])
def test_ping_pong_turns_with_odd_and_even_tile_counts(blocks, rng):
    """Step 11's consumers take a block's tiles in turns, and hand over the turn only where the other has a
    next tile: 7 tiles of 128x128 over 1, 2, 3 or 7 blocks leave each consumer 0 to 4 tiles, the second
    one fewer where a block's count is odd. Every tile checked, with the epilogue, into a poisoned output."""
    import cupy

    step = next(s.number for s in ig.REGISTRY if s.ping_pong)
    if why := ig.unsupported(step, device.properties()):
        pytest.skip(why)
    problem = ig.Problem(n=1, h=28, w=32, c=64, k=128)  # M = 896: 7 tiles of 128 rows, one of 128 channels
    x, w = ig.random_inputs(problem, rng, cupy)
    bias = cupy.asarray(rng.uniform(-5, 5, problem.k).astype(np.float32))
    out = ig.conv(step, x, w, bias=bias, alpha=0.75, relu=True, blocks=blocks)
    ref = ig.reference(x, w, bias=bias, alpha=0.75, relu=True)
    result = ig.compare(out, ref, problem)
    assert result.ok, f"{result} -- {result.detail}"


NARROW_PROBLEMS = [*GPU_PROBLEMS, ig.Problem(n=2, h=15, w=13, c=64, k=200, stride=2)]  # the last: 4 tiles wide


@pytest.mark.gpu
@pytest.mark.parametrize("problem", NARROW_PROBLEMS, ids=lambda p: p.label())
@pytest.mark.parametrize("step, stages", NARROW_BUILDS)
def test_the_narrow_build(step, stages, problem, rng):
    """Step 11's 128x64 tiles at its shallowest and deepest pipeline, with the epilogue, into a poisoned
    output; on the ragged problem also over 1 and 3 blocks, whose consumers take several tiles in turns."""
    import cupy

    if why := ig.unsupported(step, device.properties(), stages, ig.NARROW_N):
        pytest.skip(why)
    x, w = ig.random_inputs(problem, rng, cupy)
    bias = cupy.asarray(rng.uniform(-5, 5, problem.k).astype(np.float32))
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride, bias=bias, alpha=0.75, relu=True)
    for blocks in (None, 1, 3) if problem is ig.ODD_PROBLEMS[3] else (None,):
        out = ig.conv(
            step,
            x,
            w,
            pad=problem.pad,
            stride=problem.stride,
            bias=bias,
            alpha=0.75,
            relu=True,
            stages=stages,
            blocks=blocks,
            block_n=ig.NARROW_N,
        )
        result = ig.compare(out, ref, problem)
        assert result.ok, f"blocks {blocks}: {result} -- {result.detail}"


@pytest.mark.gpu
def test_im2col_launcher_keeps_a_temporary_input_alive(rng):
    """Step 10 reads x through a descriptor holding only its address: were the launcher not to keep x,
    the pool would hand x's memory to the next array (zeros here) and the output would be 0."""
    import cupy

    step = next(s.number for s in ig.REGISTRY if s.tma_im2col)
    if why := ig.unsupported(step, device.properties()):
        pytest.skip(why)
    problem = ig.ODD_PROBLEMS[0]
    x, w = ig.random_inputs(problem, rng, cupy)
    out = check.poison(cupy.empty(problem.y_shape, dtype=cupy.float16))
    run = ig.launcher(step, x.copy(), w, out)  # nothing else refers to the copy
    cupy.zeros(x.shape, dtype=x.dtype)  # the pool reuses a freed block of x's size, if any: zeros it
    run()
    result = ig.compare(out, ig.reference(x, w), problem)
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [ig.ODD_PROBLEMS[0], ig.PROBLEM], ids=lambda p: p.label())
@pytest.mark.parametrize("step", ig.EPILOGUE)
def test_fused_epilogue(step, problem, rng):
    import cupy

    x, w = ig.random_inputs(problem, rng, cupy)
    bias = cupy.asarray(rng.uniform(-5, 5, problem.k).astype(np.float32))
    out = ig.conv(step, x, w, bias=bias, alpha=0.75, relu=True)
    ref = ig.reference(x, w, bias=bias, alpha=0.75, relu=True)
    assert float((ref == 0).mean()) > 0.2  # ReLU really clamps some outputs
    result = ig.compare(out, ref, problem)
    assert result.ok, f"{result} -- {result.detail}"


SPLIT_PROBLEMS = [*ig.ODD_PROBLEMS, ig.Problem(n=1, h=14, w=14, c=512, k=512)]  # the last: VGG conv5, 72 K steps


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [2, 3, 5, "all"])
@pytest.mark.parametrize("problem", SPLIT_PROBLEMS, ids=lambda p: p.label())
@pytest.mark.parametrize("step", ig.SPLIT_K)
def test_split_k(step, problem, splits, rng):
    """Each split-K step with its K steps shared by several blocks, the partials added by the second
    kernel or (fixup) by the tile's splits themselves, with the epilogue, into a poisoned output: every
    split count, the last split short or not. The fixup's launcher runs three times, its output poisoned
    before each (every launch must leave the tiles' counters ready for the next), then on as many blocks as
    splits."""
    import cupy

    if why := ig.unsupported(step, device.properties()):
        pytest.skip(why)
    steps = ig.k_steps(problem, step)
    splits = steps if splits == "all" else min(splits, steps)
    x, w = ig.random_inputs(problem, rng, cupy)
    bias = cupy.asarray(rng.uniform(-5, 5, problem.k).astype(np.float32))
    ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride, bias=bias, alpha=0.75, relu=True)
    out = cupy.empty(problem.y_shape, dtype=np.float16)
    kwargs = dict(pad=problem.pad, stride=problem.stride, bias=bias, alpha=0.75, relu=True, splits=splits)
    launches = [ig.launcher(step, x, w, out, **kwargs)]
    if ig.step_info(step).fixup:  # again, and on the fewest blocks allowed: each walks many units in turns
        launches += [launches[0], launches[0], ig.launcher(step, x, w, out, blocks=splits, **kwargs)]
    for launch in launches:
        check.poison(out)
        launch()
        result = ig.compare(out, ref, problem)
        assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
def test_cuda_steps_refuse_host_arrays():
    x, w = _inputs(xp=np)
    with pytest.raises(TypeError, match="device array"):
        ig.conv(4, x, w)


@pytest.mark.gpu
def test_bank_experiment_reports_every_pattern_and_layout():
    """One GB/s row per pattern and layout, in that order; how fast each is belongs to the notebook."""
    rows = banks.measure(iters=64, blocks_per_sm=1, threads=128, repeat=2)
    assert [(r["kernel"], r["problem"]) for r in rows] == [
        (pattern, layout) for pattern in ("tile_store", "tile_ldmatrix") for layout in banks.LAYOUTS
    ]
    assert all(set(r) == {"kernel", "problem", "metric", "value", "unit"} for r in rows)
    assert all(r["metric"] == "GB/s" and r["unit"] == "GB/s" for r in rows)
    assert all(isinstance(r["value"], float) and np.isfinite(r["value"]) and r["value"] > 0 for r in rows), rows


@pytest.mark.gpu
def test_cudnn_matches_the_reference(rng):
    from kernels.igemm import cudnn_conv

    if cudnn_conv.missing():
        pytest.skip(cudnn_conv.missing())
    import cupy

    problem = ig.ODD_PROBLEMS[0]
    x, w = ig.random_inputs(problem, rng, cupy)
    conv = cudnn_conv.CudnnConv(problem)
    out = check.poison(cupy.empty(problem.y_shape, dtype=cupy.float16))
    conv.launcher(0, x, w, out)()
    result = ig.compare(out, ig.reference(x, w), problem)
    assert result.ok, f"{result} -- {result.detail}"


def test_the_profile_table_is_stored_and_read_back(tmp_path):
    from kernels.harness import results
    from kernels.igemm import profile

    rows = [
        {"variant": "v3_ldmatrix", **{c: float(i) for i, c in enumerate(profile.COLUMNS)}},
        {"variant": "v4_cp_async, x via cp.async.ca", **{c: 0.5 + i for i, c in enumerate(profile.COLUMNS)}},
    ]
    profile.store(rows, results.REFERENCE_GPU, tmp_path)
    slug, stored = profile.stored(tmp_path)
    assert slug == results.REFERENCE_GPU
    assert stored == {r["variant"]: {c: r[c] for c in profile.COLUMNS} for r in rows}
    assert profile.stored(tmp_path / "none") is None


def test_a_page_fills_every_quoted_glue_name_that_no_cell_stored(monkeypatch):
    """Where a GPU leaves steps out, their cells glue nothing: Glue.fill gives every name the Markdown quotes a
    value, the word NOT_RUN, and says which."""
    from kernels.harness import glue as harness_glue
    from kernels.igemm import pages

    stored = {}
    monkeypatch.setattr(harness_glue, "glue", lambda name, value: stored.__setitem__(name, value))
    quoted = pages.quoted("05_implicit_gemm")
    assert {"step_count", "hopper_steps", "v6_tflops", "v12_why"} <= set(quoted)
    glue = pages.Glue()
    glue("step_count", len(ig.REGISTRY))
    left = glue.fill("05_implicit_gemm")
    assert set(left) == set(quoted) - {"step_count"} and set(stored) == set(quoted)
    assert stored["step_count"] == len(ig.REGISTRY) and {stored[n] for n in left} == {pages.NOT_RUN}
    assert glue.fill("05_implicit_gemm") == []


@pytest.mark.parametrize("page", ["05_implicit_gemm", "05_implicit_gemm_deep_profile", "05_implicit_gemm_deep_shapes"])
def test_the_chapter_types_no_step_count_and_no_range_past_the_last_step(page):
    from kernels.igemm import pages

    cells = json.loads((pages.NOTEBOOKS / f"{page}.ipynb").read_text())["cells"]
    text = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert not re.findall(r"\b(?:ten|eleven|twelve|thirteen) steps\b", text, flags=re.I)
    last = max(s.number for s in ig.REGISTRY)
    for a, b in re.findall(r"\b[Ss]teps (\d+)(?: to |-)(\d+)\b", text):
        assert 1 <= int(a) < int(b) <= last, f"{page}: steps {a} to {b}; the steps are 1 to {last}"
