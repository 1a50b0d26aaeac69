// Step 4: a multi-stage cp.async pipeline.
// In step 3 each K step loads its tiles into registers, stores them to shared memory, waits at a
// barrier, and only then computes: the tensor cores idle through every global-memory latency.
// Here STAGES tiles are in flight: cp.async copies global -> shared without passing through
// registers (its src-size 0 form writes the zeros of padding and ragged edges), and while the warps
// compute on tile t, the copies of tiles t+1 .. t+STAGES-1 are already under way.
// The input gather uses cp.async.ca, which keeps the L1 in the path: a 3x3 window reads every input
// pixel nine times, and the L1 can serve some of those repeats. The .cg form, which bypasses the L1,
// made this step much slower (-DX_BYPASS_L1 rebuilds it that way); with .ca the L1 still hits less
// often than in step 3, and this step is still slower than step 3 (see the notebook).
#include <cuda_fp16.h>
#include "igemm_common.cuh"

constexpr int BM = 128, BN = 128, BK = 32, THREADS = 128;
constexpr int CHUNK_STRIDE = 128 * 16 + 32;     // one block of 128 rows x 8 halves, plus the gap
constexpr int TILE_BYTES = 4 * CHUNK_STRIDE;    // 8320 B; A and B tiles: the source's 16.25 KB
constexpr int STAGE_BYTES = 2 * TILE_BYTES;
#ifndef STAGES
#define STAGES 3                                // 3 x 16640 B: dynamic shared memory past 48 KB
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
igemm_v4_cp_async(const half* __restrict__ x, const half* __restrict__ w, half* __restrict__ y,
                  int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride)
{
    extern __shared__ __align__(128) unsigned char smem[];   // STAGES x (A tile, then B tile)

    const int M = N * P * Q, KD = R * S * C;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int warp_m = (warp >> 1) * 64, warp_n = (warp & 1) * 64;

    // Each thread copies 16-byte chunks (8 channels): chunk kc of rows row0 + 32 i, i = 0..3.
    // Where output pixel m lies is fixed for the whole loop, so it is worked out once.
    const int kc = tid & 3, row0 = tid >> 2;
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

    // ldmatrix row addresses of this lane, at K step offset 0. A fragment (16 rows x 16 taps):
    // matrices (rows 0-7 | 8-15) x (taps 0-7 | 8-15). B fragment pair (16 filters x 16 taps):
    // matrices (filters 0-7, taps 0-7 | 8-15), then filters 8-15.
    const unsigned base = smem_addr(smem);
    const unsigned a_lane = base + (lane >> 4) * CHUNK_STRIDE + (warp_m + (lane & 15)) * 16;
    const unsigned b_lane = base + TILE_BYTES + ((lane >> 3) & 1) * CHUNK_STRIDE
                          + (warp_n + ((lane >> 4) << 3) + (lane & 7)) * 16;

    float acc[4][8][4] = {};   // 4 x 8 tiles of 16x8: the warp's 64x64, 128 floats per thread

    // Start the copies of the K step at k0 into stage `stage` (zeros past the end of K).
    auto load_tile = [&](int stage, int k0) {
        // C % 8 == 0, so a thread's 8 channels share one filter tap (r, s).
        const int k = k0 + kc * 8;
        const int rs = k / C, c = k - rs * C, r = rs / S, s = rs - r * S;
        const bool k_ok = k < KD;
        const unsigned dst = base + stage * STAGE_BYTES + kc * CHUNK_STRIDE + row0 * 16;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int h = h_org[i] + r, col = w_org[i] + s;
            const bool a_ok = k_ok && h >= 0 && h < H && col >= 0 && col < W;
            // An invalid copy reads nothing, but its source address is still formed: keep it in bounds.
            cp_async_16_ca(dst + 32 * i * 16, a_ok ? x + img_base[i] + (h * W + col) * C + c : x, a_ok);
            const int n = n0 + row0 + 32 * i;
            const bool b_ok = k_ok && n < K;
            cp_async_16_cg(dst + TILE_BYTES + 32 * i * 16, b_ok ? w + n * KD + k : w, b_ok);
        }
    };

    const int k_steps = (KD + BK - 1) / BK;
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {   // the prologue: the first STAGES - 1 tiles in flight
        if (kt < k_steps) load_tile(kt, kt * BK);
        cp_async_commit();                   // empty groups keep the count uniform
    }

    for (int kt = 0; kt < k_steps; ++kt) {
        cp_async_wait<STAGES - 2>();         // tile kt has landed (for this thread) ...
        __syncthreads();                     // ... for every thread; and all are done with tile kt - 1
        const int next = kt + STAGES - 1;    // refill the stage tile kt - 1 used
        if (next < k_steps) load_tile(next % STAGES, next * BK);
        cp_async_commit();
        const unsigned stage = (kt % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {   // two k16 halves: blocks 2 ks and 2 ks + 1
            unsigned a[4][4], b[8][2];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                ldmatrix_x4(a[i], a_lane + stage + 2 * ks * CHUNK_STRIDE + i * 16 * 16);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                unsigned t[4];
                ldmatrix_x4(t, b_lane + stage + 2 * ks * CHUNK_STRIDE + j * 16 * 16);
                b[2 * j][0] = t[0]; b[2 * j][1] = t[1]; b[2 * j + 1][0] = t[2]; b[2 * j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) mma_16816(acc[i][j], a[i], b[j]);
        }
    }

    // Epilogue: lane l holds rows l / 4 and l / 4 + 8, columns 2 (l % 4) and +1 of each 16x8 tile.
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int m = m0 + warp_m + 16 * i + (lane >> 2), n = n0 + warp_n + 8 * j + 2 * (lane & 3);
            if (n < K) {
                if (m < M)
                    *reinterpret_cast<half2*>(y + m * K + n) = __floats2half2_rn(acc[i][j][0], acc[i][j][1]);
                if (m + 8 < M)
                    *reinterpret_cast<half2*>(y + (m + 8) * K + n) = __floats2half2_rn(acc[i][j][2], acc[i][j][3]);
            }
        }
}
