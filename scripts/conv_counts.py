"""Instruction counts of every convolution stage, for the performance model (run on the GPU machine).

    python scripts/conv_counts.py                 # SASS counts x trips -> data/results/<gpu>/conv_counts.csv
    python scripts/conv_counts.py --ncu conv1 conv2   # every stage once under ncu (the model's three
                                                  # metrics, L1 hit rate, busiest SM's blocks,
                                                  # issue activity, the busiest pipes and
                                                  # why warps waited)
                                                  # -> data/results/<gpu>/conv_ncu_<problem>.csv
    python scripts/conv_counts.py --ncu conv1 --stages "HALO TILE"   # only these stages; their rows
                                                  # replace theirs in the CSV, the others' are kept
    compute-sanitizer --tool memcheck --report-api-errors no python scripts/conv_counts.py --launch tiny odd4
                                                  # odd sizes, every stage checked against the reference
                                                  # (tiny: odd channel counts, for the Numba stages)

The notebook computes the SASS counts itself and reads the ncu files (conv_counts.csv is for a look at
the counts outside the notebook); numbers measured on a GPU are never typed in.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from kernels.conv import common, model, stages
from kernels.harness import check, device, perfmodel, results

EXTRA_METRICS = (*model.NCU_CHECKS.values(), *model.NCU_PIPES.values(), *model.NCU_STALLS.values())
COLUMNS = ("stage", "problem", "fp32", "ldst", "other", "registers", "smem_bytes", "source")


def count_rows(problems: list[str], names: list[str] | None = None) -> list[dict]:
    rows = []
    skipped = stages.unsupported(device.target_properties())
    for stage in names or stages.GPU_STAGES:
        if stage in skipped:
            print("skip", skipped[stage])
            continue
        tile = stages.tile_of(stage)
        sass, res = model.compiled(stage, tile)
        for name in problems:
            c = model.sass_counts(stage, common.PROBLEMS[name], tile, sass=sass)
            rows.append(
                {
                    "stage": stage,
                    "problem": name,
                    "fp32": c.fp32 if c else "",
                    "ldst": c.ldst if c else "",
                    "other": c.other if c else "",
                    "registers": res.registers,
                    "smem_bytes": res.smem_bytes,
                    "source": "sass" if c else "loops not understood: use ncu",
                }
            )
    return rows


def takes(s, p) -> bool:
    """Whether stage ``s`` runs on problem ``p``: its vector loads need the channels in multiples."""
    return not (p.c % s.c_multiple or p.k % s.k_multiple)


def chosen(names: list[str] | None = None) -> list:
    """Every GPU stage this GPU runs, or those of them named."""
    return [s for s in stages.all_gpu(device.target_properties()) if not names or s.name in names]


def launch_all(problem: str, names: list[str] | None = None) -> None:
    """Run every GPU stage (or those named) once on ``problem`` (for ncu or compute-sanitizer); check
    the results against the float64 reference where that takes seconds (conv1's would take minutes)."""
    p = common.PROBLEMS[problem]
    checked, left_out = [], []
    for s in chosen(names):
        if not takes(s, p):
            left_out.append(s.name)
        elif p.flops < 2e10:
            checked.append(common.check_stage(s, p, seed=0))
            if not checked[-1].ok:
                print(checked[-1])
        else:
            xp = device.xp()
            x, f = (xp.asarray(a) for a in common.to_layout(*common.random_inputs(p, seed=0), s.layout))
            y = common.run(s, x, f)
            print(f"ran {s.name} on {problem}: {'finite' if bool(xp.isfinite(y).all()) else 'NOT FINITE'}")
    # one line per problem, not one per stage: the failures above, if any
    if checked:
        passed = sum(r.ok for r in checked)
        line = f"{problem} ({p.n}x{p.c}x{p.h}x{p.w} -> {p.k}): {passed} of {len(checked)} stages match the reference"
        if left_out:
            line += f"; {len(left_out)} left out (their vector loads need C and K in multiples of 4)"
        print(line)


def ncu_path(problem: str) -> Path:
    return results.gpu_folder(device.environment()["gpu_slug"]) / f"conv_ncu_{problem}.csv"


def run_ncu(problems: list[str], names: list[str] | None = None) -> list[Path]:
    """Every stage (or those named) once on each of ``problems`` under Nsight Compute with the model's
    metrics, all in one process (one start-up, one compile of the Numba stages); one CSV per problem, of
    its launches (launch_all runs the problems one after another). With ``names``, rows of other kernels
    already in a CSV are kept."""
    args = [str(Path(__file__).resolve()), "--launch", *problems, *(["--stages", *names] if names else [])]
    text = check.ncu_csv(args, (*perfmodel.NCU_METRICS, *EXTRA_METRICS), "regex:conv_", "the counts")
    if text is None:
        raise RuntimeError("ncu is needed to count the stages' instructions (see the line above)")
    header, rows = perfmodel.ncu_csv_table(text)
    launch, kernel = header.index("ID"), header.index("Kernel Name")
    order = list(dict.fromkeys(row[launch] for row in rows))  # the profiled launches, in launch order
    counts = [sum(takes(s, common.PROBLEMS[q]) for s in chosen(names)) for q in problems]
    if sum(counts) != len(order):
        raise RuntimeError(f"ncu profiled {len(order)} launches; the stages on {', '.join(problems)} are {sum(counts)}")
    paths, first = [], 0
    for problem, n in zip(problems, counts, strict=True):
        ids, first = set(order[first : first + n]), first + n
        new = [row for row in rows if row[launch] in ids]
        path = ncu_path(problem)
        kept = []
        if names and path.exists():
            measured = {row[kernel] for row in new}
            kept = [row for row in perfmodel.ncu_csv_table(path.read_text())[1] if row[kernel] not in measured]
        buffer = io.StringIO()
        csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([header, *kept, *new])
        results.replace_file(path, buffer.getvalue())
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launch", nargs="+", choices=sorted(common.PROBLEMS), help="run every stage once on each problem")
    ap.add_argument("--ncu", nargs="+", choices=sorted(common.PROBLEMS), help="count every stage with ncu")
    ap.add_argument("--problems", nargs="+", default=["conv1", "conv2"])
    ap.add_argument("--stages", nargs="+", choices=stages.GPU_STAGES, help="only these stages (default: all)")
    args = ap.parse_args()
    if device.MODE != device.GPU:
        sys.exit("this script needs a GPU (Numba's PTX and the CUDA C++ launches)")
    if args.launch:
        for problem in args.launch:
            launch_all(problem, args.stages)
        return
    if args.ncu:
        for path in run_ncu(args.ncu, args.stages):
            print(f"wrote {path}")
        return
    env = device.environment()
    path = results.gpu_folder(env["gpu_slug"]) / "conv_counts.csv"
    rows = count_rows(args.problems, args.stages)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    results.replace_file(path, buffer.getvalue())
    print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
