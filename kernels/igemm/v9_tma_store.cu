// Step 9: the output tile through shared memory and TMA stores.
// Steps 7-8 store straight from the accumulators: each warp store writes 16 bytes into each of 8 rows,
// 64 such stores per warp and tile, while the tensor cores wait for the epilogue to end. A fit of step
// 8's times at four input depths (notebook 05) charges each 128x256 tile's epilogue about as much as
// a dozen K steps. Here the consumers write their fp16 results into a staging tile in shared memory
// instead -- boxes of 128 rows x 64 channels in the 128-byte swizzle, so a warp's 8 rows land in 8
// bank groups -- meet at a named barrier, and one thread hands the boxes to the TMA engine, which
// writes whole rows of 128 bytes, clips what lies past M or K, and drains while the consumers go on.
// The staging tile holds half the output tile: the epilogue runs in two passes of two boxes, which
// leaves room for a fourth stage (4 x 48 KB + 32 KB).
// Prediction: most of the epilogue's share of the time leaves the critical path (notebook 05 predicts
// and measures it). sm_90a only.
#include <cuda_fp16.h>
#include "hopper.cuh"

constexpr int BM = 128, BN = 256, BK = 64;
constexpr int CONSUMERS = 2;                    // warpgroups that multiply, 64 rows x 256 columns each
constexpr int THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies
constexpr int A_BYTES = BM * BK * 2;            // 16 KB: 128 rows of 128 B
constexpr int B_BYTES = BN * BK * 2;            // 32 KB: 256 rows of 128 B
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int BOX_COLS = 64;                    // output channels per TMA store box: 128 B per row
constexpr int BOX_BYTES = BM * BOX_COLS * 2;    // 16 KB; BN / BOX_COLS = 4 boxes make the whole tile
#ifndef STAGES
#define STAGES 4                                // 4 x 48 KB, and the staging tile after them
#endif
constexpr int STAGED_BOXES = 2;                 // staged at once: half the tile, 32 KB
constexpr int PASSES = BN / BOX_COLS / STAGED_BOXES;
constexpr int J_PER_PASS = BN / 8 / PASSES;     // accumulator column groups of 8 per pass
// A block of 384 threads starts with 168 registers each (65536 / 384, rounded down to a multiple of 8).
// setmaxnreg moves them between warpgroups: the consumers' 128 accumulators need more, the producer's
// gather fewer. The sum must stay what the block holds: 128 x 104 + 256 x 200
// = 384 x 168, else the consumers' setmaxnreg.inc would wait forever.
constexpr int PRODUCER_REGS = 104, CONSUMER_REGS = 200;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(THREADS, 1)
igemm_v9_tma_store(const half* __restrict__ x, const void* __restrict__ w_map, const void* __restrict__ y_map,
                     int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride,
                     const float* __restrict__ bias, float alpha, int relu)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES];   // "full" per stage, then "empty"
    // The swizzle is a function of address bits 4-9: every tile must start on a 1024-byte boundary.
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned full = smem_addr(barriers), empty = full + 8 * STAGES;
    const unsigned staging = base + STAGES * STAGE_BYTES;   // 1024-aligned: STAGE_BYTES is 48 KB

    const int M = N * P * Q, KD = R * S * C;
    const int tiles_n = (K + BN - 1) / BN, tiles = (M + BM - 1) / BM * tiles_n;
    const int k_steps = (KD + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + 8 * s, 128 + 1);         // every producer thread's copies, and the TMA bytes
            mbarrier_init(empty + 8 * s, 4 * CONSUMERS);  // every consumer warp is done with the stage
        }
    }
    __syncthreads();

    // Both roles walk the same tiles (the two N tiles of one M tile run side by side: the input rows
    // they gather are read from DRAM once) and count K steps `it` across tiles: stage it % STAGES,
    // in round it / STAGES, whose parity each mbarrier wait names.
    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGS));
        // Thread t copies chunk kc (8 channels) of rows row0 + 16 i: 8 rows of A per stage.
        const int kc = threadIdx.x & 7, row0 = threadIdx.x >> 3;
        const unsigned copy_offset = swizzle128(row0, kc);   // rows row0 + 16 i share row0 % 8
        int it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
            int img_base[8], h_org[8], w_org[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int m = m0 + row0 + 16 * i;
                const int img = m / (P * Q), pq = m - img * P * Q, p = pq / Q, q = pq - p * Q;
                img_base[i] = img * H * W * C;
                h_org[i] = m < M ? p * stride - pad : -(1 << 29);   // past M: every tap reads zero
                w_org[i] = q * stride - pad;
            }
            for (int kt = 0; kt < k_steps; ++kt, ++it) {
                const int stage = it % STAGES;
                mbarrier_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);   // the consumers are done with it
                if (threadIdx.x == 0) {   // the whole 256 x 64 filter tile, zeros past K and past RSC
                    mbarrier_arrive_expect_bytes(full + 8 * stage, B_BYTES);
                    tma_load_2d(base + stage * STAGE_BYTES + A_BYTES, w_map, kt * BK, n0, full + 8 * stage);
                }
                const int k = kt * BK + kc * 8;   // C % 8 == 0: a thread's 8 channels share one tap (r, s)
                const int rs = k / C, c = k - rs * C, r = rs / S, s = rs - r * S;
                const bool k_ok = k < KD;
                const unsigned dst = base + stage * STAGE_BYTES + copy_offset;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int h = h_org[i] + r, col = w_org[i] + s;
                    const bool ok = k_ok && h >= 0 && h < H && col >= 0 && col < W;
                    // An invalid copy reads nothing, but its source address is still formed: keep it in bounds.
                    cp_async_16_ca(dst + 16 * i * 128, ok ? x + img_base[i] + (h * W + col) * C + c : x, ok);
                }
                cp_async_arrive(full + 8 * stage);
            }
        }
        // Leave no copy in flight behind. wait_all, not cp_async_wait<0>: these copies were never
        // committed to a group (the mbarrier tracks them), and wait_group waits for groups only.
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGS));
    const int group = warpgroup - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float acc[128];   // this warpgroup's 64x256: rows 64 group .. +63 of the tile
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < k_steps; ++kt, ++it) {
            const int stage = it % STAGES;
            mbarrier_wait(full + 8 * stage, (it / STAGES) & 1);
            // The copies were generic-proxy writes; the tensor cores read through the async proxy.
            fence_proxy_async();
            const unsigned a = base + stage * STAGE_BYTES + group * 64 * 128, b = base + stage * STAGE_BYTES + A_BYTES;
            fence_accumulators(acc);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks)   // 16 taps = 32 bytes further along each swizzled row
                wgmma_64x256x16(acc, smem_desc(a + 32 * ks), smem_desc(b + 32 * ks));
            wgmma_commit();
            wgmma_wait<1>();                       // the previous K step's products are done ...
            fence_accumulators(acc);
            if (kt > 0 && lane == 0) mbarrier_arrive(empty + 8 * ((it + STAGES - 1) % STAGES));   // ... free its stage
        }
        wgmma_wait<0>();
        fence_accumulators(acc);
        if (lane == 0) mbarrier_arrive(empty + 8 * ((it + STAGES - 1) % STAGES));

        // Epilogue through the staging tile, in PASSES passes. Lane l of warp `warp` holds rows
        // 16 warp + l / 4 and +8 of its warpgroup's 64, columns 8 j + 2 (l % 4) and +1 in
        // acc[4 j .. 4 j + 3]: column 8 j lies in box j / 8 at chunk j % 8 of its 128-byte row. The
        // staging tile is free once the TMA engine has read the previous pass's boxes.
#pragma unroll
        for (int pass = 0; pass < PASSES; ++pass) {
            if (threadIdx.x == 128) bulk_wait_read<0>();
            consumers_sync();
            const int row = 64 * group + 16 * warp + (lane >> 2);   // in the tile
#pragma unroll
            for (int jj = 0; jj < J_PER_PASS; ++jj) {
                const int j = pass * J_PER_PASS + jj;
                const int col = n0 + 8 * j + 2 * (lane & 3);
                // K % 8 == 0: col + 1 < K too. Columns past K are never stored; their bias reads zero.
                const float2 b = col < K ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int half_row = 0; half_row < 2; ++half_row) {
                    const int r = row + 8 * half_row;
                    float v0 = alpha * acc[4 * j + 2 * half_row] + b.x, v1 = alpha * acc[4 * j + 2 * half_row + 1] + b.y;
                    if (relu) { v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f); }
                    const __half2 v = __floats2half2_rn(v0, v1);
                    const unsigned dst = staging + (jj / 8) * BOX_BYTES + swizzle128(r, j % 8) + 4 * (lane & 3);
                    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(dst), "r"(*reinterpret_cast<const unsigned*>(&v)) : "memory");
                }
            }
            fence_proxy_async();   // the TMA engine reads the staging tile through the async proxy
            consumers_sync();
            if (threadIdx.x == 128) {
#pragma unroll
                for (int box = 0; box < STAGED_BOXES; ++box)
                    tma_store_2d(y_map, n0 + (pass * STAGED_BOXES + box) * BOX_COLS, m0, staging + box * BOX_BYTES);
                asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
            }
        }
    }
    // The block's shared memory must outlive the engine's reads of it, and its stores must be done.
    if (threadIdx.x == 128) bulk_wait<0>();
}
#else
// Built for a target without wgmma (the CPU compile test builds every file for sm_80 and sm_90):
// an empty kernel with the same parameters; common.launcher never launches this build.
extern "C" __global__ void igemm_v9_tma_store(const half*, const void*, const void*, int, int, int, int, int, int, int,
                                              int, int, int, int, const float*, float, int) {}
#endif
