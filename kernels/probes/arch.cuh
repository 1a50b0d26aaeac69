// The architecture-specific lines of every probe, in one place. The .cu files around it are plain
// CUDA C++ that hipRTC also accepts, so CuPy's ROCm build could compile them with the AMD branch
// below -- which has never been run: AMD is untested.
#pragma once

#if defined(__HIP__) || defined(__HIPCC_RTC__)  // clang in HIP mode, or hipRTC
#define PROBE_WARP_SIZE 64
// s_memtime counts shader clocks on gfx9 (the MI25's Vega10).
__device__ __forceinline__ long long probe_clock() { return clock64(); }
// AMD has no nanosecond timer: wall_clock64() ticks at hipDeviceAttributeWallClockRate (kHz).
__device__ __forceinline__ unsigned long long probe_timer() { return wall_clock64(); }
// Plain loads; no portable "skip L1" hint, so the L2-latency probe would read L1 hits on AMD.
__device__ __forceinline__ unsigned long long probe_load(const unsigned long long* p) { return *p; }
__device__ __forceinline__ unsigned long long probe_load_l2(const unsigned long long* p) { return *p; }
// Butterfly exchange within a wave (HIP's shuffles take no mask).
__device__ __forceinline__ float probe_shfl_xor(float v, int lane_mask) { return __shfl_xor(v, lane_mask); }
#else
#define PROBE_WARP_SIZE 32
// clock64() reads the SM's cycle counter (SR_CLOCKLO/HI in SASS), at the SM clock.
__device__ __forceinline__ long long probe_clock() { return clock64(); }
// %globaltimer counts nanoseconds (updated about every microsecond): the yardstick for the clock.
__device__ __forceinline__ unsigned long long probe_timer() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}
// A plain global load (LDG.E.64, cached in L1 and L2). `*p` would compile to a generic LD, since
// the compiler cannot tell that an address read from memory points to global memory.
__device__ __forceinline__ unsigned long long probe_load(const unsigned long long* p) {
    unsigned long long v;
    asm("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
// ld.global.cg (LDG.E.64.STRONG.GPU): served by L2, the GPU's point of coherence, never by L1.
__device__ __forceinline__ unsigned long long probe_load_l2(const unsigned long long* p) { return __ldcg(p); }
// Butterfly exchange within a warp; every lane of the warp must take part (full mask).
__device__ __forceinline__ float probe_shfl_xor(float v, int lane_mask) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
#endif
