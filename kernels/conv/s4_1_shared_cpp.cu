// SHARED C++: the Numba SHARED stage (s4_shared.py) line for line in CUDA C++, so that the step to
// VECTORIZE & UNROLL can be split: this file changes only the language and its compiler (NVRTC instead
// of Numba's LLVM). The tile, the thread mapping, the loop order, the per-element index arithmetic of
// the gather and the one-word loads are SHARED's; the tile sizes are compile-time constants in both
// (Numba closes over them). Any C and K: every load is a scalar, so no alignment is needed.
// Layout NHWC: x (N, H, W, C), f (3, 3, C, K), y (N, H, W, K).
#ifndef BY
#define BY 8      // threads along pixels (SHARED's by)
#endif
#ifndef BN
#define BN 32     // threads along output channels (bn): one warp, whose lanes share the pixels
#endif
#ifndef TM
#define TM 8      // pixels per thread (tm)
#endif
#ifndef BKC
#define BKC 16    // input channels per shared-memory step (bkc)
#endif

constexpr int BM = BY * TM;                   // pixels per block
constexpr int THREADS = BY * BN;
// SHARED's copy loops, range(tid, BM * BKC, THREADS), written with their trip count: a thread copies the
// same elements (tid, tid + THREADS, ...), but the count is a constant, so the copy unrolls like the
// FMA loop instead of staying a loop whose trips the compiler must work out per thread.
constexpr int A_PER_THREAD = (BM * BKC + THREADS - 1) / THREADS;
constexpr int B_PER_THREAD = (BKC * BN + THREADS - 1) / THREADS;

// No __launch_bounds__: Numba gives its kernels none either, so both compilers choose registers freely.
extern "C" __global__ void conv_shared_cpp(const float* __restrict__ x, const float* __restrict__ f,
                                           float* __restrict__ y, int n_img, int height, int width, int n_in, int n_out) {
    __shared__ float a_tile[BM][BKC];   // [pixel][channel], as SHARED's: not transposed
    __shared__ float b_tile[BKC][BN];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BN + tx;
    const int n_pix = n_img * height * width;
    const int m0 = blockIdx.x * BM, k0 = blockIdx.y * BN;

    float acc[TM];
    for (int i = 0; i < TM; ++i) acc[i] = 0.f;

    for (int tap = 0; tap < 9; ++tap) {
        const int r = tap / 3, s = tap % 3;
        for (int c0 = 0; c0 < n_in; c0 += BKC) {
            // Gather: consecutive threads take consecutive channels of one pixel (coalesced in NHWC);
            // each element decodes its pixel's (image, row, column) again, as SHARED does.
            for (int l = 0; l < A_PER_THREAD; ++l) {
                const int e = tid + l * THREADS;
                if (e >= BM * BKC) break;
                const int i = e / BKC, j = e % BKC;
                const int m = m0 + i, c = c0 + j;
                float v = 0.f;
                if (m < n_pix && c < n_in) {
                    const int col = m % width, row = (m / width) % height, n = m / (width * height);
                    const int ih = row + r - 1, iw = col + s - 1;
                    if (0 <= ih && ih < height && 0 <= iw && iw < width)
                        v = x[((size_t)(n * height + ih) * width + iw) * n_in + c];
                }
                a_tile[i][j] = v;
            }
            for (int l = 0; l < B_PER_THREAD; ++l) {
                const int e = tid + l * THREADS;
                if (e >= BKC * BN) break;
                const int j = e / BN, t = e % BN;
                float v = 0.f;
                if (c0 + j < n_in && k0 + t < n_out) v = f[(size_t)((r * 3 + s) * n_in + c0 + j) * n_out + k0 + t];
                b_tile[j][t] = v;
            }
            __syncthreads();
            for (int j = 0; j < BKC; ++j) {
                const float b = b_tile[j][tx];
                for (int i = 0; i < TM; ++i)
                    acc[i] += a_tile[ty * TM + i][j] * b;   // all lanes of a warp share ty: a broadcast
            }
            __syncthreads();
        }
    }
    const int k = k0 + tx;
    if (k < n_out) {
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + ty * TM + i;
            if (m < n_pix) y[(size_t)m * n_out + k] = acc[i];
        }
    }
}
