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


def build(old: dict, current: dict[str, str], result: str, gpu: str, day: str) -> dict:
    """The ledger after a run with verdict `result` over the sources `current` ({path: sha256})."""
    ledger = {}
    for path, digest in current.items():
        kept = old.get(path, {})
        if result == "pass" and kept.get("sha256") == digest and kept.get("verdict") == "pass":
            ledger[path] = kept
        else:
            ledger[path] = {"sha256": digest, "verdict": result, "gpu": gpu, "date": day}
    return ledger


def unverified(ledger: dict, current: dict[str, str]) -> list[str]:
    """The sources whose current bytes have no passing GPU verdict."""
    return sorted(
        path
        for path, digest in current.items()
        if ledger.get(path, {}).get("sha256") != digest or ledger[path].get("verdict") != "pass"
    )


def record(path: Path, outcomes: dict[str, str], gpu: str, day: str, root: Path = ROOT) -> str:
    """Write the run's verdict on every source under root into the ledger at path; return what was done."""
    result = verdict(outcomes)
    if result is None:
        skipped = sum(o == "skipped" for o in outcomes.values())
        return (
            f"GPU verdicts not written to {path}: {skipped} of {len(outcomes)} gpu tests skipped, "
            "so this run did not check every kernel"
        )
    current = sources(root)
    path.write_text(dumps(build(load(path), current, result, gpu, day)))
    return f"GPU verdicts: '{result}' for the {len(current)} CUDA C++ sources at their current hashes, in {path}"
