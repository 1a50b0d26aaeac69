"""The expected answers of the machine chapter's questions (exercises.py), for the checker and the tests.

Teacher-only: the student edition leaves this file out and checks digests of these values instead. The
measured ceilings (SM count, copy rate, FMA rate) come from the machine chapter's run on the GPU the page ran
on (kernels/harness/quantities.py).
"""

import math

from kernels.harness import quantities
from kernels.harness.exercise import answers

# --- machine-ex-tail: waves of one block per SM ---------------------------------------------------


def block_rounds(blocks: int) -> int:
    """Time of ``blocks`` equal blocks, one per SM at a time, in units of one block's time."""
    return math.ceil(blocks / quantities.sm_count()[0])


def rate_one_more() -> float:
    """The rate (blocks per unit time) of SM-count + 1 blocks, as a fraction of SM-count blocks'."""
    sms = quantities.sm_count()[0]
    return ((sms + 1) / block_rounds(sms + 1)) / (sms / block_rounds(sms))


answers(
    "machine-ex-tail",
    sms_blocks_t=lambda: block_rounds(quantities.sm_count()[0]),
    one_more_t=lambda: block_rounds(quantities.sm_count()[0] + 1),
    twice_t=lambda: block_rounds(2 * quantities.sm_count()[0]),
    rate_one_more=rate_one_more,
)


# --- machine-ex-floor: y = a x + y on 1e8 float32 elements, on the measured ceilings ---------------

FLOOR_N = 10**8


def floor_flops() -> float:
    return 2.0 * FLOOR_N  # one multiply and one add per element


def floor_bytes() -> float:
    return 12.0 * FLOOR_N  # read x and y, write y: three float32 per element


def floor_memory_ms() -> float:
    return floor_bytes() / (quantities.copy_gbps()[0] * 1e9) * 1e3


def floor_compute_ms() -> float:
    return floor_flops() / (quantities.fma_gflops()[0] * 1e9) * 1e3


answers(
    "machine-ex-floor",
    flops=floor_flops,
    bytes=floor_bytes,
    intensity=lambda: floor_flops() / floor_bytes(),
    floor_ms=lambda: max(floor_memory_ms(), floor_compute_ms()),
    bound=lambda: "memory" if floor_memory_ms() > floor_compute_ms() else "compute",
    factor=lambda: max(floor_memory_ms(), floor_compute_ms()) / min(floor_memory_ms(), floor_compute_ms()),
)
