"""SSIM on a real GPU: every version (Numba with its GPU tiles, and the CUDA C++ ones) against the float64
reference at odd sizes up to 2x3x2161x3839 (and one width that is a multiple of 4, for the 16-byte copy
path of V7 on), in inference and training mode."""
import numpy as np
import pytest

from kernels.harness import check, device
from kernels.ssim import backward, common

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not device.on_gpu(), reason="needs a CUDA GPU")]

SHAPES = [(1, 1, 11, 11), (1, 3, 37, 53), common.ALIGNED_SHAPE, (2, 3, 2161, 3839)]


@pytest.fixture(scope="module")
def cases():
    """Images and float64 references, computed once per (shape, kind): the large one takes seconds."""
    cache = {}

    def get(shape, kind, training=False):
        key = (shape, kind, training)
        if key not in cache:
            a, b = common.test_images(shape, kind=kind, seed=len(cache))
            cache[key] = (a, b, common.reference(a, b, training=training))
        return cache[key]
    return get


def run_poisoned(version, a, b, **kw):
    import cupy
    out = check.poison(cupy.empty(a.shape, dtype=cupy.float32))
    return common.run(version, cupy.asarray(a), cupy.asarray(b), out=out, **kw)


@pytest.mark.parametrize("version", list(common.VERSIONS))
@pytest.mark.parametrize("kind", ["random", "structured"])
@pytest.mark.parametrize("shape", SHAPES)
def test_version_matches_reference(version, kind, shape, cases):
    a, b, ref = cases(shape, kind)
    got = run_poisoned(version, a, b)
    check.assert_close(got, ref, atol=common.MAP_ATOL, name=f"{version} {kind} {shape}")
    assert abs(common.mean(got) - ref.mean()) <= common.MEAN_ATOL
    valid = common.crop_valid(got)
    assert abs(common.mean(valid) - common.crop_valid(ref).mean()) <= common.MEAN_ATOL


@pytest.mark.parametrize("version", list(common.VERSIONS))
@pytest.mark.parametrize("shape", [(1, 3, 37, 53), common.ALIGNED_SHAPE, (2, 3, 2161, 3839)])
def test_version_training(version, shape, cases):
    a, b, ref = cases(shape, "random", training=True)
    got = run_poisoned(version, a, b, training=True)
    for g, r, name in zip(got, ref, ("map", "dm_dmu1", "dm_dsigma1_sq", "dm_dsigma12")):
        check.assert_close(g, r, atol=1e-4 * max(1.0, float(np.abs(r).max())), name=f"{version} {name}")


@pytest.mark.parametrize("version", common.fused_mean_versions())
@pytest.mark.parametrize("valid", [False, True])
@pytest.mark.parametrize("kind", ["random", "structured"])
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_mean_matches_reference(version, valid, kind, shape, cases):
    """The mean mode writes no map: its per-plane float64 sums against the reference map's, and the mean."""
    import cupy
    a, b, ref = cases(shape, kind)
    ref = common.crop_valid(ref) if valid else ref
    da, db = cupy.asarray(a), cupy.asarray(b)
    sums = common.fused_sums(version, da, db, valid=valid).get()
    ref_sums = ref.reshape(len(sums), -1).sum(axis=1)
    np.testing.assert_allclose(sums, ref_sums, rtol=0, atol=common.MEAN_ATOL * ref[0].size)
    assert abs(common.fused_mean(version, da, db, valid=valid) - ref.mean()) <= common.MEAN_ATOL


@pytest.mark.parametrize("version", common.CUDA_VERSIONS)
def test_cuda_version_nan_stays_in_its_windows(version):
    a, b = common.test_images((1, 1, 40, 70), seed=3)
    a[0, 0, 0, 66] = np.nan  # near a corner: the window reaches into the padding on two sides
    ref = common.reference(a, b)
    got = check.to_host(run_poisoned(version, a, b))
    assert np.array_equal(np.isnan(got), np.isnan(ref))


def test_backward_large(cases):
    import cupy
    shape = (1, 3, 517, 389)
    a, b = common.test_images(shape, seed=8)
    g = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    da, db, dg = (cupy.asarray(x) for x in (a, b, g))
    _, d1, d2, d3 = common.run("V4", da, db, training=True)
    got = backward.run(da, db, dg, d1, d2, d3)
    ref = common.reference_backward(a, b, g)
    check.assert_close(got, ref, atol=1e-4 * max(1.0, float(np.abs(ref).max())), name="dL/dimg1")
