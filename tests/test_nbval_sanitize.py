"""tests/nbval_sanitize.cfg masks what differs between runs and nothing a checked cell claims."""

import re
from pathlib import Path

import pytest
from nbval.plugin import get_sanitize_patterns

CFG = Path(__file__).with_name("nbval_sanitize.cfg")


def sanitize(text: str) -> str:
    """What nbval compares: every regex/replace pair of the cfg, in order (nbval's IPyNbCell.sanitize)."""
    for regex, replace in dict(get_sanitize_patterns(CFG.read_text())).items():
        text = re.sub(regex, replace, text)
    return text


@pytest.mark.parametrize(
    "stored, printed",
    [
        ("SSIM 1x3x2160x3840: 6.05 GFLOP", "SSIM 1x3x2160x9999: 6.05 GFLOP"),  # a shape string
        ("LOP3.LUT R0, R0, 0x1f, R3, 0x80, !PT", "LOP3.LUT R0, R0, 0x3f, R3, 0x80, !PT"),  # a SASS immediate
        ("ISETP.NE.AND P0, PT, R2, 0xffffffff, PT", "ISETP.NE.AND P0, PT, R2, 0x7fffffff, PT"),  # 32 bits
    ],
)
def test_a_changed_claim_is_not_masked(stored, printed):
    assert sanitize(stored) != sanitize(printed)


@pytest.mark.parametrize(
    "stored, printed",
    [
        (
            "<numba.cuda.cudadrv.devicearray.DeviceNDArray object at 0x7f3a2b1c4d50>",
            "<numba.cuda.cudadrv.devicearray.DeviceNDArray object at 0x7f0e99a01f10>",
        ),
        ("<function run at 0x000001F2A3B4C5D6>", "<function run at 0x000001F2A3B4E7F8>"),  # Windows pads to 16
    ],
)
def test_an_address_is_masked(stored, printed):
    assert sanitize(stored) == sanitize(printed)
