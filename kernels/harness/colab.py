"""A chapter's first lines on Colab or on your own machine: install what is missing, then pick the mode.

    from kernels.harness import colab; colab.setup()

Colab has most of the scientific stack but not numba-cuda; an old or a too-new NumPy is possible
too. ``setup`` installs, with pip, the pinned version (from requirements.txt, the one list of pins)
of every package the chapters import and this runtime lacks, then lets the harness pick the GPU
or, on a CPU runtime, the CUDA simulator. On a machine set up with ``make`` it installs nothing.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from . import device

ROOT = Path(__file__).resolve().parents[2]
# import name -> the requirement's name in requirements.txt (its pin, with extras, comes from there)
NEEDED = {"numba_cuda": "numba-cuda", "cupy": "cupy-cuda12x", "cuda.bindings": "cuda-bindings",
          "skimage": "scikit-image", "matplotlib": "matplotlib"}
NUMPY_BELOW = (2, 5)  # numba-cuda 0.30 fails to import on NumPy 2.5


def on_colab() -> bool:
    return "google.colab" in sys.modules


def pins(path: Path = ROOT / "requirements.txt") -> dict:
    """{requirement name: pinned requirement} from requirements.txt, e.g. 'numba-cuda': 'numba-cuda[cu12]==0.30.4'."""
    out = {}
    for line in path.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            out[re.split(r"[\[=<>!~ ]", spec, maxsplit=1)[0].lower()] = spec
    return out


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return False


def missing(needed: dict | None = None) -> list[str]:
    """The pinned requirements this runtime lacks, NumPy included when its version is 2.5 or newer."""
    pinned = pins()
    todo = [pinned[name] for module, name in (needed or NEEDED).items() if not _installed(module)]
    import numpy
    if tuple(int(v) for v in numpy.__version__.split(".")[:2]) >= NUMPY_BELOW:
        todo.append(pinned["numpy"])
    return todo


def setup(install: bool = True) -> str:
    """Install what is missing (``install=False`` only reports it), then pick the mode; returns it.

    Prints one line saying where this runs, what was installed and which mode the harness picked."""
    where = "Colab" if on_colab() else "a local checkout"
    todo = missing()
    if todo and install:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *todo])
        importlib.invalidate_caches()
        if device.MODE == device.NONE:  # the simulator's package was missing when the harness chose
            importlib.reload(device)
    if not todo:
        done = "nothing to install"
    elif install:
        done = "installed " + ", ".join(todo)
    else:
        done = "missing " + ", ".join(todo) + f" (install: {sys.executable} -m pip install {' '.join(todo)})"
    if install and any(t.startswith("numpy") for t in todo):  # this process imported NumPy to check it
        done += "; NumPy was already loaded: restart the runtime and run this cell again"
    print(f"Set-up: {where}; {done}; mode {device.MODE}.")
    return device.MODE
