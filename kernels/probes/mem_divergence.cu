// Memory divergence (the MI25's section 2.7.2): the lanes of a warp compute their store address in
// two different ways. Lanes with (lane & divergence) == divergence store to buf[x]; the others to
// buf[x & mask], which with mask >= every x is the same address reached by a different expression.
// Does the compiler emit two stores (each with half the lanes) or one store with a selected address?
#include "arch.cuh"

extern "C" __global__ void store_divergent(int* __restrict__ buf, int n, int divergence, int mask) {
    const int x = blockDim.x * blockIdx.x + threadIdx.x;
    if (x >= n) return;
    if ((threadIdx.x % PROBE_WARP_SIZE & divergence) == divergence)
        buf[x] = x;
    else
        buf[x & mask] = x;
}
