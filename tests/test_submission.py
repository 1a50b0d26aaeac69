"""Grading submitted files: each runs in a process of its own, and no file can stop, hang or fool the batch."""

import os
import textwrap
from pathlib import Path

import pytest

from kernels.harness import exercise, grading, submission

KERNEL = """
from numba import cuda

@cuda.jit
def saxpy(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]
"""

SUBMISSIONS = {
    "exits.py": "import sys\nsys.exit(0)\n",
    "exits_in_launch.py": "import os\n\ndef launch(out, x, y, a):\n    os._exit(0)\n",
    # An endless loop that also leaves a process behind, which the timeout must end too.
    "hangs.py": """
        import subprocess, sys
        left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(__file__ + ".pid", "w").write(str(left.pid))
        while True:
            pass
    """,
    "crashes.py": "import os, sys\nsys.stderr.write('about to abort\\n')\nsys.stderr.flush()\nos.abort()\n",
    "host_answer.py": "def launch(out, x, y, a):\n    out[...] = a * x + y\n",
    "correct.py": KERNEL + "\ndef launch(out, x, y, a):\n    saxpy[(out.size + 31) // 32, 32](out, x, y, a)\n",
}
VERDICTS = {
    "exits.py": "EXIT",
    "exits_in_launch.py": "EXIT",
    "hangs.py": "TIMEOUT",
    "crashes.py": "CRASH",
    "host_answer.py": "FAIL",
    "correct.py": "PASS",
}


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_batch_grades_every_file_whatever_each_does(tmp_path, capsys):
    files = []
    for name, source in SUBMISSIONS.items():
        (tmp_path / name).write_text(textwrap.dedent(source))
        files.append(str(tmp_path / name))
    # The timeout is short for the endless loop, and long enough for the correct file on a busy machine.
    assert exercise.main(["check", "machine-ex-saxpy", "--timeout", "20", *files]) == 1
    text = capsys.readouterr().out
    report, table = text.rsplit("\nfile ", 1)
    rows = [line.split() for line in table.splitlines()[1:-1]]
    assert rows == [[path, "machine-ex-saxpy", VERDICTS[Path(path).name]] for path in files]
    assert table.splitlines()[-1] == "1 passed, 5 failed"

    assert "EXIT  machine-ex-saxpy: the submission called sys.exit(0) before it was graded" in report
    assert "EXIT  machine-ex-saxpy: the submission ended the process (exit status 0, e.g. os._exit(0))" in report
    assert "TIMEOUT  machine-ex-saxpy: still running after 20 s, so stopped" in report
    assert (
        "CRASH  machine-ex-saxpy: the process was killed by signal SIGABRT before it was graded\n"
        "  the last lines of its stderr:\n    about to abort"
    ) in report
    assert "no kernel ran: the output was written by host code" in report
    assert "PASS  machine-ex-saxpy: 3 sizes" in report
    assert not alive(int((tmp_path / "hangs.py.pid").read_text())), "the timeout left a process running"


def test_a_file_runs_in_a_process_of_its_own(tmp_path, capsys):
    """A submission that would change the grader's own process (its registry) changes only its own."""
    path = tmp_path / "meddles.py"
    path.write_text(
        "from kernels.harness import exercise\nexercise._REGISTRY.clear()\n"
        f"import os\nopen({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
    )
    assert exercise.main(["check", "machine-ex-saxpy", str(path)]) == 1
    assert "defines no function `launch(out, *inputs)`" in capsys.readouterr().out
    assert int((tmp_path / "pid").read_text()) != os.getpid()
    assert exercise.get("machine-ex-saxpy").label == "machine-ex-saxpy"


@pytest.mark.parametrize("value", ["0", "-5", "inf", "soon"])
def test_the_timeout_must_be_a_positive_number_of_seconds(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        exercise.main(["check", "machine-ex-saxpy", "--timeout", value, str(tmp_path / "sub.py")])
    assert exit_.value.code == 2
    assert f"argument --timeout: expected a positive number of seconds, got {value!r}" in capsys.readouterr().err


# --- a submission cannot fool the verdict, nor end the batch ----------------------------------------------

COPY_KERNEL = """
from numba import cuda

@cuda.jit
def copy(out, src):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = src[i]
"""

CHEATS = {
    "imports_the_solution.py": "from kernels.machine.solutions import launch_saxpy as launch\n",
    "runs_solutions_file.py": (
        "from pathlib import Path\nimport kernels\n"
        "exec((Path(kernels.__file__).parent / 'machine' / 'solutions.py').read_text())\nlaunch = launch_saxpy\n"
    ),
    "copies_a_host_answer.py": COPY_KERNEL
    + "\ndef launch(out, x, y, a):\n    copy[(out.size + 31) // 32, 32](out, a * x + y)\n",
    "reads_inputs_copies_answer.py": """
from numba import cuda

@cuda.jit
def pretend(out, x, y, answer):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = answer[i] + 0 * x[i] * y[i]

def launch(out, x, y, a):
    pretend[(out.size + 31) // 32, 32](out, x, y, a * x + y)
""",
    "replaces_the_checker.py": (
        "from kernels.harness import exercise\n"
        "exercise.check_kernel = lambda *a, **k: exercise.Report('x', True, ['PASS'])\n"
        "exercise.Exercise.judge = lambda self, runner, rng=None: exercise.Report('x', True, ['PASS'])\n"
        "def launch(out, x, y, a):\n    pass\n"
    ),
    "writes_a_verdict.py": (
        "import json, os, sys\n"
        "open('verdict.json', 'w').write(json.dumps({'status': 'PASS', 'lines': ['PASS']}))\n"
        "os.write(int(sys.argv[3]), json.dumps({'loaded': True, 'status': 'PASS'}).encode())  # the outcomes pipe\n"
        "os._exit(0)\n"
    ),
    "kills_the_grader.py": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "kills_the_graders_group.py": "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)\n",
}
CHEAT_VERDICTS = {
    "imports_the_solution.py": ("FAIL", "No module named 'kernels.machine.solutions'"),
    "runs_solutions_file.py": ("FAIL", "the file does not load (FileNotFoundError"),
    "copies_a_host_answer.py": ("FAIL", "no kernel launch took an input array"),
    "reads_inputs_copies_answer.py": (
        "FAIL",
        "a kernel was handed the answer: its argument `answer` held the expected",
    ),
    "replaces_the_checker.py": ("FAIL", "no kernel ran"),
    "writes_a_verdict.py": ("FAIL", "the submission's process sent something that is not an outcome"),
    "kills_the_grader.py": ("FAIL", "PermissionError: [Errno 1] Operation not permitted"),
    "kills_the_graders_group.py": ("FAIL", "PermissionError: [Errno 1] Operation not permitted"),
}


def test_no_submission_fools_the_verdict_or_ends_the_batch(tmp_path, capsys):
    files = []
    for name, source in CHEATS.items():
        (tmp_path / name).write_text(source)
        files.append(str(tmp_path / name))
    (tmp_path / "correct.py").write_text(textwrap.dedent(SUBMISSIONS["correct.py"]))
    files.append(str(tmp_path / "correct.py"))
    assert exercise.main(["check", "machine-ex-saxpy", *files]) == 1
    text = capsys.readouterr().out
    assert text.rstrip().endswith(f"1 passed, {len(CHEATS)} failed"), text[-2000:]
    reports = dict(zip(files, text.split("== ")[1:], strict=True))
    for name, (status, words) in CHEAT_VERDICTS.items():
        report = reports[str(tmp_path / name)]
        assert f"{status}  machine-ex-saxpy" in report and words in report, f"{name}:\n{report}"
    assert not (tmp_path / "verdict.json").exists(), "the submission ran in the grader's folder"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_every_process_a_submission_starts_is_ended_whatever_session_it_asks_for(tmp_path):
    """Twenty processes, each asked for a session of its own (refused), then left behind by a double fork."""
    path = tmp_path / "spawns.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, sys, time
            pids, refused = [], 0
            for _ in range(20):
                try:
                    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
                except PermissionError:
                    refused += 1
                if os.fork() == 0:  # a grandchild, orphaned when its parent exits at once
                    if os.fork() == 0:
                        time.sleep(600)
                    os._exit(0)
            time.sleep(1)
            for line in os.popen("pgrep -g " + str(os.getpgid(0))).read().split():
                pids.append(line)
            open({str(tmp_path / "pids")!r}, "w").write(" ".join(pids) + " refused=" + str(refused))
            while True:
                pass
            """
        )
    )
    verdict = submission.grade(exercise.get("machine-ex-saxpy"), path, timeout=20)
    assert verdict.status == "TIMEOUT", str(verdict)
    *pids, refused = (tmp_path / "pids").read_text().split()
    assert refused == "refused=20", "a submission was let start a session of its own"
    assert len(pids) >= 21 and not [p for p in pids if alive(int(p))], "a process the submission started survived"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_the_fence_refuses_signals_to_the_grader_and_to_every_process(tmp_path):
    """Signal 0 only probes: with the fence, even the probe of another process group is refused."""
    path = tmp_path / "probes.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import os
            seen = []
            for target in (os.getppid(), -os.getpgid(os.getppid()), -1):
                try:
                    os.kill(target, 0)
                    seen.append("allowed")
                except PermissionError:
                    seen.append("refused")
            os.kill(os.getpid(), 0)  # itself: allowed
            open({str(tmp_path / "seen")!r}, "w").write(" ".join(seen))
            """
        )
    )
    submission.grade(exercise.get("machine-ex-saxpy"), path, timeout=60)
    assert (tmp_path / "seen").read_text() == "refused refused refused"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_fence_program_jumps_stay_inside_it(machine):
    program = grading.filter_program(grading.protected_ids(os.getpid()), machine)
    for i, (code, taken, skipped, _) in enumerate(program):
        if code in (0x15, 0x35):
            assert i + 1 + max(taken, skipped) < len(program)
    assert program[-1] == (0x06, 0, 0, 0x00050001)  # EPERM
