"""SEQ: the convolution on the CPU, compiled by Numba, one parallel loop over (image, output channel).

The baseline every GPU stage is measured against; it reads NCHW so its inner loop walks a row.
"""

import numpy as np
from numba import njit, prange

from .common import Stage


@njit(parallel=True, cache=False)
def conv_seq(x, f, y):
    n_img, n_in, height, width = x.shape
    n_out = f.shape[0]
    for job in prange(n_img * n_out):
        n, k = job // n_out, job % n_out
        acc = np.zeros((height, width), dtype=np.float32)
        for c in range(n_in):
            for r in range(3):
                for s in range(3):
                    tap = f[k, c, r, s]
                    # the rows/columns this tap reaches without falling into the zero padding
                    for h in range(max(0, 1 - r), min(height, height + 1 - r)):
                        for w in range(max(0, 1 - s), min(width, width + 1 - s)):
                            acc[h, w] += x[n, c, h + r - 1, w + s - 1] * tap
        y[n, k] = acc


def launch(x, f, y, problem):
    conv_seq(x, f, y)


STAGE = Stage("SEQ", "nchw", launch, device=False)
