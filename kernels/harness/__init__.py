"""The small shared harness: mode (device), timing, checking, ceilings, results, roofline, showing source."""

from . import device  # noqa: F401  (first: it chooses the simulator before numba.cuda is imported)
