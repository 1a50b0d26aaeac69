"""Auto-checked exercises of the convolution chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/03_conv.ipynb.
The questions' expected answers are computed in answers.py; the published solutions and typical wrong
kernels are in solutions.py. The student edition has neither file. ``conv-ex-vec4`` asks for a CUDA C++
kernel (``cuda_exercise``): its starter is text in the notebook, never a .cu file of kernels/.
"""

import numpy as np

from kernels.harness.accesses import COALESCED
from kernels.harness.cuda_exercise import CudaExercise, SassRule, opcodes
from kernels.harness.exercise import Exercise, Part, Question, register

from .common import R, S, reference


def coalescing_inputs(rng, size):
    """x (N, H, W, C) and f (3, 3, C, K) in [-1, 1) for size = (N, C, K, H, W)."""
    n, c, k, h, w = size
    return (rng.uniform(-1, 1, (n, h, w, c)).astype(np.float32), rng.uniform(-1, 1, (R, S, c, k)).astype(np.float32))


def coalescing_reference(x_nhwc, f_rsck):
    """common.reference (NCHW, KCRS) on the same data, returned in NHWK."""
    y = reference(x_nhwc.transpose(0, 3, 1, 2), f_rsck.transpose(3, 2, 0, 1))
    return y.transpose(0, 2, 3, 1)


register(
    Exercise(
        label="conv-ex-coalescing",
        task="COALESCING from NAIVE: y[n, h, w, k] = sum over c, r, s of x[n, h+r-1, w+s-1, c] * f[r, s, c, k], "
        "zero-padded; x NHWC, f (3, 3, C, K); launch(y, x, f)",
        make_inputs=coalescing_inputs,
        reference=coalescing_reference,
        # (N, C, K, H, W): 32 output channels, so that a warp of the channel-fastest numbering covers one
        # pixel and its accesses can be coalesced; output counts 480, 1344 and 32, none a multiple of the block
        sizes=((1, 4, 32, 5, 3), (2, 3, 32, 7, 3), (1, 1, 32, 1, 1)),
        atol=1e-4,
        expect=(COALESCED,),
    )
)


# --- conv-ex-vec4: COALESCING in CUDA C++, four output channels per thread through 16-byte loads and stores ----
VEC4_THREADS = 128  # threads per block of the exercise's launch


def launch_vec4(kernel, y, x, f):
    """The exercise's launch of the student's conv_vec4: one thread per four outputs of a pixel."""
    n, h, w, c = x.shape
    k = f.shape[3]
    quads = n * h * w * k // 4
    dims = tuple(np.int32(d) for d in (n, h, w, c, k))
    kernel(((quads + VEC4_THREADS - 1) // VEC4_THREADS,), (VEC4_THREADS,), (x, f, y, *dims))


register(
    CudaExercise(
        label="conv-ex-vec4",
        task="COALESCING in CUDA C++ with four output channels per thread: the filter read and the output written "
        'in 16-byte float4 pieces, the four sums in registers; extern "C" __global__ void conv_vec4(x, f, y, '
        "N, H, W, C, K)",
        kernel="conv_vec4",
        launch=launch_vec4,
        make_inputs=coalescing_inputs,
        reference=coalescing_reference,
        # (N, C, K, H, W): K a multiple of 4 but not of 32, pixels not a multiple of the block
        sizes=((1, 3, 12, 5, 7), (2, 5, 20, 3, 4), (1, 1, 4, 1, 1)),
        atol=1e-4,
        sass=(
            SassRule(
                "16-byte global loads (LDG.E.128)",
                opcodes("LDG", width="128"),
                least=1,
                hint="load f[r, s, c, k .. k + 3] as one float4, *reinterpret_cast<const float4*>(f + i) with i a "
                "multiple of 4: the compiler never merges four scalar loads, as it cannot know they are aligned",
            ),
            SassRule(
                "16-byte global stores (STG.E.128)",
                opcodes("STG", width="128"),
                least=1,
                hint="store the four sums as one float4 through a float4 pointer to y's element k",
            ),
            SassRule(
                "local-memory loads and stores (LDL, STL)",
                opcodes("LDL", "STL"),
                most=0,
                hint="index the four sums only with constants (acc.x ... acc.w, or a loop over 4 that unrolls): "
                "an array indexed at run time lives in local memory",
            ),
        ),
    )
)


register(
    Question(
        label="conv-ex-predict",
        task="REGISTER TILING on conv1 with BKC = 8 and 16: other instructions per FFMA and E",
        parts={
            "other_per_ffma_bkc8": Part(
                "divide model.sass_counts(...).other by .fp32 for the stage's default tile on conv1"
            ),
            "other_per_ffma_bkc16": Part(
                "the same with dict(BM=128, BN=64, BKC=16), compiled again (model.compiled(stage, tile))"
            ),
            "E_bkc8": Part(
                "perfmodel.efficiency(counts, weights) with W_ldst and W_other of the stored run",
                rtol=0.03,
                uses=("other_per_ffma_bkc8",),
            ),
            "E_bkc16": Part("the same E with the BKC = 16 counts", rtol=0.03, uses=("other_per_ffma_bkc16",)),
        },
    )
)


register(
    Question(
        label="conv-ex-occupancy",
        task="DOUBLE BUFFER on conv2: blocks launched, blocks resident per SM, occupancy ratio",
        parts={
            "blocks": Part("pixel tiles of 128 times channel tiles of 64, each rounded up"),
            "resident": Part(
                "perfmodel.blocks_per_sm with 128 threads and the compile table's registers and shared memory", rtol=0
            ),
            "occupancy": Part(
                "the issue slots used over those available: the busiest SM runs ceil(blocks / SMs) blocks",
                uses=(
                    "blocks",
                    "resident",
                ),
            ),
        },
    )
)


register(
    Question(
        label="conv-ex-l1",
        task="DOUBLE BUFFER: KB loaded between two taps (conv1, conv2), tap reuse and predicted L1 hit rate (conv1)",
        parts={
            "conv1_kb": Part("3 blocks x C channels x (128 pixels + 64 filter columns) x 4 bytes"),
            "conv2_kb": Part("the same with conv2's C"),
            "reuse": Part(
                "count the distinct pixels the nine taps of a 128-pixel run read, against the loads", rtol=0.05
            ),
            "hit": Part(
                "only input sectors can hit: weigh the reuse by the input's share of a step's sectors",
                rtol=0.05,
                uses=("reuse",),
            ),
        },
    )
)


register(
    Question(
        label="conv-ex-lastwave",
        task="SPLIT-K on conv2: blocks left after the first wave, the busiest SM's blocks spread or clustered, "
        "and the placement the model chooses (spread or cluster)",
        parts={
            "left": Part("subtract one full wave: SMs x resident blocks", rtol=0),
            "busiest_spread": Part("a full wave plus ceil(leftovers / SMs)", rtol=0, uses=("left",)),
            "busiest_cluster": Part("a full wave plus as many as one SM holds", rtol=0, uses=("left",)),
            "placement": Part(
                "perfmodel.wave_blocks clusters the tail only after latency-bound waves",
                uses=(
                    "busiest_spread",
                    "busiest_cluster",
                ),
            ),
        },
    )
)


register(
    Question(
        label="conv-ex-stalls",
        task="From the stored ncu run: BLOCK TILING's largest stall on conv1 (a stall column's name), the two "
        "columns that would show loads holding up issue, COALESCING's L1 hit % and memory-latency stall on conv2",
        parts={
            "block_wait": Part(
                "the largest column of the stall table in BLOCK TILING's conv1 row, 'ready, not picked' aside"
            ),
            "queue_columns": Part(
                "the stall columns a warp waits in when the load/store pipe cannot take another load"
            ),
            "coal_conv2_l1_pct": Part("ncu's L1 hit rate of COALESCING on conv2 (the profile's tables)", rtol=0.05),
            "coal_conv2_memory_latency": Part("the 'memory latency' stall of COALESCING on conv2", rtol=0.05),
        },
    )
)


register(
    Question(
        label="conv-ex-banks",
        task="WINOGRAD's loads of V: passes a quarter warp's float4 load takes with runs of 8 and of 4 tiles a "
        "thread, and the shared-memory wavefronts the runs of 4 save on conv1 (millions)",
        parts={
            "passes_run8": Part(
                "accesses.bank_degree of threads 0-7's byte addresses 4 * 8 * tg, 16 bytes each", rtol=0
            ),
            "passes_run4": Part("the same with 4 * 4 * tg", rtol=0),
            "saved_millions": Part(
                "loads of V (2 per channel, in every warp of every block) x the quarters of a warp x the passes saved",
                uses=(
                    "passes_run8",
                    "passes_run4",
                ),
            ),
        },
    )
)
