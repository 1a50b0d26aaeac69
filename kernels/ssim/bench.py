"""Measure SSIM versions on a GPU: time, rates, % of the floor, resources; read the A100 seed numbers."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from kernels.harness import check, cuda_cpp, device, results, roofline, sass, timing
from kernels.harness.glue import glue, word

from . import common, cuda_versions, registry

SEEDS = Path(__file__).resolve().parents[2] / "data" / "seeds" / "ssim_a100.csv"
METRICS = {"ms": "ms", "GB/s": "GB/s", "GFLOP/s": "GFLOP/s", "% of floor": "%"}  # what a run records


def seeds() -> list[dict]:
    """The worklog's published A100 rows (data/seeds/ssim_a100.csv)."""
    with SEEDS.open(newline="") as f:
        return list(csv.DictReader(f))


def seed_times() -> dict:
    """{version: published A100 ms} for the versions the table times."""
    return {r["kernel"]: float(r["value"]) for r in seeds() if r["metric"] == "time"}


def gpu_name(gpu_slug: str) -> str:
    """A GPU's name as its stored runs record it (the slug where none is stored)."""
    if device.on_gpu() and device.environment()["gpu_slug"] == gpu_slug:
        return device.environment()["gpu"]
    rows = results.load("ssim", gpu_slug)
    return rows[-1]["gpu"] if rows else gpu_slug


def timed_gpu() -> str:
    """The GPU whose times ``timed`` returns: this one, or in the simulator the reference GPU."""
    return gpu_name(device.environment()["gpu_slug"] if device.on_gpu() else results.REFERENCE_GPU)


def profile(shape=common.BENCH_SHAPE) -> tuple[str, dict] | None:
    """The Nsight Compute counters scripts/ssim_profile.py stored (one inference launch of each version at
    ``shape``), of this GPU, or of the reference GPU where this one has none or an older one that lacks
    some of the reference GPU's versions: (the GPU's name, {version: {metric: value}}), with the work
    counters also per output pixel ("... / px"; instructions as thread-instructions, i.e. warp
    instructions x 32). None where neither GPU has a stored profile."""
    slugs = [device.environment()["gpu_slug"]] if device.on_gpu() else []
    reference = _profile_versions(results.REFERENCE_GPU)
    for slug in [*slugs, results.REFERENCE_GPU]:
        if slug != results.REFERENCE_GPU and not reference <= _profile_versions(slug):
            continue
        path = next(
            (
                root / slug / "ssim_ncu.csv"
                for root in (results.RESULTS, results.REPOSITORY)
                if (root / slug / "ssim_ncu.csv").exists()
            ),
            None,
        )
        if path is None:
            continue
        with path.open(newline="") as f:
            counters = {}
            for row in csv.DictReader(f):
                counters.setdefault(row["version"], {})[row["metric"]] = float(row["value"] or "nan")
        pixels = float(np.prod(shape))
        for c in counters.values():
            c["thread instructions / px"] = 32 * c["warp instructions"] / pixels
            c["local instructions / px"] = 32 * (c["local load instructions"] + c["local store instructions"]) / pixels
            c["DRAM bytes / px"] = c["DRAM bytes"] / pixels
        return gpu_name(slug), counters
    return None


def _profile_versions(slug: str) -> set[str]:
    """The versions of a GPU's stored profile (empty where it has none)."""
    for root in (results.RESULTS, results.REPOSITORY):
        path = root / slug / "ssim_ncu.csv"
        if path.exists():
            with path.open(newline="") as f:
                return {row["version"] for row in csv.DictReader(f)}
    return set()


def warps_per_sm(registers: int) -> int:
    """One-warp blocks an SM holds at ``registers`` a thread. Registers are allocated in units of 8 per
    thread, and each of the SM's four schedulers holds its own warps in its quarter of the 65,536
    registers, so the warps per SM are a multiple of 4 (ncu's achieved occupancy agrees)."""
    regs = -(-check.positive_int(registers, "registers", maximum=255) // 8) * 8  # ptxas gives a thread <= 255
    return min(32, 4 * (65536 // 4 // (regs * 32)))


def _stalls(c: dict) -> list[tuple[str, float]]:
    """A kernel's stall reasons, largest first: (reason, warps stalled per issued instruction)."""
    return sorted(((k.removeprefix("stall "), x) for k, x in c.items() if k.startswith("stall ")), key=lambda s: -s[1])


def profile_rows(counters: dict, shape=common.BENCH_SHAPE) -> list[dict]:
    """The profiler table: one row per profiled kernel, its work per output pixel, issue-slot use,
    occupancy, long-scoreboard stalls and its three largest stall reasons (warps per issued instruction)."""
    px = float(np.prod(shape))
    rows = []
    for v, c in counters.items():
        stalls = _stalls(c)
        rows.append(
            {
                "version": v,
                "thread instr / px": c["thread instructions / px"],
                "FFMA / px": c["FFMA thread instructions"] / px,
                "local instr / px": c["local instructions / px"],
                "DRAM B / px": c["DRAM bytes / px"],
                "issue %": c["issue slots busy %"],
                "occupancy %": c["achieved occupancy %"],
                "long scoreboard": c["stall long_scoreboard"],
                "top stalls": ", ".join(f"{k} {x:.2f}" for k, x in stalls[:3]),
            }
        )
    return rows


PROFILE_FORMATS = {
    "thread instr / px": ".1f",
    "FFMA / px": ".1f",
    "local instr / px": ".2f",
    "DRAM B / px": ".1f",
    "issue %": ".0f",
    "occupancy %": ".0f",
    "long scoreboard": ".2f",
}


def profile_values(counters: dict, versions, shape=common.BENCH_SHAPE) -> dict:
    """{glue name: value} of the counters the SSIM pages quote for each of ``versions`` (``v11_instr_px``,
    ``v4_stall_1`` for its largest stall reason, ...); a version the stored profile predates has none."""
    px = float(np.prod(shape))
    values = {}
    for v in [v for v in versions if v in counters]:
        c, name = counters[v], v.lower().replace(" ", "_").replace("-", "_")
        stalls = _stalls(c)
        for key, value in (
            ("instr_px", c["thread instructions / px"]),
            ("ffma_px", c["FFMA thread instructions"] / px),
            ("local_px", c["local instructions / px"]),
            ("dram_px", c["DRAM bytes / px"]),
            ("issue_pct", c["issue slots busy %"]),
            ("occupancy_pct", c["achieved occupancy %"]),
            ("lsb", c["stall long_scoreboard"]),
            ("ssb", c["stall short_scoreboard"]),
            ("noi", c["stall no_instruction"]),
            ("nsel", c["stall not_selected"]),
            ("stall_1", stalls[0][0]),
            ("stall_2", stalls[1][0]),
            ("stall_1_value", stalls[0][1]),
            ("local_loads", c["local load instructions"]),
        ):
            values[f"{name}_{key}"] = value
    return values


def loop_values(loops: dict) -> dict:
    """{glue name: value} of each version's hot loop (``hot_loop``): ``v9_per_row``, ``v6_moves``, ..."""
    keys = (
        ("loop instructions", "loop"),
        ("KB", "kb"),
        ("per row", "per_row"),
        ("moves per row", "moves"),
        ("per row and column", "per_col"),
    )
    return {f"{v.lower()}_{short}": loop[key] for v, loop in loops.items() for key, short in keys}


def verdicts(lines: list[str]):
    """Verdict lines (PASS/FAIL ...) as one table, a row per version with its count of checks passed and
    failed, any failure spelled out, and every line folded under a "details" fold."""
    from IPython.display import Markdown

    if isinstance(lines, str) or not lines:
        raise TypeError(f"lines: expected a non-empty list of verdict lines ('PASS  V5 ...'), got {lines!r:.80}")
    counts: dict = {}
    for line in lines:
        if not isinstance(line, str) or not line.startswith(("PASS ", "FAIL ")) or len(line.split()) < 2:
            raise ValueError(f"lines: each must read 'PASS  <version> ...' or 'FAIL  <version> ...', got {line!r:.80}")
        verdict, version = line.split()[:2]
        counts.setdefault(version, {"version": version, "checks": 0, "passed": 0, "failed": 0})
        counts[version]["checks"] += 1
        counts[version]["passed" if verdict == "PASS" else "failed"] += 1
    rows = list(counts.values())
    total = {k: sum(r[k] for r in rows) for k in ("checks", "passed", "failed")}
    head = "| version | checks | passed | failed |\n|---|---|---|---|\n"
    body = "".join(f"| {r['version']} | {r['checks']} | {r['passed']} | {r['failed']} |\n" for r in rows)
    body += f"| **all** | **{total['checks']}** | **{total['passed']}** | **{total['failed']}** |\n"
    failures = [line for line in lines if not line.startswith("PASS")]
    failed = ("\n**Failed:**\n\n```\n" + "\n".join(failures) + "\n```\n") if failures else ""
    listing = "\n".join(lines)
    details = f"\n<details><summary>All {len(lines)} verdicts</summary>\n\n```\n{listing}\n```\n\n</details>\n"
    return Markdown(head + body + failed + details)


def sanitized(versions) -> None:
    """``scripts/ssim_sanitize.py`` over ``versions`` under compute-sanitizer's memcheck (``check.memcheck``),
    shown as one verdict table (``verdicts``) and the sanitizer's own lines; without a GPU, its one line."""
    import contextlib
    import io

    from IPython.display import display

    with contextlib.redirect_stdout(io.StringIO()) as said:
        check.memcheck(["scripts/ssim_sanitize.py", *versions], tail=10_000)
    lines = said.getvalue().splitlines()
    checks = [line for line in lines if line.startswith(("PASS ", "FAIL "))]
    if checks:
        display(verdicts(checks))
    print("\n".join(line for line in lines if line.strip() and line not in checks))


def glue_change(name: str, new: float, old: float, less: str = "less", more: str = "more") -> None:
    """Glue how far ``new`` is from ``old`` in % (``name_pct``) and which way (``name``: ``less`` or ``more``)."""
    check.finite_number(new, "new")
    check.finite_number(old, "old (the time compared with)", positive=True)
    glue(f"{name}_pct", 100 * abs(new / old - 1))
    glue(name, word(new < old, less, more))


def range_pass(shape, copy_gbps: float, dram_ns: float, sms: int) -> dict:
    """V15's predicted cost: the bytes its range pass reads (each block's strip rows, halo included, the
    whole row buffer of both images, before its pipeline starts) and the time to read them, at the copy
    rate or, where fewer bytes are in flight (two rows per warp, at V15's warps per SM), at Little's law's
    rate."""
    n, c, h, w = shape
    geo = cuda_versions.geometry("V15")
    row_bytes = 2 * (geo["cols"] + 16) * 4  # both images' row buffers: the columns, 8 a side (kLead)
    strips = n * c * -(-h // geo["rows"]) * -(-w // geo["cols"])
    total = strips * (geo["rows"] + 2 * common.RADIUS) * row_bytes
    inflight = warps_per_sm(resources("V15")["registers"]) * 2 * row_bytes  # per SM: two rows a warp
    gbps = min(copy_gbps, sms * inflight / dram_ns)  # bytes / ns = GB/s
    return {"v15_range_mb": total / 1e6, "v15_range_gbps": gbps, "v15_pred_extra_ms": total / gbps / 1e6}


def shift_cost(ms: dict, train_ms: dict, predicted_ms: float, gpu: str) -> dict:
    """The Measured words of V15's cost ({glue name: value}): its map and training times against V13's
    and the extra time against ``predicted_ms``, or, where the run on ``gpu`` did not time V15, that it is
    not timed yet."""
    if not all(v in t for t in (ms, train_ms) for v in ("V13", "V15")):
        return {
            "v15_measured": f"Not timed yet on the {gpu}: its stored run is older than V15. The next run of this "
            "page on a GPU times it beside V13."
        }
    extra, extra_train = ms["V15"] - ms["V13"], train_ms["V15"] - train_ms["V13"]
    return {
        "v15_measured": f"V15's map takes {ms['V15']:.3f} ms against V13's {ms['V13']:.3f} ms, "
        f"{100 * abs(ms['V15'] / ms['V13'] - 1):.0f}% {word(extra > 0, 'slower', 'faster')}; in training "
        f"{train_ms['V15']:.3f} ms against {train_ms['V13']:.3f} ms. The shift costs {extra:.3f} ms in the map "
        f"and {extra_train:.3f} ms in training, against the {predicted_ms:.3f} ms predicted."
    }


def problem_name(shape, training: bool = False) -> str:
    return "x".join(map(str, shape)) + ("-train" if training else "")


def inputs(shape, sets: int = 2, seed: int = 0):
    """``sets`` independent image pairs on the GPU; rotating through them keeps L2 from serving reruns."""
    import cupy

    return [tuple(cupy.asarray(a) for a in common.test_images(shape, seed=seed + i)) for i in range(sets)]


def measure(version: str, shape, ceilings, *, training: bool = False, sets=None, repeat: int = 50) -> dict:
    """Median time of one version, its GB/s, GFLOP/s and % of the floor under the measured ceilings."""
    import cupy

    sets = sets or inputs(shape)
    out = cupy.empty(shape, dtype=cupy.float32)
    t = timing.benchmark(
        lambda a, b: common.run(version, a, b, out=out, training=training, check_range=False), args=sets, repeat=repeat
    )
    w = common.work(shape, training=training)
    r = timing.rates(t, flops=w["flops"], bytes_moved=w["bytes"])
    fl = roofline.floor(w["flops"], w["bytes"], gflops=ceilings.fma_gflops, gbps=ceilings.copy_gbps)
    return {
        "version": version,
        "problem": problem_name(shape, training),
        "ms": t.median_ms,
        "spread": t.spread,
        "GB/s": r["GB/s"],
        "GFLOP/s": r["GFLOP/s"],
        "floor_ms": fl.floor_ms,
        "% of floor": 100 * fl.floor_ms / t.median_ms,
    }


def measure_mean(version: str, shape, *, valid: bool = False, sets=None, repeat: int = 50) -> dict:
    """Median ms of the SSIM sum (one float64 on the device) two ways: the map, then its float64 sum
    (``common.map_sum``); and, for ``common.fused_mean_versions()``, the fused sum that writes no map."""
    import cupy

    sets = sets or inputs(shape)
    out = cupy.empty(shape, dtype=cupy.float32)
    two_pass = timing.benchmark(
        lambda a, b: common.map_sum(common.run(version, a, b, out=out, valid=valid, check_range=False)),
        args=sets,
        repeat=repeat,
    )
    row = {
        "version": version,
        "problem": problem_name(shape) + ("-valid" if valid else ""),
        "map + mean ms": two_pass.median_ms,
        "fused ms": None,
    }
    if version in common.fused_mean_versions():
        fused = timing.benchmark(
            lambda a, b: common.fused_sums(version, a, b, valid=valid).sum(), args=sets, repeat=repeat
        )
        row["fused ms"] = fused.median_ms
    return row


def result_rows(m: dict) -> list[dict]:
    """A measurement as rows for results.record('ssim', ...)."""
    return [
        {"kernel": m["version"], "problem": m["problem"], "metric": k, "value": m[k], "unit": u}
        for k, u in METRICS.items()
    ]


def timed(version: str, shape, ceilings=None, *, training: bool = False, sets=None) -> dict | None:
    """On a GPU: measure, record in data/results and return the row. In the simulator: the reference
    GPU's stored row for the same version and problem, or None if there is none."""
    if device.on_gpu():
        m = measure(version, shape, ceilings, training=training, sets=sets)
        results.record("ssim", result_rows(m))
        return m
    problem = problem_name(shape, training)
    stored = results.latest("ssim", results.REFERENCE_GPU)
    if (version, problem, "ms") not in stored:
        return None
    return {
        "version": version,
        "problem": problem,
        **{k: float(stored[(version, problem, k)]["value"]) for k in METRICS if (version, problem, k) in stored},
    }


def describe(m: dict | None, version: str = "") -> str:
    if m is None:
        return f"{version}: no GPU here and no stored run of the reference GPU ({results.REFERENCE_GPU}) yet."
    extra = f", {m['% of floor']:.1f}% of the floor" if "% of floor" in m else ""
    return f"{m['version']}: {m['ms']:.4f} ms, {m['GB/s']:.0f} GB/s, {m['GFLOP/s']:.0f} GFLOP/s{extra}" + (
        "" if device.on_gpu() else f"  [stored run of {results.REFERENCE_GPU}]"
    )


def seed_ratio(new: str, old: str) -> tuple[float, str] | None:
    """The worklog's A100 time ratio new/old and where it comes from: its table's two times, or else a
    change its text gives (a seed row in %: ``time_change_vs_<old>``, or ``speedup_vs_<old>``, which the
    worklog uses for the share of time saved); None where it publishes neither."""
    a100 = seed_times()
    if new in a100 and old in a100:
        return a100[new] / a100[old], "table"
    for r in seeds():
        if r["kernel"] == new and r["metric"] == f"time_change_vs_{old}":
            change = float(r["value"])
            return 1 + change / 100, f"its text: {change:+.2f}% time"
        if r["kernel"] == new and r["metric"] == f"speedup_vs_{old}":
            saved = float(r["value"])
            return 1 - saved / 100, f"its text: {-saved:+.2f}% time"
    return None


def step(measured: dict, new: str, old: str) -> str:
    """The time ratio new/old measured here beside the worklog's A100 ratio (``seed_ratio``)."""
    here = (
        f"{measured[new]['ms'] / measured[old]['ms']:.3f}"
        if measured.get(new) and measured.get(old)
        else "n/a (not measured)"
    )
    seed = seed_ratio(new, old)
    if seed is None:
        there = "not published"
    else:
        ratio, source = seed
        there = f"{ratio:.3f}" + ("" if source == "table" else f" ({source})")
    return f"time {new} / {old}: here {here}; A100 (worklog) {there}"


def resources(version: str, arch: str | None = None) -> dict:
    """Registers and local memory per thread, shared memory per block, for the compiled kernel.

    Numba versions: the kernel compiled for the last launch (run the version once first);
    CUDA C++ versions: ptxas's report for ``arch`` ("sm_90"), by default the target GPU's architecture (a
    RuntimeError if that GPU cannot run it).
    """
    if registry.get(version).language == "cuda":
        if arch is None:
            cuda_versions.require_runnable(version)
            arch = device.target_arch()
        (r,) = [
            r
            for r in cuda_cpp.compile_cubin(cuda_versions.source(version), arch).resources
            if r.kernel == cuda_versions.kernel_name(version)
        ]
        return {
            "version": version,
            "registers": r.registers,
            "local bytes": r.stack_bytes,
            "spill bytes": r.spill_stores + r.spill_loads,
            "shared bytes": r.smem_bytes,
        }
    if not device.on_gpu():
        raise RuntimeError("resource counts of Numba kernels need a GPU compile")
    kernel = numba_kernel(version)

    def one(value):  # a dispatcher with one compiled signature may still answer {signature: value}
        return next(iter(value.values())) if isinstance(value, dict) and len(value) == 1 else value

    return {
        "version": version,
        "registers": one(kernel.get_regs_per_thread()),
        "local bytes": one(kernel.get_local_mem_per_thread()),
        "spill bytes": None,
        "shared bytes": one(kernel.get_shared_mem_per_block()),
    }


def numba_kernel(version: str, training: bool = False):
    """The Numba dispatcher a default-tile inference (or training) launch of ``version`` uses."""
    module = common.version_module(version)
    tile = module.GPU_TILE if device.on_gpu() else module.SIM_TILE
    return module.build(*tile.values(), training)


def local_memory_instructions(version: str) -> dict:
    """Count local loads/stores (LDL/STL) and FFMAs in a Numba version's SASS (needs nvdisasm)."""
    listing = numba_kernel(version).inspect_sass()
    text = "\n".join(listing.values()) if isinstance(listing, dict) else str(listing)
    instructions = [i for kernel in sass.parse(text).values() for i in kernel]
    if not instructions:
        raise sass.SassUnavailable(f"no instructions parsed from the SASS of {version}")
    c = sass.counts(instructions)
    return {
        "version": version,
        "LDL": c["local load (spill)"],
        "STL": c["local store (spill)"],
        "FFMA": c["FFMA"],
        "instructions": len(instructions),
    }


def hot_loop(version: str) -> dict:
    """SASS of the row loop an interior block runs in inference, for a CUDA C++ version from V6 on: its
    instructions, input rows per trip, per row the instructions and register moves (MOV, IMAD.MOV), and
    per row and output column (V10 computes three columns per thread, the others two).

    Compiled on the CPU (NVRTC, sm_90) from a copy of the source in which the interior test is true
    and training false, so the compiler drops the other paths; the row loop is then the largest loop.
    """
    import re
    import tempfile

    path = cuda_cpp.source_path(cuda_versions.source(version))
    text = path.read_text()
    for pattern, replacement in (
        (r"const bool interior = [^;]*;", "const bool interior = true;"),
        (r"training != 0", "false"),
        (r"if \(training\)", "if (false)"),
        (r"if \(interior\) \{", "if (true) {"),
    ):
        text = re.sub(pattern, replacement, text)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / path.name
        probe.write_text(text)
        compiled = cuda_cpp.compile_cubin(probe, "sm_90", (f"-I{path.parent}",))
        instructions = sass.disassemble(compiled, cuda_versions.kernel_name(version))
    labels = {i.label: i.address for i in instructions if i.label}
    start, end = max(
        (
            (labels[m.group(0)], i.address)
            for i in instructions
            if i.base == "BRA"
            and (m := re.search(r"\.L_x_\d+", i.operands))
            and labels.get(m.group(0), i.address) < i.address
        ),
        key=lambda t: t[1] - t[0],
    )
    loop = [i for i in instructions if start <= i.address <= end]
    unroll = re.search(r"constexpr int kUnroll = (\d+);", text)
    rows = 10 if "kSlots" in text else int(unroll.group(1)) if unroll else 1
    moves = sum(i.base == "MOV" or i.opcode.startswith("IMAD.MOV") for i in loop)
    cols = int(re.search(r"constexpr int kColsPerThread = (\d+);", text).group(1))
    return {
        "version": version,
        "loop instructions": len(loop),
        "KB": 16 * len(loop) / 1024,
        "rows per trip": rows,
        "per row": len(loop) / rows,
        "moves per row": moves / rows,
        "per row and column": len(loop) / rows / cols,
    }


# What each of ``peers`` returns, as the training page's metrics name it: a mean, or the 'same' map.
PEER_METRIC = {"pytorch-msssim": "inference mean", "kornia": "inference map"}


def peers() -> list[tuple[str, object]]:
    """Optional library SSIMs (PyTorch-based), as (name, fn(a, b)) for any image shape; missing ones skipped.

    pytorch-msssim returns the mean over each image's valid region (its convolutions do not pad);
    kornia returns the 'same' map, padded by reflection where ours pads with zeros."""
    found = []
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no peer comparison.")
        return found
    try:
        from pytorch_msssim import ssim as msssim_ssim

        found.append(("pytorch-msssim", lambda a, b: msssim_ssim(a, b, data_range=1.0, size_average=False)))
    except ImportError:
        print("pytorch-msssim is not installed: skipped.")
    try:
        from kornia.metrics import ssim as kornia_ssim

        found.append(("kornia", lambda a, b: kornia_ssim(a, b, common.WINDOW, max_val=1.0)))
    except ImportError:
        print("kornia is not installed: skipped.")
    del torch
    return found


def time_peer(fn, shape, repeat: int = 20) -> float:
    """Median ms of a PyTorch SSIM; PyTorch's default stream is the legacy default stream, which the
    CuPy events of timing.benchmark are recorded on."""
    import torch

    a, b = (torch.as_tensor(x, device="cuda") for x in common.test_images(shape))
    with torch.no_grad():
        t = timing.benchmark(lambda: fn(a, b), repeat=repeat)
    return t.median_ms


def peer_agreement(name: str, fn, shape, version: str) -> dict:
    """A peer and ``version`` against the float64 reference on the same structured images, on what all
    three define: the map over the valid region (kornia's border differs by design: reflect padding,
    ours zero) and each image's mean over it (all pytorch-msssim returns: its convolutions do not pad)."""
    import cupy
    import torch

    a, b = common.test_images(shape, kind="structured", seed=5)
    ref = common.crop_valid(common.reference(a, b))
    ours = cupy.asnumpy(common.run(version, cupy.asarray(a), cupy.asarray(b), valid=True)).astype(np.float64)
    with torch.no_grad():
        got = fn(torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")).double().cpu().numpy()

    def image_means(m):
        return m.reshape(m.shape[0], -1).mean(axis=1)

    row = {
        "peer": name,
        "shape": "x".join(map(str, shape)),
        f"{version} map err": float(np.abs(ours - ref).max()),
        "peer map err": None,
        f"{version} mean err": float(np.abs(image_means(ours) - image_means(ref)).max()),
    }
    if got.ndim == 4:  # a 'same' map
        got = common.crop_valid(got)
        row["peer map err"] = float(np.abs(got - ref).max())
        got = image_means(got)
    row["peer mean err"] = float(np.abs(got - image_means(ref)).max())
    return row


# Peers are checked at a size whose float64 reference takes a second, and timed at the benchmark size.
PEER_CHECK_SHAPE = (1, 3, 517, 389)


def peer_rows(shape, version: str) -> tuple[list[dict], list[dict]]:
    """On a GPU: every installed peer timed at ``shape`` (rows for results.record) and checked with
    ``version`` against the float64 reference at PEER_CHECK_SHAPE (agreement rows).

    They run in a fresh process that imports PyTorch before any of our kernels: on the H100 image,
    PyTorch 2.11 failed to import (a schema parse error in its custom-op registration) into a process
    where V3, V4 and V11 had run, though it imported after the worklog's versions alone and into a fresh
    process. Lines the peers print are passed on."""
    run = subprocess.run(
        [sys.executable, "-m", "kernels.ssim.bench", "--peers", version, *map(str, shape)],
        capture_output=True,
        text=True,
        cwd=results.ROOT,
    )
    lines = run.stdout.splitlines()
    if run.returncode or not lines:
        raise RuntimeError(f"the peer process failed (exit {run.returncode}): {(run.stderr or run.stdout)[-1500:]}")
    for line in lines[:-1]:
        print(line)
    out = json.loads(lines[-1])
    return out["timed"], out["agreement"]


def _peer_rows_here(shape, version: str) -> dict:
    """``peer_rows`` in this process (the child's side)."""
    timed_rows, agreement = [], []
    for name, fn in peers():
        ms = time_peer(fn, shape)
        timed_rows.append({"kernel": name, "problem": problem_name(shape), "metric": "ms", "value": ms, "unit": "ms"})
        agreement.append({**peer_agreement(name, fn, PEER_CHECK_SHAPE, version), "ms": ms})
    return {"timed": timed_rows, "agreement": agreement}


def main(versions=None) -> int:
    """``python -m kernels.ssim.bench [VERSION ...]``: measure versions at the benchmark size (inference,
    training for the register-pipeline versions, the fused mean where there is one) and print one line
    each, and one for each version this GPU cannot run; records nothing. Returns the exit status."""
    from kernels.harness import ceilings as ceilings_module

    for v in versions or ():
        common.version_module(v)  # an unknown version is refused before the GPU is asked for
    if not device.on_gpu():
        print("needs a CUDA GPU; without one there is nothing to measure")
        return 1
    versions = cuda_versions.runnable(versions or common.VERSIONS)
    ceil = ceilings_module.measure()
    sets = inputs(common.BENCH_SHAPE)
    for v in versions:
        print(describe(measure(v, common.BENCH_SHAPE, ceil, sets=sets), v), flush=True)
    for v in [v for v in versions if v in ("V3", "V4", *common.BEYOND)]:
        m = measure(v, common.BENCH_SHAPE, ceil, training=True, sets=sets)
        print(describe(m, v) + "  [training]", flush=True)
    for v in [v for v in versions if v in common.fused_mean_versions()]:
        for valid in (False, True):
            m = measure_mean(v, common.BENCH_SHAPE, valid=valid, sets=sets)
            print(
                f"{v} SSIM value{' (valid)' if valid else ''}: map + mean {m['map + mean ms']:.4f} ms, "
                f"fused {m['fused ms']:.4f} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peers"]:  # peer_rows' child: python -m kernels.ssim.bench --peers VERSION N C H W
        print(json.dumps(_peer_rows_here(tuple(map(int, sys.argv[3:])), sys.argv[2])))
    else:
        sys.exit(main(sys.argv[1:]))
