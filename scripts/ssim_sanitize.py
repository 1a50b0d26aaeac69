"""Run every SSIM version once at an odd size and at a width that is a multiple of 4, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/ssim_sanitize.py [VERSION ...]   # default: every version

Inference and training mode of every version (and the fused mean, where a version has one), then the
backward kernel; each result is checked against the float64 reference so a clean memcheck also means
a correct map.
"""

import sys

from kernels.harness import check, device
from kernels.ssim import backward, common, cuda_versions

SHAPES = ((1, 3, 37, 53), common.ALIGNED_SHAPE)  # odd sizes, and V7's 16-byte copy path


def main(versions) -> int:
    if not device.on_gpu():
        print("needs a CUDA GPU; memcheck has nothing to check in the simulator")
        return 1
    import cupy

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
    _, d1, d2, d3 = common.run("V4", da, db, training=True)
    g = cupy.full(a.shape, 1.0 / a.size, dtype=cupy.float32)
    grad = backward.run(da, db, g, d1, d2, d3)
    result = check.compare(grad, common.reference_backward(a, b, g.get()), atol=1e-6, name="backward")
    failures += not result.ok
    print(result)
    cupy.cuda.runtime.deviceSynchronize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
