"""Run every SSIM version once at an odd size and at a width that is a multiple of 4, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/ssim_sanitize.py [VERSION ...]   # default: every version
    compute-sanitizer --tool racecheck python3 scripts/ssim_sanitize.py --step         # F1 and F2 alone

Inference and training mode of every version (and the fused mean, where a version has one), then the
backward kernels: the Numba one on V4's derivative maps, and B1 on each fused-mean version's training
forward; with ``--step``, only the training step in one kernel (F1 and F2), on the whole map's mean and the
valid map's. Each result is checked against the float64 reference so a clean run also means a correct one.
"""

import sys

from kernels.harness import check, device
from kernels.ssim import backward, common, cuda_versions

SHAPES = ((1, 3, 37, 53), common.ALIGNED_SHAPE)  # odd sizes, and V7's 16-byte copy path
STEP_SHAPES = (*SHAPES, (1, 2, 40, 1000))  # and a width at which the step's middle blocks copy 16-byte chunks


def step_checks() -> int:
    """F1 and F2 (backward.step) against the float64 reference at STEP_SHAPES, both paddings: the failures."""
    import cupy

    failures = 0
    for version in backward.STEP_VERSIONS:
        for shape in STEP_SHAPES:
            a, b = common.test_images(shape, seed=2)
            for valid in (False, True):
                failures += _step_check(cupy, version, a, b, valid)
    return failures


def _step_check(cupy, version: str, a, b, valid: bool) -> int:
    """One step of ``version`` on images a and b: its failures (0 to 2), each comparison printed."""
    shape = a.shape
    g = 1.0 / a.size
    grad_map = common.mean_grad_map(shape, g, valid=valid)
    sums, grad = backward.step(cupy.asarray(a), cupy.asarray(b), g, valid=valid, version=version)
    label = f"{version} step {'x'.join(map(str, shape))}{' valid' if valid else ''}"
    ref = common.reference(a, b)
    ref = common.crop_valid(ref) if valid else ref
    pixels = ref[0, 0].size
    want = ref.reshape(shape[0] * shape[1], -1).sum(axis=1) / pixels
    failures = 0
    for result in (
        check.compare(grad, common.reference_backward(a, b, grad_map), atol=1e-6, name=f"{label} gradient"),
        check.compare(sums / pixels, want, atol=common.MEAN_ATOL, name=f"{label} mean"),
    ):
        failures += not result.ok
        print(result)
    return failures


def main(versions) -> int:
    if not device.on_gpu():
        print("needs a CUDA GPU; memcheck has nothing to check in the simulator")
        return 1
    import cupy

    if "--step" in versions:
        if versions != ["--step"]:
            print("--step runs F1 and F2 alone; give it without version names")
            return 2
        failures = step_checks()
        cupy.cuda.runtime.deviceSynchronize()
        return 1 if failures else 0

    failures = 0
    versions = cuda_versions.runnable(versions or common.VERSIONS)  # a line for each this GPU cannot run
    for shape in SHAPES:
        a, b = common.test_images(shape, seed=1)
        ref = common.reference(a, b, training=True)
        da, db = cupy.asarray(a), cupy.asarray(b)
        for version in versions:
            for training in (False, True):
                out = check.poison(cupy.empty(shape, dtype=cupy.float32))
                got = common.run(version, da, db, out=out, training=training)
                result = check.compare(
                    got[0] if training else got,
                    ref[0],
                    atol=common.MAP_ATOL,
                    name=f"{version} {'x'.join(map(str, shape))} {'training' if training else 'inference'}",
                )
                failures += not result.ok
                print(result)
            for result in common.fused_checks(version, [shape]) if version in common.fused_mean_versions() else ():
                failures += not result.ok
                print(result)
        g = cupy.full(a.shape, 1.0 / a.size, dtype=cupy.float32)
        want = common.reference_backward(a, b, g.get())
        _, d1, d2, d3 = common.run("V4", da, db, training=True)
        grads = {"backward": backward.run(da, db, g, d1, d2, d3)}
        for version in [v for v in versions if v in common.fused_mean_versions()]:
            _, derivs = common.fused_sums(version, da, db, training=True)  # the mean-loss forward's kernel
            grads[f"{version} training mean + B1"] = backward.run_constant(da, db, *derivs, 1.0 / a.size)
        for name, grad in grads.items():
            result = check.compare(grad, want, atol=1e-6, name=f"{name} {'x'.join(map(str, shape))}")
            failures += not result.ok
            print(result)
    cupy.cuda.runtime.deviceSynchronize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
