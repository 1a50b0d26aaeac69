// Store stream v0, the chapter's shape: one int per thread, ceil(n / 256) blocks of 256 threads.
// buf[x] = x, as the divergence probe writes with mask 0. Each block stores 1 KiB and exits, so a
// stream of n ints starts n / 256 blocks: if starting a block costs more than its stores take
// to drain, the block scheduler, not HBM, sets the rate (launch_bound.py times both).
extern "C" __global__ void store(int* __restrict__ buf, int n) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < n) buf[x] = x;
}
