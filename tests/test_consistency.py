"""One quantity, one value across the book: where two notebooks glue the same quantity (the SM count, the
copy rate, the DRAM latency, the SM clock, SSIM's FLOPs), every page shows the same number, and a word
glued from a comparison agrees with the glued numbers it compares."""

import ast
import json
from pathlib import Path

import pytest

from kernels.harness import glue

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# Each quantity: the glue names that show it in any notebook (deep-dive pages included), with the factor
# that converts each to the quantity's unit.
QUANTITIES = {
    "SM count": {"sms": 1},
    "copy rate (GB/s)": {"copy_gbps": 1, "copy_tbps": 1e3},
    "DRAM latency (ns)": {"dram_ns": 1, "hbm_ns": 1},
    "SM clock (MHz)": {"clock_mhz": 1, "clock_ghz": 1e3},
    "SM clock timed by the host (MHz)": {"clock_host_mhz": 1},
    "FP32 FMA latency (cycles)": {"fma_latency": 1},
    "SSIM FLOPs (GFLOP)": {"ssim_gflop": 1},
    "SSIM intensity (FLOP/byte)": {"ssim_intensity": 1},
}
# Quantities shown with different values today ({name: why}), strict xfails so that the fix is noticed
# here; none since 02b reran after 04b's last run (02b reads 04b's stored DRAM latency).
DISAGREE: dict[str, str] = {}
# The one notebook that runs each probe of a shared quantity; every other page glues the stored value
# through kernels/harness/quantities.py, so that a later page cannot show a run of its own.
MEASURED_BY = {"memory.run_clock": "04a_probes_compute"}
# Words chosen from a comparison: (glue name, the comparison on the glued values, word if true, if false).
WORDS = [
    ("host_word", lambda g: g["host_ms"] < g["event_ms"], "less", "more"),
    ("host_why", lambda g: g["host_ms"] < g["event_ms"], "it stopped when", "Python's launch path alone"),
]


def glued(path: Path) -> dict:
    """A notebook's stored glue values, as Python values (numbers, strings)."""
    values = {}
    for name, text in glue.stored(json.loads(path.read_text())).items():
        try:
            values[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            values[name] = text
    return values


GLUED = {p.stem: glued(p) for p in NOTEBOOKS}


def shown(names: dict) -> list[tuple[str, str, float]]:
    """(notebook, glue name, value in the quantity's unit) wherever one of ``names`` is glued."""
    return [
        (nb, name, values[name] * factor)
        for nb, values in GLUED.items()
        for name, factor in names.items()
        if name in values
    ]


@pytest.mark.parametrize(
    "quantity",
    [
        pytest.param(q, marks=pytest.mark.xfail(strict=True, reason=DISAGREE[q])) if q in DISAGREE else q
        for q in QUANTITIES
    ],
)
def test_a_quantity_has_one_value_in_every_notebook(quantity):
    found = shown(QUANTITIES[quantity])
    assert found, f"no notebook glues {quantity} under {sorted(QUANTITIES[quantity])}: update QUANTITIES"
    first = found[0][2]
    differ = [f"{nb}:{name} = {v:.6g}" for nb, name, v in found if v != pytest.approx(first, rel=1e-9)]
    assert not differ, f"{quantity}: {found[0][0]}:{found[0][1]} = {first:.6g}, but " + ", ".join(differ)


def runs_of(probe: str) -> list[str]:
    """The notebooks whose code calls ``probe``."""
    return [
        p.stem
        for p in NOTEBOOKS
        if any(c["cell_type"] == "code" and probe in "".join(c["source"]) for c in json.loads(p.read_text())["cells"])
    ]


@pytest.mark.parametrize("probe", MEASURED_BY)
def test_a_shared_quantity_is_measured_by_one_notebook(probe):
    assert runs_of(probe) == [MEASURED_BY[probe]], f"{probe} runs in {runs_of(probe)}: read the stored value elsewhere"


def test_the_table_finds_quantities_shown_by_two_chapters():
    """The check is not empty: some quantities are glued by more than one chapter."""
    shared = [q for q, names in QUANTITIES.items() if len({nb for nb, _, _ in shown(names)}) > 1]
    assert "SM count" in shared and "copy rate (GB/s)" in shared


@pytest.mark.parametrize("name,condition,yes,no", WORDS, ids=[w[0] for w in WORDS])
def test_a_glued_word_follows_the_glued_numbers(name, condition, yes, no):
    notebooks = [(nb, g) for nb, g in GLUED.items() if name in g]
    assert notebooks, f"no notebook glues {name}"
    for nb, g in notebooks:
        want = yes if condition(g) else no
        assert str(g[name]).startswith(want), f"{nb}: {name} = {g[name]!r}, but the numbers call for {want!r}"


def test_the_checks_catch_a_disagreement(monkeypatch):
    monkeypatch.setitem(GLUED, "99_fake", {"sms": 133, "host_ms": 2.0, "event_ms": 1.0, "host_word": "less"})
    with pytest.raises(AssertionError, match=r"99_fake:sms = 133"):
        test_a_quantity_has_one_value_in_every_notebook("SM count")
    with pytest.raises(AssertionError, match="99_fake: host_word = 'less', but the numbers call for 'more'"):
        test_a_glued_word_follows_the_glued_numbers(*WORDS[0])
