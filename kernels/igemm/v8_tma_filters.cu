// Step 8: the filter tile through the Tensor Memory Accelerator (TMA) instead of cp.async.
// In step 7 the producer warpgroup issues 24 cp.async of 16 bytes per thread per stage, two thirds
// of them for the filters -- a plain 2D tile (256 filters x 64 taps of the KRSC matrix) that needs
// no img2col at all. One thread now asks the TMA engine for that whole 32 KB box with a single
// instruction: the engine walks the rows, writes them in the 128-byte swizzle wgmma reads, fills
// rows and taps past the end with zeros, and reports the bytes to the stage's mbarrier (expect_tx),
// without passing through the L1 or the producer's registers. The input gather stays cp.async:
// a 128-pixel tile crosses image rows, which a plain tiled box cannot describe.
// Prediction: fewer load instructions in flight per stage (8 cp.async per thread instead of 24)
// should shorten the time a stage takes to fill, a small gain over step 7 (notebook 05 predicts and
// measures it). sm_90a only.
#include <cuda_fp16.h>
#include "hopper.cuh"

constexpr int BM = 128, BN = 256, BK = 64;
constexpr int CONSUMERS = 2;                    // warpgroups that multiply, 64 rows x 256 columns each
constexpr int THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies
constexpr int A_BYTES = BM * BK * 2;            // 16 KB: 128 rows of 128 B
constexpr int B_BYTES = BN * BK * 2;            // 32 KB: 256 rows of 128 B
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
#ifndef STAGES
#define STAGES 4                                // 4 x 48 KB
#endif
// A block of 384 threads starts with 168 registers each (65536 / 384, rounded down to a multiple of 8).
// setmaxnreg moves them between warpgroups: the consumers' 128 accumulators need more, the producer's
// gather fewer. The sum must stay what the block holds: 128 x 104 + 256 x 200
// = 384 x 168, else the consumers' setmaxnreg.inc would wait forever.
constexpr int PRODUCER_REGS = 104, CONSUMER_REGS = 200;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(THREADS, 1)
igemm_v8_tma_filters(const half* __restrict__ x, const void* __restrict__ w_map, half* __restrict__ y,
                     int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride,
                     const float* __restrict__ bias, float alpha, int relu)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES];   // "full" per stage, then "empty"
    // The swizzle is a function of address bits 4-9: every tile must start on a 1024-byte boundary.
    const unsigned base = (smem_addr(smem_raw) + 1023) & ~1023u;
    const unsigned full = smem_addr(barriers), empty = full + 8 * STAGES;

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

        // Epilogue straight from the accumulators (the producer is already filling the next tile's
        // stages, so shared memory is not free for step 5's re-tiling). Warp `warp` holds rows
        // 16 warp .. +15 of the warpgroup's 64; lane l rows l / 4 and l / 4 + 8, columns 8 j + 2 (l % 4)
        // and +1 in acc[4 j .. 4 j + 3]. A warp's store covers 8 rows x 16 bytes; the next j fills the
        // other half of each 32-byte sector in L2.
        const int row = m0 + 64 * group + 16 * warp + (lane >> 2);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = n0 + 8 * j + 2 * (lane & 3);
            if (col >= K) continue;   // K % 8 == 0: col + 1 < K too
            const float2 b = *reinterpret_cast<const float2*>(bias + col);   // col is even
#pragma unroll
            for (int half_row = 0; half_row < 2; ++half_row) {
                const int m = row + 8 * half_row;
                float v0 = alpha * acc[4 * j + 2 * half_row] + b.x, v1 = alpha * acc[4 * j + 2 * half_row + 1] + b.y;
                if (relu) { v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f); }
                if (m < M) *reinterpret_cast<half2*>(y + m * K + col) = __floats2half2_rn(v0, v1);
            }
        }
    }
}
#else
// Built for a target without wgmma (the CPU compile test builds every file for sm_80 and sm_90):
// an empty kernel with the same parameters; common.launcher never launches this build.
extern "C" __global__ void igemm_v8_tma_filters(const half*, const void*, half*, int, int, int, int, int, int, int,
                                                int, int, int, int, const float*, float, int) {}
#endif
