// FMA v1: the same chain with `#pragma unroll 100`: fewer loop instructions (counter, compare,
// branch) per FMA, which matters only once the FP32 pipes, not the chain's latency, set the pace.
#include "fma_common.cuh"

extern "C" __global__ void fma_unroll100(float* out, int iters) {
    float t0, t1, sum = 0.0f;
    fma_inputs(t0, t1);
#pragma unroll 100
    for (int i = 0; i < iters; ++i)
        sum = fmaf(t0, sum, t1);
    fma_store(out, sum);
}
