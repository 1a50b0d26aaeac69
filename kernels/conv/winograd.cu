// WINOGRAD: the same 3x3 convolution with fewer multiplications. Winograd's minimal filtering
// algorithm F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
// computes a 2x2 block of outputs from a 4x4 block of inputs with 16 products per (channel, output
// channel) instead of 36:  Y = A^T [ (G g G^T) . (B^T d B) ] A, "." elementwise. The 16 products of
// all (channel, output channel) pairs are 16 independent matrix products over the channels, so the
// direct convolution's 9 x C multiply-adds per output become 4 x C: 2.25x fewer.
//
// Two kernels. winograd_filter transforms the filter once per call: U[xi][c][k] = (G g G^T)[xi].
// conv_winograd: a block owns a 16 x 16 output tile of one image (8 x 8 Winograd tiles) x BN output
// channels. Per chunk of BKC input channels it copies the 18 x 18 input halo (as HALO TILE does) and
// U's chunk with cp.async, two buffers deep; transforms the halo into V[xi][c][tile] = B^T d B in shared
// memory; then 16 thread groups, one per xi, multiply V[xi] (64 tiles x BKC) by U[xi] (BKC x BN), each
// thread an 8-tile x 16-channel register tile (its 8 tiles in two runs of 4, 32 tiles apart; with
// -DV_ONE_PASS=0 in one run of 8: the first version, whose loads of V take two passes). At the end the
// 16 products of each (tile, output channel) meet in shared memory, a round of 8 output channels at a
// time, for the output transform A^T M A.
// Needs C and K multiples of 4 and 16-byte aligned tensors. Layout NHWC, filter (3, 3, C, K).
#include "halo_copy.cuh"

#ifndef BKC
#define BKC 16        // input channels per shared-memory step (a multiple of 8)
#endif
#ifndef V_ONE_PASS
#define V_ONE_PASS 1  // 0: the first version's tiles per thread (see RUN below)
#endif
constexpr int BN = 32;             // output channels per block
constexpr int TT = 8;              // Winograd tiles per block side
constexpr int T = TT * TT;         // 64 tiles: a 16 x 16 output tile
constexpr int HALO = 2 * TT + 2;   // 18 input rows and columns
constexpr int THREADS = 256;       // 16 groups (one per xi) x 16 threads (8 groups of tiles x 2 of channels)
// Halo rows padded so that 4 consecutive tile rows (2 halo rows apart) start 8 banks apart.
constexpr int ROW_PITCH = HALO * BKC + 4;
constexpr int A_SIZE = HALO * ROW_PITCH;
constexpr int U_SIZE = 16 * BKC * BN;
// V[xi][c][t]: t = tile column * 8 + tile row; the pitch of 68 puts 8 channels' rows 4 banks apart for
// the transform's stores.
constexpr int V_PITCH = T + 4;
// Thread tg (0..7) of a group multiplies tiles tg * RUN + 0..3 and, SECOND tiles on, 4 more. A quarter
// warp's float4 loads of V (8 threads of one channel group) then cover the 32 banks once (RUN 4), or,
// with one run of 8 tiles (RUN 8), threads 4 apart read words 32 apart on the same banks: two passes.
constexpr int RUN = V_ONE_PASS ? 4 : 8;
constexpr int SECOND = V_ONE_PASS ? 32 : 4;
constexpr int V_SIZE = 16 * BKC * V_PITCH;
// The epilogue's staging S[xi][t][8 channels], each run of RUN tiles 4 words further on, so that a
// quarter warp's stores (one tile of each thread) cover the 32 banks once.
constexpr int S_XI = T * 8 + (T / 4) * 4;
constexpr int S_SIZE = 16 * S_XI;
constexpr int V_REGION = V_SIZE > S_SIZE ? V_SIZE : S_SIZE;
static_assert(BKC % 8 == 0, "BKC: a multiple of 8");
static_assert(2 * (A_SIZE + U_SIZE) * 4 + V_REGION * 4 <= 227 * 1024, "shared memory");

// U[xi][c][k] (16, C, K) from f (3, 3, C, K): one thread per (c, k).
extern "C" __global__ void winograd_filter(const float* __restrict__ f, float* __restrict__ u, int n_in, int n_out) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_in * n_out) return;
    const size_t plane = static_cast<size_t>(n_in) * n_out;
    float g[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int s = 0; s < 3; ++s) g[r][s] = f[(r * 3 + s) * plane + e];
    float t[4][3];  // G g
#pragma unroll
    for (int s = 0; s < 3; ++s) {
        t[0][s] = g[0][s];
        t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
        t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
        t[3][s] = g[2][s];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // (G g) G^T
        const float row[4] = {t[i][0], 0.5f * (t[i][0] + t[i][1] + t[i][2]), 0.5f * (t[i][0] - t[i][1] + t[i][2]),
                              t[i][2]};
#pragma unroll
        for (int j = 0; j < 4; ++j) u[(i * 4 + j) * plane + e] = row[j];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv_winograd(const float* __restrict__ x, const float* __restrict__ u, float* __restrict__ y, int n_img,
              int height, int width, int n_in, int n_out) {
    extern __shared__ __align__(16) float smem[];
    float (*a_tile)[A_SIZE] = reinterpret_cast<float (*)[A_SIZE]>(smem);               // [buf][row][col][c]
    float (*u_tile)[U_SIZE] = reinterpret_cast<float (*)[U_SIZE]>(smem + 2 * A_SIZE);  // [buf][xi][c][k]
    float* v = smem + 2 * (A_SIZE + U_SIZE);                                           // [xi][c][t], then S
    const int tid = threadIdx.x;
    const int tiles_w = (width + 2 * TT - 1) / (2 * TT), tiles_h = (height + 2 * TT - 1) / (2 * TT);
    const int tile_w = blockIdx.x % tiles_w, tile_h = blockIdx.x / tiles_w % tiles_h;
    const int img = blockIdx.x / (tiles_w * tiles_h);
    const int h0 = tile_h * 2 * TT, w0 = tile_w * 2 * TT, k0 = blockIdx.y * BN;
    const int chunks = (n_in + BKC - 1) / BKC;
    const size_t plane = static_cast<size_t>(n_in) * n_out;

    auto issue = [&](int chunk, int buf) {
        const int c0 = chunk * BKC;
        copy_halo<HALO, HALO, BKC, ROW_PITCH, THREADS>(a_tile[buf], x, tid, img, h0, w0, c0, height, width, n_in);
        constexpr int U_VECS = 16 * BKC * BN / 4;
#pragma unroll
        for (int l = 0; l < U_VECS / THREADS; ++l) {
            const int e = tid + l * THREADS;
            const int xi = e / (BKC * BN / 4), j = e / (BN / 4) % BKC, q = 4 * (e % (BN / 4));
            const bool ok = c0 + j < n_in && k0 + q < n_out;
            copy16(&u_tile[buf][(xi * BKC + j) * BN + q], ok ? u + xi * plane + (size_t)(c0 + j) * n_out + k0 + q : u, ok);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    const int xi = tid >> 4, tg = tid & 7, kg = (tid >> 3) & 1;  // kg: output channels 4 kg + 8 q .. + 3
    float acc[8][16];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[i][j] = 0.f;

    issue(0, 0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        const int buf = chunk & 1;
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads();  // this chunk has landed, and every thread is past the previous chunk's products
        if (chunk + 1 < chunks) issue(chunk + 1, buf ^ 1);
        // Input transform: (tile, channel) items, a warp 4 tile rows x 8 channels.
#pragma unroll
        for (int l = 0; l < BKC * T / THREADS; ++l) {
            const int e = tid + l * THREADS;
            const int c = e % 8 + 8 * (e / (8 * T)), t = e / 8 % T;
            const int ty = t % TT, tx = t / TT;
            const float* a = &a_tile[buf][2 * ty * ROW_PITCH + 2 * tx * BKC + c];
            float d[4][4];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 4; ++s) d[r][s] = a[r * ROW_PITCH + s * BKC];
            float b[4][4];  // B^T d
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                b[0][s] = d[0][s] - d[2][s];
                b[1][s] = d[1][s] + d[2][s];
                b[2][s] = d[2][s] - d[1][s];
                b[3][s] = d[1][s] - d[3][s];
            }
            float* out = v + c * V_PITCH + t;
#pragma unroll
            for (int r = 0; r < 4; ++r) {  // (B^T d) B
                out[(r * 4 + 0) * BKC * V_PITCH] = b[r][0] - b[r][2];
                out[(r * 4 + 1) * BKC * V_PITCH] = b[r][1] + b[r][2];
                out[(r * 4 + 2) * BKC * V_PITCH] = b[r][2] - b[r][1];
                out[(r * 4 + 3) * BKC * V_PITCH] = b[r][1] - b[r][3];
            }
        }
        __syncthreads();
        const float* vp = v + xi * BKC * V_PITCH + RUN * tg;
        const float* up = &u_tile[buf][xi * BKC * BN + 4 * kg];
        // 2 channels per trip: unrolled further, ptxas keeps more operands live than 255 registers hold
#pragma unroll 2
        for (int c = 0; c < BKC; ++c) {
            const float4 a0 = *reinterpret_cast<const float4*>(vp + c * V_PITCH);
            const float4 a1 = *reinterpret_cast<const float4*>(vp + c * V_PITCH + SECOND);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float b[16];
#pragma unroll
            for (int q = 0; q < 4; ++q) {  // channels 4 kg + 8 q .. + 3
                const float4 bq = *reinterpret_cast<const float4*>(up + c * BN + 8 * q);
                b[4 * q] = bq.x, b[4 * q + 1] = bq.y, b[4 * q + 2] = bq.z, b[4 * q + 3] = bq.w;
            }
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 16; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }

    // Output transform, 8 output channels (k0 + 8 q ..) per round: each thread's 16 products for them
    // go to S; then each (tile, channel) item gathers its 16 and writes its 2 x 2 outputs.
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        __syncthreads();  // V (or the previous round's S) is no longer read
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int t = RUN * tg + (i & 3) + SECOND * (i >> 2);
            *reinterpret_cast<float4*>(v + xi * S_XI + t * 8 + (t / RUN) * 4 + 4 * kg) =
                make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
        }
        __syncthreads();
#pragma unroll
        for (int l = 0; l < T * 8 / THREADS; ++l) {
            const int e = tid + l * THREADS;
            const int kk = e % 8, t = e / 8;
            const int k = k0 + 8 * q + kk;
            const float* s = v + t * 8 + (t / RUN) * 4 + kk;
            float m[4][4];
#pragma unroll
            for (int r = 0; r < 16; ++r) m[r / 4][r % 4] = s[r * S_XI];
            float w[2][4];  // A^T M
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                w[0][j] = m[0][j] + m[1][j] + m[2][j];
                w[1][j] = m[1][j] - m[2][j] - m[3][j];
            }
            const int oh = h0 + 2 * (t % TT), ow = w0 + 2 * (t / TT);
            if (k >= n_out || ow >= width) continue;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (oh + r >= height) break;
                float* o = y + ((size_t)(img * height + oh + r) * width + ow) * n_out + k;
                o[0] = w[r][0] + w[r][1] + w[r][2];
                if (ow + 1 < width) o[n_out] = w[r][1] - w[r][2] - w[r][3];
            }
        }
    }
}
