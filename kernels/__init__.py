"""Kernels of the GPU kernel optimization lab book, one file per version, and the harness that runs them."""

from .harness import device as _device  # picks GPU or simulator before anything imports numba.cuda  # noqa: F401
