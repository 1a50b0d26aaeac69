"""Every CUDA C++ source in kernels/ compiles for each target without a GPU; ptxas's report is kept."""

import csv
from pathlib import Path

import pytest

from kernels.harness import cuda_cpp

REPORT = Path(__file__).resolve().parents[1] / "build" / "cuda_resources.csv"
SOURCES = cuda_cpp.all_sources()


@pytest.fixture(scope="module")
def report():
    rows = []
    yield rows
    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("w", newline="") as f:
        writer = csv.DictWriter(
            f,
            fieldnames=[
                "source",
                "kernel",
                "arch",
                "registers",
                "spill_stores",
                "spill_loads",
                "stack_bytes",
                "smem_bytes",
            ],
        )
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.parametrize("arch", cuda_cpp.TARGETS)
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(cuda_cpp.KERNELS)))
def test_compiles(source, arch, report):
    compiled = cuda_cpp.compile_cubin(source, arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    res = compiled.resources
    assert res, f"ptxas reported no entry function for {source.name}: {compiled.log}"
    for r in res:
        assert 0 < r.registers <= 255
        report.append({"source": str(source.relative_to(cuda_cpp.KERNELS)), **vars(r)})


def test_a_compile_error_is_reported_with_the_log(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    with pytest.raises(RuntimeError, match="undefined_name"):
        cuda_cpp.compile_cubin(bad, "sm_90")


def test_a_cached_compile_without_its_ptxas_report_is_redone(tmp_path, monkeypatch):
    """NVRTC 13 can answer from its cache with an empty log; a compile in a fresh process brings the
    ptxas report back (the child process runs the real NVRTC, not this test's stand-in)."""
    monkeypatch.setenv("BOOK_CACHE", str(tmp_path / "cache"))  # a compile of its own, not an earlier run's
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x) { x[0] = 1.f; }\n')
    real, calls = cuda_cpp._nvrtc, []

    def cached(path, source, opts):
        calls.append(opts)
        return "", real(path, source, opts)[1]

    monkeypatch.setattr(cuda_cpp, "_nvrtc", cached)
    compiled = cuda_cpp.compile_cubin(src, "sm_80", options=("-DNONCE_OF_THIS_TEST",))
    assert len(calls) == 1 and compiled.cubin[:4] == b"\x7fELF"
    assert [r.kernel for r in compiled.resources] == ["k"]


def test_a_compile_is_stored_once_for_every_process(tmp_path, monkeypatch):
    """The cubin and ptxas's report go to the disk cache; a later process (here: the in-process cache
    cleared) loads both without compiling, and a changed header is a new compile."""
    monkeypatch.setenv("BOOK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "h.cuh").write_text("#define VALUE 1.f\n")
    src = tmp_path / "k.cu"
    src.write_text('#include "h.cuh"\nextern "C" __global__ void k(float* x) { x[0] = VALUE; }\n')
    real, calls = cuda_cpp._nvrtc, []

    def counted(path, source, opts):
        calls.append(opts)
        return real(path, source, opts)

    monkeypatch.setattr(cuda_cpp, "_nvrtc", counted)
    first = cuda_cpp.compile_cubin(src, "sm_90")
    cuda_cpp._compile.cache_clear()
    again = cuda_cpp.compile_cubin(src, "sm_90")
    assert len(calls) == 1 and (again.cubin, again.log) == (first.cubin, first.log)
    assert [r.kernel for r in again.resources] == ["k"]
    assert len(list((tmp_path / "cache" / "nvrtc").iterdir())) == 1  # no temporary file left behind
    (tmp_path / "h.cuh").write_text("#define VALUE 2.f\n")
    cuda_cpp._compile.cache_clear()
    assert cuda_cpp.compile_cubin(src, "sm_90").cubin != first.cubin and len(calls) == 2
    monkeypatch.setenv("BOOK_CACHE", "off")
    cuda_cpp._compile.cache_clear()
    cuda_cpp.compile_cubin(src, "sm_90")
    assert len(calls) == 3


def test_bad_arch_and_missing_file():
    with pytest.raises(ValueError, match="sm_90"):
        cuda_cpp.compile_cubin(SOURCES[0], "hopper")
    with pytest.raises(FileNotFoundError, match="relative to kernels/"):
        cuda_cpp.compile_cubin("machine/nope.cu")


def test_load_for_an_arch_keeps_its_cubins_in_one_folder_removed_at_exit(tmp_path, monkeypatch):
    """Two variants of one source (as conv's -DMIX_LOADS=n) get two files, not two temporary folders."""
    import sys
    import types

    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x) { x[0] = X; }\n')
    loaded, at_exit = [], []

    def raw_module(path):
        return types.SimpleNamespace(get_function=lambda name: loaded.append(Path(path)) or name)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=raw_module))
    monkeypatch.setattr(cuda_cpp.device, "MODE", cuda_cpp.device.GPU)
    monkeypatch.setattr(cuda_cpp.atexit, "register", lambda f, *args, **kwargs: at_exit.append((f, args, kwargs)))
    cuda_cpp._cubin_dir.cache_clear()
    try:
        for x in (1, 2):
            assert cuda_cpp.load.__wrapped__(src, "k", (f"-DX={x}",), arch="sm_90") == "k"
        assert loaded[0] != loaded[1] and loaded[0].parent == loaded[1].parent
        assert all(p.read_bytes()[:4] == b"\x7fELF" for p in loaded)
        ((cleanup, args, kwargs),) = at_exit
        cleanup(*args, **kwargs)
        assert not loaded[0].parent.exists()
    finally:
        cuda_cpp._cubin_dir.cache_clear()


def test_parse_ptxas_log():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]"""
    (r,) = cuda_cpp.parse_ptxas_log(log, "sm_90")
    assert (r.kernel, r.registers, r.spill_stores, r.spill_loads, r.stack_bytes, r.smem_bytes) == (
        "k",
        40,
        4,
        12,
        8,
        2048,
    )


def test_nvrtc_writes_into_its_own_buffers(tmp_path):
    """A kernel without a ptxas report leaves a one-byte log; it must not land in Python's shared b" "."""
    src = tmp_path / "empty.cu"
    src.write_bytes(b'extern "C" __global__ void k(float *x) { x[0] = 1.0f; }')
    log, cubin = cuda_cpp._nvrtc(src, src.read_bytes(), ["-arch=sm_90"])
    assert cubin[:4] == b"\x7fELF" and isinstance(cubin, bytes)
    assert bytes([32])[0] == 32  # the shared one-byte object still holds its space
