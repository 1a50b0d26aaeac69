// V6: V5 with each thread on two *adjacent* columns (2 * lane, 2 * lane + 1) instead of lane and
// lane + 32. Their x-windows overlap in 10 of 11 pixels, so the thread reads 12 pixels per image (six
// 8-byte loads, not 22 scalar ones) and squares/multiplies each pixel once (36 FMULs, not 66); the
// 110 FFMAs of the two x-passes stay. Should cut the x-pass from about 220 to 158 instructions (+24
// subtractions: the shift moves from the shared row into registers, once per pixel read).
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
ssim_v6(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
          float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  // 8-byte aligned rows (kRowLen is even) for the float2 reads below.
  __shared__ __align__(16) float rows1[kStages][kRowLen];
  __shared__ __align__(16) float rows2[kStages][kRowLen];
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
    __syncwarp();  // one warp per block: a warp barrier makes the other lanes' copies visible

    const float* s1 = rows1[buf];
    const float* s2 = rows2[buf];
    const int y = y0 + r - 2 * kRadius;
    // h5[j][m]: x-pass of moment m at column 2 * lane + j. Pixel i of the 12 this thread reads is tap
    // i of column 0 and tap i - 1 of column 1; the unrolled conditions on i are resolved at compile time.
    float h5[kColsPerThread][kMoments] = {};
    const float2* p1 = reinterpret_cast<const float2*>(s1) + lane;
    const float2* p2 = reinterpret_cast<const float2*>(s2) + lane;
#pragma unroll
    for (int pair = 0; pair < (kWindow + 1) / 2; ++pair) {
      const float2 u2 = p1[pair], v2 = p2[pair];  // lanes read neighbouring 8-byte words: no conflict
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * pair + e;
        // Shifted here (common.SHIFT), once per pixel in registers: cheaper than V5's
        // read-modify-write of the shared row, whose latency sat on every row's critical path.
        const float u = (e ? u2.y : u2.x) - kShift, v = (e ? v2.y : v2.x) - kShift;
        const float val[kMoments] = {u, v, u * u, v * v, u * v};
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) {
          const int k = i - j;
          if (k < 0 || k >= kWindow) continue;
#pragma unroll
          for (int m = 0; m < kMoments; ++m) h5[j][m] = fmaf(kGauss[k], val[m], h5[j][m]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      float done[kMoments];
      ypass_shift(pending[j], h5[j], done);
      const int x = x0 + 2 * lane + j;
      if (r >= 2 * kRadius && x < w)
        store(plane + static_cast<size_t>(y) * w + x, done, out, d_mu1, d_s11, d_s12, training != 0);
    }
    __syncwarp();  // buffer r % kStages is refilled (with row r + kStages) in the next step
  }
}
