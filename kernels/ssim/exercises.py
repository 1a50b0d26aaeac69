"""Auto-checked exercises of the SSIM chapter: the published solutions and typical wrong kernels.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/02_ssim_worklog.ipynb.
The wrong kernels are mistakes students make; the tests prove the checker fails them and says why.
"""

import numpy as np
from numba import cuda, float32

from kernels.harness.exercise import Exercise, register  # first: the harness picks the simulator

from .common import GAUSS, RADIUS, WINDOW, gaussian_weights

BX, BY = 16, 8  # small blocks: the simulator runs every thread as a Python thread


# --- ssim-ex-blur-x: the x-pass, 11 Gaussian taps along a row with zero padding -----------------


@cuda.jit
def blur_x(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    if y < h and x < w:  # the last blocks reach past the image
        acc = float32(0.0)
        for k in range(WINDOW):
            xx = x + k - RADIUS
            if 0 <= xx < w:  # outside the image the padding is zero: the tap adds nothing
                acc += GAUSS[k] * img[y, xx]
        out[y, x] = acc


def grid_of(out):
    h, w = out.shape
    return (w + BX - 1) // BX, (h + BY - 1) // BY


def launch_blur_x(out, img):
    blur_x[grid_of(out), (BX, BY)](out, img)


@cuda.jit
def blur_x_interior_only(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    # "valid" instead of "same": the outputs whose window reaches into the padding are skipped
    if y < h and RADIUS <= x < w - RADIUS:
        acc = float32(0.0)
        for k in range(WINDOW):
            acc += GAUSS[k] * img[y, x + k - RADIUS]
        out[y, x] = acc


def launch_blur_x_interior_only(out, img):
    blur_x_interior_only[grid_of(out), (BX, BY)](out, img)


@cuda.jit
def blur_x_off_by_one(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    if y < h and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            xx = x + k - RADIUS - 1  # the window starts one pixel too far left
            if 0 <= xx < w:
                acc += GAUSS[k] * img[y, xx]
        out[y, x] = acc


def launch_blur_x_off_by_one(out, img):
    blur_x_off_by_one[grid_of(out), (BX, BY)](out, img)


_k = np.arange(WINDOW) - RADIUS
UNNORMALISED = np.exp(-(_k**2) / (2 * 1.5**2)).astype(np.float32)  # exp(-k^2 / 2 sigma^2), not divided by its sum


@cuda.jit
def blur_x_unnormalised(out, img):
    x, y = cuda.grid(2)
    h, w = img.shape
    if y < h and x < w:
        acc = float32(0.0)
        for k in range(WINDOW):
            xx = x + k - RADIUS
            if 0 <= xx < w:
                acc += UNNORMALISED[k] * img[y, xx]
        out[y, x] = acc


def launch_blur_x_unnormalised(out, img):
    blur_x_unnormalised[grid_of(out), (BX, BY)](out, img)


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
        solution=launch_blur_x,
        # (H, W): not multiples of the block; the last one narrower than the window
        sizes=((13, 21), (11, 37), (3, 4)),
        atol=1e-5,
        wrong={
            "border outputs skipped": (launch_blur_x_interior_only, "of the border"),
            "window off by one": (launch_blur_x_off_by_one, "shifted by 1 along axis 1"),
            "taps not normalised": (launch_blur_x_unnormalised, "times the expected value"),
        },
    )
)
