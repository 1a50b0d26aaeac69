// Shared by the FMA probes: per-thread inputs the compiler cannot fold, and a store of the result
// so no chain is dead code. t0 < 1 keeps sum = t0 * sum + t1 bounded for any length.
#pragma once

__device__ __forceinline__ void fma_inputs(float& t0, float& t1) {
    const int x = blockDim.x * blockIdx.x + threadIdx.x;
    const int y = blockDim.y * blockIdx.y + threadIdx.y;
    t0 = (float)x / (float)(x + 1);
    t1 = (float)(y + 1) / (float)(y + 100000000);
}

__device__ __forceinline__ void fma_store(float* out, float sum) {
    out[blockDim.x * blockIdx.x + threadIdx.x] = sum;
}
