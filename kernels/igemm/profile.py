"""Launch the steps whose difference needs a profiler to explain, once each, on the source problem
(needs a GPU), for Nsight Compute:

    ncu --csv --kernel-name regex:igemm <NCU_ARGS> python -m kernels.igemm.profile
    ncu --csv --profile-from-start off <NCU_ARGS> python -m kernels.igemm.profile cudnn

Prints the variants in launch order (and one line for each this GPU cannot run), so the profiler's
kernels can be matched to them; ``parse_ncu_csv`` turns the profiler's CSV into one row per launch, which
``store`` keeps beside the chapter's results and ``stored`` reads back (also without a GPU, for the prose).
"""

import csv
import io
import sys
from pathlib import Path

import numpy as np

from ..harness import device, results

# (label, step, launcher options): step 4 with its input through cp.async.cg (past the L1) and through .ca.
VARIANTS = (
    ("v3_ldmatrix", 3, {}),
    ("v4_cp_async, x via cp.async.cg", 4, {"x_bypass_l1": True}),
    ("v4_cp_async, x via cp.async.ca", 4, {}),
    ("v5_epilogue", 5, {}),
    ("v6_wgmma, 3 stages", 6, {"stages": 3}),
    ("v7_warp_specialized, 4 stages", 7, {"stages": 4}),
    ("v8_tma_filters, 4 stages", 8, {"stages": 4}),
    ("v9_tma_store, 4 stages", 9, {"stages": 4}),
    ("v10_tma_im2col, 4 stages", 10, {"stages": 4}),
)


NCU_ARGS = (
    "--section",
    "SpeedOfLight",
    "--section",
    "Occupancy",
    "--section",
    "LaunchStats",
    "--section",
    "MemoryWorkloadAnalysis",
    "--metrics",
    "l1tex__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,"
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum",
)
# column -> (Nsight Compute's metric name, scale)
COLUMNS = {
    "duration (us)": ("Duration", None),
    "L1 hit %": ("l1tex__t_sector_hit_rate.pct", 1.0),
    "L2 read sectors (M)": ("lts__t_sectors_srcunit_tex_op_read.sum", 1e-6),
    "L2 busy %": ("L2 Cache Throughput", 1.0),
    "SM busy %": ("Compute (SM) Throughput", 1.0),
    "registers": ("Registers Per Thread", 1.0),
    "smem config (KB)": ("Shared Memory Configuration Size", 1 / 1024),
    "blocks/SM": ("Block Limit Shared Mem", 1.0),
    "achieved occupancy %": ("Achieved Occupancy", 1.0),
    "tensor pipe %": ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 1.0),
    "instructions (M)": ("smsp__inst_executed.sum", 1e-6),
}
CUDNN = "cuDNN, the frontend's fastest plan"  # the label of cuDNN's kernel in the profile
NCU_FILE = "igemm_ncu.csv"  # beside igemm.csv: one (variant, metric, value) per line
_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def parse_ncu_csv(text: str) -> list[dict]:
    """One dict of ``COLUMNS`` per profiled launch, in launch order, from ``ncu --csv`` output."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    by_launch: dict[int, dict] = {}
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        if "Metric Name" not in rec or not rec.get("ID", "").isdigit():
            continue
        by_launch.setdefault(int(rec["ID"]), {})[rec["Metric Name"]] = (rec["Metric Unit"], rec["Metric Value"])
    rows = []
    for launch in sorted(by_launch):
        metrics, row = by_launch[launch], {}
        for column, (name, scale) in COLUMNS.items():
            unit, value = metrics.get(name, ("", "nan"))
            value = float(value.replace(",", "")) if value.replace(",", "").replace(".", "").isdigit() else float("nan")
            if column == "blocks/SM":  # the tightest of the limits, not only shared memory's
                value = min(
                    float(metrics.get(f"Block Limit {k}", ("", "inf"))[1].replace(",", ""))
                    for k in ("Shared Mem", "Registers", "Warps", "SM")
                )
            row[column] = round(value * (_TO_US.get(unit, float("nan")) if scale is None else scale), 1)
        rows.append(row)
    return rows


def store(rows: list[dict], gpu_slug: str, root=None) -> Path:
    """Write ``rows`` ({"variant": label, column: value, ...}, as the notebook shows them) as this GPU's
    profile, replacing the last one: ncu profiles each variant once, so only the newest run is kept."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("variant", "metric", "value"))
    for row in rows:
        writer.writerows((row["variant"], column, row[column]) for column in COLUMNS)
    path = results.gpu_folder(gpu_slug, root) / NCU_FILE
    results.replace_file(path, out.getvalue())
    return path


def stored(root=None) -> tuple[str, dict[str, dict]] | None:
    """The stored profile of this GPU, or of the reference GPU where this one has none: (its slug,
    {variant: {column: value}}). None where neither has one."""
    slugs = [device.environment()["gpu_slug"]] if device.on_gpu() else []
    for slug in [*slugs, results.REFERENCE_GPU]:
        bases = [Path(root)] if root else [results.RESULTS, results.REPOSITORY]
        path = next((b / slug / NCU_FILE for b in bases if (b / slug / NCU_FILE).exists()), None)
        if path is None:
            continue
        profile: dict[str, dict] = {}
        with path.open(newline="") as f:
            for rec in csv.DictReader(f):
                profile.setdefault(rec["variant"], {})[rec["metric"]] = float(rec["value"])
        return slug, profile
    return None


def runnable(props: dict) -> list:
    """The VARIANTS the GPU ``props`` describes (``device.properties()``) can run, in launch order; one
    line for each it cannot."""
    from . import common as ig

    keep = []
    for label, step, options in VARIANTS:
        if why := ig.unsupported(step, props, options.get("stages")):
            print(f"left out on this GPU: {label}: {why}", flush=True)
        else:
            keep.append((label, step, options))
    return keep


def main(argv=()) -> int:
    """Launch the VARIANTS once each; with the argument ``cudnn``, the cuDNN frontend's fastest plan
    instead, once, between cudaProfilerStart and Stop: choosing the plan launches many kernels, so
    profile it with ``ncu --profile-from-start off``."""
    if [a for a in argv if a != "cudnn"]:
        raise ValueError(f"the one optional argument is cudnn, got {list(argv)}")
    if not device.on_gpu():
        print("needs a CUDA GPU; without one there is nothing to profile")
        return 1
    import cupy

    from . import common as ig

    x, w = ig.random_inputs(ig.PROBLEM, np.random.default_rng(0), cupy)
    out = cupy.empty(ig.PROBLEM.y_shape, dtype=cupy.float16)
    if argv:
        from .cudnn_conv import CudnnConv, missing

        if why := missing():
            print(f"cuDNN left out: {why}")
            return 1
        conv = CudnnConv(ig.PROBLEM)
        best = conv.fastest(conv.time_plans(x, w, out))
        launch = conv.launcher(best.index, x, w, out)
        launch()
        cupy.cuda.Device().synchronize()
        cupy.cuda.runtime.profilerStart()
        launch()
        cupy.cuda.Device().synchronize()
        cupy.cuda.runtime.profilerStop()
        print(f"launch 0: {CUDNN} (plan {best.index}, {best.name})", flush=True)
        return 0
    launches = [
        (label, ig.launcher(step, x, w, out, **options)) for label, step, options in runnable(device.properties())
    ]
    for i, (label, launch) in enumerate(launches):  # compiled above: nothing but the kernels from here
        launch()
        cupy.cuda.Device().synchronize()
        print(f"launch {i}: {label}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
