import csv

import pytest

from kernels.harness import device, results

ENV = {"date": "2026-11-21T00:00:00Z", "commit": "abc", "gpu": "Test GPU", "gpu_slug": "test-gpu",
       "driver": "1.0", "cuda_runtime": "13.0", "sm_clock_mhz": 1980, "mem_clock_mhz": 2619}


def row(value, metric="GB/s"):
    return {"kernel": "k", "problem": "p", "metric": metric, "value": value, "unit": "GB/s"}


def test_record_appends_with_environment_and_never_overwrites(tmp_path):
    path = results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    results.record("machine", [row(2.0)], env=ENV | {"date": "2026-11-22T00:00:00Z"}, root=tmp_path)
    assert path == tmp_path / "test-gpu" / "machine.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["value"] for r in rows] == ["1.0", "2.0"]
    assert rows[0]["gpu"] == "Test GPU" and rows[0]["commit"] == "abc" and rows[0]["driver"] == "1.0"
    latest = results.latest("machine", "test-gpu", root=tmp_path)
    assert latest[("k", "p", "GB/s")]["value"] == "2.0"


def test_chapters_lists_results_files_only(tmp_path):
    results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    (tmp_path / "test-gpu" / "ssim_ncu.csv").write_text("version,metric,value\nV1,x,1\n")
    assert results.chapters("test-gpu", root=tmp_path) == ["machine"]


def test_other_gpus_keep_their_own_folder(tmp_path):
    results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    results.record("machine", [row(5.0)], env=ENV | {"gpu_slug": "other"}, root=tmp_path)
    assert results.gpus(tmp_path) == ["other", "test-gpu"]
    cmp = results.compare(results.latest("machine", "other", tmp_path),
                          results.latest("machine", "test-gpu", tmp_path))
    assert cmp[0]["ratio"] == pytest.approx(5.0)


def test_compare_lists_my_rows_and_marks_a_missing_reference():
    mine = {("k", "p", "GB/s"): row(2.0), ("k2", "p", "GB/s"): row(3.0) | {"kernel": "k2"}}
    cmp = results.compare(mine, {("k", "p", "GB/s"): row(4.0), ("only-there", "p", "GB/s"): row(1.0)})
    assert [(r["kernel"], r["mine"], r["reference"], r["ratio"]) for r in cmp] == [("k", 2.0, 4.0, 0.5),
                                                                                 ("k2", 3.0, None, None)]


def test_record_rejects_bad_rows(tmp_path):
    with pytest.raises(ValueError, match="at least one"):
        results.record("machine", [], env=ENV, root=tmp_path)
    with pytest.raises(ValueError, match="lacks"):
        results.record("machine", [{"kernel": "k"}], env=ENV, root=tmp_path)
    with pytest.raises(ValueError):
        results.record("machine", [row("fast")], env=ENV, root=tmp_path)
    with pytest.raises(ValueError, match="identifier"):
        results.record("my chapter", [row(1.0)], env=ENV, root=tmp_path)


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_simulated_runs_are_not_recorded(tmp_path):
    assert results.record("machine", [row(1.0)], root=tmp_path) is None
    assert not any(tmp_path.iterdir())


def test_value_lookup():
    rows = [row(3.0), row(4.0, metric="ms"), row(5.0, metric="ms") | {"problem": "K=64"}]
    assert results.value(rows, "k", "ms") == 4.0
    assert results.value(rows, "k", "ms", "K=64") == 5.0
    with pytest.raises(KeyError, match="metric='GFLOP/s'"):
        results.value(rows, "k", "GFLOP/s")
    with pytest.raises(KeyError):
        results.value(rows, "k", "ms", "K=32")


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_measured_or_stored_without_a_gpu_returns_the_reference_gpu_s_rows_of_those_kernels(
        tmp_path, monkeypatch, capsys):
    env = ENV | {"gpu_slug": results.REFERENCE_GPU}
    results.record("conv", [row(1.0), row(2.0) | {"kernel": "other"}], env=env, root=tmp_path)
    results.record("conv", [row(3.0)], env=env | {"date": "2026-11-22T00:00:00Z"}, root=tmp_path)
    monkeypatch.setattr(results, "REPOSITORY", tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    rows = results.measured_or_stored("conv", lambda: pytest.fail("measured without a GPU"), ("k",))
    assert [(r["kernel"], r["value"]) for r in rows] == [("k", 3.0)]     # the newest, as a float
    assert "showing 1 stored measurements of k from Test GPU" in capsys.readouterr().out


def test_load_reads_the_repository_where_the_results_folder_lacks_a_gpu(tmp_path, monkeypatch):
    repo, mine = tmp_path / "repo", tmp_path / "mine"
    results.record("conv", [row(7.0)], env=ENV | {"gpu_slug": "ref"}, root=repo)
    monkeypatch.setattr(results, "REPOSITORY", repo)
    monkeypatch.setattr(results, "RESULTS", mine)      # BOOK_RESULTS: a student's folder, empty
    assert results.latest("conv", "ref")[("k", "p", "GB/s")]["value"] == "7.0"
    results.record("conv", [row(9.0)], env=ENV | {"gpu_slug": "ref"}, root=mine)
    assert [r["value"] for r in results.load("conv", "ref")] == ["9.0"]      # their own runs, once they have some
    assert results.load("conv", "ref", root=tmp_path / "elsewhere") == []    # an explicit root is read alone
