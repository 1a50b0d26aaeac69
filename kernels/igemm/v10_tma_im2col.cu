// Step 10: the input tile through the TMA engine's im2col mode.
// Through step 9 the producer warpgroup gathers the input tile itself: each of its 128 threads works out
// where 8 rows of the tile come from (image, row, column, tap, edges) and issues 8 cp.async of 16 bytes
// per K step, and the consumers fence those generic-proxy writes before every wgmma. Under Nsight
// Compute step 9 executes far more instructions than cuDNN's kernel, and its tensor pipe idles more
// (notebook 05's profile page). The TMA engine can gather the tile instead: an im2col tensor map describes
// the NHWC input, its padding and stride; one instruction names the tile's first output pixel and the
// filter tap, and the engine walks 128 output pixels (along W, then H, then the batch) and fetches 64
// channels of each, zeros outside the image, in the same 128-byte swizzle as the filter tile.
// One producer thread now issues two copies per K step, and the stage's mbarrier counts their bytes.
// The K steps run tap by tap, 64 channels at a time (a channel block past C reads zeros), so the filter
// tile of tap rs and channel block c0 starts at column rs C + c0. The rest is step 9.
// Prediction: the producer's instructions and the consumers' per-step fence leave; notebook 05 predicts
// and measures what that buys. sm_90a only.
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
// one copying thread fewer. The sum must stay what the block holds: 128 x 104 + 256 x 200
// = 384 x 168, else the consumers' setmaxnreg.inc would wait forever.
constexpr int PRODUCER_REGS = 104, CONSUMER_REGS = 200;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(THREADS, 1)
igemm_v10_tma_im2col(const void* __restrict__ x_map, const void* __restrict__ w_map, const void* __restrict__ y_map,
                     int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride,
                     const float* __restrict__ bias, float alpha, int relu)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES];   // "full" per stage, then "empty"
    // The swizzle is a function of address bits 4-9: every tile must start on a 1024-byte boundary.
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned full = smem_addr(barriers), empty = full + 8 * STAGES;
    const unsigned staging = base + STAGES * STAGE_BYTES;   // 1024-aligned: STAGE_BYTES is 48 KB

    const int M = N * P * Q;
    const int tiles_n = (K + BN - 1) / BN, tiles = (M + BM - 1) / BM * tiles_n;
    const int k_steps = R * S * ((C + BK - 1) / BK);   // tap by tap
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full + 8 * s, 1);               // the producer's arrival, and then the TMA bytes
            mbarrier_init(empty + 8 * s, 4 * CONSUMERS);  // every consumer warp is done with the stage
        }
    }
    __syncthreads();

    // Both roles walk the same tiles (the two N tiles of one M tile run side by side: the input rows
    // they gather are read from DRAM once) and count K steps `it` across tiles: stage it % STAGES,
    // in round it / STAGES, whose parity each mbarrier wait names.
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
                    mbarrier_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);   // the consumers are done with it
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
    float acc[128];   // this warpgroup's 64x256: rows 64 group .. +63 of the tile
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < k_steps; ++kt, ++it) {
            const int stage = it % STAGES;
            mbarrier_wait(full + 8 * stage, (it / STAGES) & 1);   // TMA writes: no proxy fence needed
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
extern "C" __global__ void igemm_v10_tma_im2col(const void*, const void*, const void*, int, int, int, int, int, int, int,
                                              int, int, int, int, const float*, float, int) {}
#endif
