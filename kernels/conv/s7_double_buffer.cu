// DOUBLE BUFFER: two copies of each shared tile. While the block multiplies the tiles of step t out
// of one buffer, the global loads of step t + 1 are already in flight (into registers), and are
// stored into the other buffer afterwards: the load latency hides behind 64 x BKC FMAs per thread,
// and one barrier per step suffices instead of two. Otherwise as REGISTER TILING.
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
conv_double_buffer(const float* __restrict__ x, const float* __restrict__ f, float* __restrict__ y,
                   int n_img, int height, int width, int n_in, int n_out) {
    __shared__ __align__(16) float a_tile[2][BKC][BM + A_PAD];   // [buffer][channel][pixel]
    __shared__ __align__(16) float b_tile[2][BKC][BN];           // [buffer][channel][output channel]
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
    const int n_pix = n_img * height * width;
    const int m0 = blockIdx.x * BM, k0 = blockIdx.y * BN;
    const int chunks = (n_in + BKC - 1) / BKC, steps = 9 * chunks;

    int a_img[A_PER_THREAD], a_row[A_PER_THREAD], a_col[A_PER_THREAD];
#pragma unroll
    for (int l = 0; l < A_PER_THREAD; ++l) {
        const int m = m0 + (tid + l * THREADS) / (BKC / 4);
        a_img[l] = m < n_pix ? m / (height * width) : -1;
        a_row[l] = (m / width) % height;
        a_col[l] = m % width;
    }

    float4 a_next[A_PER_THREAD], b_next[B_PER_THREAD];   // the next step's tiles, in flight
    auto load = [&](int step) {
        const int tap = step / chunks, c0 = (step - tap * chunks) * BKC;
        const int dr = tap / 3 - 1, ds = tap % 3 - 1;
#pragma unroll
        for (int l = 0; l < A_PER_THREAD; ++l) {
            const int e = tid + l * THREADS;
            const int c = c0 + 4 * (e % (BKC / 4));
            const int ih = a_row[l] + dr, iw = a_col[l] + ds;
            a_next[l] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (e < A_VECS && a_img[l] >= 0 && c < n_in && ih >= 0 && ih < height && iw >= 0 && iw < width)
                a_next[l] = *reinterpret_cast<const float4*>(x + ((size_t)(a_img[l] * height + ih) * width + iw) * n_in + c);
        }
#pragma unroll
        for (int l = 0; l < B_PER_THREAD; ++l) {
            const int e = tid + l * THREADS;
            const int j = e / (BN / 4), t = 4 * (e % (BN / 4));
            b_next[l] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (e < B_VECS && c0 + j < n_in && k0 + t < n_out)
                b_next[l] = *reinterpret_cast<const float4*>(f + ((size_t)(tap * n_in + c0 + j)) * n_out + k0 + t);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int l = 0; l < A_PER_THREAD; ++l) {
            const int e = tid + l * THREADS;
            if (e >= A_VECS) break;
            const int i = e / (BKC / 4), q = e % (BKC / 4);
            a_tile[buf][4 * q + 0][i] = a_next[l].x;
            a_tile[buf][4 * q + 1][i] = a_next[l].y;
            a_tile[buf][4 * q + 2][i] = a_next[l].z;
            a_tile[buf][4 * q + 3][i] = a_next[l].w;
        }
#pragma unroll
        for (int l = 0; l < B_PER_THREAD; ++l) {
            const int e = tid + l * THREADS;
            if (e >= B_VECS) break;
            *reinterpret_cast<float4*>(&b_tile[buf][e / (BN / 4)][4 * (e % (BN / 4))]) = b_next[l];
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    load(0);
    store(0);
    __syncthreads();
    for (int step = 0; step < steps; ++step) {
        const int buf = step & 1;
        if (step + 1 < steps) load(step + 1);   // issued now, consumed after the FMAs below
#pragma unroll
        for (int j = 0; j < BKC; ++j) {
            float a[TM], b[TN];
            *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&a_tile[buf][j][ty * 4]);
            *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&a_tile[buf][j][BM / 2 + ty * 4]);
            *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&b_tile[buf][j][tx * 4]);
            *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&b_tile[buf][j][BN / 2 + tx * 4]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int jj = 0; jj < TN; ++jj) acc[i][jj] += a[i] * b[jj];
        }
        // The other buffer was last read before the previous barrier, so it is free to overwrite.
        if (step + 1 < steps) store(buf ^ 1);
        __syncthreads();
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
