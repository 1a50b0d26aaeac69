"""Auto-checked exercises of the SSIM chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/02_ssim_worklog.ipynb or
02b_ssim_beyond.ipynb. The questions' expected answers are computed in answers.py, from the sources and the
stored run; the published solutions, right answers and typical wrong ones are in solutions.py. The student
edition has neither file.
"""

import numpy as np

from kernels.harness.accesses import COALESCED, READ_ONCE
from kernels.harness.exercise import Exercise, Part, Question, register

from .common import gaussian_weights


def blur_x_inputs(rng, shape):
    return (rng.uniform(0.0, 1.0, shape).astype(np.float32),)


def blur_x_reference(img):
    from scipy.ndimage import correlate1d

    return correlate1d(img.astype(np.float64), gaussian_weights(), axis=-1, mode="constant")


register(
    Exercise(
        label="ssim-ex-blur-x",
        task="the x-pass: out[y, x] = sum_k GAUSS[k] * img[y, x + k - 5], zero outside the image; launch(out, img)",
        make_inputs=blur_x_inputs,
        reference=blur_x_reference,
        # (H, W): not multiples of the block; the last one narrower than the window
        sizes=((13, 21), (11, 37), (3, 4)),
        atol=1e-5,
    )
)


# The x-pass again, each pixel read from global memory about once: a block stages its rows with a halo of
# RADIUS on each side in shared memory, and the 11 taps read the tile.
register(
    Exercise(
        label="ssim-ex-blur-tile",
        task="the x-pass of ssim-ex-blur-x with each block's rows and their halo staged in shared memory: "
        "every pixel read from global memory about once, coalesced; launch(out, img)",
        make_inputs=blur_x_inputs,
        reference=blur_x_reference,
        # (H, W): a row wider than one block of 64 and narrower than two; one image narrower than the window
        sizes=((5, 100), (11, 37), (3, 4)),
        atol=1e-5,
        expect=(COALESCED, READ_ONCE),
    )
)


register(
    Question(
        label="ssim-ex-naive-v1",
        task="how many flush_conv_scratch calls can go, and how many syncthreads must stay",
        parts={
            "flushes_removed": Part("does any y-pass read a scratch element that its x-pass did not write?"),
            "barriers_kept": Part(
                "a barrier orders a write and a read (or a read and a later write) of one shared buffer by "
                "different threads; list what each step reads and writes",
                rtol=0,
            ),
        },
    )
)


register(
    Question(
        label="ssim-ex-v2-model",
        task="(b): the tile height B_Y that minimises the FFMA total, and that total in millions",
        parts={
            "best_by": Part("evaluate common.v2_ffma_total(3840, 2160, 1024 // by, by) for every power of two", rtol=0),
            "total_millions": Part(
                "the total of common.v2_ffma_total at the best B_Y, divided by a million", uses=("best_by",)
            ),
        },
    )
)


register(
    Question(
        label="ssim-ex-partial-sums",
        task="partial sums per moment and column, and the registers the partial sums of one thread take",
        parts={
            "sums_per_moment": Part(
                "which pending output is complete, and which has received nothing yet, when a row arrives?", rtol=0
            ),
            "registers": Part(
                "sums per moment, times the moments, times the columns of one thread", rtol=0, uses=("sums_per_moment",)
            ),
        },
    )
)


register(
    Question(
        label="ssim-ex-beyond-count",
        task="V6's thread-instructions per output pixel: your model's, and the profiler's",
        parts={
            "model": Part(
                "per input row: the model cell's x-pass and y-pass, plus the row loads; times 82/72 input rows "
                "per output row, over 2 columns, plus the formula",
                rtol=0.05,
            ),
            "profiler": Part("the thread instr / px column of the profiler table, row V6"),
        },
    )
)


register(
    Question(
        label="ssim-ex-beyond-depth",
        task="the KB an SM must have in flight, and the rows per warp V5 must prefetch",
        parts={
            "kb_in_flight": Part(
                "bandwidth per SM (copy rate over the SMs) times the latency; GB/s times ns gives bytes", rtol=0.05
            ),
            "rows_per_warp": Part(
                "the bytes in flight over the warps per SM, over the bytes of one row of both images with the halo",
                rtol=0.05,
                uses=("kb_in_flight",),
            ),
        },
    )
)


register(
    Question(
        label="ssim-ex-beyond-unroll",
        task="the fastest unroll of V9's row loop, and whether ten rows per trip is faster or slower than V9",
        parts={
            "fastest_unroll": Part("where do the register moves go, and how large is the loop at each unroll?", rtol=0),
            "ten_rows": Part(
                "which version already runs ten rows per trip, and how did it fare against V9? (faster or slower)"
            ),
        },
    )
)


register(
    Question(
        label="ssim-ex-train-floor",
        task="the megabytes a training step with stored derivative maps moves at 1x3x2160x3840, and its floor in ms "
        "at the machine chapter's copy rate",
        parts={
            "megabytes": Part(
                "count the 4-byte planes each kernel reads and writes: two images, three maps, one gradient"
            ),
            "floor_ms": Part("bytes over the copy rate (GB/s is bytes per nanosecond)", rtol=0.05, uses=("megabytes",)),
        },
    )
)
