// VECTORIZE & UNROLL: the SHARED stage's tiling, in CUDA C++ so that tile sizes are compile-time
// constants: every loop over the tile unrolls, global loads move 4 channels at once (LDG.128), and
// the input tile is stored transposed so a thread reads its TM pixels as two float4 (LDS.128).
// Needs C and K to be multiples of 4 (the Python wrapper checks) and 16-byte aligned tensors.
// Layout NHWC: x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K).
#ifndef BY
#define BY 8      // threads along pixels
#endif
#ifndef BN
#define BN 32     // threads along output channels (one warp: its lanes share the pixels)
#endif
#ifndef TM
#define TM 8      // pixels per thread
#endif
#ifndef BKC
#define BKC 16    // input channels per shared-memory step
#endif

constexpr int BM = BY * TM;                   // pixels per block
constexpr int THREADS = BY * BN;
constexpr int A_VECS = BM * BKC / 4;          // float4 loads of the input tile
constexpr int B_VECS = BKC * BN / 4;          // float4 loads of the filter tile
constexpr int A_PER_THREAD = (A_VECS + THREADS - 1) / THREADS;
constexpr int B_PER_THREAD = (B_VECS + THREADS - 1) / THREADS;
static_assert(TM % 4 == 0 && BKC % 4 == 0 && BN % 4 == 0, "tiles must hold whole float4s");

extern "C" __global__ void __launch_bounds__(THREADS)
conv_vectorize_unroll(const float* __restrict__ x, const float* __restrict__ f, float* __restrict__ y,
                      int n_img, int height, int width, int n_in, int n_out) {
    __shared__ __align__(16) float a_tile[BKC][BM];   // transposed: [channel][pixel]
    __shared__ __align__(16) float b_tile[BKC][BN];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BN + tx;
    const int n_pix = n_img * height * width;
    const int m0 = blockIdx.x * BM, k0 = blockIdx.y * BN;

    // The pixels this thread gathers never change: decode (image, row, column) once.
    int a_img[A_PER_THREAD], a_row[A_PER_THREAD], a_col[A_PER_THREAD];
#pragma unroll
    for (int l = 0; l < A_PER_THREAD; ++l) {
        const int m = m0 + (tid + l * THREADS) / (BKC / 4);
        a_img[l] = m < n_pix ? m / (height * width) : -1;   // -1: past the last pixel
        a_row[l] = (m / width) % height;
        a_col[l] = m % width;
    }

    float acc[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) acc[i] = 0.f;

    for (int tap = 0; tap < 9; ++tap) {
        const int dr = tap / 3 - 1, ds = tap % 3 - 1;
        for (int c0 = 0; c0 < n_in; c0 += BKC) {
#pragma unroll
            for (int l = 0; l < A_PER_THREAD; ++l) {
                const int e = tid + l * THREADS;
                if (e < A_VECS) {
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
                const float b = b_tile[j][tx];
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 a = *reinterpret_cast<const float4*>(&a_tile[j][ty * TM + i]);
                    acc[i + 0] += a.x * b;
                    acc[i + 1] += a.y * b;
                    acc[i + 2] += a.z * b;
                    acc[i + 3] += a.w * b;
                }
            }
            __syncthreads();
        }
    }
    const int k = k0 + tx;
    if (k < n_out) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + ty * TM + i;
            if (m < n_pix) y[(size_t)m * n_out + k] = acc[i];
        }
    }
}
