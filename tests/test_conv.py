"""Every convolution stage against the float64 reference, and bad input rejected with a clear error.

Numba stages run in the CUDA simulator on tiny odd problems; CUDA C++ stages are compiled here
(registers, spills) and run only with -m gpu.
"""

import dataclasses

import numpy as np
import pytest

from gpus import A100, RTX_4090, T4
from kernels.conv import (
    common,
    cuda_stages,
    cudnn_baseline,
    model,
    registry,
    s4_shared,
    s9_autotune,
    s11_halo_autotune,
    stages,
)
from kernels.harness import check, cuda_cpp, device, perfmodel

ODD = common.Problem("odd", n=1, c=5, k=6, h=13, w=5)  # no size a multiple of any tile
NUMBA_STAGES = stages.numba_stages()


@pytest.mark.parametrize("stage", NUMBA_STAGES, ids=lambda s: s.name)
@pytest.mark.parametrize("problem", [common.PROBLEMS["tiny"], ODD], ids=["tiny", "odd"])
def test_stage_matches_reference(stage, problem):
    check.assert_close(*_run(stage, problem, seed=None), atol=common.tolerance(problem), rtol=1e-5)


def _run(stage, p, seed):
    x, f = common.random_inputs(p, seed)
    xs, fs = common.to_layout(x, f, stage.layout)
    if stage.device:
        xs, fs = device.xp().asarray(xs), device.xp().asarray(fs)
    return common.output_to_nchw(common.run(stage, xs, fs), stage.layout), common.reference(x, f)


def test_reference_against_direct_loops():
    x, f = common.random_inputs(common.Problem("r", 2, 3, 4, 4, 5), seed=3)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 4, 5))
    for n, k, h, w in np.ndindex(want.shape):
        want[n, k, h, w] = np.sum(xp[n, :, h : h + 3, w : w + 3] * f[k])
    np.testing.assert_allclose(common.reference(x, f), want, rtol=1e-12, atol=1e-12)


def test_a_wrong_kernel_fails_the_check():
    x, f = common.random_inputs(common.PROBLEMS["tiny"], seed=0)
    shifted = common.reference(x, f)
    shifted[..., 1:] = shifted[..., :-1].copy()  # a classic off-by-one in the column index
    assert not check.compare(shifted, common.reference(x, f), atol=1e-4, rtol=1e-5).ok


def test_flops_and_problems():
    assert common.PROBLEMS["conv1"].flops == 2 * 16 * 64 * 224 * 224 * 64 * 9
    assert round(common.PROBLEMS["conv1"].flops / 1e9, 1) == 59.2
    assert round(common.PROBLEMS["conv2"].flops / 1e9, 1) == 14.8


STAGE = NUMBA_STAGES[2]  # COALESCING: NHWC


@pytest.mark.parametrize(
    "x_shape, f_shape, dtype, error, match",
    [
        ((1, 7, 7, 3), (3, 3, 3, 5), np.float64, TypeError, "expected dtype float32"),
        ((1, 7, 7, 3), (5, 5, 3, 5), np.float32, ValueError, "only 3x3 filters"),
        ((1, 7, 7, 3), (3, 3, 4, 5), np.float32, ValueError, "4 input channels but the input has 3"),
        ((7, 7, 3), (3, 3, 3, 5), np.float32, ValueError, "expected 4 dimensions"),
        ((1, 7, 7, 0), (3, 3, 0, 5), np.float32, ValueError, "empty"),
    ],
)
def test_bad_input_is_rejected(x_shape, f_shape, dtype, error, match, xp):
    with pytest.raises(error, match=match):
        common.run(STAGE, xp.zeros(x_shape, dtype), xp.zeros(f_shape, dtype))


def test_nchw_data_given_to_an_nhwc_stage_is_caught(xp):
    x, f = common.random_inputs(common.PROBLEMS["tiny"], seed=0)  # NCHW / KCRS
    with pytest.raises(ValueError, match=r"takes nhwc filters \(3, 3, C, K\), got shape \(5, 3, 3, 3\), the nchw"):
        common.run(STAGE, xp.asarray(x), xp.asarray(f))


def test_non_contiguous_input_and_wrong_output_are_rejected(xp):
    x, f = map(xp.asarray, common.to_layout(*common.random_inputs(common.PROBLEMS["tiny"], seed=0), "nhwc"))
    with pytest.raises(ValueError, match="C-contiguous"):
        common.run(STAGE, x[:, ::-1], f)
    with pytest.raises(ValueError, match="expected shape"):
        common.launcher(STAGE, x, f, xp.zeros((1, 7, 7, 4), np.float32))


def test_cpu_stage_rejects_device_style_input():
    with pytest.raises(TypeError, match="NumPy array"):
        common.run(NUMBA_STAGES[0], [[1.0]], np.zeros((5, 3, 3, 3), np.float32))


def test_cpu_stage_checks_its_own_arrays():
    seq = NUMBA_STAGES[0]
    assert seq.name == "SEQ" and not seq.device
    x, f = common.random_inputs(common.PROBLEMS["tiny"], seed=0)
    with pytest.raises(ValueError, match="x: expected a non-empty C-contiguous float32 4-D array, got float64"):
        common.run(seq, x.astype(np.float64), f)
    with pytest.raises(ValueError, match="f: expected a non-empty C-contiguous float32 4-D array"):
        common.run(seq, x, np.asfortranarray(f))
    y_shape = common.shapes(common.PROBLEMS["tiny"], "nchw")[2]
    for y in (
        np.zeros(y_shape, np.float64),
        np.zeros(y_shape[:-1] + (8,), np.float32),
        np.zeros(y_shape[:-1] + (2 * y_shape[-1],), np.float32)[..., ::2],
    ):
        with pytest.raises(ValueError, match=r"y: expected a C-contiguous float32 NumPy array of shape \(1, 5, 7, 7\)"):
            common.launcher(seq, x, f, y)


@pytest.mark.parametrize("stage", [NUMBA_STAGES[0], STAGE], ids=lambda s: s.name)
def test_output_overlapping_an_input_or_read_only_is_refused(stage):
    p = common.Problem("same channels", 1, 4, 4, 6, 6)  # C == K: y has x's shape
    x, f = common.to_layout(*common.random_inputs(p, seed=0), stage.layout)
    xp = device.xp() if stage.device else np
    x, f = xp.asarray(x), xp.asarray(f)
    with pytest.raises(ValueError, match="y must not overlap x"):
        common.launcher(stage, x, f, x)
    if xp is not np:
        return  # device memory has no read-only flag
    y = np.empty_like(x)
    y.setflags(write=False)
    with pytest.raises(ValueError, match="y: the output array is read-only"):
        common.launcher(stage, x, f, y)


def test_unknown_layout_is_named():
    x, f = common.to_layout(*common.random_inputs(common.PROBLEMS["tiny"], seed=0), "nhwc")
    with pytest.raises(ValueError, match="stage COALESCING: unknown layout 'chwn'"):
        common.run(dataclasses.replace(STAGE, layout="chwn"), x, f)


@pytest.mark.parametrize("stage", [NUMBA_STAGES[0], STAGE], ids=lambda s: s.name)
def test_tensors_of_2_31_elements_are_refused(stage):
    """N*K*H*W = 1 * 2**15 * 256 * 256 = 2**31 output elements from small arrays; the same count of
    input elements (C = 2**15) from an 8 GiB input (on a CPU, np.zeros maps it without touching it)."""
    xp = device.xp() if stage.device else np
    for c, k in ((1, 2**15), (2**15, 1)):
        x_shape, f_shape, _ = common.shapes(common.Problem("big", n=1, c=c, k=k, h=256, w=256), stage.layout)
        try:
            x = xp.zeros(x_shape, np.float32)
        except MemoryError:  # CuPy's OutOfMemoryError too
            pytest.skip("this machine cannot allocate an 8 GiB array")
        with pytest.raises(ValueError, match=r"2\*\*31 or more elements are not supported"):
            common.run(stage, x, xp.zeros(f_shape, np.float32))


def test_vector_stages_name_their_channel_constraint(xp):
    x, f = map(xp.asarray, common.to_layout(*common.random_inputs(common.Problem("c", 1, 6, 8, 5, 5), seed=0), "nhwc"))
    with pytest.raises(ValueError, match="C must be a multiple of 4, got C = 6"):
        common.run(cuda_stages.S6, x, f)
    x, f = map(xp.asarray, common.to_layout(*common.random_inputs(common.Problem("k", 1, 8, 6, 5, 5), seed=0), "nhwc"))
    with pytest.raises(ValueError, match="K must be a multiple of 4, got K = 6"):
        common.run(cuda_stages.S7, x, f)
    with pytest.raises(ValueError, match="K must be a multiple of 4, got K = 6"):
        common.run(cuda_stages.S10, x, f)


@pytest.mark.skipif(device.MODE == device.GPU, reason="checks the simulator's refusal")
def test_cuda_cpp_stage_says_it_needs_a_gpu():
    x, f = common.to_layout(*common.random_inputs(common.PROBLEMS["odd4"], seed=0), "nhwc")
    with pytest.raises(RuntimeError, match="needs a GPU"):
        common.run(cuda_stages.S5, x, f)


@pytest.mark.parametrize(
    "name, tile, match",
    [
        ("REGISTER TILING", dict(BM=120, BN=64, BKC=8), "BM must be a multiple of 16"),
        ("REGISTER TILING", dict(BM=128, BN=64, BKC=6), "BKC must be a multiple of 4"),
        ("DOUBLE BUFFER", dict(BM=1024, BN=128, BKC=8), "32 to 1024"),
        ("DOUBLE BUFFER", dict(BM=128, BN=64), "tile must set exactly"),
        ("VECTORIZE & UNROLL", dict(BY=8, BN=32, TM=6, BKC=16), "TM must be a multiple of 4"),
        ("SPLIT-K", dict(BM=128, BN=64, BKC=8, SPLIT=65), "SPLIT must be at most 64"),
        ("SPLIT-K", dict(BM=128, BN=64, BKC=8, SPLIT=0), "positive integers"),
        ("HALO TILE", dict(TH=8, TW=12, BN=64, BKC=8, TP=8), "TW must be a multiple of TP"),
        ("HALO TILE", dict(TH=8, TW=16, BN=64, BKC=8, TP=7), "TW must be a multiple of TP"),
        ("HALO TILE", dict(TH=16, TW=16, BN=64, BKC=36, TP=8), "shared memory"),
        ("HALO TILE", dict(TH=8, TW=16, BN=64, BKC=6, TP=8), "BKC must be a multiple of 4"),
        ("HALO TILE", dict(TH=8, TW=16, BN=64, BKC=8), "tile must set exactly"),
    ],
)
def test_bad_tiles_are_rejected(name, tile, match):
    with pytest.raises(ValueError, match=match):
        cuda_stages.stage(name, tile)


def test_numba_stages_check_the_timed_shared_tile_on_a_gpu(monkeypatch):
    """The correctness check runs SHARED with the tile the timing uses wherever a GPU runs it."""
    assert stages.numba_stages()[-1].options == (s4_shared.GPU_TILE if device.on_gpu() else s4_shared.SIM_TILE)
    monkeypatch.setattr(device, "on_gpu", lambda: True)
    assert stages.numba_stages()[-1] is s4_shared.STAGE


def test_shared_stage_rejects_bad_blocks():
    with pytest.raises(ValueError, match="at most 1024"):
        s4_shared.stage(by=64, bn=32, tm=1, bkc=4)


@pytest.mark.parametrize("name", list(cuda_stages.FILES))
def test_cuda_cpp_stages_compile_without_spills(name):
    for arch in ("sm_80", "sm_90"):
        (res,) = cuda_stages.compile_info(name, arch=arch).resources
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, res


def test_autotune_candidates_compile_without_spills():
    tiles = {tuple(t.items()) for p in ("conv1", "conv2") for t in s9_autotune.candidates(common.PROBLEMS[p])}
    assert tiles
    for tile in tiles:
        (res,) = cuda_stages.compile_info("SPLIT-K", dict(tile)).resources
        assert res.spill_stores == 0, (tile, res)


def test_halo_autotune_candidates_fit_the_width_and_compile_without_spills():
    """7 pixels per thread only where 7 divides the width (conv1's 224 and conv2's 14, not 13); every
    candidate compiles without spills; a smaller shared memory leaves the 32-channel, 64-wide tiles out."""
    conv1, conv2 = (common.PROBLEMS[p] for p in ("conv1", "conv2"))
    for p in (conv1, conv2):
        tiles = s11_halo_autotune.candidates(p)
        assert {t["TP"] for t in tiles} == {7, 8} and all(t["TW"] == 2 * t["TP"] for t in tiles)
    odd = common.Problem("w13", n=1, c=16, k=16, h=13, w=13)
    assert {t["TP"] for t in s11_halo_autotune.candidates(odd)} == {8}
    a100 = s11_halo_autotune.candidates(conv2, smem_bytes=163 * 1024)  # an A100's opt-in limit
    assert a100 and all((t["BKC"], t["BN"]) != (32, 64) for t in a100)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="smem_bytes must be a positive integer"):
            s11_halo_autotune.candidates(conv2, bad)
    for tile in {tuple(t.items()) for t in s11_halo_autotune.candidates(conv2)}:
        (res,) = cuda_stages.compile_info("HALO TILE", dict(tile)).resources
        assert res.spill_stores == 0 and res.stack_bytes == 0, (tile, res)


def test_tuner_labels_name_their_tiles():
    """The results rows name each candidate; stored_run reads the tile back from the name."""
    for tuner, tile in (
        (s9_autotune, dict(BM=64, BN=128, BKC=16, SPLIT=2)),
        (s11_halo_autotune, dict(TH=16, TW=14, BN=64, BKC=32, TP=7)),
    ):
        assert tuner.parse(tuner.label(tile)) == tile


def test_halo_tile_with_seven_pixels_per_thread():
    """TP = 7: 14-pixel tile rows, two threads each; conv2's 14 x 14 images need one tile column."""
    p, tile = common.PROBLEMS["conv2"], dict(TH=16, TW=14, BN=64, BKC=32, TP=7)
    assert model.launch_shape("HALO AUTOTUNE", p, tile) == (16 * 1 * 1 * 8, 256)
    assert registry.get("HALO TILE").tile_shape(tile) == (224, 64)
    assert s11_halo_autotune.useful(p, tile) == 196 / 224
    assert s11_halo_autotune.useful(p, registry.get("HALO TILE").tile) == 196 / 256
    assert s11_halo_autotune.useful(common.PROBLEMS["conv1"], registry.get("HALO TILE").tile) == 1.0


def test_autotune_splits_only_problems_with_few_blocks():
    splits = {p: {t["SPLIT"] for t in s9_autotune.candidates(common.PROBLEMS[p])} for p in ("conv1", "conv2")}
    assert splits["conv1"] == {1} and max(splits["conv2"]) > 1


def test_autotune_candidates_use_the_gpus_sm_count(monkeypatch):
    """Reduction slices only while the output tiles give fewer than four blocks per SM: how many SMs
    comes from the GPU (the reference GPU's without one), not from a constant."""
    p = common.PROBLEMS["conv2"]  # 64 x 64 tiles: 49 x 8 = 392 blocks

    def splits(*sms):
        return {t["SPLIT"] for t in s9_autotune.candidates(p, *sms) if (t["BM"], t["BN"]) == (64, 64)}

    assert max(splits()) > 1 and splits(90) == {1}  # 132 SMs: 392 < 4 x 132; 90 SMs: not
    monkeypatch.setattr(device, "on_gpu", lambda: True)
    monkeypatch.setattr(device, "properties", lambda: T4)  # 40 SMs
    assert splits() == {1}
    for bad in (0, 1.5, "132", True):
        with pytest.raises(ValueError, match="sms must be (an integer|>= 1)"):
            s9_autotune.candidates(p, bad)


def test_launch_shape_follows_the_numba_stages_constants(monkeypatch):
    """The model's launch shapes read the stages' own block sizes and tiles, so they cannot drift."""
    from kernels.conv import s1_naive, s3_block_tiling

    p = common.PROBLEMS["conv2"]
    assert model.launch_shape("SHARED", p) == (49 * 16, 256)
    monkeypatch.setattr(s1_naive, "THREADS", 128)
    monkeypatch.setattr(s3_block_tiling, "TP", 2)
    monkeypatch.setitem(s4_shared.GPU_TILE, "tm", 4)
    assert model.launch_shape("NAIVE", p) == (p.pixels * p.k // 128, 128)
    assert model.launch_shape("BLOCK TILING", p) == (p.n * p.h * 7 * p.k // 256, 256)
    assert model.launch_shape("SHARED", p) == (98 * 16, 256)


def test_split_k_counts_the_same_work_in_more_blocks():
    p = common.PROBLEMS["conv2"]
    one = model.sass_counts("SPLIT-K", p, dict(BM=128, BN=64, BKC=8, SPLIT=1))
    three = model.sass_counts("SPLIT-K", p, dict(BM=128, BN=64, BKC=8, SPLIT=3))
    assert three.fp32 == pytest.approx(one.fp32)
    assert model.launch_shape("SPLIT-K", p, dict(BM=128, BN=64, BKC=8, SPLIT=3))[0] == 3 * 200


def test_model_reads_the_sass_of_the_gpu_it_runs_on(monkeypatch):
    """The stages run as CuPy and Numba build them for the GPU at hand, so the model disassembles that
    target; without a GPU, the reference GPU's."""
    if not device.on_gpu():
        assert device.target_arch() == "sm_90"
    monkeypatch.setattr(device, "on_gpu", lambda: True)
    monkeypatch.setattr(device, "properties", lambda: RTX_4090)
    assert device.target_arch() == "sm_89"
    assert model.compiled("DOUBLE BUFFER")[1].arch == "sm_89"


def test_stages_a_gpu_cannot_run_are_named_with_the_reason(monkeypatch):
    """HALO TILE needs cp.async (sm_80) and 113 KB of shared memory per block: an A100 runs every
    stage, an RTX 4090 and a T4 all but HALO TILE, and launching it there says why."""
    assert stages.unsupported(device.REFERENCE_PROPERTIES) == {} == stages.unsupported(A100)
    assert list(stages.unsupported(T4)) == ["HALO TILE"] and "sm_80" in stages.unsupported(T4)["HALO TILE"]
    assert "113 KB" in stages.unsupported(RTX_4090)["HALO TILE"]
    assert [s.name for s in stages.all_gpu(RTX_4090)] == list(stages.GPU_STAGES[:-1])
    assert [s.name for s in stages.all_gpu()] == list(stages.GPU_STAGES)
    monkeypatch.setattr(device, "properties", lambda: RTX_4090)
    with pytest.raises(RuntimeError, match="this GPU allows 99 KB"):
        cuda_stages.S10.launch(None, None, None, common.PROBLEMS["conv1"])


def test_halo_tile_launch_and_shared_memory():
    """HALO TILE tiles the image in 2-D; its dynamic shared memory enters the model's occupancy."""
    tile = cuda_stages.DEFAULTS["HALO TILE"]
    p = common.PROBLEMS["conv2"]  # 14 x 14 images: one 16 x 16 tile each, 8 blocks of 64 output channels
    assert model.launch_shape("HALO TILE", p, tile) == (16 * 1 * 1 * 8, 256)
    _, res = model.compiled("HALO TILE", tile)
    assert res.smem_bytes == cuda_stages.dynamic_smem_bytes("HALO TILE", tile) > 48 * 1024
    assert res.registers <= 255 and res.spill_stores == 0


def test_l1_wavefronts_match_a_direct_count():
    """The closed form (3H - 2)(3W - 2) for in-image taps, against counting them pixel by pixel."""
    p = common.Problem("w", n=2, c=3, k=40, h=5, w=4)
    taps = sum(
        1
        for h in range(p.h)
        for w in range(p.w)
        for r in range(3)
        for s in range(3)
        if 0 <= h + r - 1 < p.h and 0 <= w + s - 1 < p.w
    )
    warps = 2  # 40 output channels: two warps per pixel
    assert model.l1_wavefronts("NAIVE", p) == p.n * warps * p.c * taps * 33 + p.pixels * warps * 32
    assert model.l1_wavefronts("COALESCING", p) == p.n * warps * p.c * taps * 2 + p.pixels * warps
    assert model.l1_wavefronts("REGISTER TILING", p) is None


def test_epilogue_bytes_count_the_output_and_split_k_traffic():
    p = common.Problem("e", n=2, c=8, k=12, h=5, w=7)
    y = 4 * p.n * p.h * p.w * p.k
    assert model.epilogue_bytes("NAIVE", p) == model.epilogue_bytes("HALO TILE", p) == y
    # SPLIT-K's default 3 slices: the zero fill, then a read and a write of y per slice
    assert model.epilogue_bytes("SPLIT-K", p) == 7 * y
    assert model.epilogue_bytes("AUTOTUNE", p, dict(BM=64, BN=64, BKC=8, SPLIT=2)) == 5 * y
    assert model.epilogue_bytes("AUTOTUNE", p, dict(BM=64, BN=64, BKC=8, SPLIT=1)) == y


def test_repeated_compiles_report_resources():
    """NVRTC 13 left the ptxas report out of a second identical compile; compile_info must not."""
    for _ in range(2):
        assert len(cuda_stages.compile_info("REGISTER TILING").resources) == 1


@pytest.mark.parametrize("name", list(cuda_stages.FILES))
@pytest.mark.parametrize("problem", ["conv1", "conv2"])
def test_sass_counts_cover_every_flop(name, problem):
    """The SASS x trips count must find exactly one FFMA per multiply-add of the padded tiles."""
    p = common.PROBLEMS[problem]
    tile = cuda_stages.DEFAULTS[name]
    c = model.sass_counts(name, p, tile)
    assert c is not None
    blocks, threads = model.launch_shape(name, p, tile)
    bm, bn = cuda_stages.tile_shape(name, tile)
    padded_macs = blocks // tile.get("SPLIT", 1) * bm * bn * 9 * p.c  # slices share the work
    assert c.fp32 * 32 == padded_macs
    assert 0 < c.ldst < c.fp32 and c.other > 0


def test_latency_term_sees_the_double_buffer():
    """With the same latencies, a scheduler with two REGISTER TILING warps loses issue slots to the
    step's global loads (each waits to be stored before the next may start); DOUBLE BUFFER's loads are
    in flight during the FMAs. More warps never lower the issue share."""
    p = common.PROBLEMS["conv2"]
    w = perfmodel.Weights(1.0, 4.0, 1.0)
    lat = perfmodel.Latencies(alu=4, shared=23, global_=280, barrier=20, l1=32)
    eta = {
        name: model.latency_efficiency(name, p, w, lat, cuda_stages.DEFAULTS[name])
        for name in ("REGISTER TILING", "DOUBLE BUFFER")
    }
    assert eta["REGISTER TILING"](2) < eta["DOUBLE BUFFER"](2) <= 1
    assert eta["REGISTER TILING"](1) <= eta["REGISTER TILING"](2) <= eta["REGISTER TILING"](3)
    instructions = perfmodel.parse_sass(model.compiled("REGISTER TILING")[0])
    hot = model.hot_loop(instructions)
    assert any(i.base == "BAR" and hot.start <= i.address <= hot.end for i in instructions)


def test_tap_reuse_counts_shared_pixels_exactly():
    """One 3 x 3 image in one block: (3 + 2 + 2)^2 = 49 in-image (pixel, tap) loads of 9 distinct pixels. One pixel per
    block: every load is a first. Slices reuse only among their own taps."""
    p = common.Problem("t", n=1, c=4, k=4, h=3, w=3)
    assert model.tap_reuse(p, bm=9) == pytest.approx(1 - 9 / 49)
    assert model.tap_reuse(p, bm=1) == 0.0
    assert model.tap_reuse(p, bm=9, split=9) == 0.0
    assert 0 < model.tap_reuse(p, bm=9, split=3) < model.tap_reuse(p, bm=9)


def test_l1_hit_rate_needs_the_tap_sweep_to_fit():
    """conv1's sweep over C = 64 channels fits in L1 beside the tiles (about 44% of sectors hit: input
    sectors, BM of BM + BN, at the tap reuse rate); conv2's 512 channels do not; cp.async.cg skips L1."""
    props = device.REFERENCE_PROPERTIES
    res = cuda_cpp.Resources(
        "k", "sm_90", registers=128, spill_stores=0, spill_loads=0, stack_bytes=0, smem_bytes=12 * 1024
    )
    tile = cuda_stages.DEFAULTS["DOUBLE BUFFER"]
    conv1, conv2 = common.PROBLEMS["conv1"], common.PROBLEMS["conv2"]
    h = model.l1_hit_rate("DOUBLE BUFFER", conv1, res, tile, props)
    assert h == pytest.approx(model.tap_reuse(conv1, 128) * 128 / 192)
    assert 0.4 < h < 0.5
    assert model.l1_hit_rate("DOUBLE BUFFER", conv2, res, tile, props) == 0.0
    # with 20 KB of shared memory per block, the resident blocks leave L1 too little for the sweep
    assert model.l1_hit_rate("DOUBLE BUFFER", conv1, dataclasses.replace(res, smem_bytes=20 * 1024), tile, props) == 0.0
    assert model.l1_hit_rate("HALO TILE", conv1, res, cuda_stages.DEFAULTS["HALO TILE"], props) == 0.0
    # an RTX 4090's SM (128 KB of L1 and shared memory) cannot hold a tap's sweep of three resident blocks
    assert model.l1_hit_rate("DOUBLE BUFFER", conv1, res, tile, RTX_4090) == 0.0


def test_l1_size_comes_from_the_compute_capability():
    assert model.l1_smem_bytes(device.REFERENCE_PROPERTIES) == 256 * 1024
    assert model.l1_smem_bytes(A100) == 192 * 1024
    assert model.l1_smem_bytes(T4) == 64 * 1024  # not listed: shared memory alone


def test_l1_size_and_lanes_are_the_chips_own_under_a_cap(monkeypatch):
    """BOOK_MAX_CC lowers the compile target, not the SM the kernels run on: an H100 capped at sm_75 keeps
    its 256 KB of L1 and shared memory and its 128 FP32 lanes per SM."""
    from kernels.harness import ceilings

    monkeypatch.setenv("BOOK_MAX_CC", "7.5")
    capped = device.capped(device.REFERENCE_PROPERTIES)
    assert capped["cc"] == "75"
    assert model.l1_smem_bytes(capped) == 256 * 1024
    assert ceilings.fp32_lanes_per_sm(capped) == 128
    assert ceilings.fp32_lanes_per_sm(T4) == 64


def test_occupancy_charges_the_tail_where_ncu_saw_it():
    """SPLIT-K on conv2: 600 blocks, 3 resident per SM (151 registers). A busiest SM with 5 blocks is
    the spread tail the model assumes; with 6 it ran two full waves."""
    props = device.REFERENCE_PROPERTIES
    res = cuda_cpp.Resources(
        "k", "sm_90", registers=151, spill_stores=0, spill_loads=0, stack_bytes=0, smem_bytes=12544
    )
    p = common.PROBLEMS["conv2"]
    spread = model.occupancy("SPLIT-K", p, res, props=props)
    assert model.occupancy("SPLIT-K", p, res, props=props, busiest_sm_blocks=5) == spread
    assert model.occupancy("SPLIT-K", p, res, props=props, busiest_sm_blocks=6) == pytest.approx(spread * 5 / 6)
    # more than two full waves' worth: blocks freed early in the first wave; charged as one full wave more
    assert model.occupancy("SPLIT-K", p, res, props=props, busiest_sm_blocks=8) == pytest.approx(spread * 5 / 6)


def test_latency_term_charges_l1_misses_the_far_l2_latency():
    """REGISTER TILING's loads wait in line (load, store, next load): more L1 hits, fewer cycles per step;
    a measured far-L2 latency replaces the near one for the misses."""
    p = common.PROBLEMS["conv2"]
    w = perfmodel.Weights(1.0, 4.0, 1.0)
    lat = perfmodel.Latencies(alu=4, shared=23, global_=280, barrier=20, l1=32, l2_far=530)
    tile = cuda_stages.DEFAULTS["REGISTER TILING"]
    eta = {h: model.latency_efficiency("REGISTER TILING", p, w, lat, tile, l1_hit=h)(1) for h in (0.0, 0.5, 1.0)}
    assert eta[0.0] < eta[0.5] < eta[1.0]
    near = model.latency_efficiency("REGISTER TILING", p, w, dataclasses.replace(lat, l2_far=0.0), tile)(1)
    assert eta[0.0] < near < eta[1.0]
    with pytest.raises(ValueError, match="l1_hit"):
        model.latency_efficiency("REGISTER TILING", p, w, lat, tile, l1_hit=1.5)


def test_predict_composes_the_model():
    """model.predict is the chain the chapter walks through: SASS counts, L1 hit rate, latency term,
    occupancy of the waves, perfmodel.predict with the epilogue; a profiler's placement of the last
    wave changes only the occupancy."""
    p, tile = common.PROBLEMS["conv2"], dict(cuda_stages.DEFAULTS["SPLIT-K"])
    w = perfmodel.Weights(1.0, 4.0, 1.07)
    lat = perfmodel.Latencies(alu=4, shared=23, global_=280, barrier=20, l1=32, l2_far=525)
    props = device.REFERENCE_PROPERTIES
    rates = dict(fma_gflops=63000.0, copy_gbps=3000.0, wavefront_rate=1e12)
    got = model.predict("SPLIT-K", p, w, lat, tile=tile, props=props, **rates)
    sass, res = model.compiled("SPLIT-K", tile)
    c = model.sass_counts("SPLIT-K", p, tile, sass=sass)
    eff = model.latency_efficiency("SPLIT-K", p, w, lat, tile, sass, l1_hit=0.0)
    occ = model.occupancy("SPLIT-K", p, res, tile, props, efficiency=eff)
    want = perfmodel.predict(
        p.flops,
        c,
        w,
        peak_gflops=63000.0,
        occupancy=occ,
        fp32_flops=64,
        epilogue_bytes=model.epilogue_bytes("SPLIT-K", p, tile),
        bandwidth_gbps=3000.0,
    )
    assert got.counts == c and got.counted_from == "SASS" and got.l1_hit == 0.0
    assert got.prediction.gflops == pytest.approx(want.gflops)
    spread = model.predict("SPLIT-K", p, w, lat, tile=tile, props=props, busiest_sm_blocks=5, **rates)
    assert spread.prediction.occupancy > got.prediction.occupancy and spread.counts == got.counts
    # 600 blocks of 4 warps, 3 per SM: the rule clusters the 204 left (latency-bound first wave), ncu's 5 spread them
    assert (got.waves.blocks, got.waves.warps_per_block, got.waves.resident) == (600, 4, 3)
    assert got.waves.per_sm == [3, 3] and spread.waves.per_sm == [3, 2] and spread.waves.tail == 2
    placed = got.place(5)  # placed again, without compiling or simulating again
    assert placed.prediction == spread.prediction and placed.waves == spread.waves
    assert placed.efficiency is got.efficiency
    assert spread.place(None).prediction == got.prediction
    # the same chain with the pipes side by side: fewer slots per warp, so E rises and η can only fall
    # (the same latency over less issue work, issued one cycle per instruction); E's held slots make
    # the step longer than side by side's, so side by side predicts the faster rate
    side = model.predict("SPLIT-K", p, w, lat, tile=tile, props=props, slots=perfmodel.side_by_side, **rates)
    side_eff = model.latency_efficiency("SPLIT-K", p, w, lat, tile, sass, slots=perfmodel.side_by_side)
    free = model.latency_efficiency("SPLIT-K", p, w, lat, tile, sass, held=False)
    assert side.prediction.efficiency == perfmodel.efficiency(c, w, perfmodel.side_by_side) > got.prediction.efficiency
    assert all(side_eff(n) <= free(n) for n in (1, 2, 3)) and side_eff(1) < free(1)
    assert side.prediction.gflops > got.prediction.gflops


def test_latency_term_holds_e_slots_for_two_warps_per_scheduler():
    """An autotune candidate of 256 x 64 pixels and channels (BKC 16) fits one block of 8 warps per SM,
    2 per scheduler, on conv2. Issued one cycle per instruction, they hide their loads' latency in the
    slots E charges beyond one (η 1); holding E's slots, they do not. The last wave of 128 x 32 blocks
    (BKC 8, SPLIT 2: 800 blocks, 6 per SM) is placed by the dependencies' pace, which spreads it, and
    the waves run at the held pace."""
    p = common.PROBLEMS["conv2"]
    w = perfmodel.Weights(1.0, 4.0, 1.07)
    lat = perfmodel.Latencies(alu=4, shared=23, global_=280, barrier=20, l1=32, l2_far=525)
    tile = dict(BM=256, BN=64, BKC=16, SPLIT=1)
    free = model.latency_efficiency("AUTOTUNE", p, w, lat, tile, held=False)
    held = model.latency_efficiency("AUTOTUNE", p, w, lat, tile)
    assert free(2) == 1.0 > held(2) and held(4) >= held(2)
    props, rates = device.REFERENCE_PROPERTIES, dict(fma_gflops=63000.0, copy_gbps=3000.0, wavefront_rate=1e12)
    tile = dict(BM=128, BN=32, BKC=8, SPLIT=2)
    got = model.predict("AUTOTUNE", p, w, lat, tile=tile, props=props, **rates)
    before = model.predict("AUTOTUNE", p, w, lat, tile=tile, props=props, held=False, **rates)
    assert got.waves.per_sm == before.waves.per_sm == [6, 1]
    assert got.efficiency(3) < before.efficiency(3) == 1.0
    assert got.prediction.gflops < before.prediction.gflops


def test_load_rate_kernels_measure_the_pipe_not_the_issue():
    """One LDS.32 or LDG.32 per SM and cycle is 4 issue slots of each of the 4 schedulers: the rate
    kernels' loops issue at most 3 instructions per load, so the load pipe, not the issue, sets the rate."""
    from kernels.harness import sass

    text = sass.disassemble_text(cuda_cpp.compile_cubin("conv/rates.cu", "sm_90").cubin)
    for kernel, load in (("lds_rate", "LDS"), ("ldg_rate", "LDG")):
        instructions = perfmodel.parse_sass(text, kernel)
        bodies = [
            [i for i in instructions if lp.start <= i.address <= lp.end] for lp in perfmodel.find_loops(instructions)
        ]
        body = max(bodies, key=lambda b: sum(i.base == load for i in b))  # the timed loop, not the table fill
        loads = sum(i.base == load for i in body)
        assert loads >= 8 and len(body) / loads <= 3, (kernel, loads, len(body))  # issue well under the pipe


def test_mix_loop_counts_one_iteration_of_chains_and_loads():
    """mix_rate's loop is one iteration: MIX_LOADS loads, at least the 16 integer instructions of the
    eight (add, xor) chains, no FP32."""
    for loads in (0, 2, 8):
        c = model.mix_counts(loads, "sm_90")
        assert (c.fp32, c.ldst) == (0, loads) and 16 <= c.other <= 32, (loads, c)


def test_mix_slots_add_up_or_overlap():
    """E's rule sums each class's weighted count; side by side, the largest of the instruction count
    and each class's own time sets the pace."""
    w = perfmodel.Weights(1.0, 4.0, 1.0)
    assert model.mix_slots(perfmodel.Counts(0, 8, 26), w) == {"E: classes take turns": 58, "pipes side by side": 34}
    assert model.mix_slots(perfmodel.Counts(0, 16, 30), w) == {"E: classes take turns": 94, "pipes side by side": 64}
    assert model.mix_slots(perfmodel.Counts(2, 0, 0), w)["pipes side by side"] == 2.0


# --- on a real GPU ------------------------------------------------------------------------------

GPU_PROBLEMS = [
    common.PROBLEMS["odd4"],
    common.Problem("odd37", n=1, c=20, k=36, h=37, w=13),
    common.Problem("batch", n=3, c=8, k=132, h=5, w=7),
]


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("stage", stages.all_gpu(), ids=lambda s: s.name)
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=lambda p: p.name)
def test_gpu_stage_matches_reference(stage, problem):
    check.assert_close(*_run(stage, problem, seed=None), atol=common.tolerance(problem), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("stage", [s for s in cuda_stages.STAGES.values() if s.c_multiple == 1], ids=lambda s: s.name)
@pytest.mark.parametrize("problem", [common.PROBLEMS["tiny"], ODD], ids=["tiny", "odd"])
def test_gpu_scalar_cuda_stage_takes_any_channel_count(stage, problem):
    """A CUDA C++ stage with one-word loads runs where C and K are no multiples of 4, as the Numba stages do."""
    check.assert_close(*_run(stage, problem, seed=None), atol=common.tolerance(problem), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
def test_gpu_autotune_picks_a_correct_tile():
    import cupy

    p = GPU_PROBLEMS[1]
    x, f = common.to_layout(*common.random_inputs(p), "nhwc")
    x, f = cupy.asarray(x), cupy.asarray(f)
    y = cupy.empty(common.shapes(p, "nhwc")[2], dtype=cupy.float32)
    tiles = [t for t in s9_autotune.candidates(p) if t["BKC"] == 8][:2]
    tiles += [dict(tiles[0], SPLIT=4)]
    best, rows = s9_autotune.tune(x, f, y, p, tiles=tiles, repeat=3)
    assert best in [{k: r[k] for k in s9_autotune.KEYS} for r in rows]
    check.assert_close(*_run(s9_autotune.stage(best), p, seed=None), atol=common.tolerance(p), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
def test_gpu_halo_autotune_picks_a_correct_tile():
    import cupy

    p = common.Problem("w14", n=3, c=20, k=36, h=14, w=14)
    x, f = common.to_layout(*common.random_inputs(p), "nhwc")
    x, f = cupy.asarray(x), cupy.asarray(f)
    y = cupy.empty(common.shapes(p, "nhwc")[2], dtype=cupy.float32)
    tiles = [t for t in s11_halo_autotune.candidates(p) if t["BKC"] == 16 and t["BN"] == 32]
    assert {t["TP"] for t in tiles} == {7, 8}
    best, rows = s11_halo_autotune.tune(x, f, y, p, tiles=tiles, repeat=3)
    assert best in [{k: r[k] for k in s11_halo_autotune.KEYS} for r in rows]
    stage = s11_halo_autotune.stage(best)
    assert stage.name == "HALO AUTOTUNE" and stage.options == best
    check.assert_close(*_run(stage, p, seed=None), atol=common.tolerance(p), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("split", [2, 5, 64])
def test_gpu_split_k_slices_add_up(split):
    """More slices than steps leaves some slices empty; every split must still sum to the reference."""
    p = GPU_PROBLEMS[1]
    s = cuda_stages.stage("SPLIT-K", dict(BM=64, BN=32, BKC=8, SPLIT=split))
    check.assert_close(*_run(s, p, seed=None), atol=common.tolerance(p), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
def test_gpu_split_k_zeroes_a_numba_device_array():
    """validate accepts any device array: a CUDA C++ stage launches on Numba's arrays too, and SPLIT-K
    zeroes a Numba output before its slices add to it."""
    from numba import cuda

    p = GPU_PROBLEMS[1]
    x, f = common.random_inputs(p, seed=0)
    xs, fs = common.to_layout(x, f, "nhwc")
    y = cuda.to_device(np.full(common.shapes(p, "nhwc")[2], np.nan, dtype=np.float32))
    s = cuda_stages.stage("SPLIT-K", dict(BM=64, BN=32, BKC=8, SPLIT=3))
    common.launcher(s, cuda.to_device(xs), cuda.to_device(fs), y)()
    cuda.synchronize()
    check.assert_close(
        common.output_to_nchw(y.copy_to_host(), "nhwc"), common.reference(x, f), atol=common.tolerance(p), rtol=1e-5
    )


HALO_TILES = [
    dict(TH=8, TW=16, BN=64, BKC=16, TP=8),
    dict(TH=8, TW=16, BN=64, BKC=8, TP=8),
    dict(TH=16, TW=16, BN=64, BKC=8, TP=8),
    dict(TH=16, TW=14, BN=64, BKC=32, TP=7),
    dict(TH=8, TW=14, BN=32, BKC=16, TP=7),
]
# (the default, TH=16 TW=16 BN=64 BKC=16 TP=8, runs in test_gpu_stage_matches_reference)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("tile", HALO_TILES, ids=lambda t: "x".join(str(v) for v in t.values()))
@pytest.mark.parametrize(
    "problem",
    GPU_PROBLEMS
    + [common.Problem("c68", n=2, c=68, k=72, h=9, w=33), common.Problem("w21", n=2, c=36, k=40, h=15, w=21)],
    ids=lambda p: p.name,
)
def test_gpu_halo_tile_variants(tile, problem):
    """HALO TILE tiles of 8 and 7 pixels per thread: halo edges, partial tiles and channel chunks, partial K
    blocks, widths that 7 divides (w21) and that it does not."""
    s = cuda_stages.stage("HALO TILE", tile)
    check.assert_close(*_run(s, problem, seed=None), atol=common.tolerance(problem), rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
def test_gpu_misaligned_view_is_rejected():
    import cupy

    x, f = common.to_layout(*common.random_inputs(common.PROBLEMS["odd4"], seed=0), "nhwc")
    flat = cupy.zeros(x.size + 1, dtype=cupy.float32)
    xs = flat[1:].reshape(x.shape)  # contiguous, but 4 bytes past a 16-byte boundary
    with pytest.raises(ValueError, match="16-byte aligned"):
        common.run(cuda_stages.S6, xs, cupy.asarray(f))


def test_cudnn_baseline_says_in_one_line_why_it_cannot_run():
    if device.MODE == device.GPU and not cudnn_baseline.unavailable():
        pytest.skip("cuDNN runs here")
    why = cudnn_baseline.unavailable()
    assert why.startswith("cuDNN baseline: ") and "\n" not in why
    with pytest.raises(RuntimeError, match="cuDNN baseline"):
        cudnn_baseline.CudnnConv(GPU_PROBLEMS[1])


def test_gemm_shape_holds_the_problems_multiply_adds():
    for p in common.PROBLEMS.values():
        m, n, k = cudnn_baseline.gemm_shape(p)
        assert (m, n, k) == (p.n * p.h * p.w, p.k, 9 * p.c)
        assert 2 * m * n * k == p.flops


def test_sgemm_reference_refuses_tf32_and_a_machine_without_gpu(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")
    with pytest.raises(RuntimeError, match="TF32"):
        cudnn_baseline.sgemm_gflops(GPU_PROBLEMS[1])
    monkeypatch.delenv("CUPY_TF32")
    if device.MODE != device.GPU:
        with pytest.raises(RuntimeError, match="needs a GPU"):
            cudnn_baseline.sgemm_gflops(GPU_PROBLEMS[1])


def test_cudnn_graph_refuses_an_unknown_layout():
    from kernels.harness import cudnn_conv

    with pytest.raises(ValueError, match="layout must be one of"):
        cudnn_conv.ConvFprop(1, 4, 5, 5, 4, dtype="float", layout="chwn")


@pytest.mark.gpu
@pytest.mark.skipif(device.MODE != device.GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("layout", cudnn_baseline.LAYOUTS)
def test_gpu_cudnn_baseline_matches_reference(layout):
    """The fastest FP32 plan of each layout computes the convolution: the chapter times both."""
    if cudnn_baseline.unavailable():
        pytest.skip(cudnn_baseline.unavailable())
    import cupy

    p = GPU_PROBLEMS[1]
    x, f = common.random_inputs(p)
    conv = cudnn_baseline.CudnnConv(p, layout)
    xs, fs = conv.operands(x, f)
    y = check.poison(cupy.empty(common.shapes(p, layout)[2], dtype=cupy.float32))
    best = conv.fastest(conv.time_plans(xs, fs, y, repeat=3))
    check.poison(y)
    conv.launcher(best.index, xs, fs, y)()
    check.assert_close(common.output_to_nchw(y, layout), common.reference(x, f), atol=common.tolerance(p), rtol=1e-5)


@pytest.mark.gpu
def test_measure_mix_reports_every_rule_for_every_load_count():
    """One row per load count and metric; every row but "measured" is the SASS count or mix_slots of
    it with the weights of the rates given, so it is checked exactly. No measured speed is asserted."""
    rates = model.measure_rates(repeat=3)
    assert set(rates) == {"fp32", "ldst", "other", "ldg"}
    assert all(np.isfinite(v) and v > 0 for v in rates.values()), rates
    rows = model.measure_mix(rates, loads=(0, 4), repeat=3)
    metrics = ("instructions", "measured", "E: classes take turns", "pipes side by side")
    assert [(r["problem"], r["metric"]) for r in rows] == [(f"{n} loads", m) for n in (0, 4) for m in metrics]
    assert all(set(r) == {"kernel", "problem", "metric", "value", "unit"} for r in rows)
    assert all(r["kernel"] == "mix" and r["unit"] == "slots" for r in rows)
    w = perfmodel.weights(rates["fp32"], rates["ldst"], rates["other"])
    for n in (0, 4):
        got = {r["metric"]: r["value"] for r in rows if r["problem"] == f"{n} loads"}
        counts = model.mix_counts(n)
        assert got["instructions"] == counts.total
        assert {m: got[m] for m in metrics[2:]} == model.mix_slots(counts, w)
        assert np.isfinite(got["measured"]) and got["measured"] > 0


@pytest.mark.gpu
def test_measured_latencies_are_finite_cycles():
    """Every latency the model uses is measured (none left at the default 0) and finite; how large each
    is belongs to the notebook, not to a test."""
    lat = model.measure_latencies()
    values = dataclasses.asdict(lat)
    assert set(values) == {"alu", "shared", "global_", "barrier", "l1", "l2_far"}
    assert all(isinstance(v, float) and np.isfinite(v) and v > 0 for v in values.values()), values
