"""The PyTorch training API (kernels/ssim/torch_ssim.py): a clear line without PyTorch; on a GPU the mean
and dL/dimg1, dL/dimg2 or both against float64 at odd sizes, batch > 1 and one channel, both paddings.
(The training deep dive sets the fastest peers' errors beside ours, against the same float64 reference.)"""

import sys

import numpy as np
import pytest

from kernels.harness import device
from kernels.ssim import common, torch_ssim


def test_without_pytorch_one_line_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` meets where PyTorch is absent
    with pytest.raises(ImportError, match="torch_ssim needs PyTorch; the rest of the book runs without it"):
        torch_ssim.fused_ssim(None, None)


def test_version_is_v13_or_v15():
    with pytest.raises(ValueError, match=r"version: expected one of \('V13', 'V15'\), got 'V14'"):
        torch_ssim.fused_ssim(None, None, version="V14")


needs_gpu = pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")


def tensors(shape, seed):
    torch = pytest.importorskip("torch")
    a, b = common.test_images(shape, kind="structured", seed=seed)
    return a, b, torch.as_tensor(a, device="cuda").requires_grad_(True), torch.as_tensor(b, device="cuda")


@pytest.mark.parametrize("version", torch_ssim.VERSIONS)
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("shape", [(1, 1, 11, 13), (2, 3, 37, 53), (1, 3, 70, 132)])
@pytest.mark.gpu
@needs_gpu
def test_mean_and_gradient_match_float64(shape, padding, version, rng):
    seed = int(rng.integers(2**31))
    a, b, img1, img2 = tensors(shape, seed)
    mean = torch_ssim.fused_ssim(img1, img2, padding=padding, version=version)
    (1 - mean).backward()
    ref_map = common.reference(a, b)
    g = np.zeros(shape)
    if padding == "valid":
        r = common.RADIUS
        g[..., r:-r, r:-r] = -1.0 / common.crop_valid(ref_map).size
        want = common.crop_valid(ref_map).mean()
    else:
        g[...] = -1.0 / ref_map.size
        want = ref_map.mean()
    ref_grad = common.reference_backward(a, b, g)
    assert abs(float(mean.detach()) - want) <= common.MEAN_ATOL, f"seed {seed}"
    got = img1.grad.double().cpu().numpy()
    assert np.abs(got - ref_grad).max() <= 1e-4 * np.abs(ref_grad).max(), f"seed {seed}"
    with_no_grad = torch_ssim.fused_ssim(img1.detach(), img2, padding=padding, train=False, version=version)
    assert abs(float(with_no_grad) - want) <= common.MEAN_ATOL, f"seed {seed}"


@pytest.mark.gpu
@needs_gpu
def test_bad_input_names_the_constraint():
    _, _, img1, img2 = tensors((1, 1, 11, 11), 1)
    with pytest.raises(ValueError, match="padding: expected one of"):
        torch_ssim.fused_ssim(img1, img2, padding="reflect")
    with pytest.raises(TypeError, match="img2: expected a float32 CUDA tensor"):
        torch_ssim.fused_ssim(img1, img2.cpu())
    with pytest.raises(TypeError, match="img1: expected a float32 CUDA tensor"):
        torch_ssim.fused_ssim(img1.double(), img2)
    with pytest.raises(TypeError, match="img2: expected a float32 CUDA tensor"):
        torch_ssim.fused_ssim(img1, img2.half().requires_grad_(True))


@pytest.mark.gpu
@needs_gpu
def test_half_precision_cpu_and_foreign_arrays_are_refused_by_name():
    """fp16 and bf16 get an error that says how to convert (nothing is converted silently); a CPU tensor's
    error names its device, and an array that is not a tensor its type."""
    torch = pytest.importorskip("torch")
    a, _, img1, img2 = tensors((1, 1, 11, 11), 1)
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(
            TypeError, match=rf"img1: expected a float32 CUDA tensor, got {dtype} on cuda:\d.*img\.float\(\)"
        ):
            torch_ssim.fused_ssim(img1.detach().to(dtype), img2)
    with pytest.raises(TypeError, match=r"img2: expected a float32 CUDA tensor, got torch\.float32 on cpu"):
        torch_ssim.fused_ssim(img1, img2.cpu())
    with pytest.raises(TypeError, match="img1: expected a float32 CUDA tensor, got ndarray"):
        torch_ssim.fused_ssim(a, img2)


@pytest.mark.gpu
@needs_gpu
def test_tensors_off_the_current_device_are_refused_by_name(monkeypatch):
    """Tensors on another GPU than the current one (as one of two GPUs would be) get an error naming the
    devices: the kernels launch on the current device. A second GPU is played by the current device's index."""
    torch = pytest.importorskip("torch")
    _, _, img1, img2 = tensors((1, 1, 11, 11), 1)
    other = img1.device.index + 1
    monkeypatch.setattr(torch.cuda, "current_device", lambda: other)
    with pytest.raises(
        ValueError, match=rf"must be on the current CUDA device \(cuda:{other}\), got cuda:\d and cuda:\d"
    ):
        torch_ssim.fused_ssim(img1, img2)


def _layouts(torch, x):
    """x's values in other layouts: (name, the tensor passed, the leaf that gets the gradient, a function from
    the leaf's gradient to x's layout)."""
    last = x.to(memory_format=torch.channels_last).requires_grad_(True)
    yield "channels_last", last, last, lambda g: g
    w = x.shape[3]
    wide = torch.zeros((*x.shape[:3], w + 7), device=x.device)
    wide[..., 3 : 3 + w] = x
    wide.requires_grad_(True)
    yield "slice", wide[..., 3 : 3 + w], wide, lambda g: g[..., 3 : 3 + w]
    flipped = x.transpose(2, 3).contiguous().requires_grad_(True)
    yield "transposed view", flipped.transpose(2, 3), flipped, lambda g: g.transpose(2, 3)


@pytest.mark.gpu
@needs_gpu
def test_channels_last_and_non_contiguous_tensors_give_the_contiguous_result(rng):
    """The same values in another memory layout give the same mean and the same gradient, each image's
    gradient in its own layout."""
    torch = pytest.importorskip("torch")
    seed = int(rng.integers(2**31))
    a, b = common.test_images((2, 3, 37, 53), kind="structured", seed=seed)
    x, y = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
    ref = x.clone().requires_grad_(True)
    want = torch_ssim.fused_ssim(ref, y)
    (1 - want).backward()
    for name, view, leaf, back in _layouts(torch, x):
        assert not view.is_contiguous(), name
        got = torch_ssim.fused_ssim(view, y)
        (1 - got).backward()
        assert abs(float(got) - float(want)) <= 1e-7, f"{name} seed {seed}"  # float64 atomics: order may vary
        grad = back(leaf.grad)
        assert grad.shape == ref.grad.shape, name
        assert float((grad - ref.grad).abs().max()) <= 1e-7 * float(ref.grad.abs().max()), f"{name} seed {seed}"


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("wanted", [("img2",), ("img1", "img2")])
@pytest.mark.parametrize("shape", [(1, 1, 11, 13), (2, 1, 37, 53), (2, 3, 70, 131)])
@pytest.mark.gpu
@needs_gpu
def test_img2_gradient_matches_float64(shape, wanted, padding, rng):
    """dL/dimg2 (the img1-gradient of the swapped call), alone or beside dL/dimg1; only the images that
    require grad get one."""
    torch = pytest.importorskip("torch")
    seed = int(rng.integers(2**31))
    a, b = common.test_images(shape, kind="structured", seed=seed)
    img1, img2 = (torch.as_tensor(x, device="cuda").requires_grad_(f"img{k}" in wanted) for k, x in ((1, a), (2, b)))
    mean = torch_ssim.fused_ssim(img1, img2, padding=padding)
    (1 - mean).backward()
    g = np.zeros(shape)
    r = common.RADIUS
    if padding == "valid":
        g[..., r:-r, r:-r] = -1.0 / ((shape[-2] - 2 * r) * (shape[-1] - 2 * r) * shape[0] * shape[1])
    else:
        g[...] = -1.0 / np.prod(shape)
    for name, t in (("img1", img1), ("img2", img2)):
        if name not in wanted:
            assert t.grad is None, name
            continue
        want = common.reference_backward(a, b, g, wrt=name)
        got = t.grad.double().cpu().numpy()
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), f"{name} seed {seed}"


def test_shape_rules_name_the_constraint():
    """The wrapper checks tensors' shapes with the rules every SSIM launch uses (common.check_shapes)."""
    with pytest.raises(ValueError, match=r"img2: expected 4 dimensions \(N, C, H, W\), got shape \(11, 11\)"):
        common.check_shapes((1, 1, 11, 11), (11, 11))
    with pytest.raises(ValueError, match="img1 and img2 must have the same shape"):
        common.check_shapes((1, 1, 11, 11), (1, 1, 11, 12))
    with pytest.raises(ValueError, match="images must be at least 11x11"):
        common.check_shapes((1, 1, 10, 11), (1, 1, 10, 11))
    with pytest.raises(ValueError, match=r"at least one plane \(N\*C >= 1\)"):
        common.check_shapes((0, 3, 11, 11), (0, 3, 11, 11))
    assert common.check_shapes((2, 3, 11, 12), (2, 3, 11, 12)) == (2, 3, 11, 12)


@pytest.mark.gpu
@needs_gpu
def test_bad_tensor_shapes_name_the_constraint():
    torch = pytest.importorskip("torch")
    x = torch.zeros((1, 1, 11, 11), device="cuda", requires_grad=True)
    with pytest.raises(ValueError, match="img1 and img2 must have the same shape"):
        torch_ssim.fused_ssim(x, torch.zeros((1, 1, 11, 12), device="cuda"))
    with pytest.raises(ValueError, match="images must be at least 11x11"):
        torch_ssim.fused_ssim(x[..., 1:], x[..., 1:])
    with pytest.raises(ValueError, match="expected 4 dimensions"):
        torch_ssim.fused_ssim(x[0], x[0])
    with pytest.raises(ValueError, match="at least one plane"):
        torch_ssim.fused_ssim(x[:0], x[:0])


def _step(img1, img2):
    img1.grad = None
    loss = 1 - torch_ssim.fused_ssim(img1, img2)
    loss.backward()
    return loss.detach()


@pytest.mark.gpu
@needs_gpu
def test_a_side_stream_gives_the_default_streams_values(rng):
    """The kernels queue on PyTorch's current stream: inputs made, and the step run, on a side stream
    give what the default stream gives (a launch on another stream would race with them)."""
    torch = pytest.importorskip("torch")
    seed = int(rng.integers(2**31))
    _, _, img1, img2 = tensors((2, 3, 270, 480), seed)
    want_loss, want_grad = _step(img1, img2), img1.grad.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x, y = (img1.detach() * 1.0).requires_grad_(True), img2 * 1.0
        loss = _step(x, y)
    torch.cuda.synchronize()
    assert abs(float(loss) - float(want_loss)) <= 1e-7, f"seed {seed}"  # float64 atomics: order may vary
    assert float((x.grad - want_grad).abs().max()) <= 1e-7 * float(want_grad.abs().max()), f"seed {seed}"


@pytest.mark.gpu
@needs_gpu
def test_a_cuda_graph_captures_the_training_step(rng):
    """Forward and backward in one captured graph: a replay gives the eager step's loss and gradient."""
    torch = pytest.importorskip("torch")
    seed = int(rng.integers(2**31))
    _, _, img1, img2 = tensors((1, 3, 131, 257), seed)
    want_loss, want_grad = _step(img1, img2), img1.grad.clone()
    x = img1.detach().clone().requires_grad_(True)

    def step():
        x.grad = None  # the captured backward allocates the gradient in the graph's memory
        loss = 1 - torch_ssim.fused_ssim(x, img2)
        loss.backward()
        return loss

    graph, loss = torch_ssim.capture(step)
    x.grad.fill_(float("nan"))  # poisoned: the replay must write every value
    graph.replay()
    torch.cuda.synchronize()
    assert abs(float(loss.detach()) - float(want_loss)) <= 1e-7, f"seed {seed}"  # float64 atomics: order may vary
    assert float((x.grad - want_grad).abs().max()) <= 1e-7 * float(want_grad.abs().max()), f"seed {seed}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    ("padding", "wanted"), [("same", (True, True)), ("valid", (False, True))], ids=["same-both", "valid-img2"]
)
def test_torch_compile_keeps_the_operators_in_one_graph(rng, padding, wanted):
    """The loss compiled with fullgraph=True (a graph break would raise) gives the eager loss, and its
    backward the gradient of every image that requires one."""
    torch = pytest.importorskip("torch")
    seed = int(rng.integers(2**31))
    _, _, a, b = tensors((2, 3, 67, 129), seed)
    a, b = a.detach(), b.detach()

    def loss_of(x, y):
        return 1 - torch_ssim.fused_ssim(x, y, padding=padding)

    results = []
    for fn in (loss_of, torch.compile(loss_of, fullgraph=True)):
        x, y = (t.clone().requires_grad_(need) for t, need in zip((a, b), wanted, strict=True))
        loss = fn(x, y)
        loss.backward()
        results.append((loss.detach(), x.grad, y.grad))
    (want, *want_grads), (got, *got_grads) = results
    assert abs(float(got) - float(want)) <= 1e-7, f"seed {seed}"
    for need, w, g in zip(wanted, want_grads, got_grads, strict=True):
        assert (g is not None) == need, f"seed {seed}"
        if need:
            assert float((g - w).abs().max()) <= 1e-7 * float(w.abs().max()), f"seed {seed}"
