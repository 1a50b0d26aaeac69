"""Record measurements in ``data/results/<gpu-slug>/<chapter>.csv``, one row per number, and read them back.

Rows are only appended, and each GPU has its own folder, so no run overwrites another GPU's
results. Every row carries the GPU, driver, CUDA version, clocks, commit and date of its run.
A batch of rows is all or nothing: under an exclusive lock of the GPU's folder, the file with the
batch appended is written beside it, fsync'ed and renamed over it, so a writer killed at any point
leaves the file as it was before the batch or with all of it, and processes recording at once
neither write the header twice nor mix their rows. A last line without its newline (left by a
writer of an older version, or a copy cut short) is cut, with a warning naming the file, the line
and what it held, by the next ``record`` and by ``read``.

What ``record`` writes, ``read`` reads back the same: a row has exactly the keys ROW_KEYS, its
value is a finite real number (or a string of one; not a bool or an array), its other fields one-line strings;
a GPU slug and a chapter are plain names (no ``/``, ``..`` or empty name), checked on reading too.

``BOOK_RESULTS`` may name another folder for this run's rows; a relative one is taken from the
repository root (ROOT), wherever the process runs: the notebooks' kernel runs in notebooks/,
scripts/rerun.py in the root, and both must name the same folder.
"""

from __future__ import annotations

import csv
import fcntl
import io
import math
import numbers
import os
import re
import sys
import warnings
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import device

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "data" / "results"  # the committed runs
ENV_COLUMNS = ("date", "commit", "gpu", "driver", "cuda_runtime", "sm_clock_mhz", "mem_clock_mhz")
# The GPU whose runs the committed notebooks show; in the simulator, timing cells show its rows.
REFERENCE_GPU = "nvidia-h100-80gb-hbm3"
COLUMNS = ENV_COLUMNS + ("chapter", "kernel", "problem", "metric", "value", "unit")
ROW_KEYS = ("kernel", "problem", "metric", "value", "unit")
TEXT_KEYS = ("kernel", "problem", "metric", "unit")
# A folder or file name: no separator, no "..", not empty, not hidden.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def gpu_slug_name(slug) -> str:
    """``slug`` if it names a GPU's folder (device.slug gives 'nvidia-h100-80gb-hbm3'), else a ValueError:
    a '/', '..' or empty name would write or read outside the results folder."""
    if not isinstance(slug, str) or not NAME.fullmatch(slug) or ".." in slug:
        raise ValueError(
            f"gpu_slug: expected a folder name of letters, digits, '.', '_' and '-' such as "
            f"{REFERENCE_GPU!r} (no '/', '..' or empty name), got {slug!r}"
        )
    return slug


def chapter_name(chapter) -> str:
    """``chapter`` if it is a short identifier like 'machine' (the stem of its CSV), else a ValueError."""
    if not isinstance(chapter, str) or not chapter.isidentifier() or not chapter.isascii():
        raise ValueError(f"chapter: expected a short identifier like 'machine', got {chapter!r}")
    return chapter


def results_folder(named: str | None) -> Path:
    """The folder that BOOK_RESULTS (``named``) names, absolute: a relative one is taken from ROOT, the
    repository root, not from the working directory. Unset or empty: REPOSITORY."""
    return ROOT / Path(named).expanduser() if named else REPOSITORY


# Where this run's rows go: BOOK_RESULTS may name another folder (a student's own, empty at first).
RESULTS = results_folder(os.environ.get("BOOK_RESULTS"))


def gpu_folder(gpu_slug: str, root: Path | None = None) -> Path:
    """The folder of one GPU's results under ``root`` (by default RESULTS), created, to write in.

    Refuses a folder inside ROOT when this copy of the package was installed without the repository
    (``pip install .`` copies kernels/ alone into site-packages, with no data/ beside it): the rows
    would be lost with the next install."""
    gpu_slug_name(gpu_slug)
    base = Path(root or RESULTS)
    installed = not (ROOT / "data").is_dir() or {"site-packages", "dist-packages"} & set(ROOT.parts)
    if installed and base.resolve().is_relative_to(ROOT):
        raise RuntimeError(
            f"results: {base} is inside {ROOT}, a copy of the package installed without the "
            "repository's data/: install the repository with `pip install -e .`, or set "
            "BOOK_RESULTS to an absolute folder for your results"
        )
    folder = base / gpu_slug
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def finite(value) -> bool:
    """Whether ``value`` reads as a finite number."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _number(value) -> bool:
    """A finite real number, or a string of one, as the CSV writes it and reads it back: no bool (written
    'True'), no array (written '[1.]')."""
    if isinstance(value, str):
        return "\n" not in value and "\r" not in value and finite(value)
    real = isinstance(value, numbers.Real) or isinstance(value, (np.integer, np.floating))
    return real and not isinstance(value, (bool, np.bool_)) and math.isfinite(float(value))


def _check_row(row) -> None:
    if not isinstance(row, dict):
        raise TypeError(f"rows: expected dicts with the keys {list(ROW_KEYS)}, got {type(row).__name__} {row!r}")
    missing = set(ROW_KEYS) - row.keys()
    if missing:
        raise ValueError(f"a results row lacks {sorted(missing)}: {row}")
    clash = sorted((set(ENV_COLUMNS) | {"chapter", "gpu_slug"}) & row.keys())
    if clash:
        raise ValueError(f"a results row sets {clash}, which the run's environment sets: {row}")
    unknown = sorted(map(str, row.keys() - set(ROW_KEYS)))
    if unknown:
        raise ValueError(
            f"a results row has keys the file has no column for, {unknown}: they would be lost; "
            f"a row has exactly {list(ROW_KEYS)}: {row}"
        )
    if not _number(row["value"]):
        raise ValueError(
            f"value: expected a finite number (an int or a float, or a string of one; not a bool or an array), "
            f"got {row['value']!r} in {row}"
        )
    for key in TEXT_KEYS:
        if not isinstance(row[key], str) or "\n" in row[key] or "\r" in row[key]:
            raise ValueError(f"{key}: expected a string of one line, got {row[key]!r} in {row}")


def _check_env(env) -> None:
    if not isinstance(env, dict):
        raise TypeError(f"env: expected a dict like device.environment(), got {type(env).__name__}")
    if "gpu_slug" not in env:
        raise ValueError("env: lacks ['gpu_slug'], the folder of the GPU's rows (device.environment() gives it)")
    gpu_slug_name(env["gpu_slug"])


def record(chapter: str, rows: Iterable[dict], env: dict | None = None, root: Path | None = None) -> Path | None:
    """Append ``rows`` (each with exactly kernel, problem, metric, value, unit) for this run's GPU, all or
    none of them.

    The environment columns come from ``env`` (by default this run's), never from a row.
    Returns the CSV path, or None in the simulator: simulated runs are not measurements.
    """
    chapter_name(chapter)
    if isinstance(rows, dict):
        raise TypeError("rows: expected a list of rows, got one row (a dict): pass [row]")
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
        raise TypeError(f"rows: expected a list of row dicts, got {type(rows).__name__}")
    rows = list(rows)  # a generator would be used up by the checks below
    if not rows:
        raise ValueError("rows: expected at least one measurement")
    for row in rows:
        _check_row(row)
    if device.MODE != device.GPU and env is None:
        return None
    env = env or device.environment()
    _check_env(env)
    folder = gpu_folder(env["gpu_slug"], root)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writerows({**{k: env.get(k, "") for k in ENV_COLUMNS}, "chapter": chapter, **row} for row in rows)
    return _append(folder / f"{chapter}.csv", text.getvalue())


def _header_line() -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(COLUMNS)
    return buffer.getvalue().encode()


def _torn_tail(path: Path, data: bytes) -> bytes:
    """``data`` less a last line without its newline, with a warning naming the file, the line and what
    it held (a writer killed mid-row)."""
    if not data or data.endswith(b"\n"):
        return data
    cut = data.rfind(b"\n") + 1
    line = data.count(b"\n") + 1
    torn = data[cut:].decode(errors="replace")
    shown = torn if len(torn) <= 200 else torn[:200] + "..."
    warnings.warn(
        f"{path}, line {line}: the last line has no newline (a writer killed mid-row): left out: {shown!r}",
        stacklevel=3,
    )
    return data[:cut]


def _append(path: Path, text: str) -> Path:
    """Write ``path`` with the rows ``text`` appended, all at once: under an exclusive lock of its folder,
    the whole new file goes into a temporary file beside it, fsync'ed, then renamed over it.

    The header goes first into a new file (decided under the lock: two processes creating the file at
    once write it once); an existing file's header must be COLUMNS; a torn last line is cut first."""
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # released when the folder's descriptor closes
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # of a writer killed before its rename
            stale.unlink(missing_ok=True)
        data = _torn_tail(path, path.read_bytes() if path.exists() else b"")
        if data:
            _check_header(path, data[: data.find(b"\n")].decode(errors="replace"), appending=True)
        data = data or _header_line()
        _write_whole(path, data + text.encode())
        os.fsync(folder)  # the rename itself
    finally:
        os.close(folder)
    return path


def _write_whole(path: Path, data: bytes) -> None:
    """``data`` as the whole of ``path``: a temporary file beside it, fsync'ed, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _check_header(path: Path, line: str, appending: bool = False) -> None:
    header = next(csv.reader([line]), [])
    if tuple(header) == COLUMNS:
        return
    if sorted(header) == sorted(COLUMNS):
        why = "has the results columns in another order"
    else:
        why = f"is not {list(COLUMNS)}"
    if appending:
        raise ValueError(
            f"{path}: its header {header} {why}; appending would shift every field: move the file aside "
            "(or rewrite it with the columns in order) first"
        )
    raise ValueError(f"{path}, line 1: the header {header} {why}")


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` as the whole of ``path``: into a temporary file beside it, fsync'ed, then renamed over
    it, so a killed run leaves the old file or the new one, never half of one (the profilers' CSVs)."""
    _write_whole(Path(path), text.encode())


_READ: dict[str, tuple] = {}  # path: (the stat of the bytes parsed, their rows)
_READING: list[set] = []  # the slugs each open ``reading()`` has seen read
_AUDITING = False


@contextmanager
def reading():
    """While it lasts, the set it yields collects the GPU slugs whose stored files are read: through ``read``
    (a cached parse too) or any file opened under RESULTS or REPOSITORY (a profiler's CSV). The exercises'
    checker uses it to take answers only from the GPU the page ran on."""
    global _AUDITING
    if not _AUDITING:  # once per process; it does nothing outside a reading()
        sys.addaudithook(_audited)
        _AUDITING = True
    found: set = set()
    _READING.append(found)
    try:
        yield found
    finally:
        _READING.remove(found)


def _audited(event: str, args: tuple) -> None:
    if _READING and event == "open" and isinstance(args[0], (str, os.PathLike)):  # cheap first: it sees every event
        _note(args[0])


def _note(path) -> None:
    """Count ``path``'s GPU for every open ``reading()`` if it lies in a GPU's folder of a results root."""
    if not _READING:
        return
    path = os.path.abspath(path)
    for root in (RESULTS, REPOSITORY):
        relative = os.path.relpath(path, os.path.abspath(root))
        parts = Path(relative).parts
        if len(parts) >= 2 and parts[0] not in ("..", "."):
            for found in _READING:
                found.add(parts[0])


def read(path: Path) -> list[dict]:
    """The rows of one results CSV; ValueError naming the file, line and field of what is wrong: a header
    other than COLUMNS (in another order too), a row of another number of fields, a value that is not a
    finite number. A last line without its newline (a writer killed mid-row) is left out with a warning
    naming it, as ``record`` cuts it. A file read before and not replaced or changed since is not parsed
    again (the model behind best_step reads the same stored quantities many times); the caller gets its
    own copies of the rows."""
    _note(path)
    st = Path(path).stat()
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if _READ.get(str(path), (None,))[0] != stamp:
        _READ[str(path)] = (stamp, _parse(Path(path)))
    return [dict(r) for r in _READ[str(path)][1]]


def _parse(path: Path) -> list[dict]:
    data = _torn_tail(path, path.read_bytes())
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 ({e.reason})") from e
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = next(reader, None)
        if header is not None:
            _check_header(path, text.partition("\n")[0])
        for fields in reader:
            where = f"{path}, line {reader.line_num}"
            if not fields:
                continue
            if len(fields) != len(COLUMNS):
                raise ValueError(f"{where}: expected {len(COLUMNS)} fields, got {len(fields)}: {fields}")
            row = dict(zip(COLUMNS, fields, strict=True))
            if not finite(row["value"]):
                raise ValueError(f"{where}, field 'value': expected a finite number, got {row['value']!r}")
            rows.append(row)
    except csv.Error as e:
        raise ValueError(f"{path}, line {reader.line_num}: {e}") from e
    return rows


def load(chapter: str, gpu_slug: str, root: Path | None = None) -> list[dict]:
    """One chapter's rows for one GPU, from ``root``; by default from RESULTS, or from the repository
    where RESULTS has no file for that GPU and chapter (the reference GPU's stored numbers, which a
    student's own BOOK_RESULTS folder lacks)."""
    name = f"{chapter_name(chapter)}.csv"
    path = Path(root or RESULTS) / gpu_slug_name(gpu_slug) / name
    if root is None and not path.exists():
        path = REPOSITORY / gpu_slug / name
    return read(path) if path.exists() else []


def latest(chapter: str, gpu_slug: str, root: Path | None = None) -> dict:
    """The newest value of every (kernel, problem, metric) for one GPU: {key: row}."""
    rows = sorted(load(chapter, gpu_slug, root), key=lambda r: r["date"])
    return {(r["kernel"], r["problem"], r["metric"]): r for r in rows}


# Columns that make a CSV a results file (a profiler's dump beside them has none of them).
IDENTITY = {"date", "gpu", "chapter"}


def chapters(gpu_slug: str, root: Path | None = None) -> list[str]:
    """The chapters with results for one GPU: CSV files in this module's format (profiler dumps beside them
    are not). A results file whose header differs from COLUMNS (reordered, a column missing) is an error
    naming it, not a chapter quietly left out."""
    out = []
    for path in sorted((Path(root or RESULTS) / gpu_slug_name(gpu_slug)).glob("*.csv")):
        with path.open(newline="") as f:
            line = f.readline()
        header = next(csv.reader([line]), [])
        if tuple(header) == COLUMNS:
            out.append(path.stem)
        elif IDENTITY <= set(header):
            _check_header(path, line)
    return out


def gpus(root: Path | None = None) -> list[str]:
    base = Path(root or RESULTS)
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.exists() else []


def compare(mine: dict, reference: dict) -> list[dict]:
    """Each row of ``mine`` beside the row of the same (kernel, problem, metric) in ``reference``, both
    {key: row} as ``latest`` gives them: kernel, problem, metric, unit, the two values and mine / reference.
    The reference value is None where it has no row; the ratio is None then and where it is zero."""
    out = []
    for key, row in sorted(mine.items()):
        ours = float(row["value"])
        theirs = float(reference[key]["value"]) if key in reference else None
        out.append(
            {
                "kernel": key[0],
                "problem": key[1],
                "metric": key[2],
                "unit": row["unit"],
                "mine": ours,
                "reference": theirs,
                "ratio": ours / theirs if theirs else None,
            }
        )
    return out


def measured_or_stored(chapter: str, measure, kernels: tuple[str, ...] | str) -> list[dict]:
    """On a GPU: rows = measure(), recorded and returned. Otherwise the reference GPU's newest rows for
    ``kernels``, with one line saying so -- the same rows a GPU run would give, so plots and tables
    downstream have one code path. Kernel names match whole: a single name may be given as a string."""
    chapter_name(chapter)
    if not callable(measure):
        raise TypeError(f"measure: expected a function that measures and returns rows, got {type(measure).__name__}")
    named = isinstance(kernels, (tuple, list)) and all(isinstance(k, str) for k in kernels)
    if not (isinstance(kernels, str) or named):
        raise TypeError(f"kernels: expected a kernel's name or a tuple of names, got {kernels!r}")
    kernels = (kernels,) if isinstance(kernels, str) else tuple(kernels)  # `in` a string matches substrings
    if not kernels:
        raise ValueError("kernels: name at least one kernel whose rows to return")
    if device.MODE == device.GPU:
        rows = measure()
        record(chapter, rows)
        return rows
    stored = [r for r in latest(chapter, REFERENCE_GPU).values() if r["kernel"] in kernels]
    stored = [{**r, "value": float(r["value"])} for r in stored]
    gpu = stored[0]["gpu"] if stored else REFERENCE_GPU
    print(f"(timing needs a GPU: showing {len(stored)} stored measurements of {', '.join(kernels)} from {gpu})")
    return stored


def value(rows: list[dict], kernel: str, metric: str, problem: str | None = None) -> float:
    """The value of one (kernel, metric[, problem]) among ``rows``; KeyError naming it if absent."""
    for r in rows:
        if r["kernel"] == kernel and r["metric"] == metric and (problem is None or r["problem"] == problem):
            return float(r["value"])
    raise KeyError(f"no row for kernel={kernel!r}, metric={metric!r}, problem={problem!r}")
