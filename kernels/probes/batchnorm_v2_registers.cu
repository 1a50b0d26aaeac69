// BatchNorm v2 (the MI25's examples 14b/14c): read every value once and keep the column in registers.
// TPC threads (adjacent lanes) share a column of BATCH values, BATCH / TPC each; their partial sums
// meet by butterfly shuffles. Fewer threads per column = more registers per thread: past 255 they
// spill to local memory (-DTPC=k, -DBATCH=n are compile-time so v[] can live in registers).
#include "arch.cuh"

#ifndef BATCH
#define BATCH 128
#endif
#ifndef TPC
#define TPC 4
#endif
#define PER_THREAD (BATCH / TPC)
#define EPS 1e-5f

__device__ __forceinline__ float column_sum(float v) {
#pragma unroll
    for (int m = TPC / 2; m > 0; m /= 2) v += probe_shfl_xor(v, m);
    return v;
}

// Launched with whole warps; lanes past the last pixel take part in the shuffles with zeros.
extern "C" __global__ void batchnorm(const float* __restrict__ x, float* __restrict__ y, int pixels, int batch) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int p = t / TPC, k = t % TPC;
    const bool valid = p < pixels;
    float v[PER_THREAD];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
        v[j] = valid ? x[(size_t)(k + j * TPC) * pixels + p] : 0.0f;
        sum += v[j];
    }
    const float mean = column_sum(sum) / BATCH;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) sq += (v[j] - mean) * (v[j] - mean);
    const float inv = rsqrtf(column_sum(sq) / BATCH + EPS);
    if (!valid) return;
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) y[(size_t)(k + j * TPC) * pixels + p] = (v[j] - mean) * inv;
}
