// REGISTER TILING: each thread now owns an 8 x 8 tile -- 8 pixels x 8 output channels -- instead of
// 8 x 1. Per step of the inner loop it reads 8 input and 8 filter values from shared memory (four
// LDS.128) and does 64 FMAs with them (outer product), where VECTORIZE did 8 FMAs per 3 loads.
// A thread's pixels and channels come in two groups of 4, half a tile apart, so the 8 lanes that
// share a 128-byte shared-memory wavefront read 8 consecutive float4s: no bank conflicts.
// Needs C and K multiples of 4 and 16-byte aligned tensors. Layout NHWC as in VECTORIZE.
#ifndef BM
#define BM 128    // pixels per block
#endif
#ifndef BN
#define BN 64     // output channels per block
#endif
#ifndef BKC
#define BKC 8     // input channels per shared-memory step
#endif
#define TM 8      // pixels per thread (two groups of 4)
#define TN 8      // output channels per thread (two groups of 4)

constexpr int TX = BN / TN, TY = BM / TM, THREADS = TX * TY;
constexpr int A_PAD = 4;                      // keeps the transposed stores of a warp on distinct banks
constexpr int A_VECS = BM * BKC / 4, B_VECS = BKC * BN / 4;
constexpr int A_PER_THREAD = (A_VECS + THREADS - 1) / THREADS;
constexpr int B_PER_THREAD = (B_VECS + THREADS - 1) / THREADS;
static_assert(BM % (2 * TM) == 0 && BN % (2 * TN) == 0 && BKC % 4 == 0, "tile sizes");

extern "C" __global__ void __launch_bounds__(THREADS)
conv_register_tiling(const float* __restrict__ x, const float* __restrict__ f, float* __restrict__ y,
                     int n_img, int height, int width, int n_in, int n_out) {
    __shared__ __align__(16) float a_tile[BKC][BM + A_PAD];   // [channel][pixel]
    __shared__ __align__(16) float b_tile[BKC][BN];           // [channel][output channel]
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
    const int n_pix = n_img * height * width;
    const int m0 = blockIdx.x * BM, k0 = blockIdx.y * BN;

    int a_img[A_PER_THREAD], a_row[A_PER_THREAD], a_col[A_PER_THREAD];
#pragma unroll
    for (int l = 0; l < A_PER_THREAD; ++l) {
        const int m = m0 + (tid + l * THREADS) / (BKC / 4);
        a_img[l] = m < n_pix ? m / (height * width) : -1;
        a_row[l] = (m / width) % height;
        a_col[l] = m % width;
    }

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int tap = 0; tap < 9; ++tap) {
        const int dr = tap / 3 - 1, ds = tap % 3 - 1;
        for (int c0 = 0; c0 < n_in; c0 += BKC) {
#pragma unroll
            for (int l = 0; l < A_PER_THREAD; ++l) {
                const int e = tid + l * THREADS;
                if (e >= A_VECS) break;
                const int i = e / (BKC / 4), q = e % (BKC / 4), c = c0 + 4 * q;
                const int ih = a_row[l] + dr, iw = a_col[l] + ds;
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (a_img[l] >= 0 && c < n_in && ih >= 0 && ih < height && iw >= 0 && iw < width)
                    v = *reinterpret_cast<const float4*>(x + ((size_t)(a_img[l] * height + ih) * width + iw) * n_in + c);
                a_tile[4 * q + 0][i] = v.x;
                a_tile[4 * q + 1][i] = v.y;
                a_tile[4 * q + 2][i] = v.z;
                a_tile[4 * q + 3][i] = v.w;
            }
#pragma unroll
            for (int l = 0; l < B_PER_THREAD; ++l) {
                const int e = tid + l * THREADS;
                if (e >= B_VECS) break;
                const int j = e / (BN / 4), t = 4 * (e % (BN / 4));
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (c0 + j < n_in && k0 + t < n_out)
                    v = *reinterpret_cast<const float4*>(f + ((size_t)(tap * n_in + c0 + j)) * n_out + k0 + t);
                *reinterpret_cast<float4*>(&b_tile[j][t]) = v;
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < BKC; ++j) {
                float a[TM], b[TN];
                *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&a_tile[j][ty * 4]);
                *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&a_tile[j][BM / 2 + ty * 4]);
                *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&b_tile[j][tx * 4]);
                *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&b_tile[j][BN / 2 + tx * 4]);
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int jj = 0; jj < TN; ++jj) acc[i][jj] += a[i] * b[jj];
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
        if (m >= n_pix) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int k = k0 + half * (BN / 2) + tx * 4;
            if (k < n_out)
                *reinterpret_cast<float4*>(y + (size_t)m * n_out + k) =
                    make_float4(acc[i][4 * half], acc[i][4 * half + 1], acc[i][4 * half + 2], acc[i][4 * half + 3]);
        }
    }
}
