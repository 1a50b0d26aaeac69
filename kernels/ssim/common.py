"""What every SSIM version shares: the float64 reference, the constants, the problem sizes and the one
launch wrapper that validates arguments and allocates outputs.

SSIM here means: 11x11 Gaussian window (sigma 1.5, applied separably, 11 taps in x then 11 in y),
C1 = 0.01^2, C2 = 0.03^2, data range 1, zero padding so the map has the image's size ("same"); the
"valid" map drops the 5-pixel border where the window reaches into the padding. Images are NCHW
float32; every (batch, channel) plane is independent.

NaN/Inf in an input are not checked by default (that would cost a pass over the data): they
propagate, exactly as in the reference, to every map pixel whose 11x11 window contains them, and
nowhere else. ``run(..., check_finite=True)`` raises instead.

Every kernel blurs the *shifted* images x - SHIFT and y - SHIFT (the zero padding becomes -SHIFT, so the
shift is exact everywhere) and adds SHIFT back to the two means. Variances and the covariance do not
change under a shift, but E[x^2] - mu^2 then cancels on numbers near 0.06 instead of near 0.5: about an
order of magnitude less float32 rounding error on smooth bright images (``float32_model`` shows it on the CPU).
"""

from __future__ import annotations

import importlib
import math
from functools import cache, lru_cache

import numpy as np
from numba import cuda, float32

from kernels.harness import check, device  # first: device picks the simulator before numba.cuda loads

from . import registry
from .registry import REGISTRY

WINDOW = 11
RADIUS = WINDOW // 2
SIGMA = 1.5
C1 = 0.01**2
C2 = 0.03**2


def gaussian_weights() -> np.ndarray:
    """The 11 normalized 1-D Gaussian taps in float64; the 2-D window is their outer product."""
    k = np.arange(WINDOW) - RADIUS
    g = np.exp(-(k**2) / (2 * SIGMA**2))
    return g / g.sum()


# The taps every kernel multiplies by. A global NumPy array becomes constant memory in a Numba kernel:
# every thread reads the same tap at the same time, which constant memory broadcasts.
GAUSS = gaussian_weights().astype(np.float32)
C1_F32, C2_F32 = float32(C1), float32(C2)
SHIFT = 0.5  # the middle of the data range [0, 1]: shifted pixels lie in [-0.5, 0.5]
SHIFT_F32 = float32(SHIFT)

# Views of the registry (registry.py), in its order: names and files (.py ones without the suffix).
VERSIONS = {v.name: v.file.removesuffix(".py") for v in REGISTRY}
WORKLOG = [v.name for v in REGISTRY if v.chapter == "worklog"]  # notebook 02
BEYOND = [v.name for v in REGISTRY if v.chapter == "beyond"]  # notebook 02b
NUMBA_VERSIONS = [v.name for v in REGISTRY if v.language == "numba"]
CUDA_VERSIONS = [v.name for v in REGISTRY if v.language == "cuda"]

# Problem sizes: the worklog's image, and odd sizes that are not multiples of any tile.
BENCH_SHAPE = (1, 3, 2160, 3840)
CHECK_SHAPES = {"ci": [(1, 1, 11, 11), (1, 1, 21, 30)], "full": [(1, 1, 11, 11), (1, 3, 37, 53), (2, 3, 2161, 3839)]}
MAP_ATOL, MEAN_ATOL = 1e-4, 1e-6
# A width that is a multiple of 4 with odd height and channel count: V7 on copies 16-byte chunks and
# stores 8-byte pairs only there, so its interior blocks are checked here (the odd sizes take the edge path).
ALIGNED_SHAPE = (2, 3, 77, 392)
# The stretch target this book set the SSIM chapters on an H100 at BENCH_SHAPE: ms per forward pass.
TARGET_MS = {"inference": 0.20, "training": 0.30}


def problem_sizes(profile: str) -> dict:
    """Shapes for a profile: 'bench' (timed, GPU only, else None) and 'check' (correctness)."""
    if profile not in CHECK_SHAPES:
        raise ValueError(f"profile must be 'full' or 'ci', got {profile!r}")
    return {"bench": BENCH_SHAPE if profile == "full" else None, "check": CHECK_SHAPES[profile]}


# ---------------------------------------------------------------------------------------------------
# float64 reference (NumPy + SciPy, vectorized; the same on the GPU with CuPy for CuPy arrays)


def array_module(x):
    """CuPy for a CuPy array (on a GPU), else NumPy: the reference runs where its images are."""
    if device.MODE != device.GPU:
        return np
    import cupy

    return cupy.get_array_module(x)


def blur(x: np.ndarray) -> np.ndarray:
    """Separable Gaussian over the last two axes with zero padding, in float64 (with CuPy for a CuPy array)."""
    xp = array_module(x)
    if xp is np:
        from scipy.ndimage import correlate1d
    else:
        from cupyx.scipy.ndimage import correlate1d
    g = xp.asarray(gaussian_weights())
    x = xp.asarray(x, dtype=np.float64)
    return correlate1d(correlate1d(x, g, axis=-1, mode="constant"), g, axis=-2, mode="constant")


def terms(mu1, mu2, ex2, ey2, exy):
    """The SSIM map and its partial derivatives from the five blurred moments.

    The derivatives are with respect to mu1, sigma1^2 and sigma12 with the second moments held fixed,
    so d(map)/d(img1) = G*(dm_dmu1) + 2 img1 G*(dm_dsigma1_sq) + img2 G*(dm_dsigma12) (G: the blur).
    Works on NumPy arrays of any float type and, as plain arithmetic, on float32 scalars in kernels.
    """
    s11, s22, s12 = ex2 - mu1 * mu1, ey2 - mu2 * mu2, exy - mu1 * mu2
    a = mu1 * mu1 + mu2 * mu2 + C1
    b = s11 + s22 + C2
    c = 2 * mu1 * mu2 + C1
    d = 2 * s12 + C2
    m = (c * d) / (a * b)
    dm_dmu1 = (2 * mu2 * d - 2 * mu2 * c) / (a * b) - 2 * mu1 * m / a + 2 * mu1 * m / b
    dm_ds11 = -m / b
    dm_ds12 = 2 * c / (a * b)
    return m, dm_dmu1, dm_ds11, dm_ds12


def reference(img1, img2, *, training: bool = False):
    """float64 SSIM map ('same', zero padding); with training=True also the three derivative maps. CuPy
    images give CuPy maps, computed on the GPU (the large checks' references: seconds on the host)."""
    xp = array_module(img1)
    x, y = xp.asarray(img1, np.float64), xp.asarray(img2, np.float64)
    out = terms(blur(x), blur(y), blur(x * x), blur(y * y), blur(x * y))
    return out if training else out[0]


def reference_backward(img1, img2, grad_map, *, wrt: str = "img1"):
    """float64 dL/dimg1 (or with wrt="img2" dL/dimg2) given dL/dmap (same shape as the map). SSIM is
    symmetric in its two images, so dL/dimg2 is dL/dimg1 of the swapped pair."""
    if wrt not in ("img1", "img2"):
        raise ValueError(f"wrt: expected 'img1' or 'img2', got {wrt!r}")
    if wrt == "img2":
        img1, img2 = img2, img1
    xp = array_module(img1)
    x, y, g = (xp.asarray(a, np.float64) for a in (img1, img2, grad_map))
    _, dmu1, ds11, ds12 = reference(x, y, training=True)
    # The blur with zero padding and a symmetric window is its own adjoint.
    return blur(g * dmu1) + 2 * x * blur(g * ds11) + y * blur(g * ds12)


def mean_grad_map(shape, g, *, valid: bool = False, xp=np, dtype=np.float64):
    """dL/dmap of the loss g * (sum of the map, or with ``valid`` of the valid map): ``g`` where the sum
    counts a pixel, zero on the border it leaves out."""
    grad = xp.zeros(shape, dtype=dtype)
    r = RADIUS if valid else 0
    grad[..., r : shape[-2] - r, r : shape[-1] - r] = g
    return grad


def crop_valid(ssim_map):
    """The 'valid' map: drop the RADIUS-pixel border where the window reaches into the zero padding."""
    if len(ssim_map.shape) < 2 or min(ssim_map.shape[-2:]) < WINDOW:
        raise ValueError(
            f"ssim_map: a valid map needs at least {WINDOW}x{WINDOW} pixels (the window), got shape "
            f"{tuple(ssim_map.shape)}"
        )
    return ssim_map[..., RADIUS:-RADIUS, RADIUS:-RADIUS]


def test_images(shape, *, kind: str = "random", seed=None):
    """float32 images in [0, 1]: 'random' (uniform, and a noisy copy) or 'structured' (smooth + noise).
    ``seed``: an int (the same images every time), a NumPy Generator, or None (fresh images)."""
    shape = tuple(check.positive_int(v, f"shape[{i}]") for i, v in enumerate(shape))
    if not (seed is None or isinstance(seed, np.random.Generator)):
        check.nonnegative_int(seed, "seed (an int >= 0, a NumPy Generator or None)")
    rng = np.random.default_rng(seed)
    if kind == "random":
        a = rng.random(shape, dtype=np.float32)
        b = np.clip(a + 0.2 * rng.standard_normal(shape).astype(np.float32), 0, 1).astype(np.float32)
        return a, b
    if kind == "structured":
        h, w = shape[-2:]
        yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
        smooth = 0.5 + 0.25 * np.sin(7 * xx + 3 * yy) * np.cos(5 * yy)
        base = np.broadcast_to(smooth, shape)
        a = np.clip(base + 0.02 * rng.standard_normal(shape), 0, 1).astype(np.float32)
        b = np.clip(base + 0.05 * rng.standard_normal(shape), 0, 1).astype(np.float32)
        return a, b
    raise ValueError(f"kind must be 'random' or 'structured', got {kind!r}")


# V15's shift tile (v15.cu): each thread shifts its two columns of one 72-row strip by a value that follows
# the data (``tile_shift``): (rows, columns).
SHIFT_TILE = (72, 2)


def tile_shift(img, y0: int, rows: int) -> np.ndarray:
    """V15's shift of each output column of the strip of ``rows`` rows from row ``y0`` (shape (..., 1, W),
    float32): the midrange (min + max) / 2 of the image pixels its thread's windows read (rows y0 - 5 ..
    y0 + rows + 4, columns x - 5 .. x + 6 for the pair x, x + 1) where their range is under 0.5, else SHIFT.
    Every pixel u = x - shift then lies within 0.25 of 0 or no farther from it than with SHIFT."""
    a = np.asarray(img, np.float32)
    h, w = a.shape[-2:]
    rows_in = a[..., max(0, y0 - RADIUS) : min(h, y0 + rows + RADIUS), :]
    first = np.arange(w) // SHIFT_TILE[1] * SHIFT_TILE[1]
    pad = [(0, 0)] * (a.ndim - 2) + [(RADIUS, RADIUS + 1)]
    window = np.lib.stride_tricks.sliding_window_view
    lo = window(np.pad(rows_in.min(axis=-2), pad, constant_values=np.inf), 2 * RADIUS + 2, axis=-1)[..., first, :]
    hi = window(np.pad(rows_in.max(axis=-2), pad, constant_values=-np.inf), 2 * RADIUS + 2, axis=-1)[..., first, :]
    lo, hi = lo.min(axis=-1), hi.max(axis=-1)
    mid = (hi + lo) * np.float32(0.5)
    return np.where(hi - lo < np.float32(0.5), mid, SHIFT_F32).astype(np.float32)[..., None, :]


def float32_model(img1, img2, *, shift: float | str = SHIFT) -> np.ndarray:
    """The kernels' float32 arithmetic emulated in NumPy: shift, x-pass then y-pass with one rounding per
    fused multiply-add (tap order 0..10, as on the GPU), then ``terms`` in float32. Only for showing
    where float32 error comes from. ``shift``: one number for every pixel (0: the formula without the
    shift), or "tile": V15's shift that follows the data (``tile_shift``); the zero padding becomes
    minus the shift either way."""
    if isinstance(shift, str) and shift != "tile":
        raise ValueError(f"shift: expected a number or 'tile', got {shift!r}")
    a, b = (np.asarray(v, np.float32) for v in (img1, img2))
    h, w = a.shape[-2:]
    rows = SHIFT_TILE[0] if shift == "tile" else h
    g = GAUSS.astype(np.float64)
    pad = [(0, 0)] * (a.ndim - 2) + [(RADIUS, RADIUS)] * 2
    xp, yp = np.pad(a, pad), np.pad(b, pad)
    out = np.empty(a.shape, np.float32)
    for y0 in range(0, h, rows):
        r = min(rows, h - y0)
        if shift == "tile":
            c1, c2 = tile_shift(a, y0, r), tile_shift(b, y0, r)
        else:
            c1 = c2 = np.float32(shift)
        acc = [np.zeros(a.shape[:-2] + (r + 2 * RADIUS, w), np.float32) for _ in range(5)]
        for k in range(WINDOW):  # fmaf(g, value, acc): exact product, one rounding
            u = xp[..., y0 : y0 + r + 2 * RADIUS, k : k + w] - c1
            v = yp[..., y0 : y0 + r + 2 * RADIUS, k : k + w] - c2
            for m, val in enumerate((u, v, u * u, v * v, u * v)):
                acc[m] = (g[k] * val + acc[m]).astype(np.float32)
        mom = [np.zeros(a.shape[:-2] + (r, w), np.float32) for _ in range(5)]
        for k in range(WINDOW):
            for m in range(5):
                mom[m] = (g[k] * acc[m][..., k : k + r, :] + mom[m]).astype(np.float32)
        mu1, mu2, ex2, ey2, exy = mom
        s11, s22, s12 = ex2 - mu1 * mu1, ey2 - mu2 * mu2, exy - mu1 * mu2
        mu1, mu2 = mu1 + c1, mu2 + c2
        c1_, c2_, two = np.float32(C1), np.float32(C2), np.float32(2)
        out[..., y0 : y0 + r, :] = (
            (two * mu1 * mu2 + c1_) * (two * s12 + c2_) / ((mu1 * mu1 + mu2 * mu2 + c1_) * (s11 + s22 + c2_))
        )
    return out


PHOTOS = ("astronaut", "chelsea", "coffee")  # scikit-image's bundled photographs (no download)
DISTORTIONS = ("blur", "quantize", "noise")


def photo_images(shape, photo: str = "astronaut", distortion: str = "blur", *, dark: bool = False, seed=None):
    """float32 images (N, C, H, W): a scikit-image photograph scaled to H x W (channel c: its colour c % 3)
    and a distorted copy: Gaussian blur (sigma 2), quantization to 16 levels or noise (sigma 0.05).
    ``dark=True`` maps both into [0.02, 0.1]: a dark, low-contrast pair, where float32 SSIM is hardest."""
    from scipy.ndimage import gaussian_filter
    from skimage import data, transform

    if photo not in PHOTOS:
        raise ValueError(f"photo: expected one of {PHOTOS}, got {photo!r}")
    if distortion not in DISTORTIONS:
        raise ValueError(f"distortion: expected one of {DISTORTIONS}, got {distortion!r}")
    n, c, h, w = (check.positive_int(v, f"shape[{i}]") for i, v in enumerate(shape))
    rgb = transform.resize(getattr(data, photo)() / 255.0, (h, w), order=1, anti_aliasing=False)
    a = np.broadcast_to(np.stack([rgb[..., k % 3] for k in range(c)]), (n, c, h, w))
    if distortion == "blur":
        b = gaussian_filter(a, sigma=(0, 0, 2, 2))
    elif distortion == "quantize":
        b = np.round(a * 15) / 15
    else:
        b = np.clip(a + 0.05 * np.random.default_rng(seed).standard_normal(a.shape), 0, 1)
    if dark:
        a, b = 0.02 + 0.08 * a, 0.02 + 0.08 * b
    return a.astype(np.float32), b.astype(np.float32)


# ---------------------------------------------------------------------------------------------------
# Work model: what a kernel must do at least

FLOPS_PER_PIXEL = 2 * 5 * WINDOW * 2  # two separable passes x five moments x 11 taps x (mul + add)


def work(shape, *, training: bool = False) -> dict:
    """FLOPs of the separable passes and the DRAM bytes of one pass: both images read once, the map
    (and in training the three derivative maps) written once."""
    pixels = math.prod(check.positive_int(v, f"shape[{i}]") for i, v in enumerate(shape))
    maps = 4 if training else 1
    return {"flops": FLOPS_PER_PIXEL * pixels, "bytes": (2 + maps) * 4 * pixels}


def v2_ffma_per_block(bx: int, by: int, channels: int = 3) -> float:
    """The worklog's V2 model: FFMA warp-instructions of one block computing bx x by outputs of every
    channel: 5 moments x (x-pass over by+10 rows + y-pass over by rows) x 11 taps, 32 lanes a warp."""
    check.positive_int(bx, "bx")  # a model: blocks beyond the device's 1024 threads are allowed
    check.positive_int(by, "by")
    return channels * 5 * (bx * (by + 2 * RADIUS) * WINDOW + bx * by * WINDOW) / 32


def v2_ffma_total(width: int, height: int, bx: int, by: int, channels: int = 3) -> float:
    per_block = v2_ffma_per_block(bx, by, channels)  # checks the block first
    check.positive_int(width, "width")
    check.positive_int(height, "height")
    return math.ceil(width / bx) * math.ceil(height / by) * per_block


# ---------------------------------------------------------------------------------------------------
# Shared device code of the Numba versions


@cuda.jit(device=True, inline=True)
def ssim_terms(mu1, mu2, ex2, ey2, exy):
    """float32 version of ``terms`` (the same formula, written out once for the kernels), from the
    moments of the shifted images: the (co)variances need no correction, the means get SHIFT back."""
    s11 = ex2 - mu1 * mu1
    s22 = ey2 - mu2 * mu2
    s12 = exy - mu1 * mu2
    mu1 = mu1 + SHIFT_F32
    mu2 = mu2 + SHIFT_F32
    a = mu1 * mu1 + mu2 * mu2 + C1_F32
    b = s11 + s22 + C2_F32
    c = float32(2.0) * mu1 * mu2 + C1_F32
    d = float32(2.0) * s12 + C2_F32
    ab = a * b
    m = (c * d) / ab
    two = float32(2.0)
    dm_dmu1 = (two * mu2 * d - two * mu2 * c) / ab - two * mu1 * m / a + two * mu1 * m / b
    return m, dm_dmu1, -m / b, two * c / ab


@cuda.jit(device=True, inline=True)
def store(out, d_mu1, d_s11, d_s12, p, y, x, mu1, mu2, ex2, ey2, exy, training):
    """Write the map (and in training the derivative maps) at one pixel from the shifted moments."""
    m, g1, g2, g3 = ssim_terms(mu1, mu2, ex2, ey2, exy)
    out[p, y, x] = m
    if training:
        d_mu1[p, y, x] = g1
        d_s11[p, y, x] = g2
        d_s12[p, y, x] = g3


# ---------------------------------------------------------------------------------------------------
# The one launch wrapper


def validate(img1, img2) -> tuple:
    """Check the two images and return (N, C, H, W); every error names the constraint."""
    for name, img in (("img1", img1), ("img2", img2)):
        check.require_array(img, name, dtype=np.float32)
    return check_shapes(tuple(img1.shape), tuple(img2.shape))  # the dimensions, with the shape rules


def check_shapes(shape1: tuple, shape2: tuple) -> tuple:
    """validate's rules on the shapes alone (for images checked otherwise, such as PyTorch tensors):
    (N, C, H, W), or a ValueError naming the constraint."""
    for name, shape in (("img1", shape1), ("img2", shape2)):
        if len(shape) != 4:
            raise ValueError(f"{name}: expected 4 dimensions (N, C, H, W), got shape {shape}")
    if shape1 != shape2:
        raise ValueError(f"img1 and img2 must have the same shape, got {shape1} and {shape2}")
    n, c, h, w = shape1
    if h < WINDOW or w < WINDOW:
        raise ValueError(f"images must be at least {WINDOW}x{WINDOW} (the window), got H={h}, W={w}")
    if n * c == 0:
        raise ValueError(f"images must hold at least one plane (N*C >= 1), got shape {shape1}")
    if n * c > 65535:
        raise ValueError(f"at most 65535 planes (N*C) fit the grid's z dimension, got {n * c}")
    return n, c, h, w


@cache
def version_module(version: str):
    """The Python module that launches ``version`` (for .cu versions, the shared loader module)."""
    return importlib.import_module(registry.get(version).module)


def tile_params(version: str, gpu_tile: dict, sim_tile: dict, tile: dict | None) -> dict:
    """A Numba kernel's default block shape on this machine with ``tile`` applied: only the keys it
    already has, each a positive integer."""
    params = dict(gpu_tile if device.on_gpu() else sim_tile)
    if tile:
        if not params:
            raise ValueError(
                f"tile= applies to the Numba versions {NUMBA_VERSIONS}; {version}'s block shape "
                "is fixed in its .cu file"
            )
        unknown = sorted(set(tile) - set(params))
        if unknown:
            raise ValueError(f"{version}: unknown tile keys {unknown}; expected some of {sorted(params)}")
        params.update({key: check.positive_int(value, f"{version}: tile {key}") for key, value in tile.items()})
    return params


DERIV_NAMES = ("dm_dmu1", "dm_dsigma1_sq", "dm_dsigma12")


def _outputs(img1, img2, out, derivs, training: bool, *, with_map: bool = True) -> tuple:
    """(out, derivs) to write: those given, checked, or new arrays (derivs: None in inference; out: None
    where ``with_map`` is False, for a kernel that writes no map).
    Outputs may not overlap the images (the kernels read them while writing; the .cu ones declare them
    __restrict__) nor each other (one value would overwrite another)."""
    if derivs is not None:
        if not training:
            raise ValueError("derivs: the derivative maps are written only in training mode (training=True)")
        if not isinstance(derivs, (tuple, list)):
            raise TypeError(f"derivs: expected a tuple of 3 arrays {DERIV_NAMES}, got {type(derivs).__name__}")
        if len(derivs) != 3:
            raise ValueError(f"derivs: expected 3 arrays {DERIV_NAMES}, got {len(derivs)}")
    names = [f"derivs[{i}] ({name})" for i, name in enumerate(DERIV_NAMES)]
    given = [("out", out)]
    if derivs is not None:
        given += zip(names, derivs, strict=True)
    written = []
    for name, a in given:
        if a is None:
            continue
        check.require_array(a, name, dtype=np.float32, shape=tuple(img1.shape))
        check.require_output(a, name, {"img1": img1, "img2": img2})
        for other, b in written:
            if check.overlaps(a, b):
                raise ValueError(
                    f"{name} must not overlap {other}: the kernel would overwrite values it writes to {other}"
                )
        written.append((name, a))
    xp = device.xp()
    if out is None and with_map:
        out = xp.empty(img1.shape, dtype=np.float32)
    if training and derivs is None:
        derivs = [xp.empty(img1.shape, dtype=np.float32) for _ in DERIV_NAMES]
    return out, tuple(derivs) if training else None


def run(
    version: str,
    img1,
    img2,
    *,
    training: bool = False,
    valid: bool = False,
    out=None,
    derivs=None,
    check_finite: bool = False,
    check_range: bool = True,
    tile: dict | None = None,
):
    """SSIM map of ``img1`` vs ``img2`` by one kernel version.

    Returns the map (N, C, H, W), or with ``valid=True`` its interior (N, C, H-10, W-10); with
    ``training=True`` a tuple (map, dm_dmu1, dm_dsigma1_sq, dm_dsigma12) whose three derivative maps
    are always (N, C, H, W), also with ``valid=True`` (``backward.run`` takes them at that size).
    ``out`` (optional) receives the full map and ``derivs`` (optional, training only: 3 arrays, in the
    order above) the derivative maps; neither may overlap the images or each other. ``tile`` overrides
    the block shape of a Numba version. ``check_range`` refuses pixels outside [0, 1], the data range that
    C1, C2 and the kernels' shift assume (far outside it, float32 cancels and the map leaves [-1, 1]); NaN
    passes it and propagates. It costs a pass over both images: timing loops turn it off.
    """
    validate(img1, img2)
    xp = device.xp()
    for name, img in (("img1", img1), ("img2", img2)):
        if check_finite and (bad := int(xp.count_nonzero(~xp.isfinite(img)))):
            raise ValueError(f"{name} has {bad} NaN/Inf values; SSIM of non-finite pixels is undefined")
        if check_range and (bad := int(xp.count_nonzero((img < 0) | (img > 1)))):
            raise ValueError(
                f"{name} has {bad} pixels outside [0, 1], the data range SSIM's constants C1 and C2 assume: "
                "scale the images to [0, 1] first (8-bit images: divide by 255)"
            )
    out, derivs = _outputs(img1, img2, out, derivs, training)
    module = version_module(version)
    module.launch(version, img1, img2, out, derivs, **tile_params(version, module.GPU_TILE, module.SIM_TILE, tile))
    ssim_map = crop_valid(out) if valid else out
    return (ssim_map, *derivs) if training else ssim_map


@lru_cache(maxsize=16)  # every case of one version's checks (up to 12 in 02b), reused by the next version
def _case(shape, kind, seed, training):
    """Images and their reference, on the GPU where there is one, kept for the next version."""
    xp = device.xp()
    a, b = (xp.asarray(img) for img in test_images(shape, kind=kind, seed=seed))
    return a, b, reference(a, b, training=training)


def _with_seed(result: check.CheckResult, seed: int) -> check.CheckResult:
    """A failed check also names its images' seed, so that the failure can be reproduced."""
    if not result.ok:
        result.name += f" (images: test_images(seed={seed}))"
    return result


def verify(version: str, shapes, kinds=("random", "structured"), *, training: bool = False, seed: int = 0) -> list[str]:
    """Verdict lines (map and mean vs the float64 reference) for one version on random images of each
    shape and kind (each case's seed: ``seed`` plus the verdict lines before it), with poisoned
    outputs. The lines name tolerances, not errors, and the training tolerances scale with the
    reference, so with the default seed they read the same on every machine (the notebooks print
    them; the tests draw fresh images)."""
    if not shapes or not all(isinstance(s, (tuple, list)) and len(s) == 4 for s in shapes):
        raise TypeError(f"shapes: expected a list of (N, C, H, W) shapes such as [(1, 1, 11, 11)], got {shapes!r}")
    xp = device.xp()
    lines = []
    for shape in shapes:
        for kind in kinds:
            case_seed = seed + len(lines)
            a, b, ref = _case(tuple(shape), kind, case_seed, training)
            out, *derivs = (check.poison(xp.empty(shape, dtype=np.float32)) for _ in range(4 if training else 1))
            got = run(
                version,
                xp.asarray(a),
                xp.asarray(b),
                out=out,
                derivs=tuple(derivs) if training else None,
                training=training,
            )
            label = f"{version} {'x'.join(map(str, shape))} {kind}"
            if training:
                for g, r, name in zip(got, ref, ("map", *DERIV_NAMES), strict=True):
                    atol = MAP_ATOL * max(1.0, float(abs(r).max()))
                    result = check.compare(g, r, atol=atol, name=f"{label} {name} (atol relative to max)")
                    lines.append(str(_with_seed(result, case_seed)))
                continue
            lines.append(str(_with_seed(check.compare(got, ref, atol=MAP_ATOL, name=f"{label} map"), case_seed)))
            result = check.compare(
                np.array([mean(got)]), np.array([float(ref.mean())]), atol=MEAN_ATOL, name=f"{label} mean"
            )
            lines.append(str(_with_seed(result, case_seed)))
    return lines


def map_sum(ssim_map):
    """The float64 sum of a map, left on the device (0-d). A strided view (the valid map) is summed along
    its rows first: CuPy reduces a whole non-contiguous array in one block, 100x slower at 2160x3840."""
    if ssim_map.flags.c_contiguous:
        return ssim_map.sum(dtype=np.float64)
    return ssim_map.sum(axis=-1, dtype=np.float64).sum()


def mean(ssim_map) -> float:
    """The SSIM value: the mean of a map, accumulated in float64."""
    if not hasattr(ssim_map, "flags") or not hasattr(ssim_map, "size"):
        raise TypeError(f"ssim_map: expected a NumPy or CuPy array (a map from run), got {type(ssim_map).__name__}")
    if ssim_map.size == 0:
        raise ValueError(f"ssim_map: empty map of shape {tuple(ssim_map.shape)}; a mean needs at least one pixel")
    return float(map_sum(ssim_map)) / ssim_map.size


def fused_mean_versions() -> list[str]:
    """The versions whose kernel can sum SSIM itself, writing no map (``fused_mean`` in the registry)."""
    return [v.name for v in REGISTRY if v.fused_mean]


def fused_sums(version: str, img1, img2, *, valid: bool = False, training: bool = False, derivs=None):
    """One launch that writes no map: the sum of each plane's SSIM values (or of its valid map), a
    float64 device array of N*C values, not synchronized. Only for ``fused_mean_versions()``.

    ``training=True`` also writes the three derivative maps of every pixel (into ``derivs`` if given) and
    returns (sums, derivs): the forward of a training step on the mean, for ``backward``."""
    validate(img1, img2)
    module = version_module(version)  # an unknown version is refused here
    if version not in fused_mean_versions():
        raise ValueError(
            f"{version} has no fused mean (versions that have one: {fused_mean_versions()}); use mean(run(...)) instead"
        )
    _, derivs = _outputs(img1, img2, None, derivs, training, with_map=False)
    n, c, h, w = img1.shape
    sums = device.xp().zeros(n * c, dtype=np.float64)
    module.launch_mean(version, img1, img2, sums, valid, derivs)
    return (sums, derivs) if training else sums


def fused_mean(version: str, img1, img2, *, valid: bool = False) -> float:
    """The SSIM value mean(run(version, img1, img2, valid=valid)) from ``fused_sums``: no map in memory."""
    sums = fused_sums(version, img1, img2, valid=valid)
    h, w = img1.shape[-2:]
    pixels = (h - 2 * RADIUS) * (w - 2 * RADIUS) if valid else h * w
    return float(sums.sum()) / (sums.size * pixels)


def fused_checks(version: str, shapes, seed: int = 100) -> list:
    """``fused_mean`` (all pixels, then the valid map) against the float64 reference's mean on random
    images of each shape (each case's seed: ``seed`` plus the results before it): check.CheckResult
    objects, printed as verdict lines that name the tolerance."""
    xp = device.xp()
    found = []
    for shape in shapes:
        case_seed = seed + len(found)
        a, b, ref = _case(tuple(shape), "random", case_seed, False)
        for valid in (False, True):
            want = mean(crop_valid(ref) if valid else ref)  # map_sum: a strided view summed row by row
            got = fused_mean(version, xp.asarray(a), xp.asarray(b), valid=valid)
            label = f"{version} {'x'.join(map(str, shape))} fused {'valid-map ' if valid else ''}mean"
            found.append(
                _with_seed(check.compare(np.array([got]), np.array([want]), atol=MEAN_ATOL, name=label), case_seed)
            )
    return found


def planes(a):
    """A 4-D NCHW array as (N*C, H, W), a view."""
    n, c, h, w = a.shape
    return a.reshape(n * c, h, w)


def numba_launch(kernel, grid, block, img1, img2, out, derivs):
    """Launch a Numba SSIM kernel; in inference the derivative arguments are a 1-element placeholder
    the kernel never touches (not the map itself: the simulator copies each argument back)."""
    check.block_shape(block)
    if derivs is None:
        placeholder = device.xp().empty((1, 1, 1, 1), dtype=np.float32)
        derivs = (placeholder,) * 3
    kernel[grid, block](planes(img1), planes(img2), planes(out), *(planes(a) for a in derivs))
