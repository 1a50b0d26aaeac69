"""Auto-checked exercises of the two probes chapters: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/04a_probes_compute.ipynb,
notebooks/04b_probes_memory.ipynb or a deep dive of theirs. A question's answers are numbers or sets, which
answers.py computes; solutions.py holds the published answers and kernels and typical wrong ones. The student
edition has neither file.
"""

from __future__ import annotations

import numpy as np

from kernels.harness.accesses import COALESCED, READ_ONCE
from kernels.harness.exercise import Exercise, Part, Question, register

register(
    Question(
        label="probes-ex-wave",
        task="from the tail sweep's rows: the first block count whose time steps up, how many times the "
        "one-block FMA rate the GPU reaches just before it, and the fraction of that rate left one block later",
        parts={
            "step_blocks": Part(
                "find the first row whose time is well above the one-block time, not the SM count you expect", rtol=0.0
            ),
            "rate_growth": Part(
                "divide the GPU's FMA per cycle one block before the step by its FMA per cycle at one block",
                uses=("step_blocks",),
            ),
            "rate_kept": Part(
                "divide the FMA per cycle at the step by the FMA per cycle one block before it",
                rtol=0.03,
                uses=("step_blocks",),
            ),
        },
    )
)


register(
    Question(
        label="probes-ex-warps",
        task="threads per SM that hide the measured FFMA latency with one dependent chain per thread, "
        "and with four independent chains per thread",
        parts={
            "one_chain": Part(
                "each scheduler needs one warp per cycle of latency; count the schedulers and the lanes", rtol=0.0
            ),
            "four_chains": Part("a warp with four independent chains has four FFMAs in flight", rtol=0.0),
        },
    )
)


register(
    Question(
        label="probes-ex-regbanks",
        task="two register banks (even and odd numbers), no reuse cache: which of the four FFMAs (numbered 1 to 4) "
        "need more than one cycle to collect their operands, and how many cycles the slowest needs, under the "
        "Ampere description (each bank reads one register per cycle) and under the Volta and Turing rule (each bank "
        "64 bits wide, two registers per cycle)",
        parts={
            "collide_ampere": Part(
                "sort each instruction's source registers (not the destination) into even and odd; a bank reads one "
                "register per cycle"
            ),
            "cycles_ampere": Part(
                "a bank delivers one register per cycle: count the registers of the fuller bank", rtol=0.0
            ),
            "collide_volta": Part(
                "a bank 64 bits wide delivers two registers per cycle: only three sources in one bank wait"
            ),
            "cycles_volta": Part("the fuller bank's registers, two per cycle, rounded up", rtol=0.0),
        },
    )
)


register(
    Question(
        label="probes-ex-banks",
        task="among the strides 1 to 33 of the probe: those without a bank conflict for 4-byte words, "
        "and for 8-byte (float2) elements",
        parts={
            "strides": Part("write the bank of lane l as (l * s) mod 32 and ask when two lanes share one"),
            "float2_strides": Part("an 8-byte access is served per half-warp: check 16 lanes, each covering two words"),
        },
    )
)


register(
    Question(
        label="probes-ex-little",
        task="bytes in flight across the GPU (in MB) and per SM (in KB) to reach the copy bandwidth",
        parts={
            "mb_in_flight": Part(
                "multiply the bandwidth by the HBM latency in seconds, not in cycles; GB/s times ns gives bytes",
                rtol=0.05,
            ),
            "kb_per_sm": Part(
                "divide the whole GPU's bytes in flight by its number of SMs", rtol=0.05, uses=("mb_in_flight",)
            ),
        },
    )
)


register(
    Question(
        label="probes-ex-launch",
        task="the blocks the padding kernel starts at one channel per thread, and the time to start them",
        parts={
            "blocks": Part("one block per output plane, whether or not all of its threads have a pixel", rtol=0),
            "launch_us": Part(
                "threads over threads per cycle gives cycles; a clock in MHz counts cycles per microsecond",
                rtol=0.05,
                uses=("blocks",),
            ),
        },
    )
)


# --- probes-ex-grid-stride: a copy stream on a fixed grid ------------------------------------------------------
GRID_STRIDE_BLOCKS, GRID_STRIDE_THREADS = 2, 64  # the fixed grid: a stand-in for "as many blocks as the GPU holds"

register(
    Exercise(
        label="probes-ex-grid-stride",
        task=f"out[i] = x[i] for any length with exactly {GRID_STRIDE_BLOCKS} blocks of {GRID_STRIDE_THREADS} "
        "threads: a grid-stride loop, every warp access coalesced; launch(out, x)",
        make_inputs=lambda rng, n: (rng.standard_normal(n).astype(np.float32),),
        reference=lambda x: x.astype(np.float64),
        sizes=(1000, 127, 1),  # many trips of the loop, less than one, one element
        atol=0,
        expect=(COALESCED, READ_ONCE),
        max_threads=GRID_STRIDE_BLOCKS * GRID_STRIDE_THREADS,
    )
)
