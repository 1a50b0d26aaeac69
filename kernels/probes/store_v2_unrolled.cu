// Store stream v2: ELEMS ints per thread (-DELEMS=k), unrolled, each step a block-wide run of
// consecutive words as in v0, so every warp store still fills whole 128-byte lines. The stream
// starts ELEMS times fewer blocks than v0 and each block has ELEMS times the work.
#ifndef ELEMS
#define ELEMS 8
#endif

extern "C" __global__ void store(int* __restrict__ buf, int n) {
    const int first = blockIdx.x * blockDim.x * ELEMS + threadIdx.x;  // plan keeps it below 2^31
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) {
        const int x = first + k * blockDim.x;
        if (x < n) buf[x] = x;
    }
}
