// Step 6: Hopper's warpgroup MMA (wgmma), fed by step 5's cp.async img2col pipeline.
// mma.sync (steps 3-5) makes every warp load its fragments from shared memory into registers with
// ldmatrix and issue 64 small synchronous MMAs per K step; on Hopper that path reaches well under
// the tensor cores' rate. wgmma lets a warpgroup (4 warps) multiply a 64x128x16 product straight out
// of shared memory, asynchronously: the warps issue it and go on copying the next tiles. The tiles
// move to the layout wgmma reads, K-major rows of 64 halves (128 B) with the 128-byte XOR swizzle
// (conflict-free for the copy-in and for the tensor cores), K steps of 64, 8 warps per block.
// Needs sm_90a: built for any other target the kernel is empty, and the launcher refuses to run it.
// Split K (the same kernel, gridDim.z > 1): block z multiplies K steps z * k_per_split onward and writes
// its fp32 partial tile to `partial`; igemm_split_reduce adds the partials in order and applies the
// epilogue. A problem too small to give every SM a tile gives every SM a share of K instead.
#include <cuda_fp16.h>
#include "hopper.cuh"

constexpr int BM = 128, BN = 128, BK = 64, THREADS = 256;
constexpr int TILE_BYTES = BM * BK * 2;         // 16 KB: 128 rows of 128 B, A and B alike
constexpr int STAGE_BYTES = 2 * TILE_BYTES;
#ifndef STAGES
#define STAGES 4                                // 4 x 32 KB: two tiles in flight while one is multiplied
#endif
constexpr int OUT_LD = BN + 8;                  // halves per row of the re-tiled output (272 B)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(THREADS)
igemm_v6_wgmma(const half* __restrict__ x, const half* __restrict__ w, half* __restrict__ y,
               int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride,
               const float* __restrict__ bias, float alpha, int relu, float* __restrict__ partial, int k_per_split)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // The swizzle is a function of address bits 4-9: every tile must start on a 1024-byte boundary.
    const unsigned raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
    unsigned char* smem = smem_raw + (base - raw);   // STAGES x (A, B), then the output tile

    const int M = N * P * Q, KD = R * S * C;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, group = warp >> 2;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;

    // Each thread copies chunk kc (8 channels) of rows row0 + 32 i, i = 0..3, of the A and the B tile.
    const int kc = tid & 7, row0 = tid >> 3;
    int img_base[4], h_org[4], w_org[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + row0 + 32 * i;
        const int img = m / (P * Q), pq = m - img * P * Q, p = pq / Q, q = pq - p * Q;
        img_base[i] = img * H * W * C;
        // A row past M gets an origin so far outside the image that every tap reads zero.
        h_org[i] = m < M ? p * stride - pad : -(1 << 29);
        w_org[i] = q * stride - pad;
    }
    const unsigned copy_offset = swizzle128(row0, kc);   // rows row0 + 32 i share row0 % 8

    float acc[64];   // this warpgroup's 64x128: rows 64 group .. +63
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

    // Start the copies of the K step at k0 into stage `stage` (zeros past the end of K).
    auto load_tile = [&](int stage, int k0) {
        // C % 8 == 0, so a thread's 8 channels share one filter tap (r, s).
        const int k = k0 + kc * 8;
        const int rs = k / C, c = k - rs * C, r = rs / S, s = rs - r * S;
        const bool k_ok = k < KD;
        const unsigned dst = base + stage * STAGE_BYTES + copy_offset;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int h = h_org[i] + r, col = w_org[i] + s;
            const bool a_ok = k_ok && h >= 0 && h < H && col >= 0 && col < W;
            // An invalid copy reads nothing, but its source address is still formed: keep it in bounds.
            cp_async_16_ca(dst + 32 * i * 128, a_ok ? x + img_base[i] + (h * W + col) * C + c : x, a_ok);
            const int n = n0 + row0 + 32 * i;
            const bool b_ok = k_ok && n < K;
            cp_async_16_cg(dst + TILE_BYTES + 32 * i * 128, b_ok ? w + n * KD + k : w, b_ok);
        }
    };

    // Pipeline: STAGES - 2 tiles are being copied while one is multiplied and the previous tile's
    // wgmma may still be finishing; its stage is refilled only after every warp has waited for it.
    const int kt0 = blockIdx.z * k_per_split;   // this block's first K step (0 without a split)
    const int k_steps = min(k_per_split, (KD + BK - 1) / BK - kt0);
#pragma unroll
    for (int kt = 0; kt < STAGES - 2; ++kt) {
        if (kt < k_steps) load_tile(kt, (kt0 + kt) * BK);
        cp_async_commit();                   // empty groups keep the count uniform
    }

    for (int kt = 0; kt < k_steps; ++kt) {
        cp_async_wait<STAGES - 3>();         // tile kt has landed (for this thread) ...
        // ... and is visible to the tensor cores, which read shared memory through the async proxy;
        fence_proxy_async();
        __syncthreads();                     // ... for every thread; every wgmma on tile kt - 2 is done
        const unsigned stage = base + (kt % STAGES) * STAGE_BYTES;
        fence_accumulators(acc);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks)   // 16 taps = 32 bytes further along each swizzled row
            wgmma_64x128x16(acc, smem_desc(stage + group * 64 * 128 + 32 * ks),
                            smem_desc(stage + TILE_BYTES + 32 * ks));
        wgmma_commit();
        const int next = kt + STAGES - 2;    // refill the stage tile kt - 2 used
        if (next < k_steps) load_tile(next % STAGES, (kt0 + next) * BK);
        cp_async_commit();
        wgmma_wait<1>();                     // tile kt - 1's products are done, tile kt's may run on
        fence_accumulators(acc);
    }
    wgmma_wait<0>();
    fence_accumulators(acc);

    // Lane l of warp w holds rows 64 group + 16 (w % 4) + l / 4 (+ 8), columns 8 j + 2 (l % 4) (+ 1) in
    // acc[4 j .. 4 j + 3] (mma.sync's 16x8 layout, 16 times).
    if (gridDim.z > 1) {   // split K: the raw fp32 sums, 8 bytes per store, into this split's M x K slice
        float* slice = partial + static_cast<size_t>(blockIdx.z) * M * K;
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int half_row = 0; half_row < 2; ++half_row) {
                const int m = m0 + 64 * group + 16 * (warp & 3) + (lane >> 2) + 8 * half_row;
                const int n = n0 + 8 * j + 2 * (lane & 3);
                if (m < M && n < K)   // K % 8 == 0: n + 1 < K too
                    *reinterpret_cast<float2*>(slice + static_cast<size_t>(m) * K + n) =
                        make_float2(acc[4 * j + 2 * half_row], acc[4 * j + 2 * half_row + 1]);
            }
        cp_async_wait<0>();   // no copy may be left in flight when the block exits
        return;
    }

    // Epilogue, as in step 5. Every warp must be done with the last tiles before the output overwrites them.
    cp_async_wait<0>();
    __syncthreads();
    half* out = reinterpret_cast<half*>(smem);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int col = 8 * j + 2 * (lane & 3);
        const bool in = n0 + col < K;
        const float b0 = in ? bias[n0 + col] : 0.0f, b1 = in ? bias[n0 + col + 1] : 0.0f;
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row) {
            float v0 = alpha * acc[4 * j + 2 * half_row] + b0, v1 = alpha * acc[4 * j + 2 * half_row + 1] + b1;
            if (relu) { v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f); }
            const int row = 64 * group + 16 * (warp & 3) + (lane >> 2) + 8 * half_row;
            *reinterpret_cast<half2*>(out + row * OUT_LD + col) = __floats2half2_rn(v0, v1);
        }
    }
    __syncthreads();
    // Re-tiled: thread t writes 16 bytes (8 channels) per round; 16 threads cover a 256-byte row.
#pragma unroll
    for (int round = 0; round < BM * BN / 8 / THREADS; ++round) {
        const int chunk = round * THREADS + tid, row = chunk / (BN / 8), col = (chunk % (BN / 8)) * 8;
        const int m = m0 + row, n = n0 + col;
        if (m < M && n < K)
            *reinterpret_cast<uint4*>(y + m * K + n) = *reinterpret_cast<const uint4*>(out + row * OUT_LD + col);
    }
}
#else
// Built for a target without wgmma (the CPU compile test builds every file for sm_80 and sm_90):
// an empty kernel with the same parameters; common.launcher never launches this build.
extern "C" __global__ void igemm_v6_wgmma(const half*, const half*, half*, int, int, int, int, int, int, int,
                                          int, int, int, int, const float*, float, int, float*, int) {}
#endif

// Split K's second kernel: y = epilogue(sum of the `splits` partial M x K slices), added in split order
// (the same result every run); each thread takes 8 outputs of one row (K % 8 == 0): two 16-byte loads
// per split, one 16-byte store.
extern "C" __global__ void igemm_split_reduce(const float* __restrict__ partial, int splits, int M, int K,
                                              const float* __restrict__ bias, float alpha, int relu,
                                              half* __restrict__ y) {
    const size_t size = static_cast<size_t>(M) * K;
    const size_t i = 8 * (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x);
    if (i >= size) return;
    float v[8] = {};
    for (int s = 0; s < splits; ++s) {
        const float4* p = reinterpret_cast<const float4*>(partial + s * size + i);
        const float4 a = p[0], b = p[1];
        v[0] += a.x; v[1] += a.y; v[2] += a.z; v[3] += a.w;
        v[4] += b.x; v[5] += b.y; v[6] += b.z; v[7] += b.w;
    }
    const int n = static_cast<int>(i % K);
    __align__(16) half2 out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float v0 = alpha * v[2 * j] + bias[n + 2 * j], v1 = alpha * v[2 * j + 1] + bias[n + 2 * j + 1];
        if (relu) { v0 = fmaxf(v0, 0.0f); v1 = fmaxf(v1, 0.0f); }
        out[j] = __floats2half2_rn(v0, v1);
    }
    *reinterpret_cast<uint4*>(y + i) = *reinterpret_cast<const uint4*>(out);
}
