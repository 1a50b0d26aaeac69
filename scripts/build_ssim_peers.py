"""Build the fastest SSIM peers from source, at pinned commits, for the training page's comparison.

    export SSIM_PEERS=$(python scripts/build_ssim_peers.py build/peers)   # clones, or reuses build/peers/<name>

Each peer is cloned into FOLDER/<name> at its pinned commit (or an existing copy of that commit is
used, e.g. carried to a machine without network) and built in place against the installed PyTorch
for this GPU's architecture (about a minute each). A peer that fails to build gets one line saying
why on stderr; the others still build. Standard output is what SSIM_PEERS needs (kernels/ssim/training.py).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

# name: (GitHub repository, commit). Both build a package named fused_ssim.
PEERS = {
    "fused-ssim": ("rahul-goel/fused-ssim", "0ac916a05f48f8e477dc8ce1651a346b65ce2072"),
    "optimized-fused-ssim": ("MrNeRF/optimized-fused-ssim", "085e0f36d9009ebd241e019ea762442dd1aaeca9"),
}


def fetch(name: str, folder: Path) -> Path:
    """FOLDER/<name> at the pinned commit: an existing copy, else a clone."""
    repo, commit = PEERS[name]
    target = folder / name
    if not target.exists():
        subprocess.run(["git", "clone", "-q", f"https://github.com/{repo}.git", str(target)], check=True)
        subprocess.run(["git", "-C", str(target), "checkout", "-q", commit], check=True)
    return target


def arch() -> str:
    """This GPU's compute capability as nvcc writes it (90 for an H100)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}{minor}"


def for_this_gpu(setup_py: str, cc: str) -> str:
    """optimized-fused-ssim's setup.py names one architecture (sm_89) in its nvcc flags: this GPU's instead,
    so that the module loads here."""
    return re.sub(r"-arch=sm_\d+", f"-arch=sm_{cc}", setup_py)


def build(source: Path, cc: str) -> None:
    """Build the extension in place for compute capability ``cc`` (e.g. "90")."""
    setup = source / "setup.py"
    text = setup.read_text()
    if for_this_gpu(text, cc) != text:
        setup.write_text(for_this_gpu(text, cc))
    major, minor = cc[:-1], cc[-1]
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": f"{major}.{minor}", "CUDA_ARCHITECTURES": cc}
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=source, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="where the peers' sources are (or are cloned to)")
    args = p.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    cc = arch()
    built = []
    for name in PEERS:
        try:
            source = fetch(name, args.folder)
            build(source, cc)
            built.append(f"{name}={source.resolve()}")
        except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
            print(f"{name}: not built ({exc})", file=sys.stderr)
    print(",".join(built))
    return 0 if built else 1


if __name__ == "__main__":
    sys.exit(main())
