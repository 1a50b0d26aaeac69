"""WINOGRAD, F(2x2, 3x3): the NumPy algorithm and the CUDA C++ kernel against the float64 direct
reference, its instruction counts and prediction, and bad input refused with a clear error."""

from collections import Counter

import numpy as np
import pytest

from kernels.conv import common, winograd
from kernels.harness import check, cuda_cpp, device, sass

SHAPES = [(1, 3, 5, 7, 7), (2, 5, 4, 13, 9), (1, 2, 3, 1, 1), (3, 1, 1, 2, 3), (1, 4, 8, 6, 16)]  # n, c, k, h, w


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_numpy_winograd_is_the_direct_convolution(shape):
    n, c, k, h, w = shape
    rng = np.random.default_rng()
    x, f = rng.uniform(-1, 1, (n, c, h, w)), rng.uniform(-1, 1, (k, c, 3, 3))
    np.testing.assert_allclose(winograd.numpy_conv(x, f), common.reference(x, f), rtol=0, atol=1e-12)


def test_numpy_winograd_is_not_the_convolution_with_a_wrong_transform(monkeypatch):
    x, f = common.random_inputs(common.PROBLEMS["tiny"])
    monkeypatch.setattr(winograd, "G", winograd.G * np.array([[1], [1], [-1], [1]]))
    assert np.abs(winograd.numpy_conv(x, f) - common.reference(x, f)).max() > 1e-3


def test_numpy_winograd_rejects_a_transposed_filter():
    x, f = common.random_inputs(common.PROBLEMS["tiny"])
    with pytest.raises(ValueError, match="input channels"):
        winograd.numpy_conv(x, f.transpose(1, 0, 2, 3))


@pytest.mark.parametrize("one_pass", [True, False])
def test_kernels_compile_without_spills_and_one_block_fits_an_sm(one_pass):
    compiled = winograd.compile_info(one_pass=one_pass)
    assert {r.kernel for r in compiled.resources} == {winograd.KERNEL, winograd.FILTER_KERNEL}
    assert all(r.spill_stores == 0 and r.spill_loads == 0 for r in compiled.resources)
    registers = next(r.registers for r in compiled.resources if r.kernel == winograd.KERNEL)
    assert winograd.perfmodel.register_warps(registers) // (winograd.THREADS // 32) == 1  # two warps a scheduler
    assert winograd.smem_bytes() <= 227 * 1024


@pytest.mark.skipif(not sass.available(), reason="needs nvdisasm or cuobjdump")
def test_warp_instructions_count_each_loop_per_trip():
    compiled = winograd.compile_info()
    ins = sass.disassemble(compiled, winograd.KERNEL)
    inner, outer = (len(b) for b in sass.loops(ins) if len(b) > 1)
    once = winograd.warp_instructions(compiled, winograd.KERNEL, (1, 1))
    assert once == len(ins)
    two_chunks = winograd.warp_instructions(compiled, winograd.KERNEL, (8, 2))
    assert two_chunks - winograd.warp_instructions(compiled, winograd.KERNEL, (8, 1)) == outer - inner + 8 * inner
    with pytest.raises(ValueError, match="2 loops, 1 trip counts"):
        winograd.warp_instructions(compiled, winograd.KERNEL, (8,))


@pytest.mark.skipif(not sass.available(), reason="needs nvdisasm or cuobjdump")
def test_prediction_scales_halo_tiles_time_by_the_instructions_issued():
    p = common.PROBLEMS["conv1"]
    fewer = winograd.predicted_ms(p, 1.0, 132)
    assert 0.3 < fewer < 1.0  # fewer multiply-adds, though not 2.25x fewer instructions
    assert winograd.predicted_ms(p, 2.0, 132) == pytest.approx(2 * fewer)
    wide = common.Problem("wide", n=16, c=128, k=64, h=224, w=224)  # twice the chunks: about twice the time
    assert winograd.predicted_ms(wide, 1.0, 132) == pytest.approx(fewer, rel=0.1)


def test_multiply_adds_are_four_ninths_of_the_direct_ones_on_whole_tiles():
    counts = winograd.multiply_adds(common.PROBLEMS["conv1"])
    assert counts["direct"] * 4 == counts["winograd"] * 9
    assert counts["direct"] == common.PROBLEMS["conv1"].flops // 2  # 224 is a multiple of the 16-pixel tile


def test_loads_of_v_take_one_pass_per_quarter_warp_and_took_two_in_the_first_version():
    assert winograd.v_load_passes(one_pass=True) == (1, 1)
    assert winograd.v_load_passes(one_pass=False) == (2, 1)  # threads 4 apart: words 32 floats apart


def test_tile_runs_are_read_from_the_kernel_source(monkeypatch, tmp_path):
    assert winograd.tile_runs(True) == {"RUN": 4, "SECOND": 32} and winograd.tile_runs(False) == {"RUN": 8, "SECOND": 4}
    source = tmp_path / "winograd.cu"
    source.write_text("constexpr int RUN = V_ONE_PASS ? 2 : 8;\nconstexpr int SECOND = V_ONE_PASS ? 16 : 4;\n")
    monkeypatch.setattr(winograd.cuda_cpp, "source_path", lambda path: source)
    assert winograd.v_load_passes(one_pass=True) == (1, 1)  # 8 float4s 32 bytes apart: still one pass
    source.write_text("constexpr int RUN = 4;\n")
    with pytest.raises(RuntimeError, match="RUN and SECOND not found"):
        winograd.tile_runs(True)
    with pytest.raises(TypeError, match="one_pass: True or False"):
        winograd.tile_runs(1)


def test_v_loads_count_two_per_channel_in_every_warp_of_every_block():
    p = common.Problem("p", n=1, c=20, k=40, h=17, w=16)  # 2 tiles, 2 channel blocks, 2 chunks of 16
    assert winograd.v_loads(p) == 2 * 32 * 8 * (2 * 2)


@pytest.mark.skipif(not sass.available(), reason="needs nvdisasm or cuobjdump")
def test_both_versions_issue_the_same_loads_and_ffmas():
    """The first version differs in addresses only: the same instructions of each kind in its loops."""
    counts = []
    for one_pass in (True, False):
        ins = sass.disassemble(winograd.compile_info(one_pass=one_pass), winograd.KERNEL)
        counts.append(Counter(i.opcode for i in ins if i.base in ("FFMA", "LDS")))
    assert counts[0] == counts[1]
    assert counts[0]["FFMA"] >= 2 * 8 * 16  # the loop's two channels of 8 x 16 products


def test_one_pass_must_be_a_bool():
    with pytest.raises(TypeError, match="one_pass: True or False"):
        winograd.stage(one_pass=1)


@pytest.mark.parametrize("bkc", [0, 4, 12, 8.0, True])
def test_bad_chunk_depth_is_named(bkc):
    with pytest.raises(ValueError, match="multiple of 8"):
        winograd.stage(bkc)


@pytest.mark.parametrize("xp", [np] + ([device.xp()] if device.MODE == device.GPU else []), ids=lambda m: m.__name__)
def test_channel_counts_must_be_multiples_of_4(xp):
    x, f = map(xp.asarray, common.to_layout(*common.random_inputs(common.Problem("c", 1, 6, 8, 5, 5), seed=0), "nhwc"))
    with pytest.raises(ValueError, match="C must be a multiple of 4, got C = 6"):
        common.run(winograd.stage(), x, f)
    x, f = map(xp.asarray, common.to_layout(*common.random_inputs(common.Problem("k", 1, 8, 6, 5, 5), seed=0), "nhwc"))
    with pytest.raises(ValueError, match="K must be a multiple of 4, got K = 6"):
        common.run(winograd.stage(), x, f)


@pytest.mark.skipif(device.MODE == device.GPU, reason="checks the simulator's refusal")
def test_winograd_says_it_needs_a_gpu():
    x, f = common.to_layout(*common.random_inputs(common.PROBLEMS["odd4"], seed=0), "nhwc")
    with pytest.raises(RuntimeError, match="needs a GPU"):
        common.run(winograd.stage(), x, f)


def test_kernel_source_compiles_with_nvrtc():
    assert cuda_cpp.compile_cubin(winograd.FILE, "sm_80", ("-DBKC=8",)).cubin  # the oldest cp.async target


GPU_PROBLEMS = [
    common.PROBLEMS["odd4"],
    common.Problem("ragged", n=3, c=24, k=36, h=37, w=19),  # partial tiles, 2 chunks, 2 channel blocks
    common.Problem("pixel", n=2, c=4, k=4, h=1, w=1),
    common.Problem("strip", n=1, c=20, k=40, h=2, w=33),
]


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=lambda p: p.name)
@pytest.mark.parametrize("one_pass", [True, False], ids=["one-pass", "two-pass"])
def test_gpu_winograd_matches_reference(problem, one_pass):
    result = common.check_stage(winograd.stage(one_pass=one_pass), problem)  # fresh inputs, a poisoned output
    assert result.ok, f"{result} -- {result.detail}"


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
def test_gpu_winograd_transforms_each_calls_filter():
    """The transformed filter's buffer is kept between calls of one shape; each call fills it anew."""
    p, stage = GPU_PROBLEMS[1], winograd.stage(8)
    for seed in (1, 2):
        x, f = common.random_inputs(p, seed)
        xs, fs = (device.xp().asarray(a) for a in common.to_layout(x, f, "nhwc"))
        y = common.output_to_nchw(common.run(stage, xs, fs), "nhwc")
        check.assert_close(y, common.reference(x, f), atol=common.tolerance(p), rtol=1e-5)


def test_blocks_cover_the_image_in_16_pixel_tiles_and_32_or_64_channels():
    p = common.Problem("p", n=2, c=8, k=96, h=17, w=33)  # 2 x 3 tiles an image
    assert winograd.blocks(p) == 2 * 2 * 3 * 3
    assert winograd.blocks(p, halo=True) == 2 * 2 * 3 * 2


def _ncu_csv(launches):
    """ncu's long CSV for the given (ID, kernel) launches, each with two metrics of NCU."""
    rows = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    metrics = [winograd.NCU["warp instructions"], winograd.NCU["issue %"]]
    for launch, kernel in launches:
        rows += [
            f'"{launch}","{kernel}(float const*)","{m}","","{1000 * (launch + 1) + i:,}"' for i, m in enumerate(metrics)
        ]
    return "==PROF== Connected\n" + "\n".join(rows) + "\n"


def test_ncu_rows_name_the_launches_in_the_order_they_ran(monkeypatch):
    text = _ncu_csv([(0, "conv_winograd"), (1, "conv_winograd"), (2, "conv_halo_tile")])
    monkeypatch.setattr(winograd.check, "ncu_csv", lambda *args, **kw: text)
    rows = {(r["kernel"], r["metric"]): r["value"] for r in winograd.ncu_rows("conv1")}
    assert rows[(winograd.TWO_PASS, "ncu warp instructions")] == 1000
    assert rows[(winograd.NAME, "ncu warp instructions")] == 2000
    assert rows[(winograd.HALO, "ncu issue %")] == 3001
    assert len(rows) == 6


def test_ncu_rows_refuse_a_profile_that_missed_a_launch(monkeypatch):
    text = _ncu_csv([(0, "conv_winograd"), (1, "conv_halo_tile")])
    monkeypatch.setattr(winograd.check, "ncu_csv", lambda *args, **kw: text)
    with pytest.raises(RuntimeError, match="ncu profiled 2 launches, expected 3"):
        winograd.ncu_rows("conv1")


@pytest.mark.skipif(device.MODE == device.GPU, reason="checks the refusal without a GPU")
def test_ncu_rows_without_a_gpu_say_why_and_return_no_rows(capsys):
    assert winograd.ncu_rows("conv1") == []
    assert "ncu needs a GPU" in capsys.readouterr().out


def test_numpy_winograd_rejects_arrays_that_are_not_4_d():
    with pytest.raises(ValueError, match="4-D NCHW"):
        winograd.numpy_conv(np.zeros((3, 5, 5)), np.zeros((2, 3, 3, 3)))


def test_residency_is_limited_by_shared_memory_too(monkeypatch):
    """A block of WINOGRAD needs over half an SM's shared memory, so one fits whatever the registers."""
    monkeypatch.setattr(winograd.perfmodel, "register_warps", lambda registers: 64)  # room for 8 blocks
    assert winograd.block_instructions(common.PROBLEMS["conv2"])[1] == 1


@pytest.mark.parametrize(("cap", "why"), [("7.5", "sm_80 or newer"), ("8.0", "163 KB"), ("8.9", "99 KB")])
def test_the_page_says_why_a_capped_gpu_cannot_run_winograd(cap, why, monkeypatch):
    """A T4 lacks cp.async; an A100's block may have 163 KB of shared memory, an sm_89 block 99 KB, fewer than
    WINOGRAD's buffers take; the H100 runs it."""
    monkeypatch.setenv("BOOK_MAX_CC", cap)
    said = winograd.unsupported(device.capped(device.REFERENCE_PROPERTIES))
    assert said.startswith(winograd.NAME) and why in said
    assert winograd.unsupported(device.REFERENCE_PROPERTIES) is None
