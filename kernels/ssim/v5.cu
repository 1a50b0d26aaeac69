// V5: V4 with a deeper copy pipeline. V4 (one warp per block, and registers enough to allow few warps per SM)
// fetched one row ahead, so each row's DRAM latency had to hide behind one row of work of few warps.
// Here kStages row buffers keep kStages - 1 rows in flight; nothing else changes.
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
constexpr int kStages = 4;             // row buffers: kStages - 1 rows in flight while one is used
}  // namespace

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v5(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
          float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  __shared__ float rows1[kStages][kRowLen];
  __shared__ float rows2[kStages][kRowLen];
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
      if (y >= 0 && y < h && x >= 0 && x < w) {
        const size_t offset = static_cast<size_t>(y) * w + x;
        __pipeline_memcpy_async(&rows1[buf][c], a + offset, 4);
        __pipeline_memcpy_async(&rows2[buf][c], b + offset, 4);
      } else {
        rows1[buf][c] = 0.f;  // visible to the other lanes after the next __syncwarp
        rows2[buf][c] = 0.f;
      }
    }
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

  // One commit per row, empty ones past the end too, so "row r has landed" is always
  // "at most kStages - 1 newer groups pending".
  for (int r = 0; r < kStages - 1; ++r) {
    if (r < steps) load_row(r, r);
    __pipeline_commit();
  }
  for (int r = 0; r < steps; ++r) {
    const int buf = r % kStages;
    if (r + kStages - 1 < steps) load_row(r + kStages - 1, (r + kStages - 1) % kStages);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);
    shift_own(rows1[buf], lane, kThreads, kRowLen);  // only this thread's own copies: no barrier needed first
    shift_own(rows2[buf], lane, kThreads, kRowLen);
    __syncwarp();  // one warp per block: a warp barrier makes the other lanes' copies visible

    const float* s1 = rows1[buf];
    const float* s2 = rows2[buf];
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
    __syncwarp();  // buffer r % kStages is refilled (with row r + kStages) in the next step
  }
}
