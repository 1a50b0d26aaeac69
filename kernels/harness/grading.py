"""Running a student's launch once and what it left (``run_case``, ``Outcome``), and the process a submitted
file runs in, which sends that back: ``submission.grade`` starts

    python -m kernels.harness.grading FILE REQUESTS OUTCOMES PROTECTED

with FILE the submission, REQUESTS and OUTCOMES the pipes it reads requests from and writes outcomes to, and
PROTECTED the process ids it may not signal. This process decides nothing. It first fences itself in
(``fence``): neither it nor any process it starts may signal the grading process or its ancestors (nor
every process at once), leave its process group (setsid, setpgid) or trace another process, so that the
grading process survives the submission and ends every process it started by ending one group. Then it
loads FILE, and for each request runs the file's ``launch`` once (``run_case``) and sends the ``Outcome``
back: the output, the inputs after the run, the launches' threads and what they were handed, and in the
simulator every access counted. The grading process judges them (``exercise.Exercise.judge``); a notebook's
own check runs ``run_case`` in its process and judges the same way.

The messages are JSON with NumPy arrays in .npy format beside it, read back with pickling off: what the
submission sends is data, never code that the grading process would run.
"""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import io
import json
import os
import platform
import select
import struct
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import accesses, device
from .check import poison_value, to_host

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
    Access = accesses.Access

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
    """The ``Outcome`` a message holds, every field checked: Malformed otherwise."""
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
    sentences = isinstance(problem, tuple) and len(problem) == 2 and all(isinstance(p, str) for p in problem)
    if problem is not None and not sentences or not isinstance(fed, bool):
        raise Malformed("an outcome whose problem or flags are not what they should be")
    if threads is not None and not (isinstance(threads, tuple) and all(isinstance(t, int) for t in threads)):
        raise Malformed("an outcome whose threads are not integers")
    return Outcome(out, list(inputs), problem, threads, log, spans, fed, handed)


# --- running a launch once (here, or in a notebook's own process) -------------------------------------------

# Elements of poison after every array: a kernel overrunning by up to a block of 1024 threads writes
# (or reads) here instead of into another allocation, where the damage would go unseen.
GUARD = 1024


def sentinel_value(dtype: np.dtype):
    """A second poison, finite and unlikely to be computed: an element holding it after the second
    run was never written (rather than computed as NaN)."""
    return np.finfo(dtype).min if dtype.kind in "fc" else np.iinfo(dtype).min


def _guarded(data: np.ndarray | None, shape, dtype, fill, guard=None):
    """A device array of ``shape`` that is the head of a buffer with GUARD poisoned elements after it.

    Returns (view, buffer). ``data`` (host) fills the view; without it the view holds ``fill`` too.
    The guard holds ``guard`` (default: ``fill``).
    """
    xp = device.xp()
    n = int(np.prod(shape))
    host = np.full(n + GUARD, fill if guard is None else guard, dtype=dtype)
    host[:n] = fill
    if data is not None:
        host[:n] = np.ascontiguousarray(data, dtype=dtype).ravel()
    buf = xp.asarray(host)
    return buf[:n].reshape(shape), buf


def _synchronize():
    if device.on_gpu():
        import cupy

        cupy.cuda.Device().synchronize()


def _span(a) -> tuple[int, int] | None:
    """The bytes [first, end) an array argument covers (NumPy, CuPy, Numba, the simulator's arrays); None for
    anything else."""
    a = getattr(a, "_ary", a)  # the simulator's device arrays wrap a NumPy array
    if isinstance(a, np.generic):  # a scalar has an array interface too
        return None
    iface = getattr(a, "__cuda_array_interface__", None) or getattr(a, "__array_interface__", None)
    if iface is None or not hasattr(a, "nbytes"):
        return None
    return iface["data"][0], iface["data"][0] + int(a.nbytes)


def _overlap(a: tuple | None, b: tuple) -> bool:
    return a is not None and a[0] < b[1] and b[0] < a[1]


@dataclass
class Outcome:
    """What one run of a launch left behind, as data: what the grading process judges, whether the launch ran
    in it or in a process of its own that sent this back (``submission``).

    ``out`` and ``inputs`` hold the whole guarded buffers after the run (host copies); ``problem`` (a
    sentence, and a hint on the fix or "") an exception, a returned array or host writes to ``out``;
    ``threads`` those of the launches that wrote ``out``; ``log`` the accesses counted (the simulator, when
    recorded); ``input_spans`` the bytes of each array input and of its copies a launch took; ``fed`` whether
    any kernel launch took an input array; ``handed`` (argument name, host copy) of each launch argument as
    large as ``out`` that was neither ``out`` nor an input, as the launch began."""

    out: np.ndarray
    inputs: list
    problem: tuple | None = None
    threads: tuple | None = None
    log: list | None = None
    input_spans: list = field(default_factory=list)
    fed: bool = False
    handed: list = field(default_factory=list)


# A launch must fill `out` with a kernel: one that computes the answer with NumPy (or copies it into the
# CuPy array on a GPU) would otherwise pass. While `launch` runs, every Numba kernel launch is wrapped:
# a snapshot of `out`'s whole buffer is taken as each launch ends, and compared with the buffer as the
# next launch starts and as `launch` returns. A difference there was written by something other than a
# kernel. Comparing snapshots, rather than trying to forbid host writes, works the same for NumPy,
# CuPy and Numba arrays and for every way of writing (slicing, np.copyto, .set(), copy_to_device).
# Kernels launched outside Numba (a CuPy RawKernel) are not seen: the exercises ask for @cuda.jit ones.
# The launches that changed `out` also leave their threads along x, y and z: where the last elements were
# never written, they tell a grid too small from an index that never reaches the end. And a kernel must
# compute `out` from the inputs: each launch notes whether it took one, and copies any other argument as
# large as `out` (an answer computed on the host and handed to a kernel that only copies it shows there).


def _launch_entry():
    """The class and method that every Numba kernel launch goes through in this mode."""
    if device.on_gpu():
        from numba.cuda.dispatcher import _LaunchConfiguration  # kernel[grid, block] returns one

        return _LaunchConfiguration, "__call__"
    from numba.cuda.simulator.kernel import FakeCUDAKernel  # also runs device functions: skipped below

    return FakeCUDAKernel, "__call__"


def _threads_of(kernel) -> tuple:
    """A configured launch's threads along x, y and z (Numba has made its grid and block 3 integers each)."""
    grid, block = (kernel.griddim, kernel.blockdim) if device.on_gpu() else (kernel.grid_dim, kernel.block_dim)
    return tuple(g * b for g, b in zip(grid, block, strict=True))


def _parameter_names(kernel) -> list[str]:
    function = getattr(getattr(kernel, "dispatcher", kernel), "py_func", None) or getattr(kernel, "fn", None)
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []


class _KernelWrites:
    """Whether anything but a Numba kernel launch wrote ``buf`` while ``watching()``, the threads of the
    launches that did, whether a launch took an input, and what else as large as ``out`` a launch was handed
    (see above)."""

    def __init__(self, buf, out, inputs: list):
        self.buf = buf
        self.out_span = _span(buf)
        self.size = int(np.prod(out.shape))
        self.inputs = [np.array(to_host(x)) for x in inputs]
        self.input_spans = [[_span(x)] for x in inputs]  # each input's memory, and its copies a launch took
        self.launches = 0
        self.host_wrote = False
        self.fed = False
        self.handed = []
        self.kernel_written = []  # the spans of arrays a kernel wrote: intermediates, not handed answers
        self.writers = []  # (threads along x, y, z) of each launch that changed buf
        self._depth = 0
        self._seen = self._snapshot()

    def _snapshot(self) -> np.ndarray:
        _synchronize()
        return np.array(to_host(self.buf)).view(np.uint8)  # bytes: NaN equals NaN

    def _check_unchanged(self):
        self.host_wrote |= not np.array_equal(self._snapshot(), self._seen)

    def _note_arguments(self, kernel, args) -> list:
        """Note whether this launch takes an input (or a copy of one), and keep what it is handed as large as
        ``out`` that no kernel wrote before; return those candidates' (span, host copy) to compare after it."""
        names = _parameter_names(kernel)
        candidates = []
        for pos, arg in enumerate(args):
            span = _span(arg)
            if span is None or _overlap(span, self.out_span):
                continue
            if any(_overlap(span, s) for spans in self.input_spans for s in spans):
                self.fed = True
                continue
            size = int(np.prod(getattr(arg, "shape", ())))
            if size != self.size and all(x.size != size for x in self.inputs):
                continue
            host = np.array(to_host(getattr(arg, "_ary", arg)))
            for spans, x in zip(self.input_spans, self.inputs, strict=True):
                if host.shape == x.shape and np.array_equal(host, x, equal_nan=x.dtype.kind in "fc"):
                    spans.append(span)  # a copy of an input (cuda.to_device(x)) is that input
                    self.fed = True
                    break
            else:
                if size == self.size and not any(_overlap(span, s) for s in self.kernel_written):
                    self.handed.append((names[pos] if pos < len(names) else f"argument {pos + 1}", host.copy()))
                    candidates.append((span, arg, host))
        return candidates

    def _wrap(self, call):
        def launch_kernel(kernel, *args, **kwargs):
            # A device function (the simulator routes those through here too) or a call made while a
            # kernel runs is part of that kernel.
            if self._depth or getattr(kernel, "_device", False):
                return call(kernel, *args, **kwargs)
            before = self._snapshot()
            self.host_wrote |= not np.array_equal(before, self._seen)
            candidates = self._note_arguments(kernel, args)
            self._depth += 1
            try:
                return call(kernel, *args, **kwargs)
            finally:
                self._depth -= 1
                self.launches += 1
                self._seen = self._snapshot()
                if not np.array_equal(self._seen, before):
                    self.writers.append(_threads_of(kernel))
                for span, arg, host in candidates:  # what a kernel wrote is an intermediate result, not an answer
                    if not np.array_equal(np.array(to_host(getattr(arg, "_ary", arg))), host, equal_nan=True):
                        self.kernel_written.append(span)

        return launch_kernel

    @contextmanager
    def watching(self):
        cls, name = _launch_entry()
        call = getattr(cls, name)
        setattr(cls, name, self._wrap(call))
        try:
            yield self
        finally:
            setattr(cls, name, call)
        self._check_unchanged()

    def threads(self) -> tuple | None:
        """The most threads along x, y and z of the launches that wrote ``buf``; None if none did."""
        return tuple(max(t) for t in zip(*self.writers, strict=True)) if self.writers else None

    def problem(self) -> tuple | None:
        if self.launches == 0:
            return (
                "no kernel ran: the output was written by host code"
                if self.host_wrote
                else "no kernel ran: `launch` launched no @cuda.jit kernel and `out` was never written",
                "",
            )
        if self.host_wrote:
            return (
                "the output was written by host code outside the kernel launches (before, between or after them)",
                "only a kernel may write `out`",
            )
        return None


@contextmanager
def _recording(record: bool):
    if record:
        with accesses.recording() as log:
            yield log
    else:
        yield None


def run_case(launch, inputs, want_shape, out_dtype, fill, record=False, device_only=True) -> Outcome:
    """Run the student's launch once on guarded copies of ``inputs`` (host arrays and scalars), ``out`` of
    ``want_shape`` and ``out_dtype`` filled with ``fill``; the accesses counted where ``record`` (in the
    simulator). Whatever the launch raises, ``sys.exit`` included, becomes the outcome's problem."""
    args, in_bufs, in_views = [], [], []
    for x in inputs:
        if isinstance(x, np.ndarray):
            view, buf = _guarded(x, x.shape, x.dtype, poison_value(x.dtype))
            args.append(view)
            in_bufs.append(buf)
            in_views.append(view)
        else:
            args.append(x)
    # The output's guard holds the finite sentinel, not NaN: an overrun that reads the inputs' NaN
    # guards writes NaN, which a NaN guard would hide (it did, on the GPU).
    dtype = np.dtype(out_dtype)
    out, out_buf = _guarded(None, want_shape, dtype, fill, guard=sentinel_value(dtype))
    writes = _KernelWrites(out_buf, out, in_views)
    problem, log = None, None
    try:
        with _recording(record) as log, writes.watching():  # the watch sees the arguments as the launch got them
            returned = launch(out, *args)
    except SystemExit as exc:
        problem = f"`launch` called sys.exit({exc.code!r})", "a launch must return once its kernels have run"
    except Exception as exc:  # noqa: BLE001 -- whatever the student's code raises is explained, not re-raised
        problem = explain_exception(exc)
    else:
        if hasattr(returned, "shape") and returned is not out:
            problem = (
                "`launch` returned an array instead of filling `out`",
                "the checker grades `out`, which a kernel must write",
            )
        elif device_only:
            problem = writes.problem()
    return Outcome(
        out=np.array(to_host(out_buf), copy=True),
        inputs=[np.array(to_host(b), copy=True) for b in in_bufs],
        problem=problem,
        threads=writes.threads(),
        log=log,
        input_spans=writes.input_spans,
        fed=writes.fed,
        handed=writes.handed,
    )


def explain_exception(exc: BaseException) -> tuple[str, str]:
    """What an exception raised by a launch means: (an observation, a hint on the fix, or "")."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    kind = type(exc).__name__
    if isinstance(exc, IndexError):
        return (
            f"the kernel indexed outside an array ({text})",
            "a missing bounds check (`if i < n:`) or a wrong index; the simulator stops there, on a GPU the same bug "
            "is an illegal memory access or silently wrong data",
        )
    if "ILLEGAL_ADDRESS" in text.upper() or "illegal memory access" in text.lower():
        return (
            "the kernel made an illegal memory access, an index outside an array, and the CUDA context is now "
            "unusable: restart the Python kernel",
            "run the check in the simulator (NUMBA_ENABLE_CUDASIM=1) or under compute-sanitizer to see which index",
        )
    if kind in ("TypingError", "LoweringError", "UnsupportedError", "NumbaError") or "numba" in type(exc).__module__:
        return f"the kernel does not compile ({kind}): {text}", ""
    return f"the launch raised {kind}: {text}", ""


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
        watched = request.get("watched", True) is not False  # the grading process's choice, never the file's
        outcome = run_case(launch, inputs, shape, dtype, request["fill"], request["record"], watched)
        send(outcomes, pack_outcome(outcome))


if __name__ == "__main__":
    file, requests_fd, outcomes_fd, ids = sys.argv[1:5]
    sys.exit(serve(Path(file), int(requests_fd), int(outcomes_fd), [int(i) for i in ids.split(",")]))
