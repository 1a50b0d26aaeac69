"""The GPU verdict ledger, tests/gpu_verdicts.json: for every CUDA C++ source (kernels/**/*.cu, *.cuh) the
sha256 of its bytes, the verdict of the `make gpu-test` run that saw those bytes, that run's GPU and date.

On a CPU the CUDA C++ kernels are only compiled; test_gpu_ledger.py fails `make test` for a source whose
current bytes have no "pass" here. What a GPU run writes (conftest.py's pytest_sessionfinish):
- every gpu test passed: "pass" for every source; an entry that already passed at the same hash stays as
  it was (that run saw the same bytes), so the diff lists only the sources this run newly verified;
- a gpu test failed: "fail" for every source at its current hash, earlier passes included, since the
  suite cannot tell which source broke;
- a gpu test skipped, or not the whole gpu suite run to its end: nothing, since that run did not check
  every kernel.
A run may be one part of the suite (`make gpu-test PART=k/n`: every n-th gpu test from the k-th on), so
that each part fits a time limit. A passing part adds k to the parts a source passed at its current
bytes; the source is verified once all n parts passed at those bytes. A failing part fails them all.
Sources no longer in the tree are dropped. The ledger covers the CUDA C++ bytes only: the Python kernels and
launchers run in the simulator on every `make test`.
"""

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "tests" / "gpu_verdicts.json"


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
    parts = entry.get("parts")
    return entry.get("verdict") == "pass" and (parts is None or sorted(parts) == list(range(1, entry["of"] + 1)))


def build(old: dict, current: dict[str, str], result: str, gpu: str, day: str, part=None) -> dict:
    """The ledger after a run with verdict `result` over the sources `current` ({path: sha256}); `part`
    (k, n) for a run of part k of n."""
    ledger = {}
    for path, digest in current.items():
        kept = old.get(path, {})
        same = kept.get("sha256") == digest and kept.get("verdict") == "pass"
        if result == "pass" and same and (part is None or _complete(kept)):
            ledger[path] = kept
        elif result == "pass" and part is not None:
            k, n = part
            parts = set(kept["parts"]) if same and kept.get("of") == n else set()
            ledger[path] = {"sha256": digest, "verdict": result, "gpu": gpu, "date": day, "parts": sorted(parts | {k})}
            ledger[path]["of"] = n
        else:
            ledger[path] = {"sha256": digest, "verdict": result, "gpu": gpu, "date": day}
    return ledger


def unverified(ledger: dict, current: dict[str, str]) -> list[str]:
    """The sources whose current bytes have no passing GPU verdict (of the whole suite, or of all its parts)."""
    return sorted(
        path
        for path, digest in current.items()
        if ledger.get(path, {}).get("sha256") != digest or not _complete(ledger[path])
    )


def record(path: Path, outcomes: dict[str, str], gpu: str, day: str, root: Path = ROOT, part=None) -> str:
    """Write the run's verdict on every source under root into the ledger at path; return what was done.
    ``part``: (k, n) for a run of part k of n of the suite."""
    result = verdict(outcomes)
    if result is None:
        skipped = sum(o == "skipped" for o in outcomes.values())
        return (
            f"GPU verdicts not written to {path}: {skipped} of {len(outcomes)} gpu tests skipped, "
            "so this run did not check every kernel"
        )
    current = sources(root)
    path.write_text(dumps(build(load(path), current, result, gpu, day, part)))
    of = f" (part {part[0]} of {part[1]})" if part else ""
    return f"GPU verdicts: '{result}'{of} for the {len(current)} CUDA C++ sources at their current hashes, in {path}"
