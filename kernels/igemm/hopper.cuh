// The Hopper (sm_90a) PTX wrappers that steps 6-11 share: the swizzled tile layout, wgmma's descriptor
// and fences, and the mbarriers of the producer/consumer ring. A helper only one step uses stays in
// that step's file, where its diff shows it.
#pragma once
#include "igemm_common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- Steps 6-12: wgmma from swizzled shared-memory tiles ---------------------------------------------

// Byte offset of 16-byte chunk `chunk` (0-7) of row `row` in a tile of 128-byte rows, 128-byte swizzle:
// the chunk index is XORed with row % 8, so 8 rows' chunk j land in 8 different 16-byte bank groups.
__device__ __forceinline__ unsigned swizzle128(int row, int chunk) {
    return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// wgmma's shared-memory matrix descriptor for a K-major tile with the 128-byte swizzle: start address,
// leading offset (unused with this swizzle: 1), stride between 8-row groups (1024 B), swizzle mode 1.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<unsigned long long>(1024 >> 4) << 32)
         | (1ull << 62);
}

// Make this thread's generic-proxy writes to shared memory (cp.async, st.shared) visible to the async
// proxy, through which the tensor cores read wgmma's operands.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Registers written by wgmma change after the instruction issues: keep the compiler from moving their
// reads or writes across the fences and waits.
template <int n>
__device__ __forceinline__ void fence_accumulators(float (&d)[n]) {
#pragma unroll
    for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// Order this warpgroup's earlier accumulator and shared-memory accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Close the group of wgmma issued since the last commit (wgmma_wait counts groups).
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most `pending` of this warpgroup's committed wgmma groups are still running.
template <int pending>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(pending) : "memory"); }

// ---- Steps 6, 11 and 12: 64x128 wgmma ---------------------------------------------------------------

// D (64x128, fp32, this warpgroup) += A (64x16, fp16, K-major in shared) * B (16x128, fp16, K-major in shared).
__device__ __forceinline__ void wgmma_64x128x16(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
                   "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
                   "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
                   "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
                   "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
                   "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b));
}

// ---- Steps 7-12: the producer/consumer ring of mbarriers; steps 7-10's 64x256 wgmma ------------------

// The mbarrier at `bar` counts one arrival of this thread once all its earlier cp.async have landed.
__device__ __forceinline__ void cp_async_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(bar) : "memory");
}

// Set up the mbarrier at `bar` in phase 0, to complete each phase after `count` arrivals.
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

// One arrival of this thread on `bar` (its memory accesses before it are released to the waiters).
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
    asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" :: "r"(bar) : "memory");
}

// Wait until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so waiting on
// parity 1 returns at once: that is how the producer finds every stage free in its first round.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// D (64x256, fp32, this warpgroup) += A (64x16, fp16, K-major in shared) * B (16x256, fp16, K-major in shared).
__device__ __forceinline__ void wgmma_64x256x16(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "%128, %129, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b));
}

// ---- Steps 8-12: the filter tile through the TMA engine ----------------------------------------------

// One arrival that also announces `bytes` more to come from the TMA engine: the phase completes when
// every arrival is in and those bytes have landed.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(unsigned bar, unsigned bytes) {
    asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}

// TMA: the box of the 2D tensor map `map` (in global memory) whose corner is element (k, n) -> shared
// memory at `dst`, laid out and swizzled as the map says; completion is counted in bytes on `bar`.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, int k, int n, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(k), "r"(n), "r"(bar) : "memory");
}

// ---- Steps 9-12: the output tile through a staging tile and TMA stores ----------------------------

// TMA: the box of the 2D tensor map `map` whose corner is element (k, m) <- shared memory at `src`,
// read in the map's swizzle; the engine skips elements past the tensor's edges. Completion is tracked
// by bulk groups, one per commit, of the issuing thread.
__device__ __forceinline__ void tma_store_2d(const void* map, int k, int m, unsigned src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(map), "r"(k), "r"(m), "r"(src) : "memory");
}

// Wait until at most `pending` of this thread's bulk groups still read shared memory (.read), or are
// still running at all (without it: their writes to global memory are done too).
template <int pending>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(pending) : "memory"); }
template <int pending>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(pending) : "memory"); }

// Barrier 1 among the 256 consumer threads only (barrier 0 is __syncthreads, which the producer,
// gone after its last copy, would never reach).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// ---- Steps 10-12: the input tile through the TMA engine's im2col mode -------------------------------

// TMA, im2col mode: 128 output pixels x 64 channels of the 4D NHWC tensor map `map` -> shared memory at
// `dst`. (n, h, w) is the input pixel under the filter's corner for the first output pixel, c the first
// channel, (r, s) the tap; the engine steps along W, then H, then N by the map's traversal stride,
// within the box the map's corners give, and reads zeros outside the tensor. Bytes count on `bar`.
__device__ __forceinline__ void tma_load_im2col(unsigned dst, const void* map, int c, int w, int h, int n,
                                                unsigned short r, unsigned short s, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n"
                 :: "r"(dst), "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(s), "h"(r) : "memory");
}

// ---- Steps 11-12: a consumer warpgroup's own barrier ------------------------------------------------

// Named barrier 1 + g among the 128 threads of consumer warpgroup g (0 is __syncthreads; 3 and 4 are the turns).
__device__ __forceinline__ void warpgroup_sync(int g) { asm volatile("bar.sync %0, 128;\n" :: "r"(1 + g) : "memory"); }
#endif
