// V3: the V3-1 pipeline (128 threads, one column each, a strip of 64 rows, the last 11 x-pass rows of
// every moment rotated through registers) with branch-free loads: cp.async with its zero-fill argument
// writes the zero padding, so loading a row has no bounds branch, and the next row is fetched while the
// current one is computed (two shared row buffers).
// The worklog passed the out-of-bounds address itself (only the value was zeroed); we copy 0 bytes from
// a valid address instead, which keeps compute-sanitizer clean at the cost of one select.
#include <cuda_pipeline.h>

#include "ssim_common.cuh"

namespace {
using namespace ssim;
constexpr int kCols = 128;  // threads per block = output columns per block
constexpr int kRows = 64;   // output rows per strip
constexpr int kRowLen = kCols + 2 * kRadius;
}  // namespace

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kCols threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __launch_bounds__(kCols)
ssim_v3(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
        float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  __shared__ float rows1[2][kRowLen];
  __shared__ float rows2[2][kRowLen];
  const int tx = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs

  auto load_row = [&](int r, int buf) {
    const int y = y0 - kRadius + r;
    for (int c = tx; c < kRowLen; c += kCols) {
      const int x = x0 - kRadius + c;
      const bool inside = y >= 0 && y < h && x >= 0 && x < w;
      const size_t offset = inside ? static_cast<size_t>(y) * w + x : 0;
      __pipeline_memcpy_async(&rows1[buf][c], a + offset, 4, inside ? 0 : 4);
      __pipeline_memcpy_async(&rows2[buf][c], b + offset, 4, inside ? 0 : 4);
    }
    __pipeline_commit();
  };

  float q[kMoments][kWindow];  // constant indices after unrolling: registers
#pragma unroll
  for (int m = 0; m < kMoments; ++m)
#pragma unroll
    for (int k = 0; k < kWindow; ++k) q[m][k] = 0.f;

  load_row(0, 0);
  for (int r = 0; r < steps; ++r) {
    if (r + 1 < steps) {
      load_row(r + 1, (r + 1) & 1);
      __pipeline_wait_prior(1);  // row r has landed; row r + 1 may still be in flight
    } else {
      __pipeline_wait_prior(0);
    }
    shift_own(rows1[r & 1], tx, kCols, kRowLen);  // only this thread's own copies: no barrier needed first
    shift_own(rows2[r & 1], tx, kCols, kRowLen);
    __syncthreads();

    const float* s1 = rows1[r & 1];
    const float* s2 = rows2[r & 1];
    float h5[kMoments] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kWindow; ++k) {
      const float u = s1[tx + k], v = s2[tx + k], g = kGauss[k];
      h5[0] = fmaf(g, u, h5[0]);
      h5[1] = fmaf(g, v, h5[1]);
      h5[2] = fmaf(g, u * u, h5[2]);
      h5[3] = fmaf(g, v * v, h5[3]);
      h5[4] = fmaf(g, u * v, h5[4]);
    }
#pragma unroll
    for (int m = 0; m < kMoments; ++m) {
#pragma unroll
      for (int k = 0; k < kWindow - 1; ++k) q[m][k] = q[m][k + 1];
      q[m][kWindow - 1] = h5[m];
    }

    const int y = y0 + r - 2 * kRadius, x = x0 + tx;
    if (r >= 2 * kRadius && x < w) {
      float mom[kMoments];
#pragma unroll
      for (int m = 0; m < kMoments; ++m) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < kWindow; ++k) s = fmaf(kGauss[k], q[m][k], s);
        mom[m] = s;
      }
      store(plane + static_cast<size_t>(y) * w + x, mom, out, d_mu1, d_s11, d_s12, training != 0);
    }
    __syncthreads();  // buffer r & 1 is refilled (with row r + 2) in the next step
  }
}
