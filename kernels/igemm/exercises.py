"""Auto-checked exercises of the implicit-GEMM chapter: what the checker needs to grade them.

Each exercise's label is the one of its ``{exercise}`` directive in notebooks/05_implicit_gemm.ipynb. The
expected answers are computed in answers.py; the published answers and typical wrong ones are in solutions.py.
The student edition has neither file.
"""

from kernels.harness.exercise import Part, Question, register

register(
    Question(
        label="igemm-ex-banks",
        task="the first banks of threads 0-7 with S = 2048 and S = 2080, and the smallest gap above 2048 that works",
        parts={
            "banks_2048": Part("first bank = (offset / 4) mod 32"),
            "banks_2080": Part("S = 2080 is 520 words: what is 520 mod 32?"),
            "gap_bytes": Part("try gaps of 16, 32, ... bytes; threads 1 and 4 must not share a bank"),
        },
    )
)


register(
    Question(
        label="igemm-ex-khalf",
        task="K at 90% of the asymptotic rate for cuBLAS and for our step (from the sweep's fit), "
        "and the V100's K_1/2 from its chart",
        parts={
            "k90_cublas": Part("solve K / (K + K_1/2) = 0.9 with cuBLAS's fit", rtol=0.05),
            "k90_ours": Part("the same with our step's fitted K_1/2", rtol=0.05),
            "v100_khalf": Part("solve R(32) / R_inf = 32 / (32 + K_1/2) with the chart's two rates", rtol=0.05),
        },
    )
)


register(
    Question(
        label="igemm-ex-warptile",
        task="bytes per multiply-add of 32x32, 64x64 and 64x128 warp tiles, and what limits the largest",
        parts={
            "bytes_32x32": Part("2 (W_m + W_n) / (W_m W_n) bytes"),
            "bytes_64x64": Part("2 (W_m + W_n) / (W_m W_n) bytes"),
            "bytes_64x128": Part("2 (W_m + W_n) / (W_m W_n) bytes"),
            "limit": Part("count the fp32 accumulators one thread of the warp holds (one word)"),
        },
    )
)


register(
    Question(
        label="igemm-ex-setmaxnreg",
        task="registers freed by the producer and taken by the consumers (104/200, then 112/200), "
        "and accumulators per thread of a 128x256 warpgroup tile",
        parts={
            "freed": Part("128 threads, each giving back what setmaxnreg drops"),
            "taken": Part("256 threads, each taking what it gets above 168"),
            "freed_with_112": Part("the same with 112"),
            "accumulators": Part("one fp32 accumulator per output, over 128 threads"),
        },
    )
)
