"""SSIM's accuracy on natural images: every photograph scikit-image ships (none needs a download), in colour
and grey, cropped to odd sizes, and images derived from them (dark, bright, low-contrast, blurred, 8-bit,
noisy, JPEG-like), each error against the float64 reference.

A case is a pair as a training loop meets it: the target ``img2`` and a rendering ``img1`` close to it
(the photograph with faint noise), or for a distortion the distorted photograph against the clean one.
The image set is NumPy and SciPy only; ``measure`` times nothing and runs on a GPU, through the PyTorch API.
"""

from __future__ import annotations

import numpy as np

# scikit-image's photographs, by their loader in skimage.data ("stereo_motorcycle": its left image).
COLOUR = (
    "astronaut",
    "chelsea",
    "coffee",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "rocket",
    "stereo_motorcycle",
)
GREY = ("brick", "camera", "cell", "clock", "coins", "grass", "gravel", "microaneurysms", "moon", "page", "text")
CLASSES = ("photograph", "dark", "bright", "low contrast", "blurred", "8-bit", "noisy", "JPEG-like")
LIMITS = {"map error": 1e-4, "mean error": 1e-6, "gradient error": 1e-5}  # the book's stated accuracy
MAX_SIDE = (401, 601)  # crops at most this tall and wide (odd), so the whole set checks in seconds
RENDER_NOISE = 0.01  # a rendering close to its target
NOISE = 0.05  # the noisy class


def photograph(name: str) -> np.ndarray:
    """scikit-image's photograph ``name`` as float64 in [0, 1], (H, W, 3) or (H, W), cropped about its centre
    to odd sides of at most MAX_SIDE."""
    from skimage import data

    if name not in COLOUR + GREY:
        raise ValueError(f"name: expected one of scikit-image's photographs {COLOUR + GREY}, got {name!r}")
    img = getattr(data, name)()
    img = img[0] if name == "stereo_motorcycle" else img
    img = np.asarray(img, dtype=np.float64) / 255.0
    sides = []
    for n, cap in zip(img.shape[:2], MAX_SIDE, strict=True):
        side = min(n, cap)
        sides.append(side - 1 + side % 2)  # odd
    (h, w), (top, left) = sides, ((n - s) // 2 for n, s in zip(img.shape[:2], sides, strict=True))
    return img[top : top + h, left : left + w]


def grey(rgb: np.ndarray) -> np.ndarray:
    """Luminance (ITU-R BT.709 weights) of an (H, W, 3) image."""
    return rgb @ np.array([0.2126, 0.7152, 0.0722])


def jpeg_like(img: np.ndarray, step: float = 4.0) -> np.ndarray:
    """Each 8x8 block's orthonormal DCT quantized, coarser at higher frequencies (step * (1 + u + v) in
    8-bit units), then inverted: JPEG's blocking and ringing without its colour subsampling or entropy code.
    ``img``: (H, W) or (H, W, C) in [0, 1]."""
    from scipy.fft import dctn, idctn

    h, w = img.shape[:2]
    pad = ((0, -h % 8), (0, -w % 8)) + ((0, 0),) * (img.ndim - 2)
    x = np.pad(img * 255.0 - 128.0, pad, mode="edge")
    hb, wb = x.shape[0] // 8, x.shape[1] // 8
    blocks = x.reshape(hb, 8, wb, 8, *x.shape[2:]).swapaxes(1, 2)  # (hb, wb, 8, 8, ...)
    u = np.arange(8)
    q = (step * (1 + u[:, None] + u[None, :])).reshape(8, 8, *(1,) * (img.ndim - 2))
    coef = dctn(blocks, axes=(2, 3), norm="ortho")
    back = idctn(np.round(coef / q) * q, axes=(2, 3), norm="ortho")
    out = back.swapaxes(1, 2).reshape(x.shape)[:h, :w]
    return np.clip((out + 128.0) / 255.0, 0.0, 1.0)


def _blur(img: np.ndarray, sigma: float = 2.0) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    return gaussian_filter(img, sigma=(sigma, sigma) + (0,) * (img.ndim - 2))


def derive(photo: np.ndarray, klass: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(img1, img2) of class ``klass`` from ``photo`` ((H, W[, C]) in [0, 1]), float64: img2 the target,
    img1 the image being trained towards it."""
    if klass not in CLASSES:
        raise ValueError(f"klass: expected one of {CLASSES}, got {klass!r}")
    render = np.clip(photo + RENDER_NOISE * rng.standard_normal(photo.shape), 0.0, 1.0)
    scale = {  # intensity classes: both images mapped alike
        "photograph": lambda v: v,
        "dark": lambda v: 0.05 * v,
        "bright": lambda v: 0.95 + 0.04 * (v - 0.5),
        "low contrast": lambda v: 0.5 + 0.1 * (v - 0.5),
    }
    if klass in scale:
        return scale[klass](render), scale[klass](photo)
    distorted = {  # distortions of the photograph, against the clean one
        "blurred": lambda: _blur(photo),
        "8-bit": lambda: np.round(render * 255.0) / 255.0,
        "noisy": lambda: np.clip(photo + NOISE * rng.standard_normal(photo.shape), 0.0, 1.0),
        "JPEG-like": lambda: jpeg_like(photo),
    }[klass]()
    return distorted, photo


def _planes(img: np.ndarray) -> np.ndarray:
    """(H, W[, C]) to (1, C, H, W) float32."""
    planes = img[None] if img.ndim == 2 else np.moveaxis(img, -1, 0)
    return np.ascontiguousarray(planes[None], dtype=np.float32)


def image_set(seed: int = 0, photos: tuple[str, ...] | None = None):
    """Every case, one at a time: (image name, class, img1, img2), the images (1, C, H, W) float32 in [0, 1].
    Each colour photograph comes in colour and in grey ("name (grey)"); ``photos`` picks some (all: None)."""
    rng = np.random.default_rng(seed)
    for name in photos or COLOUR + GREY:
        photo = photograph(name)
        views = [(name, photo)] if photo.ndim == 2 else [(name, photo), (f"{name} (grey)", grey(photo))]
        for label, view in views:
            for klass in CLASSES:
                img1, img2 = derive(view, klass, rng)
                yield label, klass, _planes(img1), _planes(img2)


def errors(map32, ref_map, mean32: float, grad32, ref_grad) -> dict:
    """The three errors the book states: the map's largest, the mean's, and the gradient's largest relative
    to the largest gradient. Arrays of NumPy or CuPy (float64 references)."""
    scale = float(abs(ref_grad).max())
    return {
        "map error": float(abs(map32 - ref_map).max()),
        "mean error": abs(float(mean32) - float(ref_map.mean())),
        "gradient error": float(abs(grad32 - ref_grad).max()) / scale if scale else float(abs(grad32).max()),
    }


def worst_by_class(cases: list[dict]) -> list[dict]:
    """One row per class of ``cases`` (each: class and the three errors), in CLASSES' order: the number of
    images, the worst of each error, and whether it is within LIMITS ("met" or "missed")."""
    rows = []
    for klass in [k for k in CLASSES if any(c["class"] == k for c in cases)]:
        mine = [c for c in cases if c["class"] == klass]
        row = {"class": klass, "images": len(mine)}
        for metric, limit in LIMITS.items():
            row[metric] = max(c[metric] for c in mine)
            row[f"{metric}: verdict"] = "met" if row[metric] <= limit else "missed"
        rows.append(row)
    return rows


def measure(fused_ssim, ssim_map, seed: int = 0, photos: tuple[str, ...] | None = None) -> list[dict]:
    """Every case of ``image_set``, on the GPU through the PyTorch API: the mean and dL/dimg1 of
    ``1 - fused_ssim(img1, img2)`` and ``ssim_map(img1, img2)`` (torch tensors in, a tensor out), each against
    the float64 reference (on the GPU): one dict per case (image, class, the three errors). ``photos``: as
    for image_set."""
    import cupy
    import torch

    from . import common

    found = []
    for name, klass, a, b in image_set(seed, photos):
        img1 = torch.as_tensor(a, device="cuda").requires_grad_(True)
        img2 = torch.as_tensor(b, device="cuda")
        mean = fused_ssim(img1, img2)
        (1 - mean).backward()
        with torch.no_grad():
            got_map = cupy.from_dlpack(ssim_map(img1.detach(), img2).contiguous())
        da, db = cupy.asarray(a), cupy.asarray(b)
        ref_map = common.reference(da, db)
        ref_grad = common.reference_backward(da, db, cupy.full(a.shape, -1.0 / a.size))
        grad = cupy.from_dlpack(img1.grad.detach())
        found.append({"image": name, "class": klass, **errors(got_map, ref_map, float(mean), grad, ref_grad)})
    return found
