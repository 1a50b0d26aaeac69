// Memory latency by pointer chasing. Every element of the chain holds the address of the next, so
// each load's address is the previous load's value: the loads cannot overlap and the time per step
// is one full load latency. One thread walks the chain; clock64() brackets the timed walk.
// `warm` steps first walk the same chain untimed (to fill the caches when measuring hits).
#include "arch.cuh"

typedef unsigned long long addr_t;

extern "C" __global__ void chase(const addr_t* start, int warm, int steps, long long* cycles, addr_t* sink) {
    const addr_t* p = start;
    for (int i = 0; i < warm; ++i)
        p = (const addr_t*)probe_load(p);
    const long long c0 = probe_clock();
#pragma unroll 8
    for (int i = 0; i < steps; ++i)
        p = (const addr_t*)probe_load(p);
    const long long c1 = probe_clock();
    cycles[0] = c1 - c0;
    sink[0] = (addr_t)p;  // the walk's end: keeps every load alive
}

// The same walk with loads that skip L1 (ld.global.cg): every hit is an L2 hit.
extern "C" __global__ void chase_l2(const addr_t* start, int warm, int steps, long long* cycles, addr_t* sink) {
    const addr_t* p = start;
    for (int i = 0; i < warm; ++i)
        p = (const addr_t*)probe_load_l2(p);
    const long long c0 = probe_clock();
#pragma unroll 8
    for (int i = 0; i < steps; ++i)
        p = (const addr_t*)probe_load_l2(p);
    const long long c1 = probe_clock();
    cycles[0] = c1 - c0;
    sink[0] = (addr_t)p;
}
