"""Auto-checked exercises of chapter 0, "Your first kernels": the published solutions and typical mistakes.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/00_first_kernels.ipynb,
whose solutions show the code between a ``# --- <label>`` line and the next ``# Mistakes`` line.
The mistakes are ones students make; tests/test_basics.py proves the checker fails each and says why.
The last exercises also expect coalesced access, each input read once or no bank conflicts: the
checker counts the accesses in the simulator and fails a correct kernel that misses them.
"""
import numpy as np
from numba import cuda

from kernels.harness.accesses import COALESCED, NO_BANK_CONFLICTS, READ_ONCE
from kernels.harness.exercise import Exercise, register

def vector(rng, n):
    return rng.standard_normal(n).astype(np.float32)


def matrix(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- basics-ex-map: out[i] = x[i] + 10 ----------------------------------------------------------
@cuda.jit
def add_ten(out, x):
    i = cuda.grid(1)
    out[i] = x[i] + 10


def launch_map(out, x):
    add_ten[out.size // 32, 32](out, x)  # the sizes are multiples of 32 here


# Mistakes of basics-ex-map
@cuda.jit
def add_ten_thread_index(out, x):
    i = cuda.threadIdx.x  # the index within the block only: every block redoes the first 32
    out[i] = x[i] + 10


def launch_map_thread_index(out, x):
    add_ten_thread_index[out.size // 32, 32](out, x)


register(Exercise(
    label="basics-ex-map",
    task="out[i] = x[i] + 10, one element per thread, sizes multiples of 32; launch(out, x)",
    make_inputs=lambda rng, n: (vector(rng, n),), reference=lambda x: x + 10.0, solution=launch_map,
    sizes=(32, 96), atol=1e-5,
    wrong={"threadIdx instead of the grid index": (launch_map_thread_index, "never written")},
))


# --- basics-ex-zip: out[i] = x[i] + y[i] --------------------------------------------------------
@cuda.jit
def add(out, x, y):
    i = cuda.grid(1)
    out[i] = x[i] + y[i]


def launch_zip(out, x, y):
    add[out.size // 32, 32](out, x, y)


# Mistakes of basics-ex-zip
@cuda.jit
def add_x_twice(out, x, y):
    i = cuda.grid(1)
    out[i] = x[i] + x[i]


def launch_zip_x_twice(out, x, y):
    add_x_twice[out.size // 32, 32](out, x, y)


register(Exercise(
    label="basics-ex-zip",
    task="out[i] = x[i] + y[i], sizes multiples of 32; launch(out, x, y)",
    make_inputs=lambda rng, n: (vector(rng, n), vector(rng, n)), reference=lambda x, y: x + y.astype(np.float64),
    solution=launch_zip, sizes=(32, 96), atol=1e-5,
    wrong={"x added twice": (launch_zip_x_twice, "wrong")},
))


# --- basics-ex-guard: out[i] = x[i] * x[i] for any length ------------------------------------------
@cuda.jit
def square(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * x[i]


def launch_guard(out, x):
    square[(out.size + 63) // 64, 64](out, x)


# Mistakes of basics-ex-guard
@cuda.jit
def square_unguarded(out, x):
    i = cuda.grid(1)
    out[i] = x[i] * x[i]


def launch_guard_unguarded(out, x):
    square_unguarded[(out.size + 63) // 64, 64](out, x)


@cuda.jit
def square_off_by_one(out, x):
    i = cuda.grid(1)
    if i <= out.size:  # one thread too many
        out[i] = x[i] * x[i]


def launch_guard_off_by_one(out, x):
    square_off_by_one[(out.size + 63) // 64, 64](out, x)


def launch_guard_rounded_down(out, x):
    square[max(out.size // 64, 1), 64](out, x)


register(Exercise(
    label="basics-ex-guard",
    task="out[i] = x[i] * x[i] for any length (blocks of 64 threads); launch(out, x)",
    make_inputs=lambda rng, n: (vector(rng, n),), reference=lambda x: x.astype(np.float64) ** 2,
    solution=launch_guard, sizes=(1, 37, 200), atol=1e-5,
    wrong={"no bounds check": (launch_guard_unguarded, "outside an array"),
           "off-by-one bounds check": (launch_guard_off_by_one, "outside an array"),
           "grid rounded down": (launch_guard_rounded_down, "never written")},
))


# --- basics-ex-map-2d: out[r, c] = x[r, c] + 10 on a matrix ------------------------------------------
@cuda.jit
def add_ten_2d(out, x):
    c, r = cuda.grid(2)  # threadIdx.x runs along a row: consecutive lanes, consecutive addresses
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c] + 10


def launch_map_2d(out, x):
    rows, cols = out.shape
    add_ten_2d[((cols + 31) // 32, (rows + 1) // 2), (32, 2)](out, x)


# Mistakes of basics-ex-map-2d
@cuda.jit
def add_ten_2d_swapped(out, x):
    r, c = cuda.grid(2)  # threadIdx.x runs down a column: lanes a whole row apart
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = x[r, c] + 10


def launch_map_2d_swapped(out, x):
    rows, cols = out.shape
    add_ten_2d_swapped[((rows + 31) // 32, (cols + 1) // 2), (32, 2)](out, x)


@cuda.jit
def add_ten_2d_wrong_guard(out, x):
    c, r = cuda.grid(2)
    if r < out.shape[1] and c < out.shape[0]:  # each bound checked against the other dimension
        out[r, c] = x[r, c] + 10


def launch_map_2d_wrong_guard(out, x):
    rows, cols = out.shape
    add_ten_2d_wrong_guard[((cols + 31) // 32, (rows + 1) // 2), (32, 2)](out, x)


register(Exercise(
    label="basics-ex-map-2d",
    task="out[r, c] = x[r, c] + 10 on a 2-D array, a 2-D grid, coalesced; launch(out, x)",
    make_inputs=lambda rng, shape: (matrix(rng, shape),), reference=lambda x: x + 10.0,
    solution=launch_map_2d, sizes=((5, 37), (33, 20)), atol=1e-5, expect=(COALESCED,),
    wrong={"x and y swapped": (launch_map_2d_swapped, "uncoalesced"),
           "bounds checked against the wrong dimension": (launch_map_2d_wrong_guard, "outside an array")},
))


# --- basics-ex-broadcast: out[r, c] = a[r] + b[c] ------------------------------------------------
@cuda.jit
def outer_sum(out, a, b):
    c, r = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a[r] + b[c]


def launch_broadcast(out, a, b):
    rows, cols = out.shape
    outer_sum[((cols + 31) // 32, (rows + 1) // 2), (32, 2)](out, a, b)


# Mistakes of basics-ex-broadcast
@cuda.jit
def outer_sum_swapped(out, a, b):
    c, r = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = a[c] + b[r]


def launch_broadcast_swapped(out, a, b):
    rows, cols = out.shape
    outer_sum_swapped[((cols + 31) // 32, (rows + 1) // 2), (32, 2)](out, a, b)


register(Exercise(
    label="basics-ex-broadcast",
    task="out[r, c] = a[r] + b[c] (a column plus a row), coalesced; launch(out, a, b)",
    make_inputs=lambda rng, shape: (vector(rng, shape[0]), vector(rng, shape[1])),
    reference=lambda a, b: a[:, None] + b[None, :].astype(np.float64),
    solution=launch_broadcast, sizes=((5, 37), (37, 5)), atol=1e-5, expect=(COALESCED,),
    wrong={"a and b indexed by each other's index": (launch_broadcast_swapped, "outside an array")},
))


# --- basics-ex-block-sum: out[b] = the sum of block b's 64 elements ---------------------------------
@cuda.jit
def block_sum(out, x):
    part = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    part[t] = x[i] if i < x.size else 0  # past the end: the sum's neutral element
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            part[t] += part[t + step]
        cuda.syncthreads()  # this step's sums are done before the next step reads them
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = part[0]


def launch_block_sum(out, x):
    block_sum[out.size, 64](out, x)


# Mistakes of basics-ex-block-sum
@cuda.jit
def block_sum_no_barrier(out, x):
    part = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    part[t] = x[i] if i < x.size else 0
    step = 32
    while step > 0:
        if t < step:
            part[t] += part[t + step]
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = part[0]


def launch_block_sum_no_barrier(out, x):
    block_sum_no_barrier[out.size, 64](out, x)


@cuda.jit
def block_sum_tail_unset(out, x):
    part = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        part[t] = x[i]  # past the end, part[t] keeps whatever shared memory held
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            part[t] += part[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = part[0]


def launch_block_sum_tail_unset(out, x):
    block_sum_tail_unset[out.size, 64](out, x)


def block_sums_reference(x):
    padded = np.zeros(-(-x.size // 64) * 64)
    padded[:x.size] = x
    return padded.reshape(-1, 64).sum(axis=1)


register(Exercise(
    label="basics-ex-block-sum",
    task="out[b] = sum of x[64 b : 64 b + 64] with a tree in shared memory, 64 threads per block; launch(out, x)",
    make_inputs=lambda rng, n: (vector(rng, n),), reference=block_sums_reference,
    solution=launch_block_sum, sizes=(1, 64, 200), atol=1e-4, expect=(COALESCED, READ_ONCE),
    wrong={"no barrier between the steps": (launch_block_sum_no_barrier, "race"),
           "threads past the end leave their slot unset": (launch_block_sum_tail_unset, "NaN")},
))


# --- basics-ex-stencil: out[i] = x[i - 1] + x[i] + x[i + 1], zero outside x ---------------------
@cuda.jit
def sum3(out, x):
    tile = cuda.shared.array(64 + 2, np.float32)  # the block's elements and one more on each side
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t + 1] = x[i] if i < x.size else 0
    if t == 0:
        tile[0] = x[i - 1] if i > 0 else 0
    if t == 63:
        tile[65] = x[i + 1] if i + 1 < x.size else 0
    cuda.syncthreads()
    if i < out.size:
        out[i] = tile[t] + tile[t + 1] + tile[t + 2]


def launch_stencil(out, x):
    sum3[(out.size + 63) // 64, 64](out, x)


# Mistakes of basics-ex-stencil
@cuda.jit
def sum3_global(out, x):
    i = cuda.grid(1)
    if i < out.size:
        left = x[i - 1] if i > 0 else 0
        right = x[i + 1] if i + 1 < x.size else 0
        out[i] = left + x[i] + right  # every element is read by three threads


def launch_stencil_global(out, x):
    sum3_global[(out.size + 63) // 64, 64](out, x)


@cuda.jit
def sum3_no_barrier(out, x):
    tile = cuda.shared.array(64 + 2, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t + 1] = x[i] if i < x.size else 0
    if t == 0:
        tile[0] = x[i - 1] if i > 0 else 0
    if t == 63:
        tile[65] = x[i + 1] if i + 1 < x.size else 0
    if i < out.size:
        out[i] = tile[t] + tile[t + 1] + tile[t + 2]


def launch_stencil_no_barrier(out, x):
    sum3_no_barrier[(out.size + 63) // 64, 64](out, x)


def sum3_reference(x):
    padded = np.pad(x.astype(np.float64), 1)
    return padded[:-2] + padded[1:-1] + padded[2:]


register(Exercise(
    label="basics-ex-stencil",
    task="out[i] = x[i-1] + x[i] + x[i+1] (zero outside x), each element of x read from global memory "
         "about once; launch(out, x)",
    make_inputs=lambda rng, n: (vector(rng, n),), reference=sum3_reference,
    solution=launch_stencil, sizes=(1, 70, 200), atol=1e-5, expect=(COALESCED, READ_ONCE),
    wrong={"every thread reads its three inputs from global memory": (launch_stencil_global,
                                                                      "redundant global reads"),
           "no barrier between the loads and the sums": (launch_stencil_no_barrier, "race")},
))


# --- basics-ex-dot: out[0] = sum of x[i] * y[i] -----------------------------------------------------
@cuda.jit
def dot_blocks(part, x, y):
    acc = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    acc[t] = x[i] * y[i] if i < x.size else 0
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            acc[t] += acc[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        part[cuda.blockIdx.x] = acc[0]


@cuda.jit
def sum_parts(out, part):
    acc = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    total = np.float32(0)
    for j in range(t, part.size, 64):  # one block: each thread first adds every 64th part
        total += part[j]
    acc[t] = total
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            acc[t] += acc[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[0] = acc[0]


def launch_dot(out, x, y):
    blocks = (x.size + 63) // 64
    part = cuda.device_array(blocks, np.float32)  # one partial sum per block
    dot_blocks[blocks, 64](part, x, y)
    sum_parts[1, 64](out, part)  # the global step


# Mistakes of basics-ex-dot
@cuda.jit
def dot_atomic(out, x, y):
    acc = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    acc[t] = x[i] * y[i] if i < x.size else 0
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            acc[t] += acc[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        cuda.atomic.add(out, 0, acc[0])  # adds to whatever out held: nothing set it to zero


def launch_dot_atomic_on_poison(out, x, y):
    dot_atomic[(x.size + 63) // 64, 64](out, x, y)


@cuda.jit
def dot_blocks_no_barrier(part, x, y):
    acc = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    acc[t] = x[i] * y[i] if i < x.size else 0
    step = 32
    while step > 0:
        if t < step:
            acc[t] += acc[t + step]
        step //= 2
    if t == 0:
        part[cuda.blockIdx.x] = acc[0]


def launch_dot_no_barrier(out, x, y):
    blocks = (x.size + 63) // 64
    part = cuda.device_array(blocks, np.float32)
    dot_blocks_no_barrier[blocks, 64](part, x, y)
    sum_parts[1, 64](out, part)


register(Exercise(
    label="basics-ex-dot",
    task="out[0] = sum of x[i] * y[i]: per-block sums in shared memory, then a global step; launch(out, x, y) "
         "with out of shape (1,)",
    make_inputs=lambda rng, n: (vector(rng, n), vector(rng, n)),
    reference=lambda x, y: np.array([np.dot(x.astype(np.float64), y)]),
    solution=launch_dot, sizes=(1, 100, 300), atol=1e-3, expect=(COALESCED, READ_ONCE),
    wrong={"atomic adds onto an output nothing cleared": (launch_dot_atomic_on_poison, "never written"),
           "no barrier in the block's tree": (launch_dot_no_barrier, "race")},
))


# --- basics-ex-row-sum: out[r] = sum of row r of x --------------------------------------------------
@cuda.jit
def row_sums(out, x):
    acc = cuda.shared.array(64, np.float32)
    r = cuda.blockIdx.x  # one block per row
    t = cuda.threadIdx.x
    total = np.float32(0)
    for c in range(t, x.shape[1], 64):  # consecutive threads, consecutive columns
        total += x[r, c]
    acc[t] = total
    cuda.syncthreads()
    step = 32
    while step > 0:
        if t < step:
            acc[t] += acc[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[r] = acc[0]


def launch_row_sum(out, x):
    row_sums[x.shape[0], 64](out, x)


# Mistakes of basics-ex-row-sum
@cuda.jit
def row_sums_thread_per_row(out, x):
    r = cuda.grid(1)  # one thread per row: consecutive threads are a whole row apart
    if r < out.size:
        total = np.float32(0)
        for c in range(x.shape[1]):
            total += x[r, c]
        out[r] = total


def launch_row_sum_thread_per_row(out, x):
    row_sums_thread_per_row[(out.size + 63) // 64, 64](out, x)


register(Exercise(
    label="basics-ex-row-sum",
    task="out[r] = sum of x[r, :] for a 2-D x, coalesced; launch(out, x)",
    make_inputs=lambda rng, shape: (matrix(rng, shape),), reference=lambda x: x.astype(np.float64).sum(axis=1),
    solution=launch_row_sum, sizes=((3, 100), (12, 7)), atol=1e-4, expect=(COALESCED, READ_ONCE),
    wrong={"one thread per row": (launch_row_sum_thread_per_row, "uncoalesced")},
))


# --- basics-ex-transpose: out = x.T, both the reads and the writes coalesced ----------------------
@cuda.jit
def transpose_tiled(out, x):
    tile = cuda.shared.array((32, 32), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # blocks of 32 x 8: each thread moves 4 elements
    r0, c0 = cuda.blockIdx.y * 32, cuda.blockIdx.x * 32
    for k in range(0, 32, 8):  # read rows of x: lanes along a row
        if r0 + ty + k < x.shape[0] and c0 + tx < x.shape[1]:
            tile[ty + k, tx] = x[r0 + ty + k, c0 + tx]
    cuda.syncthreads()
    for k in range(0, 32, 8):  # write rows of out, i.e. columns of the tile
        if c0 + ty + k < out.shape[0] and r0 + tx < out.shape[1]:
            out[c0 + ty + k, r0 + tx] = tile[tx, ty + k]


def launch_transpose(out, x):
    rows, cols = x.shape
    transpose_tiled[((cols + 31) // 32, (rows + 31) // 32), (32, 8)](out, x)


# Mistakes of basics-ex-transpose
@cuda.jit
def transpose_naive(out, x):
    c, r = cuda.grid(2)
    if r < x.shape[0] and c < x.shape[1]:
        out[c, r] = x[r, c]  # coalesced read, but the lanes' writes are a whole row of out apart


def launch_transpose_naive(out, x):
    rows, cols = x.shape
    transpose_naive[((cols + 31) // 32, (rows + 7) // 8), (32, 8)](out, x)


def transpose_inputs(rng, shape):
    return (matrix(rng, shape),)


register(Exercise(
    label="basics-ex-transpose",
    task="out = x.T (out has shape x.shape[::-1]), reads and writes coalesced; launch(out, x)",
    make_inputs=transpose_inputs, reference=lambda x: x.T.astype(np.float64),
    solution=launch_transpose, sizes=((37, 45), (5, 70)), atol=0, expect=(COALESCED,),
    wrong={"write along columns": (launch_transpose_naive, "uncoalesced")},
))


# --- basics-ex-banks: the transpose without bank conflicts -------------------------------------------
@cuda.jit
def transpose_padded(out, x):
    tile = cuda.shared.array((32, 33), np.float32)  # one spare column: a column's words in 32 banks
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    r0, c0 = cuda.blockIdx.y * 32, cuda.blockIdx.x * 32
    for k in range(0, 32, 8):
        if r0 + ty + k < x.shape[0] and c0 + tx < x.shape[1]:
            tile[ty + k, tx] = x[r0 + ty + k, c0 + tx]
    cuda.syncthreads()
    for k in range(0, 32, 8):
        if c0 + ty + k < out.shape[0] and r0 + tx < out.shape[1]:
            out[c0 + ty + k, r0 + tx] = tile[tx, ty + k]


def launch_banks(out, x):
    rows, cols = x.shape
    transpose_padded[((cols + 31) // 32, (rows + 31) // 32), (32, 8)](out, x)


# Mistakes of basics-ex-banks: the transpose above, with its (32, 32) tile: launch_transpose

register(Exercise(
    label="basics-ex-banks",
    task="out = x.T as in basics-ex-transpose, also free of shared-memory bank conflicts; launch(out, x)",
    make_inputs=transpose_inputs, reference=lambda x: x.T.astype(np.float64),
    solution=launch_banks, sizes=((37, 45),), atol=0, expect=(COALESCED, NO_BANK_CONFLICTS),
    wrong={"a (32, 32) tile read by columns": (launch_transpose, "bank conflicts")},
))
