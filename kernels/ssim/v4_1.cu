// V4-1: the y-pass as rotating partial sums. Instead of keeping the last 11 x-pass rows and summing
// 11 products for every output (plus 10 register moves per moment to rotate them), each register holds
// the partial sum of one pending output row; a new x-pass row adds its weighted value to all ten pending
// sums at once, and the FFMA writes each result one register "down" (d = a * b + c with d != c). In
// principle the rotation is then free: 10 FFMAs and one FMUL per moment and row, no moves. In practice
// ptxas still copies sums back into place before the loop's branch (notebook 02b counts these moves in
// V6's loop). A small loop body. Block: one warp, two columns per thread (lane and lane + 32), a strip
// of 72 rows: 64 x 72 outputs, as published.
// Loads stay branch-free: cp.async zero-fill from a valid address (see v3.cu).
#include <cuda_pipeline.h>

#include "ssim_common.cuh"

namespace {
using namespace ssim;
constexpr int kThreads = 32;
constexpr int kColsPerThread = 2;
constexpr int kCols = kThreads * kColsPerThread;  // output columns per block
constexpr int kRows = 72;                          // output rows per strip
constexpr int kRowLen = kCols + 2 * kRadius;
constexpr int kPending = kWindow - 1;  // output rows that still wait for input rows
}  // namespace

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v4_1(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
          float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  __shared__ float rows1[2][kRowLen];
  __shared__ float rows2[2][kRowLen];
  const int lane = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs

  auto load_row = [&](int r, int buf) {
    const int y = y0 - kRadius + r;
    for (int c = lane; c < kRowLen; c += kThreads) {
      const int x = x0 - kRadius + c;
      const bool inside = y >= 0 && y < h && x >= 0 && x < w;
      const size_t offset = inside ? static_cast<size_t>(y) * w + x : 0;
      __pipeline_memcpy_async(&rows1[buf][c], a + offset, 4, inside ? 0 : 4);
      __pipeline_memcpy_async(&rows2[buf][c], b + offset, 4, inside ? 0 : 4);
    }
    __pipeline_commit();
  };

  // pending[j][m][i]: moment m of column j for output row (current input row - 5 + i), rows above
  // the current one summed so far.
  float pending[kColsPerThread][kMoments][kPending];
#pragma unroll
  for (int j = 0; j < kColsPerThread; ++j)
#pragma unroll
    for (int m = 0; m < kMoments; ++m)
#pragma unroll
      for (int i = 0; i < kPending; ++i) pending[j][m][i] = 0.f;

  load_row(0, 0);
  for (int r = 0; r < steps; ++r) {
    if (r + 1 < steps) {
      load_row(r + 1, (r + 1) & 1);
      __pipeline_wait_prior(1);  // row r has landed; row r + 1 may still be in flight
    } else {
      __pipeline_wait_prior(0);
    }
    shift_own(rows1[r & 1], lane, kThreads, kRowLen);  // only this thread's own copies: no barrier needed first
    shift_own(rows2[r & 1], lane, kThreads, kRowLen);
    __syncwarp();  // one warp per block: a warp barrier makes the other lanes' copies visible

    const float* s1 = rows1[r & 1];
    const float* s2 = rows2[r & 1];
    const int y = y0 + r - 2 * kRadius;
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      const int col = lane + j * kThreads;  // lanes read neighbouring words: no bank conflict
      float h5[kMoments] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int k = 0; k < kWindow; ++k) {
        const float u = s1[col + k], v = s2[col + k], g = kGauss[k];
        h5[0] = fmaf(g, u, h5[0]);
        h5[1] = fmaf(g, v, h5[1]);
        h5[2] = fmaf(g, u * u, h5[2]);
        h5[3] = fmaf(g, v * v, h5[3]);
        h5[4] = fmaf(g, u * v, h5[4]);
      }
      float done[kMoments];
#pragma unroll
      for (int m = 0; m < kMoments; ++m) {
        float* p = pending[j][m];
        done[m] = fmaf(kGauss[kWindow - 1], h5[m], p[0]);  // the last input row output y needs
#pragma unroll
        for (int i = 0; i < kPending - 1; ++i) p[i] = fmaf(kGauss[kPending - 1 - i], h5[m], p[i + 1]);
        p[kPending - 1] = kGauss[0] * h5[m];  // the first input row output y + 10 needs
      }
      const int x = x0 + col;
      if (r >= 2 * kRadius && x < w)
        store(plane + static_cast<size_t>(y) * w + x, done, out, d_mu1, d_s11, d_s12, training != 0);
    }
    __syncwarp();  // buffer r & 1 is refilled (with row r + 2) in the next step
  }
}
