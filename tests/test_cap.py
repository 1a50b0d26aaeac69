"""BOOK_MAX_CC: the cap set in kernels/harness/device.py reaches every chapter's list of what it leaves out
and the CUDA C++ it builds, and book/rerun.md's table of what each compute capability leaves out follows
from the kernels' registries and from compiling every CUDA C++ source for sm_75."""

import re
import sys
import types
from functools import cache
from pathlib import Path

import pytest

from kernels.conv import registry as conv_registry
from kernels.conv import stages as conv_stages
from kernels.conv import winograd
from kernels.harness import cuda_cpp, device
from kernels.igemm import common as ig
from kernels.igemm import registry as ig_registry
from kernels.ssim import common as ssim_common
from kernels.ssim import cuda_versions
from kernels.ssim import registry as ssim_registry

ROOT = Path(__file__).resolve().parents[1]
OLDEST = "75"  # the oldest capability the book knows: its cubins are compiled here, the others' in test_cuda_cpp


@pytest.fixture
def h100(monkeypatch):
    """A run on the reference H100 (its properties, no CuPy query); returns a function setting BOOK_MAX_CC."""
    monkeypatch.setattr(device, "MODE", device.GPU)
    monkeypatch.setattr(device, "own_properties", lambda: device.REFERENCE_PROPERTIES)
    monkeypatch.setattr(ig_registry, "_SAID", set())

    def cap(value):
        monkeypatch.setenv("BOOK_MAX_CC", value)

    monkeypatch.delenv("BOOK_MAX_CC", raising=False)
    return cap


def capped(cc: str, monkeypatch) -> dict:
    """The reference GPU's properties under BOOK_MAX_CC for ``cc`` ("75")."""
    monkeypatch.setenv("BOOK_MAX_CC", device.dotted(cc))
    return device.capped(device.REFERENCE_PROPERTIES)


# --- the cap reaches the chapters ---------------------------------------------------------------------


def test_a_capped_gpu_leaves_out_what_that_capability_cannot_run(h100, capsys):
    h100("7.5")
    kept = cuda_versions.runnable(ssim_common.BEYOND)
    lines = capsys.readouterr().out.splitlines()
    left = [v for v in ssim_common.BEYOND if ssim_registry.get(v).needs_cc > 75]
    assert left and kept == [v for v in ssim_common.BEYOND if v not in left]
    assert lines == [f"left out on this GPU: {cuda_versions.unsupported(v, device.properties())}" for v in left]
    assert all(line.endswith("this GPU is sm_75") for line in lines)

    h100("8.9")  # HALO TILE's tile needs more shared memory than an sm_89 block may have
    assert list(conv_stages.unsupported(device.properties())) == ["HALO TILE"]
    assert conv_stages.unsupported(device.own_properties()) == {}

    h100("8.0")
    assert ig.left_out(6) and not ig.left_out(5)
    assert capsys.readouterr().out == f"left out on this GPU: {ig.unsupported(6, device.properties())}\n"
    with pytest.raises(RuntimeError, match="this GPU is 8.0"):
        ig.cuda_kernel.__wrapped__(7)


def test_load_builds_ptx_for_the_capped_capability(h100, monkeypatch, tmp_path):
    """A cubin for sm_75 would not load on an sm_90 GPU: under the cap, PTX for compute_75, which the
    driver compiles for the GPU it has. Code built for an exact target (sm_90a) stays a cubin."""
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x) { x[0] = X; }\n')
    loaded = []

    def raw_module(path):
        return types.SimpleNamespace(get_function=lambda name: loaded.append(Path(path)) or name)

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=raw_module))
    h100("7.5")
    for arch in (None, "sm_75"):
        assert cuda_cpp.load.__wrapped__(src, "k", ("-DX=1.0f",), arch=arch) == "k"
    assert len(loaded) == 2 and all(p.suffix == ".ptx" for p in loaded)
    assert all(re.search(rb"^\.target sm_75$", p.read_bytes(), re.M) for p in loaded)
    cuda_cpp.load.__wrapped__(src, "k", ("-DX=1.0f",), arch="sm_90a")
    assert loaded[-1].read_bytes()[:4] == b"\x7fELF"


# --- book/rerun.md's table ------------------------------------------------------------------------------


def registry_files(props: dict) -> set[str]:
    """The sources (under kernels/) of the SSIM versions, convolution stages and implicit-GEMM steps the
    GPU ``props`` describes cannot run."""
    ssim = {f"ssim/{v.file}" for v in ssim_registry.REGISTRY if v.language == "cuda" and v.needs_cc > int(props["cc"])}
    conv = {conv_registry.get(name).file for name in conv_stages.unsupported(props)}
    steps = {ig.step_info(s.number).source for s in ig.REGISTRY if ig.unsupported(s.number, props)}
    return ssim | conv | steps


@cache
def builds_for(source: str, arch: str) -> bool:
    try:
        cuda_cpp.compile_cubin(source, arch)
    except RuntimeError:
        return False
    return True


@cache
def fails_at_oldest() -> frozenset[str]:
    """The CUDA C++ sources no registry leaves out on sm_75 that do not build for it."""
    with pytest.MonkeyPatch.context() as mp:
        left = registry_files(capped(OLDEST, mp))
    sources = (str(p.relative_to(cuda_cpp.KERNELS)) for p in cuda_cpp.all_sources())
    return frozenset(s for s in sources if s not in left and not builds_for(s, f"sm_{OLDEST}"))


def cannot_build(cc: str) -> frozenset[str]:
    """Of those sources, the ones a GPU of ``cc`` cannot build: from sm_80 on every source builds
    (tests/test_cuda_cpp.py compiles each for sm_80 and sm_90; sm_86 and sm_89 add to sm_80's instructions)."""
    return fails_at_oldest() if cc == OLDEST else frozenset()


def span(names: list, order: list, plural: str = "") -> str:
    """How the table names ``names`` (in ``order``): "nothing", "A", "A and B", or "A to C" for a run."""
    at = sorted(order.index(n) for n in names)
    if not at:
        return "nothing"
    if len(at) > 2 and at == list(range(at[0], at[-1] + 1)):
        return f"{plural}{order[at[0]]} to {order[at[-1]]}"
    said = [str(order[i]) for i in at]
    return plural + (", ".join(said[:-1]) + " and " if len(said) > 1 else "") + said[-1]


def whole_page(cc: str, sources: tuple, fits: bool = True) -> str:
    """A deep dive whose kernels all need what the GPU lacks."""
    return "all of it" if not fits or set(sources) & cannot_build(cc) else "nothing"


def expected(row: str, cc: str, props: dict) -> str:
    ssim = [v.name for v in ssim_registry.REGISTRY]
    left_ssim = [v for v in ssim_common.CUDA_VERSIONS if cuda_versions.unsupported(v, props)]
    if row == "first kernels, machine, SSIM worklog, probes":
        return span([v for v in left_ssim if v in ssim_common.WORKLOG], ssim)
    if row == "SSIM beyond the worklog":
        return span([v for v in left_ssim if v in ssim_common.BEYOND], ssim)
    if row == "its training deep dive":
        return whole_page(cc, ("ssim/step.cu", "ssim/backward.cu"))
    if row == "convolution":
        left = set(conv_stages.unsupported(props))
        left |= {s.name for s in conv_registry.REGISTRY if s.runs in left}  # the autotuner that runs it
        return span(list(left), list(conv_registry.NAMES))
    if row == "its Winograd deep dive":
        fits = winograd.smem_bytes() <= props["smem_per_block_optin_bytes"]
        return whole_page(cc, ("conv/winograd.cu",), fits)
    if row == "implicit GEMM":
        steps = [s.number for s in ig.REGISTRY]
        return span([n for n in steps if ig.unsupported(n, props)], steps, "steps ")
    raise AssertionError(f"book/rerun.md's table has a row this test does not know: {row!r}")


def rerun_table() -> tuple[list[list[str]], list[dict]]:
    """(each column's capabilities, the rows as {column header: cell}) of the table under "Which GPUs"."""
    text = (ROOT / "book" / "rerun.md").read_text().split("## Which GPUs", 1)[1]
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    columns = [re.findall(r"(\d+)\.(\d)", re.sub(r"\(.*\)", "", h)) for h in header[1:]]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    return [[a + b for a, b in col] for col in columns], rows


def test_the_table_has_a_column_for_each_capability_the_cap_knows():
    columns, rows = rerun_table()
    assert sorted(cc for col in columns for cc in col) == sorted(device.SMEM_PER_BLOCK_OPTIN)
    assert rows and all(len(r) == len(columns) + 1 for r in rows)


@pytest.mark.parametrize("cc", sorted(device.SMEM_PER_BLOCK_OPTIN))
def test_the_table_says_what_each_capability_leaves_out(cc, monkeypatch):
    columns, rows = rerun_table()
    column = next(i for i, col in enumerate(columns) if cc in col) + 1
    props = capped(cc, monkeypatch)
    for row in rows:
        said = re.sub(r" \(.*\)$", "", row[column])  # the reason in parentheses is prose
        assert said == expected(row[0], cc, props), f"rerun.md, {row[0]!r} at {device.dotted(cc)}"


def test_every_source_an_old_gpu_cannot_build_is_left_out():
    """Each source that does not build for sm_75 is left out by a registry, or is named by a row that leaves
    its whole deep dive out there: nothing else in the book may need an instruction a T4 lacks."""
    columns, rows = rerun_table()
    column = next(i for i, col in enumerate(columns) if OLDEST in col) + 1
    named = {
        name for row in rows if row[column].startswith("all of it") for name in re.findall(r"`([\w.]+)`", row[column])
    }
    unnamed = sorted(s for s in fails_at_oldest() if Path(s).name not in named)
    assert not unnamed, f"need sm_80, yet neither a registry nor book/rerun.md's table leaves them out: {unnamed}"


def test_the_channel_probes_rule_below_the_table_is_the_codes():
    """'64 KiB strides need 16 GiB': the footprint of the largest power-of-two stride at the probe's lines."""
    import inspect

    from kernels.probes import memory

    text = (ROOT / "book" / "rerun.md").read_text().split("## Which GPUs", 1)[1]
    m = re.search(r"fit in\s+90% of the GPU's memory \((\d+) KiB strides need (\d+) GiB\)", text)
    lines = inspect.signature(memory.run_channels).parameters["lines"].default
    stride = int(m.group(1)) * 1024
    assert stride == max(s for s in memory.channel_strides() if s & (s - 1) == 0)
    assert round(memory.channel_footprint(stride, lines) / 2**30) == int(m.group(2))
    fits, _ = memory.channels_that_fit([stride], lines, {"global_mem_bytes": int(m.group(2)) * 2**30})
    assert not fits, "90% of that memory must be too little"
