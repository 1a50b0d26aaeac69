// Instruction throughputs for the performance model's weights (DIGEST 002): how many integer,
// shared-memory load and global load instructions an SM issues per second, measured like the FP32
// FMA ceiling; and the latencies its scoreboard needs (latency_probe, at the end).

// Eight independent chains of (add, xor): two integer instructions per chain and iteration that
// ptxas cannot merge (for sm_90 a VIADD and a LOP3.LUT): the rate of plain integer instructions.
extern "C" __global__ void iadd_rate(int* out, int iters, int c, int d) {
    int v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = threadIdx.x + j;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = (v[j] + c) ^ d;
    }
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += v[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Eight independent 4-byte loads per iteration at fixed offsets from one address ([R+imm]: no address
// arithmetic per load), folded with xor so the loads stay and cost no FP32 work. Lane t reads word t of
// a row (conflict-free in shared memory, coalesced in global). Fewer than 4 instructions issue per
// load, so the load pipe (one load per SM and cycle: 4 issue slots of each of 4 schedulers), not the
// issue, sets the rate. A run-time step keeps the loads inside the loop.
__device__ __forceinline__ int xor_sweep(const int* words, int iters, int step) {
    int acc = 0, idx = threadIdx.x & 31;
    for (int i = 0; i < iters; ++i) {
        const int* row = words + idx;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc ^= row[256 * j];
        idx = (idx + step) & 1023;
    }
    return acc;
}

// Shared loads (LDS.32): the model's load/store rate.
extern "C" __global__ void lds_rate(int* out, int iters, int step) {
    __shared__ int words[4096];
    for (int i = threadIdx.x; i < 4096; i += blockDim.x) words[i] = i;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = xor_sweep(words, iters, step);
}

// The same loads from global memory (LDG.32, 16 KB that stay in L1): does one load/store weight
// serve global loads too?
extern "C" __global__ void ldg_rate(const int* words, int* out, int iters, int step) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = xor_sweep(words, iters, step);
}

// Both at once, to test the model's central assumption: per iteration the eight (add, xor) chains of
// iadd_rate and MIX_LOADS of ldg_rate's loads (L1 hits, up to 16: 32 KB of words). E adds the two
// costs up; if the load pipe works beside the issue of the integer instructions, the time is the
// larger of the two instead.
#ifndef MIX_LOADS
#define MIX_LOADS 8
#endif
extern "C" __global__ void mix_rate(const int* words, int* out, int iters, int step, int c, int d) {
    int v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = threadIdx.x + j;
    int acc = 0, idx = threadIdx.x & 31;
#pragma unroll 1   // one iteration per loop body: its SASS counts are one iteration's
    for (int i = 0; i < iters; ++i) {
        const int* row = words + idx;
#pragma unroll
        for (int j = 0; j < MIX_LOADS; ++j) acc ^= row[256 * j];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = (v[j] + c) ^ d;
        idx = (idx + step) & 1023;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) acc += v[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// Latencies for the model's scoreboard (perfmodel.scheduler_cycles), one warp timed with clock64():
// cycles per FFMA of one dependent chain (the fixed ALU/FMA latency), per shared load whose address
// is the previous load's value (LDS [R+UR], nothing else in the chain), and per __syncthreads() of a
// 4-warp block whose warps arrive together (one warp per scheduler, as in the 128-thread tiles).
extern "C" __global__ void latency_probe(long long* cycles, float* sink, int iters, float a, float b) {
    __shared__ unsigned table[64];
    const int t = threadIdx.x;
    if (t < 64) table[t] = ((t + 1) & 63) * 4;   // byte offset of the next entry
    __syncthreads();
    float v = a + t;
    const long long c0 = clock64();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j) v = fmaf(v, a, b);
    }
    const long long c1 = clock64();
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(table));
    unsigned offset = (t & 63) * 4;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j)   // asm: the compiler may not reorder or fold the chain
            asm volatile("ld.shared.u32 %0, [%1];" : "=r"(offset) : "r"(base + offset));
    }
    const long long c2 = clock64();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j) __syncthreads();
    }
    const long long c3 = clock64();
    if (t == 0) {
        cycles[0] = c1 - c0;
        cycles[1] = c2 - c1;
        cycles[2] = c3 - c2;
    }
    sink[t] = v + offset;
}
