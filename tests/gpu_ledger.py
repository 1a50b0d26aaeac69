"""The GPU verdict ledger, tests/gpu_verdicts.json: for every CUDA C++ source (kernels/**/*.cu, *.cuh) the
sha256 of its bytes, the verdict of the `make gpu-test` run that saw those bytes, and that run: the GPU's
name, the commit, the date and the pytest report it kept under tests/gpu_reports/ with the sha256 of it.

On a CPU the CUDA C++ kernels are only compiled; test_gpu_ledger.py fails `make test` for a source whose
current bytes have no "pass" here, and for an entry not tied to a run: one without its run's commit, GPU
or report, whose report is missing or has other bytes than its digest says, or whose report does not
list the source at the entry's bytes with the entry's verdict. Editing a hash by hand therefore turns
nothing green. What a GPU run writes (conftest.py's pytest_sessionfinish):
- every gpu test passed: "pass" for every source; an entry that already passed at the same hash stays as
  it was (that run saw the same bytes), so the diff lists only the sources this run newly verified;
- a gpu test failed: "fail" for every source at its current hash, earlier passes included, since the
  suite cannot tell which source broke;
- a gpu test skipped, not the whole gpu suite run to its end, or the commit unknown (a copy that is not a
  git checkout, without BOOK_COMMIT): nothing, since that run did not check every kernel, or cannot say
  which commit it checked.
A run may be one part of the suite (`make gpu-test PART=k/n`: every n-th gpu test from the k-th on), so
that each part fits a time limit. A passing part adds its run under "k/n" to the runs a source passed at
its current bytes; the source is verified once all n parts passed at those bytes. A failing part fails
them all. Sources no longer in the tree are dropped, and so are reports no entry names.

The entries written before runs kept their reports (up to the migration, on 2026-12-07) have no run: each
is accepted only as it was then, byte for byte in tests/gpu_verdicts_legacy.json, whose own sha256 is
pinned below. Any entry written since needs its run and report. The ledger covers the CUDA C++ bytes only:
the Python kernels and launchers run in the simulator on every `make test`. A report's digest shows that
the ledger and the report agree, not that the run happened: it makes a hand edit visible, not impossible.
"""

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "tests" / "gpu_verdicts.json"
REPORTS_FOLDER = "gpu_reports"  # beside the ledger: the reports of the runs its entries name
# The entries written before runs kept reports, as they were: the only entries accepted without a run.
LEGACY = ROOT / "tests" / "gpu_verdicts_legacy.json"
LEGACY_SHA256 = "5dc19c19d404b96f7b5a74d01cd59a7cd6f382b6f80f22ca6053fbc0998fc1d6"


def sources(root: Path = ROOT) -> dict[str, str]:
    """{path relative to root: sha256 of its bytes} for every CUDA C++ source under root/kernels."""
    files = [p for pattern in ("*.cu", "*.cuh") for p in (root / "kernels").rglob(pattern)]
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files)}


def load(path: Path = LEDGER) -> dict:
    """The committed ledger; an absent file verifies nothing."""
    return json.loads(path.read_text()) if path.is_file() else {}


def dumps(ledger: dict) -> str:
    """Sorted, one source a line, so a GPU run's diff shows one line per source it changed."""
    lines = [f"  {json.dumps(path)}: {json.dumps(entry, sort_keys=True)}" for path, entry in sorted(ledger.items())]
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"


def verdict(outcomes: dict[str, str]) -> str | None:
    """A run's verdict from {test id: 'passed' | 'failed' | 'skipped'} of its gpu tests: 'fail' if one failed,
    'pass' if all passed, None if none ran or one was skipped (the run proves nothing about its kernel)."""
    if "failed" in outcomes.values():
        return "fail"
    if outcomes and set(outcomes.values()) == {"passed"}:
        return "pass"
    return None


def parse_part(text: str | None) -> tuple[int, int] | None:
    """`make gpu-test PART=k/n` as (k, n); None for the whole suite (no PART); a ValueError naming the form."""
    if not text:
        return None
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"PART: expected k/n with 1 <= k <= n (part k of n), got {text!r}")
    return int(k), int(n)


def _complete(entry: dict) -> bool:
    """A passing entry of the whole suite, or of all its parts."""
    if entry.get("verdict") != "pass":
        return False
    if "runs" not in entry:  # written before runs kept their reports
        parts = entry.get("parts")
        return parts is None or sorted(parts) == list(range(1, entry["of"] + 1))
    keys = sorted(entry["runs"])
    n = keys[0].partition("/")[2] if keys else ""
    return n.isdigit() and keys == sorted(f"{k}/{n}" for k in range(1, int(n) + 1))


def build(old: dict, current: dict[str, str], result: str, run: dict, part=None) -> dict:
    """The ledger after a run ``run`` (gpu, commit, date, report, report_sha256) with verdict ``result`` over
    the sources ``current`` ({path: sha256}); ``part`` (k, n) for a run of part k of n."""
    k, n = part or (1, 1)
    ledger = {}
    for path, digest in current.items():
        kept = old.get(path, {})
        same = kept.get("sha256") == digest and kept.get("verdict") == "pass"
        if result == "pass" and same and _complete(kept):
            ledger[path] = kept
            continue
        runs = {}
        if result == "pass" and same and "runs" in kept and all(key.endswith(f"/{n}") for key in kept["runs"]):
            runs = dict(kept["runs"])  # the other parts that passed at these bytes
        runs[f"{k}/{n}"] = run
        ledger[path] = {"sha256": digest, "verdict": result, "runs": dict(sorted(runs.items()))}
    return ledger


def unverified(ledger: dict, current: dict[str, str]) -> list[str]:
    """The sources whose current bytes have no passing GPU verdict (of the whole suite, or of all its parts)."""
    return sorted(
        path
        for path, digest in current.items()
        if ledger.get(path, {}).get("sha256") != digest or not _complete(ledger[path])
    )


def report_text(outcomes: dict[str, str], result: str, current: dict[str, str], run: dict, part=None) -> str:
    """The report a run keeps: its GPU, commit, date and part, each gpu test's outcome, its verdict and
    the sources it saw ({path: sha256})."""
    k, n = part or (1, 1)
    report = run | {"part": f"{k}/{n}", "verdict": result, "tests": dict(sorted(outcomes.items())), "sources": current}
    return json.dumps(report, indent=1, sort_keys=True) + "\n"


def record(path: Path, outcomes: dict[str, str], gpu: str, day: str, commit: str, root: Path = ROOT, part=None) -> str:
    """Keep the run's report beside the ledger at path (in gpu_reports/) and write the run's verdict on every
    source under root into the ledger; return what was done. ``part``: (k, n) for a run of part k of n."""
    result = verdict(outcomes)
    if result is None:
        skipped = sum(o == "skipped" for o in outcomes.values())
        return (
            f"GPU verdicts not written to {path}: {skipped} of {len(outcomes)} gpu tests skipped, "
            "so this run did not check every kernel"
        )
    if not commit or commit == "unknown":
        return (
            f"GPU verdicts not written to {path}: the commit this run checked is unknown (not a git checkout): "
            "set BOOK_COMMIT to it and run again"
        )
    current = sources(root)
    run = {"gpu": gpu, "commit": commit, "date": day}
    text = report_text(outcomes, result, current, run, part)
    digest = hashlib.sha256(text.encode()).hexdigest()
    k, n = part or (1, 1)
    report = Path(REPORTS_FOLDER) / f"{day}_{commit[:12]}_part{k}of{n}_{digest[:12]}.json"
    (path.parent / report).parent.mkdir(parents=True, exist_ok=True)
    (path.parent / report).write_text(text)
    ledger = build(load(path), current, result, run | {"report": report.as_posix(), "report_sha256": digest}, part)
    path.write_text(dumps(ledger))
    named = {r["report"] for entry in ledger.values() for r in entry.get("runs", {}).values()}
    for old in (path.parent / REPORTS_FOLDER).glob("*.json"):  # reports no entry names any more
        if f"{REPORTS_FOLDER}/{old.name}" not in named:
            old.unlink()
    of = f" (part {k} of {n})" if part else ""
    kept = (path.parent / report).exists()
    return (
        f"GPU verdicts: '{result}'{of} for the {len(current)} CUDA C++ sources at their current hashes, in {path}; "
        + (
            f"the run's report in {path.parent / report}"
            if kept
            else "every source had passed at these bytes before, so the ledger and its reports stay as they were"
        )
    )


RUN_KEYS = ("gpu", "commit", "date", "report", "report_sha256")


def problems(ledger: dict, path: Path = LEDGER) -> list[str]:
    """Why entries of the ledger at ``path`` are not tied to a run (the module's docstring): one line each."""
    legacy = load(path.parent / LEGACY.name)
    out = []
    for source, entry in sorted(ledger.items()):
        if "runs" not in entry:
            if legacy.get(source) != entry:
                out.append(
                    f"{source}: no run (commit, GPU, report) behind its verdict, and not an entry written before "
                    f"runs kept reports ({LEGACY.name}): run `make gpu-test` on a GPU and commit what it writes"
                )
            continue
        for key, run in entry["runs"].items():
            where = f"{source}, run {key}"
            lacking = [k for k in RUN_KEYS if not run.get(k) or run.get(k) == "unknown"]
            if lacking:
                out.append(f"{where}: lacks {lacking}")
                continue
            report = path.parent / run["report"]
            if not report.is_file():
                out.append(f"{where}: its report {run['report']} is missing")
                continue
            text = report.read_bytes()
            if hashlib.sha256(text).hexdigest() != run["report_sha256"]:
                out.append(f"{where}: its report {run['report']} does not match its sha256 (edited since the run?)")
                continue
            kept = json.loads(text)
            said = {k: kept.get(k) for k in ("gpu", "commit", "date", "part", "verdict")}
            want = {k: run[k] for k in ("gpu", "commit", "date")} | {"part": key, "verdict": entry["verdict"]}
            if said != want or kept.get("sources", {}).get(source) != entry["sha256"]:
                out.append(
                    f"{where}: its report says {said} with {source} at "
                    f"{kept.get('sources', {}).get(source)}, not {want} at {entry['sha256']}"
                )
    return out
