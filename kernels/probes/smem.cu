// Shared-memory latency and bank conflicts, timed with clock64() around dependent loads.
// The table holds byte offsets, so a step is one load whose address is the previous value.
#include "arch.cuh"

#define SMEM_WORDS 2048  // 8 KB: room for lane * stride up to 31 * 33 words

// One thread chases `next` (word offsets, copied into shared memory) for `steps` loads.
extern "C" __global__ void smem_latency(const int* next, int n, int steps, long long* cycles, int* sink) {
    __shared__ int table[SMEM_WORDS];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        table[i] = next[i] * 4;
    __syncthreads();
    if (threadIdx.x != 0) return;
    const char* base = (const char*)table;
    int off = 0;
    for (int i = 0; i < 8; ++i)  // warm-up: the timed loop starts with the pipeline idle
        off = *(const int*)(base + off);
    const long long c0 = probe_clock();
#pragma unroll 8
    for (int i = 0; i < steps; ++i)
        off = *(const int*)(base + off);
    const long long c1 = probe_clock();
    cycles[0] = c1 - c0;
    sink[0] = off;
}

// One warp; lane l reads word (l * stride) % SMEM_WORDS over and over (each word holds its own
// byte offset). Lanes whose words share a bank (word % 32) are served one after another, so the
// time per load grows with the largest number of distinct words that fall into one bank.
extern "C" __global__ void smem_banks(int stride, int steps, long long* cycles, int* sink) {
    __shared__ int table[SMEM_WORDS];
    for (int i = threadIdx.x; i < SMEM_WORDS; i += blockDim.x)
        table[i] = i * 4;
    __syncthreads();
    const char* base = (const char*)table;
    int off = ((threadIdx.x * stride) % SMEM_WORDS) * 4;
    for (int i = 0; i < 8; ++i)
        off = *(const int*)(base + off);
    const long long c0 = probe_clock();
#pragma unroll 8
    for (int i = 0; i < steps; ++i)
        off = *(const int*)(base + off);
    const long long c1 = probe_clock();
    if (threadIdx.x == 0) cycles[0] = c1 - c0;
    sink[threadIdx.x] = off;
}
