// Store stream v1: a grid-stride loop over a grid that just fills the GPU (SMs x the blocks of 256
// threads one SM holds). The same addresses and values as v0, but every block is started once
// and lives for the whole stream, so no block launch stands between two stores.
extern "C" __global__ void store(int* __restrict__ buf, int n) {
    const int stride = gridDim.x * blockDim.x;  // launch_bound.plan keeps x + stride below 2^31
    for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < n; x += stride) buf[x] = x;
}
