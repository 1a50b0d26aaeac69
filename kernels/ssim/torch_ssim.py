"""The book's SSIM for PyTorch training loops: fused_ssim(img1, img2, padding="same", train=True), the
signature of rahul-goel/fused-ssim, on our kernels (no copies).

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

A call is thin on the host: the kernels get the tensors' addresses and are launched through the
driver directly (``driver_launch``: a CuPy launch would cost more host time than a small image's kernel)
on PyTorch's current stream, so they queue behind the caller's work and a CUDA graph can capture them;
every buffer comes from PyTorch's allocator, and what depends only on the shape is worked out once per
shape. The valid map's backward is the Numba kernel, through DLPack. ``capture(step)`` records a whole
training step in one CUDA graph, whose replay skips the host's per-operation cost.
"""

from __future__ import annotations

from functools import cache, lru_cache

from ..harness import driver_launch
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


def _raw_stream(device: int) -> int:
    """PyTorch's current stream on ``device`` as a raw handle (0: the legacy default stream)."""
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the public call costs microseconds more
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


@cache
def _cupy_stream(ptr: int, device: int):
    """CuPy's handle on a PyTorch stream of ``device`` (0: the legacy default stream, CuPy's null stream)."""
    import cupy

    return cupy.cuda.ExternalStream(ptr, device) if ptr else cupy.cuda.Stream.null


@cache
def _launcher(version: str, which: str, device: int):
    """The driver launcher of ``version``'s fused mean ("mean" or "train_mean"), or of backward.cu ("b1")."""
    module = common.version_module(version) if which != "b1" else None
    with _device(device):
        if which == "b1":
            return driver_launch.Launcher(backward.b1_kernel(), "pppppp" + "ii" + "p", device)
        if which == "train_mean":
            return driver_launch.Launcher(module.train_mean_kernel(version), "ppppp" + "p" + "iii", device)
        return driver_launch.Launcher(module.mean_kernel(version), "pp" + "p" + "iii", device)


def _device(index: int):
    import cupy

    return cupy.cuda.Device(index)


@lru_cache(maxsize=256)
def _plan(version: str, shape: tuple, padding: str) -> tuple:
    """What one call at ``shape`` needs besides the tensors: the fused mean's and backward.cu's (grid, block),
    and how many map values the mean counts."""
    module = common.version_module(version)
    return module.mean_launch(version, shape), backward.b1_launch(shape), _pixels(shape, padding)


def _sums(version: str, x, y, valid: bool, derivs=()):
    """Each plane's SSIM sum (float64, N*C values) in one fused-mean launch; with ``derivs`` (three
    tensors like x) the training forward, which also writes the derivative maps."""
    torch = _torch()
    n, c, h, w = x.shape
    device = x.device.index
    stream = _raw_stream(device)
    sums = torch.empty(n * c, dtype=torch.float64, device=x.device)
    driver_launch.zero_async(sums.data_ptr(), 8 * n * c, stream)  # the kernel adds to it
    (grid, block), _, _ = _plan(version, tuple(x.shape), "valid" if valid else "same")
    launch = _launcher(version, "train_mean" if derivs else "mean", device)
    pointers = (x.data_ptr(), y.data_ptr(), *(d.data_ptr() for d in derivs), sums.data_ptr())
    launch(grid, block, (*pointers, h, w, int(valid)), stream)
    return sums


@lru_cache(maxsize=64)  # a loop over random crops meets many shapes: keep the recent ones
def _weights(planes: int, pixels: int, device: int):
    """1 / pixels, once per plane (float64): the mean as one dot product of the planes' sums."""
    return _torch().full((planes,), 1.0 / pixels, dtype=_torch().float64, device=f"cuda:{device}")


def _mean(sums, pixels: int):
    """The mean SSIM, float32, from the planes' float64 sums."""
    return _torch().dot(sums, _weights(sums.numel(), pixels, sums.device.index)).float()


@cache
def _function():
    torch = _torch()

    class FusedSSIM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, img1, img2, padding, version):
            images = (img1.detach(), img2.detach())
            valid = padding == "valid"
            # The images in the order whose img1-gradient is wanted: (a, b) for img1, (b, a) for img2.
            ctx.wanted = [pair for pair, need in (((0, 1), img1.requires_grad), ((1, 0), img2.requires_grad)) if need]
            saved, sums = [], None
            for first, second in ctx.wanted:
                derivs = [torch.empty_like(images[0]) for _ in common.DERIV_NAMES]
                found = _sums(version, images[first], images[second], valid, derivs)
                sums = found if sums is None else sums  # the swapped call's sums are the same SSIM
                saved += derivs
            ctx.save_for_backward(*images, *saved)
            ctx.padding, ctx.version = padding, version
            ctx.pixels = _plan(version, tuple(img1.shape), padding)[2]
            return _mean(sums, ctx.pixels)

        @staticmethod
        def backward(ctx, grad_out):
            images, derivs = ctx.saved_tensors[:2], ctx.saved_tensors[2:]
            g = grad_out.float().div(ctx.pixels)  # dL/dmap where the mean counts, on the device (0-d, float32)
            grads = [None, None, None, None]  # img1, img2, padding, version
            for k, (first, second) in enumerate(ctx.wanted):
                a, b = images[first], images[second]
                d = derivs[3 * k : 3 * k + 3]
                if ctx.padding == "same":
                    grads[first] = _backward_constant(ctx.version, a, b, d, g)
                else:
                    grads[first] = _backward_valid(a, b, d, g.reshape(1))
            return tuple(grads)

    return FusedSSIM


def _backward_constant(version: str, a, b, derivs, g):
    """dL/da where dL/dmap is the one number at ``g`` (a device tensor): backward.cu."""
    grad = _torch().empty_like(a)
    device = a.device.index
    _, (grid, block), _ = _plan(version, tuple(a.shape), "same")
    pointers = (a.data_ptr(), b.data_ptr(), *(d.data_ptr() for d in derivs), grad.data_ptr())
    _launcher(version, "b1", device)(
        grid, block, (*pointers, a.shape[2], a.shape[3], g.data_ptr()), _raw_stream(device)
    )
    return grad


def _backward_valid(a, b, derivs, g):
    """dL/da where dL/dmap is ``g`` on the valid map and zero on its border: the Numba backward."""
    import cupy
    from numba import cuda

    torch = _torch()
    r = common.RADIUS
    grad_map = torch.zeros_like(a)
    grad_map[..., r:-r, r:-r] = g
    stream = _cupy_stream(_raw_stream(a.device.index), a.device.index)
    with stream:
        arrays = [cupy.from_dlpack(t) for t in (a, b, grad_map, *derivs)]
        grad = backward.run(*arrays, stream=cuda.external_stream(stream.ptr) if stream.ptr else 0)
    return torch.from_dlpack(grad)


@cache
def _operators():
    """The training forward and backward as operators PyTorch knows (``torch.library``), for torch.compile:
    it keeps them in its graph as they are (``fused_ssim`` calls them while compiling), where it would break
    its graph at the autograd Function's launches. Eager calls take the Function, whose host path is shorter."""
    torch = _torch()
    tensor = torch.Tensor

    @torch.library.custom_op("labbook::ssim_train", mutates_args=())
    def ssim_train(a: tensor, b: tensor, padding: str, version: str) -> tuple[tensor, tensor, tensor, tensor]:
        derivs = [torch.empty_like(a) for _ in common.DERIV_NAMES]
        sums = _sums(version, a, b, padding == "valid", derivs)
        return _mean(sums, _plan(version, tuple(a.shape), padding)[2]), *derivs

    @ssim_train.register_fake
    def _(a, b, padding, version):
        return a.new_empty(()), *(torch.empty_like(a) for _ in common.DERIV_NAMES)

    @torch.library.custom_op("labbook::ssim_grad", mutates_args=())
    def ssim_grad(
        a: tensor, b: tensor, d_mu1: tensor, d_s11: tensor, d_s12: tensor, grad: tensor, padding: str, version: str
    ) -> tensor:
        g = grad.float().div(_plan(version, tuple(a.shape), padding)[2])
        derivs = (d_mu1, d_s11, d_s12)
        if padding == "same":
            return _backward_constant(version, a, b, derivs, g)
        return _backward_valid(a, b, derivs, g.reshape(1))

    @ssim_grad.register_fake
    def _(a, b, d_mu1, d_s11, d_s12, grad, padding, version):
        return torch.empty_like(a)

    def setup_context(ctx, inputs, output):
        a, b, ctx.padding, ctx.version = inputs
        ctx.save_for_backward(a, b, *output[1:])

    def grad_of_a(ctx, grad_mean, *unused):  # the derivative maps are not differentiable outputs
        a, b, *derivs = ctx.saved_tensors
        return ssim_grad(a, b, *derivs, grad_mean, ctx.padding, ctx.version), None, None, None

    ssim_train.register_autograd(grad_of_a, setup_context=setup_context)
    return ssim_train


def _compiled_path(img1, img2, padding: str, version: str):
    """The mean through ``_operators``: the image that requires grad first; where both do, img2's gradient
    from the swapped call, whose value adds nothing (SSIM is symmetric in its two images)."""
    train = _operators()
    first, second = (img1, img2) if img1.requires_grad else (img2, img1)
    mean = train(first, second.detach(), padding, version)[0]
    if img1.requires_grad and img2.requires_grad:
        swapped = train(img2, img1.detach(), padding, version)[0]
        mean = mean + (swapped - swapped.detach())
    return mean


def fused_ssim(img1, img2, padding: str = "same", train: bool = True, version: str = MEAN):
    """Mean SSIM of two (N, C, H, W) float32 tensors on the current CUDA device, differentiable (when ``train``) in
    each image that requires grad, by ``version``'s kernels (one of VERSIONS). A tensor that is not
    contiguous (channels-last, a slice) is copied to a contiguous one first (its gradient comes back in its own
    layout). fp16 and bf16 tensors are refused, not converted: the caller decides where float32 copies live."""
    if version not in VERSIONS:
        raise ValueError(f"version: expected one of {VERSIONS}, got {version!r}")
    torch = _torch()
    if padding not in PADDINGS:
        raise ValueError(f"padding: expected one of {PADDINGS}, got {padding!r}")
    for name, t in (("img1", img1), ("img2", img2)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a float32 CUDA tensor, got {type(t).__name__}")
        if not t.is_cuda or t.dtype != torch.float32:
            half = t.dtype in (torch.float16, torch.bfloat16)
            hint = " (the kernels read float32: pass img.float())" if half else ""
            raise TypeError(f"{name}: expected a float32 CUDA tensor, got {t.dtype} on {t.device}{hint}")
    here = torch.cuda.current_device()
    if img1.device.index != here or img2.device.index != here:
        raise ValueError(
            f"img1 and img2 must be on the current CUDA device (cuda:{here}), got {img1.device} and {img2.device}; "
            "select theirs with torch.cuda.device(...)"
        )
    common.check_shapes(tuple(img1.shape), tuple(img2.shape))
    img1, img2 = img1.contiguous(), img2.contiguous()
    if train and (img1.requires_grad or img2.requires_grad) and torch.is_grad_enabled():
        if torch.compiler.is_compiling():
            return _compiled_path(img1, img2, padding, version)
        return _function().apply(img1, img2, padding, version)
    sums = _sums(version, img1.detach(), img2.detach(), padding == "valid")
    return _mean(sums, _plan(version, tuple(img1.shape), padding)[2])


def capture(fn, warmup: int = 2):
    """``fn`` (a training step on the current device, as a loop runs it) captured in one CUDA graph, after
    ``warmup`` calls on a side stream, as capture requires: (the graph, what ``fn`` returned while captured).
    A replay reruns every launch of the step without the host's per-operation cost."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def _pixels(shape, padding: str) -> int:
    """How many map values the mean counts: all of them, or those of the valid map."""
    n, c, h, w = shape
    r = common.RADIUS
    return n * c * ((h - 2 * r) * (w - 2 * r) if padding == "valid" else h * w)
