"""The book's SSIM for PyTorch training loops: fused_ssim(img1, img2, padding="same", train=True), the
signature of rahul-goel/fused-ssim, on our kernels through DLPack (no copies).

    from kernels.ssim.torch_ssim import fused_ssim
    loss = 1 - fused_ssim(img1, img2)   # (N, C, H, W) float32 CUDA tensors; either may require grad
    loss.backward()

The forward is one launch of V13's fused mean in training mode: the float64 sum and the three
derivative maps, no map. The backward of the mean is backward.cu (dL/dmap is one number), of the
valid map's mean the Numba backward with a map that is zero on the border. SSIM is symmetric in its
two images, so dL/dimg2 is the img1-gradient of the swapped call: an img2 that requires grad adds that
call's forward and backward (and only such an img2: for img2 alone, the unswapped ones are not run).
With ``train=False`` (or images that need no gradient) the forward is V13's fused mean alone.
``version="V15"`` runs V15's kernels instead: slower, with a shift that follows the data, for dark or
bright images where V13's float32 map loses digits. PyTorch is optional: the rest of the book does not
import this module.
"""

from __future__ import annotations

from functools import cache

from . import backward, common

MEAN = "V13"  # the fused mean, no map written (in training with the derivative maps)
VERSIONS = (MEAN, "V15")  # the fastest, and the one whose shift follows the data
PADDINGS = ("same", "valid")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise ImportError("kernels.ssim.torch_ssim needs PyTorch; the rest of the book runs without it") from exc
    return torch


def _cupy(t):
    import cupy

    return cupy.from_dlpack(t.detach())


@cache
def _function():
    torch = _torch()

    class FusedSSIM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, img1, img2, padding, version):
            a, b = _cupy(img1), _cupy(img2)
            valid = padding == "valid"
            # The images in the order whose img1-gradient is wanted: (a, b) for img1, (b, a) for img2.
            ctx.wanted = [pair for pair, need in (((0, 1), img1.requires_grad), ((1, 0), img2.requires_grad)) if need]
            saved = []
            for first, second in ctx.wanted:
                sums, derivs = common.fused_sums(version, (a, b)[first], (a, b)[second], valid=valid, training=True)
                saved += [torch.from_dlpack(d) for d in derivs]
            ctx.save_for_backward(img1.detach(), img2.detach(), *saved)
            ctx.padding, ctx.pixels = padding, _pixels(a.shape, padding)
            return torch.from_dlpack(sums).sum().div(ctx.pixels).float()

        @staticmethod
        def backward(ctx, grad_out):
            img1, img2, *derivs = ctx.saved_tensors
            g = (grad_out / ctx.pixels).float().reshape(1)  # dL/dmap where the mean counts, on the device
            images = (_cupy(img1), _cupy(img2))
            grads = [None, None, None, None]  # img1, img2, padding, version
            for k, (first, second) in enumerate(ctx.wanted):
                a, b = images[first], images[second]
                d = [_cupy(t) for t in derivs[3 * k : 3 * k + 3]]
                if ctx.padding == "same":
                    grad = backward.run_constant(a, b, *d, _cupy(g))
                else:
                    r = common.RADIUS
                    grad_map = torch.zeros_like(img1)
                    grad_map[..., r:-r, r:-r] = g
                    grad = backward.run(a, b, _cupy(grad_map), *d)
                grads[first] = torch.from_dlpack(grad)
            return tuple(grads)

    return FusedSSIM


def fused_ssim(img1, img2, padding: str = "same", train: bool = True, version: str = MEAN):
    """Mean SSIM of two (N, C, H, W) float32 CUDA tensors, differentiable (when ``train``) in each image
    that requires grad, by ``version``'s kernels (one of VERSIONS)."""
    if version not in VERSIONS:
        raise ValueError(f"version: expected one of {VERSIONS}, got {version!r}")
    torch = _torch()
    if padding not in PADDINGS:
        raise ValueError(f"padding: expected one of {PADDINGS}, got {padding!r}")
    for name, t in (("img1", img1), ("img2", img2)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dtype != torch.float32:
            raise TypeError(f"{name}: expected a float32 CUDA tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    img1, img2 = img1.contiguous(), img2.contiguous()
    if train and (img1.requires_grad or img2.requires_grad) and torch.is_grad_enabled():
        return _function().apply(img1, img2, padding, version)
    a, b = _cupy(img1), _cupy(img2)
    sums = common.fused_sums(version, a, b, valid=padding == "valid")
    return torch.from_dlpack(sums).sum().div(_pixels(a.shape, padding)).float()


def _pixels(shape, padding: str) -> int:
    """How many map values the mean counts: all of them, or those of the valid map."""
    n, c, h, w = shape
    r = common.RADIUS
    return n * c * ((h - 2 * r) * (w - 2 * r) if padding == "valid" else h * w)
