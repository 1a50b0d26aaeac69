"""Run every step once at odd shapes, for ``compute-sanitizer --tool memcheck`` (needs a GPU):

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m kernels.igemm.memcheck

Prints one verdict per run; exits non-zero if any result is wrong.
"""
import sys

import numpy as np


def main() -> int:
    import cupy

    from . import common as ig
    rng = np.random.default_rng(0)
    runs = [(1, ig.FIRST_LAYER, None)] + [(step, p, stages) for p in ig.ODD_PROBLEMS[:3]
                                           for step, stages in ((2, None), (3, None), (4, 2), (4, 3), (5, 2),
                                                                (5, 4), (6, 3), (6, 5))]
    failed = 0
    for step, problem, stages in runs:
        x, w = ig.random_inputs(problem, rng, cupy)
        out = ig.conv(step, x, w, pad=problem.pad, stride=problem.stride, stages=stages)
        result = ig.compare(out, ig.reference(x, w, pad=problem.pad, stride=problem.stride), problem,
                            name=f"step {step} ({stages or 'default'} stages) {problem.label()}")
        failed += not result.ok
        print(result, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
