"""Profiler evidence for the SSIM versions: ncu counters of one inference launch of each version at the
benchmark size, written to data/results/<gpu-slug>/ssim_ncu.csv (read by notebook 02b).

    python3 scripts/ssim_profile.py [VERSION ...]      # runs ncu on itself; default: every version

"V13 mean" (one argument, quoted) profiles V13's fused-mean kernel instead of its map.

Profiling some versions replaces their rows and keeps the other versions' rows of an earlier run.

Counters: duration, instructions executed (warp level), FFMA thread-instructions, issue-slot use,
achieved occupancy, local-memory traffic (what V3-0's ring costs), DRAM bytes, and the average number
of warps stalled per issued instruction for the main stall reasons.
"""

import csv
import functools
import io
import os
import subprocess
import sys
from pathlib import Path

from kernels.harness import perfmodel

ROOT = Path(__file__).resolve().parents[1]

STALLS = (
    "long_scoreboard",
    "short_scoreboard",
    "mio_throttle",
    "math_pipe_throttle",
    "wait",
    "barrier",
    "not_selected",
    "lg_throttle",
    "no_instruction",
    "dispatch_stall",
    "branch_resolving",
)
METRICS = {
    "gpu__time_duration.sum": "duration",
    "smsp__inst_executed.sum": "warp instructions",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "FFMA thread instructions",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots busy %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "smsp__inst_executed_op_local_ld.sum": "local load instructions",
    "smsp__inst_executed_op_local_st.sum": "local store instructions",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum": "local load bytes",
    "dram__bytes.sum": "DRAM bytes",
    **{perfmodel.ncu_stall_metric(s): f"stall {s}" for s in STALLS},
}


def child(versions) -> None:
    """Under ncu: one warm-up launch (compiles), then the profiled one; ncu skips the first by count."""
    import cupy

    from kernels.harness import device  # noqa: F401  (first: picks the mode)
    from kernels.ssim import common

    a, b = (cupy.asarray(x) for x in common.test_images(common.BENCH_SHAPE))
    out = cupy.empty(common.BENCH_SHAPE, dtype=cupy.float32)
    for version in versions:
        name, _, mode = version.partition(" ")
        launch = common.fused_sums if mode == "mean" else functools.partial(common.run, out=out)
        launch(name, a, b)
        cupy.cuda.runtime.deviceSynchronize()
        print(f"@@ {version}", flush=True)
        launch(name, a, b)
        cupy.cuda.runtime.deviceSynchronize()


def main(versions) -> int:
    from kernels.harness import check, device, results
    from kernels.ssim import common

    ncu = check.cuda_tool("ncu", "its table of counters")
    if not ncu:
        return 1
    versions = versions or [*common.VERSIONS, *(f"{v} mean" for v in common.fused_mean_versions())]
    rows = []
    for version in versions:  # one ncu process per version: its second ssim launch is the profiled one
        cmd = [
            ncu,
            "--csv",
            "--page",
            "raw",
            "-k",
            "regex:ssim",
            "--launch-skip",
            "1",
            "--launch-count",
            "1",
            "--metrics",
            ",".join(METRICS),
            sys.executable,
            __file__,
            "--child",
            version,
        ]
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ})
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith('"')]
        if run.returncode or len(lines) < 3:
            print(f"{version}: ncu failed (rc {run.returncode})\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
            continue
        table = list(csv.DictReader(lines[:1] + lines[2:]))  # the second line holds units
        for metric, name in METRICS.items():
            value = table[0].get(metric, "")
            rows.append({"version": version, "metric": name, "value": value.replace(",", "")})
        print(f"{version}: " + ", ".join(f"{r['metric']}={r['value']}" for r in rows[-len(METRICS) :][:6]))
    gpu = device.slug(device.environment()["gpu"])
    path = results.gpu_folder(gpu) / "ssim_ncu.csv"
    if path.exists():  # keep the rows of versions not profiled now, in VERSIONS order
        profiled = {r["version"] for r in rows}
        with path.open(newline="") as f:
            kept = [r for r in csv.DictReader(f) if r["version"] not in profiled]
        order = {v: i for i, v in enumerate(common.VERSIONS)}
        rows = sorted(kept + rows, key=lambda r: order.get(r["version"], len(order)))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["version", "metric", "value"])
    writer.writeheader()
    writer.writerows(rows)
    results.replace_file(path, buffer.getvalue())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
