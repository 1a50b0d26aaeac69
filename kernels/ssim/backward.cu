// B1: the backward of the mean-SSIM loss in CUDA C++, for dL/dimg1 from the three derivative maps a
// training forward (V11) stores. With L = g * sum(map) (g = 1 / pixels for the mean, times whatever
// multiplies the loss), dL/dmap is the constant g, so
//   dL/dimg1 = g * (G*dm_dmu1 + 2 img1 G*dm_dsigma1_sq + img2 G*dm_dsigma12),
// G the zero-padded Gaussian blur (symmetric: its own adjoint). The constant is applied once at the end
// and no gradient map is read. The structure is V11's: one warp per block, two columns per thread, a
// strip of kRows output rows; the three map rows arrive by cp.async into a ring of row buffers, the
// x-pass reads them from shared memory, the y-pass keeps shifting partial sums in registers, and each
// finished row is combined with the two images' pixels and stored. Those pixels travel in the same
// cp.async groups as the map rows, kStages - 1 rows ahead, so no load waits on DRAM inside the loop.
// Prediction: fewer FFMAs than V11 (three blurred maps instead of four moments, and no products), so the
// kernel should be bound by its DRAM traffic: three maps and two images read, one gradient written.
#include <cuda_pipeline.h>

#include "ssim_common.cuh"

namespace {
using namespace ssim;
constexpr int kThreads = 32;
constexpr int kColsPerThread = 2;
constexpr int kCols = kThreads * kColsPerThread;  // output columns per block
constexpr int kRows = 96;                          // output rows per strip (the fastest of 36 to 144 in a sweep)
constexpr int kLead = 8;                           // the row buffer starts at x0 - kLead (16-byte aligned)
constexpr int kRowLen = kCols + 2 * kLead;         // 80 floats: 20 16-byte chunks per map
constexpr int kMaps = 3;                           // dm/dmu1, dm/dsigma1^2, dm/dsigma12
constexpr int kPending = kWindow - 1;              // output rows that still wait for input rows
constexpr int kStages = 3;                         // row buffers: kStages - 1 rows in flight (3 to 6 swept)
constexpr int kUnroll = 2;                         // input rows per trip of the row loop
}  // namespace

template <bool interior>
__device__ __forceinline__ void strip(const float* __restrict__ img1, const float* __restrict__ img2,
                                      const float* const* maps, float* __restrict__ dimg1, int h, int w,
                                      float g, float (*rows)[kStages][kRowLen], float (*pix)[kStages][kCols]) {
  const int lane = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs

  // Row r of the strip is image row y0 - 5 + r of each map; outside the image cp.async zero-fills from
  // a clamped (mapped) address, as in copy_row.
  // With map row r comes the images' row y0 + r - 2 * kRadius: the output row of step r.
  auto load_row = [&](int r, int buf) {
    const int y = y0 - kRadius + r, yo = y - kRadius;
    const bool row_in = y >= 0 && y < h;
    if (yo >= y0) {  // yo < h: row r is one this strip reads, so its output row is one it writes
      const size_t orow = plane + static_cast<size_t>(yo) * w;
      if (interior) {
        if (lane < kCols / 4) {
          copy_async<16>(&pix[0][buf][4 * lane], img1 + orow + x0 + 4 * lane, 16);
          copy_async<16>(&pix[1][buf][4 * lane], img2 + orow + x0 + 4 * lane, 16);
        }
      } else {
        for (int c = lane; c < kCols; c += kThreads) {
          const bool in = x0 + c < w;
          const size_t offset = orow + (in ? x0 + c : 0);
          copy_async<4>(&pix[0][buf][c], img1 + offset, in ? 4 : 0);
          copy_async<4>(&pix[1][buf][c], img2 + offset, in ? 4 : 0);
        }
      }
    }
    const size_t row = plane + static_cast<size_t>(row_in ? y : 0) * w;
    if (interior) {
      if (lane < kRowLen / 4) {
        const size_t offset = row + x0 - kLead + 4 * lane;
#pragma unroll
        for (int m = 0; m < kMaps; ++m) copy_async<16>(&rows[m][buf][4 * lane], maps[m] + offset, row_in ? 16 : 0);
      }
    } else {
      for (int c = lane; c < kRowLen; c += kThreads) {
        const int x = x0 - kLead + c;
        const bool in = row_in && x >= 0 && x < w;
        const size_t offset = row + (in ? x : 0);
#pragma unroll
        for (int m = 0; m < kMaps; ++m) copy_async<4>(&rows[m][buf][c], maps[m] + offset, in ? 4 : 0);
      }
    }
  };

  float pending[kColsPerThread][kMaps][kPending];
#pragma unroll
  for (int j = 0; j < kColsPerThread; ++j)
#pragma unroll
    for (int m = 0; m < kMaps; ++m)
#pragma unroll
      for (int i = 0; i < kPending; ++i) pending[j][m][i] = 0.f;

  for (int r = 0; r < kStages - 1; ++r) {  // one commit per row, empty ones past the end too
    if (r < steps) load_row(r, r);
    __pipeline_commit();
  }
  const int x = x0 + kColsPerThread * lane;  // this thread's first column
  size_t out_row = plane + static_cast<size_t>(y0) * w;
#pragma unroll kUnroll
  for (int r = 0; r < steps; ++r) {
    const int buf = r % kStages;
    if (r + kStages - 1 < steps) load_row(r + kStages - 1, (r + kStages - 1) % kStages);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);
    __syncwarp();

    // x-pass: pixel t of the 14 read from element 2 * lane + 2 is tap t - 1 of column 0, t - 2 of column 1.
    float hx[kColsPerThread][kMaps] = {};
    const float2* p[kMaps];
#pragma unroll
    for (int m = 0; m < kMaps; ++m) p[m] = reinterpret_cast<const float2*>(rows[m][buf]) + lane + 1;
    xpass_maps(p, hx);
    // y-pass: shifting partial sums; done[j][m] completes output row (input row - 5).
    float done[kColsPerThread][kMaps];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) ypass_shift(pending[j], hx[j], done[j]);
    if (r >= 2 * kRadius) {
      const size_t i = out_row + x;
      out_row += w;
      const float2 a = reinterpret_cast<const float2*>(pix[0][buf])[lane];
      const float2 b = reinterpret_cast<const float2*>(pix[1][buf])[lane];
      if constexpr (interior) {  // both columns inside and i even: one 8-byte store
        *reinterpret_cast<float2*>(dimg1 + i) =
            make_float2(gradient(g, a.x, b.x, done[0]), gradient(g, a.y, b.y, done[1]));
      } else {
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j)
          if (x + j < w) dimg1[i + j] = gradient(g, j ? a.y : a.x, j ? b.y : b.x, done[j]);
      }
    }
    __syncwarp();  // buffer r % kStages is refilled in the next step
  }
}

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. Every array is (planes, h, w)
// float32; *g is dL/dmap, the same for every pixel (1 / pixels for the mean loss), read on the device so
// that a training loop hands it over without waiting for the GPU.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_backward_b1(const float* __restrict__ img1, const float* __restrict__ img2, const float* __restrict__ d_mu1,
                 const float* __restrict__ d_s11, const float* __restrict__ d_s12, float* __restrict__ dimg1, int h,
                 int w, const float* __restrict__ g) {
  const int x0 = blockIdx.x * kCols;
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2) |
                         reinterpret_cast<size_t>(d_mu1) | reinterpret_cast<size_t>(d_s11) |
                         reinterpret_cast<size_t>(d_s12) | reinterpret_cast<size_t>(dimg1)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 + kCols + kLead <= w;
  __shared__ __align__(16) float rows[kMaps][kStages][kRowLen];
  __shared__ __align__(16) float pix[2][kStages][kCols];  // the two images' pixels of the output rows
  const float* maps[kMaps] = {d_mu1, d_s11, d_s12};
  if (interior) strip<true>(img1, img2, maps, dimg1, h, w, *g, rows, pix);
  else strip<false>(img1, img2, maps, dimg1, h, w, *g, rows, pix);
}
