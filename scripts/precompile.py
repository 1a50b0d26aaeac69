"""Compile, on every core, the CUDA C++ variants the book's notebooks build, before they run:

    python scripts/precompile.py             # one process per core
    python scripts/precompile.py --jobs 4    # at most 4 processes
    python scripts/precompile.py --list      # the jobs, compiling nothing

Each job calls the function a notebook calls to build a kernel, in a process of its own: the models'
NVRTC compiles and their SASS (any machine), and on a GPU the loaders the launches use. The notebooks
then find the cubins, ptxas's reports and the SASS in the disk cache (kernels/harness/disk_cache.py)
and CuPy's own compiles in CuPy's kernel cache, instead of compiling one variant after another. The
variants come from the kernel families' registries: every convolution stage, both autotuners'
candidates and the Winograd builds; every CUDA C++ SSIM version, its backward and step kernels; every
build of the implicit-GEMM steps. Numba kernels are compiled by the notebooks themselves.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.harness import device  # noqa: E402  (after the repository is on the path)

Job = tuple[str, str, tuple]  # (module, function, arguments): one build


def conv_jobs(gpu: bool) -> list[Job]:
    """Every CUDA C++ stage with its own tile and every candidate of both autotuners on the chapter's
    problems (SPLIT, chosen at launch, builds nothing new): the model's compile and SASS, and on a GPU the
    launch's kernel; the rate probes; the Winograd kernels, both versions; on a GPU the Numba stages'
    cubins the model reads."""
    from kernels.conv import cuda_stages, model, registry, s9_autotune, s11_halo_autotune, stored_run, winograd
    from kernels.conv.common import PROBLEMS

    tiles = {(name, cuda_stages.options(tile)): (name, tile) for name, tile in cuda_stages.DEFAULTS.items()}
    for tuner in (s9_autotune, s11_halo_autotune):
        for pname in stored_run.PROBLEMS:
            for tile in tuner.candidates(PROBLEMS[pname]):
                tiles.setdefault((tuner.NAME, cuda_stages.options(tile)), (tuner.NAME, tile))
    jobs = [("kernels.conv.model", "compiled", (name, tile)) for name, tile in tiles.values()]
    jobs += [("kernels.conv.model", "mix_counts", (n,)) for n in model.MIX_LOADS]
    jobs += [("kernels.conv.winograd", "compile_info", (winograd.BKC, "sm_90", p)) for p in (True, False)]
    if gpu:
        props = device.properties()
        jobs += [
            ("kernels.conv.cuda_stages", "kernel", (name, tile))
            for name, tile in tiles.values()
            if cuda_stages.unsupported(name, tile, props) is None
        ]
        jobs += [("kernels.harness.cuda_cpp", "load", ("conv/rates.cu", "latency_probe"))]  # every rate probe's module
        numba = [s.name for s in registry.REGISTRY if s.gpu and s.language == "numba"]
        jobs += [("kernels.conv.model", "numba_cubin", (name,)) for name in numba]
        jobs += [("kernels.conv.winograd", "load_kernels", (winograd.BKC, p)) for p in (True, False)]
    return jobs


def ssim_jobs(gpu: bool) -> list[Job]:
    """Every CUDA C++ SSIM version this GPU runs (without one: the reference GPU): ptxas's report and the
    row loop's SASS for the pages, and on a GPU its module (map, mean and training kernels alike); the
    backward kernel and each version of the step kernel."""
    from kernels.ssim import backward, common, cuda_versions

    versions = [v for v in common.CUDA_VERSIONS if cuda_versions.unsupported(v, device.target_properties()) is None]
    jobs = [("kernels.ssim.bench", "resources", (v,)) for v in versions]
    jobs += [("kernels.ssim.bench", "hot_loop", (v,)) for v in common.BEYOND if v in versions]
    if gpu:
        jobs += [("kernels.ssim.cuda_versions", "kernel", (v,)) for v in versions]
        jobs += [("kernels.ssim.backward", "b1_kernel", ())]
        jobs += [("kernels.ssim.backward", "step_kernel", (v,)) for v in backward.STEP_VERSIONS]
    return jobs


def igemm_jobs(gpu: bool) -> list[Job]:
    """On a GPU, every build of the implicit-GEMM steps it runs (each depth, the narrow tiles, the
    input gather as first written) as the launches load them."""
    if not gpu:
        return []
    from kernels.igemm import common as ig

    jobs = [("kernels.igemm.common", "cuda_kernel", (step, d, False, n)) for step, d, n in ig.variants(ig.PROBLEM)]
    jobs += [
        ("kernels.igemm.common", "cuda_kernel", (info.number, info.default_stages, True, None))
        for info in ig.REGISTRY
        if info.x_bypass_l1
    ]
    return jobs


def jobs(gpu: bool) -> list[Job]:
    """Every job, the slowest compiles (the implicit-GEMM steps) first so that the cores finish together."""
    return igemm_jobs(gpu) + conv_jobs(gpu) + ssim_jobs(gpu)


def run(job: Job) -> tuple[Job, float, str | None]:
    """One build in this process: (job, seconds, the error or None)."""
    module, function, args = job
    start = time.perf_counter()
    try:
        getattr(importlib.import_module(module), function)(*args)
        error = None
    except Exception as e:  # reported, not raised: a notebook that needs this build compiles it itself
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return job, time.perf_counter() - start, error


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes at once (default: one per core)")
    ap.add_argument("--list", action="store_true", help="print the jobs and compile nothing")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs: at least 1")
    todo = jobs(device.on_gpu())
    if args.list:
        for module, function, fargs in todo:
            print(f"{module}.{function}{fargs}")
        return 0
    start, failed, took = time.perf_counter(), [], []
    # Fresh processes (spawn), not forks: a child of a process that has touched CUDA cannot use it.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(args.jobs, len(todo)), mp_context=context) as pool:
        for (module, function, fargs), seconds, error in pool.map(run, todo):
            took.append((seconds, f"{module}.{function}{fargs}"))
            if error:
                failed.append(f"{module}.{function}{fargs}: {error}")
    print(
        f"precompiled {len(todo) - len(failed)} of {len(todo)} builds in {time.perf_counter() - start:.0f} s "
        f"with {min(args.jobs, len(todo))} processes; the slowest: "
        + ", ".join(f"{name} {seconds:.1f} s" for seconds, name in sorted(took, reverse=True)[:3])
    )
    for line in failed:
        print("failed:", line)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
