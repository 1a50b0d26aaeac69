"""The convolution chapter's stored run, read back for its deep-dive pages and exercises."""

import pytest

from kernels.conv import registry, stored_run
from kernels.harness import device, results


@pytest.fixture(scope="module")
def run():
    return stored_run.load(results.REFERENCE_GPU)


def test_load_reads_the_reference_gpus_rates_times_and_autotune_candidates(run):
    assert run.gpu and run.ceil.fma_gflops > 0 and 0 < run.w.ldst and 0 < run.lat.shared < run.lat.global_
    assert {("HALO TILE", "conv1"), ("SEQ", "conv2"), ("cuDNN", "conv1")} <= set(run.measured)
    assert set(run.tune_all) == {"conv1", "conv2"} and all(len(c) > 1 for c in run.tune_all.values())
    best = min(run.tune_all["conv2"], key=lambda r: r["ms"])
    assert run.tuned["conv2"] == {k: best[k] for k in ("BM", "BN", "BKC", "SPLIT")}
    assert ("AUTOTUNE", "conv2", run.tuned["conv2"]) in run.timed
    assert set(run.candidates) == set(stored_run.TUNERS) and run.candidates["AUTOTUNE"] == run.tune_all
    halo = run.candidates["HALO AUTOTUNE"]
    assert set(halo) == {"conv1", "conv2"} and {r["TP"] for r in halo["conv2"]} == {7, 8}
    best = min(halo["conv2"], key=lambda r: r["ms"])
    assert ("HALO AUTOTUNE", "conv2", {k: best[k] for k in ("TH", "TW", "BN", "BKC", "TP")}) in run.timed
    assert not {name for name, _, _ in run.timed} & {"SEQ", "cuDNN"}


def test_load_names_a_gpu_without_stored_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "REPOSITORY", tmp_path)
    with pytest.raises(LookupError, match="no stored conv rates for no-such-gpu"):
        stored_run.load("no-such-gpu")


def test_read_ncu_per_stage_and_empty_without_files(tmp_path):
    ncu = stored_run.read_ncu(stored_run.ncu_folder(results.REFERENCE_GPU))
    assert ("SHARED", "conv1") in ncu.counts and 0 <= ncu.l1_hit[("COALESCING", "conv2")] <= 1
    assert "memory latency" in ncu.stalls[("COALESCING", "conv2")]
    assert stored_run.read_ncu(tmp_path) == stored_run.Ncu()


def test_predict_all_falls_back_to_the_stored_predictions_where_sass_is_missing(run):
    timed = [("NAIVE", "conv1", None), ("VECTORIZE & UNROLL", "conv2", None)]
    pred = stored_run.predict_all(timed, run.w, run.lat, run.props, run.gpu_rates, {}, run.stored)
    assert set(pred.gflops) == {("NAIVE", "conv1"), ("VECTORIZE & UNROLL", "conv2")}
    assert ("VECTORIZE & UNROLL", "conv2") in pred.model_of, "NVRTC compiles the CUDA C++ stages anywhere"
    if not device.on_gpu():  # the simulator cannot compile Numba's kernels: the stored prediction stands in
        assert pred.gflops[("NAIVE", "conv1")] == run.value("NAIVE", "predicted_gflops", "conv1")
    assert 0 < pred.gflops[("VECTORIZE & UNROLL", "conv2")] < run.ceil.fma_gflops


def test_predict_all_predicts_every_cuda_stage_from_the_stored_rates_alone(run):
    """The CUDA C++ stages need no stored row to be predicted: NVRTC's SASS and the run's rates suffice, so
    a stage added after the stored run (SHARED C++) has its prediction before a GPU times it."""
    cuda = [s.name for s in registry.REGISTRY if s.language == "cuda" and not s.runs]
    timed = [(name, pname, None) for name in cuda for pname in stored_run.PROBLEMS]
    assert ("SHARED C++", "conv1", None) in timed
    pred = stored_run.predict_all(timed, run.w, run.lat, run.props, run.gpu_rates, {})
    assert set(pred.model_of) == {(name, pname) for name, pname, _ in timed}
    assert all(0 < v < run.ceil.fma_gflops for v in pred.gflops.values())


def test_gain_split_shares_the_time_saved():
    """Rates 1, 2, 4: the step saves 3/4 of the time, the middle stage 1/2 of it: two thirds."""
    assert stored_run.gain_split(1.0, 2.0, 4.0) == pytest.approx(2 / 3)
    assert stored_run.gain_split(1.0, 4.0, 4.0) == pytest.approx(1.0)
    assert stored_run.gain_split(2.0, 1.0, 4.0) < 0  # the middle stage is slower than the first
    with pytest.raises(ValueError, match="middle: expected a positive rate"):
        stored_run.gain_split(1.0, 0.0, 4.0)
    with pytest.raises(ValueError, match="the step must change the rate"):
        stored_run.gain_split(3.0, 2.0, 3.0)


def test_step_split_quotes_predicted_shares_and_measured_words_where_timed():
    step = ("SHARED", "SHARED C++", "VECTORIZE & UNROLL")
    predicted = {(s, p): r for p in stored_run.PROBLEMS for s, r in zip(step, (1.0, 2.0, 4.0), strict=True)}
    untimed = stored_run.step_split(step, predicted, {("SHARED", "conv1"): 1.0}, "H100")
    assert untimed["shared_cpp_lang_pred_conv1_pct"] == pytest.approx(100 * 2 / 3)
    assert untimed["shared_cpp_tiles_pred_conv2_pct"] == pytest.approx(100 / 3)
    assert "shared_cpp_lang_conv1_pct" not in untimed and "Not timed yet on the H100" in untimed["shared_cpp_measured"]
    measured = {(s, p): r for p in stored_run.PROBLEMS for s, r in zip(step, (1000.0, 4000.0, 4000.0), strict=True)}
    timed = stored_run.step_split(step, predicted, measured, "H100")
    assert timed["shared_cpp_lang_conv2_pct"] == pytest.approx(100.0) and timed["shared_cpp_tiles_conv1_pct"] == 0
    assert timed["shared_cpp_measured"].startswith("4.00 TFLOP/s on conv1 and 4.00 on conv2, 4.0 and 4.0 times SHARED")
    assert "measured / predicted 2000.00" in timed["shared_cpp_measured"]
