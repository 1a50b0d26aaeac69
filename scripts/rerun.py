"""Re-execute one chapter on this machine's GPU and print its numbers beside the reference GPU's.

    python scripts/rerun.py machine            # executed copy in build/rerun/<gpu>/, committed notebook untouched
    python scripts/rerun.py machine --update   # maintainers: refresh the committed notebook in place

The notebook appends its measurements to data/results/<gpu>/<chapter>.csv as it runs.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.harness import device, results  # noqa: E402


def chapter_notebooks(chapter: str) -> list[Path]:
    """Notebooks whose name, without its leading number, starts with ``chapter`` (02_ssim_worklog -> ssim)."""
    found = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
             if re.sub(r"^\d+[a-z]?_", "", p.stem).startswith(chapter)]
    if not found:
        names = sorted({re.sub(r"^\d+[a-z]?_", "", p.stem).split("_")[0] for p in (ROOT / "notebooks").glob("*.ipynb")})
        raise SystemExit(f"no notebook for chapter {chapter!r}; chapters: {', '.join(names)}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter")
    parser.add_argument("--update", action="store_true", help="write the executed notebook over the committed one")
    args = parser.parse_args()
    notebooks = chapter_notebooks(args.chapter)
    if device.MODE != device.GPU:
        raise SystemExit("make rerun needs a CUDA GPU and found none; without one, run `make test` "
                         "(the notebooks then run in the CUDA simulator)")
    import nbformat
    import papermill

    env = device.environment()
    mine, reference = env["gpu_slug"], results.REFERENCE_GPU
    before = results.latest(args.chapter, reference)  # the reference as committed, before this run appends
    out_dir = ROOT / "build" / "rerun" / mine
    out_dir.mkdir(parents=True, exist_ok=True)
    for nb in notebooks:
        target = nb if args.update else out_dir / nb.name
        print(f"executing {nb.relative_to(ROOT)} on {env['gpu']} -> {target.relative_to(ROOT)}", flush=True)
        papermill.execute_notebook(str(nb), str(target), parameters={"profile": "full"},
                                   cwd=str(nb.parent), kernel_name="python3", progress_bar=False)
        executed = nbformat.read(target, as_version=4)
        executed.metadata["lab_run"] = {k: env.get(k) for k in
                                        ("gpu", "cc", "driver", "cuda_runtime", "commit", "date",
                                         "max_sm_clock_mhz", "max_mem_clock_mhz")}
        nbformat.write(executed, target)
    after = results.latest(args.chapter, mine)
    print(f"\n{args.chapter}: this run on {env['gpu']} vs reference {reference} (as committed)")
    print(f"{'kernel':<16} {'problem':<26} {'metric':<28} {'this GPU':>12} {'reference':>12} {'ratio':>7}")
    for key in sorted(after):
        row = after[key]
        if row["commit"] != env["commit"] or row["date"] < env["date"]:
            continue  # only what this run measured
        ours = float(row["value"])
        ref = float(before[key]["value"]) if key in before else None
        ratio = f"{ours / ref:7.3f}" if ref else "      -"
        ref_s = f"{ref:12.4g}" if ref is not None else f"{'-':>12}"
        print(f"{key[0]:<16.16} {key[1]:<26.26} {key[2]:<28.28} {ours:12.4g} {ref_s} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
