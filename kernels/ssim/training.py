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
hidden as long as the host queues calls faster than the GPU runs them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
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


def _worker(name: str, shape: tuple, repeat: int) -> dict:
    """Time and check one candidate in this process: {metric: value}."""
    import torch

    if name == "ours":
        import cupy

        from kernels.ssim.torch_ssim import MEAN, capture, fused_ssim

        def ssim_map(x, y):
            return torch.from_dlpack(
                common.run(MEAN, cupy.from_dlpack(x.detach()), cupy.from_dlpack(y), check_range=False)
            )
    else:
        import fused_ssim as peer
        from fused_ssim import fused_ssim

        def ssim_map(x, y):
            return peer.FusedSSIMMap.apply(common.C1, common.C2, x.contiguous(), y, "same", False)

    a, b = common.test_images(shape, kind="structured", seed=7)
    img1 = torch.as_tensor(a, device="cuda").requires_grad_(True)
    img2 = torch.as_tensor(b, device="cuda")

    def infer(fn):
        with torch.no_grad():
            fn(img1, img2)

    def ssim_mean(x, y):
        return fused_ssim(x, y, train=False)

    def step():
        img1.grad = None
        (1 - fused_ssim(img1, img2)).backward()

    found = {
        "inference map": timing.benchmark(lambda: infer(ssim_map), repeat=repeat).median_ms,
        "inference mean": timing.benchmark(lambda: infer(ssim_mean), repeat=repeat).median_ms,
        "training forward": timing.benchmark(lambda: fused_ssim(img1, img2), repeat=repeat).median_ms,
        "training step": timing.benchmark(step, repeat=repeat).median_ms,
        "training step, host loop": timing.per_call(step, repeat=repeat).median_ms,
    }
    if name == "ours":  # the peers' steps are not known to be capturable
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


def _candidate(name: str, folder: str | None, shape: tuple, repeat: int) -> dict | None:
    """One candidate in a fresh process (``folder`` first on its import path); None, with a line, if it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, str(ROOT), env.get("PYTHONPATH")) if p)
    # The child runs in this process's mode, whatever the environment says: building the results page
    # sets BOOK_MODE=sim, and a simulated run leaves NUMBA_ENABLE_CUDASIM=1 behind.
    if device.MODE in (device.GPU, device.SIM):
        env["BOOK_MODE"] = device.MODE
    if device.MODE == device.GPU:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    shape_arg = ",".join(map(str, shape))
    args = [sys.executable, "-m", "kernels.ssim.training", name, shape_arg, str(repeat)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{name}: not measured ({why})")
        return None
    return json.loads(lines[-1])


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


def peer_rows(shape, peers: dict[str, str], repeat: int = 50) -> list[dict]:
    """Ours and each peer, per call, in processes of their own: rows of PEER_METRICS."""
    problem = "x".join(map(str, shape))
    rows = []
    for name, folder in {"ours": None, **peers}.items():
        found = _candidate(name, folder, tuple(shape), repeat)
        for metric, value in (found or {}).items():
            rows.append(
                {"kernel": name, "problem": problem, "metric": metric, "value": value, "unit": PEER_METRICS[metric]}
            )
    return rows


def by_candidate(rows: list[dict], shape) -> dict[str, dict[str, float]]:
    """{kernel: {metric: value}} of the rows (measured or stored, such as peer_rows gives) at ``shape``."""
    problem = "x".join(map(str, shape))
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


# A worker: python -m kernels.ssim.training NAME N,C,H,W REPEAT times and checks candidate NAME (_worker);
# NAME "steps" launches each version of step.cu once instead (step_ncu_rows profiles it; REPEAT unused).
if __name__ == "__main__":
    name, shape, repeat = sys.argv[1], tuple(int(v) for v in sys.argv[2].split(",")), int(sys.argv[3])
    if name == "steps":  # for step_ncu_rows
        _launch_steps(shape)
    else:
        print(json.dumps(_worker(name, shape, repeat)))
