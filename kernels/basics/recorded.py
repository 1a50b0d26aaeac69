"""What the access recorder (``kernels/harness/accesses.py``) sees when chapter 0's kernels run, and the
chapter's figures drawn from it.

The recorder watches the simulator's Python threads, so it needs ``NUMBA_ENABLE_CUDASIM=1`` before
``numba.cuda`` is imported. Where the chapter runs on a GPU, ``recorded()`` runs this module in a child
process with the simulator switched on and reads back the JSON it prints: the same kernels on the same
inputs, so a GPU run shows the same tables and figures as a run without one.

    NUMBA_ENABLE_CUDASIM=1 python -m kernels.basics.recorded     # every case, as JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np

from ..harness import accesses, device

COPY_SHAPE = (64, 37)  # the coalescing section's array: rows of 37 floats
BANK_STRIDES = (1, 32, 33)
THREADS_N, THREADS_BLOCK = 37, 16  # the threads figure: 37 elements on blocks of 16 threads
LINE = 128  # bytes in an L2 line: four 32-byte sectors


def _accesses(log, space: str | None = None, array: str | None = None) -> list:
    return [a for a in log if (space is None or a.space == space) and (array is None or a.array == array)]


def _record(launch) -> list:
    with accesses.recording() as log:
        launch()
    return log


def threads_case() -> dict:
    """scale_guarded on 37 elements with blocks of 16 threads: the element each thread wrote."""
    from .examples import blocks, scale_guarded

    n, t = THREADS_N, THREADS_BLOCK
    x, out = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    log = _record(lambda: scale_guarded[blocks(n, t), t](out, x, np.float32(2)))
    writes = [[a.block[0], a.thread, a.address // a.size] for a in _accesses(log, "global", "out") if a.write]
    return {"n": n, "threads": t, "blocks": blocks(n, t), "writes": sorted(writes)}


def copies_case() -> dict:
    """copy_rows and copy_columns on COPY_SHAPE: the counts table, and warp 0's read of x (byte addresses)."""
    from .examples import copy_columns, copy_rows

    rows, cols = COPY_SHAPE
    x = np.arange(rows * cols, dtype=np.float32).reshape(COPY_SHAPE)
    out = np.empty_like(x)
    launches = {copy_rows: ((cols + 31) // 32, rows // 2), copy_columns: (rows // 32, (cols + 1) // 2)}
    table, warp = [], {}
    for kernel, grid in launches.items():
        log = _record(lambda kernel=kernel, grid=grid: kernel[grid, (32, 2)](out, x))
        table += [{"kernel": kernel.__name__, **row} for row in accesses.Counts(log).rows()]
        first = [a for a in _accesses(log, "global", "x") if a.block == (0, 0, 0) and a.thread < accesses.WARP]
        warp[kernel.__name__] = sorted(a.address for a in first)
    return {"shape": list(COPY_SHAPE), "table": table, "warp": warp}


def races_case() -> dict:
    """diff_shared with and without its barrier: how many shared elements race, and the first (sorted)."""
    from .examples import THREADS, blocks, diff_shared, diff_shared_no_barrier

    x, out = np.arange(150, dtype=np.float32), np.empty(149, np.float32)
    found = {}
    for kernel in (diff_shared, diff_shared_no_barrier):
        races = sorted(accesses.count(lambda kernel=kernel: kernel[blocks(149), THREADS](out, x)).races())
        found[kernel.__name__] = {"races": len(races), "first": races[0] if races else None}
    return found


def banks_case() -> dict:
    """shared_stride for each of BANK_STRIDES: the word each lane of warp 0 writes, and the conflict degree."""
    from .examples import shared_stride

    x, out = np.arange(45, dtype=np.float32), np.empty(45, np.float32)
    found = {}
    for stride in BANK_STRIDES:
        log = _record(lambda stride=stride: shared_stride[2, 32](out, x, stride))
        warp0 = [a for a in _accesses(log, "shared") if a.write and a.block == (0, 0, 0)]
        writes = sorted((a.thread, a.address // accesses.WORD) for a in warp0)
        worst = max(t.worst for t in accesses.Counts(log).traffic.values() if t.space == "shared")
        found[str(stride)] = {"words": [w for _, w in writes], "degree": worst}
    return found


def tree_case() -> dict:
    """block_max on one block of 64 values: every shared access as [barriers passed, thread, element, write]."""
    from .examples import THREADS, block_max

    x, out = np.arange(THREADS, dtype=np.float32), np.empty(1, np.float32)
    log = _record(lambda: block_max[1, THREADS](out, x))
    steps = [[a.barrier, a.thread, a.address // a.size, a.write] for a in _accesses(log, "shared", "best")]
    return {"threads": THREADS, "accesses": sorted(steps), "result": float(out[0])}


def tile_case() -> dict:
    """diff_shared on 150 elements, block 1: which element of x each thread staged in which slot of the
    tile ([thread, element of x, slot]), and which slots each thread then read ([thread, slot])."""
    from .examples import THREADS, blocks, diff_shared

    x, out = np.arange(150, dtype=np.float32), np.empty(149, np.float32)
    log = _record(lambda: diff_shared[blocks(149), THREADS](out, x))
    block = [a for a in log if a.block == (1, 0, 0)]
    staged = []
    for t in range(THREADS):
        mine = [a for a in block if a.thread == t and a.barrier == 0]  # in program order: read x, then write tile
        loads = [a.address // a.size for a in mine if a.space == "global" and a.array == "x"]
        slots = [a.address // a.size for a in mine if a.space == "shared" and a.write]
        staged += [[t, e, s] for e, s in zip(loads, slots, strict=True)]
    reads = sorted([a.thread, a.address // a.size] for a in block if a.space == "shared" and not a.write)
    return {"block": 1, "threads": THREADS, "staged": sorted(staged), "reads": reads}


CASES = {
    "threads": threads_case,
    "copies": copies_case,
    "races": races_case,
    "banks": banks_case,
    "tree": tree_case,
    "tile": tile_case,
}


@cache
def recorded() -> dict:
    """Every case of CASES, recorded in the simulator: here, or in a child process where this run uses a GPU."""
    if device.MODE == device.SIM:
        return json.loads(json.dumps({name: case() for name, case in CASES.items()}))  # as the child's JSON reads
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "NUMBA_ENABLE_CUDASIM": "1",
        "BOOK_MODE": "sim",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH")))),
    }
    command = [sys.executable, "-m", "kernels.basics.recorded"]
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the access recorder's child process failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


# --- figures ---------------------------------------------------------------------------------------


def _plt():
    import matplotlib.pyplot as plt

    return plt


def threads_figure(case: dict):
    """Blocks as rows, threadIdx.x as columns: the element each thread wrote, or a dash for none."""
    plt = _plt()
    blocks, t, n = case["blocks"], case["threads"], case["n"]
    wrote = {(b, th): e for b, th, e in case["writes"]}
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.6 * blocks))
    colors = plt.cm.Set2(np.arange(blocks))
    for b in range(blocks):
        for th in range(t):
            e = wrote.get((b, th))
            face = colors[b] if e is not None else (0.92, 0.92, 0.92, 1.0)
            ax.add_patch(plt.Rectangle((th, blocks - 1 - b), 1, 1, facecolor=face, edgecolor="white", lw=2))
            ax.text(th + 0.5, blocks - 0.5 - b, "-" if e is None else str(e), ha="center", va="center", fontsize=11)
    ax.set(xlim=(0, t), ylim=(0, blocks))
    ax.set_xticks(np.arange(t) + 0.5, [str(i) for i in range(t)])
    ax.set_yticks(np.arange(blocks) + 0.5, [f"block {b}" for b in reversed(range(blocks))])
    ax.set_xlabel("threadIdx.x")
    ax.tick_params(length=0, labelsize=11)
    ax.set_title(f"The element of out each thread wrote ({n} elements, blocks of {t}; - : none)", fontsize=12)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.tight_layout()
    return fig


def sectors_figure(case: dict):
    """Memory as 128-byte lines of 32 floats: the floats warp 0 reads in one load, and the sectors fetched."""
    plt = _plt()
    from matplotlib.colors import ListedColormap

    per_line = LINE // 4
    names = list(case["warp"])
    lines = max(max(a) for a in case["warp"].values()) // LINE + 1
    fig, axes = plt.subplots(1, len(names), figsize=(9, 4.8), sharey=True)
    for ax, name in zip(axes, names, strict=True):
        grid = np.zeros((lines, per_line))
        for a in case["warp"][name]:  # sectors fetched first, then the floats read on top
            s = (a // accesses.SECTOR) * accesses.SECTOR // 4
            grid[s // per_line, s % per_line : s % per_line + accesses.SECTOR // 4] = np.maximum(
                grid[s // per_line, s % per_line : s % per_line + accesses.SECTOR // 4], 1
            )
        for a in case["warp"][name]:
            grid[(a // 4) // per_line, (a // 4) % per_line] = 2
        cmap = ListedColormap(["#f2f2f2", "#9ecae1", "#08519c"])
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=2, aspect="auto", interpolation="nearest")
        for x in range(0, per_line + 1, accesses.SECTOR // 4):
            ax.axvline(x - 0.5, color="white", lw=2)
        sectors = accesses.sectors(case["warp"][name], 4)
        ax.set_title(f"{name}: {sectors} sectors", fontsize=12)
        ax.set_xticks([0, 8, 16, 24], ["0", "8", "16", "24"])
        ax.set_xlabel("float within the 128-byte line", fontsize=11)
        ax.tick_params(labelsize=11)
    axes[0].set_ylabel("128-byte line of x", fontsize=11)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#08519c", "#9ecae1")]
    labels = ["read by a lane of warp 0", "fetched with it (same sector)"]
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def banks_figure(case: dict):
    """For each stride, the words warp 0's lanes write: bank across, the word's row of 32 down."""
    plt = _plt()
    strides = list(case)
    depth = max(max(w // accesses.BANKS for w in c["words"]) for c in case.values()) + 1
    fig, axes = plt.subplots(1, len(strides), figsize=(9, 3.6), sharey=True)
    for ax, stride in zip(axes, strides, strict=True):
        words = case[stride]["words"]
        banks = [w % accesses.BANKS for w in words]
        ax.scatter(banks, [w // accesses.BANKS for w in words], c=np.arange(len(words)), cmap="viridis", s=22)
        ax.set(xlim=(-1, accesses.BANKS), ylim=(depth, -1))
        ax.set_title(f"stride {stride}: degree {case[stride]['degree']}", fontsize=12)
        ax.set_xlabel("bank", fontsize=11)
        ax.tick_params(labelsize=11)
    axes[0].set_ylabel("word // 32 (a row of banks)", fontsize=11)
    fig.suptitle("The word each lane of warp 0 writes (colour: lane 0 to 31)", fontsize=12)
    fig.tight_layout()
    return fig


def tree_figure(case: dict):
    """The reduction tree: at each step (the barriers passed), which element each active thread combined
    into which."""
    plt = _plt()
    threads = case["threads"]
    by = {}
    for barrier, t, e, write in case["accesses"]:
        by.setdefault((barrier, t), {"reads": [], "writes": []})["writes" if write else "reads"].append(e)
    levels = sorted({b for (b, _), s in by.items() if s["writes"]})  # the last read (out = best[0]) writes nothing
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for (barrier, _), seen in by.items():
        if barrier == 0:
            continue  # the loads of x into the tree's leaves
        for e in seen["reads"]:
            for w in seen["writes"]:
                ax.plot([e, w], [barrier - 1, barrier], color="#08519c" if e != w else "#bbbbbb", lw=1)
    for level in levels:
        alive = {w for (b, _), s in by.items() if b == level for w in s["writes"]}
        ax.scatter(sorted(alive), [level] * len(alive), s=12, color="#08519c", zorder=3)
    ax.set(xlim=(-1, threads), ylim=(len(levels) - 0.5, -0.5))
    ax.set_yticks(levels, ["loads"] + [f"step {k}" for k in levels[1:]])
    ax.set_xlabel("element of the shared array best (= the thread that writes it)", fontsize=11)
    ax.tick_params(labelsize=11)
    ax.set_title(f"block_max on {threads} threads: each step halves the active threads", fontsize=12)
    fig.tight_layout()
    return fig


def tile_figure(case: dict):
    """diff_shared's tile in one block: which element of x each thread staged in which slot (the halo
    in orange), and the two slots each thread then reads."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    threads = case["threads"]
    first = min(e for _, e, _ in case["staged"])
    for _, e, slot in case["staged"]:
        halo = slot == threads
        ax.plot([e - first, slot], [2, 1], color="#e6550d" if halo else "#9ecae1", lw=2.5 if halo else 1)
    for t, slot in case["reads"]:
        ax.plot([slot, t], [1, 0], color="#08519c", lw=0.6)
    for y, n, label in ((2, threads + 1, "x (global)"), (1, threads + 1, "tile (shared)"), (0, threads, "out")):
        ax.scatter(range(n), [y] * n, s=10, color="black", zorder=3)
        ax.text(-2, y, label, ha="right", va="center", fontsize=11)
    ax.set(xlim=(-14, threads + 2), ylim=(-0.4, 2.4))
    ax.set_yticks([])
    ax.set_xticks([0, 16, 32, 48, threads], ["0", "16", "32", "48", str(threads)])
    ax.set_xlabel(f"slot of the tile (x from element {first}, block {case['block']})", fontsize=11)
    ax.tick_params(labelsize=11)
    ax.set_title("diff_shared: each thread stages one element; thread 0 also the halo (orange)", fontsize=12)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    if device.MODE != device.SIM:
        print("the access recorder needs the simulator: run with NUMBA_ENABLE_CUDASIM=1", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({name: case() for name, case in CASES.items()}))
