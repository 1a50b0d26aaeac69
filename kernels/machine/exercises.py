"""Auto-checked exercises of the machine chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/01_machine.ipynb.
The questions' expected answers are computed in answers.py; the published solutions, typical wrong
kernels and wrong answers are in solutions.py. The student edition has neither file.
"""

import numpy as np

from kernels.harness.exercise import Exercise, Part, Question, register

# --- machine-ex-saxpy: out = a x + y, one element per thread -------------------------------------


def saxpy_inputs(rng, n):
    return (
        rng.standard_normal(n).astype(np.float32),
        rng.standard_normal(n).astype(np.float32),
        np.float32(rng.uniform(0.5, 2.0)),
    )


def saxpy_reference(x, y, a):
    return float(a) * x.astype(np.float64) + y


register(
    Exercise(
        label="machine-ex-saxpy",
        task="write out[i] = a * x[i] + y[i] as a kernel, one element per thread; launch(out, x, y, a)",
        make_inputs=saxpy_inputs,
        reference=saxpy_reference,
        sizes=(1, 63, 257),
        atol=1e-5,
    )
)


# --- machine-ex-chain: one FMA chain per thread ---------------------------------------------------


def chain_inputs(rng, threads):
    return (
        rng.uniform(0.0, 1.0, threads).astype(np.float32),
        int(rng.integers(3, 9)),
        np.float32(0.999),
        np.float32(rng.uniform(0.001, 0.01)),
    )


def chain_reference(x0, iters, b, c):
    x = x0.astype(np.float64)
    for _ in range(iters):
        x = x * float(b) + float(c)
    return x


register(
    Exercise(
        label="machine-ex-chain",
        task="one dependent FMA chain per thread: out[i] = x after `iters` steps x = fma(x, b, c) from x = x0[i]; "
        "launch(out, x0, iters, b, c)",
        make_inputs=chain_inputs,
        reference=chain_reference,
        sizes=(1, 45, 100),
        atol=1e-5,
    )
)


# --- machine-ex-tail: waves of one block per SM ---------------------------------------------------

register(
    Question(
        label="machine-ex-tail",
        task="times of SM-count, SM-count + 1 and twice SM-count blocks, in units of t; "
        "the FMA rate at SM count + 1 blocks as a fraction of the rate at SM-count blocks",
        parts={
            "sms_blocks_t": Part("one block per SM: how many rounds?"),
            "one_more_t": Part("a block waits for a free SM: the last one runs alone"),
            "twice_t": Part("count the rounds of one block per SM"),
            "rate_one_more": Part(
                "rate = blocks done / time; compare with SM-count blocks in t", uses=("sms_blocks_t", "one_more_t")
            ),
        },
    )
)


# --- machine-ex-floor: y = a x + y on 1e8 float32 elements, on the measured ceilings ---------------

register(
    Question(
        label="machine-ex-floor",
        task="y = a x + y on 1e8 float32: FLOPs, minimum bytes, intensity (FLOP/byte), the floor in ms on the "
        "measured ceilings, 'memory' or 'compute' bound, and by what factor",
        parts={
            "flops": Part("count the multiplies and adds of one element"),
            "bytes": Part("count every array read and every array written, in float32"),
            "intensity": Part("FLOPs over bytes", uses=("flops", "bytes")),
            "floor_ms": Part(
                "the larger of bytes / the measured copy rate and FLOPs / the measured FMA rate",
                rtol=0.05,
                uses=("flops", "bytes"),
            ),
            "bound": Part("which of the two times is the larger?", uses=("flops", "bytes")),
            "factor": Part("the larger time over the smaller", rtol=0.05, uses=("flops", "bytes")),
        },
    )
)
