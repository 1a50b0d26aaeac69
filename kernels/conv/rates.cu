// Instruction throughputs for the performance model's weights (DIGEST 002): how many integer-ALU
// and shared-memory load instructions an SM issues per second, measured like the FP32 FMA ceiling.

// Eight independent chains of (add, xor): two integer-ALU instructions per chain and iteration that
// ptxas cannot merge (IADD3 only adds, LOP3 only does logic), so the ALU pipe sets the rate.
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

// Conflict-free 4-byte shared loads (LDS.32): lane t reads word t of a row, 8 independent loads
// per iteration, folded with xor so the loads stay and cost no FP32 work.
extern "C" __global__ void lds_rate(int* out, int iters, int step) {
    __shared__ int words[2048];
    for (int i = threadIdx.x; i < 2048; i += blockDim.x) words[i] = i;
    __syncthreads();
    int acc = 0, idx = threadIdx.x & 31;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc ^= words[(idx + 256 * j) & 2047];
        idx = (idx + step) & 2047;   // a run-time step keeps the loads inside the loop
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
