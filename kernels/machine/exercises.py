"""Auto-checked exercises of the machine chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/01_machine.ipynb.
The published solutions and typical wrong kernels are in solutions.py.
"""

import numpy as np

from kernels.harness.exercise import Exercise, register

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
