import os

import pytest

from kernels.harness import device


def test_mode_is_chosen_once_and_simulator_is_enabled_on_a_cpu():
    assert device.MODE in (device.GPU, device.SIM, device.NONE)
    if device.MODE == device.SIM:
        assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"


def test_announce_prints_one_line(capsys):
    line = device.announce("full")
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and printed.strip() == line
    assert line.startswith("Mode: ")


def test_profile_falls_back_to_ci_without_gpu():
    expected = "full" if device.on_gpu() else "ci"
    assert device.resolve_profile("full") == expected
    assert device.resolve_profile("ci") == "ci"
    with pytest.raises(ValueError, match="'full' or 'ci'"):
        device.resolve_profile("huge")


def test_slug():
    assert device.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert device.slug("  Tesla V100-SXM2-16GB ") == "tesla-v100-sxm2-16gb"


def test_environment_names_gpu_commit_and_date():
    env = device.environment()
    assert {"gpu", "gpu_slug", "commit", "date", "driver", "cuda_runtime"} <= env.keys()
    assert env["date"].endswith("Z")


def test_software_names_the_installed_versions():
    from importlib import metadata
    sw = device.software()
    assert {"python", "numpy", "numba", "numba-cuda"} <= sw.keys()
    assert sw["numpy"] == metadata.version("numpy") and sw["numba-cuda"] == metadata.version("numba-cuda")
    assert ("cupy" in sw and "nvrtc" in sw) == device.on_gpu()


def test_cupy_finds_cublas():
    """CuPy's matmul (05's GEMM ceiling, the implicit-GEMM reference on a GPU) loads cuBLAS when first
    used; the pinned wheels must bring it, since a GPU machine may have no CUDA toolkit. Loading needs no GPU."""
    import cupy
    assert callable(cupy.cuda.cublas.sgemm)  # ImportError here: libcublas missing


@pytest.mark.parametrize("encoded, expected", [(91900, "9.19.0"), (90100, "9.1.0"), (8907, "8.9.7")])
def test_cudnn_version_decodes_both_encodings(monkeypatch, encoded, expected):
    """cuDNN 9 counts minor versions in hundreds (91900 = 9.19.0), cuDNN 8 did not (8907 = 8.9.7)."""
    import sys
    import types
    from kernels.harness import cudnn_conv
    fake = types.SimpleNamespace(backend_version=lambda: encoded, __version__="1.32.0")
    monkeypatch.setitem(sys.modules, "cudnn", fake)
    assert cudnn_conv.version() == f"{expected} (frontend 1.32.0)"


@pytest.mark.skipif(device.on_gpu(), reason="checks the no-GPU path")
def test_properties_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="need a GPU"):
        device.properties()


@pytest.mark.gpu
def test_properties_on_gpu():
    p = device.properties()
    assert p["sms"] > 0 and p["l2_bytes"] > 0 and p["max_sm_clock_mhz"] > 100
