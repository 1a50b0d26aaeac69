"""Chapter 0's published solutions and typical mistakes, attached to its exercises (exercises.py).

The notebook's solutions show the code between a ``# --- <label>`` line and the next ``# Mistakes``
line. The mistakes are ones students make; tests/test_basics.py proves the checker fails each and
says why. The student edition leaves this file out (scripts/student_edition.py).
"""

import numpy as np
from numba import cuda

from kernels.harness.exercise import attach

STENCIL_TILE = 64 + 2  # a block's elements and one more on each side (a constant: a GPU needs one)


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


attach(
    "basics-ex-map",
    solution=launch_map,
    wrong={"threadIdx instead of the grid index": (launch_map_thread_index, "never written")},
)


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


attach("basics-ex-zip", solution=launch_zip, wrong={"x added twice": (launch_zip_x_twice, "wrong")})


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


@cuda.jit
def square_blocks_of_32(out, x):
    i = cuda.blockIdx.x * 32 + cuda.threadIdx.x  # kept from basics-ex-map's blocks of 32: these have 64
    if i < out.size:
        out[i] = x[i] * x[i]


def launch_guard_blocks_of_32(out, x):
    square_blocks_of_32[(out.size + 63) // 64, 64](out, x)


attach(
    "basics-ex-guard",
    solution=launch_guard,
    wrong={
        "no bounds check": (launch_guard_unguarded, "outside an array"),
        "off-by-one bounds check": (launch_guard_off_by_one, "outside an array"),
        "grid rounded down": (launch_guard_rounded_down, "never written"),
        "a block size of 32 written into the index": (launch_guard_blocks_of_32, "ignores the block size"),
    },
)


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


def launch_map_2d_swapped_index(out, x):
    rows, cols = out.shape  # the grid sized for x along a row, the kernel taking x as the row
    add_ten_2d_swapped[((cols + 31) // 32, (rows + 1) // 2), (32, 2)](out, x)


attach(
    "basics-ex-map-2d",
    solution=launch_map_2d,
    wrong={
        "x and y swapped": (launch_map_2d_swapped, "uncoalesced"),
        "bounds checked against the wrong dimension": (launch_map_2d_wrong_guard, "outside an array"),
        "x and y swapped in the index only": (launch_map_2d_swapped_index, "rows and columns swapped"),
    },
)


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


attach(
    "basics-ex-broadcast",
    solution=launch_broadcast,
    wrong={"a and b indexed by each other's index": (launch_broadcast_swapped, "outside an array")},
)


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


attach(
    "basics-ex-block-sum",
    solution=launch_block_sum,
    wrong={
        "no barrier between the steps": (launch_block_sum_no_barrier, "race"),
        "threads past the end leave their slot unset": (launch_block_sum_tail_unset, "NaN"),
    },
)


# --- basics-ex-stencil: out[i] = x[i - 1] + x[i] + x[i + 1], zero outside x ---------------------
@cuda.jit
def sum3(out, x):
    tile = cuda.shared.array(STENCIL_TILE, np.float32)
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
    tile = cuda.shared.array(STENCIL_TILE, np.float32)
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


attach(
    "basics-ex-stencil",
    solution=launch_stencil,
    wrong={
        "every thread reads its three inputs from global memory": (launch_stencil_global, "redundant global reads"),
        "no barrier between the loads and the sums": (launch_stencil_no_barrier, "race"),
    },
)


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


attach(
    "basics-ex-dot",
    solution=launch_dot,
    wrong={
        "atomic adds onto an output nothing cleared": (launch_dot_atomic_on_poison, "never written"),
        "no barrier in the block's tree": (launch_dot_no_barrier, "race"),
    },
)


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


attach(
    "basics-ex-row-sum",
    solution=launch_row_sum,
    wrong={"one thread per row": (launch_row_sum_thread_per_row, "uncoalesced")},
)


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


attach(
    "basics-ex-transpose",
    solution=launch_transpose,
    wrong={"write along columns": (launch_transpose_naive, "uncoalesced")},
)


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


attach(
    "basics-ex-banks",
    solution=launch_banks,
    wrong={"a (32, 32) tile read by columns": (launch_transpose, "bank conflicts")},
)
