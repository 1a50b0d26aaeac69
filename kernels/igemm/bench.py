"""cuDNN, step 6 and steps 7-8 on the source problem in one run, each checked before it is timed (needs a
GPU): the comparison issue 6's target is stated in (our best >= 60% of cuDNN's TFLOP/s).

    python -m kernels.igemm.bench [STEP ...]

Prints one verdict per check, then one line per variant: median ms, TFLOP/s, % of cuDNN. Steps named
on the command line limit the variants to those steps.
"""
import numpy as np

# (label, step, launcher options)
VARIANTS = (
    ("v6_wgmma, 3 stages", 6, {"stages": 3}),
    ("v7_warp_specialized, 4 stages, persistent", 7, {"stages": 4}),
    ("v7_warp_specialized, 3 stages, persistent", 7, {"stages": 3}),
    ("v7_warp_specialized, 4 stages, one block per tile", 7, {"stages": 4, "blocks": "tiles"}),
    ("v8_tma_filters, 4 stages, persistent", 8, {"stages": 4}),
    ("v8_tma_filters, 3 stages, persistent", 8, {"stages": 3}),
)


def _grid(options, problem):
    return {**options, "blocks": problem.ws_tiles()} if options.get("blocks") == "tiles" else options


def main(steps=None) -> int:
    import cupy

    from ..harness import check, timing
    from . import common as ig, cudnn_conv

    variants = tuple(v for v in VARIANTS if not steps or v[1] in steps)
    rng = np.random.default_rng(0)
    failed = 0
    walk = tuple((f"step {step}, 1 block walks every tile", step, {"blocks": 1}) for step in ig.SPECIALIZED
                 if not steps or step in steps)
    # Steps 7-8 at ragged shapes first: cheap, and a hang shows early.
    for problem in (ig.CI_PROBLEM, *ig.ODD_PROBLEMS):
        x, w = ig.random_inputs(problem, rng, cupy)
        for label, step, options in tuple(v for v in variants if v[1] in ig.SPECIALIZED) + walk:
            out = ig.conv(step, x, w, pad=problem.pad, stride=problem.stride, **_grid(options, problem))
            result = ig.compare(out, ig.reference(x, w, pad=problem.pad, stride=problem.stride), problem,
                                name=f"{label}: {problem.label()}")
            failed += not result.ok
            print(result, flush=True)

    p = ig.PROBLEM
    x, w = ig.random_inputs(p, rng, cupy)
    ref = ig.reference(x, w)
    out = cupy.empty(p.y_shape, dtype=cupy.float16)
    rows = []
    missing = cudnn_conv.missing()
    if missing:
        print(missing)
        cudnn_ms = None
    else:
        conv = cudnn_conv.CudnnConv(p)
        best = conv.fastest(conv.time_plans(x, w, out))
        fn = conv.launcher(best.index, x, w, out)
        check.poison(out)
        fn()
        result = ig.compare(out, ref, p, name=f"cuDNN plan {best.index} ({best.name})")
        failed += not result.ok
        print(result, flush=True)
        cudnn_ms = timing.benchmark(fn, warmup=5, repeat=50).median_ms
        rows.append(("cudnn", cudnn_ms))
    for label, step, options in variants:
        fn = ig.launcher(step, x, w, out, **_grid(options, p))
        check.poison(out)
        fn()
        result = ig.compare(out, ref, p, name=f"{label}: source problem")
        failed += not result.ok
        print(result, flush=True)
        rows.append((label, timing.benchmark(fn, warmup=5, repeat=50).median_ms))
    for label, ms in rows:
        tf = p.flops / (ms * 1e-3) / 1e12
        share = f", {100 * cudnn_ms / ms:.1f}% of cuDNN" if cudnn_ms else ""
        print(f"{label:52s} {ms:.4f} ms  {tf:6.1f} TFLOP/s{share}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    import sys
    sys.exit(main([int(a) for a in sys.argv[1:]]))
