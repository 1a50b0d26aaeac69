import csv
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
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


WRITER = """
import sys
from pathlib import Path

from kernels.harness import results

root, batch, env = Path(sys.argv[1]), int(sys.argv[2]), eval(sys.argv[3])
for first in range(0, 10**9, batch):
    rows = [{"kernel": "k", "problem": "p", "metric": "GB/s", "value": first + i, "unit": "GB/s"} for i in range(batch)]
    results.record("machine", rows, env=env, root=root)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_writer_killed_mid_batch_leaves_whole_batches_and_the_next_writer_goes_on(tmp_path):
    """A process recording batches of 20,000 rows is SIGKILLed while it writes: the file holds whole
    batches only, reads without a warning, and the next record appends to it."""
    batch, folder = 20_000, tmp_path / "test-gpu"
    path, mid_write = folder / "machine.csv", 0
    for trial in range(4):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(batch), repr(ENV)],
            env={**os.environ, "PYTHONPATH": str(results.ROOT)},
        )
        size = path.stat().st_size if path.exists() else 0
        deadline = time.time() + 120
        while time.time() < deadline and writer.poll() is None:  # one batch in, the next one being written
            if path.exists() and path.stat().st_size > size and list(folder.glob(".machine.csv.*.tmp")):
                time.sleep(0.002 * trial)
                break
            time.sleep(0.0005)
        mid_write += bool(list(folder.glob(".machine.csv.*.tmp")))
        writer.send_signal(signal.SIGKILL)
        assert writer.wait(30) == -signal.SIGKILL
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no torn line to warn about
            values = [int(float(r["value"])) for r in results.read(path)] if path.exists() else []
        assert len(values) % batch == 0 and len(values) > trial * batch
        starts = range(0, len(values), batch)
        assert all(values[i : i + batch] == list(range(values[i], values[i] + batch)) for i in starts)
    assert mid_write, "no trial killed the writer while it wrote a batch"
    results.record("machine", [row(1.5)], env=ENV, root=tmp_path)
    assert results.read(path)[-1]["value"] == "1.5"
    assert not list(folder.glob(".machine.csv.*.tmp")), "the killed writers' temporary files were left"


def test_a_torn_last_line_is_cut_with_a_warning_by_read_and_by_record(tmp_path):
    path = results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    partial = "2026-11-21T00:00:00Z,abc,Test GPU,1.0"  # what a writer of an older version left when killed
    with path.open("a") as f:
        f.write(partial)
    with pytest.warns(UserWarning, match=r"machine\.csv, line 3: the last line has no newline .*left out: '2026-11-21"):
        assert [r["value"] for r in results.read(path)] == ["1.0"]
    with pytest.warns(UserWarning, match=r"machine\.csv, line 3: the last line has no newline"):
        results.record("machine", [row(2.0)], env=ENV, root=tmp_path)
    assert len(path.read_bytes().splitlines()) == 3  # the header and two whole rows
    assert [r["value"] for r in results.load("machine", "test-gpu", root=tmp_path)] == ["1.0", "2.0"]


def test_a_torn_header_is_cut_and_the_file_starts_again(tmp_path):
    path = tmp_path / "test-gpu" / "machine.csv"
    path.parent.mkdir()
    path.write_text("date,commit,gp")
    with pytest.warns(UserWarning, match="line 1: the last line has no newline"):
        assert results.read(path) == []
    with pytest.warns(UserWarning, match="line 1"):
        results.record("machine", [row(3.0)], env=ENV, root=tmp_path)
    assert [r["value"] for r in results.read(path)] == ["3.0"]


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


# --- what record writes, read reads back ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [True, np.bool_(False), np.array([1.0]), np.array(1.0), [1.0], "fast", "1.0\n", 1 + 2j],
    ids=["True", "np.bool_", "array", "0-d array", "list", "word", "two lines", "complex"],
)
def test_record_refuses_a_value_it_could_not_read_back(tmp_path, value):
    with pytest.raises(ValueError, match="value: expected a finite number .*not a bool or an array"):
        results.record("machine", [row(1.0), row(value)], env=ENV, root=tmp_path)
    assert not any(tmp_path.rglob("*.csv"))


@pytest.mark.parametrize("value", [3, np.float32(2.5), np.int64(7), 1e-30, "90"])
def test_record_takes_numbers_and_reads_them_back(tmp_path, value):
    path = results.record("machine", [row(value)], env=ENV, root=tmp_path)
    assert float(results.read(path)[0]["value"]) == pytest.approx(float(value))


def test_record_refuses_a_key_it_has_no_column_for(tmp_path):
    with pytest.raises(ValueError, match=r"keys the file has no column for, \['blocks'\]: they would be lost"):
        results.record("machine", [row(1.0) | {"blocks": 4}], env=ENV, root=tmp_path)
    assert not any(tmp_path.rglob("*.csv"))


@pytest.mark.parametrize("key, bad", [("kernel", None), ("problem", 5), ("metric", "GB/s\nextra"), ("unit", b"ms")])
def test_record_refuses_a_text_field_that_is_not_one_line_of_text(tmp_path, key, bad):
    with pytest.raises(ValueError, match=f"{key}: expected a string of one line"):
        results.record("machine", [row(1.0) | {key: bad}], env=ENV, root=tmp_path)


def test_record_refuses_one_row_given_as_rows(tmp_path):
    with pytest.raises(TypeError, match=r"got one row \(a dict\): pass \[row\]"):
        results.record("machine", row(1.0), env=ENV, root=tmp_path)
    with pytest.raises(TypeError, match="rows: expected dicts"):
        results.record("machine", [("k", "p")], env=ENV, root=tmp_path)


def test_record_refuses_an_env_without_gpu_slug(tmp_path):
    env = {k: v for k, v in ENV.items() if k != "gpu_slug"}
    with pytest.raises(ValueError, match=r"env: lacks \['gpu_slug'\]"):
        results.record("machine", [row(1.0)], env=env, root=tmp_path)


BAD_SLUGS = ["../../escaped", "/tmp/abs", "", "..", ".hidden", "a/b", None]


@pytest.mark.parametrize("slug", BAD_SLUGS)
def test_a_gpu_slug_that_is_not_a_plain_name_is_refused_on_write_and_read(tmp_path, slug):
    root = tmp_path / "root"
    with pytest.raises(ValueError, match="gpu_slug: expected a folder name .*no '/', '..' or empty name"):
        results.record("machine", [row(1.0)], env=ENV | {"gpu_slug": slug}, root=root)
    for read_back in (results.load, results.latest):
        with pytest.raises(ValueError, match="gpu_slug: expected a folder name"):
            read_back("machine", slug, root)
    with pytest.raises(ValueError, match="gpu_slug: expected a folder name"):
        results.chapters(slug, root)
    assert not any(tmp_path.rglob("*.csv"))


@pytest.mark.parametrize("chapter", ["../other/machine", "", "a/b", "machine.csv", None])
def test_a_chapter_that_is_not_an_identifier_is_refused_on_write_and_read(tmp_path, chapter):
    with pytest.raises(ValueError, match="chapter: expected a short identifier"):
        results.record(chapter, [row(1.0)], env=ENV, root=tmp_path)
    with pytest.raises(ValueError, match="chapter: expected a short identifier"):
        results.load(chapter, "test-gpu", tmp_path)


def test_a_results_file_with_reordered_columns_is_an_error_naming_it_not_a_missing_chapter(tmp_path):
    results.record("machine", [row(1.0)], env=ENV, root=tmp_path)
    reordered = tmp_path / "test-gpu" / "conv.csv"
    columns = list(results.COLUMNS)
    columns[0], columns[1] = columns[1], columns[0]
    reordered.write_text(",".join(columns) + "\r\n")
    with pytest.raises(ValueError, match=r"conv\.csv, line 1: the header .* has the results columns in another order"):
        results.chapters("test-gpu", tmp_path)
    with pytest.raises(ValueError, match=r"conv\.csv: its header .* in another order; appending would shift"):
        results.record("conv", [row(1.0)], env=ENV, root=tmp_path)
    reordered.unlink()
    assert results.chapters("test-gpu", tmp_path) == ["machine"]


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
@pytest.mark.parametrize("kernels", [None, 3, {"copy"}, ("copy", None)])
def test_measured_or_stored_names_the_kernels_it_expects(kernels):
    with pytest.raises(TypeError, match="kernels: expected a kernel's name or a tuple of names"):
        results.measured_or_stored("machine", list, kernels)
