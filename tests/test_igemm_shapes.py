"""best_step's choice per problem (its model, its constraints, its errors) and the shape table's
measurement with fake launches and a fake timer in the simulator."""

import numpy as np
import pytest

from gpus import A100, H100, T4
from kernels.harness import device, results
from kernels.igemm import common as ig
from kernels.igemm import shapes

SHAPES = list(shapes.SHAPES.values())


def test_the_table_has_the_shapes_the_chapter_compares():
    assert len(SHAPES) >= 8 and ig.PROBLEM in SHAPES
    m_n = [p.gemm[:2] for p in SHAPES]
    assert any(p.n < 8 for p in SHAPES), "a small batch"
    assert any(m % ig.BLOCK_M and n % ig.BLOCK_N for m, n in m_n), "ragged M and N"
    assert any(p.stride == 2 for p in SHAPES) and any(p.r == p.s == 1 for p in SHAPES)


@pytest.mark.parametrize("problem", SHAPES, ids=lambda p: p.label())
def test_best_step_picks_the_cheapest_calibrated_variant(problem):
    rates, heads = ig.stored_rates(H100), ig.stored_heads()
    assert rates, "the chapter's stored run calibrates the model"
    choice = ig.best_step(problem, H100)
    estimates = {}
    for v, r in rates.items():
        if v not in ig.variants(problem, H100):
            continue
        fixup = ig.step_info(v[0]).fixup
        for s in range(1, ig.k_steps(problem, v[0]) // 2 + 1) if v[0] in ig.SPLIT_K else (1,):
            head = heads.get(v[0], 1.0)
            if s == 1:
                partials_ms = 0.0
            elif fixup:  # the splits add their partials in the kernel: no second launch
                partials_ms = ig.fixup_ms(problem, s, v[0])
            else:
                partials_ms = ig.split_reduce_ms(problem, s)
            cost = ig._cost(v[0], v[1], problem, H100, s, head, block_n=v[2])
            estimates[(*v, s)] = ig.launch_ms() + cost / r + partials_ms
    assert choice.estimate_ms == pytest.approx(min(estimates.values()))
    assert (choice.step, choice.stages, choice.tile[1], choice.splits) in estimates
    info = ig.step_info(choice.step)
    assert ig.unsupported(choice.step, H100, choice.stages, choice.tile[1]) is None
    if info.pipelined:
        low, high = info.stage_range(choice.tile[1])
        assert low <= choice.stages <= high
    assert choice.tiles <= choice.waves * H100["sms"] * choice.slots < choice.tiles + H100["sms"] * choice.slots
    assert 0 < choice.fill <= 1


def test_split_k_only_where_the_tiles_leave_sms_idle():
    """The model splits K where the output tiles are fewer than the SMs and each block is long (VGG's
    conv5 at batch 1: 8 tiles of 72 K steps), never on the source problem's full waves."""
    for problem in SHAPES:
        choice = ig.best_step(problem, H100)
        if choice.splits > 1:
            assert choice.step in ig.SPLIT_K and choice.tiles // choice.splits < H100["sms"]
            assert choice.kwargs["splits"] == choice.splits and choice.name.endswith(f"_split{choice.splits}")
    assert ig.best_step(ig.PROBLEM, H100).splits == 1
    vgg5 = ig.best_step(shapes.SHAPES["vgg conv5 N1 14x14 512-512"], H100)
    assert vgg5.splits > 1 and vgg5.tiles <= H100["sms"]
    assert ig.split_reduce_ms(ig.PROBLEM, 4) > ig.split_reduce_ms(ig.PROBLEM, 2) > 0


def test_the_fixup_is_charged_its_round_trips_and_its_workspace_at_the_copy_rate():
    """Step 12's splits wait through FIXUP_ROUND_TRIPS DRAM latencies, and its whole workspace (one fp32 tile
    per unit) is written and read once at the machine chapter's copy rate: the cost grows with the split."""
    from kernels.harness import quantities

    step = next(s.number for s in ig.REGISTRY if s.fixup)
    latency = ig.FIXUP_ROUND_TRIPS * quantities.dram_latency_ns()[0] / 1e6
    small = shapes.SHAPES["vgg conv5 N1 14x14 512-512"]  # 8 tiles: 8 x 8 x 64 KB = 4 MB at 8 splits
    traffic = 2 * 8 * 8 * 4 * 128 * 128 / quantities.copy_gbps()[0] / 1e6
    assert ig.fixup_ms(small, 8, step) == pytest.approx(latency + traffic)
    assert ig.fixup_ms(small, 24, step) - latency == pytest.approx(3 * traffic)  # 24 splits of 3 K steps
    big = ig.PROBLEM  # 1568 tiles: 196 MB at 2 splits
    workspace = 4 * ig.FIXUP_TILE * ig.PROBLEM.tiles() * 2
    assert ig.fixup_ms(big, 2, step) == pytest.approx(latency + 2 * workspace / quantities.copy_gbps()[0] / 1e6)
    rate = ig.stored_rates(H100).get((11, 5, ig.BLOCK_N), 1.0)
    split = ig.estimate_ms(step, 5, small, H100, rate, 8)
    work = ig._cost(step, 5, small, H100, 8) / rate
    assert split == pytest.approx(ig.launch_ms() + work + latency + traffic)  # one launch: no second kernel


def test_a_ping_pong_block_runs_its_tiles_one_after_another():
    """Steps 11 and 12 keep one block per SM; its two consumers take turns at the tensor cores, so an SM
    with three tiles pays three tiles' work, not two rounds of two."""
    seven = ig.Problem(n=1, h=28, w=32, c=64, k=128)  # 7 tiles: one tile per SM
    three = ig.Problem(n=16, h=56, w=56, c=256, k=512, r=1, s=1, pad=0, stride=2)  # 392 tiles: 3 per SM
    assert three.tiles() == 392 and H100["sms"] == 132
    for info in ig.REGISTRY:
        if info.ping_pong:
            step, stages = info.number, info.default_stages
            assert ig.tile_model(step, stages, ig.PROBLEM, H100)[2] == 1, step
            assert ig._cost(step, stages, seven, H100) == ig.tile_model(step, stages, seven, H100)[4]
            assert ig._cost(step, stages, three, H100) == 3 * ig.tile_model(step, stages, three, H100)[4]


def test_best_step_on_the_source_problem_is_the_stored_fastest():
    stored = results.latest("igemm", results.REFERENCE_GPU)
    names = {v: ig.stored_name(v[0], v[1], block_n=v[2]) for v in ig.variants(ig.PROBLEM, H100)}
    times = {
        v: float(stored[(name, "source problem", "ms")]["value"])
        for v, name in names.items()
        if (name, "source problem", "ms") in stored
    }
    fastest = min(times, key=times.get)
    choice = ig.best_step(ig.PROBLEM, H100)
    assert (choice.step, choice.stages, choice.tile[1]) == fastest


def test_the_calibrated_model_gives_the_stored_times_of_the_source_problem():
    """Each rate makes estimate_ms, launch included, give the variant's stored time on the source problem;
    the launch is the probes' empty kernel, so the rate belongs to the tiles' work alone."""
    stored = results.latest("igemm", results.REFERENCE_GPU)
    rates, heads = ig.stored_rates(H100), ig.stored_heads()
    assert rates and 0 < ig.launch_ms() < 0.1
    for (step, stages, block_n), rate in rates.items():
        names = [ig.stored_name(step, stages, block_n=block_n)] + (
            [ig.stored_name(step, None)] if stages == ig.default_stages(step) else []
        )
        ms = next(
            float(stored[(n, "source problem", "ms")]["value"]) for n in names if (n, "source problem", "ms") in stored
        )
        head = heads.get(step, 1.0)
        estimate = ig.estimate_ms(step, stages, ig.PROBLEM, H100, rate, head=head, block_n=block_n)
        assert estimate == pytest.approx(ms, rel=1e-12)
        work_ms = ig._cost(step, stages, ig.PROBLEM, H100, head=head, block_n=block_n) / rate
        assert work_ms == pytest.approx(ms - ig.launch_ms(), rel=1e-12)


def test_the_depth_fit_gives_a_tile_s_head_in_k_steps():
    """A line with a known launch, head and K-step time gives them back; the stored sweeps give the steps
    the chapter sweeps a head, and the others none (the model charges them one K step)."""
    per_step, tiles = 0.002, 6  # ms per K step of a block's 6 tiles
    ms = {name: ig.launch_ms() + tiles * per_step * (3.5 + ig.k_steps(p)) for name, p in ig.DEPTH_SWEEP.items()}
    fixed, fitted = ig.depth_fit(ms)
    assert fitted == pytest.approx(tiles * per_step) and fixed / fitted == pytest.approx(3.5)
    heads = ig.stored_heads()
    assert set(heads) == {8, 9, 10, 11, 12} and all(h > 0 for h in heads.values())
    assert ig.stored_heads("no-such-gpu") == {}


def test_a_longer_head_makes_short_k_tiles_dearer():
    """The head is charged per tile: with C = 64 (9 K steps per tile) a head of 3.5 K steps costs 25% more
    than one of 1, with C = 512 (72 K steps) 3.4%."""
    short, long = ig.DEPTH_SWEEP["C=64"], ig.DEPTH_SWEEP["C=512"]
    assert ig._cost(10, 4, short, H100, head=3.5) / ig._cost(10, 4, short, H100) == pytest.approx(12.5 / 10)
    assert ig._cost(10, 4, long, H100, head=3.5) / ig._cost(10, 4, long, H100) == pytest.approx(75.5 / 73)


def test_best_step_rules_with_equal_rates():
    """Equal rates leave the tiles: a narrow N wastes most of a 256-wide tile; where both tile widths
    give the same work per SM, the later step wins the tie; a faster rate decides the rest."""
    equal = {(6, 4, 128): 1.0, (8, 4, 256): 1.0}  # one block per SM each
    narrow = ig.Problem(n=32, h=56, w=56, c=64, k=64)
    assert ig.best_step(narrow, H100, equal).tile == (128, 128)
    wide = ig.Problem(n=256, h=14, w=14, c=256, k=256)
    assert ig._cost(6, 4, wide, H100) == ig._cost(8, 4, wide, H100)
    assert ig.best_step(wide, H100, equal).step == 8
    assert ig.best_step(narrow, H100, {**equal, (8, 4, 256): 2.5}).step == 8


def test_the_narrow_build_halves_the_tile_work_where_the_layer_has_64_output_channels():
    """At equal rates a 128x64 tile wins where K = 64 (a 128-wide tile is half zeros) and ties, so loses to
    the wider tile, where K fills both."""
    conv2 = shapes.SHAPES["resnet conv2 N32 56x56 64-64"]
    narrow = ig.step_info(11).narrow_stages
    wide, thin = ig.tile_model(11, 5, conv2, H100), ig.tile_model(11, narrow, conv2, H100, block_n=ig.NARROW_N)
    assert thin[0] == (128, 64) and thin[1] == wide[1] == 784 and 2 * thin[4] == wide[4]
    equal = {(11, 5, 128): 1.0, (11, narrow, ig.NARROW_N): 1.0}
    choice = ig.best_step(conv2, H100, equal)
    assert choice.tile == (128, 64) and choice.kwargs == {"stages": narrow, "block_n": ig.NARROW_N}
    assert choice.name == f"v11_ping_pong_64wide_{narrow}stages"
    assert ig.best_step(ig.PROBLEM, H100, equal).tile == (128, 128)


def test_best_step_falls_back_to_default_depths_without_stored_rates():
    choice = ig.best_step(ig.PROBLEM, H100, rates={})
    assert choice.estimate_ms is None and choice.stages == ig.default_stages(choice.step)
    costs = {s: ig._cost(s, ig.default_stages(s), ig.PROBLEM, H100) for s in ig.STEPS if s > 1}
    assert costs[choice.step] == min(costs.values())


def test_best_step_follows_the_gpu():
    assert ig.best_step(ig.PROBLEM, A100).step in (2, 3, 4, 5)  # no wgmma before Hopper
    assert ig.best_step(ig.PROBLEM, T4).step == 2  # WMMA only: mma.sync's ldmatrix steps need sm_80
    with pytest.raises(ValueError, match="no tensor-core step runs on a GPU of compute capability 60"):
        ig.best_step(ig.PROBLEM, {**T4, "cc": "60"})


@pytest.mark.parametrize(
    ("problem", "match"),
    [
        (ig.Problem(n=1, h=8, w=8, c=3, k=16), r"C = 3 is not a multiple of 8.*pad the channels .* use step 1$"),
        (ig.Problem(n=1, h=8, w=8, c=16, k=12), r"K = 12 output channels is not a multiple of 8.*pad the .* step 1$"),
        (ig.Problem(n=2**15, h=128, w=128, c=8, k=8), r"x has 4294967296 elements.*32-bit integers.*split the batch"),
    ],
)
def test_best_step_raises_the_steps_errors(problem, match):
    with pytest.raises(ValueError, match=match):
        ig.best_step(problem, H100)
    if problem.c * problem.h < 2**20:  # the same words as a step's own validation
        x = np.zeros(problem.x_shape, np.float16)
        w = np.zeros(problem.w_shape, np.float16)
        with pytest.raises(ValueError, match=match):
            ig.validate(2, x, w)


# Layers the TMA engine's im2col mode cannot describe (a stride over 8, box corners past [-128, 127]):
# steps 10-12 refuse them, step 9's threads gather them.
GATHERED_ONLY = [
    ig.Problem(n=1, h=40, w=40, c=8, k=8, r=1, s=1, pad=0, stride=9),
    ig.Problem(n=64, h=200, w=200, c=64, k=256, r=1, s=1, pad=0, stride=9),
    ig.Problem(n=2, h=6, w=6, c=64, k=64, pad=129),
]


@pytest.mark.parametrize("problem", GATHERED_ONLY, ids=lambda p: p.label())
def test_best_step_never_picks_a_step_that_refuses_the_layer(problem):
    """Not with the stored rates, not where the refusing steps would be by far the cheapest, not without
    rates: the choice is among the steps that take the layer, and its validation passes."""
    refusing = {s.number for s in ig.REGISTRY if ig.refusal(s.number, problem)}
    assert refusing == {s.number for s in ig.REGISTRY if s.tma_im2col}
    assert not refusing & {v[0] for v in ig.variants(problem, H100)}
    rates = ig.stored_rates(H100)
    cheap = {v: r * (1e6 if v[0] in refusing else 1) for v, r in rates.items()}
    for given in (None, cheap, {}):
        choice = ig.best_step(problem, H100, given)
        assert choice.step not in refusing and ig.refusal(choice.step, problem) is None, (given, choice)
    if problem.c * problem.h * problem.w * problem.n < 2**20:
        x, w = np.zeros(problem.x_shape, np.float16), np.zeros(problem.w_shape, np.float16)
        assert ig.validate(choice.step, x, w, pad=problem.pad, stride=problem.stride) == problem
    with pytest.raises(ValueError, match=r"^steps: .*step 10\b.*; use step 9, whose threads gather it$"):
        ig.best_step(problem, H100, steps=tuple(sorted(refusing)))
    assert ig.best_step(problem, H100, steps=(9, *refusing)).step == 9


def test_best_step_picks_a_step_that_takes_every_table_layer():
    for problem in [*SHAPES, *ig.ODD_PROBLEMS, ig.CI_PROBLEM]:
        for props in (H100, A100, T4):
            choice = ig.best_step(problem, props)
            assert ig.refusal(choice.step, problem) is None
            assert ig.unsupported(choice.step, props, choice.stages, choice.tile[1]) is None


def test_best_step_wants_a_problem():
    with pytest.raises(TypeError, match="problem: expected a Problem"):
        ig.best_step((256, 14, 14, 256, 512))


TINY = {"tiny": ig.CI_PROBLEM, "tiny stride 2": ig.Problem(n=1, h=7, w=9, c=8, k=16, stride=2)}


def _fake(wrong=()):
    """A step launcher that writes the reference (or zeros for the variants in ``wrong``), timed at
    1 ms plus 0.1 ms per step, and baselines at 0.5 ms and 2 ms."""

    def step_launch(step, stages, x, w, out, problem, splits=None, block_n=None):
        def launch():
            ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride)
            out[...] = 0 if (step, stages) in wrong or (step, stages, splits) in wrong else ref

        launch.ms = 1 + 0.1 * step + 0.01 * (splits or 1)
        return launch

    def baseline(ms):
        def make(problem, x, w, out):
            def launch():
                out[...] = ig.reference(x, w, pad=problem.pad, stride=problem.stride)

            launch.ms = ms
            return launch

        return make

    return step_launch, {"cudnn_frontend": baseline(0.5), "torch": baseline(2.0)}


def test_measure_times_checked_variants_and_records_best_step(tmp_path, capsys):
    step_launch, baselines = _fake(wrong={(2, None)})
    rows = shapes.measure(TINY, timer=lambda launch: launch.ms, step_launch=step_launch, baselines=baselines)
    assert capsys.readouterr().out.count("FAIL  v2_wmma on tiny") == 2
    kernels = {(r["kernel"], r["problem"]) for r in rows}
    assert ("shape_v2_wmma", "tiny") not in kernels, "a wrong result gets no row"
    assert {r["kernel"] for r in rows} <= set(shapes.kernels())
    for name, problem in TINY.items():
        n_variants = len(ig.variants(problem))
        assert sum(r["problem"] == name and r["metric"] == "ms" for r in rows) == n_variants - 1 + 2 + 1
        best = {r["metric"]: r["value"] for r in rows if r["problem"] == name and r["kernel"] == "shape_best_step"}
        chosen = ig.best_step(problem)
        assert best == {
            "ms": pytest.approx(1.01 + 0.1 * chosen.step),
            "step": chosen.step,
            "stages": chosen.stages or 0,
            "splits": 1,
            "block_n": chosen.tile[1],
        }
    env = {"gpu_slug": "fake-gpu", "gpu": "Fake GPU", "date": "2026-01-01T00:00:00Z"}
    path = results.record("igemm", rows, env=env, root=tmp_path)
    stored = list(results.latest("igemm", "fake-gpu", root=tmp_path).values())
    assert path.exists() and len(stored) == len(rows)
    table = shapes.table(stored, H100, TINY)
    assert [r["shape"] for r in table] == list(TINY)
    for r in table:
        step = ig.best_step(TINY[r["shape"]]).step
        assert r["cuDNN"] == shapes.BASELINES["cudnn_frontend"] and r["ratio"] == pytest.approx(
            0.5 / (1.01 + 0.1 * step)
        )
        assert r["verdict"] == "loses" and r["fastest step"] == "v3_ldmatrix"  # step 2 was wrong
    s = shapes.summary(table)
    assert s["won"] == 0 and s["shapes"] == 2 and s["geomean"] < 1
    assert sum(s["lost"].values()) == 2, "every lost layer falls in one class of reason"
    assert all(r["why"].startswith(r["class"]) and s["lost"][r["class"]] for r in table)


def test_the_narrow_calibration_times_each_narrow_build_beside_its_default_build(capsys):
    """Rows on the source problem for the narrow build (the name stored_rates reads), and on a problem of
    its own for the default build beside it; a wrong output gets no row."""
    step_launch, _ = _fake()

    def launch(step, stages, x, w, out, problem, splits=None, block_n=None):
        made = step_launch(step, stages, x, w, out, problem)
        made.ms = 2.0 if block_n == ig.NARROW_N else 1.0
        return made

    fakes = {"timer": lambda launch: launch.ms, "step_launch": launch}
    rows = shapes.narrow_calibration(**fakes)
    narrow = ig.stored_name(11, ig.step_info(11).narrow_stages, block_n=ig.NARROW_N)
    assert shapes.narrow_kernels() == (narrow, ig.stored_name(11, ig.default_stages(11)))
    assert [(r["kernel"], r["problem"], r["value"]) for r in rows] == [
        (narrow, "source problem", 2.0),
        (ig.stored_name(11, ig.default_stages(11)), shapes.BESIDE_NARROW, 1.0),
    ]
    wrong, _ = _fake(wrong={(11, ig.step_info(11).narrow_stages)})
    rows = shapes.narrow_calibration(timer=lambda launch: 1.0, step_launch=lambda *a, block_n=None: wrong(*a))
    assert [r["problem"] for r in rows] == [shapes.BESIDE_NARROW] and "FAIL" in capsys.readouterr().out


def test_the_shape_table_without_a_gpu(capsys):
    assert shapes.main() == 1
    assert capsys.readouterr().out == "needs a CUDA GPU: the shape table times every step and cuDNN\n"


def test_a_baseline_that_rejects_a_shape_loses_that_shape_only(capsys):
    step_launch, baselines = _fake()

    def rejects(problem, x, w, out):
        raise RuntimeError("no plan for this shape")

    rows = shapes.measure(
        {"tiny": ig.CI_PROBLEM},
        timer=lambda launch: launch.ms,
        step_launch=step_launch,
        baselines={**baselines, "cudnn_frontend": rejects},
    )
    assert "cudnn_frontend left out on tiny: RuntimeError: no plan for this shape" in capsys.readouterr().out
    assert {r["kernel"] for r in rows} >= {"shape_torch", "shape_best_step"}
    assert "shape_cudnn_frontend" not in {r["kernel"] for r in rows}


def test_stored_rows_without_a_gpu(tmp_path, monkeypatch, capsys):
    rows = [{"kernel": "shape_torch", "problem": "tiny", "metric": "ms", "value": 0.5, "unit": "ms"}]
    rows.append({"kernel": "v6_wgmma_3stages", "problem": "source problem", "metric": "ms", "value": 0.3, "unit": "ms"})
    env = {"gpu_slug": results.REFERENCE_GPU, "gpu": "Reference GPU", "date": "2026-01-01T00:00:00Z"}
    results.record("igemm", rows, env=env, root=tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    stored = shapes.measured_or_stored()
    assert [(r["kernel"], r["value"]) for r in stored] == [("shape_torch", 0.5)]
    said = capsys.readouterr().out
    assert said == "(timing needs a GPU: showing 1 stored measurements of the shape table from Reference GPU)\n"
    assert shapes.table(stored) == []  # no best_step row: the notebook says it is not measured yet


def test_a_step_that_cannot_build_loses_that_shape_only(capsys):
    step_launch, baselines = _fake()

    def fails_for_step_3(step, stages, x, w, out, problem, **kwargs):
        if step == 3:
            raise RuntimeError("step 3 was compiled to 200 registers")
        return step_launch(step, stages, x, w, out, problem, **kwargs)

    rows = shapes.measure(
        {"tiny": ig.CI_PROBLEM}, timer=lambda launch: launch.ms, step_launch=fails_for_step_3, baselines=baselines
    )
    assert "v3_ldmatrix left out on tiny: RuntimeError: step 3 was compiled to 200 registers" in capsys.readouterr().out
    kernels = {r["kernel"] for r in rows}
    assert "shape_v3_ldmatrix" not in kernels and {"shape_v2_wmma", "shape_v8_tma_filters_4stages"} <= kernels


@pytest.mark.parametrize(
    ("step", "stages", "slots"),
    [
        (4, 3, 2),  # shared memory would take 4 blocks of 50 KB; 128 threads x 255 registers take 2
        (6, 3, 2),  # 2 x (3 x 32 KB + 1 KB) fit in 228 KB, and 2 x 256 threads x 128 registers in 64 K
        (6, 4, 1),
        (8, 4, 1),  # 384 threads x 168 registers fill the register file
    ],
)
def test_blocks_per_sm_follow_shared_memory_threads_and_registers(step, stages, slots):
    assert ig.tile_model(step, stages, ig.PROBLEM, H100)[2] == slots
    smaller = {**H100, "regs_per_sm": 32768}
    assert ig.tile_model(step, stages, ig.PROBLEM, smaller)[2] == max(1, slots // 2)


def test_a_choice_passes_its_parameters_to_the_launcher():
    import inspect

    for problem in SHAPES:
        choice = ig.best_step(problem, H100)
        inspect.signature(ig.launcher).bind(choice.step, "x", "w", "out", **choice.kwargs)
        expected = ({} if choice.stages is None else {"stages": choice.stages}) | (
            {"splits": choice.splits} if choice.splits > 1 else {}
        )
        expected |= {"block_n": choice.tile[1]} if choice.tile[1] != ig.step_info(choice.step).block_n else {}
        assert choice.kwargs == expected
    assert ig.step_info(6).depths == (3, 4, 5) and ig.step_info(2).depths == (None,)


def test_split_sweep_checks_every_split_and_names_its_rows(capsys):
    step_launch, _ = _fake(wrong={(6, ig.best_step(shapes.SHAPES[shapes.SWEEP_SHAPE], steps=(6,)).stages, 4)})
    rows = shapes.split_sweep(timer=lambda launch: launch.ms, step_launch=step_launch)
    assert "FAIL" in capsys.readouterr().out, "a wrong split is printed"
    every = len(ig.SPLIT_K) * len(shapes.SWEEP_SPLITS)  # each split step at each split, but the wrong one
    assert len(rows) == every - 1 and {r["problem"] for r in rows} == {shapes.SWEEP_SHAPE}
    assert {r["kernel"] for r in rows} <= set(shapes.sweep_kernels())
    assert [r["kernel"] for r in rows if r["kernel"].endswith("_split4")] == [
        shapes.PREFIX + ig.stored_name(step, ig.best_step(shapes.SHAPES[shapes.SWEEP_SHAPE], steps=(step,)).stages, 4)
        for step in ig.SPLIT_K[1:]
    ]
    problem = shapes.SHAPES[shapes.SWEEP_SHAPE]
    for step in ig.SPLIT_K:
        assert all(ig.split_plan(problem, s, step)[1] == s for s in shapes.SWEEP_SPLITS), "split_plan keeps each count"


def _sweep_rows(us: dict, stages: int = 4) -> list[dict]:
    return [
        {
            "kernel": shapes.PREFIX + ig.stored_name(6, stages, s),
            "problem": shapes.SWEEP_SHAPE,
            "metric": "ms",
            "value": str(t / 1e3),
        }
        for s, t in us.items()
    ]


def test_the_sweep_curves_take_the_swept_depth_and_the_strongest_cudnn():
    measured = {1: 70.0, 4: 30.0, 15: 16.0, 36: 25.0}
    rows = _sweep_rows(measured) + _sweep_rows({1: 90.0}, stages=3)  # a second depth with one split
    rows.append({"kernel": "shape_v6_wgmma_4stages_split2", "problem": "another", "metric": "ms", "value": "1"})
    table = [
        {"kernel": shapes.PREFIX + b, "problem": shapes.SWEEP_SHAPE, "metric": "ms", "value": str(v)}
        for b, v in zip(shapes.BASELINES, (0.0139, 0.0150), strict=True)
    ]
    curves = shapes.sweep_curves(rows, table, H100)
    assert curves["stages"] == 4 and curves["measured_us"] == pytest.approx(measured)
    assert list(curves["measured_us"]) == sorted(measured) and curves["cudnn_us"] == pytest.approx(13.9)
    rate = ig.stored_rates(H100)[(6, 4, ig.BLOCK_N)]
    problem = shapes.SHAPES[shapes.SWEEP_SHAPE]
    assert set(curves["model_us"]) == set(shapes.SWEEP_SPLITS)
    assert curves["model_us"][15] == pytest.approx(1e3 * ig.estimate_ms(6, 4, problem, H100, rate, 15))
    fixup = next(s.number for s in ig.REGISTRY if s.fixup)  # a step with a stored head: the same as best_step's
    rows = [dict(r, kernel=r["kernel"].replace(ig.stored_name(6, 4), ig.stored_name(fixup, 4))) for r in rows]
    curves = shapes.sweep_curves(rows, table, H100, fixup)
    rate, head = ig.stored_rates(H100)[(fixup, 4, ig.BLOCK_N)], ig.stored_heads()[fixup]
    assert head != 1.0
    assert curves["model_us"][15] == pytest.approx(1e3 * ig.estimate_ms(fixup, 4, problem, H100, rate, 15, head))
    assert shapes.sweep_curves(_sweep_rows({1: 70.0}), table, H100) is None, "one split is no curve"


def test_the_sweep_findings_choose_their_words_from_the_numbers():
    measured = {1: 70.0, 4: 30.0, 15: 16.0, 36: 25.0}
    low = {"measured_us": measured, "model_us": {1: 50.0, 4: 20.0, 15: 10.0, 36: 30.0}, "cudnn_us": 14.0}
    f = shapes.sweep_findings(low)
    assert (f["best"], f["model_best"], f["gain"], f["choice_pct"]) == (15, 15, 70 / 16, 0)
    assert f["shapes"] == "The measured time falls to 15 splits, then rises, and so does the model's"
    assert f["choice_note"] == "the fastest split itself"
    assert f["model_side"] == "below the measurement at 3 of 4 splits" and f["cudnn_word"] == "slower than"
    assert (f["one_side"], f["best_side"]) == ("low", "below") and f["best_gap_us"] == pytest.approx(6)
    assert f["one_pct"] == pytest.approx(100 * 20 / 70)
    high = {**low, "model_us": {s: 2 * t for s, t in measured.items()}, "cudnn_us": 20.0}
    f = shapes.sweep_findings(high)
    assert f["model_side"] == "above the measurement at every split" and f["cudnn_word"] == "faster than"
    assert (f["one_side"], f["best_side"], f["one_pct"]) == ("high", "above", pytest.approx(100))
    off = {**low, "model_us": {1: 10.0, 4: 20.0, 15: 30.0, 36: 40.0}}
    f = shapes.sweep_findings(off)
    assert f["shapes"] == "The measured time falls to 15 splits, then rises; the model's is lowest unsplit"
    assert f["model_best"] == 1
    assert f["choice_pct"] == pytest.approx(100 * (70 / 16 - 1))
    assert f["choice_note"] == f"{100 * (70 / 16 - 1):.0f}% above the fastest split"
    assert shapes.curve_shape({1: 3.0, 2: 2.0, 4: 1.0}) == "falls all the way to the largest split"


def test_measure_reuses_this_sittings_times_after_checking_the_steps(capsys):
    """A step timed earlier in the sitting is checked, not timed again (a wrong one still gets no row); a
    baseline timed earlier is not run at all."""
    step_launch, baselines = _fake(wrong={(3, None)})
    ran = []

    def frontend(problem, x, w, out):
        ran.append(problem)
        return baselines["cudnn_frontend"](problem, x, w, out)

    known = {("shape_v2_wmma", "tiny"): 9.0, ("shape_v3_ldmatrix", "tiny"): 0.1, ("shape_cudnn_frontend", "tiny"): 7.0}
    rows = shapes.measure(
        {"tiny": ig.CI_PROBLEM},
        timer=lambda launch: launch.ms,
        step_launch=step_launch,
        baselines={**baselines, "cudnn_frontend": frontend},
        known=known,
    )
    ms = {r["kernel"]: r["value"] for r in rows if r["metric"] == "ms" and r["kernel"] != "shape_best_step"}
    assert ms["shape_v2_wmma"] == 9.0 and ms["shape_cudnn_frontend"] == 7.0 and not ran
    assert "shape_v3_ldmatrix" not in ms and "FAIL  v3_ldmatrix on tiny" in capsys.readouterr().out
    assert ms["shape_torch"] == 2.0 and ms["shape_v4_cp_async_3stages"] == pytest.approx(1.41)


def test_the_source_shape_reads_the_chapters_own_names_and_no_other_shape_does():
    known = {("v5_epilogue", shapes.SOURCE): 0.6, ("cudnn", shapes.SOURCE): 0.15}
    source = next(name for name, p in shapes.SHAPES.items() if p == ig.PROBLEM)
    aliases = shapes._chapter_aliases(5, ig.default_stages(5), ig.BLOCK_N)
    assert shapes._earlier(known, ig.stored_name(5, 3), source, ig.PROBLEM, aliases) == 0.6
    assert shapes._earlier(known, "cudnn_frontend", source, ig.PROBLEM, ("cudnn",)) == 0.15
    assert shapes._earlier(known, ig.stored_name(5, 4), source, ig.PROBLEM, ()) is None
    assert shapes._earlier(known, "cudnn_frontend", "tiny", ig.CI_PROBLEM, ("cudnn",)) is None


def test_sitting_ms_takes_this_commits_recent_rows_of_this_gpu_only(tmp_path, monkeypatch):
    import datetime

    now = datetime.datetime.now(datetime.UTC)

    def stamp(hours):
        return (now - datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")

    row = {"kernel": "v2_wmma", "problem": shapes.SOURCE, "metric": "ms", "value": 1.0, "unit": "ms"}
    for commit, hours, value in (("abc1234def56", 0.1, 1.0), ("0000000aaaaa", 0.1, 2.0), ("abc1234def56", 5, 3.0)):
        env = {"gpu_slug": "fake-gpu", "gpu": "Fake GPU", "date": stamp(hours), "commit": commit}
        results.record("igemm", [{**row, "kernel": f"k{value:.0f}", "value": value}], env=env, root=tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(device, "MODE", device.GPU)
    monkeypatch.setattr(device, "environment", lambda: {"gpu_slug": "fake-gpu", "commit": "abc1234def56"})
    assert shapes.sitting_ms() == {("k1", shapes.SOURCE): 1.0}
    monkeypatch.setattr(device, "environment", lambda: {"gpu_slug": "fake-gpu", "commit": "unknown"})
    assert shapes.sitting_ms() == {}
