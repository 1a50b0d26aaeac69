import csv
import math
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from kernels.harness import device, results

ENV = {
    "date": "2026-11-21T00:00:00Z",
    "commit": "abc",
    "gpu": "Test GPU",
    "gpu_slug": "test-gpu",
    "driver": "1.0",
    "cuda_runtime": "13.0",
    "sm_clock_mhz": 1980,
    "mem_clock_mhz": 2619,
}


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
    cmp = results.compare(results.latest("machine", "other", tmp_path), results.latest("machine", "test-gpu", tmp_path))
    assert cmp[0]["ratio"] == pytest.approx(5.0)


def test_compare_lists_my_rows_and_marks_a_missing_reference():
    mine = {("k", "p", "GB/s"): row(2.0), ("k2", "p", "GB/s"): row(3.0) | {"kernel": "k2"}}
    cmp = results.compare(mine, {("k", "p", "GB/s"): row(4.0), ("only-there", "p", "GB/s"): row(1.0)})
    assert [(r["kernel"], r["mine"], r["reference"], r["ratio"]) for r in cmp] == [
        ("k", 2.0, 4.0, 0.5),
        ("k2", 3.0, None, None),
    ]


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
    tmp_path, monkeypatch, capsys
):
    env = ENV | {"gpu_slug": results.REFERENCE_GPU}
    results.record("conv", [row(1.0), row(2.0) | {"kernel": "other"}], env=env, root=tmp_path)
    results.record("conv", [row(3.0)], env=env | {"date": "2026-11-22T00:00:00Z"}, root=tmp_path)
    monkeypatch.setattr(results, "REPOSITORY", tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    rows = results.measured_or_stored("conv", lambda: pytest.fail("measured without a GPU"), ("k",))
    assert [(r["kernel"], r["value"]) for r in rows] == [("k", 3.0)]  # the newest, as a float
    assert "showing 1 stored measurements of k from Test GPU" in capsys.readouterr().out


def test_load_reads_the_repository_where_the_results_folder_lacks_a_gpu(tmp_path, monkeypatch):
    repo, mine = tmp_path / "repo", tmp_path / "mine"
    results.record("conv", [row(7.0)], env=ENV | {"gpu_slug": "ref"}, root=repo)
    monkeypatch.setattr(results, "REPOSITORY", repo)
    monkeypatch.setattr(results, "RESULTS", mine)  # BOOK_RESULTS: a student's folder, empty
    assert results.latest("conv", "ref")[("k", "p", "GB/s")]["value"] == "7.0"
    results.record("conv", [row(9.0)], env=ENV | {"gpu_slug": "ref"}, root=mine)
    assert [r["value"] for r in results.load("conv", "ref")] == ["9.0"]  # their own runs, once they have some
    assert results.load("conv", "ref", root=tmp_path / "elsewhere") == []  # an explicit root is read alone


# --- the store: nothing lost, nothing shifted ------------------------------------------------------


def _append_trials(root, start, worker, trials, batch):
    for trial in range(trials):
        while time.time() < start + 0.01 * trial:  # every process creates the same fresh file at once
            pass
        results.record(
            "machine",
            [row(worker * 1000 + trial * 10 + i) for i in range(batch)],
            env=ENV | {"gpu_slug": f"trial{trial}"},
            root=root,
        )


def test_concurrent_appends_write_one_header_and_every_row(tmp_path):
    ctx = multiprocessing.get_context("fork")
    workers, trials, batch = 4, 30, 3
    start = time.time() + 0.5  # once every process has started
    procs = [ctx.Process(target=_append_trials, args=(tmp_path, start, w, trials, batch)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * workers
    header = ",".join(results.COLUMNS)
    for trial in range(trials):
        path = tmp_path / f"trial{trial}" / "machine.csv"
        assert path.read_text().splitlines().count(header) == 1
        expected = [w * 1000 + trial * 10 + i for w in range(workers) for i in range(batch)]
        assert sorted(float(r["value"]) for r in results.read(path)) == expected


def test_an_append_after_a_killed_writer_is_not_glued_to_its_partial_line(tmp_path):
    path = results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    partial = "2026-11-21T00:00:00Z,abc,Test GPU,1.0"  # a writer killed mid-row: no newline
    with path.open("a") as f:
        f.write(partial)
    with pytest.raises(ValueError, match=r"machine\.csv, line 3: the last line has no newline"):
        results.read(path)
    results.record("machine", [row(2.0)], env=ENV, root=tmp_path)
    lines = path.read_text().splitlines()
    assert lines[2] == partial
    assert next(csv.reader(lines[3:])) == [
        *(str(ENV[k]) for k in results.ENV_COLUMNS),
        "machine",
        "k",
        "p",
        "GB/s",
        "2.0",
        "GB/s",
    ]
    with pytest.raises(ValueError, match=r"machine\.csv, line 3: expected 13 fields, got 4"):
        results.load("machine", "test-gpu", root=tmp_path)


def test_record_refuses_a_file_of_an_older_header_and_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "test-gpu" / "machine.csv"
    path.parent.mkdir()
    older = ",".join(c for c in results.COLUMNS if c != "driver") + "\r\n"
    path.write_bytes(older.encode())
    with pytest.raises(ValueError, match=r"machine\.csv: its header .* is not .*appending would shift"):
        results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    assert path.read_bytes() == older.encode()
    with pytest.raises(ValueError, match=r"machine\.csv, line 1: the header"):
        results.read(path)


def test_record_takes_rows_from_a_generator(tmp_path):
    path = results.record("machine", (row(v) for v in (1.0, 2.0)), env=ENV, root=tmp_path)
    assert [r["value"] for r in results.read(path)] == ["1.0", "2.0"]


@pytest.mark.parametrize("key", ["gpu", "date", "chapter"], ids=lambda k: f"row-{k}")  # an id "gpu" reads as the mark
def test_a_row_cannot_set_the_run_s_environment(tmp_path, key):
    with pytest.raises(ValueError, match=rf"sets \['{key}'\], which the run's environment sets"):
        results.record("machine", [row(1.0) | {key: "x"}], env=ENV, root=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "nan", None])
def test_record_refuses_values_that_are_not_finite_numbers(tmp_path, value):
    with pytest.raises(ValueError, match="value: expected a finite number"):
        results.record("machine", [row(1.0), row(value)], env=ENV, root=tmp_path)
    assert not any(tmp_path.iterdir())


def _line(value):
    fields = ENV | {"chapter": "machine"} | row(value)
    return ",".join(str(fields[c]) for c in results.COLUMNS) + "\r\n"


@pytest.mark.parametrize(
    "bad, message",
    [
        (_line(1.0).replace(",GB/s\r", ",GB/s,extra\r"), r"line 3: expected 13 fields, got 14"),
        (_line("fast"), r"line 3, field 'value': expected a finite number, got 'fast'"),
        (_line("inf"), r"line 3, field 'value': expected a finite number, got 'inf'"),
        (",".join(results.COLUMNS) + "\r\n", r"line 3, field 'value': expected a finite number, got 'value'"),
    ],
)
def test_the_loader_names_the_file_line_and_field_of_a_corrupt_row(tmp_path, bad, message):
    path = tmp_path / "test-gpu" / "machine.csv"
    path.parent.mkdir()
    path.write_text(",".join(results.COLUMNS) + "\r\n" + _line(1.0) + bad + _line(2.0))
    with pytest.raises(ValueError, match=str(path).replace(".", r"\.") + ", " + message):
        results.latest("machine", "test-gpu", root=tmp_path)


def test_a_relative_book_results_is_taken_from_the_repository_root(monkeypatch):
    monkeypatch.chdir(results.ROOT / "notebooks")  # where papermill runs the notebooks' kernel
    assert results.results_folder("mine") == results.ROOT / "mine"
    assert results.results_folder("/elsewhere/mine") == Path("/elsewhere/mine")
    assert results.results_folder("") == results.results_folder(None) == results.REPOSITORY


@pytest.mark.parametrize("installed", ["lib/python3/site-packages", "a-copy-without-data"])
def test_a_copy_installed_without_the_repository_writes_only_where_book_results_says(tmp_path, monkeypatch, installed):
    root = tmp_path / installed  # pip install . : kernels/ alone, no data/ beside it
    (root / "kernels").mkdir(parents=True)
    if "site-packages" in installed:
        (root / "data").mkdir()  # another package's data/ does not make it a checkout
    monkeypatch.setattr(results, "ROOT", root)
    monkeypatch.setattr(results, "REPOSITORY", root / "data" / "results")
    for named in (None, "mine"):
        monkeypatch.setattr(results, "RESULTS", results.results_folder(named))
        with pytest.raises(RuntimeError, match="installed without the repository.*BOOK_RESULTS to an absolute"):
            results.record("machine", [row(1.0)], env=ENV)
    assert not (root / "data" / "results").exists() and not (root / "mine").exists()
    monkeypatch.setattr(results, "RESULTS", results.results_folder(str(tmp_path / "mine")))
    assert results.record("machine", [row(1.0)], env=ENV) == tmp_path / "mine" / "test-gpu" / "machine.csv"


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_measured_or_stored_matches_whole_kernel_names(tmp_path, monkeypatch, capsys):
    env = ENV | {"gpu_slug": results.REFERENCE_GPU}
    results.record("machine", [row(1.0) | {"kernel": k} for k in ("copy", "copy_v2", "co")], env=env, root=tmp_path)
    monkeypatch.setattr(results, "REPOSITORY", tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    for kernels in ("copy", ("copy",)):
        rows = results.measured_or_stored("machine", lambda: pytest.fail("measured without a GPU"), kernels)
        assert [r["kernel"] for r in rows] == ["copy"]
        assert "showing 1 stored measurements of copy from" in capsys.readouterr().out


def test_replace_file_keeps_the_old_file_when_the_new_one_cannot_be_written(tmp_path, monkeypatch):
    path = tmp_path / "ssim_ncu.csv"
    path.write_text("version,metric,value\nV1,x,1\n")

    def fail(fd):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", fail)
        with pytest.raises(OSError, match="disk full"):
            results.replace_file(path, "version,metric,value\nV1,x,2\n")
    assert path.read_text() == "version,metric,value\nV1,x,1\n"
    results.replace_file(path, "version,metric,value\nV1,x,2\n")
    assert path.read_text() == "version,metric,value\nV1,x,2\n"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left
