"""Grading submitted files: each runs in a process of its own, and no file can stop, hang or fool the batch."""

import os
import textwrap
from pathlib import Path

import pytest

from kernels.harness import exercise

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
