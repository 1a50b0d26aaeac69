"""The exercise checker: published solutions pass, deliberately wrong kernels fail, and the words say why."""

import json
import sys

import numpy as np
import pytest
from numba import cuda  # conftest.py imported the harness first: it picks the simulator

from kernels.harness import device, exercise, grading
from kernels.harness.cuda_exercise import CudaExercise, SassRule, opcodes

EXERCISES = exercise.all_exercises()
SOLUTIONS = exercise.all_solutions()  # none in the student edition: the tests that run them are skipped
WRONG = [(label, name) for label, sol in SOLUTIONS.items() for name in sol.wrong]
needs_solutions = pytest.mark.skipif(not SOLUTIONS, reason="the student edition has no kernels/*/solutions.py")


def test_chapters_register_exercises():
    assert EXERCISES, "no chapter registers an auto-checked exercise"
    assert {ex.label.split("-ex-")[0] for ex in EXERCISES} <= {p for p in exercise._chapters_with_exercises()}


@needs_solutions
def test_every_exercise_has_a_published_solution_and_wrong_kernels():
    assert set(SOLUTIONS) == {ex.label for ex in EXERCISES}
    assert all(sol.wrong for sol in SOLUTIONS.values()), "every exercise needs a wrong kernel that proves it can fail"


def test_each_chapter_with_exercises_is_discovered_under_its_notebook_labels():
    """kernels/<chapter>/exercises.py is found by the registry, and each label is a notebook's {exercise}."""
    import json
    import re

    notebooks = exercise.KERNELS.parent / "notebooks"
    labels = set()
    for nb in notebooks.glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                labels |= set(re.findall(r"\{exercise\}[^\n]*\n:label: ([\w-]+)", "".join(cell["source"])))
    registered = {ex.label for ex in EXERCISES}
    assert {"machine", "ssim", "conv"} <= set(exercise._chapters_with_exercises())
    assert {"machine-ex-saxpy", "ssim-ex-blur-x", "conv-ex-coalescing"} <= registered
    assert registered <= labels, f"registered without an {{exercise}} directive: {sorted(registered - labels)}"
    assert labels <= registered, f"exercises the checker cannot grade: {sorted(labels - registered)}"


@pytest.mark.parametrize("label", list(SOLUTIONS))
def test_published_solution_passes(label, rng):
    report = exercise.get(label).check(SOLUTIONS[label].solution, rng=rng)
    assert report.ok, str(report)
    assert report.lines[-1].startswith(f"PASS  {label}")


def access_only(ex, report) -> bool:
    """On a GPU the access recorder does not run, and shared memory is not filled with NaN: a kernel whose mistake
    is its access pattern, a race or an unset shared slot can compute the right values there by luck, or wrong
    ones without the recorder's words (chapter 0's exercises, and those that declare what their accesses expect)."""
    recorded = ex.label.startswith("basics-") or bool(getattr(ex, "expect", ()))
    return device.on_gpu() and recorded


def results_only(ex, words) -> bool:
    """A CUDA C++ kernel runs on a GPU only: in the simulator the checker reads its SASS, so a mistake in its results
    (words that name none of its SASS rules) shows on a GPU only."""
    sass_words = any(rule.what in words for rule in getattr(ex, "sass", ()))
    return isinstance(ex, CudaExercise) and not device.on_gpu() and not sass_words


@pytest.mark.parametrize("label,name", WRONG)
def test_wrong_kernel_fails_and_says_why(label, name, rng):
    launch, words = SOLUTIONS[label].wrong[name]
    ex = exercise.get(label)
    if results_only(ex, words):
        report = ex.check(launch, rng=rng)
        assert report.ok and "its results are checked on a GPU only" in report.lines[-1], str(report)
        pytest.skip(f"{name!r}: a mistake in a CUDA C++ kernel's results shows on a GPU only")
    report = ex.check(launch, rng=rng)
    if access_only(ex, report):
        pytest.skip(f"{name!r}: the simulator's access recorder explains this mistake, not a GPU")
    assert not report.ok, f"{name!r} passed the checker of {label}"
    assert words in str(report), str(report)


@pytest.mark.gpu
@needs_solutions
def test_solutions_pass_and_wrong_kernels_fail_on_the_gpu(rng):
    for label, sol in SOLUTIONS.items():
        ex = exercise.get(label)
        assert ex.check(sol.solution, rng=rng).ok
        for name, (launch, words) in sol.wrong.items():
            report = ex.check(launch, rng=rng)
            if not access_only(ex, report):
                assert not report.ok and words in str(report), f"{ex.label} / {name}: {report}"


# --- only a kernel may write the output ----------------------------------------------------------


@cuda.jit
def saxpy(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def does_nothing(out):
    pass


def test_an_answer_computed_by_host_code_fails(capsys):
    """The right numbers, from NumPy (CuPy on a GPU) instead of a kernel: the notebook's check fails it."""
    entry, name = grading._launch_entry()
    launch_kernel = getattr(entry, name)
    report = exercise.check("machine-ex-saxpy", lambda out, x, y, a: out.__setitem__(Ellipsis, a * x + y))
    assert not report.ok and "no kernel ran: the output was written by host code" in capsys.readouterr().out
    assert getattr(entry, name) is launch_kernel, "the check left Numba's kernel launch wrapped"


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kernel_launched_beside_a_host_written_answer_fails(when, rng):
    def launch(out, x, y, a):
        if when == "after":
            does_nothing[1, 1](out)
        out[...] = a * x + y
        if when == "before":
            does_nothing[1, 1](out)

    report = exercise.get("machine-ex-saxpy").check(launch, rng=rng)
    assert not report.ok and "written by host code outside the kernel launches" in str(report), str(report)


def test_host_code_fixing_up_a_kernel_s_output_fails(rng):
    def launch(out, x, y, a):
        saxpy[(out.size + 31) // 32, 32](out, x, y, a)
        out[-1:] = 0 * out[-1:]

    report = exercise.get("machine-ex-saxpy").check(launch, rng=rng)
    assert not report.ok and "written by host code outside the kernel launches" in str(report), str(report)


def test_the_tail_hint_counts_the_threads_of_the_launches_that_wrote_out(rng):
    def launch(out, x, y, a):
        does_nothing[64, 64](out)  # 4096 threads, but it writes nothing
        saxpy[out.size // 32, 32](out, x, y, a)

    report = exercise.get("machine-ex-saxpy").check(launch, rng=rng)
    assert "the launch has 256 threads for the 257 elements: round the block count up" in str(report), str(report)


def test_a_launch_that_launches_nothing_fails(rng):
    report = exercise.get("machine-ex-saxpy").check(lambda out, x, y, a: None, rng=rng)
    assert "no kernel ran: `launch` launched no @cuda.jit kernel and `out` was never written" in str(report)


def test_a_device_function_called_from_host_code_is_not_a_kernel(rng):
    """The simulator runs a device function on the host; on a GPU host code cannot call one at all."""

    @cuda.jit(device=True)
    def fill(out, x, y, a):
        out[...] = a * x + y

    if device.on_gpu():
        pytest.skip("a GPU refuses the call before the checker sees it")
    report = exercise.get("machine-ex-saxpy").check(fill, rng=rng)
    assert "no kernel ran: the output was written by host code" in str(report), str(report)


def test_a_kernel_calling_a_device_function_passes(rng):
    @cuda.jit(device=True)
    def one(x, y, a):
        return a * x + y

    @cuda.jit
    def saxpy_via_device_function(out, x, y, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = one(x[i], y[i], a)

    report = exercise.get("machine-ex-saxpy").check(
        lambda out, x, y, a: saxpy_via_device_function[(out.size + 31) // 32, 32](out, x, y, a), rng=rng
    )
    assert report.ok, str(report)


# --- the checker on small host-side launches (no kernel needed to reach each diagnosis) ---------


def copy_inputs(rng, n):
    return (rng.standard_normal(n).astype(np.float32),)


def identity(x):
    return x.astype(np.float64)


def run(launch, sizes=(37,), make_inputs=copy_inputs, reference=identity, **kw):
    """Check a host-side launch: it stands in for a kernel's mistake, so host writes to `out` are let through."""
    kw.setdefault("atol", 1e-6)
    return exercise.check_kernel(launch, reference, make_inputs, sizes=sizes, name="copy", device_only=False, **kw)


def host(x):
    """The simulator hands NumPy views to the launch; these launches run only there."""
    if device.on_gpu():
        pytest.skip("host-side launches write NumPy arrays; on a GPU the kernels above cover the checker")
    return x


def test_a_correct_launch_passes_every_size(rng):
    report = run(lambda out, x: host(out).__setitem__(slice(None), x), sizes=(1, 37, 100), rng=rng)
    assert report.ok and str(report).splitlines()[-1] == "PASS  copy: 3 sizes, max|err| <= 1e-06"


def test_writing_past_the_end_of_the_output_is_caught(rng):
    def launch(out, x):
        host(out)[:] = x
        out.base[out.size] = 0.0  # what an unguarded last block does on a GPU

    report = run(launch, rng=rng)
    assert not report.ok and "past the end of `out`" in str(report)


def test_writing_past_the_end_of_an_input_is_caught(rng):
    def launch(out, x):
        host(out)[:] = x
        x.base[x.size + 2] = 0.0  # the input's guard, where a wrong index lands

    report = run(launch, rng=rng)
    assert not report.ok and "past the end of its input argument 1 (which has 37)" in str(report)


def test_a_failure_outside_the_usual_patterns_is_still_named(rng):
    def reference(x):
        want = x.astype(np.float64)
        want[5] = np.inf
        return want

    report = run(lambda out, x: host(out).__setitem__(slice(None), x), reference=reference, rng=rng)
    assert not report.ok and "1 elements differ where the reference is NaN/Inf" in str(report)


def test_changing_an_input_is_caught(rng):
    def launch(out, x):
        host(out)[:] = x
        x[0] = 1.0

    assert "changed its input argument 1" in str(run(launch, rng=rng))


def test_reading_past_the_end_of_an_input_shows_as_nan(rng):
    def launch(out, x):
        host(out)[:] = x.base[1 : x.size + 1]  # the last element reads the poisoned guard

    text = str(run(launch, rng=rng))
    assert "NaN or Inf" in text and "read past the end of an input" in text


def test_unwritten_elements_are_told_from_computed_nan(rng):
    def unwritten(out, x):
        host(out)[:30] = x[:30]

    def computed(out, x):
        host(out)[:] = x
        out[30:] = np.nan

    assert "7 of 37 output elements were never written" in str(run(unwritten, rng=rng))
    text = str(run(computed, rng=rng))
    assert "never written" not in text and "7 elements are NaN or Inf" in text


def test_returning_an_array_instead_of_filling_out_fails(rng):
    report = run(lambda out, x: host(x.copy()), rng=rng)
    assert not report.ok and "`launch` returned an array instead of filling `out`" in str(report)

    def fill_and_return(out, x):
        host(out)[:] = x
        return out

    assert run(fill_and_return, rng=rng).ok


def test_exceptions_are_explained(rng):
    def index_error(out, x):
        raise IndexError("index 40 is out of bounds for axis 0 with size 37")

    def type_error(out, x):
        raise TypeError("launch() takes 1 argument")

    assert "indexed outside an array" in str(run(index_error, rng=rng))
    assert "the launch raised TypeError: launch() takes 1 argument" in str(run(type_error, rng=rng))


def test_checks_stop_at_the_first_failing_size(rng):
    calls = []

    def launch(out, x):
        calls.append(out.size)
        host(out)[:] = 0 if out.size == 60 else x

    report = run(launch, sizes=(5, 60, 90), rng=rng)
    assert not report.ok and calls == [90, 60] and "size=60" in str(report)


def test_the_largest_size_is_checked_first_and_size_1_still_runs(rng):
    """An offset shows as one at 37 elements; at 1 element it would only be '1 of 1 elements are wrong'."""
    report = run(lambda out, x: host(out).__setitem__(slice(None), x + 0.5), sizes=(1, 37), rng=rng)
    assert str(report).startswith("FAIL  copy size=37") and "off by the same constant, 0.5" in str(report)

    def wrong_at_1(out, x):
        host(out)[:] = x + (out.size == 1)

    report = run(wrong_at_1, sizes=(1, 37), rng=rng)
    assert report.lines[0] == "pass  copy size=37" and "FAIL  copy size=1" in report.lines[1], str(report)


# --- explain(): one test per pattern, on synthetic outputs --------------------------------------


@pytest.fixture
def want(rng):
    return rng.standard_normal((12, 17))


def test_explain_tail_of_unwritten_elements(rng):
    want = rng.standard_normal(100)
    got = want.copy()
    got[90:] = np.nan
    unwritten = np.isnan(got)
    (line,) = exercise.explain(got, want, atol=1e-6, unwritten=unwritten)
    assert "10 of 100 output elements were never written" in line and "the last 10" in line
    assert "round the block count up" in line


def test_explain_a_tail_by_the_threads_launched(rng):
    """A grid with too few threads is told to round its block count up; one with enough, that its index misses."""
    want = rng.standard_normal(200)
    unwritten = np.arange(200) >= 160
    got = np.where(unwritten, np.nan, want)
    short = exercise.explain(got, want, atol=1e-6, unwritten=unwritten, threads=(128, 1, 1))[0]
    assert "the launch has 128 threads for the 200 elements: round the block count up" in short
    enough = exercise.explain(got, want, atol=1e-6, unwritten=unwritten, threads=(256, 1, 1))[0]
    assert "the launch has 256 threads for the 200 elements, enough for all" in enough
    assert "ignores the block size" in enough and "round the block count up" not in enough


def test_explain_a_2d_tail_by_the_threads_along_its_axis(want):
    got = want.copy()
    got[:, 16:] = np.nan
    unwritten = np.isnan(got)
    short = exercise.explain(got, want, atol=1e-6, unwritten=unwritten, threads=(16, 12, 1))[0]
    assert "the launch has 16 threads along x for the 17 indices of axis 1: round the block count up" in short
    enough = exercise.explain(got, want, atol=1e-6, unwritten=unwritten, threads=(32, 12, 1))[0]
    assert "32 threads along x for the 17 indices of axis 1, enough for all" in enough
    assert "round the block count up" not in enough


@pytest.mark.parametrize(
    "threads, fix",
    [
        ((32, 34, 1), "the index takes x as the row: `c, r = cuda.grid(2)`"),  # 32 rows written, 34 columns asked
        ((64, 20, 1), "the index takes x as the column: size x from the columns"),  # the grid's x sized from the rows
    ],
)
def test_explain_rows_and_columns_swapped_between_the_grid_and_the_index(threads, fix, rng):
    want = rng.standard_normal((33, 20))
    x, y = threads[:2]
    high, wide = (x, y) if x == 32 else (y, x)
    unwritten = np.ones(want.shape, bool)
    unwritten[:high, :wide] = False
    (line,) = exercise.explain(np.where(unwritten, np.nan, want), want, atol=1e-6, unwritten=unwritten, threads=threads)
    assert f"all but the top-left {min(high, 33)} x {min(wide, 20)} corner" in line
    assert "rows and columns swapped" in line and fix in line and "round" not in line


def test_explain_nan_computed_at_the_end_is_not_blamed_on_the_grid(rng):
    want = rng.standard_normal(4)
    got = want.copy()
    got[-1] = np.nan  # written: the last block summed a slot it never set
    (line,) = exercise.explain(got, want, atol=1e-6, unwritten=np.zeros(4, bool), threads=(256, 1, 1))
    assert "the last element" in line and "only at the end: look at what the last block's threads" in line
    assert "round the block count up" not in line


def test_explain_last_columns_of_a_2d_output(want):
    got = want.copy()
    got[:, 16:] = np.nan
    (line,) = exercise.explain(got, want, atol=1e-6, unwritten=np.isnan(got))
    assert "the last 1 indices along axis 1 (from 16 on)" in line


def test_explain_wrong_only_at_the_border(want):
    got = want.copy()
    got[0, :] += 1
    got[:, -2:] -= 1
    lines = exercise.explain(got, want, atol=1e-6)
    assert "only within 2 elements of the border" in lines[0] and "halo" in lines[0]


def test_explain_a_pattern_with_a_period(rng):
    want = rng.standard_normal(256)
    got = want.copy()
    got[31::32] = np.nan  # the last thread of every warp
    (line,) = exercise.explain(got, want, atol=1e-6, unwritten=np.isnan(got))
    assert "repeating every 32 elements (positions 31 of each group)" in line


def test_explain_transpose(rng):
    want = rng.standard_normal((9, 9))
    lines = exercise.explain(want.T.copy(), want, atol=1e-6)
    assert "transpose" in lines[0]


def test_explain_shift_by_one(want):
    got = np.roll(want, -1, axis=1)
    assert "shifted by -1 along axis 1" in exercise.explain(got, want, atol=1e-6)[0]


def test_explain_constant_offset_and_factor(want):
    assert "off by the same constant, 0.25" in exercise.explain(want + 0.25, want, atol=1e-6)[0]
    assert "2 times the expected value (twice" in exercise.explain(2 * want, want, atol=1e-6)[0]


def test_explain_small_errors_point_at_precision(want, rng):
    got = want + rng.uniform(-5e-6, 5e-6, want.shape)
    line = exercise.explain(got, want, atol=1e-6)[0]
    assert "the errors are small" in line


def test_explain_relative_tolerance_only(want):
    got = want + 1e-7
    (line,) = exercise.explain(got, want, atol=1e-6, rtol=1e-9)
    assert "relative error over the whole output" in line


# --- registry and the grading command ------------------------------------------------------------


def test_registry_rejects_bad_and_duplicate_labels():
    ex = EXERCISES[0]
    with pytest.raises(ValueError, match="registered twice"):
        exercise.register(exercise.Exercise(**{**vars(ex)}))
    with pytest.raises(ValueError, match="<chapter>-ex-<name>"):
        exercise.register(exercise.Exercise(**{**vars(ex), "label": "saxpy"}))
    with pytest.raises(KeyError, match="registered: "):
        exercise.get("machine-ex-nonexistent")


def test_solutions_attach_to_a_registered_exercise_once_with_a_wrong_kernel():
    with pytest.raises(KeyError, match="no auto-checked exercise 'machine-ex-nonexistent'"):
        exercise.attach("machine-ex-nonexistent", solution=print, wrong={"none": (print, "")})
    with pytest.raises(ValueError, match="name at least one wrong kernel"):
        exercise.attach(EXERCISES[0].label, solution=print, wrong={})
    for label, sol in SOLUTIONS.items():
        with pytest.raises(ValueError, match="attached twice"):
            exercise.attach(label, solution=sol.solution, wrong=sol.wrong)


SUBMISSION = """
from numba import cuda

@cuda.jit
def saxpy(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]{bug}

def launch(out, x, y, a):
    saxpy[(out.size + 31) // 32, 32](out, x, y, a)
"""


def test_grading_command(tmp_path, capsys):
    good, bad, broken = tmp_path / "good.py", tmp_path / "bad.py", tmp_path / "broken.py"
    good.write_text(SUBMISSION.format(bug=""))
    bad.write_text(SUBMISSION.format(bug=" + 1"))
    broken.write_text("def run(out):\n    pass\n")
    assert exercise.main(["check", "machine-ex-saxpy", str(good)]) == 0
    assert exercise.main(["check", "machine-ex-saxpy", str(good), str(bad), str(broken)]) == 1
    text = capsys.readouterr().out
    assert "defines no function `launch(out, *inputs)`" in text
    assert text.rstrip().endswith("1 passed, 2 failed")
    assert exercise.main(["list"]) == 0
    assert "machine-ex-saxpy" in capsys.readouterr().out


def test_grading_command_in_grading_mode_gives_no_hints(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text(SUBMISSION.format(bug="").replace("(out.size + 31) // 32", "out.size // 32"))
    assert exercise.main(["check", "machine-ex-saxpy", "--grading", str(bad)]) == 1
    text = capsys.readouterr().out
    assert "output elements were never written" in text and "Likely" not in text
    assert not exercise._GRADING, "the command left grading mode on"


def test_grading_command_names_an_unknown_exercise(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        exercise.main(["check", "nosuch-ex-x", str(tmp_path / "sub.py")])
    assert exit_.value.code == 2
    assert "error: no auto-checked exercise 'nosuch-ex-x'; registered: " in capsys.readouterr().err


def test_an_overrun_that_writes_nan_is_caught(rng):
    """On a GPU an unguarded thread past the end reads the inputs' NaN guards and writes NaN past the
    end of `out`; the output's guard holds a finite sentinel, so that NaN still shows."""

    def launch(out, x):
        out[...] = x
        out.base[out.size + 3] = np.nan  # what such a thread does (the simulator would stop it first)

    report = exercise.check_kernel(
        launch,
        lambda x: x,
        lambda r, size: (r.random(size, dtype=np.float32),),
        sizes=(37,),
        atol=0,
        rng=rng,
        device_only=False,
    )
    assert not report.ok and "outside an array" in str(report), str(report)


# --- questions: answers that are numbers, sets or words -------------------------------------------

QUESTION = exercise.Question(
    label="test-ex-question",
    task="a count, a set of strides and a word",
    parts={
        "blocks": exercise.Part("count the blocks of both waves"),
        "strides": exercise.Part("write the bank of lane l as (l * s) mod 32"),
        "bound": exercise.Part("compare the intensity with the ridge point"),
    },
)
EXPECTED = {"blocks": lambda: 264, "strides": lambda: {1, 3, 5}, "bound": lambda: "memory"}


def test_a_question_passes_right_answers_within_its_tolerance():
    report = QUESTION.check({"blocks": 265, "strides": [5, 3, 1], "bound": " Memory"}, expected=EXPECTED)
    assert report.ok and report.lines[-1] == "PASS  test-ex-question", str(report)


@pytest.mark.parametrize(
    "answers,words",
    [
        ({"blocks": 300, "strides": {1, 3, 5}, "bound": "memory"}, "blocks: not yet. count the blocks"),
        ({"blocks": 264, "strides": {1, 3}, "bound": "memory"}, "strides: not yet. write the bank"),
        ({"blocks": 264, "strides": {1, 3, 5, 7}, "bound": "memory"}, "strides: not yet"),
        ({"blocks": 264, "strides": {1, 3, 5}, "bound": "compute"}, "bound: not yet. compare"),
        ({"blocks": True, "strides": {1, 3, 5}, "bound": "memory"}, "blocks: not yet"),
        ({"blocks": "264", "strides": {1, 3, 5}, "bound": "memory"}, "blocks: not yet"),
        ({"strides": {1, 3, 5}, "bound": "memory"}, "blocks: not answered yet"),
    ],
)
def test_a_question_fails_a_wrong_or_missing_part_and_names_it(answers, words):
    report = QUESTION.check(answers, expected=EXPECTED)
    assert not report.ok and words in str(report), str(report)
    assert "264" not in str(report), "the report gave the answer away"


def test_a_question_refuses_an_unknown_part_and_the_wrong_entry_point():
    with pytest.raises(ValueError, match=r"no part named \['block'\]"):
        QUESTION.check({"block": 264})
    with pytest.raises(TypeError, match="answers: expected a dict"):
        QUESTION.check(264)
    with pytest.raises(TypeError, match="asks for answers, not a kernel"):
        exercise.check(QUESTION, lambda out: None)
    with pytest.raises(TypeError, match="asks for a kernel"):
        exercise.answer("machine-ex-saxpy", value=1)


# --- feedback: the first wrong part, the answers that follow from it, and a mode without hints ---------------

CHAIN = exercise.Question(
    label="test-ex-chain",
    task="flops, bytes, their ratio, a word",
    parts={
        "flops": exercise.Part("count the multiplies and adds"),
        "bytes": exercise.Part("count every array read and written"),
        "intensity": exercise.Part("FLOPs over bytes", uses=("flops", "bytes")),
        "floor_ms": exercise.Part("bytes over the copy rate", uses=("bytes",)),
        "bound": exercise.Part("the larger time", uses=("intensity",)),
    },
)
CHAIN_EXPECTED = {
    "flops": lambda: 2e8,
    "bytes": lambda: 1.2e9,
    "intensity": lambda: 1 / 6,
    "floor_ms": lambda: 0.4,
    "bound": lambda: "memory",
}
CHAIN_RIGHT = {"flops": 2e8, "bytes": 1.2e9, "intensity": 1 / 6, "floor_ms": 0.4, "bound": "memory"}


def test_feedback_names_the_first_wrong_part_and_what_follows_from_it():
    answers = CHAIN_RIGHT | {"bytes": 8e8, "intensity": 0.25, "floor_ms": 0.27}
    lines = CHAIN.check(answers, expected=CHAIN_EXPECTED).lines
    assert lines == [
        "  flops: right",
        "  bytes: not yet. count every array read and written",
        "  intensity: not yet (it follows from bytes)",
        "  floor_ms: not yet (it follows from bytes)",
        "  bound: right",
        "FAIL  test-ex-chain: the first wrong part is bytes; intensity, floor_ms and bound follow from it",
    ]
    assert CHAIN.check(CHAIN_RIGHT, expected=CHAIN_EXPECTED).lines[-1] == "PASS  test-ex-chain"


def test_a_part_that_follows_from_no_wrong_one_keeps_its_hint():
    lines = CHAIN.check(CHAIN_RIGHT | {"flops": 3e8, "floor_ms": 9.0}, expected=CHAIN_EXPECTED).lines
    assert "  floor_ms: not yet. bytes over the copy rate" in lines
    assert lines[-1] == "FAIL  test-ex-chain: the first wrong part is flops; intensity and bound follow from it"


def test_a_part_may_use_only_earlier_parts():
    bad = exercise.Question("test-ex-bad", "t", {"a": exercise.Part("h", uses=("b",)), "b": exercise.Part("h")})
    with pytest.raises(ValueError, match=r"part a may use only earlier parts \[\]"):
        exercise.register(bad)


@pytest.fixture
def grading_mode():
    exercise.set_grading(True)
    yield
    exercise.set_grading(False)


def test_grading_mode_withholds_the_hints_of_answers(grading_mode):
    text = str(CHAIN.check(CHAIN_RIGHT | {"bytes": 8e8}, expected=CHAIN_EXPECTED))
    assert "  bytes: not yet\n" in text and "count every array" not in text
    assert "the first wrong part is bytes" in text


def test_grading_mode_withholds_the_hints_of_kernels(grading_mode, rng):
    def launch(out, x, y, a):
        saxpy[out.size // 32, 32](out, x, y, a)  # the grid rounded down

    text = str(exercise.get("machine-ex-saxpy").check(launch, rng=rng))
    assert "1 of 257 output elements were never written (they still hold the poison): the last element" in text
    assert "Likely" not in text and "round the block count up" not in text


def test_grading_mode_keeps_what_the_accesses_show_and_drops_the_advice():
    advice = (
        "uncoalesced global access: the reads of `x` need 4.0 sectors of 32 bytes per warp access where 1.0 would "
        "do (4.0 times the minimum); consecutive lanes touch addresses 128 bytes apart. Let threadIdx.x run along"
    )
    exercise.set_grading(True)
    try:
        assert exercise._observation(advice).endswith("consecutive lanes touch addresses 128 bytes apart")
    finally:
        exercise.set_grading(False)
    assert exercise._observation(advice) == advice


# --- a launch that copies an answer made on the host, or stops the process ------------------------------------


@cuda.jit
def copy_into(out, src):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = src[i]


@cuda.jit
def copy_reading_inputs(out, x, y, answer):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = answer[i] + 0 * x[i] * y[i]


@cuda.jit
def saxpy_ignoring_y(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i]


@pytest.mark.parametrize(
    "launch, words",
    [
        (lambda out, x, y, a: copy_into[(out.size + 31) // 32, 32](out, a * x + y), "no kernel launch took an input"),
        (
            lambda out, x, y, a: copy_reading_inputs[(out.size + 31) // 32, 32](out, x, y, a * x + y),
            "a kernel was handed the answer: its argument `answer` held the expected output",
        ),
    ],
    ids=["copies the answer", "reads the inputs, copies the answer"],
)
def test_a_kernel_that_copies_an_answer_made_on_the_host_fails(launch, words, rng):
    report = exercise.get("machine-ex-saxpy").check(launch, rng=rng)
    assert not report.ok and words in str(report), str(report)


@pytest.mark.skipif(device.on_gpu(), reason="the accesses are counted in the simulator")
def test_an_input_no_kernel_reads_is_named(rng):
    report = exercise.get("machine-ex-saxpy").check(
        lambda out, x, y, a: saxpy_ignoring_y[(out.size + 31) // 32, 32](out, x, y, a), rng=rng
    )
    assert "no kernel read input argument 2 (of shape (257,))" in str(report), str(report)


def test_inputs_copied_to_the_device_first_still_count_as_the_inputs(rng):
    def launch(out, x, y, a):
        saxpy[(out.size + 31) // 32, 32](out, cuda.to_device(check_host(x)), cuda.to_device(check_host(y)), a)

    report = exercise.get("machine-ex-saxpy").check(launch, rng=rng)
    assert report.ok, str(report)


def check_host(x):
    if device.on_gpu():
        pytest.skip("on a GPU the inputs are CuPy arrays: cuda.to_device takes host arrays")
    return x


def test_an_intermediate_a_kernel_wrote_is_not_a_handed_answer(rng):
    def launch(out, x, y, a):
        tmp = cuda.device_array(out.shape, np.float32)
        saxpy[(out.size + 31) // 32, 32](tmp, x, y, a)
        copy_into[(out.size + 31) // 32, 32](out, tmp)

    assert exercise.get("machine-ex-saxpy").check(launch, rng=rng).ok


@pytest.mark.parametrize("code", [0, 3, "stop"])
def test_a_launch_that_calls_sys_exit_gets_a_verdict_not_an_exit(code, rng):
    def launch(out, x, y, a):
        sys.exit(code)

    report = exercise.get("machine-ex-saxpy").check(launch, rng=rng)
    assert not report.ok and f"`launch` called sys.exit({code!r})" in str(report)


def test_a_report_shows_no_repr_under_the_printed_one():
    assert exercise.Report("x", True, ["PASS  x"])._ipython_display_() is None


# --- expected answers: from the page's GPU only, or from the edition's digests --------------------------------


def test_an_answer_from_another_gpu_s_rows_is_refused(monkeypatch):
    monkeypatch.setattr(exercise, "page_gpu", lambda: "nvidia-other-gpu")
    floor = exercise.get("machine-ex-floor")
    if exercise._teacher_answers(floor.label) is None:
        pytest.skip("the student edition has no answers.py")
    with pytest.raises(LookupError, match="this page ran on nvidia-other-gpu, but its expected answers would come"):
        floor.check(dict.fromkeys(floor.parts, 1.0))
    sms = exercise.Question("test-ex-pure", "t", {"n": exercise.Part("h")})
    assert sms.check({"n": 2}, expected={"n": lambda: 2}).ok  # an answer that reads no GPU's rows


def test_reading_names_the_gpus_whose_rows_were_read(tmp_path, monkeypatch):
    from kernels.harness import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    (tmp_path / "gpu-a").mkdir()
    (tmp_path / "gpu-a" / "conv_ncu.csv").write_text("x\n1\n")
    with results.reading() as read:
        (tmp_path / "gpu-a" / "conv_ncu.csv").read_text()  # a profiler's dump, read directly
        results.load("machine", results.REFERENCE_GPU)
    assert read == {"gpu-a", results.REFERENCE_GPU}


DIGEST_Q = exercise.Question(
    "test-ex-digest",
    "t",
    {
        "rate": exercise.Part("h", rtol=0.05),
        "count": exercise.Part("h", rtol=0),
        "word": exercise.Part("h"),
        "set": exercise.Part("h", rtol=0),
        "negative": exercise.Part("h"),
    },
)
DIGEST_VALUES = {"rate": 3024.5, "count": 132, "word": "memory", "set": {1, 3, 5}, "negative": -0.25}


@pytest.fixture
def digests(tmp_path, monkeypatch):
    """An edition's digests of DIGEST_Q's answers, where the checker looks for them."""
    parts = {n: exercise._digest_of(v, DIGEST_Q.parts[n].rtol, "salt", DIGEST_Q, n) for n, v in DIGEST_VALUES.items()}
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / exercise.DIGESTS).write_text(
        json.dumps({DIGEST_Q.label: {"gpu": None, "salt": "salt", "parts": parts}})
    )
    monkeypatch.setattr(exercise, "KERNELS", tmp_path)
    return tmp_path / "test" / exercise.DIGESTS


@pytest.mark.parametrize(
    "part, given, right",
    [
        ("rate", 3024.5, True),
        ("rate", 3024.5 * 1.037, True),  # within three quarters of the tolerance: always accepted
        ("rate", 3024.5 * 0.963, True),
        ("rate", 3024.5 * 1.06, False),
        ("rate", -3024.5, False),
        ("rate", "3024.5", False),
        ("rate", True, False),
        ("count", 132, True),
        ("count", 132.0, True),
        ("count", 133, False),
        ("word", " Memory", True),
        ("word", "compute", False),
        ("set", [5, 3, 1], True),
        ("set", {1, 3}, False),
        ("set", {1, 3, 5, 7}, False),
        ("set", "135", False),
        ("negative", -0.251, True),
        ("negative", 0.25, False),
    ],
)
def test_digests_check_an_answer_as_the_expected_value_does(digests, part, given, right):
    answers = dict(DIGEST_VALUES) | {part: given}
    report = DIGEST_Q.check(answers)
    assert (f"  {part}: right" in report.lines) == right, str(report)
    live = DIGEST_Q.check(answers, expected={n: (lambda v=v: v) for n, v in DIGEST_VALUES.items()})
    assert live.ok == right, "the digests and the expected value disagree"


def test_digests_of_another_gpu_s_run_are_not_used(digests):
    stored = json.loads(digests.read_text())
    stored[DIGEST_Q.label]["gpu"] = "nvidia-other-gpu"
    digests.write_text(json.dumps(stored))
    with pytest.raises(
        LookupError, match="come from the run of nvidia-other-gpu; this page ran on .*hand your answers"
    ):
        DIGEST_Q.check(DIGEST_VALUES)


def test_every_question_has_its_answers_and_exercises_py_computes_none():
    questions = [q for q in EXERCISES if isinstance(q, exercise.Question)]
    assert questions
    for q in questions:
        assert all(isinstance(p.hint, str) for p in q.parts.values())
        if (exercise.KERNELS / q.label.split("-ex-")[0] / "answers.py").is_file():
            assert set(exercise._teacher_answers(q.label)) == set(q.parts)
    for path in exercise.KERNELS.glob("*/exercises.py"):
        assert "answers(" not in path.read_text(), f"{path}: expected answers belong in answers.py"


# --- what an exercise asks beyond its results: a read budget, a fixed grid --------------------------------------


@cuda.jit
def copy_reading(out, x, reads):
    i = cuda.grid(1)
    if i < out.size:
        acc = x[i]
        for _ in range(reads - 1):  # the same element again: what a tile in registers would save
            acc = x[i]
        out[i] = acc


def copy_exercise(**kw):
    return exercise.Exercise("test-ex-copy", "out = x", copy_inputs, identity, sizes=(37, 100), atol=0, **kw)


def test_a_read_budget_fails_a_kernel_that_reads_too_often_and_counts_one_that_does_not(rng):
    if device.on_gpu():
        pytest.skip("the reads are counted in the simulator")
    budget = exercise.ReadBudget(per=1.5, work=lambda x: x.size, unit="output", hint="read each element once")
    ex = copy_exercise(reads=budget)
    report = ex.check(lambda out, x: copy_reading[(out.size + 31) // 32, 32](out, x, 3), rng=rng)
    assert not report.ok
    assert "the kernel read its inputs 3.00 times per output where at most 1.5 would do" in str(report), str(report)
    assert "Likely: read each element once" in str(report)
    report = ex.check(lambda out, x: copy_reading[(out.size + 31) // 32, 32](out, x, 1), rng=rng)
    assert report.ok and "global reads (counted in the simulator): at most 1.00 per output" in str(report)


def test_a_fixed_grid_fails_a_launch_with_more_threads(rng):
    ex = copy_exercise(max_threads=64)
    report = ex.check(lambda out, x: copy_reading[(out.size + 31) // 32, 32](out, x, 1), rng=rng)
    assert not report.ok and "the launch ran 128 threads where this exercise allows at most 64" in str(report)
    assert ex.check(lambda out, x: copy_reading[2, 32](out, x, 1), rng=rng).ok is False  # 64 threads, 100 outputs


# --- CUDA C++ exercises: compiled everywhere, their SASS read; run on a GPU ---------------------------------------

LOCAL_ARRAY = r"""
extern "C" __global__ void pick(const float* x, float* y, int n) {
    float slots[32];  // written and read at run-time indices: in local memory
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = 0; i < n; ++i) slots[i % 32] = x[i % 32];
    if (t < n) y[t] = slots[t % 32];
}
"""


def pick_exercise() -> CudaExercise:
    return CudaExercise(
        "test-ex-pick",
        "y[t] = x[t % 32]",
        kernel="pick",
        launch=lambda kernel, y, x: kernel((1,), (64,), (x, y, np.int32(y.size))),
        make_inputs=lambda rng, n: (rng.standard_normal(32).astype(np.float32),),
        reference=lambda x: np.resize(x, 50).astype(np.float64),
        sizes=(50,),
        atol=0,
        sass=(SassRule("local-memory loads and stores (LDL, STL)", opcodes("LDL", "STL"), most=0, hint="no array"),),
    )


def test_a_cuda_kernel_whose_sass_misses_a_rule_fails_and_says_which():
    if device.on_gpu():
        pytest.skip("on a GPU the kernel runs too: the simulator's verdict is the SASS alone")
    report = pick_exercise().check(LOCAL_ARRAY)
    assert not report.ok and "it compiles, but its SASS misses what the exercise asks" in str(report), str(report)
    assert "local-memory loads and stores (LDL, STL); the exercise wants none. Likely: no array" in str(report)
    assert report.lines[-1] == "  (its results are checked on a GPU only)"
    exercise.set_grading(True)
    try:
        assert "Likely" not in str(pick_exercise().check(LOCAL_ARRAY))
    finally:
        exercise.set_grading(False)


def test_a_cuda_kernel_that_does_not_compile_or_is_missing_fails_with_the_reason():
    ex = pick_exercise()
    report = ex.check('extern "C" __global__ void pick(const float* x) { int a = ; }')
    assert not report.ok and report.lines[0].startswith("FAIL  test-ex-pick: the kernel does not compile for sm_")
    assert any("error: expected an expression" in line for line in report.lines), str(report)
    report = ex.check('extern "C" __global__ void other(float* y) { }')
    assert not report.ok and 'the source has no kernel `pick`: keep the starter\'s extern "C"' in str(report)
    with pytest.raises(TypeError, match="expected the kernel's CUDA C.. source as text"):
        ex.check(lambda out: None)


def notebook_cell_defining(notebook: str, text: str) -> str:
    cells = json.loads((exercise.KERNELS.parent / "notebooks" / notebook).read_text())["cells"]
    found = [c for c in cells if c["cell_type"] == "code" and text in "".join(c["source"])]
    assert len(found) == 1, f"{notebook}: {len(found)} code cells hold {text!r}"
    return "".join(found[0]["source"])


def test_the_cuda_starter_compiles_and_asks_for_its_16_byte_loads():
    if device.on_gpu():
        pytest.skip("on a GPU the starter also runs, and fails its results first")
    scope = {}
    exec(notebook_cell_defining("03_conv.ipynb", "void conv_vec4("), scope)
    report = exercise.get("conv-ex-vec4").check(scope["source"])
    assert not report.ok and "0 16-byte global loads (LDG.E.128)" in str(report), str(report)


@needs_solutions
def test_grading_command_takes_cuda_files(tmp_path, capsys):
    good, bad = tmp_path / "good.cu", tmp_path / "bad.cu"
    wrong = SOLUTIONS["conv-ex-vec4"].wrong
    good.write_text(SOLUTIONS["conv-ex-vec4"].solution)
    bad.write_text(wrong["four scalar stores"][0])
    assert exercise.main(["check", "conv-ex-vec4", str(good)]) == 0
    assert exercise.main(["check", "conv-ex-vec4", "--grading", str(good), str(bad), str(tmp_path / "none.cu")]) == 1
    text = capsys.readouterr().out
    assert "0 16-byte global stores (STG.E.128)" in text and "Likely" not in text
    assert "the file does not load" in text and text.rstrip().endswith("1 passed, 2 failed")
