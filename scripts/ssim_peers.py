"""SSIM for training, against the fastest peers: each candidate in a process of its own, timed the same way.

    python scripts/ssim_peers.py                                   # ours only
    python scripts/ssim_peers.py --peer fused-ssim=/path/to/build --peer optimized-fused-ssim=/path/to/build

A peer is a folder holding an importable ``fused_ssim`` package built from that project's source
(rahul-goel/fused-ssim, MrNeRF/optimized-fused-ssim: both name their package fused_ssim, hence one
process each): ``TORCH_CUDA_ARCH_LIST=9.0 CUDA_ARCHITECTURES=90 python setup.py build_ext --inplace``.
A peer that cannot be imported gets one line saying so.

Every candidate is called as ``fused_ssim(img1, img2, padding="same", train=...)`` (ours:
kernels/ssim/torch_ssim.py) on float32 CUDA tensors, and timed per call: CUDA events around the Python
call, which includes its launch overhead, as a training loop pays it; median of ``--repeat`` after a
warm-up. Rows (ms, and the errors against the float64 reference on the same images) go to
data/results/<gpu>/ssim_training.csv.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "ssim_training"
METRICS = {  # name: unit
    "inference mean": "ms",
    "training forward": "ms",
    "training step": "ms",
    "mean error": "abs",
    "gradient error": "rel",
}


def worker(name: str, shape: tuple, repeat: int) -> dict:
    """Time and check one candidate in this process; returns {metric: value}."""
    import torch

    from kernels.harness import timing
    from kernels.ssim import common

    if name == "ours":
        from kernels.ssim.torch_ssim import fused_ssim
    else:
        from fused_ssim import fused_ssim
    a, b = common.test_images(shape, kind="structured", seed=7)
    img1 = torch.as_tensor(a, device="cuda").requires_grad_(True)
    img2 = torch.as_tensor(b, device="cuda")

    def infer():
        with torch.no_grad():
            fused_ssim(img1, img2, train=False)

    def forward():
        fused_ssim(img1, img2)

    def step():
        img1.grad = None
        (1 - fused_ssim(img1, img2)).backward()

    found = {
        "inference mean": timing.benchmark(infer, repeat=repeat).median_ms,
        "training forward": timing.benchmark(forward, repeat=repeat).median_ms,
        "training step": timing.benchmark(step, repeat=repeat).median_ms,
    }
    img1.grad = None
    mean = fused_ssim(img1, img2)
    (1 - mean).backward()
    grad = img1.grad.double().cpu().numpy()
    ref_map = common.reference(a, b)
    ref_grad = common.reference_backward(a, b, np.full(shape, -1.0 / ref_map.size))
    found["mean error"] = abs(float(mean) - float(ref_map.mean()))
    found["gradient error"] = float(np.abs(grad - ref_grad).max() / np.abs(ref_grad).max())
    return found


def run_candidate(name: str, path: str | None, shape: tuple, repeat: int) -> dict | None:
    """One candidate in a fresh process (``path`` first on its import path); None, with a line, if it fails."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, str(ROOT), env.get("PYTHONPATH")) if p)
    args = [sys.executable, __file__, "--worker", name, "--shape", ",".join(map(str, shape)), "--repeat", str(repeat)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{name}: not measured ({why})")
        return None
    return json.loads(lines[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="1,3,2160,3840", help="N,C,H,W (default: the worklog's 4K image)")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--peer", action="append", default=[], metavar="NAME=DIR", help="a peer's built package folder")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        shape = tuple(int(v) for v in args.shape.split(","))
    except ValueError:
        p.error(f"--shape: expected four integers N,C,H,W, got {args.shape!r}")
    if len(shape) != 4 or min(shape) < 1:
        p.error(f"--shape: expected four positive integers N,C,H,W, got {args.shape!r}")
    if args.repeat < 1:
        p.error(f"--repeat: expected a positive integer, got {args.repeat}")
    if args.worker:
        print(json.dumps(worker(args.worker, shape, args.repeat)))
        return 0
    peers = {}
    for item in args.peer:
        name, sep, folder = item.partition("=")
        if not sep or not name or not Path(folder).is_dir():
            p.error(f"--peer: expected NAME=DIR with an existing folder, got {item!r}")
        peers[name] = folder
    from kernels.harness import device, results

    found = {name: run_candidate(name, path, shape, args.repeat) for name, path in {"ours": None, **peers}.items()}
    found = {k: v for k, v in found.items() if v}
    problem = "x".join(map(str, shape))
    rows = [
        {"kernel": name, "problem": problem, "metric": metric, "value": value, "unit": METRICS[metric]}
        for name, values in found.items()
        for metric, value in values.items()
    ]
    print(f"{'candidate':<24}" + "".join(f"{m:>18}" for m in METRICS))
    for name, values in found.items():
        print(f"{name:<24}" + "".join(f"{values[m]:>18.4g}" for m in METRICS))
    if rows and device.on_gpu():
        print("recorded in", results.record(CHAPTER, rows))
    return 0 if "ours" in found else 1


if __name__ == "__main__":
    sys.exit(main())
