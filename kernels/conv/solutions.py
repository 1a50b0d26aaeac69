"""The convolution chapter's published solution and typical wrong kernels, attached to its exercises.

The wrong kernels are mistakes students make; the tests prove the checker fails them and says why.
The student edition leaves this file out (scripts/student_edition.py).
"""

import math

from numba import cuda, float32

from kernels.harness.exercise import attach  # first: the harness picks the simulator

from . import common, cuda_stages, model, stored_run, winograd
from .answers import _reg_e, _reg_tiling
from .s2_coalescing import conv_coalescing  # the published solution is the stage itself

THREADS = 64  # small blocks: the simulator runs every thread as a Python thread


# --- conv-ex-vec4: COALESCING in CUDA C++, four output channels per thread --------------------------------------
# Source text, not .cu files: no kernel source of the book (cuda_exercise). The solution, then mistakes made on it.

VEC4 = r"""
extern "C" __global__ void conv_vec4(const float* __restrict__ x, const float* __restrict__ f,
                                     float* __restrict__ y, int n_img, int height, int width,
                                     int n_in, int n_out) {
    const int quads = n_out / 4;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_img * height * width * quads) return;
    const int k = (t % quads) * 4;  // the first of this thread's four output channels
    const int pixel = t / quads;
    const int col = pixel % width, row = (pixel / width) % height, n = pixel / (width * height);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // four sums in registers
    for (int c = 0; c < n_in; ++c)
        for (int r = 0; r < 3; ++r) {
            const int ih = row + r - 1;
            if (ih < 0 || ih >= height) continue;
            for (int s = 0; s < 3; ++s) {
                const int iw = col + s - 1;
                if (iw < 0 || iw >= width) continue;
                const float v = x[((n * height + ih) * width + iw) * n_in + c];  // one load, four FMAs
                // k and n_out are multiples of 4, so the four filter words start on a 16-byte boundary
                const float4 w = *reinterpret_cast<const float4*>(f + ((r * 3 + s) * n_in + c) * n_out + k);
                acc.x += v * w.x;
                acc.y += v * w.y;
                acc.z += v * w.z;
                acc.w += v * w.w;
            }
        }
    *reinterpret_cast<float4*>(y + pixel * n_out + k) = acc;
}
"""

# Mistakes of conv-ex-vec4

VEC4_SCALAR_LOADS = VEC4.replace(
    """const float4 w = *reinterpret_cast<const float4*>(f + ((r * 3 + s) * n_in + c) * n_out + k);
                acc.x += v * w.x;
                acc.y += v * w.y;
                acc.z += v * w.z;
                acc.w += v * w.w;""",
    """const float* w = f + ((r * 3 + s) * n_in + c) * n_out + k;  // four 4-byte loads
                acc.x += v * w[0];
                acc.y += v * w[1];
                acc.z += v * w[2];
                acc.w += v * w[3];""",
)
VEC4_SCALAR_STORES = VEC4.replace(
    "    *reinterpret_cast<float4*>(y + pixel * n_out + k) = acc;",
    """    float* out = y + pixel * n_out + k;  // four 4-byte stores
    out[0] = acc.x;
    out[1] = acc.y;
    out[2] = acc.z;
    out[3] = acc.w;""",
)
VEC4_RIGHT_EDGE = VEC4.replace("if (iw < 0 || iw >= width) continue;", "if (iw < 0 || iw > width) continue;")
assert VEC4_SCALAR_LOADS != VEC4 and VEC4_SCALAR_STORES != VEC4 and VEC4_RIGHT_EDGE != VEC4

attach(
    "conv-ex-vec4",
    solution=VEC4,
    wrong={
        "four scalar filter loads": (VEC4_SCALAR_LOADS, "0 16-byte global loads (LDG.E.128)"),
        "four scalar stores": (VEC4_SCALAR_STORES, "0 16-byte global stores (STG.E.128)"),
        "the right edge read past the row": (VEC4_RIGHT_EDGE, "wrong"),  # the results show it: on a GPU only
    },
)


# --- conv-ex-coalescing: NAIVE's threads and loops, the data in NHWC ------------------------------
# launch(y, x, f): x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K).


def launch_coalescing(y, x, f):
    conv_coalescing[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


def launch_coalescing_grid_rounded_down(y, x, f):
    conv_coalescing[max(y.size // THREADS, 1), THREADS](x, f, y)


@cuda.jit
def conv_coalescing_unguarded(x, f, y):
    n_img, height, width, n_in = x.shape
    n_out = f.shape[3]
    idx = cuda.grid(1)  # no test against the number of outputs: the last block's extra threads run on
    k = idx % n_out
    pixel = idx // n_out
    col = pixel % width
    row = (pixel // width) % height
    n = pixel // (width * height)
    acc = float32(0.0)
    for c in range(n_in):
        for r in range(3):
            ih = row + r - 1
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, ih, iw, c] * f[r, s, c, k]
    y[n, row, col, k] = acc


def launch_coalescing_unguarded(y, x, f):
    conv_coalescing_unguarded[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


@cuda.jit
def conv_coalescing_row_off_by_one(x, f, y):
    n_img, height, width, n_in = x.shape
    n_out = f.shape[3]
    idx = cuda.grid(1)
    if idx >= n_img * height * width * n_out:
        return
    k = idx % n_out
    pixel = idx // n_out
    col = pixel % width
    row = (pixel // width) % height
    n = pixel // (width * height)
    acc = float32(0.0)
    for c in range(n_in):
        for r in range(3):
            ih = row + r  # the -1 that centres the filter is lost
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, ih, iw, c] * f[r, s, c, k]
    y[n, row, col, k] = acc


def launch_coalescing_row_off_by_one(y, x, f):
    conv_coalescing_row_off_by_one[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


@cuda.jit
def conv_coalescing_pixel_fastest(x, f, y):
    n_img, height, width, n_in = x.shape
    n_out = f.shape[3]
    idx = cuda.grid(1)
    pixels = n_img * height * width
    if idx >= pixels * n_out:
        return
    pixel = idx % pixels  # NAIVE's numbering turned around: neighbouring lanes take neighbouring pixels,
    k = idx // pixels  # so they read x and write y a whole pixel's channels apart
    col = pixel % width
    row = (pixel // width) % height
    n = pixel // (width * height)
    acc = float32(0.0)
    for c in range(n_in):
        for r in range(3):
            ih = row + r - 1
            if 0 <= ih < height:
                for s in range(3):
                    iw = col + s - 1
                    if 0 <= iw < width:
                        acc += x[n, ih, iw, c] * f[r, s, c, k]
    y[n, row, col, k] = acc


def launch_coalescing_pixel_fastest(y, x, f):
    conv_coalescing_pixel_fastest[(y.size + THREADS - 1) // THREADS, THREADS](x, f, y)


attach(
    "conv-ex-coalescing",
    solution=launch_coalescing,
    wrong={
        "grid rounded down": (launch_coalescing_grid_rounded_down, "never written"),
        "no bounds check": (launch_coalescing_unguarded, "outside an array"),
        "row index off by one": (launch_coalescing_row_off_by_one, "shifted by -1 along axis 1"),
        "pixels fastest": (launch_coalescing_pixel_fastest, "uncoalesced global access"),
    },
)


# --- the questions: answers worked out as the published solutions do --------------------------------

CONV1, CONV2 = common.PROBLEMS["conv1"], common.PROBLEMS["conv2"]
RUN = stored_run.load()
SMS = RUN.props["sms"]

attach(
    "conv-ex-predict",
    {
        "other_per_ffma_bkc8": _reg_tiling(8).other / _reg_tiling(8).fp32,
        "other_per_ffma_bkc16": _reg_tiling(16).other / _reg_tiling(16).fp32,
        "E_bkc8": _reg_e(8),
        "E_bkc16": _reg_e(16),
    },
    {
        "E without the weights": (
            {
                "other_per_ffma_bkc8": _reg_tiling(8).other / _reg_tiling(8).fp32,
                "other_per_ffma_bkc16": _reg_tiling(16).other / _reg_tiling(16).fp32,
                "E_bkc8": _reg_tiling(8).fp32 / _reg_tiling(8).total,
                "E_bkc16": _reg_tiling(16).fp32 / _reg_tiling(16).total,
            },
            "E_bkc8: not yet",
        )
    },
)

_DB = model.compiled("DOUBLE BUFFER")[1]
_DB_BM, _DB_BN = cuda_stages.tile_shape("DOUBLE BUFFER", cuda_stages.DEFAULTS["DOUBLE BUFFER"])
_DB_BLOCKS = math.ceil(CONV2.pixels / _DB_BM) * math.ceil(CONV2.k / _DB_BN)
_DB_RESIDENT = model.resident_blocks("DOUBLE BUFFER", CONV2, _DB, props=RUN.props)
attach(
    "conv-ex-occupancy",
    {
        "blocks": _DB_BLOCKS,
        "resident": _DB_RESIDENT,
        # 4 warps a block, one per scheduler: the busiest SM's blocks set the time of the single wave
        "occupancy": _DB_BLOCKS / (SMS * math.ceil(_DB_BLOCKS / SMS)),
    },
    {
        "resident from the threads alone": (
            {"blocks": _DB_BLOCKS, "resident": RUN.props["max_threads_per_sm"] // 128, "occupancy": 1.0},
            "resident: not yet",
        )
    },
)


def _sweep_kb(p, blocks=3, unit=1e3):
    return blocks * p.c * (_DB_BM + _DB_BN) * 4 / unit


attach(
    "conv-ex-l1",
    {
        "conv1_kb": _sweep_kb(CONV1),
        "conv2_kb": _sweep_kb(CONV2),
        "reuse": model.tap_reuse(CONV1, _DB_BM),
        "hit": model.tap_reuse(CONV1, _DB_BM) * _DB_BM / (_DB_BM + _DB_BN),
    },
    {
        "one block, in KiB": (
            {
                "conv1_kb": _sweep_kb(CONV1, 1, 1024),
                "conv2_kb": _sweep_kb(CONV2, 1, 1024),
                "reuse": model.tap_reuse(CONV1, _DB_BM),
                "hit": model.tap_reuse(CONV1, _DB_BM),
            },
            "conv1_kb: not yet",
        )
    },
)

_SK_BLOCKS = model.launch_shape("SPLIT-K", CONV2)[0]
_SK_RESIDENT = model.resident_blocks("SPLIT-K", CONV2, model.compiled("SPLIT-K")[1], props=RUN.props)
_SK_LEFT = _SK_BLOCKS - SMS * _SK_RESIDENT
_SK_SPREAD, _SK_CLUSTER = _SK_RESIDENT + math.ceil(_SK_LEFT / SMS), _SK_RESIDENT + min(_SK_RESIDENT, _SK_LEFT)
_SK = model.predict("SPLIT-K", CONV2, RUN.w, RUN.lat, props=RUN.props, **RUN.gpu_rates)
# the first wave's warps per scheduler wait on latency (eta < 1): the tail clusters
_SK_PLACED = "cluster" if _SK.efficiency(math.ceil(_SK_RESIDENT * _SK.waves.warps_per_block / 4)) < 1 else "spread"
attach(
    "conv-ex-lastwave",
    {"left": _SK_LEFT, "busiest_spread": _SK_SPREAD, "busiest_cluster": _SK_CLUSTER, "placement": _SK_PLACED},
    {
        "spread and cluster swapped": (
            {"left": _SK_LEFT, "busiest_spread": _SK_CLUSTER, "busiest_cluster": _SK_SPREAD, "placement": _SK_PLACED},
            "busiest_spread: not yet",
        )
    },
)

_NCU = stored_run.read_ncu()
_BLOCK_STALLS = _NCU.stalls[("BLOCK TILING", "conv1")]
_STALL_ANSWERS = {
    "block_wait": max((k for k in _BLOCK_STALLS if k != "ready, not picked"), key=_BLOCK_STALLS.get),
    "queue_columns": ["global load queue full", "shared load queue full"],
    "coal_conv2_l1_pct": 100 * _NCU.l1_hit[("COALESCING", "conv2")],
    "coal_conv2_memory_latency": _NCU.stalls[("COALESCING", "conv2")]["memory latency"],
}
attach(
    "conv-ex-stalls",
    _STALL_ANSWERS,
    {
        "ready warps taken for a wait": (
            {**_STALL_ANSWERS, "block_wait": "ready, not picked"},
            "block_wait: not yet",
        ),
        "one queue only": ({**_STALL_ANSWERS, "queue_columns": ["global load queue full"]}, "queue_columns: not yet"),
    },
)


def _quarter_passes(run: int) -> int:
    """Threads 0-7 load the float4 at float run * tg: the passes their 16-byte loads take."""
    from kernels.harness import accesses

    return accesses.bank_degree([4 * run * tg for tg in range(8)], 16)


_V_LOADS = winograd.v_loads(CONV1) / 1e6  # 2 per channel in each of a block's 8 warps
_BANK_ANSWERS = {
    "passes_run8": _quarter_passes(8),
    "passes_run4": _quarter_passes(4),
    "saved_millions": _V_LOADS * 4 * (_quarter_passes(8) - _quarter_passes(4)),
}
attach(
    "conv-ex-banks",
    _BANK_ANSWERS,
    {
        "the quarters forgotten": ({**_BANK_ANSWERS, "saved_millions": _V_LOADS}, "saved_millions: not yet"),
        "whole warp, not a quarter": ({**_BANK_ANSWERS, "passes_run8": 4, "passes_run4": 2}, "passes_run8: not yet"),
    },
)
