// Shared-memory read bandwidth: every warp streams 16-byte words out of a 16 KB tile.
// Consecutive lanes read consecutive float4s, so a warp's LDS.128 touches all 32 banks
// four times -- no conflicts -- and the SM's shared memory delivers its 128 bytes per clock.
extern "C" __global__ void smem_read(float* out, int iters, int step) {
    __shared__ float4 tile[1024];
    const int t = threadIdx.x;
    for (int i = t; i < 1024; i += blockDim.x)
        tile[i] = make_float4(i, i + 1, i + 2, i + 3);
    __syncthreads();
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    int idx = t & 1023;
#pragma unroll 8
    for (int i = 0; i < iters; ++i) {
        const float4 v = tile[idx];
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        idx = (idx + step) & 1023;  // a run-time step keeps the loads inside the loop
    }
    out[blockIdx.x * blockDim.x + t] = (acc.x + acc.y) + (acc.z + acc.w);
}
