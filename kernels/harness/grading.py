"""The process a submitted file runs in, and what it sends back: ``submission.grade`` starts

    python -m kernels.harness.grading FILE REQUESTS OUTCOMES PROTECTED

with FILE the submission, REQUESTS and OUTCOMES the pipes it reads requests from and writes outcomes to, and
PROTECTED the process ids it may not signal. This process decides nothing. It first fences itself in
(``fence``): neither it nor any process it starts may signal the grading process or its ancestors (nor
every process at once), leave its process group (setsid, setpgid) or trace another process, so that the
grading process survives the submission and ends every process it started by ending one group. Then it
loads FILE, and for each request runs the file's ``launch`` once (``exercise.run_case``) and sends the
``Outcome`` back: the output, the inputs after the run, the launches' threads and what they were handed,
and in the simulator every access counted. The grading process judges them.

The messages are JSON with NumPy arrays in .npy format beside it, read back with pickling off: what the
submission sends is data, never code that the grading process would run.
"""

from __future__ import annotations

import ctypes
import importlib.util
import io
import json
import os
import platform
import select
import struct
import sys
import time
from pathlib import Path

import numpy as np

MAX_MESSAGE = 1 << 30  # bytes: an outcome of the exercises' sizes is a few MB at most
FENCE_FAILED = 3  # this process's exit status where it cannot fence itself in


class Gone(Exception):
    """The other end of the pipe closed: the process ended (or closed it)."""


class TimedOut(Exception):
    """The deadline passed before a whole message arrived or left."""


class Malformed(Exception):
    """A message that is not what the protocol sends."""


# --- the wire: JSON with arrays beside it -------------------------------------------------------------------


def _encode(obj, arrays: list):
    if isinstance(obj, np.ndarray):
        arrays.append(obj)
        return {"__array__": len(arrays) - 1}
    if isinstance(obj, np.generic):
        return {"__scalar__": [obj.dtype.str, obj.item()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _encode(v, arrays) for k, v in obj.items()}
    return obj


def _decode(obj, arrays: list):
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__array__" in obj:
        return arrays[obj["__array__"]]
    if "__scalar__" in obj:
        kind, value = obj["__scalar__"]
        dtype = np.dtype(kind)
        if dtype.kind not in "biuf":
            raise Malformed(f"a scalar of dtype {dtype}")
        return dtype.type(value)
    if "__tuple__" in obj:
        return tuple(_decode(v, arrays) for v in obj["__tuple__"])
    return {k: _decode(v, arrays) for k, v in obj.items()}


def pack(obj) -> bytes:
    """``obj`` (JSON values, tuples, NumPy arrays and scalars) as one message."""
    arrays: list = []
    header = json.dumps(_encode(obj, arrays)).encode()
    chunks = [struct.pack("<QQ", len(header), len(arrays)), header]
    for a in arrays:
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(a), allow_pickle=False)
        chunks += [struct.pack("<Q", buffer.tell()), buffer.getvalue()]
    return b"".join(chunks)


def send(fd: int, obj, deadline: float | None = None) -> None:
    data = memoryview(pack(obj))
    while data:
        if deadline is not None:
            _wait(fd, deadline, write=True)
        try:
            sent = os.write(fd, data)
        except BrokenPipeError as exc:
            raise Gone("the pipe closed") from exc
        data = data[sent:]


def _wait(fd: int, deadline: float, write: bool = False) -> None:
    left = deadline - time.monotonic()
    ready = select.select([], [fd], [], max(left, 0))[1] if write else select.select([fd], [], [], max(left, 0))[0]
    if not ready:
        raise TimedOut()


def _read(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            _wait(fd, deadline)
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise Gone("the pipe closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None):
    """The next message from ``fd``; Gone at its end, TimedOut past ``deadline`` (time.monotonic()),
    Malformed for anything the protocol does not send."""
    size, count = struct.unpack("<QQ", _read(fd, 16, deadline))
    if size > MAX_MESSAGE or count > 4096:
        raise Malformed(f"a message of {size} bytes and {count} arrays")
    header = _read(fd, size, deadline)
    arrays, total = [], size
    for _ in range(count):
        (length,) = struct.unpack("<Q", _read(fd, 8, deadline))
        total += length
        if total > MAX_MESSAGE:
            raise Malformed(f"a message of more than {MAX_MESSAGE} bytes")
        try:
            arrays.append(np.load(io.BytesIO(_read(fd, length, deadline)), allow_pickle=False))
        except (ValueError, OSError, EOFError) as exc:
            raise Malformed(f"an array that does not load ({exc})") from exc
    try:
        return _decode(json.loads(header), arrays)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise Malformed(f"a header that does not decode ({type(exc).__name__}: {exc})") from exc


# --- an outcome on the wire ------------------------------------------------------------------------------------

_LOG_FIELDS = ("space", "array", "origin", "address", "size", "write", "block", "thread", "site", "barrier", "atomic")


def pack_log(log: list) -> dict:
    """The accesses as one int64 table and the strings it indexes (a code object becomes its name)."""
    strings: dict[str, int] = {}

    def index(text: str) -> int:
        return strings.setdefault(text, len(strings))

    rows = []
    for a in log:
        code, line, visits = a.site
        where = f"{getattr(code, 'co_filename', code)}:{getattr(code, 'co_firstlineno', 0)}"
        block = (tuple(a.block) + (0, 0, 0))[:3]
        rows.append(
            (index(a.space), index(a.array), a.origin, a.address, a.size, int(a.write), *block, a.thread)
            + (index(where), line, visits, a.barrier, int(a.atomic))
        )
    table = np.array(rows, dtype=np.int64).reshape(len(rows), 15)
    return {"table": table, "strings": list(strings)}


def unpack_log(packed: dict) -> list:
    from .accesses import Access

    strings, table = packed["strings"], packed["table"]
    if not isinstance(table, np.ndarray) or table.dtype != np.int64 or table.ndim != 2 or table.shape[1] != 15:
        raise Malformed("an access table that is not int64 rows of 15 columns")
    if not all(isinstance(s, str) for s in strings) or (table.size and not 0 <= table[:, [0, 1, 10]].min()):
        raise Malformed("an access table's strings")
    try:
        return [
            Access(
                strings[r[0]],
                strings[r[1]],
                int(r[2]),
                int(r[3]),
                int(r[4]),
                bool(r[5]),
                (int(r[6]), int(r[7]), int(r[8])),
                int(r[9]),
                (strings[r[10]], int(r[11]), int(r[12])),
                int(r[13]),
                bool(r[14]),
            )
            for r in table.tolist()
        ]
    except IndexError as exc:
        raise Malformed("an access table that names no string") from exc


def pack_outcome(outcome) -> dict:
    return {
        "out": outcome.out,
        "inputs": list(outcome.inputs),
        "problem": outcome.problem,
        "threads": None if outcome.threads is None else tuple(int(t) for t in outcome.threads),
        "log": None if outcome.log is None else pack_log(outcome.log),
        "input_spans": [[list(s) for s in spans] for spans in outcome.input_spans],
        "fed": bool(outcome.fed),
        "handed": [[name, a] for name, a in outcome.handed],
    }


def unpack_outcome(message):
    """The ``exercise.Outcome`` a message holds, every field checked: Malformed otherwise."""
    from .exercise import Outcome

    try:
        out, inputs = message["out"], message["inputs"]
        problem, threads, fed = message["problem"], message["threads"], message["fed"]
        spans = [[(int(a), int(b)) for a, b in spans] for spans in message["input_spans"]]
        handed = [(str(name), a) for name, a in message["handed"]]
        log = None if message["log"] is None else unpack_log(message["log"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Malformed(f"an outcome without its fields ({type(exc).__name__}: {exc})") from exc
    arrays = [out, *inputs, *(a for _, a in handed)]
    if not all(isinstance(a, np.ndarray) and a.dtype.kind in "biuf" for a in arrays):
        raise Malformed("an outcome whose arrays are not arrays of numbers")
    if problem is not None and not isinstance(problem, str) or not isinstance(fed, bool):
        raise Malformed("an outcome whose problem or flags are not what they should be")
    if threads is not None and not (isinstance(threads, tuple) and all(isinstance(t, int) for t in threads)):
        raise Malformed("an outcome whose threads are not integers")
    return Outcome(out, list(inputs), problem, threads, log, spans, fed, handed)


# --- the fence ------------------------------------------------------------------------------------------------

# Linux's system call numbers, and the audit architecture that names each table.
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_CALLS = {
    "x86_64": {
        "kill": 62,
        "tgkill": 234,
        "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297,
        "tkill": 200,
        "pidfd_send_signal": 424,
        "pidfd_open": 434,
        "ptrace": 101,
        "process_vm_writev": 311,
        "setsid": 112,
        "setpgid": 109,
        "seccomp": 317,
    },
    "aarch64": {
        "kill": 129,
        "tgkill": 131,
        "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240,
        "tkill": 130,
        "pidfd_send_signal": 424,
        "pidfd_open": 434,
        "ptrace": 117,
        "process_vm_writev": 271,
        "setsid": 157,
        "setpgid": 154,
        "seccomp": 277,
    },
}
SIGNALLING = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")  # their first argument names the target
REFUSED = ("tkill", "pidfd_send_signal", "pidfd_open", "ptrace", "process_vm_writev", "setsid", "setpgid")
_LOAD, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF: load a word, jump if equal / if >=, return
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM


def filter_program(protected: list[int], machine: str | None = None) -> list[tuple]:
    """The seccomp filter (BPF instructions) that refuses, with EPERM: the calls of REFUSED; the calls of
    SIGNALLING whose target (their first argument, as a 32-bit integer) is one of ``protected``; every call of
    another architecture's table (32-bit calls on a 64-bit kernel) and, on x86_64, of the x32 table."""
    machine = machine or platform.machine()
    if machine not in _CALLS:
        raise OSError(f"no system call table for {machine} (the fence knows {sorted(_CALLS)})")
    calls = _CALLS[machine]
    program: list = [("load", 4), ("jne", _ARCH[machine], "deny"), ("load", 0)]
    if machine == "x86_64":
        program.append(("jge", 0x40000000, "deny"))
    program += [("jeq", calls[name], "deny") for name in REFUSED]
    program += [("jeq", calls[name], "target") for name in SIGNALLING]
    program += [("ret", _ALLOW), ("label", "target"), ("load", 16)]  # the low word of the first argument
    program += [("jeq", value & 0xFFFFFFFF, "deny") for value in sorted(set(protected))]
    program += [("ret", _ALLOW), ("label", "deny"), ("ret", _EPERM)]
    at, n = {}, 0
    for step in program:
        if step[0] == "label":
            at[step[1]] = n
        else:
            n += 1
    out = []
    for step in program:
        if step[0] == "label":
            continue
        here = len(out)
        if step[0] in ("load", "ret"):
            out.append((_LOAD if step[0] == "load" else _RET, 0, 0, step[1]))
        else:
            jump = at[step[2]] - here - 1
            if not 0 <= jump < 256:
                raise OSError(f"the filter is too long: a jump of {jump}")
            code, taken, skipped = {"jeq": (_JEQ, jump, 0), "jne": (_JEQ, 0, jump), "jge": (_JGE, jump, 0)}[step[0]]
            out.append((code, taken, skipped, step[1]))
    return out


def protected_ids(pid: int) -> list[int]:
    """The targets a submission may not signal: ``pid`` and its ancestors, their process groups (as -pgid), and
    -1 (every process)."""
    ids, seen = [-1], set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        ids += [pid, -os.getpgid(pid)]
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's id
    return ids


def fence(protected: list[int]) -> None:
    """Install ``filter_program(protected)`` on every thread of this process (no_new_privs first, as an
    unprivileged seccomp filter needs); an OSError naming what failed."""
    if sys.platform != "linux":
        raise OSError(f"the fence needs Linux's seccomp, and this is {sys.platform}")
    program = filter_program(protected)
    code = b"".join(struct.pack("HBBI", *step) for step in program)
    buffer = ctypes.create_string_buffer(code)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    prog = SockFprog(len(program), ctypes.addressof(buffer))
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC): every thread at once
    if libc.syscall(_CALLS[platform.machine()]["seccomp"], 1, 1, ctypes.byref(prog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER) failed")


# --- the submission's process ------------------------------------------------------------------------------


def _load_launch(path: Path):
    spec = importlib.util.spec_from_file_location(f"submission_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "launch", None)):
        raise ValueError(f"{path}: defines no function `launch(out, *inputs)`")
    return module.launch


def serve(path: Path, requests: int, outcomes: int, protected: list[int]) -> int:
    """Fence this process in, load ``path`` and answer requests until the grading process closes the pipe."""
    try:
        fence(protected)
    except OSError as exc:
        send(outcomes, {"fence": f"{exc}"})
        return FENCE_FAILED
    from . import exercise

    try:
        launch = _load_launch(path)
    except SystemExit as exc:
        send(outcomes, {"loaded": False, "exit": repr(exc.code)})
        return 0
    except BaseException as exc:  # noqa: BLE001 -- a file that does not load is a verdict, not a crash
        send(outcomes, {"loaded": False, "why": f"{type(exc).__name__}: {exc}"})
        return 0
    send(outcomes, {"loaded": True})
    while True:
        try:
            request = recv(requests)
        except Gone:
            return 0
        inputs, shape, dtype = request["inputs"], tuple(request["shape"]), np.dtype(request["dtype"])
        outcome = exercise.run_case(launch, inputs, shape, dtype, request["fill"], request["record"])
        send(outcomes, pack_outcome(outcome))


if __name__ == "__main__":
    file, requests_fd, outcomes_fd, ids = sys.argv[1:5]
    sys.exit(serve(Path(file), int(requests_fd), int(outcomes_fd), [int(i) for i in ids.split(",")]))
