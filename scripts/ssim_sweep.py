"""Sweep a CUDA C++ SSIM version's strip height and register cap on the GPU, at the benchmark size:

    python3 scripts/ssim_sweep.py V7 [--rows 72,108,216] [--regs 128,144,0] [--unroll 1,2,4] [--stages 4,8]
                                     [--cols 2,3]

Each variant is the version's .cu file with ``kRows``, ``__maxnreg__`` (0: no cap) and, where the file
has them, ``kUnroll``, ``kStages`` (row buffers) and ``kColsPerThread`` (V10 only: the others assume 2)
rewritten, compiled
into a temporary folder, checked against the version as committed (max abs difference of the map) and
timed like bench.measure. Prints one line per variant; records nothing.
"""
import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.harness import cuda_cpp, device, timing  # noqa: E402  (first: picks the mode)
from kernels.ssim import bench, common, cuda_versions  # noqa: E402


def variant(version: str, rows: int, regs: int, unroll: int, stages: int, cols: int, folder: Path):
    """(kernel, ptxas resources) of ``version`` with kRows = rows, a register cap of regs (0: none),
    kUnroll = unroll, kStages = stages and kColsPerThread = cols (0: as committed)."""
    src = cuda_versions.HEADER.parent / common.VERSIONS[version]
    text = re.sub(r"constexpr int kRows = \d+;", f"constexpr int kRows = {rows};", src.read_text())
    cap = f"__maxnreg__({regs})" if regs else "__launch_bounds__(kThreads)"
    text = re.sub(r"__maxnreg__\(\d+\)|__launch_bounds__\([^)]*\)", cap, text, count=1)
    if unroll:
        text = re.sub(r"constexpr int kUnroll = \d+;", f"constexpr int kUnroll = {unroll};", text)
    if stages:
        text = re.sub(r"constexpr int kStages = \d+;", f"constexpr int kStages = {stages};", text)
    if cols:
        text = re.sub(r"constexpr int kColsPerThread = \d+;", f"constexpr int kColsPerThread = {cols};", text)
    path = folder / f"{src.stem}_r{rows}_g{regs}_u{unroll}_s{stages}_c{cols}.cu"
    path.write_text(text)
    arch, options = "sm_" + device.properties()["cc"], (f"-I{src.parent}",)
    res = cuda_cpp.compile_cubin(path, arch, options).resources[0]
    # With an arch, load() takes the cubin of the compile above (compile_cubin caches it): one compile.
    kernel = cuda_cpp.load(path, cuda_versions.kernel_name(version), options, arch=arch)
    return kernel, res


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("version")
    p.add_argument("--rows", default="72,108,216")
    p.add_argument("--regs", default="128,144,0")
    p.add_argument("--unroll", default="0")
    p.add_argument("--stages", default="0")
    p.add_argument("--cols", default="0")
    args = p.parse_args()
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
    with tempfile.TemporaryDirectory() as tmp:
        for rows in map(int, args.rows.split(",")):
            variants = [(g, u, s, k) for g in map(int, args.regs.split(",")) for u in map(int, args.unroll.split(","))
                        for s in map(int, args.stages.split(",")) for k in map(int, args.cols.split(","))]
            for regs, unroll, stages, per_thread in variants:
                kernel, res = variant(args.version, rows, regs, unroll, stages, per_thread, Path(tmp))
                geometry = cuda_versions.geometry(args.version)
                cols = geometry["threads"] * per_thread if per_thread else geometry["cols"]
                grid = ((w + cols - 1) // cols, (h + rows - 1) // rows, n * c)

                def launch(a, b, training=0):
                    kernel(grid, (32,), (a, b, out, out, out, out, np.int32(h), np.int32(w), np.int32(training)))
                launch(*sets[0])
                diff = float(cupy.abs(out - ref).max())
                t = timing.benchmark(launch, args=sets, repeat=50)
                blocks = grid[0] * grid[1] * grid[2]
                print(f"{args.version} kRows={rows} cap={regs or 'none'} unroll={unroll or 'as committed'} "
                      f"stages={stages or 'as committed'} cols/thread={per_thread or 'as committed'}: "
                      f"{t.median_ms:.4f} ms, "
                      f"{res.registers} registers, spills {res.spill_stores} B, {blocks} blocks, "
                      f"max |diff| vs committed {diff:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
