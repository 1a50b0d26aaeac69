"""The SSIM training step (loss = 1 - mean SSIM, gradient for img1), measured: its DRAM floor, our kernels
alone, and our PyTorch API per call beside the fastest peers, each candidate in a process of its own.

A peer is a folder holding an importable ``fused_ssim`` package built from that project's source
(rahul-goel/fused-ssim, MrNeRF/optimized-fused-ssim: both name their package fused_ssim, hence one
process each), e.g. ``TORCH_CUDA_ARCH_LIST=9.0 CUDA_ARCHITECTURES=90 python setup.py build_ext --inplace``.
``SSIM_PEERS=name=folder,name=folder`` names them to the notebook; scripts/ssim_peers.py takes them
as arguments. A peer that cannot be imported gets one line saying so.

Every candidate is called as ``fused_ssim(img1, img2, padding="same", train=...)`` (ours:
torch_ssim.py) on float32 CUDA tensors, and for the map the call under it: the peer's
``FusedSSIMMap.apply`` (what its ``fused_ssim`` averages), ours ``common.run`` of the API's version
through DLPack. Each is timed per call: CUDA events around the Python call, the median after
a warm-up, with the GPU held while the calls are queued (timing.benchmark), so a time is the GPU time
of everything the call launches, its small PyTorch operations included; the host's launch cost is
hidden as long as the host queues calls faster than the GPU runs them. ``user_rows`` also times the step
as a loop pays for it (timing.per_call, the host's clock), runs an Adam loop with each candidate, and scores
ours on natural images (accuracy.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from kernels.harness import check, device, perfmodel, timing

from . import backward, common

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "ssim_training"
PEERS = {  # name (SSIM_PEERS, the rows' kernel): the project it is built from (scripts/build_ssim_peers.py)
    "fused-ssim": "rahul-goel/fused-ssim",
    "optimized-fused-ssim": "MrNeRF/optimized-fused-ssim",
}
PEER_METRICS = {  # name: unit
    "inference map": "ms",
    "inference mean": "ms",
    "training forward": "ms",
    "training step": "ms",
    "training step, host loop": "ms",  # timing.per_call: the host's launch cost included
    "training step, CUDA graph": "ms",  # ours only: the step captured once, replays timed like the host loop
    "mean error": "abs",
    "gradient error": "rel",
}
# The comparison a user reads (user_rows): a training step at each shape, the host's cost alone at a tiny
# image, and a real Adam loop.
# 4K, 1080p, a quarter-resolution Mip-NeRF 360 frame, a batch of four 512 x 512 crops.
USER_SHAPES = (common.BENCH_SHAPE, (1, 3, 1080, 1920), (1, 3, 822, 1237), (4, 3, 512, 512))
HOST_SHAPE = (1, 3, 32, 32)  # the GPU's work is negligible: the time is the host's
# The targets the page states: the faster peer's host-loop step over ours, at least (1: never slower).
LOOP_TARGETS = {"1x3x2160x3840": 2.5, "1x3x1080x1920": 1.8, "1x3x822x1237": 1.0, "4x3x512x512": 1.2}
ADAM_SHAPE, ADAM_STEPS, ADAM_LR, ADAM_EVERY = (1, 3, 1080, 1920), 300, 0.01, 10
ADAM_LOSS_ATOL = 1e-5  # the final losses must agree within it
REPEAT = 20  # steps per batch of the host loop (5 batches), and GPU-held steps


def step_bytes(shape) -> dict:
    """DRAM bytes of one training step with stored derivative maps: the forward reads both images and
    writes the three maps; the backward reads the three maps and both images and writes the gradient."""
    plane = 4 * math.prod(check.positive_int(v, f"shape[{i}]") for i, v in enumerate(shape))
    return {"forward": 5 * plane, "backward": 6 * plane}


def fused_step_bytes(shape) -> int:
    """DRAM bytes of the step in one kernel (F1, F2): both images read, the gradient written, no map stored."""
    return 3 * step_bytes(shape)["forward"] // 5


def _step_arrays(shape, seed: int) -> tuple:
    """On the GPU, for timing a step at ``shape``: the two images (structured, ``seed``), three derivative
    maps and an output, the planes' float64 sums and dL/dmap of the mean loss as a device number."""
    import cupy

    a, b = (cupy.asarray(x) for x in common.test_images(shape, kind="structured", seed=seed))
    derivs = tuple(cupy.empty_like(a) for _ in common.DERIV_NAMES)
    sums = cupy.zeros(a.shape[0] * a.shape[1], dtype=np.float64)
    return a, b, derivs, cupy.empty_like(a), sums, cupy.full(1, -1.0 / a.size, dtype=np.float32)


def kernel_rows(shape, repeat: int = 50) -> list[dict]:
    """The step's kernels alone (GPU held, CUDA events around each launch): ms per launch."""
    import cupy

    a, b, derivs, out, sums, g = _step_arrays(shape, seed=1)
    grad = cupy.full(a.shape, -1.0 / a.size, dtype=np.float32)
    module = common.version_module("V13")
    launches = {
        "V11 training": lambda: common.run("V11", a, b, training=True, out=out, derivs=derivs, check_range=False),
        "V13 mean": lambda: module.launch_mean("V13", a, b, sums, False),
        "V13 training mean": lambda: module.launch_mean("V13", a, b, sums, False, derivs),
        "Numba backward": lambda: backward.run(a, b, grad, *derivs, out=out),
        "B1 backward": lambda: backward.run_constant(a, b, *derivs, g, out=out),
        "F1 step": lambda: backward.step(a, b, g, out=out, sums=sums, version="F1"),
        "F2 step": lambda: backward.step(a, b, g, out=out, sums=sums, version="F2"),
    }
    problem = "x".join(map(str, shape))
    return [
        {
            "kernel": name,
            "problem": problem,
            "metric": "ms",
            "value": timing.benchmark(fn, repeat=repeat).median_ms,
            "unit": "ms",
        }
        for name, fn in launches.items()
    ]


SIDE_BY_SIDE = ("pair: forward", "pair: backward", "pair: one stream", "pair: two streams")


def side_by_side_rows(shape, repeat: int = 50) -> list[dict]:
    """The step's two kernels on two independent problems of ``shape``: V13's training mean on one, B1 on
    the other, each alone, one after the other, and side by side on two streams (ms per launch or pair,
    CUDA events around it, the GPU held), rows named as in SIDE_BY_SIDE."""
    if device.MODE != device.GPU:
        raise RuntimeError("side_by_side_rows: timing needs a GPU")
    import cupy

    a, b, d, _, sums, g = _step_arrays(shape, seed=1)
    a2, b2, d2, out2, _, _ = _step_arrays(shape, seed=2)
    module = common.version_module("V13")
    module.launch_mean("V13", a2, b2, sums, False, d2)  # the backward's maps: a real forward's

    def forward():
        module.launch_mean("V13", a, b, sums, False, d)

    def backward_():
        backward.run_constant(a2, b2, *d2, g, out=out2)

    # Streams that wait for the default stream and that it waits for (not non-blocking): the events
    # timing.benchmark records on the default stream then bracket the work of both.
    streams = [cupy.cuda.Stream(non_blocking=False) for _ in range(2)]

    def one_stream():
        forward()
        backward_()

    def two_streams():
        for stream, launch in zip(streams, (forward, backward_), strict=True):
            with stream:
                launch()

    launches = dict(zip(SIDE_BY_SIDE, (forward, backward_, one_stream, two_streams), strict=True))
    problem_name = "x".join(map(str, shape))
    return [
        {
            "kernel": name,
            "problem": problem_name,
            "metric": "ms",
            "unit": "ms",
            "value": timing.benchmark(fn, repeat=repeat).median_ms,
        }
        for name, fn in launches.items()
    ]


def _api(name: str):
    """(fused_ssim, ssim_map, capture or None) of candidate ``name`` in this process: ours (torch_ssim.py),
    or the peer whose ``fused_ssim`` package comes first on the import path."""
    import torch

    if name == "ours":
        import cupy

        from kernels.ssim.torch_ssim import MEAN, capture, fused_ssim

        def ssim_map(x, y):
            return torch.from_dlpack(
                common.run(MEAN, cupy.from_dlpack(x.detach()), cupy.from_dlpack(y), check_range=False)
            )

        return fused_ssim, ssim_map, capture
    import fused_ssim as peer

    def peer_map(x, y):
        return peer.FusedSSIMMap.apply(common.C1, common.C2, x.contiguous(), y, "same", False)

    return peer.fused_ssim, peer_map, None  # the peers' steps are not known to be capturable


def _step_times(fused_ssim, shape, repeat: int) -> dict:
    """A user's training step at ``shape`` (forward ``1 - ssim``, backward for img1), timed in a host loop
    (timing.per_call: the wall clock of back-to-back steps) and with the GPU held (CUDA events, median).
    The images are random, made on the GPU (the time does not depend on them)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(7)
    img2 = torch.rand(shape, generator=gen, device="cuda")
    img1 = (img2 + 0.2 * torch.randn(shape, generator=gen, device="cuda")).clamp_(0, 1).requires_grad_(True)

    def step():
        img1.grad = None
        (1 - fused_ssim(img1, img2)).backward()

    loop = timing.per_call(step, repeat=repeat)
    held = timing.benchmark(step, repeat=repeat)
    return {
        "training step, host loop": loop.median_ms,
        "training step, host loop IQR": loop.spread,
        "training step": held.median_ms,
        "training step IQR": held.spread,
    }


def _details(fused_ssim, ssim_map, capture, shape, repeat: int) -> dict:
    """The rest of PEER_METRICS at ``shape``: inference, the training forward, ours in a CUDA graph, and the
    mean's and gradient's errors against float64."""
    import torch

    a, b = common.test_images(shape, kind="structured", seed=7)
    img1, img2 = torch.as_tensor(a, device="cuda").requires_grad_(True), torch.as_tensor(b, device="cuda")

    def infer(fn):
        with torch.no_grad():
            fn(img1, img2)

    def step():
        img1.grad = None
        (1 - fused_ssim(img1, img2)).backward()

    def held(fn):
        return timing.benchmark(fn, repeat=repeat).median_ms

    found = {
        "inference map": held(lambda: infer(ssim_map)),
        "inference mean": held(lambda: infer(lambda x, y: fused_ssim(x, y, train=False))),
        "training forward": held(lambda: fused_ssim(img1, img2)),
    }
    if capture is not None:
        graph, _ = capture(step)
        found["training step, CUDA graph"] = timing.per_call(graph.replay, repeat=repeat).median_ms
    img1.grad = None
    mean = fused_ssim(img1, img2)
    (1 - mean).backward()
    xp = device.xp()  # the float64 references on the GPU (CuPy) where there is one
    da, db = xp.asarray(a), xp.asarray(b)
    ref_map = common.reference(da, db)
    ref_grad = common.reference_backward(da, db, xp.full(shape, -1.0 / ref_map.size))
    grad = xp.asarray(img1.grad.double().cpu().numpy()) if xp is np else xp.from_dlpack(img1.grad.double())
    found["mean error"] = abs(float(mean) - float(ref_map.mean()))
    found["gradient error"] = float(abs(grad - ref_grad).max() / abs(ref_grad).max())
    return found


def _adam(fused_ssim, shape, steps: int, warmup: int = 10) -> tuple[float, list[float]]:
    """A real optimisation: Adam (lr ADAM_LR) on img1, from the same starting image towards the same target for
    every candidate, loss ``1 - ssim``. Returns the ms per step (wall clock of ``steps`` steps, one synchronize
    at the end) and the loss of each step, then the loss after the last update (steps + 1 values)."""
    import torch

    a, b = common.test_images(shape, kind="structured", seed=11)
    target, start = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")

    def run(n: int):
        x = start.clone().requires_grad_(True)
        opt = torch.optim.Adam([x], lr=ADAM_LR)
        losses = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            loss = 1 - fused_ssim(x, target)
            loss.backward()
            opt.step()
            losses.append(loss.detach())  # no copy to the host inside the loop
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3 / n
        with torch.no_grad():
            losses.append(1 - fused_ssim(x.detach(), target))
        return ms, torch.stack(losses).double().cpu().tolist()

    run(warmup)  # first calls: plans, kernel loads, the allocator's pools
    return run(steps)


def _worker(name: str, spec: dict) -> dict:
    """Time and check candidate ``name`` in this process as ``spec`` asks (see ``_spec``): {"rows": [rows
    without kernel and unit], "curve": the Adam loop's losses, or absent}."""
    fused_ssim, ssim_map, capture = _api(name)
    rows, out = [], {}

    def add(shape, found: dict):
        problem = shape if isinstance(shape, str) else "x".join(map(str, shape))
        rows.extend({"problem": problem, "metric": m, "value": float(v)} for m, v in found.items())

    for shape in map(tuple, spec["shapes"]):
        add(shape, _step_times(fused_ssim, shape, spec["repeat"]))
        if shape == tuple(spec.get("details") or ()):
            add(shape, _details(fused_ssim, ssim_map, capture, shape, spec["repeat"]))
    if spec.get("adam_steps"):
        ms, out["curve"] = _adam(fused_ssim, tuple(spec["adam_shape"]), spec["adam_steps"])
        add(tuple(spec["adam_shape"]), {"Adam ms per step": ms})
    if spec.get("accuracy") and name == "ours":
        from . import accuracy

        worst = accuracy.worst_by_class(accuracy.measure(fused_ssim, ssim_map, photos=spec.get("photos")))
        for row in worst:
            add(f"accuracy {row['class']}", {"images": row["images"], **{m: row[m] for m in accuracy.LIMITS}})
    out["rows"] = rows
    return out


def _spec(shapes, repeat: int, details=None, adam_shape=None, adam_steps: int = 0, accuracy: bool = False, photos=None):
    """What one candidate's process measures: the step at each of ``shapes`` (``repeat`` calls), the rest of
    PEER_METRICS at ``details``, an Adam loop of ``adam_steps`` at ``adam_shape``, and (ours only) the
    accuracy on natural images (``photos``: scikit-image's names, None for all)."""
    return {
        "shapes": [list(s) for s in shapes],
        "repeat": repeat,
        "details": list(details) if details else None,
        "adam_shape": list(adam_shape) if adam_shape else None,
        "adam_steps": adam_steps,
        "accuracy": accuracy,
        "photos": photos,
    }


def _candidate(name: str, folder: str | None, spec: dict) -> dict | None:
    """One candidate in a fresh process (``folder`` first on its import path); None, with a line, if it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, str(ROOT), env.get("PYTHONPATH")) if p)
    # The child runs in this process's mode, whatever the environment says: building the results page
    # sets BOOK_MODE=sim, and a simulated run leaves NUMBA_ENABLE_CUDASIM=1 behind.
    if device.MODE in (device.GPU, device.SIM):
        env["BOOK_MODE"] = device.MODE
    if device.MODE == device.GPU:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    args = [sys.executable, "-m", "kernels.ssim.training", name, json.dumps(spec)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{name}: not measured ({why})")
        return None
    return json.loads(lines[-1])


def _unit(metric: str) -> str:
    if metric in PEER_METRICS:
        return PEER_METRICS[metric]
    if metric.endswith("IQR"):
        return "rel"
    if metric.startswith("Adam loss") or metric == "images":
        return "1"
    return "abs" if metric.endswith("error") or metric.endswith("difference") else "ms"


def _measured(peers: dict[str, str], spec: dict) -> tuple[list[dict], dict]:
    """Every candidate (ours, then each peer) measured as ``spec`` asks: (rows, {name: Adam curve})."""
    rows, curves = [], {}
    for name, folder in {"ours": None, **peers}.items():
        found = _candidate(name, folder, spec) or {}
        rows += [{"kernel": name, **r, "unit": _unit(r["metric"])} for r in found.get("rows", [])]
        if "curve" in found:
            curves[name] = found["curve"]
    return rows, curves


def peer_rows(shape, peers: dict[str, str], repeat: int = 50) -> list[dict]:
    """Ours and each peer, per call, in processes of their own: rows of PEER_METRICS at ``shape``."""
    rows, _ = _measured(peers, _spec([shape], repeat, details=shape))
    return [r for r in rows if r["metric"] in PEER_METRICS]


def user_rows(peers: dict[str, str], repeat: int = REPEAT, **spec) -> list[dict]:
    """The comparison a user reads: each candidate's training step at every one of USER_SHAPES and at
    HOST_SHAPE (host loop and GPU held), the rest of PEER_METRICS at the first of USER_SHAPES, the Adam loop
    (ms per step; its loss every ADAM_EVERY steps, the first and last; each peer's largest difference from
    ours over every step), and ours' accuracy on natural images. ``spec`` overrides ``_spec``'s arguments
    (the tests' small sizes)."""
    shapes = spec.pop("shapes", (*USER_SHAPES, HOST_SHAPE))
    args = {"details": shapes[0], "adam_shape": ADAM_SHAPE, "adam_steps": ADAM_STEPS, "accuracy": True, **spec}
    rows, curves = _measured(peers, _spec(shapes, repeat, **args))
    return rows + curve_rows(curves, "x".join(map(str, args["adam_shape"])))


def curve_rows(curves: dict[str, list[float]], problem: str) -> list[dict]:
    """Rows of the Adam curves: each candidate's loss at the first and last step and every ADAM_EVERY steps,
    and each peer's largest loss difference from ours over every step (where ours ran)."""
    rows = []

    def add(name, metric, value):
        rows.append(
            {"kernel": name, "problem": problem, "metric": metric, "value": float(value), "unit": _unit(metric)}
        )

    for name, curve in curves.items():
        add(name, "Adam loss start", curve[0])
        add(name, "Adam loss end", curve[-1])
        for k in range(0, len(curve), ADAM_EVERY):
            add(name, f"Adam loss at step {k}", curve[k])
        if name != "ours" and "ours" in curves and len(curves["ours"]) == len(curve):
            add(name, "Adam max loss difference", max(abs(p - o) for p, o in zip(curve, curves["ours"], strict=True)))
    return rows


def loss_curve(found: dict[str, float]) -> tuple[list[int], list[float]]:
    """(steps, losses) of one candidate's stored Adam curve ({metric: value}, as by_candidate gives)."""
    prefix = "Adam loss at step "
    points = sorted((int(m[len(prefix) :]), v) for m, v in found.items() if m.startswith(prefix))
    return [k for k, _ in points], [v for _, v in points]


def peers_from_env(text: str | None = None) -> dict[str, str]:
    """{name: folder} from SSIM_PEERS ("name=folder,name=folder"); ValueError naming a bad entry."""
    text = os.environ.get("SSIM_PEERS", "") if text is None else text
    peers = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, folder = item.partition("=")
        if not sep or not name or not Path(folder).is_dir():
            raise ValueError(f"SSIM_PEERS: expected name=folder with an existing folder, got {item!r}")
        peers[name] = folder
    return peers


def by_candidate(rows: list[dict], shape) -> dict[str, dict[str, float]]:
    """{kernel: {metric: value}} of the rows (measured or stored, such as peer_rows gives) at ``shape`` (or of
    the problem that string names)."""
    problem = shape if isinstance(shape, str) else "x".join(map(str, shape))
    found: dict = {}
    for r in rows:
        if r["problem"] == problem:
            found.setdefault(r["kernel"], {})[r["metric"]] = float(r["value"])
    return found


def absent(found: dict) -> list[str]:
    """One line for each of PEERS with no rows among ``found`` ({kernel: ...})."""
    return [
        f"{repo} was not built on this machine (SSIM_PEERS names its build): no rows for it"
        for name, repo in PEERS.items()
        if name not in found
    ]


def ratios(ours: dict[str, float | None], peers: dict[str, dict[str, float]]) -> list[dict]:
    """Each peer's time over ours, metric by metric, where both were measured: rows of peer, metric,
    the two times and ``x ours`` (above 1: ours is faster), the closest competitor first."""
    rows = [
        {"peer": name, "metric": m, "peer ms": t, "ours ms": ours[m], "x ours": t / ours[m]}
        for name, times in peers.items()
        for m, t in times.items()
        if ours.get(m)
    ]
    return sorted(rows, key=lambda r: r["x ours"])


# What Nsight Compute reads of the one-kernel steps (step_ncu_rows): the row's metric name, ncu's metric.
STEP_NCU = {
    "warp instructions": "smsp__inst_executed.sum",
    "FFMA thread instructions": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "issue %": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "barrier stall": perfmodel.ncu_stall_metric("barrier"),
    "shared load stall": perfmodel.ncu_stall_metric("short_scoreboard"),
    "ALU/FMA latency stall": perfmodel.ncu_stall_metric("wait"),
}


def step_ncu_rows(shape) -> list[dict]:
    """Each version of step.cu (backward.STEP_VERSIONS) once on ``shape`` under Nsight Compute, as results
    rows with metric "ncu <STEP_NCU name>"; empty, with a line saying why, where ncu cannot run."""
    dims = ",".join(str(check.positive_int(v, f"shape[{i}]")) for i, v in enumerate(shape))
    text = check.ncu_csv(["-m", __name__, "steps", dims, "1"], STEP_NCU.values(), "ssim_step_f1", "the profile")
    names = [f"{version} step" for version in backward.STEP_VERSIONS]
    return [] if text is None else perfmodel.ncu_launch_rows(text, names, STEP_NCU, "x".join(map(str, shape)))


def _launch_steps(shape) -> None:
    """Each version of step.cu once on ``shape``, in STEP_VERSIONS' order (what step_ncu_rows profiles)."""
    a, b = (device.xp().asarray(x) for x in common.test_images(shape, kind="structured", seed=1))
    for version in backward.STEP_VERSIONS:
        backward.step(a, b, -1.0 / a.size, version=version)
    device.xp().cuda.Device().synchronize()


# A worker: python -m kernels.ssim.training NAME SPEC times and checks candidate NAME as the JSON SPEC asks
# (_worker, _spec); "steps N,C,H,W 1" launches each version of step.cu once instead (step_ncu_rows profiles it).
if __name__ == "__main__":
    if sys.argv[1] == "steps":  # for step_ncu_rows
        _launch_steps(tuple(int(v) for v in sys.argv[2].split(",")))
    else:
        print(json.dumps(_worker(sys.argv[1], json.loads(sys.argv[2]))))
