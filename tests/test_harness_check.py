import sys
from pathlib import Path

import numpy as np
import pytest

from kernels.harness import check, device


def test_poison_fills_floats_with_nan_and_ints_with_max():
    f = check.poison(np.zeros(5, np.float32))
    i = check.poison(np.zeros(3, np.int32))
    assert np.isnan(f).all()
    assert (i == np.iinfo(np.int32).max).all()
    assert check.poison(np.zeros(4, bool)).all()
    with pytest.raises(TypeError, match="cannot poison an array of dtype"):
        check.poison_value(np.dtype("U3"))


def test_compare_passes_within_tolerance(rng):
    ref = rng.random((7, 13))
    out = (ref + 1e-7).astype(np.float32)
    result = check.compare(out, ref, atol=1e-6, rtol=1e-5, name="x")
    assert result.ok
    assert str(result) == "PASS  x: max|err| <= 1e-06, rel <= 1e-05"


def test_compare_fails_on_error_and_reports_it(rng):
    ref = rng.random(100)
    out = ref.copy()
    out[17] += 0.5
    result = check.compare(out, ref, atol=1e-3)
    assert not result.ok
    assert result.max_abs == pytest.approx(0.5)
    assert str(result).startswith("FAIL")


def test_compare_fails_on_the_relative_error_alone(rng):
    ref = rng.random(100) * 1e-3 + 1e-4
    result = check.compare(ref * 1.1, ref, atol=1e-3, rtol=1e-5)  # max|err| 1e-4 < atol, rel 0.1
    assert not result.ok and result.max_abs <= 1e-3 and result.rel_fro == pytest.approx(0.1)
    assert check.compare(ref * 1.1, ref, atol=1e-3).ok  # no rtol: atol alone decides


def test_compare_fails_on_unwritten_poisoned_elements(rng):
    ref = rng.random(64)
    out = check.poison(np.empty(64))
    out[:63] = ref[:63]
    result = check.compare(out, ref, atol=1.0)
    assert not result.ok and result.n_nonfinite == 1
    assert "NaN" in str(result)


def test_compare_requires_the_reference_s_nan_and_inf_exactly():
    nan, inf = np.nan, np.inf
    assert check.compare(np.array([1.0, nan, -inf, 2.0]), np.array([1.0, nan, -inf, 2.0]), atol=0).ok
    for got, want in (([1.0, -inf], [1.0, inf]), ([1.0, 3.0], [1.0, nan]), ([1.0, nan], [1.0, inf])):
        result = check.compare(np.array(got), np.array(want), atol=0)
        assert not result.ok and result.n_special_mismatch == 1
        assert str(result) == "FAIL  output: max|err| <= 0 (1 elements differ where the reference is NaN/Inf)"
    with pytest.raises(ValueError, match="no finite element"):
        check.compare(np.array([1.0, 2.0, 3.0]), np.full(3, nan), atol=1e-6)


def test_compare_rejects_shape_mismatch_and_empty():
    with pytest.raises(ValueError, match="shape"):
        check.compare(np.zeros(3), np.zeros(4), atol=0)
    with pytest.raises(ValueError, match="empty"):
        check.compare(np.zeros(0), np.zeros(0), atol=0)


def test_to_host_rejects_non_arrays():
    with pytest.raises(TypeError, match="NumPy, CuPy or Numba"):
        check.to_host([1, 2, 3])


def test_require_array_names_what_was_expected(xp):
    a = xp.zeros((2, 3, 11, 11), np.float32)
    assert check.require_array(a, "img", dtype=np.float32, ndim=4) is a
    with pytest.raises(TypeError, match="expected dtype float32, got float64"):
        check.require_array(a.astype(np.float64), "img", dtype=np.float32)
    with pytest.raises(ValueError, match="expected 4 dimensions"):
        check.require_array(a[0], "img", ndim=4)
    with pytest.raises(ValueError, match="expected shape"):
        check.require_array(a, "img", shape=(2, 3, 11, 12))
    with pytest.raises(ValueError, match="C-contiguous"):
        check.require_array(a[..., ::2], "img")
    with pytest.raises(ValueError, match="empty"):
        check.require_array(xp.zeros((0, 3)), "img")
    with pytest.raises(TypeError, match="expected an? (device )?array.*got list"):
        check.require_array([1.0], "img")


def test_require_array_takes_a_numba_device_array():
    from numba import cuda

    d = cuda.to_device(np.zeros((4, 6), np.float32))
    assert check.require_array(d, "x", dtype=np.float32, shape=(4, 6)) is d
    with pytest.raises(ValueError, match="C-contiguous"):
        check.require_array(d[:, ::2], "x")


def test_memcheck_without_a_gpu_says_so_in_one_line(capsys):
    if check.device.on_gpu():
        pytest.skip("this machine has a GPU: the GPU test below runs memcheck")
    assert check.memcheck(["-c", "pass"]) is None
    assert (
        capsys.readouterr().out == "compute-sanitizer needs a GPU; for its verdict, see the GPU run of this chapter.\n"
    )


def test_memcheck_on_a_gpu_without_compute_sanitizer_says_where_to_get_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(check.device, "on_gpu", lambda: True)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert check.memcheck(["-c", "pass"]) is None
    assert capsys.readouterr().out == (
        f"compute-sanitizer is not on PATH, in {tmp_path / 'bin'} or in an NVIDIA pip "
        "wheel (it comes with the CUDA toolkit); for its verdict, see the committed GPU "
        "run of this chapter.\n"
    )


def test_memcheck_runs_a_script_with_this_checkout_first_on_its_path(monkeypatch, capsys, tmp_path):
    """The scripts the chapters check (scripts/ssim_sanitize.py, ...) import this checkout's kernels,
    installed or not; a stand-in compute-sanitizer runs the program it is given."""
    sanitizer = tmp_path / "bin" / "compute-sanitizer"
    sanitizer.parent.mkdir()
    sanitizer.write_text('#!/bin/sh\nwhile [ "$1" != --error-exitcode ]; do shift; done\nshift 2\nexec "$@"\n')
    sanitizer.chmod(0o755)
    script = tmp_path / "where.py"
    script.write_text("import sys\nprint(sys.path[1])\n")  # [0] is the script's own folder
    monkeypatch.setattr(check.device, "on_gpu", lambda: True)
    monkeypatch.setenv("PATH", str(sanitizer.parent))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert check.memcheck([str(script)]) is True
    assert str(Path(check.__file__).resolve().parents[2]) in capsys.readouterr().out.splitlines()


def test_sanitizer_tool_is_memcheck_or_racecheck_and_is_passed_on(monkeypatch, capsys, tmp_path):
    with pytest.raises(ValueError, match=r"tool: expected one of \('memcheck', 'racecheck'\), got 'initcheck'"):
        check.memcheck(["-c", "pass"], tool="initcheck")
    sanitizer = tmp_path / "bin" / "compute-sanitizer"
    sanitizer.parent.mkdir()
    sanitizer.write_text('#!/bin/sh\necho "tool $2"\n')  # compute-sanitizer --tool NAME ...
    sanitizer.chmod(0o755)
    monkeypatch.setattr(check.device, "on_gpu", lambda: True)
    monkeypatch.setenv("PATH", str(sanitizer.parent))
    assert check.memcheck(["-c", "pass"], tool="racecheck") is True
    assert capsys.readouterr().out.splitlines()[0] == "tool racecheck"


def test_cuda_tool_looks_in_cuda_home_when_path_lacks_it(monkeypatch, tmp_path):
    tool = tmp_path / "bin" / "ncu"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setattr(check.device, "on_gpu", lambda: True)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert check.cuda_tool("ncu", "the counts") == str(tool)


def _fake_ncu(tmp_path, monkeypatch, body: str):
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text("#!/bin/sh\n" + body)
    ncu.chmod(0o755)
    monkeypatch.setattr(check.device, "on_gpu", lambda: True)
    monkeypatch.setenv("PATH", str(ncu.parent))


def test_ncu_csv_passes_the_kernels_metrics_and_program_and_returns_the_csv(monkeypatch, tmp_path):
    _fake_ncu(tmp_path, monkeypatch, 'echo \'"Metric Name"\'; for a in "$@"; do echo "$a"; done\n')  # its arguments
    text = check.ncu_csv(["-m", "some.module"], ("a.sum", "b.ratio"), "regex:conv_", "the counts")
    assert text.splitlines() == [
        '"Metric Name"',
        "--csv",
        "--kernel-name",
        "regex:conv_",
        "--metrics",
        "a.sum,b.ratio",
        sys.executable,
        "-m",
        "some.module",
    ]


def test_ncu_csv_raises_with_ncus_own_words_when_it_fails(monkeypatch, tmp_path):
    _fake_ncu(tmp_path, monkeypatch, "echo '==ERROR== the profiler could not attach' >&2; exit 3\n")
    with pytest.raises(RuntimeError, match=r"ncu failed \(3\): ==ERROR== the profiler could not attach"):
        check.ncu_csv(["-c", "pass"], ("a.sum",), "regex:x", "the counts")


def test_ncu_csv_without_a_gpu_says_where_to_look(capsys):
    if check.device.on_gpu():
        pytest.skip("checks the refusal without a GPU")
    assert check.ncu_csv(["-c", "pass"], ("a.sum",), "regex:x", "the counts") is None
    assert "ncu needs a GPU; for the counts" in capsys.readouterr().out


def test_ncu_csv_takes_a_list_of_arguments_and_of_metrics():
    with pytest.raises(TypeError, match="args: expected a list of strings"):
        check.ncu_csv("-c pass", ("a.sum",), "regex:x", "the counts")
    for metrics in ("a.sum", (), ("a.sum", 3)):
        with pytest.raises(TypeError, match="metrics: expected names of ncu metrics"):
            check.ncu_csv(["-c", "pass"], metrics, "regex:x", "the counts")


_WRITE = (
    "import cupy; k = cupy.RawKernel(r'extern \"C\" __global__ void w(float* p, int i) {{ p[i] = 1.f; }}', 'w'); "
    "a = cupy.zeros(4, cupy.float32); k((1,), (1,), (a, cupy.int32({index}))); cupy.cuda.Device().synchronize()"
)


@pytest.mark.gpu
def test_memcheck_tells_a_clean_run_from_an_out_of_bounds_write(capsys):
    if not check.cuda_tool("compute-sanitizer", "its verdict"):
        pytest.skip("no compute-sanitizer: a GPU machine with only a driver")
    assert check.memcheck(["-c", _WRITE.format(index=3)]) is True
    assert check.memcheck(["-c", _WRITE.format(index=1 << 24)]) is False
    assert "memcheck: errors found" in capsys.readouterr().out


def test_address_is_the_first_element_of_host_and_device_arrays():
    a = np.zeros(8, dtype=np.float32)
    assert check.address(a) == a.ctypes.data
    assert check.address(a[3:]) == a.ctypes.data + 12
    if device.MODE == device.GPU:
        import cupy

        d = cupy.zeros(8, dtype=cupy.float32)
        assert check.address(d[2:]) == d.data.ptr + 8


@pytest.mark.gpu
def test_compare_on_the_gpu_gives_the_host_verdict():
    """Two CuPy arrays are compared on the GPU: the same verdict, max error and counts of non-finite and
    special values as on the host, the relative error to rounding."""
    if device.MODE != device.GPU:
        pytest.skip("needs a CUDA GPU")
    import cupy

    rng = np.random.default_rng(4)
    ref = rng.standard_normal(10_000)
    out = (ref + 1e-5 * rng.standard_normal(ref.size)).astype(np.float32)
    broken, special = out.copy(), ref.copy()
    broken[7], special[9] = np.nan, np.inf  # unwritten; where the reference is infinite
    for got, want in ((out, ref), (broken, ref), (out, special)):
        for atol in (1e-3, 1e-6):
            host = check.compare(got, want, atol=atol, rtol=1e-4, name="x")
            dev = check.compare(cupy.asarray(got), cupy.asarray(want), atol=atol, rtol=1e-4, name="x")
            assert (dev.ok, dev.n_nonfinite, dev.n_special_mismatch) == (
                host.ok,
                host.n_nonfinite,
                host.n_special_mismatch,
            )
            assert str(dev) == str(host)
            if np.isfinite(host.max_abs):
                assert dev.max_abs == host.max_abs and dev.rel_fro == pytest.approx(host.rel_fro, rel=1e-12)
