// Step 12: split K inside the persistent grid, each split adding its share of the tile's partials.
// On a layer with few output tiles, step 11 leaves most SMs idle, or a second wave half empty. Here a
// block's unit of work is one share of one tile's K steps (`splits` shares per tile, consecutive units),
// so the units fill the SMs. A unit's consumer writes its 128x128 fp32 partial to a workspace and counts
// itself in at the tile's arrival counter; once all of the tile's splits are in, each adds its own share
// of the tile's outputs over every split's partial, in split order (the same sum whichever came first),
// and stores it with the epilogue. The last split to leave resets the counter for the next launch.
// Step 6 added its partials in a second kernel: one more launch, and every partial through DRAM; here a
// small workspace stays in L2. Splits wait for each other, so every block must be resident at once: the
// launcher allows at most one block per SM, and at least one per split. With one split it is step 11,
// on a grid of one block per tile up to one per SM. sm_90a only.
#include <cuda_fp16.h>
#include "hopper.cuh"

constexpr int BM = 128, BN = 128, BK = 64;
constexpr int CONSUMERS = 2;                    // warpgroups that multiply, a whole 128x128 tile each
constexpr int THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies
constexpr int A_BYTES = BM * BK * 2;            // 16 KB: 128 rows of 128 B
constexpr int B_BYTES = BN * BK * 2;            // 16 KB
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int BOX_COLS = 64;                    // output channels per TMA store box: 128 B per row
constexpr int BOX_BYTES = BM * BOX_COLS * 2;    // 16 KB: a warpgroup's staging tile, half its output
#ifndef STAGES
#define STAGES 5                                // 5 x 32 KB, and the two staging tiles after them
#endif
constexpr int PASSES = BN / BOX_COLS;
constexpr int TILE4 = BM * BN / 4;              // float4s of a unit's fp32 partial
constexpr int UNROLL = 4, SPLIT_UNROLL = 4;     // float4s per thread, and splits, in flight while adding partials
// As in steps 7-10: 128 x 104 + 256 x 200 = 384 x 168 registers, the consumers' 128 accumulators in 200.
constexpr int PRODUCER_REGS = 104, CONSUMER_REGS = 200;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
igemm_v12_split_fixup(const void* __restrict__ x_map, const void* __restrict__ w_map, const void* __restrict__ y_map,
                    int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride,
                    const float* __restrict__ bias, float alpha, int relu,
                    float* __restrict__ partial, unsigned* __restrict__ arrivals, int k_per_split,
                    __half* __restrict__ y)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES];   // "full" per stage, then "empty"
    // The swizzle is a function of address bits 4-9: every tile must start on a 1024-byte boundary.
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned full = smem_addr(barriers), empty = full + 8 * STAGES;
    const unsigned staging = base + STAGES * STAGE_BYTES;   // 1024-aligned: STAGE_BYTES is 32 KB

    const int M = N * P * Q;
    const int tiles_n = (K + BN - 1) / BN, tiles = (M + BM - 1) / BM * tiles_n;
    const int c_steps = (C + BK - 1) / BK, k_steps = R * S * c_steps;   // tap by tap, as in step 10
    const int splits = (k_steps + k_per_split - 1) / k_per_split, units = tiles * splits;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + 8 * s, 1);   // the producer's arrival, and then the TMA bytes
            mbarrier_init(empty + 8 * s, 4);  // the four warps of the one warpgroup that multiplies it
        }
    }
    __syncthreads();

    // The producer walks the block's units in order and counts K steps `it` across them; consumer g
    // takes the block's units g, g + 2, ... (its `local` index) and counts the other's K steps too.
    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGS));
        if (threadIdx.x != 0) return;   // one thread issues every copy
        int it = 0;
        for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
            const int tile = unit / splits, kt0 = (unit - tile * splits) * k_per_split;
            const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
            const int img = m0 / (P * Q), pq = m0 - img * P * Q, p = pq / Q, q = pq - p * Q;
            for (int kt = kt0; kt < min(kt0 + k_per_split, k_steps); ++kt, ++it) {
                const int rs = kt / c_steps, c0 = (kt - rs * c_steps) * BK, r = rs / S, s = rs - r * S;
                const int stage = it % STAGES;
                const unsigned a = base + stage * STAGE_BYTES;
                mbarrier_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);   // its consumer is done with it
                mbarrier_arrive_expect_bytes(full + 8 * stage, STAGE_BYTES);
                tma_load_im2col(a, x_map, c0, q * stride - pad, p * stride - pad, img, r, s, full + 8 * stage);
                tma_load_2d(a + A_BYTES, w_map, rs * C + c0, n0, full + 8 * stage);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGS));
    const int group = warpgroup - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const bool issuer = (threadIdx.x & 127) == 0;   // issues this warpgroup's TMA stores
    const unsigned own_staging = staging + group * BOX_BYTES;
    float lo[64], hi[64];   // rows 0-63 and 64-127 of this warpgroup's tile
    int it = 0, local = 0;
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x, ++local) {
        const int tile = unit / splits, split = unit - tile * splits;
        const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
        const int kt0 = split * k_per_split, kn = min(k_per_split, k_steps - kt0);
        if ((local & 1) != group) {   // the other warpgroup's unit: only its K steps to count
            it += kn;
            continue;
        }
        // Wait for the turn: the other warpgroup has issued all K steps of the unit before this one.
        if (group == 0 && local >= 2) asm volatile("bar.sync 4, 256;\n" ::: "memory");
        if (group == 1) asm volatile("bar.sync 3, 256;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < 64; ++i) { lo[i] = 0.0f; hi[i] = 0.0f; }
        for (int kt = 0; kt < kn; ++kt, ++it) {
            const int stage = it % STAGES;
            mbarrier_wait(full + 8 * stage, (it / STAGES) & 1);
            const unsigned a = base + stage * STAGE_BYTES, b = a + A_BYTES;
            fence_accumulators(lo);
            fence_accumulators(hi);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks) {   // 16 taps = 32 bytes further along each swizzled row
                wgmma_64x128x16(lo, smem_desc(a + 32 * ks), smem_desc(b + 32 * ks));
                wgmma_64x128x16(hi, smem_desc(a + 64 * 128 + 32 * ks), smem_desc(b + 32 * ks));
            }
            wgmma_commit();
            wgmma_wait<1>();                         // the previous K step's products are done ...
            fence_accumulators(lo);
            fence_accumulators(hi);
            if (kt > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((it + STAGES - 1) % STAGES));   // ... free its stage
        }
        if (unit + gridDim.x < units) {   // the other warpgroup has a next unit: its turn
            if (group == 0) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
            else asm volatile("bar.arrive 4, 256;\n" ::: "memory");
        }
        wgmma_wait<0>();
        fence_accumulators(lo);
        fence_accumulators(hi);
        if (lane == 0) mbarrier_arrive(empty + 8 * ((it + STAGES - 1) % STAGES));

        if (splits > 1) {
            // Split K: this unit's fp32 partial to its workspace slot, float4 j of thread t at j x 128 + t
            // (each store instruction writes 128 consecutive 16-byte chunks), past the L1 to L2.
            const int t = threadIdx.x & 127;
            const float4* slots = reinterpret_cast<const float4*>(partial) + size_t(tile) * splits * TILE4;
            float4* mine = reinterpret_cast<float4*>(partial) + (size_t(tile) * splits + split) * TILE4 + t;
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                const float* acc = j < 16 ? lo + 4 * j : hi + 4 * (j - 16);
                __stcg(mine + 128 * j, make_float4(acc[0], acc[1], acc[2], acc[3]));
            }
            __threadfence();   // the partial is visible device-wide before the count says so
            warpgroup_sync(group);
            if (issuer) {      // count in, then wait for the tile's other splits (all blocks are resident)
                atomicAdd(arrivals + tile, 1u);
                while (load_acquire(arrivals + tile) < unsigned(splits)) __nanosleep(32);
            }
            warpgroup_sync(group);
            __threadfence();
            // Each split adds and stores its own share of the tile's float4s, every partial in split order
            // (the same sum whichever unit came first), UNROLL x SPLIT_UNROLL float4 loads in flight per thread.
            const int share = (TILE4 + splits - 1) / splits, first = split * share;
            const int last = min(first + share, TILE4);
            for (int i0 = first; i0 < last; i0 += UNROLL * 128) {
                float4 sum[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) sum[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll SPLIT_UNROLL
                for (int sp = 0; sp < splits; ++sp) {
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) {
                        const int i = i0 + 128 * u + t;
                        if (i < last) {
                            const float4 v = __ldcg(slots + size_t(sp) * TILE4 + i);
                            sum[u].x += v.x; sum[u].y += v.y; sum[u].z += v.z; sum[u].w += v.w;
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    // float4 i holds chunk j = i / 128 of thread i % 128's accumulators: as in the epilogue
                    // below, rows r and r + 8, columns c and c + 1.
                    const int i = i0 + 128 * u + t;
                    const int owner = i & 127, j = (i >> 7) & 15, l = owner & 31;
                    const int r = m0 + 64 * (i >> 11) + 16 * (owner >> 5) + (l >> 2), c = n0 + 8 * j + 2 * (l & 3);
                    if (i >= last || c >= K) continue;   // K % 8 == 0: c + 1 < K too
                    const float2 bv = *reinterpret_cast<const float2*>(bias + c);
                    const float v[4] = {sum[u].x, sum[u].y, sum[u].z, sum[u].w};
#pragma unroll
                    for (int half_row = 0; half_row < 2; ++half_row) {
                        float v0 = alpha * v[2 * half_row] + bv.x, v1 = alpha * v[2 * half_row + 1] + bv.y;
                        if (relu) { v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f); }
                        if (r + 8 * half_row < M)
                            *reinterpret_cast<__half2*>(y + size_t(r + 8 * half_row) * K + c) = __floats2half2_rn(v0, v1);
                    }
                }
            }
            // Count out: the tile's last split to leave resets its counter for the next launch.
            if (issuer && atomicAdd(arrivals + tile, 1u) == unsigned(2 * splits - 1)) arrivals[tile] = 0;
            continue;
        }

        // Epilogue, while the other warpgroup multiplies: two passes of one 128x64 box through this
        // warpgroup's staging tile. Lane l of warp `warp` holds rows 16 warp + l / 4 and +8 (lo; hi 64 rows
        // further), columns 8 j + 2 (l % 4) and +1 in lo/hi[4 j .. 4 j + 3]: column 8 j lies at chunk j % 8
        // of its box's 128-byte row. The staging tile is free once the engine has read the last pass's box.
#pragma unroll
        for (int pass = 0; pass < PASSES; ++pass) {
            if (issuer) bulk_wait_read<0>();
            warpgroup_sync(group);
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
                const int j = pass * 8 + jj;
                const int col = n0 + 8 * j + 2 * (lane & 3);
                // K % 8 == 0: col + 1 < K too. Columns past K are never stored; their bias reads zero.
                const float2 bv = col < K ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const float* acc = half ? hi : lo;
#pragma unroll
                    for (int half_row = 0; half_row < 2; ++half_row) {
                        const int r = 64 * half + 16 * warp + (lane >> 2) + 8 * half_row;
                        float v0 = alpha * acc[4 * j + 2 * half_row] + bv.x, v1 = alpha * acc[4 * j + 2 * half_row + 1] + bv.y;
                        if (relu) { v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f); }
                        const __half2 v = __floats2half2_rn(v0, v1);
                        const unsigned dst = own_staging + swizzle128(r, jj) + 4 * (lane & 3);
                        asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(dst), "r"(*reinterpret_cast<const unsigned*>(&v)) : "memory");
                    }
                }
            }
            fence_proxy_async();   // the TMA engine reads the staging tile through the async proxy
            warpgroup_sync(group);
            if (issuer) {
                tma_store_2d(y_map, n0 + pass * BOX_COLS, m0, own_staging);
                asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
            }
        }
    }
    // The block's shared memory must outlive the engine's reads of it, and its stores must be done.
    if (issuer) bulk_wait<0>();
}
#else
// Built for a target without wgmma (the CPU compile test builds every file for sm_80 and sm_90):
// an empty kernel with the same parameters; common.launcher never launches this build.
extern "C" __global__ void igemm_v12_split_fixup(const void*, const void*, const void*, int, int, int, int, int, int, int,
                                               int, int, int, int, const float*, float, int, float*, unsigned*, int, __half*) {}
#endif
