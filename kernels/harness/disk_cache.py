"""An on-disk cache of what the compilers and disassemblers answer (cubins with ptxas's report, SASS
text), shared by every process: a rerun of the book compiles each kernel variant once, and
scripts/precompile.py can fill the cache for the notebooks on every core first.

An entry is named by a hash of everything that decides it (source, headers, options, compiler
version), so it is never stale. A write goes to a temporary file that is then renamed into place,
so processes writing and reading at once see whole entries only. The folder is ``$BOOK_CACHE``,
else build/cache in the repository; ``BOOK_CACHE=off`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def folder() -> Path | None:
    """Where the entries live; None when the cache is off."""
    env = os.environ.get("BOOK_CACHE", "")
    if env == "off":
        return None
    return Path(env) if env else ROOT / "build" / "cache"


def key(*parts) -> str:
    """A hex name for ``parts`` (bytes as they are, anything else by its repr), each length-prefixed
    so that no two different lists of parts run together into one name."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else repr(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def get(kind: str, name: str) -> bytes | None:
    """The entry ``name`` of ``kind`` (a subfolder: "nvrtc", "sass", ...), or None."""
    base = folder()
    if base is None:
        return None
    try:
        return (base / kind / name).read_bytes()
    except OSError:
        return None


def put(kind: str, name: str, data: bytes) -> None:
    """Store ``data`` as entry ``name`` of ``kind``; where the folder cannot be written, store nothing."""
    base = folder()
    if base is None:
        return
    sub = base / kind
    try:
        sub.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=sub, prefix=f".{name}.")
    except OSError:
        return  # a read-only checkout: the same results, computed again
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, sub / name)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def pack(text: str, data: bytes) -> bytes:
    """One entry of a compiler's report and its output (a cubin): the report's length first."""
    encoded = text.encode()
    return len(encoded).to_bytes(8, "little") + encoded + data


def unpack(entry: bytes) -> tuple[str, bytes]:
    """(report, output) of a ``pack``ed entry."""
    size = int.from_bytes(entry[:8], "little")
    return entry[8 : 8 + size].decode(), entry[8 + size :]
