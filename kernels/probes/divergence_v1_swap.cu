// Divergence v1: make the data differ instead of the code. Lane 0 swaps its operands first, then
// every lane runs the one common loop: the same results as v0 at the speed of the plain chain.
#include "arch.cuh"
#include "fma_common.cuh"

extern "C" __global__ void fma_swapped(float* out, int iters) {
    float t0, t1, sum = 0.0f;
    fma_inputs(t0, t1);
    if (threadIdx.x % PROBE_WARP_SIZE == 0) {
        const float t = t0;
        t0 = t1;
        t1 = t;
    }
    for (int i = 0; i < iters; ++i)
        sum = fmaf(t0, sum, t1);
    fma_store(out, sum);
}
