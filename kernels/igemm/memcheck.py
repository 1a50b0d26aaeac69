"""Run every step once at odd shapes, for ``compute-sanitizer --tool memcheck`` (needs a GPU):

    compute-sanitizer --tool memcheck --error-exitcode 1 python -m kernels.igemm.memcheck [STEP ...]

Prints each wrong result, one verdict line for all the runs (check.sanitized) and one line per reason a
run is left out on this GPU; exits non-zero if any result is wrong. Steps named on the command line limit
the runs to those steps.
"""

import sys

# (step, launcher options) run at each odd shape; step 1 runs on the first layer's C = 3 instead.
ODD_RUNS = (
    (2, {}),
    (3, {}),
    (4, {"stages": 2}),
    (4, {"stages": 3}),
    (5, {"stages": 2}),
    (5, {"stages": 4}),
    (6, {"stages": 3}),
    (6, {"stages": 5}),
    (7, {"stages": 3}),
    (7, {"stages": 4, "blocks": 1}),
    (8, {"stages": 3}),
    (8, {"stages": 4, "blocks": 1}),
    (9, {"stages": 3}),
    (9, {"stages": 4, "blocks": 1}),
    (10, {"stages": 3}),
    (10, {"stages": 4, "blocks": 1}),
    (11, {"stages": 4}),
    (11, {"stages": 6, "blocks": 1}),
    (11, {"block_n": 64}),  # the narrow build, at its deepest
    (11, {"block_n": 64, "stages": 4, "blocks": 1}),
    (12, {"stages": 4, "splits": 3}),  # at most the problem's K steps: a 1x1 layer with one runs unsplit
    (12, {"stages": 6, "splits": 2, "blocks": 2}),
)


def main(steps=None) -> int:
    from ..harness import check
    from . import common as ig

    unknown = sorted(set(steps or ()) - set(ig.STEPS))
    if unknown:
        raise ValueError(f"steps must be among {sorted(ig.STEPS)}, got {unknown}")
    return check.sanitized(lambda rng: _checks(rng, steps))


def _checks(rng, steps) -> list:
    """Every run's verdict (check.CheckResult), the steps this GPU leaves out skipped with one line each."""
    import cupy

    from . import common as ig

    runs = [(1, ig.FIRST_LAYER, {})] + [(step, p, options) for p in ig.ODD_PROBLEMS[:3] for step, options in ODD_RUNS]
    results = []
    for step, problem, options in runs:
        if (steps and step not in steps) or ig.left_out(step, options.get("stages"), options.get("block_n")):
            continue
        if "splits" in options:
            options = {**options, "splits": min(options["splits"], ig.k_steps(problem, step))}
            options = {**options, "blocks": options["splits"]} if "blocks" in options else options
        x, w = ig.random_inputs(problem, rng, cupy)
        out = ig.conv(step, x, w, pad=problem.pad, stride=problem.stride, **options)
        ref = ig.reference(x, w, pad=problem.pad, stride=problem.stride)
        results.append(ig.compare(out, ref, problem, name=f"step {step} {options or '(defaults)'} {problem.label()}"))
    return results


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]]))
