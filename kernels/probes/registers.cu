// The register limit: LIVE values (-DLIVE=k) stay live across a loop, so the kernel needs about
// LIVE registers. ptxas gives a thread at most 255; past that the surplus goes to local memory
// (spill stores and loads), and every register a thread holds is one fewer for other warps.
#ifndef LIVE
#define LIVE 64
#endif

extern "C" __global__ void live_values(const float* __restrict__ in, float* __restrict__ out, int iters) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;
    float v[LIVE];
#pragma unroll
    for (int k = 0; k < LIVE; ++k) v[k] = in[k * stride + t];
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < LIVE; ++k) v[k] = fmaf(v[k], 0.999f, v[(k + 1) % LIVE]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < LIVE; ++k) sum += v[k];
    out[t] = sum;
}
