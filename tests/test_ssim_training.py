"""The training step's measurement: its byte count, the peers' configuration and the script's bad input;
on a GPU, every kernel of the step timed."""

import re
import subprocess
import sys

import numpy as np
import pytest

from kernels.harness import device
from kernels.ssim import backward, cuda_versions, training

ROOT = training.ROOT


def test_the_step_moves_five_planes_forward_and_six_backward():
    plane = 4 * 2 * 3 * 5 * 7
    assert training.step_bytes((2, 3, 5, 7)) == {"forward": 5 * plane, "backward": 6 * plane}
    with pytest.raises(ValueError, match=r"shape\[2\]"):
        training.step_bytes((1, 1, 0, 4))


def test_the_step_in_one_kernel_moves_three_planes():
    plane = 4 * 2 * 3 * 5 * 7
    assert training.fused_step_bytes((2, 3, 5, 7)) == 3 * plane


def test_peers_are_named_with_existing_folders(tmp_path):
    assert training.peers_from_env("") == {}
    assert training.peers_from_env(f"a={tmp_path}, b={tmp_path}") == {"a": str(tmp_path), "b": str(tmp_path)}
    for bad in ("a", f"={tmp_path}", "a=/no/such/folder"):
        with pytest.raises(ValueError, match="SSIM_PEERS: expected name=folder"):
            training.peers_from_env(bad)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--shape", "1,3,x,4"], "--shape: expected four integers"),
        (["--shape", "1,3,4"], "--shape: expected four positive integers"),
        (["--repeat", "0"], "--repeat: expected a positive integer"),
        (["--peer", "fused-ssim"], "--peer: expected name=folder"),
    ],
)
def test_script_names_the_bad_argument(args, words):
    done = subprocess.run(
        [sys.executable, "scripts/ssim_peers.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and words in done.stderr, done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")
def test_every_kernel_of_the_step_is_timed():
    rows = training.kernel_rows((1, 3, 64, 128), repeat=3)
    assert [r["kernel"] for r in rows] == [
        "V11 training",
        "V13 mean",
        "V13 training mean",
        "Numba backward",
        "B1 backward",
        "F1 step",
        "F2 step",
    ]
    assert all(np.isfinite(r["value"]) and r["value"] > 0 for r in rows)


@pytest.mark.gpu
@pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")
def test_the_pair_is_timed_alone_in_turn_and_side_by_side():
    rows = training.side_by_side_rows((1, 3, 64, 128), repeat=3)
    assert [r["kernel"] for r in rows] == list(training.SIDE_BY_SIDE)
    assert all(np.isfinite(r["value"]) and r["value"] > 0 and r["problem"] == "1x3x64x128" for r in rows)


def test_the_pair_side_by_side_needs_a_gpu():
    if device.MODE == device.GPU:
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="needs a GPU"):
        training.side_by_side_rows((1, 3, 64, 128))


def test_peers_are_pinned_and_built_for_this_gpu():
    from build_ssim_peers import PEERS, for_this_gpu

    assert all(re.fullmatch(r"[\w-]+/[\w-]+", repo) and re.fullmatch(r"[0-9a-f]{40}", c) for repo, c in PEERS.values())
    flags = '"nvcc": ["-O3", "--use_fast_math", "-arch=sm_89"]'
    assert for_this_gpu(flags, "90") == flags.replace("sm_89", "sm_90")
    assert for_this_gpu("no flags", "90") == "no flags"


def test_the_peers_named_are_the_peers_built():
    from build_ssim_peers import PEERS

    assert training.PEERS == {name: repo for name, (repo, _) in PEERS.items()}


def test_the_slow_peers_are_compared_on_a_metric_the_fast_ones_have():
    from kernels.ssim import bench

    assert set(bench.PEER_METRIC.values()) <= set(training.PEER_METRICS)


def test_rows_are_read_per_candidate_at_one_shape():
    rows = [
        {"kernel": "ours", "problem": "1x3x8x8", "metric": "inference mean", "value": "0.5"},
        {"kernel": "ours", "problem": "1x3x4x4", "metric": "inference mean", "value": "0.1"},
        {"kernel": "fused-ssim", "problem": "1x3x8x8", "metric": "inference map", "value": 2.0},
    ]
    assert training.by_candidate(rows, (1, 3, 8, 8)) == {
        "ours": {"inference mean": 0.5},
        "fused-ssim": {"inference map": 2.0},
    }


def test_a_peer_without_rows_gets_one_line():
    assert training.absent({"ours": {}, **dict.fromkeys(training.PEERS, {})}) == []
    lines = training.absent({"ours": {}, "fused-ssim": {}})
    assert lines == [
        "MrNeRF/optimized-fused-ssim was not built on this machine (SSIM_PEERS names its build): no rows for it"
    ]
    assert len(training.absent({})) == len(training.PEERS)


def test_peers_are_compared_where_both_were_timed_closest_first():
    ours = {"inference map": 1.0, "inference mean": 0.5, "training forward": None}
    peers = {"a": {"inference map": 3.0, "training forward": 1.0}, "b": {"inference mean": 1.0, "training step": 9.0}}
    got = training.ratios(ours, peers)
    want = [("b", "inference mean", 2.0), ("a", "inference map", 3.0)]
    assert [(r["peer"], r["metric"], r["x ours"]) for r in got] == want
    assert training.ratios({}, peers) == []


def test_the_stored_run_compares_ours_with_each_built_peer():
    # what 02b's comparison reads without a GPU: the reference GPU's per-call rows of ours and every peer
    from kernels.harness import results

    rows = list(results.latest(training.CHAPTER, results.REFERENCE_GPU, results.REPOSITORY).values())
    found = training.by_candidate(rows, (1, 3, 2160, 3840))
    assert training.absent(found) == []
    api = training.ratios(found["ours"], {k: v for k, v in found.items() if k in training.PEERS})
    assert {r["peer"] for r in api} == set(training.PEERS)
    assert all(np.isfinite(r["x ours"]) and r["x ours"] > 0 for r in api)


def test_a_peer_that_cannot_run_gets_a_line_not_a_crash(tmp_path, capfd):
    # a folder whose fused_ssim cannot be imported: the worker fails in its own process, the others go on
    (tmp_path / "fused_ssim").mkdir()
    (tmp_path / "fused_ssim" / "__init__.py").write_text("raise ImportError('not built')\n")
    rows = training.user_rows({"broken": str(tmp_path)}, repeat=1, shapes=((1, 1, 16, 16),), adam_steps=0)
    out = capfd.readouterr().out
    assert "broken: not measured (" in out
    assert all(r["kernel"] != "broken" for r in rows)


@pytest.mark.gpu
@pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")
def test_our_api_is_timed_on_every_metric_the_peers_are():
    pytest.importorskip("torch")
    rows = training.peer_rows((1, 3, 64, 128), {}, repeat=3)
    assert {r["metric"] for r in rows if r["kernel"] == "ours"} == set(training.PEER_METRICS)
    assert all(np.isfinite(r["value"]) and r["value"] >= 0 for r in rows)


def test_the_user_comparison_names_its_shapes_and_targets():
    problems = ["x".join(map(str, s)) for s in training.USER_SHAPES]
    assert problems == ["1x3x2160x3840", "1x3x1080x1920", "1x3x822x1237", "4x3x512x512"]
    assert list(training.LOOP_TARGETS) == problems and min(training.LOOP_TARGETS.values()) >= 1
    assert training.USER_SHAPES[0] == training.common.BENCH_SHAPE  # PEER_METRICS' details are measured there
    assert training.ADAM_SHAPE in training.USER_SHAPES and training.HOST_SHAPE[-1] < 64


def test_adam_curves_become_rows_sampled_and_compared_with_ours():
    ours = [0.5 - 0.01 * k for k in range(21)]
    peer = [v + (3e-6 if k == 13 else 1e-7) for k, v in enumerate(ours)]
    rows = training.curve_rows({"ours": ours, "fused-ssim": peer}, "1x1x8x8")
    assert all(r["problem"] == "1x1x8x8" for r in rows)
    by = training.by_candidate(rows, (1, 1, 8, 8))
    assert by["ours"]["Adam loss start"] == 0.5 and by["ours"]["Adam loss end"] == pytest.approx(0.3)
    assert "Adam max loss difference" not in by["ours"]
    assert by["fused-ssim"]["Adam max loss difference"] == pytest.approx(3e-6)
    steps, losses = training.loss_curve(by["ours"])
    assert steps == list(range(0, 21, training.ADAM_EVERY)) and losses == [ours[k] for k in steps]
    alone = training.curve_rows({"fused-ssim": peer}, "1x1x8x8")  # without ours: no difference to give
    assert not any(r["metric"] == "Adam max loss difference" for r in alone)


def test_every_row_gets_a_unit():
    units = {
        m: training._unit(m)
        for m in (
            "training step",
            "training step IQR",
            "Adam loss at step 10",
            "images",
            "map error",
            "Adam ms per step",
        )
    }
    assert units == {
        "training step": "ms",
        "training step IQR": "rel",
        "Adam loss at step 10": "1",
        "images": "1",
        "map error": "abs",
        "Adam ms per step": "ms",
    }


@pytest.mark.gpu
@pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")
def test_the_user_comparison_times_the_step_runs_adam_and_scores_accuracy():
    pytest.importorskip("torch")
    from kernels.ssim import accuracy

    shapes = ((1, 3, 64, 128), (2, 1, 33, 47))
    rows = training.user_rows({}, repeat=2, shapes=shapes, adam_shape=(1, 1, 40, 40), adam_steps=21, photos=("camera",))
    assert all(r["kernel"] == "ours" and np.isfinite(float(r["value"])) for r in rows)
    for shape in shapes:
        found = training.by_candidate(rows, shape)["ours"]
        assert {"training step", "training step, host loop", "training step IQR"} <= found.keys()
        assert all(found[m] > 0 for m in ("training step", "training step, host loop"))
    assert set(training.PEER_METRICS) <= training.by_candidate(rows, shapes[0])["ours"].keys()
    adam = training.by_candidate(rows, (1, 1, 40, 40))["ours"]
    steps, losses = training.loss_curve(adam)
    assert steps == [0, 10, 20] and adam["Adam ms per step"] > 0
    assert adam["Adam loss end"] < adam["Adam loss start"]  # Adam lowers 1 - SSIM
    for klass in accuracy.CLASSES:
        found = training.by_candidate(rows, f"accuracy {klass}")["ours"]
        assert found["images"] == 1 and set(accuracy.LIMITS) <= found.keys()


@pytest.mark.parametrize("mode", [device.GPU, device.SIM], ids=["parent-on-the-gpu", "parent-in-the-simulator"])
def test_a_candidate_process_runs_in_the_parent_s_mode(monkeypatch, mode):
    """On a GPU, the results page's import (BOOK_MODE=sim) or a simulated run (NUMBA_ENABLE_CUDASIM=1) may
    have changed the environment; the candidate's process must still time on the GPU (and stay in the
    simulator where the parent is)."""
    seen = {}

    def run(args, env, **kwargs):
        seen.update(env)
        return subprocess.CompletedProcess(args, 0, stdout='{"rows": []}\n', stderr="")

    monkeypatch.setattr(training.device, "MODE", mode)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setenv("BOOK_MODE", device.SIM)
    monkeypatch.setattr(training.subprocess, "run", run)
    assert training._candidate("ours", None, training._spec([(1, 1, 16, 16)], 1)) == {"rows": []}
    assert seen["BOOK_MODE"] == mode
    assert ("NUMBA_ENABLE_CUDASIM" in seen) == (mode == device.SIM)


@pytest.mark.parametrize("shape", [(1, 3, 2160, 3840), (2, 1, 11, 11), (1, 2, 145, 129)])
def test_b1_grid_covers_the_image_with_backward_cu_tiles(shape):
    """One warp per kCols x kRows output tile of backward.cu, read from the file (not a second copy)."""
    k = cuda_versions.constants("ssim/backward.cu")
    (gx, gy, gz), block = backward.b1_launch(shape)
    n, c, h, w = shape
    assert block == (k["kThreads"],) == (32,) and gz == n * c
    assert (gx - 1) * k["kCols"] < w <= gx * k["kCols"] and (gy - 1) * k["kRows"] < h <= gy * k["kRows"]


@pytest.mark.parametrize("shape", [(1, 3, 2160, 3840), (2, 1, 11, 11), (1, 2, 145, 129)])
def test_f1_grid_covers_the_image_with_step_cu_strips(shape):
    """One block per kOut x kRows gradient tile of step.cu, read from the file; kOut is a multiple of 4
    (the 16-byte row copies of interior blocks start at x0 - kLead) and leaves the 5-pixel band on each side."""
    k = cuda_versions.constants("ssim/step.cu")
    (gx, gy, gz), block = backward.f1_launch(shape)
    n, c, h, w = shape
    assert block == (k["kThreads"],) and gz == n * c
    assert (gx - 1) * k["kOut"] < w <= gx * k["kOut"] and (gy - 1) * k["kRows"] < h <= gy * k["kRows"]
    assert k["kOut"] % 4 == 0 and k["kLead"] % 4 == 0 and k["kOut"] + 2 * 5 < k["kDCols"]


def _step_ncu_csv(launch_ids):
    """ncu's long CSV for launches of step.cu with the given IDs, each with two metrics of STEP_NCU."""
    rows = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    metrics = [training.STEP_NCU["warp instructions"], training.STEP_NCU["barrier stall"]]
    for launch in launch_ids:
        rows += [
            f'"{launch}","ssim_step_f1(float const*)","{m}","","{1000 * (launch + 1) + i:,}"'
            for i, m in enumerate(metrics)
        ]
    return "==PROF== Connected\n" + "\n".join(rows) + "\n"


def test_step_ncu_rows_name_the_versions_in_the_order_they_ran(monkeypatch):
    monkeypatch.setattr(training.check, "ncu_csv", lambda *args, **kw: _step_ncu_csv([0, 1]))
    rows = {(r["kernel"], r["metric"]): r["value"] for r in training.step_ncu_rows((1, 3, 64, 128))}
    assert rows == {
        ("F1 step", "ncu warp instructions"): 1000,
        ("F1 step", "ncu barrier stall"): 1001,
        ("F2 step", "ncu warp instructions"): 2000,
        ("F2 step", "ncu barrier stall"): 2001,
    }


def test_step_ncu_rows_refuse_a_profile_that_missed_a_version(monkeypatch):
    monkeypatch.setattr(training.check, "ncu_csv", lambda *args, **kw: _step_ncu_csv([0]))
    with pytest.raises(RuntimeError, match="ncu profiled 1 launches, expected 2: F1 step, F2 step"):
        training.step_ncu_rows((1, 3, 64, 128))


@pytest.mark.skipif(device.MODE == device.GPU, reason="checks the refusal without a GPU")
def test_step_ncu_rows_without_a_gpu_say_why_and_return_no_rows(capsys):
    assert training.step_ncu_rows((1, 3, 64, 128)) == []
    assert "the profile" in capsys.readouterr().out


def test_the_floor_checker_and_the_page_read_one_copy_rate():
    """The page's floor and the ssim-ex-train-floor checker both divide by quantities.copy_gbps(), the copy
    rate of the GPU whose machine chapter the book shows: where the page's stored run is that GPU's, its glued
    rate and floor are the checker's."""
    import json

    from kernels.harness import glue, quantities
    from kernels.ssim import answers

    nb = json.loads((ROOT / "notebooks" / "02b_ssim_beyond_deep_training.ipynb").read_text())
    rate, gpu = quantities.copy_gbps()
    expected = answers.train_floor()
    moved = sum(training.step_bytes(training.common.BENCH_SHAPE).values())
    assert expected == {"megabytes": moved / 1e6, "floor_ms": moved / rate / 1e6}
    page_gpu = nb["metadata"]["lab_run"]["gpu"]
    if page_gpu != gpu:
        pytest.skip(f"the page's stored run is {page_gpu}'s, the machine chapter's {gpu}'s: rerun the page on {gpu}")
    stored = glue.stored(nb)
    assert float(stored["train_copy_gbps"]) == pytest.approx(rate, rel=1e-6)
    assert float(stored["train_floor_ms"]) == pytest.approx(expected["floor_ms"], rel=1e-6)
