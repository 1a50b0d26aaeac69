"""The CUDA C++ kernels passed on a GPU at their current bytes (tests/gpu_verdicts.json, gpu_ledger.py),
and the ledger a GPU run writes says no more than the run showed."""

import hashlib
import json
from types import SimpleNamespace

import pytest

import gpu_ledger
from conftest import GpuVerdicts
from kernels.harness import device


def test_every_cuda_cpp_source_passed_on_a_gpu_at_its_current_bytes():
    """On a CPU these kernels are only compiled: a change to one needs a GPU run before it merges."""
    current = gpu_ledger.sources()
    assert current, f"no CUDA C++ source under {gpu_ledger.ROOT / 'kernels'}"
    missing = gpu_ledger.unverified(gpu_ledger.load(), current)
    listed = "".join(f"\n  {path}" for path in missing)
    assert not missing, (
        f"{len(missing)} of {len(current)} CUDA C++ sources have no passing GPU verdict at their "
        f"current bytes:{listed}\nrun `make gpu-test` on a GPU and commit tests/gpu_verdicts.json"
    )


def test_every_ledger_entry_is_tied_to_a_run():
    """Each verdict names its run's commit, GPU and the pytest report it kept, whose bytes match its digest;
    the entries written before reports existed are accepted only as they were then."""
    bad = gpu_ledger.problems(gpu_ledger.load())
    assert not bad, "\n".join(bad)


def test_the_entries_written_before_reports_are_pinned():
    digest = hashlib.sha256(gpu_ledger.LEGACY.read_bytes()).hexdigest()
    assert digest == gpu_ledger.LEGACY_SHA256, f"{gpu_ledger.LEGACY.name} changed: it is frozen"


@pytest.fixture
def tree(tmp_path):
    """A repository with two CUDA C++ sources and a Python kernel, and where its ledger goes."""
    (tmp_path / "kernels" / "conv").mkdir(parents=True)
    (tmp_path / "kernels" / "conv" / "s5.cu").write_bytes(b"__global__ void k() {}\n")
    (tmp_path / "kernels" / "common.cuh").write_bytes(b"#pragma once\n")
    (tmp_path / "kernels" / "v0.py").write_bytes(b"pass\n")
    return tmp_path


PASSED = {"t::a": "passed", "t::b": "passed"}


def run_of(entry, part="1/1"):
    run = entry["runs"][part]
    return run["gpu"], run["date"], run["commit"]


def test_sources_are_the_cu_and_cuh_files_with_the_sha256_of_their_bytes(tree):
    assert gpu_ledger.sources(tree) == {
        "kernels/common.cuh": hashlib.sha256(b"#pragma once\n").hexdigest(),
        "kernels/conv/s5.cu": hashlib.sha256(b"__global__ void k() {}\n").hexdigest(),
    }


def test_a_passing_run_verifies_every_source_and_a_changed_byte_undoes_it(tree):
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree)
    assert gpu_ledger.unverified(gpu_ledger.load(ledger), gpu_ledger.sources(tree)) == []
    (tree / "kernels" / "conv" / "s5.cu").write_bytes(b"__global__ void k() { /* bug */ }\n")
    assert gpu_ledger.unverified(gpu_ledger.load(ledger), gpu_ledger.sources(tree)) == ["kernels/conv/s5.cu"]


def test_a_pass_keeps_unchanged_entries_so_the_diff_shows_the_newly_verified(tree):
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree)
    before = ledger.read_text().splitlines()
    (tree / "kernels" / "conv" / "s5.cu").write_bytes(b"__global__ void k2() {}\n")
    gpu_ledger.record(ledger, PASSED, "GPU B", "2025-02-02", "c2", tree)
    after = ledger.read_text().splitlines()
    changed = [line for line in after if line not in before]
    assert len(changed) == 1 and '"kernels/conv/s5.cu"' in changed[0]
    entries = gpu_ledger.load(ledger)
    assert run_of(entries["kernels/common.cuh"]) == ("GPU A", "2025-01-01", "c1")
    assert run_of(entries["kernels/conv/s5.cu"]) == ("GPU B", "2025-02-02", "c2")
    assert gpu_ledger.problems(entries, ledger) == []
    assert len(list((tree / "gpu_reports").iterdir())) == 2  # each entry's run keeps its report


def test_a_failing_run_fails_every_source_even_one_that_passed_at_the_same_bytes(tree):
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree)
    gpu_ledger.record(ledger, PASSED | {"t::b": "failed"}, "GPU A", "2025-01-02", "c1", tree)
    entries = gpu_ledger.load(ledger)
    assert {e["verdict"] for e in entries.values()} == {"fail"}
    assert gpu_ledger.unverified(entries, gpu_ledger.sources(tree)) == sorted(gpu_ledger.sources(tree))


@pytest.mark.parametrize("outcomes", [{}, PASSED | {"t::b": "skipped"}])
def test_a_run_that_checked_nothing_or_skipped_a_test_writes_nothing(tree, outcomes):
    ledger = tree / "verdicts.json"
    message = gpu_ledger.record(ledger, outcomes, "GPU A", "2025-01-01", "c1", tree)
    assert not ledger.exists() and message.startswith("GPU verdicts not written")


def test_a_removed_source_leaves_the_ledger(tree):
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree)
    (tree / "kernels" / "common.cuh").unlink()
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-02", "c1", tree)
    assert list(gpu_ledger.load(ledger)) == ["kernels/conv/s5.cu"]


def test_the_ledger_is_sorted_json_one_source_a_line(tree):
    entries = {"b.cu": {"verdict": "pass", "sha256": "2"}, "a.cuh": {"verdict": "fail", "sha256": "1"}}
    text = gpu_ledger.dumps(entries)
    assert json.loads(text) == entries and json.loads(gpu_ledger.dumps({})) == {}
    assert [line.split(":")[0].strip() for line in text.splitlines()[1:-1]] == ['"a.cuh"', '"b.cu"']


def _session(plugin, reports, deselected=(), exitstatus=pytest.ExitCode.OK):
    """Feed a GpuVerdicts plugin what pytest would; return the line it prints in the summary."""
    plugin.pytest_deselected([SimpleNamespace(nodeid=n, keywords={"gpu": 1}) for n in deselected])
    for nodeid, outcome, *xfail in reports:  # xfail: the reason of a test that failed as declared
        report = SimpleNamespace(nodeid=nodeid, keywords={"gpu": 1}, outcome=outcome)
        if xfail:
            report.wasxfail = xfail[0]
        plugin.pytest_runtest_logreport(report)
    plugin.pytest_sessionfinish(None, exitstatus)
    return plugin.message


@pytest.fixture
def hook(tmp_path, monkeypatch):
    """A GpuVerdicts plugin as `make gpu-test` registers it (tests/ from the root), on a pretend GPU."""
    monkeypatch.setattr(device, "properties", lambda: {"name": "Pretend GPU"})
    monkeypatch.setattr(device, "environment", lambda: {"commit": "0123abc"})

    def make(args=("tests",), part=None):
        config = SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=gpu_ledger.ROOT))
        return GpuVerdicts(config, tmp_path / "verdicts.json", part)

    return make


def test_the_hook_takes_a_test_s_worst_phase(hook):
    plugin = hook()
    _session(
        plugin,
        [("t::a", "passed"), ("t::a", "failed"), ("t::a", "passed"), ("t::b", "passed")],
        exitstatus=pytest.ExitCode.TESTS_FAILED,
    )
    entries = gpu_ledger.load(plugin.path)
    assert set(entries) == set(gpu_ledger.sources()) and {e["verdict"] for e in entries.values()} == {"fail"}


def test_the_hook_counts_a_declared_xfail_as_checked_and_a_plain_skip_as_not(hook):
    plugin = hook()
    _session(plugin, [("t::a", "passed"), ("t::b", "skipped", "misses 1e-5 by 0.5%")])
    assert {e["verdict"] for e in gpu_ledger.load(plugin.path).values()} == {"pass"}
    plugin = hook()
    assert "1 of 2 gpu tests skipped" in _session(plugin, [("t::a", "passed"), ("t::b", "skipped")])


def test_the_hook_records_a_pass_with_the_gpu_name(hook):
    plugin = hook()
    _session(plugin, [("t::a", "passed"), ("t::b", "passed")])
    entries = gpu_ledger.load(plugin.path)
    assert {(e["verdict"], *run_of(e)[::2]) for e in entries.values()} == {("pass", "Pretend GPU", "0123abc")}
    assert gpu_ledger.problems(entries, plugin.path) == []


@pytest.mark.parametrize(
    "args, deselected, exitstatus",
    [
        (["tests/test_conv.py"], (), pytest.ExitCode.OK),  # one file of the suite
        (["tests"], ("tests/test_conv.py::t",), pytest.ExitCode.OK),  # -k or --deselect
        (["tests"], (), pytest.ExitCode.INTERRUPTED),  # stopped before the end
    ],
)
def test_the_hook_writes_nothing_for_part_of_the_suite(hook, args, deselected, exitstatus):
    plugin = hook(args)
    line = _session(plugin, [("t::a", "passed")], deselected, exitstatus=exitstatus)
    assert not plugin.path.exists() and line.startswith("GPU verdicts not written")


def test_parts_verify_a_source_only_together_and_at_the_same_bytes(tree):
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree, part=(1, 2))
    current = gpu_ledger.sources(tree)
    assert gpu_ledger.unverified(gpu_ledger.load(ledger), current) == sorted(current)
    (tree / "kernels" / "conv" / "s5.cu").write_bytes(b"__global__ void k3() {}\n")  # changed between the parts
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree, part=(2, 2))
    assert gpu_ledger.unverified(gpu_ledger.load(ledger), gpu_ledger.sources(tree)) == ["kernels/conv/s5.cu"]
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-02", "c2", tree, part=(1, 2))
    assert gpu_ledger.unverified(gpu_ledger.load(ledger), gpu_ledger.sources(tree)) == []


def test_a_part_keeps_a_whole_pass_and_a_failing_part_fails_every_source(tree):
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree)
    gpu_ledger.record(ledger, PASSED, "GPU B", "2025-01-02", "c2", tree, part=(2, 3))
    entries = gpu_ledger.load(ledger)
    assert {run_of(e)[0] for e in entries.values()} == {"GPU A"} and not gpu_ledger.unverified(
        entries, gpu_ledger.sources(tree)
    )
    gpu_ledger.record(ledger, {"t::a": "failed"}, "GPU B", "2025-01-02", "c2", tree, part=(1, 3))
    assert gpu_ledger.unverified(gpu_ledger.load(ledger), gpu_ledger.sources(tree)) == sorted(gpu_ledger.sources(tree))


@pytest.mark.parametrize("text", ["0/2", "3/2", "1-2", "a/b", "2"])
def test_a_part_that_is_not_k_of_n_is_refused_naming_the_form(text):
    with pytest.raises(ValueError, match="PART: expected k/n"):
        gpu_ledger.parse_part(text)


def test_the_hook_runs_every_nth_gpu_test_of_a_part_and_records_that_part(hook):
    plugin = hook(part="2/3")
    items = [SimpleNamespace(nodeid=f"t::{i}", keywords={"gpu": 1}) for i in range(7)]
    items.insert(2, SimpleNamespace(nodeid="t::cpu", keywords={}))
    seen = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: seen.extend(items)))
    plugin.pytest_collection_modifyitems(config, items)
    assert [i.nodeid for i in items] == ["t::1", "t::cpu", "t::4"]
    plugin.pytest_deselected(seen)  # what pytest passes on: not a test left out of the suite
    assert "part 2 of 3" in _session(plugin, [("t::1", "passed"), ("t::4", "passed")])
    assert {tuple(e["runs"]) for e in gpu_ledger.load(plugin.path).values()} == {("2/3",)}


# --- a verdict is tied to its run --------------------------------------------------------------------


@pytest.fixture
def passed(tree):
    """The ledger and report of a passing whole run over ``tree``."""
    ledger = tree / "verdicts.json"
    gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "c1", tree)
    return ledger


def report_of(ledger):
    (run,) = {r["report"] for e in gpu_ledger.load(ledger).values() for r in e["runs"].values()}
    return ledger.parent / run


def test_a_run_keeps_a_report_of_every_test_and_source(passed, tree):
    report = json.loads(report_of(passed).read_text())
    assert report["tests"] == PASSED and report["sources"] == gpu_ledger.sources(tree)
    assert (report["gpu"], report["commit"], report["date"], report["part"], report["verdict"]) == (
        "GPU A",
        "c1",
        "2025-01-01",
        "1/1",
        "pass",
    )


def test_a_hand_edited_hash_is_refused(passed, tree):
    entries = gpu_ledger.load(passed)
    (tree / "kernels" / "conv" / "s5.cu").write_bytes(b"__global__ void k() { /* changed */ }\n")
    entries["kernels/conv/s5.cu"]["sha256"] = gpu_ledger.sources(tree)["kernels/conv/s5.cu"]
    assert gpu_ledger.unverified(entries, gpu_ledger.sources(tree)) == []  # what the hash alone would say
    (bad,) = gpu_ledger.problems(entries, passed)
    assert bad.startswith("kernels/conv/s5.cu, run 1/1: its report says") and "not {" in bad


def test_an_edited_or_missing_report_is_refused(passed):
    report = report_of(passed)
    report.write_text(report.read_text().replace('"failed"', '"passed"') + " ")
    assert all("does not match its sha256" in line for line in gpu_ledger.problems(gpu_ledger.load(passed), passed))
    report.unlink()
    assert all("is missing" in line for line in gpu_ledger.problems(gpu_ledger.load(passed), passed))


@pytest.mark.parametrize("key", gpu_ledger.RUN_KEYS, ids=lambda k: f"no-{k}")  # an id "gpu" reads as the mark
def test_a_run_lacking_its_commit_gpu_date_or_report_is_refused(passed, key):
    entries = gpu_ledger.load(passed)
    for entry in entries.values():
        del entry["runs"]["1/1"][key]
    assert gpu_ledger.problems(entries, passed) == [f"{path}, run 1/1: lacks ['{key}']" for path in sorted(entries)]


def test_an_entry_without_a_run_passes_only_as_written_before_reports_existed(passed, tree):
    entries = gpu_ledger.load(passed)
    digest = entries["kernels/conv/s5.cu"]["sha256"]
    old = {"date": "2026-11-26", "gpu": "GPU A", "sha256": digest, "verdict": "pass"}
    (tree / gpu_ledger.LEGACY.name).write_text(gpu_ledger.dumps({"kernels/conv/s5.cu": old}))
    entries["kernels/conv/s5.cu"] = dict(old)
    assert gpu_ledger.problems(entries, passed) == []
    entries["kernels/conv/s5.cu"]["sha256"] = "0" * 64  # a hand edit of an old entry
    entries["kernels/common.cuh"] = {"date": "2026-11-26", "gpu": "GPU A", "sha256": "1" * 64, "verdict": "pass"}
    assert [line.split(":")[0] for line in gpu_ledger.problems(entries, passed)] == [
        "kernels/common.cuh",
        "kernels/conv/s5.cu",
    ]


def test_a_run_of_an_unknown_commit_writes_nothing(tree):
    ledger = tree / "verdicts.json"
    message = gpu_ledger.record(ledger, PASSED, "GPU A", "2025-01-01", "unknown", tree)
    assert "the commit this run checked is unknown" in message and "BOOK_COMMIT" in message
    assert not ledger.exists() and not (tree / "gpu_reports").exists()


def test_a_new_run_drops_the_reports_no_entry_names(passed, tree):
    first = report_of(passed)
    (tree / "kernels" / "conv" / "s5.cu").write_bytes(b"__global__ void k4() {}\n")
    gpu_ledger.record(passed, PASSED | {"t::b": "failed"}, "GPU A", "2025-01-03", "c3", tree)
    reports = sorted(p.name for p in (tree / "gpu_reports").iterdir())
    assert first.name not in reports and len(reports) == 1
    assert gpu_ledger.problems(gpu_ledger.load(passed), passed) == []


def test_a_run_that_verifies_nothing_new_keeps_no_report(passed, tree):
    before = passed.read_text()
    message = gpu_ledger.record(passed, PASSED, "GPU B", "2025-03-03", "c9", tree)
    assert passed.read_text() == before and "stay as they were" in message
    assert len(list((tree / "gpu_reports").iterdir())) == 1
