"""Sweep a CUDA C++ SSIM version's strip height and register cap on the GPU, at the benchmark size:

    python3 scripts/ssim_sweep.py V7 [--rows 72,108,216] [--regs 128,144,0] [--unroll 1,2,4] [--stages 4,8]
                                     [--cols 2,3]

Each variant is the version's .cu file with ``kRows``, its kernel's ``__maxnreg__`` (0: no cap) and,
where asked, ``kUnroll``, ``kStages`` (row buffers) and ``kColsPerThread`` (V10 only: the others assume 2)
rewritten (an option for a constant the file lacks is refused), compiled into a temporary folder,
checked against the version as committed (max abs difference of the map) and timed like
bench.measure. Prints one line per variant; records nothing.
"""

import argparse
import re
import sys
import tempfile
from pathlib import Path

from kernels.harness import cuda_cpp, device, timing
from kernels.ssim import bench, common, cuda_versions


def _set(text: str, pattern: str, new: str, what: str) -> str:
    """``text`` with the one match of ``pattern`` replaced; a ValueError where it has none or several."""
    text, n = re.subn(pattern, new, text)
    if n != 1:
        raise ValueError(f"no {what} in the file to set" if n == 0 else f"{what} occurs {n} times; expected once")
    return text


def rewrite(version: str, rows: int, regs: int, unroll: int = 0, stages: int = 0, cols: int = 0) -> str:
    """The text of ``version``'s .cu file with kRows = rows, a register cap of regs on its kernel's
    declaration (0: none, only ``__launch_bounds__`` of its block size) and kUnroll, kStages and
    kColsPerThread set where nonzero. A ValueError names a constant or declaration the file lacks."""
    text = source(version).read_text()
    text = _set(text, r"constexpr int kRows = \d+;", f"constexpr int kRows = {rows};", "kRows")
    cap = f"__maxnreg__({regs})" if regs else f"__launch_bounds__({cuda_versions.geometry(version)['threads']})"
    # The declaration, not the first __maxnreg__ in the file: V12's and V14's comments name one too.
    kernel = cuda_versions.kernel_name(version)
    text = _set(
        text,
        rf"(__global__ void )(?:__maxnreg__\(\d+\)|__launch_bounds__\([^)]*\))(\s+{kernel}\()",
        rf"\g<1>{cap}\g<2>",
        f"the register cap of {kernel}",
    )
    for name, value in (("kUnroll", unroll), ("kStages", stages), ("kColsPerThread", cols)):
        if value:
            text = _set(text, rf"constexpr int {name} = \d+;", f"constexpr int {name} = {value};", name)
    return text


def source(version: str) -> Path:
    return cuda_cpp.source_path(cuda_versions.source(version))


def variant(version: str, rows: int, regs: int, unroll: int, stages: int, cols: int, folder: Path):
    """(kernel, ptxas resources) of ``version`` with kRows = rows, a register cap of regs (0: none),
    kUnroll = unroll, kStages = stages and kColsPerThread = cols (0: as committed)."""
    src = source(version)
    path = folder / f"{src.stem}_r{rows}_g{regs}_u{unroll}_s{stages}_c{cols}.cu"
    path.write_text(rewrite(version, rows, regs, unroll, stages, cols))
    arch, options = "sm_" + device.properties()["cc"], (f"-I{src.parent}",)
    res = cuda_cpp.compile_cubin(path, arch, options).resources[0]
    # With an arch, load() takes the cubin of the compile above (compile_cubin caches it): one compile.
    kernel = cuda_cpp.load(path, cuda_versions.kernel_name(version), options, arch=arch)
    return kernel, res


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("version", choices=common.CUDA_VERSIONS, help="a CUDA C++ version (the Numba ones have no .cu)")
    p.add_argument("--rows", default="72,108,216")
    p.add_argument("--regs", default="128,144,0")
    p.add_argument("--unroll", default="0")
    p.add_argument("--stages", default="0")
    p.add_argument("--cols", default="0")
    args = p.parse_args()
    ints = {}
    for name in ("rows", "regs", "unroll", "stages", "cols"):
        try:
            ints[name] = [int(v) for v in getattr(args, name).split(",")]
        except ValueError:
            p.error(f"--{name}: expected comma-separated integers, got {getattr(args, name)!r}")
    variants = [
        (r, g, u, s, k)
        for r in ints["rows"]
        for g in ints["regs"]
        for u in ints["unroll"]
        for s in ints["stages"]
        for k in ints["cols"]
    ]
    # Every rewrite is checked before the GPU work: an option the file has no constant for is refused,
    # not ignored while the printed line claims it.
    for v in variants:
        try:
            rewrite(args.version, *v)
        except ValueError as e:
            p.error(f"{args.version} ({common.VERSIONS[args.version]}): {e}")
    if not device.on_gpu():
        print("needs a CUDA GPU")
        return 1
    import cupy
    import numpy as np

    shape = common.BENCH_SHAPE
    n, c, h, w = shape
    sets = bench.inputs(shape)
    ref = common.run(args.version, *sets[0])
    out = cupy.empty(shape, dtype=cupy.float32)
    geometry = cuda_versions.geometry(args.version)
    with tempfile.TemporaryDirectory() as tmp:
        for rows, regs, unroll, stages, per_thread in variants:
            kernel, res = variant(args.version, rows, regs, unroll, stages, per_thread, Path(tmp))
            cols = geometry["threads"] * per_thread if per_thread else geometry["cols"]
            grid = ((w + cols - 1) // cols, (h + rows - 1) // rows, n * c)

            def launch(a, b, training=0, *, kernel=kernel, grid=grid):  # this variant's, bound now
                kernel(
                    grid,
                    (geometry["threads"],),
                    (a, b, out, out, out, out, np.int32(h), np.int32(w), np.int32(training)),
                )

            launch(*sets[0])
            diff = float(cupy.abs(out - ref).max())
            t = timing.benchmark(launch, args=sets, repeat=50)
            blocks = grid[0] * grid[1] * grid[2]
            print(
                f"{args.version} kRows={rows} cap={regs or 'none'} unroll={unroll or 'as committed'} "
                f"stages={stages or 'as committed'} cols/thread={per_thread or 'as committed'}: "
                f"{t.median_ms:.4f} ms, "
                f"{res.registers} registers, spills {res.spill_stores} B, {blocks} blocks, "
                f"max |diff| vs committed {diff:.2e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
