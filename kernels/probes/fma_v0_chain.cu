// FMA v0: one dependent chain of `iters` FMAs per thread, unrolled as the compiler likes.
// Each FMA needs the previous result, so one warp issues one FMA per FMA latency at best.
#include "fma_common.cuh"

extern "C" __global__ void fma_chain(float* out, int iters) {
    float t0, t1, sum = 0.0f;
    fma_inputs(t0, t1);
    for (int i = 0; i < iters; ++i)
        sum = fmaf(t0, sum, t1);
    fma_store(out, sum);
}
