// Step 11: two consumer warpgroups taking turns on their own tiles (ping-pong).
// Through step 10 both consumer warpgroups multiply halves of one 128x256 tile, so they reach its
// epilogue together, and while they convert and stage their outputs the tensor cores idle: notebook 05
// measures that per-tile cost, and on a layer with few K steps per tile it is a large share of the time.
// Here each consumer warpgroup owns a whole 128x128 tile (two 64x128 wgmma per 16 taps, 128 accumulators)
// and the block's tiles alternate between them. The producer fills one ring with the tiles in order,
// so warpgroup 1's K steps come after warpgroup 0's: while one multiplies, the other runs its epilogue.
// Two named barriers make the turns explicit: a warpgroup starts its next tile's K steps only once the
// other has issued all of its own. Without them a warpgroup would wait on a stage's mbarrier for a
// phase two ahead of the current one, and a parity wait cannot tell the two apart.
// Each warpgroup stages and stores its own output (16 KB, one 128x64 box per pass) and meets only its
// own threads at a barrier. The cost: a 128-wide filter tile per K step where step 10 shared a 256-wide
// one between both warpgroups, so a third more bytes per product come from L2.
// Built with -DBLOCK_N=64 its tiles are 128x64 (64x64 wgmma, 64 accumulators, 24 KB stages, so 8 fit):
// on a layer with 64 output channels a 128-wide tile multiplies as many zeros as filters. sm_90a only.
#include <cuda_fp16.h>
#include "hopper.cuh"

#ifndef BLOCK_N
#define BLOCK_N 128                             // output channels per tile: 128, or 64
#endif
constexpr int BM = 128, BN = BLOCK_N, BK = 64;
constexpr int CONSUMERS = 2;                    // warpgroups that multiply, a whole 128xBN tile each
constexpr int THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies
constexpr int A_BYTES = BM * BK * 2;            // 16 KB: 128 rows of 128 B
constexpr int B_BYTES = BN * BK * 2;            // 16 KB (8 KB at 64 wide)
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int BOX_COLS = 64;                    // output channels per TMA store box: 128 B per row
constexpr int BOX_BYTES = BM * BOX_COLS * 2;    // 16 KB: a warpgroup's staging tile, half its output
#ifndef STAGES
#define STAGES 5                                // 5 x 32 KB, and the two staging tiles after them
#endif
constexpr int PASSES = BN / BOX_COLS;
// As in steps 7-10: 128 x 104 + 256 x 200 = 384 x 168 registers, the consumers' 128 accumulators in 200.
constexpr int PRODUCER_REGS = 104, CONSUMER_REGS = 200;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// D (64x64, fp32, this warpgroup) += A (64x16) * B (16x64): the 128x64 build's wgmma.
__device__ __forceinline__ void wgmma_64x64x16(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b));
}
// The 64xBN wgmma, picked by the accumulators' length (BN / 2 floats per thread).
template <int n>
__device__ __forceinline__ void wgmma_64xbn(float (&d)[n], unsigned long long desc_a, unsigned long long desc_b) {
    if constexpr (n == 64) wgmma_64x128x16(d, desc_a, desc_b);
    else wgmma_64x64x16(d, desc_a, desc_b);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
igemm_v11_ping_pong(const void* __restrict__ x_map, const void* __restrict__ w_map, const void* __restrict__ y_map,
                    int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride,
                    const float* __restrict__ bias, float alpha, int relu)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES];   // "full" per stage, then "empty"
    // The swizzle is a function of address bits 4-9: every tile must start on a 1024-byte boundary.
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned full = smem_addr(barriers), empty = full + 8 * STAGES;
    const unsigned staging = base + STAGES * STAGE_BYTES;   // 1024-aligned: STAGE_BYTES is 32 or 24 KB

    const int M = N * P * Q;
    const int tiles_n = (K + BN - 1) / BN, tiles = (M + BM - 1) / BM * tiles_n;
    const int k_steps = R * S * ((C + BK - 1) / BK);   // tap by tap, as in step 10
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + 8 * s, 1);   // the producer's arrival, and then the TMA bytes
            mbarrier_init(empty + 8 * s, 4);  // the four warps of the one warpgroup that multiplies it
        }
    }
    __syncthreads();

    // The producer walks the block's tiles in order and counts K steps `it` across them; consumer g
    // takes the block's tiles g, g + 2, ... (its `local` index), whose K steps are it = local x k_steps on.
    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGS));
        if (threadIdx.x != 0) return;   // one thread issues every copy
        int it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
            const int img = m0 / (P * Q), pq = m0 - img * P * Q, p = pq / Q, q = pq - p * Q;
            for (int rs = 0; rs < R * S; ++rs) {
                const int r = rs / S, s = rs - r * S;
                for (int c0 = 0; c0 < C; c0 += BK, ++it) {
                    const int stage = it % STAGES;
                    const unsigned a = base + stage * STAGE_BYTES;
                    mbarrier_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);   // its consumer is done with it
                    mbarrier_arrive_expect_bytes(full + 8 * stage, STAGE_BYTES);
                    tma_load_im2col(a, x_map, c0, q * stride - pad, p * stride - pad, img, r, s, full + 8 * stage);
                    tma_load_2d(a + A_BYTES, w_map, rs * C + c0, n0, full + 8 * stage);
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGS));
    const int group = warpgroup - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const bool issuer = (threadIdx.x & 127) == 0;   // issues this warpgroup's TMA stores
    const unsigned own_staging = staging + group * BOX_BYTES;
    float lo[BN / 2], hi[BN / 2];   // rows 0-63 and 64-127 of this warpgroup's tile
    int local = group;
    for (int tile = blockIdx.x + group * gridDim.x; tile < tiles; tile += 2 * gridDim.x, local += 2) {
        const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
        int it = local * k_steps;
        // Wait for the turn: the other warpgroup has issued all K steps of the tile before this one.
        if (group == 0 && local >= 2) asm volatile("bar.sync 4, 256;\n" ::: "memory");
        if (group == 1) asm volatile("bar.sync 3, 256;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) { lo[i] = 0.0f; hi[i] = 0.0f; }
        for (int kt = 0; kt < k_steps; ++kt, ++it) {
            const int stage = it % STAGES;
            mbarrier_wait(full + 8 * stage, (it / STAGES) & 1);
            const unsigned a = base + stage * STAGE_BYTES, b = a + A_BYTES;
            fence_accumulators(lo);
            fence_accumulators(hi);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks) {   // 16 taps = 32 bytes further along each swizzled row
                wgmma_64xbn(lo, smem_desc(a + 32 * ks), smem_desc(b + 32 * ks));
                wgmma_64xbn(hi, smem_desc(a + 64 * 128 + 32 * ks), smem_desc(b + 32 * ks));
            }
            wgmma_commit();
            wgmma_wait<1>();                         // the previous K step's products are done ...
            fence_accumulators(lo);
            fence_accumulators(hi);
            if (kt > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((it + STAGES - 1) % STAGES));   // ... free its stage
        }
        if (tile + gridDim.x < tiles) {   // the other warpgroup has a next tile: its turn
            if (group == 0) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
            else asm volatile("bar.arrive 4, 256;\n" ::: "memory");
        }
        wgmma_wait<0>();
        fence_accumulators(lo);
        fence_accumulators(hi);
        if (lane == 0) mbarrier_arrive(empty + 8 * ((it + STAGES - 1) % STAGES));

        // Epilogue, while the other warpgroup multiplies: BN / 64 passes of one 128x64 box through this
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
extern "C" __global__ void igemm_v11_ping_pong(const void*, const void*, const void*, int, int, int, int, int, int, int,
                                             int, int, int, int, const float*, float, int) {}
#endif
