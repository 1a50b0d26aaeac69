// FMA v2: an outer loop around a fully unrolled inner loop of 100: one compact body, no remainder
// code, so the loop sits in the instruction cache (the MI25 gained 48 -> 59 FMA/cycle from this).
#include "fma_common.cuh"

extern "C" __global__ void fma_double_loop(float* out, int outer) {
    float t0, t1, sum = 0.0f;
    fma_inputs(t0, t1);
    for (int i = 0; i < outer; ++i) {
#pragma unroll
        for (int j = 0; j < 100; ++j)
            sum = fmaf(t0, sum, t1);
    }
    fma_store(out, sum);
}
