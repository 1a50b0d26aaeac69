"""The training step's measurement: its byte count, the peers' configuration and the script's bad input;
on a GPU, every kernel of the step timed."""

import re
import subprocess
import sys

import numpy as np
import pytest

from kernels.harness import device
from kernels.ssim import training

ROOT = training.ROOT


def test_the_step_moves_five_planes_forward_and_six_backward():
    plane = 4 * 2 * 3 * 5 * 7
    assert training.step_bytes((2, 3, 5, 7)) == {"forward": 5 * plane, "backward": 6 * plane}
    with pytest.raises(ValueError, match=r"shape\[2\]"):
        training.step_bytes((1, 1, 0, 4))


def test_peers_are_named_with_existing_folders(tmp_path):
    assert training.peers_from_env("") == {}
    assert training.peers_from_env(f"a={tmp_path}, b={tmp_path}") == {"a": str(tmp_path), "b": str(tmp_path)}
    for bad in ("a", f"={tmp_path}", "a=/no/such/folder"):
        with pytest.raises(ValueError, match="SSIM_PEERS: expected name=folder"):
            training.peers_from_env(bad)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--shape", "1,3,x,4"], "--shape: expected four integers"),
        (["--shape", "1,3,4"], "--shape: expected four positive integers"),
        (["--repeat", "0"], "--repeat: expected a positive integer"),
        (["--peer", "fused-ssim"], "--peer: expected name=folder"),
    ],
)
def test_script_names_the_bad_argument(args, words):
    done = subprocess.run(
        [sys.executable, "scripts/ssim_peers.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and words in done.stderr, done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")
def test_every_kernel_of_the_step_is_timed():
    rows = training.kernel_rows((1, 3, 64, 128), repeat=3)
    assert [r["kernel"] for r in rows] == [
        "V11 training",
        "V13 mean",
        "V13 training mean",
        "Numba backward",
        "B1 backward",
    ]
    assert all(np.isfinite(r["value"]) and r["value"] > 0 for r in rows)


def test_peers_are_pinned_and_built_for_this_gpu():
    from build_ssim_peers import PEERS, for_this_gpu

    assert all(re.fullmatch(r"[\w-]+/[\w-]+", repo) and re.fullmatch(r"[0-9a-f]{40}", c) for repo, c in PEERS.values())
    flags = '"nvcc": ["-O3", "--use_fast_math", "-arch=sm_89"]'
    assert for_this_gpu(flags, "90") == flags.replace("sm_89", "sm_90")
    assert for_this_gpu("no flags", "90") == "no flags"
