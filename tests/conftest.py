"""Shared test set-up: the harness picks the mode (the simulator on a CPU) before numba.cuda loads."""

import datetime
import os
from pathlib import Path

import numpy as np
import pytest

import gpu_ledger
from kernels.harness import device


def pytest_configure(config):
    if config.getoption("-m") == "gpu" and device.MODE != device.GPU:
        pytest.exit(
            f"the tests marked gpu need a CUDA GPU, and this machine has none ({device.REASON}); "
            "`make test` runs everything else in the CUDA simulator",
            returncode=2,
        )
    if (path := os.environ.get("GPU_VERDICTS")) and device.MODE == device.GPU:  # set by `make gpu-test`
        config.pluginmanager.register(GpuVerdicts(config, Path(path), os.environ.get("GPU_PART")), "gpu-verdicts")


class GpuVerdicts:
    """Writes the GPU verdict ledger (gpu_ledger.py) and keeps the run's report at the end of a run through
    the whole gpu suite (or one part of it)."""

    RANK = ("passed", "skipped", "failed")  # a test's outcome is the worst of its set-up, call and teardown

    def __init__(self, config, path: Path, part: str | None = None):
        self.path = path
        self.part = gpu_ledger.parse_part(part)  # (k, n): this run is part k of n of the gpu tests
        self.other_parts = set()  # the gpu tests left to the other parts
        self.outcomes = {}
        tests = gpu_ledger.ROOT / "tests"
        self.left_out = [
            a for a in config.args if not tests.is_relative_to(Path(config.invocation_params.dir, a).resolve())
        ]

    def pytest_collection_modifyitems(self, config, items):
        """In a part run, keep every n-th gpu test from the k-th on (interleaved, so parts take alike)."""
        if self.part is None:
            return
        k, n = self.part
        gpu = [item for item in items if "gpu" in item.keywords]
        others = [item for i, item in enumerate(gpu) if i % n != k - 1]
        self.other_parts = {item.nodeid for item in others}
        items[:] = [item for item in items if item.nodeid not in self.other_parts]
        config.hook.pytest_deselected(items=others)

    def pytest_deselected(self, items):
        self.left_out += [
            item.nodeid for item in items if "gpu" in item.keywords and item.nodeid not in self.other_parts
        ]

    def pytest_runtest_logreport(self, report):
        if "gpu" in report.keywords:
            seen = self.outcomes.get(report.nodeid, "passed")
            # A declared xfail ran its kernel and failed as its reason says (a strict one that passes is
            # reported failed): checked, not skipped.
            outcome = "passed" if getattr(report, "wasxfail", None) is not None else report.outcome
            self.outcomes[report.nodeid] = max(seen, outcome, key=self.RANK.index)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.left_out:
            left_out = ", ".join(self.left_out[:3])
            self.message = f"GPU verdicts not written to {self.path}: the run left out {left_out} ..."
        elif exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            self.message = f"GPU verdicts not written to {self.path}: the run stopped ({exitstatus!r})"
        else:
            self.message = gpu_ledger.record(
                self.path,
                self.outcomes,
                device.properties()["name"],
                datetime.date.today().isoformat(),
                device.environment()["commit"],
                part=self.part,
            )

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_line(self.message)


def pytest_collection_modifyitems(config, items):
    if device.MODE == device.GPU:
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU (make gpu-test)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """Fresh random inputs on every run: a seed drawn from the OS, printed if a test fails."""
    seed = int(np.random.SeedSequence().entropy % (2**32))
    print(f"random seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def xp():
    return device.xp()
