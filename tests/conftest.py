"""Shared test set-up: the harness picks the mode (the simulator on a CPU) before numba.cuda loads."""
import numpy as np
import pytest

from kernels.harness import device


def pytest_configure(config):
    if config.getoption("-m") == "gpu" and device.MODE != device.GPU:
        pytest.exit(f"the tests marked gpu need a CUDA GPU, and this machine has none ({device.REASON}); "
                    "`make test` runs everything else in the CUDA simulator", returncode=2)


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
