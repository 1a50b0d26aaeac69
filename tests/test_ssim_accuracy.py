"""SSIM's accuracy on natural images (kernels/ssim/accuracy.py): the photographs load without a network, at
odd sizes, every derived class is what its name says, and the per-class verdicts follow the limits; on a GPU,
the PyTorch API's errors over part of the set."""

import socket

import numpy as np
import pytest

from kernels.harness import device
from kernels.ssim import accuracy, common


@pytest.fixture(scope="module")
def offline_photos():
    """Every photograph, loaded with every network connection refused (the GPU machine has none)."""
    refused = pytest.MonkeyPatch()

    def no_network(*args, **kwargs):
        raise OSError("no network in this test")

    refused.setattr(socket.socket, "connect", no_network)
    try:
        return {name: accuracy.photograph(name) for name in accuracy.COLOUR + accuracy.GREY}
    finally:
        refused.undo()


def test_every_photograph_loads_offline_at_odd_sizes(offline_photos):
    for name, img in offline_photos.items():
        h, w = img.shape[:2]
        assert h % 2 == 1 and w % 2 == 1 and h <= accuracy.MAX_SIDE[0] and w <= accuracy.MAX_SIDE[1], name
        assert min(h, w) >= common.WINDOW, name
        assert img.ndim == (3 if name in accuracy.COLOUR else 2), name
        assert img.dtype == np.float64 and 0 <= img.min() and img.max() <= 1 and img.std() > 0.01, name


def test_an_unknown_photograph_is_named():
    with pytest.raises(ValueError, match="expected one of scikit-image's photographs"):
        accuracy.photograph("lena")


def test_each_class_is_what_its_name_says(offline_photos, rng):
    photo = offline_photos["camera"]
    got = {k: accuracy.derive(photo, k, rng) for k in accuracy.CLASSES}
    for klass, (img1, img2) in got.items():
        assert img1.shape == img2.shape == photo.shape and 0 <= img1.min() and img1.max() <= 1, klass
    assert got["photograph"][1] is photo and 0 < abs(got["photograph"][0] - photo).max() < 0.1
    assert got["dark"][1].max() <= 0.05 and np.allclose(got["dark"][1], 0.05 * photo)
    for img in got["bright"]:
        assert 0.92 <= img.min() and img.max() <= 0.98
    for img in got["low contrast"]:
        assert 0.44 <= img.min() and img.max() <= 0.56
    eight_bit = got["8-bit"][0] * 255
    assert np.allclose(eight_bit, np.round(eight_bit)) and got["8-bit"][1] is photo
    blurred = got["blurred"][0]
    assert np.abs(np.diff(blurred, axis=1)).mean() < 0.5 * np.abs(np.diff(photo, axis=1)).mean()
    assert 0.03 < np.std(got["noisy"][0] - photo) < 0.06
    with pytest.raises(ValueError, match="klass: expected one of"):
        accuracy.derive(photo, "sepia", rng)


def test_jpeg_like_keeps_flat_blocks_and_quantizes_detail(rng):
    flat = np.full((19, 21), 100 / 255)
    assert np.abs(accuracy.jpeg_like(flat) - flat).max() < 2 / 255  # the DC step is small
    noise = rng.random((19, 21, 3))
    out = accuracy.jpeg_like(noise)
    assert out.shape == noise.shape and 0 <= out.min() and out.max() <= 1
    err = np.abs(out - noise)
    assert 0.01 < err.mean() < 0.2  # coarse high frequencies: a visible error, not a different image
    # A block's DCT coefficients after quantization are multiples of the step of their frequency.
    from scipy.fft import dctn

    block = accuracy.jpeg_like(0.4 + 0.2 * noise[:8, :8, 0]) * 255 - 128  # mid-grey: no pixel clipped
    assert -127 < block.min() and block.max() < 126
    coef = dctn(block, norm="ortho")
    u = np.arange(8)
    step = 4.0 * (1 + u[:, None] + u[None, :])
    assert np.allclose(coef / step, np.round(coef / step), atol=1e-6)


def test_the_image_set_has_every_class_in_colour_and_grey():
    cases = list(accuracy.image_set(seed=1, photos=("chelsea", "coins")))
    names = {(name, klass) for name, klass, _, _ in cases}
    views = ("chelsea", "chelsea (grey)", "coins")
    assert names == {(v, k) for v in views for k in accuracy.CLASSES} and len(cases) == len(names)
    for name, _, a, b in cases:
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape and a.flags.c_contiguous
        assert a.shape[:2] == ((1, 3) if name == "chelsea" else (1, 1))
        assert a.shape[2] % 2 == 1 and a.shape[3] % 2 == 1


def test_errors_are_the_books_three():
    ref_map = np.array([[0.5, 0.25], [1.0, 0.0]])
    ref_grad = np.array([[2.0, -4.0], [1.0, 0.0]])
    got = accuracy.errors(ref_map + [[1e-5, 0], [0, -3e-5]], ref_map, 0.4375 + 2e-7, ref_grad + 4e-4, ref_grad)
    assert got == pytest.approx({"map error": 3e-5, "mean error": 2e-7, "gradient error": 1e-4}, rel=1e-6)


def test_a_float32_model_is_scored_against_float64():
    """The pipeline on the host: a float32 computation of the map (common.float32_model) has an error the
    float64 reference sees, small and not zero."""
    _, _, a, b = next(accuracy.image_set(seed=2, photos=("moon",)))
    a, b = a[..., :41, :53], b[..., :41, :53]
    ref = common.reference(a, b)
    got = accuracy.errors(common.float32_model(a, b), ref, float(ref.mean()), ref * 0, ref)
    assert 0 < got["map error"] < 1e-3 and got["mean error"] == 0 and got["gradient error"] == 1.0


def test_worst_by_class_gives_each_class_its_worst_and_verdicts():
    cases = [
        {"class": "dark", "map error": 2e-4, "mean error": 1e-7, "gradient error": 1e-6},
        {"class": "photograph", "map error": 5e-5, "mean error": 2e-7, "gradient error": 2e-5},
        {"class": "dark", "map error": 1e-5, "mean error": 3e-7, "gradient error": 4e-6},
    ]
    rows = accuracy.worst_by_class(cases)
    assert [r["class"] for r in rows] == ["photograph", "dark"]  # CLASSES' order
    dark = rows[1]
    assert dark["images"] == 2 and dark["map error"] == 2e-4 and dark["mean error"] == 3e-7
    assert dark["map error: verdict"] == "missed" and dark["mean error: verdict"] == "met"
    assert rows[0]["gradient error: verdict"] == "missed" and rows[0]["map error: verdict"] == "met"


@pytest.mark.gpu
@pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")
def test_the_apis_errors_on_natural_images():
    """The PyTorch API on two photographs (colour, grey) in every class: every error finite, the mean within
    the book's limit and the gradient within the API tests' 1e-4 of its largest value."""
    pytest.importorskip("torch")
    from kernels.ssim import training

    fused_ssim, ssim_map, _ = training._api("ours")
    cases = accuracy.measure(fused_ssim, ssim_map, photos=("astronaut", "camera"))
    assert len(cases) == 3 * len(accuracy.CLASSES)
    for c in cases:
        assert all(np.isfinite(c[m]) for m in accuracy.LIMITS), c
        assert c["mean error"] <= accuracy.LIMITS["mean error"], c
        assert c["gradient error"] <= 1e-4, c
