"""Chapter 0's recorded accesses and figures (kernels/basics/recorded.py), its sanitizer driver
(kernels/basics/memcheck.py) and the verdict table (show.verdicts): what the recorder saw in each case is
what the kernel does, a GPU run gets the same records from a child process in the simulator, and every
figure is drawn from them at a legible size."""

import matplotlib
import pytest

from kernels.basics import memcheck, recorded
from kernels.harness import check, device, show

matplotlib.use("Agg")
simulator_only = pytest.mark.skipif(device.on_gpu(), reason="the cases run the simulator in this process")


@pytest.fixture(scope="module")
def rec():
    return recorded.recorded()


@simulator_only
def test_each_thread_writes_its_own_element_and_the_tail_writes_none(rec):
    case = rec["threads"]
    assert case["blocks"] == 3 and len(case["writes"]) == case["n"] == 37
    assert all(e == b * case["threads"] + t for b, t, e in case["writes"])


@simulator_only
def test_a_column_read_needs_a_sector_per_lane_and_a_row_read_four(rec):
    warp = rec["copies"]["warp"]
    assert len(warp["copy_rows"]) == len(warp["copy_columns"]) == 32
    assert [recorded.accesses.sectors(warp[k], 4) for k in ("copy_rows", "copy_columns")] == [4, 32]
    by = {(r["kernel"], r["array"]): r for r in rec["copies"]["table"]}
    assert by["copy_columns", "x"]["per warp access"] == 32 and by["copy_rows", "x"]["per warp access"] < 4


@simulator_only
def test_the_barrier_decides_the_races(rec):
    assert rec["races"]["diff_shared"] == {"races": 0, "first": None}
    found = rec["races"]["diff_shared_no_barrier"]
    assert found["races"] > 100 and "`tile`" in found["first"]


@simulator_only
def test_bank_degrees_and_the_words_of_each_lane(rec):
    assert {s: c["degree"] for s, c in rec["banks"].items()} == {"1": 1, "32": 32, "33": 1}
    assert rec["banks"]["33"]["words"] == [33 * lane for lane in range(32)]


@simulator_only
def test_the_tree_halves_the_writers_at_each_step(rec):
    writers = {}
    for barrier, thread, element, write in rec["tree"]["accesses"]:
        if write:
            assert element == thread  # each thread writes only its own slot
            writers.setdefault(barrier, set()).add(thread)
    assert [len(writers[b]) for b in sorted(writers)] == [64, 32, 16, 8, 4, 2, 1]
    assert rec["tree"]["result"] == 63.0


@simulator_only
def test_the_tile_holds_the_block_and_its_halo(rec):
    staged = rec["tile"]["staged"]  # [thread, element of x, slot], block 1
    assert sorted(s for _, _, s in staged) == list(range(65))
    assert [row for row in staged if row[2] == 64] == [[0, 128, 64]]  # thread 0 also stages the halo
    assert all(e - 64 == s for _, e, s in staged)
    assert sorted(rec["tile"]["reads"]) == sorted([t, s] for t in range(64) for s in (t, t + 1))


@simulator_only
def test_a_gpu_run_gets_the_same_records_from_a_child_process(rec, monkeypatch):
    """On a GPU, recorded() cannot run the simulator in its own process: it runs one with it switched on."""
    monkeypatch.setattr(recorded.device, "MODE", device.GPU)
    assert recorded.recorded.__wrapped__() == rec


@pytest.mark.parametrize("name", ["threads", "copies", "banks", "tree", "tile"])
def test_every_figure_is_drawn_legibly(rec, name):
    draw = {"copies": recorded.sectors_figure}.get(name) or getattr(recorded, f"{name}_figure")
    fig = draw(rec[name])
    texts = [t for ax in fig.axes for t in (ax.xaxis.label, ax.yaxis.label, ax.title, *ax.get_xticklabels())]
    shown = [t for t in texts if t.get_text()]
    assert shown and min(t.get_fontsize() for t in shown) >= 10
    assert fig.get_figwidth() <= 9.5  # the page column: text at full size
    matplotlib.pyplot.close(fig)


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_the_sanitizer_driver_says_it_needs_a_gpu(capsys):
    assert check.sanitized(memcheck.checks) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_the_sanitizer_driver_checks_every_worked_kernel(rng):
    """What runs under compute-sanitizer on a GPU runs here in the simulator: every kernel, checked."""
    results = memcheck.checks(rng)
    names = " ".join(r.name for r in results)
    for kernel in ("scale ", "scale_guarded", "launch_max", "diff_shared", "add_2d", "copy_rows", "copy_columns"):
        assert kernel in names
    assert all(r.ok for r in results), [str(r) for r in results if not r.ok]


def test_verdicts_make_one_table_and_spell_out_a_failure():
    import numpy as np

    good = check.compare(np.ones(3), np.ones(3), atol=0, name="ones")
    bad = check.compare(np.array([1.0, np.nan]), np.ones(2), atol=0, name="poisoned")
    md = show.verdicts([good, bad]).data
    assert md.count("\n") == 5 and "| ones | max abs error <= 0 | pass |" in md
    assert "FAILED: 1 elements NaN/Inf" in md and "**1 passed, 1 failed**" in md
    assert not any(line.startswith(("PASS", "FAIL")) for line in md.splitlines())
    with pytest.raises(ValueError, match="non-empty list"):
        show.verdicts([])
    with pytest.raises(TypeError, match="bool `ok`"):
        show.verdicts(["PASS  ones"])


def test_a_sanitizer_script_prints_its_failures_and_a_count(monkeypatch, capsys):
    import numpy as np

    monkeypatch.setattr(device, "on_gpu", lambda: True)
    good = check.compare(np.ones(2), np.ones(2), atol=0, name="good")
    bad = check.compare(np.zeros(2), np.ones(2), atol=0, name="bad")
    assert check.sanitized(lambda rng: [good, good]) == 0
    assert capsys.readouterr().out == "PASS  2 of 2 checks\n"
    assert check.sanitized(lambda rng: [good, bad]) == 1
    assert capsys.readouterr().out.splitlines() == [str(bad), "FAIL  1 of 2 checks"]
