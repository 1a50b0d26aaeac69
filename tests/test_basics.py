"""Chapter 0: the worked kernels against NumPy, the access recorder's counts, and the checker's hints for the
mistakes the chapter's exercises are about. (tests/test_exercise.py runs every published solution and
every registered mistake of every chapter, these included.)"""

import numpy as np
import pytest
from numba import cuda  # after the harness: it picks the simulator

from kernels.basics import examples as ex
from kernels.harness import accesses, check, device, exercise

simulator_only = pytest.mark.skipif(device.on_gpu(), reason="the recorder watches simulated kernels only")
BASICS = [e for e in exercise.all_exercises() if e.label.startswith("basics-ex-")]
SOLUTIONS = {label: sol for label, sol in exercise.all_solutions().items() if label.startswith("basics-ex-")}
needs_solutions = pytest.mark.skipif(not SOLUTIONS, reason="the student edition has no kernels/basics/solutions.py")


# --- the worked kernels ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 37, 130])
def test_scale_guarded_at_odd_sizes(n, rng):
    xp = device.xp()
    x = xp.asarray(rng.standard_normal(n).astype(np.float32))
    out = check.poison(xp.empty_like(x))
    ex.scale_guarded[ex.blocks(n), ex.THREADS](out, x, np.float32(3))
    assert check.compare(out, 3.0 * check.to_host(x).astype(np.float64), atol=1e-5).ok


def test_scale_covers_a_grid_that_fits_exactly(rng):
    xp = device.xp()
    x = xp.asarray(rng.standard_normal(128).astype(np.float32))
    out = check.poison(xp.empty_like(x))
    ex.scale[2, 64](out, x, np.float32(-2))
    assert check.compare(out, -2.0 * check.to_host(x).astype(np.float64), atol=1e-5).ok


@pytest.mark.parametrize("kernel", [ex.add_2d, ex.copy_rows, ex.copy_columns], ids=lambda k: k.__name__)
def test_2d_kernels_at_an_odd_shape(kernel, rng):
    xp = device.xp()
    x, y = (xp.asarray(rng.standard_normal((5, 37)).astype(np.float32)) for _ in range(2))
    out = check.poison(xp.empty_like(x))
    if kernel is ex.add_2d:
        kernel[(2, 3), (32, 2)](out, x, y)
        want = check.to_host(x).astype(np.float64) + check.to_host(y)
    else:
        grid = (2, 3) if kernel is ex.copy_rows else (1, 19)
        kernel[grid, (32, 2)](out, x)
        want = check.to_host(x)
    assert check.compare(out, want, atol=1e-5).ok


@pytest.mark.parametrize("n", [2, 65, 150])
def test_diff_shared(n, rng):
    xp = device.xp()
    x = rng.standard_normal(n).astype(np.float32)
    out = check.poison(xp.empty(n - 1, dtype=np.float32))
    ex.diff_shared[ex.blocks(n - 1), ex.THREADS](out, xp.asarray(x))
    assert check.compare(out, np.diff(x.astype(np.float64)), atol=1e-5).ok


@pytest.mark.parametrize("n", [1, 64, 300])
def test_launch_max_takes_as_many_global_steps_as_needed(n, rng):
    xp = device.xp()
    x = rng.standard_normal(n).astype(np.float32)
    out = check.poison(xp.empty(1, dtype=np.float32))
    ex.launch_max(out, xp.asarray(x))
    assert check.compare(out, np.array([x.max()]), atol=0).ok


@pytest.mark.parametrize("stride", [1, 2, 32, 33])
def test_shared_stride(stride, rng):
    xp = device.xp()
    x = rng.standard_normal(45).astype(np.float32)
    out = check.poison(xp.empty(45, dtype=np.float32))
    ex.shared_stride[2, 32](out, xp.asarray(x), stride)
    assert check.compare(out, 2.0 * x, atol=0).ok


# --- the recorder: what one warp's access costs -------------------------------------------------------


@pytest.mark.parametrize("stride, expected", [(1, 4), (2, 8), (4, 16), (8, 32), (37, 32)])
def test_sectors_of_a_strided_warp(stride, expected):
    lanes = [4 * stride * k for k in range(32)]  # float32, lane k at element stride * k
    assert accesses.sectors(lanes, 4) == expected and accesses.min_sectors(lanes, 4) == 4


def test_sectors_of_a_misaligned_warp_and_of_a_broadcast():
    assert accesses.sectors([4 + 4 * k for k in range(32)], 4) == 5  # 128 bytes from byte 4: one more sector
    assert accesses.sectors([64] * 32, 4) == accesses.min_sectors([64] * 32, 4) == 1
    assert accesses.sectors([8 * k for k in range(32)], 8) == 8  # float64: 256 bytes


@pytest.mark.parametrize("stride, degree", [(1, 1), (2, 2), (4, 4), (16, 16), (32, 32), (33, 1)])
def test_bank_conflict_degree_of_a_strided_warp(stride, degree):
    assert accesses.bank_degree([4 * stride * k for k in range(32)], 4) == degree


def test_one_word_read_by_every_lane_is_a_broadcast_and_float64_needs_two_passes():
    assert accesses.bank_degree([12] * 32, 4) == 1
    lanes = [8 * k for k in range(32)]
    assert accesses.bank_degree(lanes, 8) == accesses.min_bank_degree(lanes, 8) == 2


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: accesses.sectors([0, 4], 0), ValueError, "size must be >= 1"),
        (lambda: accesses.sectors([0, -4], 4), ValueError, "addresses: each must be >= 0"),
        (lambda: accesses.bank_degree([0.5], 4), ValueError, "addresses: each must be an integer"),
        (lambda: accesses.bank_degree(7, 4), TypeError, "expected a sequence of byte addresses"),
        (lambda: accesses.problems(accesses.Counts([]), ["fast"]), ValueError, "unknown expectations"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_an_unknown_expectation_is_refused_at_registration():
    with pytest.raises(ValueError, match="expect must be among"):
        exercise.register(
            exercise.Exercise(
                "basics-ex-nothing", "", lambda rng, n: (), lambda: 0, sizes=(1,), atol=0, expect=("fast",)
            )
        )


# --- the recorder on simulated kernels ---------------------------------------------------------------


def copy_counts(kernel, grid):
    x = np.arange(64 * 37, dtype=np.float32).reshape(64, 37)
    out = np.zeros_like(x)
    counts = accesses.count(lambda: kernel[grid, (32, 2)](out, x))
    assert np.array_equal(out, x)
    return {(t.array, t.write): t for t in counts.traffic.values()}


@simulator_only
def test_a_copy_along_columns_needs_a_sector_per_lane():
    by_row = copy_counts(ex.copy_rows, (2, 32))
    by_column = copy_counts(ex.copy_columns, (2, 19))
    for key in (("x", False), ("out", True)):
        assert by_row[key].ratio <= 1.3 and by_row[key].lane_stride == 4
        t = by_column[key]
        assert t.cost == 32 * t.requests and t.minimum == 4 * t.requests and t.lane_stride == 37 * 4


@simulator_only
def test_bank_conflicts_counted_per_warp():
    for stride, degree in ((1, 1), (2, 2), (32, 32), (33, 1)):
        x, out = np.ones(64, np.float32), np.zeros(64, np.float32)
        counts = accesses.count(lambda out=out, x=x, stride=stride: ex.shared_stride[2, 32](out, x, stride))
        (shared,) = {t.worst for t in counts.traffic.values() if t.space == "shared"}
        assert shared == degree


@simulator_only
def test_a_missing_barrier_is_a_race_and_the_barrier_removes_it():
    x = np.arange(100, dtype=np.float32)
    out = np.zeros(99, np.float32)
    assert accesses.count(lambda: ex.diff_shared[2, 64](out, x)).races() == []
    races = accesses.count(lambda: ex.diff_shared_no_barrier[2, 64](out, x)).races()
    assert races and "`tile`" in races[0]


@simulator_only
@needs_solutions
def test_reads_per_element_counts_every_thread():
    counts = accesses.count(
        lambda: SOLUTIONS["basics-ex-stencil"].wrong["every thread reads its three inputs from global memory"][0](
            np.zeros(70, np.float32), np.ones(70, np.float32)
        )
    )
    assert counts.reads_per_element() == {"x": (70 * 3 - 2, 70)}


@simulator_only
def test_shared_arrays_start_poisoned_while_recording():
    @cuda.jit
    def read_unwritten(out):
        buf = cuda.shared.array(4, np.float32)
        out[0] = buf[cuda.threadIdx.x]

    out = np.zeros(1, np.float32)
    accesses.count(lambda: read_unwritten[1, 1](out))
    assert np.isnan(out[0])


@simulator_only
def test_each_block_s_shared_arrays_start_poisoned_while_recording():
    """The simulator hands every block the same shared array: block 1 would read what block 0 wrote."""

    @cuda.jit
    def block_0_writes(out):
        buf = cuda.shared.array(2, np.float32)
        if cuda.blockIdx.x == 0:
            buf[cuda.threadIdx.x] = 1.0
        cuda.syncthreads()
        out[cuda.grid(1)] = buf[cuda.threadIdx.x]

    out = np.zeros(4, np.float32)
    accesses.count(lambda: block_0_writes[2, 2](out))
    assert out[:2].tolist() == [1.0, 1.0] and np.isnan(out[2:]).all()


@simulator_only
def test_recording_puts_the_simulator_back():
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    before = (simkernel.FakeCUDAKernel.__call__, kernelapi.FakeCUDAShared.array, simkernel.BlockThread.syncthreads)
    with pytest.raises(ZeroDivisionError):
        with accesses.recording():
            raise ZeroDivisionError
    assert before == (
        simkernel.FakeCUDAKernel.__call__,
        kernelapi.FakeCUDAShared.array,
        simkernel.BlockThread.syncthreads,
    )


# --- the checker's hints for the chapter's mistakes ----------------------------------------------------


@needs_solutions
def test_every_chapter_0_exercise_has_a_mistake_and_the_mistakes_cover_each_hint():
    assert len(BASICS) >= 10 and set(SOLUTIONS) == {e.label for e in BASICS}
    words = {w for sol in SOLUTIONS.values() for _, w in sol.wrong.values()}
    assert {
        "never written",
        "outside an array",
        "uncoalesced",
        "redundant global reads",
        "race",
        "bank conflicts",
        "ignores the block size",
        "rows and columns swapped",
    } <= words


@simulator_only
@needs_solutions
@pytest.mark.parametrize(
    "label, mistake, said",
    [
        ("basics-ex-guard", "off-by-one bounds check", "a missing bounds check"),
        (
            "basics-ex-map-2d",
            "x and y swapped",
            "the reads of `x` need 16.5 sectors of 32 bytes per warp access where 2.5 would do",
        ),
        ("basics-ex-transpose", "write along columns", "uncoalesced global access: the writes to `out`"),
        ("basics-ex-row-sum", "one thread per row", "consecutive lanes touch addresses 28 bytes apart"),
        (
            "basics-ex-stencil",
            "every thread reads its three inputs from global memory",
            "the 200 elements of `x` that were read were read 598 times",
        ),
        ("basics-ex-stencil", "no barrier between the loads and the sums", "A cuda.syncthreads() is missing"),
        ("basics-ex-block-sum", "no barrier between the steps", "a shared-memory race"),
        (
            "basics-ex-banks",
            "a (32, 32) tile read by columns",
            "up to 32 lanes of a warp hit different words of one bank",
        ),
    ],
)
def test_the_hint_names_the_array_and_the_cost(label, mistake, said, rng):
    report = exercise.get(label).check(SOLUTIONS[label].wrong[mistake][0], rng=rng)
    assert not report.ok and said in str(report), str(report)


@simulator_only
@needs_solutions
@pytest.mark.parametrize(
    "label, mistake, said",
    [
        ("basics-ex-guard", "grid rounded down", "the launch has 192 threads for the 200 elements: round the block"),
        (
            "basics-ex-guard",
            "a block size of 32 written into the index",
            "has 256 threads for the 200 elements, enough",
        ),
        (
            "basics-ex-map",
            "threadIdx instead of the grid index",
            "the launch has 96 threads for the 96 elements, enough",
        ),
        (
            "basics-ex-map-2d",
            "x and y swapped in the index only",
            "enough for 33 rows and 20 columns with x along a row",
        ),
        ("basics-ex-block-sum", "threads past the end leave their slot unset", "the last element. Likely: a read past"),
    ],
)
def test_a_tail_is_blamed_on_the_grid_only_where_it_had_too_few_threads(label, mistake, said, rng):
    report = str(exercise.get(label).check(SOLUTIONS[label].wrong[mistake][0], rng=rng))
    assert said in report, report
    assert ("round the block count up" in report) == (mistake == "grid rounded down"), report


@simulator_only
@needs_solutions
def test_a_passing_report_says_what_the_accesses_cost(rng):
    report = exercise.get("basics-ex-stencil").check(SOLUTIONS["basics-ex-stencil"].solution, rng=rng)
    assert report.ok and report.lines[-2].startswith("  accesses (counted in the simulator): global sectors at most")


@pytest.mark.gpu
@needs_solutions
def test_published_solutions_pass_on_the_gpu(rng):
    """Every published solution passes its checker on the GPU (make gpu-test)."""
    for e in BASICS:
        assert e.check(SOLUTIONS[e.label].solution, rng=rng).ok, e.label


@needs_solutions
def test_the_notebook_shows_each_published_solution_from_solutions_py():
    """Each {solution} of the chapter includes its code from kernels/basics/solutions.py, between markers there."""
    import json
    import re

    root = exercise.KERNELS.parent
    markdown = "\n".join(
        "".join(c["source"]) for c in json.loads((root / "notebooks" / "00_first_kernels.ipynb").read_text())["cells"]
    )
    shown = re.findall(
        r"\{solution\} ([\w-]+)\n:class: dropdown\n```\{literalinclude\} \.\./(\S+)\n"
        r':language: python\n:start-after: "(.+)"\n:end-before: "(.+)"\n',
        markdown,
    )
    assert {label for label, *_ in shown} == set(SOLUTIONS)
    for label, path, after, before in shown:
        assert path == "kernels/basics/solutions.py", f"{label}: its solution is included from {path}"
        text = (root / path).read_text()
        assert after in text and before in text.split(after, 1)[1], f"{label}: markers missing from {path}"
        code = text.split(after, 1)[1].split(before, 1)[0]
        assert f"def {SOLUTIONS[label].solution.__name__}(" in code, f"{label}: the solution shown is not its launch"
