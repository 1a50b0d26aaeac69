"""Auto-checked exercises of chapter 0, "Your first kernels": what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/00_first_kernels.ipynb.
The published solutions and typical mistakes are in solutions.py. The last exercises also expect
coalesced access, each input read once or no bank conflicts: the checker counts the accesses in the
simulator and fails a correct kernel that misses them.
"""

import numpy as np

from kernels.harness.accesses import COALESCED, NO_BANK_CONFLICTS, READ_ONCE
from kernels.harness.exercise import Exercise, register


def vector(rng, n):
    return rng.standard_normal(n).astype(np.float32)


def matrix(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- basics-ex-map: out[i] = x[i] + 10 ----------------------------------------------------------
register(
    Exercise(
        label="basics-ex-map",
        task="out[i] = x[i] + 10, one element per thread, sizes multiples of 32; launch(out, x)",
        make_inputs=lambda rng, n: (vector(rng, n),),
        reference=lambda x: x + 10.0,
        sizes=(32, 96),
        atol=1e-5,
    )
)


# --- basics-ex-zip: out[i] = x[i] + y[i] --------------------------------------------------------
register(
    Exercise(
        label="basics-ex-zip",
        task="out[i] = x[i] + y[i], sizes multiples of 32; launch(out, x, y)",
        make_inputs=lambda rng, n: (vector(rng, n), vector(rng, n)),
        reference=lambda x, y: x + y.astype(np.float64),
        sizes=(32, 96),
        atol=1e-5,
    )
)


# --- basics-ex-guard: out[i] = x[i] * x[i] for any length ------------------------------------------
register(
    Exercise(
        label="basics-ex-guard",
        task="out[i] = x[i] * x[i] for any length (blocks of 64 threads); launch(out, x)",
        make_inputs=lambda rng, n: (vector(rng, n),),
        reference=lambda x: x.astype(np.float64) ** 2,
        sizes=(1, 37, 200),
        atol=1e-5,
    )
)


# --- basics-ex-map-2d: out[r, c] = x[r, c] + 10 on a matrix ------------------------------------------
register(
    Exercise(
        label="basics-ex-map-2d",
        task="out[r, c] = x[r, c] + 10 on a 2-D array, a 2-D grid, coalesced; launch(out, x)",
        make_inputs=lambda rng, shape: (matrix(rng, shape),),
        reference=lambda x: x + 10.0,
        sizes=((5, 37), (33, 20)),
        atol=1e-5,
        expect=(COALESCED,),
    )
)


# --- basics-ex-broadcast: out[r, c] = a[r] + b[c] ------------------------------------------------
register(
    Exercise(
        label="basics-ex-broadcast",
        task="out[r, c] = a[r] + b[c] (a column plus a row), coalesced; launch(out, a, b)",
        make_inputs=lambda rng, shape: (vector(rng, shape[0]), vector(rng, shape[1])),
        reference=lambda a, b: a[:, None] + b[None, :].astype(np.float64),
        sizes=((5, 37), (37, 5)),
        atol=1e-5,
        expect=(COALESCED,),
    )
)


# --- basics-ex-block-sum: out[b] = the sum of block b's 64 elements ---------------------------------
def block_sums_reference(x):
    padded = np.zeros(-(-x.size // 64) * 64)
    padded[: x.size] = x
    return padded.reshape(-1, 64).sum(axis=1)


register(
    Exercise(
        label="basics-ex-block-sum",
        task="out[b] = sum of x[64 b : 64 b + 64] with a tree in shared memory, 64 threads per block; launch(out, x)",
        make_inputs=lambda rng, n: (vector(rng, n),),
        reference=block_sums_reference,
        sizes=(1, 64, 200),
        atol=1e-4,
        expect=(COALESCED, READ_ONCE),
    )
)


# --- basics-ex-stencil: out[i] = x[i - 1] + x[i] + x[i + 1], zero outside x ---------------------
def sum3_reference(x):
    padded = np.pad(x.astype(np.float64), 1)
    return padded[:-2] + padded[1:-1] + padded[2:]


register(
    Exercise(
        label="basics-ex-stencil",
        task="out[i] = x[i-1] + x[i] + x[i+1] (zero outside x), each element of x read from global memory "
        "about once; launch(out, x)",
        make_inputs=lambda rng, n: (vector(rng, n),),
        reference=sum3_reference,
        sizes=(1, 70, 200),
        atol=1e-5,
        expect=(COALESCED, READ_ONCE),
    )
)


# --- basics-ex-dot: out[0] = sum of x[i] * y[i] -----------------------------------------------------
register(
    Exercise(
        label="basics-ex-dot",
        task="out[0] = sum of x[i] * y[i]: per-block sums in shared memory, then a global step; launch(out, x, y) "
        "with out of shape (1,)",
        make_inputs=lambda rng, n: (vector(rng, n), vector(rng, n)),
        reference=lambda x, y: np.array([np.dot(x.astype(np.float64), y)]),
        sizes=(1, 100, 300),
        atol=1e-3,
        expect=(COALESCED, READ_ONCE),
    )
)


# --- basics-ex-row-sum: out[r] = sum of row r of x --------------------------------------------------
register(
    Exercise(
        label="basics-ex-row-sum",
        task="out[r] = sum of x[r, :] for a 2-D x, coalesced; launch(out, x)",
        make_inputs=lambda rng, shape: (matrix(rng, shape),),
        reference=lambda x: x.astype(np.float64).sum(axis=1),
        sizes=((3, 100), (12, 7)),
        atol=1e-4,
        expect=(COALESCED, READ_ONCE),
    )
)


# --- basics-ex-transpose: out = x.T, both the reads and the writes coalesced ----------------------
def transpose_inputs(rng, shape):
    return (matrix(rng, shape),)


register(
    Exercise(
        label="basics-ex-transpose",
        task="out = x.T (out has shape x.shape[::-1]), reads and writes coalesced; launch(out, x)",
        make_inputs=transpose_inputs,
        reference=lambda x: x.T.astype(np.float64),
        sizes=((37, 45), (5, 70)),
        atol=0,
        expect=(COALESCED,),
    )
)


# --- basics-ex-banks: the transpose without bank conflicts -------------------------------------------
register(
    Exercise(
        label="basics-ex-banks",
        task="out = x.T as in basics-ex-transpose, also free of shared-memory bank conflicts; launch(out, x)",
        make_inputs=transpose_inputs,
        reference=lambda x: x.T.astype(np.float64),
        sizes=((37, 45),),
        atol=0,
        expect=(COALESCED, NO_BANK_CONFLICTS),
    )
)
