"""SSIM for training against the fastest peers, per call, each candidate in a process of its own
(kernels/ssim/training.py says how they are built and timed).

    python scripts/ssim_peers.py                                   # ours only
    python scripts/ssim_peers.py --peer fused-ssim=/path/to/build --peer optimized-fused-ssim=/path/to/build

The rows go to data/results/<gpu>/ssim_training.csv.
"""

from __future__ import annotations

import argparse
import sys

from kernels.harness import device, results
from kernels.ssim import training


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="1,3,2160,3840", help="N,C,H,W (default: the worklog's 4K image)")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--peer", action="append", default=[], metavar="NAME=DIR", help="a peer's built package folder")
    args = p.parse_args(argv)
    try:
        shape = tuple(int(v) for v in args.shape.split(","))
    except ValueError:
        p.error(f"--shape: expected four integers N,C,H,W, got {args.shape!r}")
    if len(shape) != 4 or min(shape) < 1:
        p.error(f"--shape: expected four positive integers N,C,H,W, got {args.shape!r}")
    if args.repeat < 1:
        p.error(f"--repeat: expected a positive integer, got {args.repeat}")
    try:
        peers = training.peers_from_env(",".join(args.peer))
    except ValueError as exc:
        p.error(str(exc).replace("SSIM_PEERS", "--peer"))
    if not device.on_gpu():
        p.error("timing needs a GPU; this run uses the CUDA simulator")
    rows = training.peer_rows(shape, peers, args.repeat)
    names = list(dict.fromkeys(r["kernel"] for r in rows))
    print(f"{'candidate':<24}" + "".join(f"{m:>18}" for m in training.PEER_METRICS))
    for name in names:
        values = {r["metric"]: r["value"] for r in rows if r["kernel"] == name}
        print(f"{name:<24}" + "".join(f"{values.get(m, float('nan')):>18.4g}" for m in training.PEER_METRICS))
    if rows:
        print("recorded in", results.record(training.CHAPTER, rows))
    return 0 if "ours" in names else 1


if __name__ == "__main__":
    sys.exit(main())
