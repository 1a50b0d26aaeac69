"""Auto-checked exercises of the convolution chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/03_conv.ipynb.
The published solution and typical wrong kernels are in solutions.py.
"""

import numpy as np

from kernels.harness.exercise import Exercise, register

from .common import R, S, reference

# --- conv-ex-coalescing: NAIVE's threads and loops, the data in NHWC ------------------------------
# launch(y, x, f): x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K).


def coalescing_inputs(rng, size):
    """x (N, H, W, C) and f (3, 3, C, K) in [-1, 1) for size = (N, C, K, H, W)."""
    n, c, k, h, w = size
    return (rng.uniform(-1, 1, (n, h, w, c)).astype(np.float32), rng.uniform(-1, 1, (R, S, c, k)).astype(np.float32))


def coalescing_reference(x_nhwc, f_rsck):
    """common.reference (NCHW, KCRS) on the same data, returned in NHWK."""
    y = reference(x_nhwc.transpose(0, 3, 1, 2), f_rsck.transpose(3, 2, 0, 1))
    return y.transpose(0, 2, 3, 1)


register(
    Exercise(
        label="conv-ex-coalescing",
        task="COALESCING from NAIVE: y[n, h, w, k] = sum over c, r, s of x[n, h+r-1, w+s-1, c] * f[r, s, c, k], "
        "zero-padded; x NHWC, f (3, 3, C, K); launch(y, x, f)",
        make_inputs=coalescing_inputs,
        reference=coalescing_reference,
        # (N, C, K, H, W): output counts 245, 330 and 3, none a multiple of the block
        sizes=((1, 3, 5, 7, 7), (2, 2, 3, 5, 11), (1, 1, 3, 1, 1)),
        atol=1e-4,
    )
)
