"""A chapter's first lines on Colab or on your own machine: install what Colab lacks, then pick the mode.

    from kernels.harness import colab
    colab.setup()

Colab has most of the scientific stack but not numba-cuda; an old or a too-new NumPy is possible
too. On Colab only, ``setup`` installs into the notebook's own interpreter, with pip, the pinned
version (from requirements.txt, the one list of pins) of every package the chapters import and the
runtime lacks, their dependencies held to the same file's pins, then lets the harness pick the GPU
or, on a CPU runtime, the CUDA simulator. Anywhere else it installs nothing: it prints what is
missing and the command that would install it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from . import device

ROOT = Path(__file__).resolve().parents[2]
# import name -> the requirement's name in requirements.txt (its pin, with extras, comes from there)
NEEDED = {
    "numba_cuda": "numba-cuda",
    "cupy": "cupy-cuda12x",
    "cuda.bindings": "cuda-bindings",
    "skimage": "scikit-image",
    "matplotlib": "matplotlib",
}
NUMPY_BELOW = (2, 5)  # numba-cuda 0.30 fails to import on NumPy 2.5


def on_colab() -> bool:
    """Colab's runtime sets COLAB_RELEASE_TAG and its kernel imports google.colab before any cell runs."""
    return "COLAB_RELEASE_TAG" in os.environ or "google.colab" in sys.modules


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


def _pip_install(specs: list[str]):
    """pip install ``specs`` into this interpreter, every dependency that requirements.txt pins held to
    its pin (a constraints file: pip refuses extras there, so they are dropped)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="constraints-") as constraints:
        constraints.write("".join(re.sub(r"\[.*?\]", "", spec) + "\n" for spec in pins().values()))
        constraints.flush()
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-c", constraints.name, *specs])


def setup() -> str:
    """On Colab, install what is missing; then pick the mode and return it.

    Prints one line saying where this runs, what was installed (elsewhere: what is missing) and which
    mode the harness picked."""
    todo = missing()
    if not on_colab():
        install = shlex.join([sys.executable, "-m", "pip", "install", *todo])
        done = f"missing {', '.join(todo)} (install: {install})" if todo else "nothing to install"
        print(f"Set-up: a local checkout; {done}; mode {device.MODE}.")
        return device.MODE
    if todo:
        loaded_numpy = sys.modules["numpy"].__version__  # missing() imported it
        _pip_install(todo)
        importlib.invalidate_caches()
        if device.MODE == device.NONE:  # the simulator's package was missing when the harness chose
            importlib.reload(device)
        done = "installed " + ", ".join(todo)
        if importlib.metadata.version("numpy") != loaded_numpy:  # pip replaced it, as a dependency or by name
            done += "; NumPy was already loaded: restart the runtime and run this cell again"
    else:
        done = "nothing to install"
    print(f"Set-up: Colab; {done}; mode {device.MODE}.")
    return device.MODE
