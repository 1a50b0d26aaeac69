// V13: V11 and a fused mean. The SSIM value most callers want is one number, the mean of the map;
// V11 writes the map (4 bytes a pixel, a third of its DRAM traffic) and a second pass reads it back for
// the mean. V13's second kernel, ssim_v13_mean, writes no map: each thread adds its SSIM values (the
// two columns of a row in float, then into a double), the warp sums with shuffles, and lane 0 adds the
// block's sum to the plane's double accumulator (atomicAdd: 1 per block).
// With valid != 0 it counts only the pixels of the valid map (rows and columns kRadius .. size -
// kRadius - 1). ssim_v13 (map and training) is V11; both kernels share the strip below, specialized by
// mode, and a separate entry point keeps each kernel's code to the bodies it runs.
// A third kernel, ssim_v13_train_mean, is the forward of a training step on the mean: the derivative
// maps and the sum, no map, so neither the map's stores nor a second pass that reads it back remain.
// Prediction: V11's compute time (it is issue-bound, not DRAM-bound) less the map's two store
// instructions per row, plus about 3 per row for the sum: about V11's map-only time, and faster than
// V11 + a separate mean by that mean's time (a reduction that reads the whole map back).
#include <cuda_pipeline.h>

#include "ssim_common.cuh"

namespace {
using namespace ssim;
constexpr int kThreads = 32;
constexpr int kColsPerThread = 2;
constexpr int kCols = kThreads * kColsPerThread;  // output columns per block
constexpr int kRows = 72;                          // output rows per strip
constexpr int kLead = 8;                           // the row buffer starts at x0 - kLead (16-byte aligned)
constexpr int kRowLen = kCols + 2 * kLead;         // 80 floats: 20 16-byte chunks per image
constexpr int kPending = kWindow - 1;  // output rows that still wait for input rows
constexpr int kStages = 4;             // row buffers: kStages - 1 rows in flight while one is used
constexpr int kUnroll = 2;             // input rows per trip of the row loop
// What a strip produces: the map; the map and its derivatives; only the sum of the map (or of the
// valid map) added to sums[plane]; that sum and the derivatives (of every pixel: the backward reads them).
constexpr int kMap = 0;
constexpr int kTraining = 1;
constexpr int kMean = 2;
constexpr int kTrainMean = 3;
}  // namespace

// One strip of kRows output rows and kCols columns, specialized: interior (whole aligned chunks on both
// sides, 16-byte copies and 8-byte stores) or not, and by mode.
template <bool interior, int mode>
__device__ __forceinline__ void strip(const float* __restrict__ img1, const float* __restrict__ img2,
                                      float* __restrict__ out, float* d_mu1, float* d_s11, float* d_s12,
                                      int h, int w, float (*rows1)[kRowLen], float (*rows2)[kRowLen],
                                      double* sums, bool valid) {
  constexpr bool training = mode == kTraining || mode == kTrainMean;
  constexpr bool summing = mode == kMean || mode == kTrainMean;
  const int lane = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs
  double total = 0.0;  // summing: this thread's SSIM values

  // Row r of the strip is image row y0 - 5 + r (the interior path: lanes 0..19 copy 16 bytes each).
  auto load_row = [&](int r, int buf) {
    copy_row<kRowLen, kLead, kThreads>(rows1, rows2, buf, a, b, y0 - kRadius + r, h, w, x0, lane, interior);
  };

  // pending[j][m][i]: moment m of column j for output row (current input row - 5 + i), rows above the
  // current one summed so far (V6's shifting partial sums).
  float pending[kColsPerThread][kMoments4][kPending];
#pragma unroll
  for (int j = 0; j < kColsPerThread; ++j)
#pragma unroll
    for (int m = 0; m < kMoments4; ++m)
#pragma unroll
      for (int i = 0; i < kPending; ++i) pending[j][m][i] = 0.f;

  // One commit per row, empty ones past the end too, so "row r has landed" is always
  // "at most kStages - 1 newer groups pending".
  for (int r = 0; r < kStages - 1; ++r) {
    if (r < steps) load_row(r, r);
    __pipeline_commit();
  }
  const int x = x0 + kColsPerThread * lane;  // this thread's first column
  size_t out_row = plane + static_cast<size_t>(y0) * w;  // the next output row to write
  // kUnroll rows per trip: within a trip the shifted sums are renamed, not moved; at the loop's end
  // ptxas moves them back into place, once per trip instead of once per row.
#pragma unroll kUnroll
  for (int r = 0; r < steps; ++r) {  // input row y0 - 5 + r
    const int buf = r % kStages;
    if (r + kStages - 1 < steps) load_row(r + kStages - 1, (r + kStages - 1) % kStages);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);
    __syncwarp();  // one warp per block: a warp barrier makes the other lanes' copies visible

    // Column x + j, tap k is row element x + j - 5 + k = buffer element kLead - 5 + 2 * lane + j + k.
    // The thread reads the 7 float2 words from element 2 * lane + 2 (aligned) and uses elements
    // 1..12: pixel t of those 14 is tap t - 1 of column 0 and tap t - 2 of column 1.
    const float2* p1 = reinterpret_cast<const float2*>(rows1[buf]) + lane + 1;
    const float2* p2 = reinterpret_cast<const float2*>(rows2[buf]) + lane + 1;
    float h5[kColsPerThread][kMoments4] = {};
#pragma unroll
    for (int pair = 0; pair < 7; ++pair) {
      const float2 u2 = p1[pair], v2 = p2[pair];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 2 * pair + e;
        if (t < 1 || t > kWindow + 1) continue;
        const float u = (e ? u2.y : u2.x) - kShift, v = (e ? v2.y : v2.x) - kShift;  // common.SHIFT
        const float val[kMoments4] = {u, v, fmaf(v, v, u * u), u * v};
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) {
          const int k = t - 1 - j;
          if (k < 0 || k >= kWindow) continue;
#pragma unroll
          for (int m = 0; m < kMoments4; ++m) h5[j][m] = fmaf(kGauss[k], val[m], h5[j][m]);
        }
      }
    }
    float done[kColsPerThread][kMoments4];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j)
#pragma unroll
      for (int m = 0; m < kMoments4; ++m) {
        float* p = pending[j][m];
        done[j][m] = fmaf(kGauss[kWindow - 1], h5[j][m], p[0]);  // the last input row output y needs
#pragma unroll
        for (int i = 0; i < kPending - 1; ++i) p[i] = fmaf(kGauss[kPending - 1 - i], h5[j][m], p[i + 1]);
        p[kPending - 1] = kGauss[0] * h5[j][m];  // the first input row output y + 10 needs
      }
    if (r >= 2 * kRadius) {
      const size_t i = out_row + x;
      out_row += w;
      if constexpr (summing) {
        // Interior blocks' columns lie in kLead .. w - kLead - 1, inside the valid map too.
        const int y = y0 + r - 2 * kRadius;
        const bool row_counts = !valid || (y >= kRadius && y < h - kRadius);
        if (training || row_counts) {
          float s = 0.f;
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j) {
            const bool counts = row_counts && (interior || !valid || (x + j >= kRadius && x + j < w - kRadius));
            if (interior || x + j < w) {
              if (training) {  // every pixel's derivatives, the counted ones' values
                const float v = ssim_fast4(i + j, done[j], d_mu1, d_s11, d_s12, true);
                if (counts) s += v;
              } else if (counts) {
                s += ssim_fast4(i + j, done[j], d_mu1, d_s11, d_s12, false);
              }
            }
          }
          total += s;
        }
      } else if constexpr (interior) {  // both columns inside, and i even (w % 4 == 0): one aligned 8-byte store
        float2 s;
        s.x = ssim_fast4(i, done[0], d_mu1, d_s11, d_s12, training);
        s.y = ssim_fast4(i + 1, done[1], d_mu1, d_s11, d_s12, training);
        *reinterpret_cast<float2*>(out + i) = s;
      } else {
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j)
          if (x + j < w) out[i + j] = ssim_fast4(i + j, done[j], d_mu1, d_s11, d_s12, training);
      }
    }
    __syncwarp();  // buffer r % kStages is refilled (with row r + kStages) in the next step
  }
  if constexpr (summing) {  // the warp's sum, then one atomic add per block
#pragma unroll
    for (int d = kThreads / 2; d > 0; d /= 2) total += __shfl_down_sync(0xffffffffu, total, d);
    if (lane == 0) atomicAdd(sums + blockIdx.z, total);
  }
}

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v13(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
         float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  // Whole aligned chunks in the image on both sides: true for all but the edge blocks when w % 4 == 0
  // (and the arrays start 16-byte aligned, as CuPy allocates them; a view at an odd offset takes the
  // per-element path).
  const int x0 = blockIdx.x * kCols;
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2) |
                         reinterpret_cast<size_t>(out)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 + kCols + kLead <= w;
  __shared__ __align__(16) float rows1[kStages][kRowLen];  // row buffers, shared by the four bodies
  __shared__ __align__(16) float rows2[kStages][kRowLen];
  if (interior) {
    if (training) strip<true, kTraining>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, nullptr, false);
    else strip<true, kMap>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, nullptr, false);
  } else {
    if (training) strip<false, kTraining>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, nullptr, false);
    else strip<false, kMap>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, nullptr, false);
  }
}

// The same grid: adds each block's SSIM values (valid != 0: those of the valid map) to sums[plane], an
// array of planes doubles the caller zeroes; writes no map.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v13_mean(const float* __restrict__ img1, const float* __restrict__ img2, double* sums, int h, int w,
              int valid) {
  const int x0 = blockIdx.x * kCols;
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 + kCols + kLead <= w;
  __shared__ __align__(16) float rows1[kStages][kRowLen];
  __shared__ __align__(16) float rows2[kStages][kRowLen];
  if (interior) strip<true, kMean>(img1, img2, nullptr, nullptr, nullptr, nullptr, h, w, rows1, rows2, sums, valid);
  else strip<false, kMean>(img1, img2, nullptr, nullptr, nullptr, nullptr, h, w, rows1, rows2, sums, valid);
}

// The same grid: adds each block's SSIM values (valid != 0: those of the valid map) to sums[plane], as
// ssim_v13_mean, and writes the three derivative maps of every pixel, as ssim_v13 in training; no map.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v13_train_mean(const float* __restrict__ img1, const float* __restrict__ img2, float* d_mu1, float* d_s11,
                    float* d_s12, double* sums, int h, int w, int valid) {
  const int x0 = blockIdx.x * kCols;
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 + kCols + kLead <= w;
  __shared__ __align__(16) float rows1[kStages][kRowLen];
  __shared__ __align__(16) float rows2[kStages][kRowLen];
  if (interior) strip<true, kTrainMean>(img1, img2, nullptr, d_mu1, d_s11, d_s12, h, w, rows1, rows2, sums, valid);
  else strip<false, kTrainMean>(img1, img2, nullptr, d_mu1, d_s11, d_s12, h, w, rows1, rows2, sums, valid);
}
