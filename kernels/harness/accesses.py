"""Count a kernel's memory accesses in the CUDA simulator, warp by warp, and say what they cost.

The simulator runs every thread of a kernel as a Python thread, so each array access can be seen:
``recording()`` hands the kernel proxies of its array arguments and of the shared arrays it
creates, which log (block, thread, array, address, read or write) before passing the access on.
From the log, ``Counts`` works out what the hardware would do with each warp's access:

- global memory moves 32-byte sectors: a warp whose 32 lanes read 32 consecutive floats needs 4,
  one whose lanes read a column of a matrix needs 32 (uncoalesced);
- how often each element of an array is read (a stencil that reads every input three times
  instead of staging it in shared memory);
- shared memory has 32 banks of 4-byte words: lanes that touch different words of one bank are
  served one after another (a bank conflict of that degree);
- a race: two threads touching one shared element, at least one writing, with no
  ``cuda.syncthreads()`` between them.

The accesses of one warp instruction are those of the warp's lanes to the same array on the same
line for the same time: lanes run in step, so the k-th access of each lane there is one instruction
(x[i - 1] + x[i + 1] is two). The bytecode offset would tell two accesses on a line apart more
directly, but Python 3.11 moves it as it specializes the code. A real GPU runs kernels as machine code, which no
Python proxy sees: there only correctness is checked.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import re
import sys
import threading
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

SECTOR = 32  # bytes: what L2 and DRAM move for a global access
WORD = 4  # bytes per shared-memory bank word
BANKS = 32
WARP = 32

# What an exercise can expect of a correct kernel (Exercise.expect), and the limits that decide it.
COALESCED = "coalesced"  # global sectors per warp access at most COALESCED_RATIO x the minimum
READ_ONCE = "each input read once"  # global reads per element read at most READ_ONCE_RATIO on average
NO_BANK_CONFLICTS = "no bank conflicts"
EXPECTATIONS = (COALESCED, READ_ONCE, NO_BANK_CONFLICTS)
# A warp reading 128 contiguous bytes that do not start on a sector boundary needs 5 sectors, not 4;
# a warp spread over 2 or 4 rows of a 2-D block pays that at each row. Stride 2 doubles the sectors.
COALESCED_RATIO = 2.0
# A block staging its part of an input in shared memory reads the halo of its neighbours too.
READ_ONCE_RATIO = 1.5


@dataclass(frozen=True)
class Access:
    """One thread's access to one element. ``address`` counts bytes from the start of its array."""

    space: str  # "global" or "shared"
    array: str  # the kernel's name for it
    origin: int  # the array's identity: its first byte in host memory
    address: int
    size: int
    write: bool
    block: tuple
    thread: int  # linear index within the block: x + blockDim.x * (y + blockDim.y * z)
    site: tuple  # (code, line, how many times this thread has touched this array on that line)
    barrier: int  # how many cuda.syncthreads() this thread has passed
    atomic: bool


# --- what one warp's access costs (pure arithmetic, the same on every machine) --------------------


def _words(addresses, size: int, unit: int) -> set:
    """The ``unit``-byte pieces of memory that lanes touching ``size`` bytes at each of ``addresses`` cover."""
    from .check import nonnegative_int, positive_int

    positive_int(size, "size")
    if isinstance(addresses, (str, bytes)) or not hasattr(addresses, "__iter__"):
        raise TypeError(f"addresses: expected a sequence of byte addresses, one per lane, got {addresses!r}")
    starts = [nonnegative_int(a, "addresses: each") for a in addresses]
    return {w for a in starts for w in range(a // unit, (a + size - 1) // unit + 1)}


def sectors(addresses, size: int) -> int:
    """The 32-byte sectors that lanes touching ``size`` bytes at each of ``addresses`` need."""
    return len(_words(addresses, size, SECTOR))


def min_sectors(addresses, size: int) -> int:
    """The fewest sectors that hold as many distinct elements: the count if they were consecutive."""
    return -(-len(set(addresses)) * size // SECTOR)


def bank_degree(addresses, size: int) -> int:
    """The most distinct 4-byte words that the lanes touch in one bank: the passes shared memory needs
    (lanes reading the same word share it)."""
    return max(Counter(w % BANKS for w in _words(addresses, size, WORD)).values(), default=0)


def min_bank_degree(addresses, size: int) -> int:
    """The passes that many distinct words need at best: one per 32 of them."""
    return -(-len(_words(addresses, size, WORD)) // BANKS)


# --- recording -------------------------------------------------------------------------------------


def _index(ary: np.ndarray, idx) -> tuple | None:
    """``idx`` as one non-negative integer per dimension, or None where it selects more than one element."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if len(idx) != ary.ndim or not all(isinstance(i, (int, np.integer)) for i in idx):
        return None
    return tuple(int(i) + (n if i < 0 else 0) for i, n in zip(idx, ary.shape, strict=True))


def _proxy_class():
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    class Recorded(FakeWithinKernelCUDAArray):
        """An array inside a simulated kernel that logs each element it reads or writes."""

        def __init__(self, ary: np.ndarray, log: list, space: str, name: str, origin: int):
            super().__init__(FakeCUDAArray(ary))
            # the parent's __setattr__ writes array elements: set our own fields directly
            self.__dict__.update(_log=log, _space=space, _name=name, _origin=origin)

        def _record(self, idx, write: bool, frame):
            ary = self._item._ary
            index = _index(ary, idx)
            if index is None:
                return
            thread = threading.current_thread()
            visits = thread.__dict__.setdefault("_visits", Counter())
            place = (self._origin, frame.f_code, frame.f_lineno)
            visits[place] += 1
            start = ary.__array_interface__["data"][0] - self._origin
            self._log.append(
                Access(
                    self._space,
                    self._name,
                    self._origin,
                    start + int(np.dot(index, ary.strides)),
                    ary.itemsize,
                    write,
                    tuple(thread.blockIdx),
                    thread.thread_id,
                    (frame.f_code, frame.f_lineno, visits[place]),
                    thread.__dict__.get("_barriers", 0),
                    frame.f_code.co_filename == kernelapi.__file__,
                )
            )

        def __getitem__(self, idx):
            value = self._item._ary[idx]
            if isinstance(value, np.ndarray):  # a row of a 2-D array: its elements are logged as they are used
                return Recorded(value, self._log, self._space, self._name, self._origin)
            self._record(idx, False, sys._getframe(1))
            return value

        def __setitem__(self, idx, value):
            self._item._ary[idx] = value
            self._record(idx, True, sys._getframe(1))

    return Recorded


def _shared_name(frame) -> str:
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    found = re.match(r"\s*(\w+)\s*=\s*cuda\.shared\.array", line)
    return found[1] if found else f"shared array of line {frame.f_lineno}"


@contextmanager
def recording():
    """While it lasts, every simulated kernel launch logs its accesses; yields the log (a list of Access).

    Each block's shared arrays start filled with poison (NaN, or an integer type's maximum) instead of
    whatever memory held, so that reading an element no thread of the block wrote shows in the result.
    (The simulator hands every block of a launch the same array: the last block would read what the
    one before it left, and compute a plausible wrong number instead of NaN.)
    """
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi

    from .check import poison_value

    Recorded = _proxy_class()
    log: list[Access] = []
    poisoning = threading.Lock()
    launch, shared_array, barrier = (
        simkernel.FakeCUDAKernel.__call__,
        kernelapi.FakeCUDAShared.array,
        simkernel.BlockThread.syncthreads,
    )

    def recorded_launch(kernel, *args):
        if kernel._device or simkernel._get_kernel_context() is not None:
            return launch(kernel, *args)
        names = list(inspect.signature(kernel.fn).parameters)
        wrapped = []
        for pos, arg in enumerate(args):
            ary = arg._ary if isinstance(arg, simkernel.FakeCUDAArray) else arg
            if isinstance(ary, np.ndarray) and ary.ndim > 0:
                name = names[pos] if pos < len(names) else f"argument {pos + 1}"
                arg = Recorded(ary, log, "global", name, ary.__array_interface__["data"][0])
            wrapped.append(arg)
        return launch(kernel, *wrapped)

    def recorded_shared_array(shared, shape, dtype, alignment=None):
        if shape == 0:  # dynamic shared memory: one buffer for the whole launch
            ary = shared_array(shared, shape, dtype, alignment)
        else:
            # The simulator tells allocations apart by the line that makes them; so do we (its own
            # method would see this function as the caller of every one).
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)
            ary = shared._allocations.get(key)
            if ary is None:
                if isinstance(dtype, kernelapi.types.Type):  # numba.float32 as well as np.float32
                    dtype = kernelapi.numpy_support.as_dtype(dtype)
                ary = shared._allocations[key] = np.empty(shape, np.dtype(dtype))
            # The simulator runs the blocks one after another: the first thread of a block to get here
            # poisons the array, before any thread of its block can write it (the others wait).
            block = tuple(threading.current_thread().blockIdx)
            with poisoning:
                poisoned_by = shared.__dict__.setdefault("_poisoned_by", {})
                if poisoned_by.get(key) != block:
                    ary[...] = poison_value(ary.dtype)
                    poisoned_by[key] = block
        frame = sys._getframe(1)
        return Recorded(ary, log, "shared", _shared_name(frame), ary.__array_interface__["data"][0])

    def counted_barrier(thread):
        thread.__dict__["_barriers"] = thread.__dict__.get("_barriers", 0) + 1
        return barrier(thread)

    simkernel.FakeCUDAKernel.__call__ = recorded_launch
    kernelapi.FakeCUDAShared.array = recorded_shared_array
    simkernel.BlockThread.syncthreads = counted_barrier
    try:
        yield log
    finally:
        simkernel.FakeCUDAKernel.__call__ = launch
        kernelapi.FakeCUDAShared.array = shared_array
        simkernel.BlockThread.syncthreads = barrier


# --- what the log adds up to -----------------------------------------------------------------------


@dataclass
class Traffic:
    """The warp accesses of one array in one direction (reads or writes)."""

    space: str
    array: str
    write: bool
    requests: int = 0  # warp accesses
    cost: int = 0  # global: sectors; shared: passes (bank_degree summed)
    minimum: int = 0  # the same, had the lanes touched consecutive elements
    worst: int = 0  # the largest cost of one request (shared: the conflict degree)
    strides: Counter = field(default_factory=Counter)  # bytes between consecutive lanes' addresses

    @property
    def lane_stride(self) -> int:
        """The commonest distance in bytes between consecutive lanes' addresses."""
        return self.strides.most_common(1)[0][0] if self.strides else 0

    @property
    def ratio(self) -> float:
        return self.cost / self.minimum if self.minimum else 1.0

    @property
    def what(self) -> str:
        return f"{'writes to' if self.write else 'reads of'} `{self.array}`"


class Counts:
    """The log of one or more launches, summed per array: see ``traffic``, ``reads_per_element``, ``races``."""

    def __init__(self, log: list[Access]):
        self.log = log
        warps = defaultdict(list)
        for a in log:
            warps[(a.space, a.origin, a.write, a.block, a.thread // WARP, a.site)].append(a)
        self.traffic: dict[tuple, Traffic] = {}
        for (space, origin, write, *_), lanes in warps.items():
            lanes.sort(key=lambda a: a.thread)
            t = self.traffic.setdefault((space, origin, write), Traffic(space, lanes[0].array, write))
            addresses, size = [a.address for a in lanes], lanes[0].size
            cost, least = (
                (sectors(addresses, size), min_sectors(addresses, size))
                if space == "global"
                else (bank_degree(addresses, size), min_bank_degree(addresses, size))
            )
            t.requests += 1
            t.cost += cost
            t.minimum += least
            t.worst = max(t.worst, cost)
            t.strides.update(b.address - a.address for a, b in itertools.pairwise(lanes) if b.thread == a.thread + 1)

    def reads_per_element(self) -> dict[str, tuple[int, int]]:
        """For each global array read: (reads, distinct elements read)."""
        reads = defaultdict(Counter)
        names = {}
        for a in self.log:
            if a.space == "global" and not a.write:
                reads[a.origin][a.address] += 1
                names[a.origin] = a.array
        return {names[o]: (sum(c.values()), len(c)) for o, c in reads.items()}

    def races(self) -> list[str]:
        """Shared elements that two threads touch between the same two barriers, one of them writing."""
        touched = defaultdict(lambda: ([], set()))
        for a in self.log:
            if a.space == "shared" and not a.atomic:
                writers, threads = touched[(a.block, a.origin, a.address, a.barrier)]
                threads.add(a.thread)
                if a.write:
                    writers.append(a)
        found = []
        for (block, _, address, _), (writers, threads) in touched.items():
            if writers and len(threads) > 1:
                w = writers[0]
                other = min(threads - {w.thread})
                found.append(
                    f"thread {other} of block {block} and thread {w.thread} touch `{w.array}` (flat "
                    f"element {address // w.size}) between the same two barriers, and thread {w.thread} "
                    "writes it"
                )
        return found

    def rows(self) -> list[dict]:
        """A table row per array and direction: warp accesses, their cost and the minimum."""
        return [
            {
                "array": t.array,
                "access": "write" if t.write else "read",
                "memory": t.space,
                "warp accesses": t.requests,
                "unit": "sectors" if t.space == "global" else "bank passes",
                "per warp access": t.cost / t.requests,
                "minimum": t.minimum / t.requests,
            }
            for t in self.traffic.values()
        ]


def count(launch, *args) -> Counts:
    """Run ``launch(*args)`` (which launches kernels) in the simulator and count its accesses."""
    from . import device

    if device.on_gpu():
        raise RuntimeError(
            "accesses.count: counting accesses needs the CUDA simulator (NUMBA_ENABLE_CUDASIM=1); "
            "a GPU runs machine code that Python cannot watch"
        )
    with recording() as log:
        launch(*args)
    return Counts(log)


# --- plain words ------------------------------------------------------------------------------------


def problems(counts: Counts, expect=()) -> list[str]:
    """A sentence for each race, and for each of ``expect`` (EXPECTATIONS) that the accesses miss."""
    unknown = set(expect) - set(EXPECTATIONS)
    if unknown:
        raise ValueError(f"expect: unknown expectations {sorted(unknown)}; known: {list(EXPECTATIONS)}")
    out = []
    races = counts.races()
    if races:
        out.append(
            f"a shared-memory race ({len(races)} elements): {races[0]}. A cuda.syncthreads() is missing "
            "between a write to shared memory and the reads (or writes) of other threads that follow it"
        )
    for t in counts.traffic.values():
        if COALESCED in expect and t.space == "global" and t.ratio > COALESCED_RATIO:
            out.append(
                f"uncoalesced global access: the {t.what} need {t.cost / t.requests:.1f} sectors of {SECTOR} "
                f"bytes per warp access where {t.minimum / t.requests:.1f} would do ({t.ratio:.1f} times the "
                f"minimum); consecutive lanes touch addresses {t.lane_stride} bytes apart. Let threadIdx.x run "
                "along the last index (the contiguous one) of the array; where the read and the write cannot "
                "both do that, stage a tile through shared memory"
            )
        if NO_BANK_CONFLICTS in expect and t.space == "shared" and t.ratio > 1:
            out.append(
                f"shared-memory bank conflicts: the {t.what} need {t.cost / t.requests:.1f} passes per warp "
                f"access where {t.minimum / t.requests:.1f} would do (up to {t.worst} lanes of a warp hit "
                f"different words of one bank; consecutive lanes are {t.lane_stride} bytes apart). Pad the "
                "array's rows by one element (e.g. (32, 33) instead of (32, 32)) so that a column's elements "
                "fall in different banks"
            )
    if READ_ONCE in expect:
        for name, (reads, distinct) in counts.reads_per_element().items():
            if reads > READ_ONCE_RATIO * distinct:
                out.append(
                    f"redundant global reads: the {distinct} elements of `{name}` that were read were read "
                    f"{reads} times, {reads / distinct:.2f} times each where about once would do. Load each "
                    "element once (a block's part and its halo into shared memory, or a value into a "
                    "variable) and read it there"
                )
    return out


def summary(counted: list[Counts], expect) -> str:
    """One line saying how the accesses of every size checked met ``expect``, for a passing report."""
    traffic = [t for c in counted for t in c.traffic.values()]
    parts = []
    if COALESCED in expect:
        worst = max((t.ratio for t in traffic if t.space == "global"), default=1.0)
        parts.append(f"global sectors at most {worst:.2f} times the minimum")
    if READ_ONCE in expect:
        per = [r / d for c in counted for r, d in c.reads_per_element().values()]
        parts.append(f"at most {max(per, default=0):.2f} reads per element")
    if NO_BANK_CONFLICTS in expect:
        worst = max((t.worst for t in traffic if t.space == "shared"), default=0)
        parts.append(f"shared-memory conflict degree at most {worst}")
    return "accesses (counted in the simulator): " + "; ".join(parts or ["no shared-memory race"])
