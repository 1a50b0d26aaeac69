// Divergence v0: lane 0 of every warp runs a different loop (operands swapped) from lanes 1..31.
// A warp issues both loops one after the other with part of its lanes masked off: twice the time.
#include "arch.cuh"
#include "fma_common.cuh"

extern "C" __global__ void fma_divergent(float* out, int iters) {
    float t0, t1, sum = 0.0f;
    fma_inputs(t0, t1);
    if (threadIdx.x % PROBE_WARP_SIZE == 0) {
        for (int i = 0; i < iters; ++i)
            sum = fmaf(t1, sum, t0);
    } else {
        for (int i = 0; i < iters; ++i)
            sum = fmaf(t0, sum, t1);
    }
    fma_store(out, sum);
}
