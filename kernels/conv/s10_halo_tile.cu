// HALO TILE: back from implicit GEMM to a direct convolution on a 2-D tile of the image. A block owns
// TH x TW output pixels of one image x BN output channels; per chunk of BKC input channels it copies the
// (TH+2) x (TW+2) input halo ONCE, with the filter of all 9 taps, and runs the 9 taps out of shared
// memory. DOUBLE BUFFER copied an input tile for every tap: 9 x the copies, index arithmetic and barriers.
// A thread owns TP consecutive pixels of one row x 8 output channels. For one filter row and 4 channels it
// loads the TP + 2 input pixels its outputs see through the 3 column taps (LDS.128, channels innermost)
// and uses them for all 3 column taps: the shift by one column is a register renaming at compile time.
// TP = 7 fits a tile row to 14-pixel image rows (HALO AUTOTUNE chooses it where it is faster).
// The copies are cp.async (global -> shared without registers, zero-filled outside the image), two
// buffers deep: chunk t + 1 is in flight while chunk t is computed. Shared memory is dynamic: the
// default 16 x 16 x 64 tile with 16-channel chunks needs about half of an SM's shared memory per block.
// Prediction (conv1, from the SASS counts of the default tile): more FFMAs per LDS.128 than DOUBLE BUFFER
// and the copies with their index arithmetic issued once per chunk instead of once per tap, so a higher
// E and rate at the FMA ceiling, if 2 warps per scheduler (one 8-warp block per SM at its register
// count) keep the FMA pipe as busy as DOUBLE BUFFER's 3. conv2's 14 x 14 images fill 196 of a tile's
// 256 pixels: the padded quarter is computed too, so less useful work there (notebook 03 computes both).
// Needs C and K multiples of 4 and 16-byte aligned tensors. Layout NHWC as in VECTORIZE.
#include "halo_copy.cuh"

#ifndef TH
#define TH 16         // output rows per block
#endif
#ifndef TW
#define TW 16         // output columns per block
#endif
#ifndef BN
#define BN 64         // output channels per block
#endif
#ifndef BKC
#define BKC 16        // input channels per shared-memory step
#endif
#ifndef TP
#define TP 8          // pixels per thread: consecutive columns of one row (TW a multiple of TP)
#endif
#define TN 8          // output channels per thread (two groups of 4, half a tile apart)

constexpr int TX = BN / TN, TY = TH * TW / TP, THREADS = TX * TY;
// Let each thread use up to 255 registers (64 accumulators, the 40-float window, operands, addresses)
// while an SM still holds 256 threads: with 128-thread blocks, 2 blocks per SM.
constexpr int MIN_BLOCKS = THREADS >= 256 ? 1 : 256 / THREADS;
constexpr int HALO_H = TH + 2, HALO_W = TW + 2;
// 4 floats of padding per halo row: the 4 rows a warp reads at once start on different banks.
constexpr int ROW_PITCH = HALO_W * BKC + 4;
constexpr int A_SIZE = HALO_H * ROW_PITCH, B_SIZE = 9 * BKC * BN;
constexpr int B_TAP_VECS = BKC * BN / 4;
static_assert(TW % TP == 0 && BN % (2 * TN) == 0 && BKC % 4 == 0, "tile sizes");
static_assert(2 * (A_SIZE + B_SIZE) * 4 <= 227 * 1024, "more shared memory than one block may use on sm_90");

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv_halo_tile(const float* __restrict__ x, const float* __restrict__ f, float* __restrict__ y,
               int n_img, int height, int width, int n_in, int n_out) {
    extern __shared__ __align__(16) float smem[];   // 2 * (A_SIZE + B_SIZE) floats, set by the launcher
    float (*a_tile)[A_SIZE] = reinterpret_cast<float (*)[A_SIZE]>(smem);   // [buffer][halo row][column][channel]
    float (*b_tile)[B_SIZE] = reinterpret_cast<float (*)[B_SIZE]>(smem + 2 * A_SIZE);   // [buffer][tap][channel][k]
    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
    const int tiles_w = (width + TW - 1) / TW, tiles_h = (height + TH - 1) / TH;
    const int tile_w = blockIdx.x % tiles_w, tile_h = blockIdx.x / tiles_w % tiles_h;
    const int img = blockIdx.x / (tiles_w * tiles_h);
    const int h0 = tile_h * TH, w0 = tile_w * TW, k0 = blockIdx.y * BN;
    // Consecutive ty are consecutive rows: the 4 pixel groups of a warp sit in 4 rows (see ROW_PITCH).
    const int row = ty % TH, col0 = ty / TH * TP;
    const int chunks = (n_in + BKC - 1) / BKC;

    auto issue = [&](int chunk, int buf) {   // start the copies of one chunk into buffer buf
        const int c0 = chunk * BKC;
        copy_halo<HALO_H, HALO_W, BKC, ROW_PITCH, THREADS>(a_tile[buf], x, tid, img, h0, w0, c0, height, width, n_in);
        // The filter tap by tap: a thread copies the same (channel, output channel) float4s of every tap.
        const float* f_chunk = f + (size_t)c0 * n_out + k0;
#pragma unroll
        for (int tap = 0; tap < 9; ++tap) {
#pragma unroll
            for (int l = 0; l < (B_TAP_VECS + THREADS - 1) / THREADS; ++l) {
                const int e = tid + l * THREADS;
                if (B_TAP_VECS % THREADS && e >= B_TAP_VECS) break;
                const int j = e / (BN / 4), t = 4 * (e % (BN / 4));
                const bool ok = c0 + j < n_in && k0 + t < n_out;
                copy16(&b_tile[buf][(tap * BKC + j) * BN + t],
                       ok ? f_chunk + ((size_t)tap * n_in + j) * n_out + t : f, ok);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float acc[TP][TN];
#pragma unroll
    for (int i = 0; i < TP; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    issue(0, 0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        const int buf = chunk & 1;
        if (chunk + 1 < chunks)
            issue(chunk + 1, buf ^ 1);   // buf ^ 1 was last read before the previous iteration's final barrier
        else
            asm volatile("cp.async.commit_group;\n" ::);   // an empty group: "all but the newest" stays this chunk
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncthreads();                  // every thread's copies of this chunk have landed
        const float* a_s = &a_tile[buf][row * ROW_PITCH + col0 * BKC];
        const float* b_s = &b_tile[buf][tx * 4];
        // Not unrolled: one iteration (4 channels, 3 filter rows) is already 2304 FFMA, and a fully
        // unrolled chunk would outgrow the instruction cache.
#pragma unroll 1
        for (int q = 0; q < BKC / 4; ++q) {
#pragma unroll
            for (int dr = 0; dr < 3; ++dr) {
                float4 a[TP + 2];         // halo row (row + dr), columns col0 .. col0 + 9, channels 4q .. 4q + 3
#pragma unroll
                for (int p = 0; p < TP + 2; ++p)
                    a[p] = *reinterpret_cast<const float4*>(a_s + dr * ROW_PITCH + p * BKC + 4 * q);
#pragma unroll
                for (int ds = 0; ds < 3; ++ds) {
#pragma unroll
                    for (int cc = 0; cc < 4; ++cc) {
                        const float* bp = b_s + ((dr * 3 + ds) * BKC + 4 * q + cc) * BN;
                        const float4 b0 = *reinterpret_cast<const float4*>(bp);
                        const float4 b1 = *reinterpret_cast<const float4*>(bp + BN / 2);
                        const float b[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                        for (int i = 0; i < TP; ++i) {
                            const float4 v = a[i + ds];   // output column i sees input column i + ds - 1
                            const float av = cc == 0 ? v.x : cc == 1 ? v.y : cc == 2 ? v.z : v.w;
#pragma unroll
                            for (int j = 0; j < TN; ++j) acc[i][j] += av * b[j];
                        }
                    }
                }
            }
        }
        __syncthreads();                  // buffer buf is free for the copies issued next iteration
    }

    const int oh = h0 + row;
    if (oh >= height) return;
#pragma unroll
    for (int i = 0; i < TP; ++i) {
        const int ow = w0 + col0 + i;
        if (ow >= width) break;
        float* out = y + ((size_t)(img * height + oh) * width + ow) * n_out;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int k = k0 + half * (BN / 2) + tx * 4;
            if (k < n_out)
                *reinterpret_cast<float4*>(out + k) = make_float4(acc[i][4 * half], acc[i][4 * half + 1],
                                                                  acc[i][4 * half + 2], acc[i][4 * half + 3]);
        }
    }
}
