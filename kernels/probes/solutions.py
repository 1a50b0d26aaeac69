"""The probes chapters' published answers and typical wrong ones, attached to their exercises.

Each answer is worked out the way a student would: from the stored rows the notebook shows, or by hand
from the exercise's data. The wrong sets are mistakes students make; the tests prove the checker fails
them and names the part. The student edition leaves this file out (submission.TEACHER_ONLY).
"""

import math

from kernels.harness import device, quantities
from kernels.harness.exercise import attach

from .answers import tail_sweep

# --- probes-ex-wave -------------------------------------------------------------------------------


def _wave_answers() -> dict:
    sweep = tail_sweep()
    blocks = sorted(sweep)
    time = [sweep[b]["time"] for b in blocks]
    # the time is flat through the first wave and jumps by about its own length at the step
    i = next(i for i in range(1, len(blocks)) if time[i] > 1.9 * time[0])
    rate = [sweep[b]["FMA per cycle"] for b in blocks]
    return {"step_blocks": blocks[i], "rate_growth": rate[i - 1] / rate[0], "rate_kept": rate[i] / rate[i - 1]}


WAVE = _wave_answers()
attach(
    "probes-ex-wave",
    WAVE,
    {
        "the SM count instead of the step": ({**WAVE, "step_blocks": WAVE["step_blocks"] - 1}, "step_blocks: not yet"),
        "the time ratio instead of the rate ratio": ({**WAVE, "rate_kept": 2.0}, "rate_kept: not yet"),
    },
)


# --- probes-ex-warps ------------------------------------------------------------------------------

_L = math.ceil(quantities.fma_latency_cycles()[0])
attach(
    "probes-ex-warps",
    {"one_chain": 4 * _L * 32, "four_chains": 4 * math.ceil(_L / 4) * 32},
    {
        "one warp per SM instead of per scheduler": (
            {"one_chain": _L * 32, "four_chains": math.ceil(_L / 4) * 32},
            "one_chain: not yet",
        ),
    },
)


# --- probes-ex-regbanks ---------------------------------------------------------------------------

attach(
    "probes-ex-regbanks",
    {"collide": {1, 3, 4}, "worst_cycles": 3},  # R0/R2 even; R5 R7 R9 odd; R2 R4 R6 even
    {
        "the destination counted as a read": ({"collide": {1, 2, 3, 4}, "worst_cycles": 3}, "collide: not yet"),
        "two cycles at most": ({"collide": {1, 3, 4}, "worst_cycles": 2}, "worst_cycles: not yet"),
    },
)


# --- probes-ex-banks ------------------------------------------------------------------------------

_ODD = {s for s in range(1, 34) if math.gcd(s, 32) == 1}
attach(
    "probes-ex-banks",
    {"strides": _ODD, "float2_strides": _ODD},
    {
        "the powers of two": ({"strides": {1, 2, 4, 8, 16, 32}, "float2_strides": _ODD}, "strides: not yet"),
        "float2 needs gcd(s, 32) = 2": (
            {"strides": _ODD, "float2_strides": {s for s in range(1, 34) if math.gcd(s, 32) == 2}},
            "float2_strides: not yet",
        ),
    },
)


# --- probes-ex-little -----------------------------------------------------------------------------

_BYTES = quantities.copy_gbps()[0] * 1e9 * quantities.dram_latency_ns()[0] * 1e-9
_SMS = device.target_properties()["sms"]
attach(
    "probes-ex-little",
    {"mb_in_flight": _BYTES / 1e6, "kb_per_sm": _BYTES / _SMS / 1e3},
    {
        "the latency in microseconds": (
            {"mb_in_flight": _BYTES / 1e9, "kb_per_sm": _BYTES / _SMS / 1e6},
            "mb_in_flight: not yet",
        ),
    },
)


# --- probes-ex-launch -----------------------------------------------------------------------------

_RATE = quantities.stored("probes", "launch", "threads per cycle", "block 256x1x1")[0]
_PAD_BLOCKS = 1024 * 1024  # one block per (image, channel) plane: 13 x 13 = 169 pixels fit in 256 threads
_PAD_US = _PAD_BLOCKS * 256 / _RATE / quantities.sm_clock_mhz()[0]  # threads / (threads per cycle) / (cycles per µs)
attach(
    "probes-ex-launch",
    {"blocks": _PAD_BLOCKS, "launch_us": _PAD_US},
    {
        "a block per pixel, and the clock in GHz": (
            {"blocks": _PAD_BLOCKS * 169, "launch_us": _PAD_US * 1e3},
            "blocks: not yet",
        ),
    },
)
