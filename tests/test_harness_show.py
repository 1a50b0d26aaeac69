import pytest

from kernels.harness import show


def test_source_reads_the_kernel_file():
    code = show.source("machine/fma.py", start="def fma_kernel")
    assert code.data.startswith("@cache") and "cuda.fma" in code.data


def test_source_range_keeps_the_decorator_and_stops_at_end():
    code = show.source("machine/copy.py", start="def copy_kernel_x4", end="def memcpy_d2d")
    assert code.data.startswith("@cuda.jit\ndef copy_kernel_x4") and "memcpy" not in code.data


def test_source_errors_name_the_problem():
    with pytest.raises(FileNotFoundError, match="relative to kernels/"):
        show.source("machine/nope.py")
    with pytest.raises(ValueError, match="no line containing"):
        show.source("machine/fma.py", start="not in the file")
    with pytest.raises(ValueError, match="after the start"):
        show.source("machine/fma.py", start="CHAINS =", end="not in the file")


def test_diff_shows_changed_lines():
    d = show.diff("machine/fma.py", "machine/copy.py")
    assert d.data.startswith("--- fma.py") and "+def memcpy_d2d" in d.data


def test_table_formats_and_rejects_empty():
    md = show.table([{"a": 1.23456, "b": None}], formats={"a": ".2f"})
    assert "| 1.23 | -- |" in md.data
    with pytest.raises(ValueError, match="no rows"):
        show.table([])
