"""Re-execute one chapter on this machine's GPU and print its numbers beside the reference GPU's.

    python scripts/rerun.py machine            # executed copy in build/rerun/<gpu>/, committed notebook untouched
    python scripts/rerun.py machine --update   # maintainers: refresh the committed notebook
                                               # (on the reference GPU; elsewhere add --force-update)

Every notebook executes into build/rerun/<gpu>/ first. With --update, the committed notebook is replaced
by an atomic rename, and only after its run completed without an error: a run that fails leaves it as
it was, and the failed copy, with its error, in build/rerun/<gpu>/.

The notebook appends its measurements to data/results/<gpu>/<chapter>.csv as it runs (to
$BOOK_RESULTS/<gpu>/<chapter>.csv if BOOK_RESULTS is set, a relative one taken from the repository
root); the reference GPU's numbers always come from the repository's data/results.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from kernels.harness import device, results

ROOT = Path(__file__).resolve().parents[1]


def chapter_notebooks(chapter: str) -> list[Path]:
    """Notebooks whose name, without its leading number, starts with ``chapter`` (02_ssim_worklog -> ssim);
    a whole notebook name (03_conv) names that page alone. An empty name, which every notebook would
    match, is refused."""
    if not isinstance(chapter, str) or not chapter.strip():
        raise SystemExit(f"chapter: expected a chapter's name, such as 'machine', got {chapter!r}")
    if (page := ROOT / "notebooks" / f"{chapter}.ipynb").exists():
        return [page]
    found = [
        p
        for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
        if re.sub(r"^\d+[a-z]?_", "", p.stem).startswith(chapter)
    ]
    if not found:
        names = sorted(re.sub(r"^\d+[a-z]?_", "", p.stem) for p in (ROOT / "notebooks").glob("*.ipynb"))
        raise SystemExit(f"no notebook for chapter {chapter!r}; chapters: {', '.join(names)}")
    return found


def check_update(gpu_slug: str, force: bool) -> None:
    """--update writes over the committed notebooks, which show the reference GPU's run: refuse on
    another GPU unless ``force``."""
    if gpu_slug != results.REFERENCE_GPU and not force:
        raise SystemExit(
            f"--update: this GPU ({gpu_slug}) is not the reference GPU ({results.REFERENCE_GPU}) "
            "whose runs the committed notebooks show; run without UPDATE=1 (the executed copy goes "
            "to build/rerun/), or add --force-update (make rerun UPDATE=1 FORCE=1) to overwrite "
            "the committed notebooks anyway"
        )


def reference_rows(reference: str) -> dict:
    """The reference GPU's newest committed rows, {chapter: {key: row}}, from the repository."""
    return {
        c: results.latest(c, reference, results.REPOSITORY) for c in results.chapters(reference, results.REPOSITORY)
    }


def comparison(mine: str, since: str, before: dict) -> list[str]:
    """The table of what GPU ``mine`` recorded from ``since`` on (in results.RESULTS, which BOOK_RESULTS
    sets), beside the reference rows ``before`` (from reference_rows) and the ratio."""
    lines = [
        f"{'chapter':<10} {'kernel':<18} {'problem':<24} {'metric':<22} {'this GPU':>11} {'reference':>11} {'ratio':>6}"
    ]
    for chapter in results.chapters(mine):
        ours = {
            key: row for key, row in results.latest(chapter, mine).items() if row["date"] >= since
        }  # only what this run measured
        for r in results.compare(ours, before.get(chapter, {})):
            theirs = f"{r['reference']:11.4g}" if r["reference"] is not None else f"{'-':>11}"
            ratio = f"{r['ratio']:6.3f}" if r["ratio"] is not None else f"{'-':>6}"
            lines.append(
                f"{chapter:<10.10} {r['kernel']:<18.18} {r['problem']:<24.24} {r['metric']:<22.22} "
                f"{r['mine']:11.4g} {theirs} {ratio}"
            )
    return lines


def staging(notebook: Path, lab_run: dict) -> Path:
    """Where ``notebook`` executes on the GPU ``lab_run`` names: build/rerun/<gpu-slug>/<its name>."""
    return ROOT / "build" / "rerun" / device.slug(lab_run["gpu"]) / Path(notebook).name


def execute(notebook: Path, target: Path, lab_run: dict, parameters: dict | None = None) -> Path:
    """Execute ``notebook`` (with ``parameters``, by default profile "full") into ``staging(notebook,
    lab_run)``, mark papermill's injected cell remove-cell and store ``lab_run`` in its metadata; then, if
    ``target`` is another path (the committed notebook), rename the executed copy over it atomically.
    Nothing replaces ``target`` unless the run completed with no error output: a failed run raises
    SystemExit naming the executed copy, and ``target`` stays as it was. Returns ``target``."""
    import nbformat
    import papermill

    notebook, target = Path(notebook), Path(target)
    staged = staging(notebook, lab_run)
    staged.parent.mkdir(parents=True, exist_ok=True)
    try:
        papermill.execute_notebook(
            str(notebook),
            str(staged),
            parameters={"profile": "full"} if parameters is None else parameters,
            cwd=str(notebook.parent),
            kernel_name="python3",
            progress_bar=False,
        )
    except Exception as exc:  # papermill's execution error, a dead kernel, a missing kernel spec
        why = (str(exc).strip().splitlines() or [""])[-1]
        raise SystemExit(
            f"{notebook.name} failed ({type(exc).__name__}: {why}); the executed copy is {_shown(staged)}; "
            f"{_shown(target)} was left as it was"
        ) from exc
    executed = nbformat.read(staged, as_version=4)
    errors = [i for i, cell in enumerate(executed.cells) for o in cell.get("outputs", []) if o.output_type == "error"]
    if errors:
        raise SystemExit(
            f"{notebook.name}: cell {errors[0]} holds an error output; the executed copy is {_shown(staged)}; "
            f"{_shown(target)} was left as it was"
        )
    for cell in executed.cells:  # papermill's copy of the parameters: the book shows the original only
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    executed.metadata["lab_run"] = lab_run
    nbformat.write(executed, staged)
    if target.resolve() != staged.resolve():
        results.replace_file(target, staged.read_text(encoding="utf-8"))  # a temporary file, renamed over it
    return target


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter")
    parser.add_argument("--update", action="store_true", help="write the executed notebook over the committed one")
    parser.add_argument(
        "--force-update",
        action="store_true",
        help=f"--update on a GPU other than the reference GPU ({results.REFERENCE_GPU})",
    )
    args = parser.parse_args()
    if args.force_update and not args.update:
        parser.error("--force-update: only with --update")
    notebooks = chapter_notebooks(args.chapter)
    if device.MODE != device.GPU:
        raise SystemExit(
            "make rerun needs a CUDA GPU and found none; without one, run `make test` "
            "(the notebooks then run in the CUDA simulator)"
        )
    env = device.environment()
    mine, reference = env["gpu_slug"], results.REFERENCE_GPU
    if args.update:
        check_update(mine, args.force_update)
    # papermill's kernel inherits this environment: it writes where the comparison below reads.
    os.environ["BOOK_RESULTS"] = str(results.RESULTS)
    # The reference as committed, before this run appends (when this GPU is the reference GPU).
    before = reference_rows(reference)
    lab_run = {
        k: env.get(k)
        for k in ("gpu", "cc", "driver", "cuda_runtime", "commit", "date", "max_sm_clock_mhz", "max_mem_clock_mhz")
    } | {"software": device.software()}
    for nb in notebooks:
        staged = staging(nb, lab_run)
        target = nb if args.update else staged
        print(f"executing {nb.relative_to(ROOT)} on {env['gpu']} -> {target.relative_to(ROOT)}", flush=True)
        execute(nb, target, lab_run)
    print(f"\nThis run on {env['gpu']} vs the reference GPU {reference} (as committed)")
    print("\n".join(comparison(mine, env["date"], before)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
