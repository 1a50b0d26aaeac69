// Step 3: a bank-conflict-free shared layout, read with ldmatrix into mma.sync.
// Step 2's tiles keep a pixel's 32 taps in one 64-byte row, so the 8 rows an 8x8 fragment reads
// fall on only 2 distinct 16-byte bank groups: 4-way conflicts. Here a tile is 4 blocks of
// 128 rows x 8 taps (2048 B), the source's layout: 8 consecutive rows of one block are 128
// contiguous bytes (conflict-free reads), and the 32-byte gap between blocks makes the copy-in, where
// 4 threads write 4 blocks of one row, conflict-free too. WMMA cannot read this layout, so the warps
// use ldmatrix and mma.sync.m16n8k16 directly -- which also gives a known accumulator layout, so the
// epilogue stores straight from registers.
#include <cuda_fp16.h>
#include "igemm_common.cuh"

constexpr int BM = 128, BN = 128, BK = 32, THREADS = 128;
constexpr int CHUNK_STRIDE = 128 * 16 + 32;     // one block of 128 rows x 8 halves, plus the gap
constexpr int TILE_BYTES = 4 * CHUNK_STRIDE;    // 8320 B; A and B tiles: the source's 16.25 KB

extern "C" __global__ void __launch_bounds__(THREADS)
igemm_v3_ldmatrix(const half* __restrict__ x, const half* __restrict__ w, half* __restrict__ y,
                  int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride)
{
    __shared__ __align__(128) unsigned char smem[2 * TILE_BYTES];   // A tile, then B tile

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
    const unsigned a_lane = smem_addr(smem) + (lane >> 4) * CHUNK_STRIDE + (warp_m + (lane & 15)) * 16;
    const unsigned b_lane = smem_addr(smem) + TILE_BYTES + ((lane >> 3) & 1) * CHUNK_STRIDE
                          + (warp_n + ((lane >> 4) << 3) + (lane & 7)) * 16;

    float acc[4][8][4] = {};   // 4 x 8 tiles of 16x8: the warp's 64x64, 128 floats per thread

    for (int k0 = 0; k0 < KD; k0 += BK) {
        // C % 8 == 0, so a thread's 8 channels share one filter tap (r, s).
        const int k = k0 + kc * 8;
        const int rs = k / C, c = k - rs * C, r = rs / S, s = rs - r * S;
        const bool k_ok = k < KD;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + 32 * i;
            const int h = h_org[i] + r, col = w_org[i] + s;
            uint4 a = make_uint4(0, 0, 0, 0);   // zero padding and ragged edges read as zeros
            if (k_ok && h >= 0 && h < H && col >= 0 && col < W)
                a = *reinterpret_cast<const uint4*>(x + img_base[i] + (h * W + col) * C + c);
            *reinterpret_cast<uint4*>(smem + kc * CHUNK_STRIDE + row * 16) = a;
            const int n = n0 + row;
            uint4 b = make_uint4(0, 0, 0, 0);
            if (k_ok && n < K)
                b = *reinterpret_cast<const uint4*>(w + n * KD + k);
            *reinterpret_cast<uint4*>(smem + TILE_BYTES + kc * CHUNK_STRIDE + row * 16) = b;
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {   // two k16 halves: blocks 2 ks and 2 ks + 1
            unsigned a[4][4], b[8][2];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                ldmatrix_x4(a[i], a_lane + 2 * ks * CHUNK_STRIDE + i * 16 * 16);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                unsigned t[4];
                ldmatrix_x4(t, b_lane + 2 * ks * CHUNK_STRIDE + j * 16 * 16);
                b[2 * j][0] = t[0]; b[2 * j][1] = t[1]; b[2 * j + 1][0] = t[2]; b[2 * j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) mma_16816(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
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
