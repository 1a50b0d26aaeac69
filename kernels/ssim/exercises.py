"""Auto-checked exercises of the SSIM chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/02_ssim_worklog.ipynb.
The published solution and typical wrong kernels are in solutions.py.
"""

import numpy as np

from kernels.harness.exercise import Exercise, register

from .common import gaussian_weights

# --- ssim-ex-blur-x: the x-pass, 11 Gaussian taps along a row with zero padding -----------------


def blur_x_inputs(rng, shape):
    return (rng.uniform(0.0, 1.0, shape).astype(np.float32),)


def blur_x_reference(img):
    from scipy.ndimage import correlate1d

    return correlate1d(img.astype(np.float64), gaussian_weights(), axis=-1, mode="constant")


register(
    Exercise(
        label="ssim-ex-blur-x",
        task="the x-pass: out[y, x] = sum_k GAUSS[k] * img[y, x + k - 5], zero outside the image; launch(out, img)",
        make_inputs=blur_x_inputs,
        reference=blur_x_reference,
        # (H, W): not multiples of the block; the last one narrower than the window
        sizes=((13, 21), (11, 37), (3, 4)),
        atol=1e-5,
    )
)
