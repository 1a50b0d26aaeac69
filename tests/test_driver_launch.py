"""kernels/harness/driver_launch.py: bad kinds and a wrong argument count are refused before the driver is
called (the launches themselves run in the GPU tests of the PyTorch API, tests/test_ssim_torch.py)."""

from types import SimpleNamespace

import pytest

from kernels.harness import driver_launch

FUNCTION = SimpleNamespace(ptr=0)  # a loaded kernel's handle; never launched here


@pytest.mark.parametrize("kinds", ["", "px", "pf", 3])
def test_kinds_name_the_parameter_types(kinds):
    with pytest.raises((ValueError, TypeError), match="kinds"):
        driver_launch.Launcher(FUNCTION, kinds)


def test_one_value_per_parameter():
    launch = driver_launch.Launcher(FUNCTION, "ppi")
    with pytest.raises(ValueError, match=r"args: expected 3 values \(ppi\), got 2"):
        launch((1,), (32,), (0, 0))


def test_each_thread_has_its_own_parameter_buffers():
    import threading

    launch = driver_launch.Launcher(FUNCTION, "pi")
    mine = launch._buffers()
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(launch._buffers()))
    thread.start()
    thread.join()
    assert launch._buffers() is mine and theirs[0] is not mine
    assert [type(v) for v in mine[0]] == [driver_launch.KINDS["p"], driver_launch.KINDS["i"]]
