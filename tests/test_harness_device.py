import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels.harness import device

ROOT = Path(__file__).resolve().parents[1]


def test_numba_runs_in_the_mode_chosen():
    """Numba's simulator is on exactly when the harness chose not to use a GPU."""
    import numba

    assert bool(numba.config.ENABLE_CUDASIM) == (device.MODE != device.GPU)
    if device.MODE != device.GPU:
        assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"


class FakeDriver:
    """libcuda's cuInit, cuDeviceGetCount and cuGetErrorName, failing as asked."""

    def __init__(self, init=0, count=0):
        self.init, self.count = init, count

    def cuInit(self, flags):
        return self.init

    def cuDeviceGetCount(self, ref):
        ref._obj.value = self.count
        return 0

    def cuGetErrorName(self, code, ref):
        names = {803: b"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 100: b"CUDA_ERROR_NO_DEVICE"}
        if code not in names:
            return 1  # CUDA_ERROR_INVALID_VALUE: a code the driver cannot name
        ref._obj.value = names[code]
        return 0


@pytest.mark.parametrize(
    "driver, expected",
    [
        (FakeDriver(init=803), (0, "cuInit failed with error 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)")),
        (FakeDriver(init=999), (0, "cuInit failed with error 999")),
        (FakeDriver(count=0), (0, "the CUDA driver sees no device")),
        (FakeDriver(count=2), (2, "")),
    ],
)
def test_driver_failure_is_named_not_reported_as_no_gpu(monkeypatch, driver, expected):
    monkeypatch.setattr(device.ctypes, "CDLL", lambda name: driver)
    assert device._cuda_device_count() == expected


def test_forced_gpu_mode_names_the_driver_error(monkeypatch):
    monkeypatch.setattr(device.ctypes, "CDLL", lambda name: FakeDriver(init=803))
    monkeypatch.setenv("BOOK_MODE", "gpu")
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    with pytest.raises(RuntimeError, match="error 803 .CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"):
        device._select()


def test_nvidia_smi_asks_about_cuda_device_0_by_its_bus_id(monkeypatch):
    """With CUDA_VISIBLE_DEVICES=3, CUDA device 0 is not nvidia-smi's GPU 0: the bus id names it."""
    import subprocess
    import types

    import cupy

    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        out = "1980, 2619, 1980, 2619\n" if "clocks" in cmd[3] else "580.95.05\n"
        return types.SimpleNamespace(stdout=out)

    monkeypatch.setattr(device, "MODE", device.GPU)
    monkeypatch.setattr(cupy.cuda.runtime, "deviceGetPCIBusId", lambda dev: {0: "0000:9B:00.0"}[dev])
    monkeypatch.setattr(subprocess, "run", run)
    assert device.current_clocks() == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "max_sm_clock_mhz": 1980,
        "max_mem_clock_mhz": 2619,
    }
    assert device._driver_version() == "580.95.05"
    assert all(cmd[:3] == ["nvidia-smi", "-i", "0000:9B:00.0"] for cmd in calls) and len(calls) == 2


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


def _program(folder, name):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n")
    (folder / name).chmod(0o755)
    return str(folder / name)


def test_cuda_program_looks_on_path_then_in_cuda_home_then_in_the_wheels(monkeypatch, tmp_path):
    import nvidia

    wheel = _program(tmp_path / "wheels" / "cuda_nvcc" / "bin", "ptxas")
    monkeypatch.setattr(nvidia, "__path__", [str(tmp_path / "wheels")])
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    assert device.cuda_program("ptxas") == wheel
    home = _program(tmp_path / "toolkit" / "bin", "ptxas")
    assert device.cuda_program("ptxas") == home
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert device.cuda_program("ptxas") == home
    on_path = _program(tmp_path / "path", "ptxas")
    assert device.cuda_program("ptxas") == on_path
    assert device.cuda_program("no-such-program") is None


@pytest.mark.skipif(device.MODE != device.SIM, reason="checks the simulator's shared arrays")
def test_the_simulator_gives_a_block_one_shared_array_per_call_site():
    """The simulator allocates a shared array when a block's first thread asks for it. Unlocked, two threads
    could both allocate, one then working on a private copy; the harness serializes it. Switching threads
    as often as the interpreter can makes that race likely if the lock were gone."""
    import threading

    from numba import float32
    from numba.cuda.simulator import kernelapi

    threads, before = 32, sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            shared = kernelapi.FakeCUDAShared(0)
            start = threading.Barrier(threads)
            got = [None] * threads

            def work(i, shared=shared, start=start, got=got):
                start.wait()
                first = shared.array(8, float32)
                second = shared.array((2, 3), np.int32)  # a call site of its own: a line of its own
                got[i] = (first, second)

            pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            firsts, seconds = {id(a) for a, _ in got}, {id(b) for _, b in got}
            assert len(firsts) == len(seconds) == 1, "a thread got a private copy of a shared array"
            a, b = got[0]
            assert a is not b and (a.dtype, a.shape, b.dtype, b.shape) == (np.float32, (8,), np.int32, (2, 3))
    finally:
        sys.setswitchinterval(before)


# --- BOOK_MAX_CC: the book treats the GPU as one of a lower compute capability --------------------------


@pytest.fixture
def gpu(monkeypatch):
    """A GPU run on the reference H100 (its properties, no CuPy query); returns a function setting BOOK_MAX_CC."""
    monkeypatch.setattr(device, "MODE", device.GPU)
    monkeypatch.setattr(device, "own_properties", lambda: device.REFERENCE_PROPERTIES)

    def cap(value):
        monkeypatch.setenv("BOOK_MAX_CC", value)

    monkeypatch.delenv("BOOK_MAX_CC", raising=False)
    return cap


def test_without_a_cap_the_gpu_is_itself(gpu):
    assert device.properties() is device.REFERENCE_PROPERTIES
    assert device.target_arch() == "sm_90" and device.capped_ptx_target() is None
    gpu("9.0")  # the GPU's own capability: nothing to lower
    assert device.properties() is device.REFERENCE_PROPERTIES and device.capped_ptx_target() is None


@pytest.mark.parametrize("value, cc", [("7.5", "75"), ("8.0", "80"), ("8.6", "86"), ("8.9", "89")])
def test_a_cap_lowers_the_capability_and_what_it_allows(gpu, value, cc):
    gpu(value)
    props, own = device.properties(), device.REFERENCE_PROPERTIES
    assert props["cc"] == cc and device.target_properties() == props
    assert device.target_arch() == f"sm_{cc}" and device.capped_ptx_target() == f"compute_{cc}"
    assert props["smem_per_block_optin_bytes"] == min(
        own["smem_per_block_optin_bytes"], device.SMEM_PER_BLOCK_OPTIN[cc]
    )
    assert props["hardware_cc"] == "90"
    kept = set(own) - {"name", "cc", "smem_per_block_optin_bytes"}  # the kernels run on the GPU itself
    assert kept and all(props[k] == own[k] for k in kept)
    # its results go to a folder of their own, never to the uncapped GPU's
    assert props["name"] == f"{own['name']} capped at sm_{cc}"
    assert device.slug(props["name"]) != device.slug(own["name"])


def test_the_cap_allows_a_block_the_shared_memory_of_that_capability():
    """An sm_89 GPU's block may have 99 KB of shared memory, and HALO TILE's tile needs more (book/rerun.md)."""
    from gpus import A100, H100, RTX_4090, T4

    for gpu in (T4, A100, RTX_4090, H100):
        assert device.SMEM_PER_BLOCK_OPTIN[gpu["cc"]] == gpu["smem_per_block_optin_bytes"], gpu["name"]


def test_a_cap_applies_to_the_reference_gpu_without_one(monkeypatch):
    monkeypatch.setenv("BOOK_MAX_CC", "8.0")
    if device.on_gpu():
        pytest.skip("checks the no-GPU path")
    assert device.target_properties()["cc"] == "80" and device.target_arch() == "sm_80"
    assert device.capped_ptx_target() is None  # nothing is loaded without a GPU


@pytest.mark.parametrize(
    "value, error",
    [
        ("abc", "BOOK_MAX_CC must be a compute capability such as 7.5 or 8.9, got 'abc'"),
        ("0", "BOOK_MAX_CC must be a compute capability such as 7.5 or 8.9, got '0'"),
        ("75", "BOOK_MAX_CC must be a compute capability such as 7.5 or 8.9, got '75'"),
        ("sm_75", "BOOK_MAX_CC must be a compute capability such as 7.5 or 8.9, got 'sm_75'"),
        ("9.9", "BOOK_MAX_CC=9.9 is above this GPU's compute capability 9.0: a cap can only lower it"),
        ("10.0", "BOOK_MAX_CC=10.0 is above this GPU's compute capability 9.0"),
        ("7.0", r"BOOK_MAX_CC=7.0 is not a compute capability the book knows \(7.5, 8.0, 8.6, 8.9, 9.0\)"),
        ("8.7", r"BOOK_MAX_CC=8.7 is not a compute capability the book knows"),
    ],
)
def test_a_bad_cap_is_a_clear_error(gpu, value, error):
    gpu(value)
    with pytest.raises(ValueError, match=error):
        device.properties()
    with pytest.raises(ValueError, match=error):
        device.announce("full")


def test_hopper_code_does_not_run_on_a_newer_gpu_capped_at_9_0(monkeypatch):
    blackwell = device.REFERENCE_PROPERTIES | {"name": "A Blackwell GPU", "cc": "100"}
    monkeypatch.setenv("BOOK_MAX_CC", "9.0")
    with pytest.raises(ValueError, match="BOOK_MAX_CC=9.0 runs sm_90a code, which a 10.0 GPU cannot"):
        device.capped(blackwell)
    monkeypatch.setenv("BOOK_MAX_CC", "8.9")
    assert device.capped(blackwell)["cc"] == "89"


def _import_device(env: dict, fake_gpu: bool) -> subprocess.CompletedProcess:
    """Import the harness in a fresh process with ``env``; with ``fake_gpu``, libcuda reports one device."""
    fake = (
        "import ctypes\n"
        "class Driver:\n"
        "    def cuInit(self, flags): return 0\n"
        "    def cuDeviceGetCount(self, ref): ref._obj.value = 1; return 0\n"
        "ctypes.CDLL = lambda name: Driver()\n"
    )
    code = (fake if fake_gpu else "") + (
        "import os\nfrom kernels.harness import device\nprint(device.MODE, os.environ.get('NUMBA_FORCE_CUDA_CC'))\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "BOOK_MODE", "BOOK_MAX_CC")}
    return subprocess.run(
        [sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_numba_compiles_for_the_capped_capability_on_a_gpu():
    """Numba's compiler reads NUMBA_FORCE_CUDA_CC: PTX for compute_75, which the driver compiles for the GPU."""
    done = _import_device({"BOOK_MAX_CC": "7.5"}, fake_gpu=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["gpu", "7.5"]
    done = _import_device({"BOOK_MAX_CC": "7.5", "NUMBA_ENABLE_CUDASIM": "1"}, fake_gpu=False)
    assert done.stdout.split() == ["sim", "None"], done.stderr  # the simulator compiles nothing


def test_a_malformed_cap_stops_the_first_import():
    done = _import_device({"BOOK_MAX_CC": "abc", "NUMBA_ENABLE_CUDASIM": "1"}, fake_gpu=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ValueError: BOOK_MAX_CC must be a compute capability such as 7.5 or 8.9, got 'abc'"
    )
