// Step 2: tensor cores through WMMA, img2col done while copying into shared memory.
// Each block computes a 128x128 tile of Y with 4 warps of 64x64, stepping K by 32: the block gathers a
// 128x32 patch tile (img2col) and a 128x32 filter tile into shared memory, then every warp runs 4x4x2
// WMMA 16x16x16 products on them. Each fp16 value a block loads is now used by 128 multiply-adds on
// the tensor cores, against 1 FP32 FMA in step 1.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

constexpr int BM = 128, BN = 128, BK = 32, THREADS = 128;

extern "C" __global__ void __launch_bounds__(THREADS)
igemm_v2_wmma(const half* __restrict__ x, const half* __restrict__ w, half* __restrict__ y,
              int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad, int stride)
{
    // Row-major tiles, 32 halves (64 bytes) per row: the plain layout step 3 improves on.
    __shared__ __align__(128) half As[BM * BK];   // 128 output pixels x 32 (r, s, c) taps
    __shared__ __align__(128) half Bs[BN * BK];   // 128 filters x the same 32 taps
    __shared__ __align__(128) float scratch[THREADS / 32][16 * 16];

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

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

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
            *reinterpret_cast<uint4*>(&As[row * BK + kc * 8]) = a;
            const int n = n0 + row;
            uint4 b = make_uint4(0, 0, 0, 0);
            if (k_ok && n < K)
                b = *reinterpret_cast<const uint4*>(w + n * KD + k);
            *reinterpret_cast<uint4*>(&Bs[row * BK + kc * 8]) = b;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                wmma::load_matrix_sync(a[i], &As[(warp_m + 16 * i) * BK + kk], BK);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // Bs holds filters as rows, i.e. B (taps x filters) column-major.
                wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
                wmma::load_matrix_sync(b, &Bs[(warp_n + 16 * j) * BK + kk], BK);
#pragma unroll
                for (int i = 0; i < 4; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
            }
        }
        __syncthreads();
    }

    // Epilogue: the accumulator layout is opaque, so each 16x16 fragment goes through a per-warp
    // scratch tile; lane l then converts and stores 8 values of row l / 2.
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            wmma::store_matrix_sync(scratch[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int row = lane >> 1, col = (lane & 1) * 8;
            const int m = m0 + warp_m + 16 * i + row, n = n0 + warp_n + 16 * j + col;
            if (m < M && n < K)
#pragma unroll
                for (int e = 0; e < 8; ++e) y[m * K + n + e] = __float2half(scratch[warp][row * 16 + col + e]);
            __syncwarp();
        }
}
