"""Re-execute the whole book on this machine's GPU in one sitting: the variants precompiled on every core,
then every notebook in the order ``make rerun-all`` uses (the machine and the probes first: later chapters
quote their rows), each one's time and the total printed.

    python scripts/rerun_book.py                    # executed copies in build/rerun/<gpu>/
    python scripts/rerun_book.py --update           # write them over the committed notebooks
                                                    # (on the reference GPU; elsewhere add --force-update)
    python scripts/rerun_book.py --only 03_conv,05_implicit_gemm_deep_shapes
    python scripts/rerun_book.py --skip-done        # resume: skip what this run already executed
    python scripts/rerun_book.py --budget 540       # start no notebook that would end past 540 s (exit 2)

A notebook that fails does not stop the run; the failures are listed at the end and the exit status is 1.
``--skip-done`` skips each notebook that a run of this commit already executed into the output folder
(build/rerun/<gpu>/book_run.json keeps which), so that a run cut short goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import rerun  # noqa: E402  (scripts/rerun.py: one chapter's notebooks, --update's check, the comparison)
from kernels.harness import device, results  # noqa: E402

STATE = "book_run.json"  # in the output folder: the commit of the run and the notebooks it executed


def chapters() -> list[str]:
    """The chapters in the order ``make rerun-all`` runs them (the Makefile's CHAPTERS)."""
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "print-chapters"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


# Pages that quote rows another page of their chapter measures: that page runs first, so both show one sitting.
RUN_FIRST = {"02b_ssim_beyond": ("02b_ssim_beyond_deep_training",)}  # 02b quotes the training page's step rows


def book_notebooks(order: list[str]) -> list[Path]:
    """Every notebook, chapter by chapter in ``order`` (each chapter's deep-dive pages after it, except those
    RUN_FIRST puts before the page that quotes them)."""
    found = []
    for nb in (nb for chapter in order for nb in rerun.chapter_notebooks(chapter)):
        found += [nb.parent / f"{stem}.ipynb" for stem in RUN_FIRST.get(nb.stem, ())] + [nb]
    missing = sorted(set((ROOT / "notebooks").glob("*.ipynb")) - set(found))
    if missing:
        raise SystemExit(f"notebooks no chapter of the order reaches: {', '.join(p.name for p in missing)}")
    return list(dict.fromkeys(found))


def select(notebooks: list[Path], only: str | None) -> list[Path]:
    """The notebooks ``--only`` names (stems, comma-separated; in the book's order), else all."""
    if not only:
        return notebooks
    names = [n.strip().removesuffix(".ipynb") for n in only.split(",") if n.strip()]
    stems = {nb.stem: nb for nb in notebooks}
    unknown = [n for n in names if n not in stems]
    if unknown:
        raise SystemExit(f"--only: no notebook {', '.join(unknown)}; notebooks: {', '.join(stems)}")
    return [nb for nb in notebooks if nb.stem in names]


def load_state(path: Path, commit: str) -> dict:
    """{notebook stem: seconds} that a run of ``commit`` executed into this folder, else empty."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state.get("done", {}) if state.get("commit") == commit else {}


def save_state(path: Path, commit: str, done: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"commit": commit, "done": done}, indent=1))
    os.replace(tmp, path)


def last_duration(nb: Path) -> float:
    """Seconds papermill took for ``nb`` when it was last executed (its committed metadata), else 0."""
    import nbformat

    return float(nbformat.read(nb, as_version=4).metadata.get("papermill", {}).get("duration") or 0.0)


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the executed notebooks over the committed ones")
    parser.add_argument("--force-update", action="store_true", help="--update on a GPU other than the reference GPU")
    parser.add_argument("--only", help="only these notebooks (stems, comma-separated), in the book's order")
    parser.add_argument("--skip-done", action="store_true", help="skip notebooks this commit's run already executed")
    parser.add_argument("--no-precompile", action="store_true", help="do not compile the variants first")
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds this call may take: start no notebook whose last duration would end past it (resume later)",
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="--budget's guess of a notebook's time: its last duration times this"
    )
    args = parser.parse_args(argv)
    if args.force_update and not args.update:
        parser.error("--force-update: only with --update")
    if device.MODE != device.GPU:
        print("rerun_book needs a CUDA GPU and found none; `make test` runs the notebooks in the simulator")
        return 1
    notebooks = select(book_notebooks(chapters()), args.only)
    env = device.environment()
    mine = env["gpu_slug"]
    if args.update:
        rerun.check_update(mine, args.force_update)
    os.environ["BOOK_RESULTS"] = str(results.RESULTS)  # papermill's kernels write where the comparison reads
    before = rerun.reference_rows(results.REFERENCE_GPU)
    lab_run = {
        k: env.get(k)
        for k in ("gpu", "cc", "driver", "cuda_runtime", "commit", "date", "max_sm_clock_mhz", "max_mem_clock_mhz")
    } | {"software": device.software()}
    out_dir = rerun.staging(Path("book"), lab_run).parent  # where rerun.execute puts each executed copy
    out_dir.mkdir(parents=True, exist_ok=True)
    state_path = out_dir / STATE
    done = load_state(state_path, env["commit"]) if args.skip_done else {}
    began = time.perf_counter()  # --budget counts the precompile too
    if not args.no_precompile:
        start = time.perf_counter()
        status = subprocess.run([sys.executable, str(ROOT / "scripts" / "precompile.py")], cwd=ROOT).returncode
        print(f"precompile: {time.perf_counter() - start:.0f} s{'' if status == 0 else ' (some builds failed)'}")
    durations, failed, left = {}, [], []
    for nb in notebooks:
        if nb.stem in done and (out_dir / nb.name).exists():
            print(f"{nb.stem:45s} done earlier in this run ({done[nb.stem]:.1f} s)", flush=True)
            durations[nb.stem] = done[nb.stem]
            continue
        if left or (args.budget and time.perf_counter() - began + args.scale * last_duration(nb) > args.budget):
            left.append(nb.stem)  # in order: later chapters quote earlier ones' rows
            continue
        start = time.perf_counter()
        try:  # executes into out_dir; with --update, renamed over the committed notebook only if it ran clean
            rerun.execute(nb, nb if args.update else out_dir / nb.name, lab_run)
        except (Exception, SystemExit) as e:  # the next notebook still runs; the failures are listed at the end
            failed.append(nb.stem)
            print(f"{nb.stem:45s} FAILED after {time.perf_counter() - start:.1f} s", flush=True)
            print("\n".join(str(e).strip().splitlines()[-6:]), flush=True)
            continue
        executed = nbformat.read(out_dir / nb.name, as_version=4)
        seconds = float(executed.metadata.get("papermill", {}).get("duration") or 0.0)
        durations[nb.stem] = done[nb.stem] = seconds
        save_state(state_path, env["commit"], done)
        print(f"{nb.stem:45s} {seconds:7.1f} s", flush=True)
    print(f"\n{'total':45s} {sum(durations.values()):7.1f} s ({len(durations)} notebooks on {env['gpu']})")
    print(f"\nThis run on {env['gpu']} vs the reference GPU {results.REFERENCE_GPU} (as committed)")
    print("\n".join(rerun.comparison(mine, env["date"], before)))
    if left:
        print(f"\nLEFT for --skip-done (over --budget): {', '.join(left)}")
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    return 2 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
