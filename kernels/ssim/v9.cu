// V9: V8's specialized bodies with a loop small enough to stay in the instruction cache. ncu showed
// V7 and V8 issuing fewer instructions than V6 but stalled on instruction fetch ("no_instruction"),
// where V6 hardly was: their row loop, unrolled 10 times for the ring of sums, holds several times V6's
// hot code (notebook 02b's hot-loop table gives the sizes). V9 goes back to V6's shifting partial sums
// and unrolls the row loop twice: in the SASS the register moves of a one-row loop drop to about one
// per row (ptxas renames the shifted sums across the pair), and the interior inference loop fits the
// cache again. No register cap (V7's and V8's sweeps: capping at 128 cost a few percent).
// Prediction: V8's instruction count without its spills, at V6's issue rate (notebook 02b computes it).
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
}  // namespace

// One strip of kRows output rows and kCols columns, specialized: interior (whole aligned chunks on both
// sides, 16-byte copies and 8-byte stores) or not, inference or training.
template <bool interior, bool training>
__device__ __forceinline__ void strip(const float* __restrict__ img1, const float* __restrict__ img2,
                                      float* __restrict__ out, float* d_mu1, float* d_s11, float* d_s12,
                                      int h, int w, float (*rows1)[kRowLen], float (*rows2)[kRowLen]) {
  const int lane = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs

  // Row r of the strip is image row y0 - 5 + r (the interior path: lanes 0..19 copy 16 bytes each).
  auto load_row = [&](int r, int buf) {
    copy_row<kRowLen, kLead, kThreads>(rows1, rows2, buf, a, b, y0 - kRadius + r, h, w, x0, lane, interior);
  };

  // pending[j][m][i]: moment m of column j for output row (current input row - 5 + i), rows above the
  // current one summed so far (V6's shifting partial sums).
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
    float h5[kColsPerThread][kMoments] = {};
    xpass_pair(p1, p2, h5);
    float done[kColsPerThread][kMoments];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) ypass_shift(pending[j], h5[j], done[j]);
    if (r >= 2 * kRadius) {
      const size_t i = out_row + x;
      out_row += w;
      store_pair(i, x, w, done, out, d_mu1, d_s11, d_s12, training, interior);
    }
    __syncwarp();  // buffer r % kStages is refilled (with row r + kStages) in the next step
  }
}

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v9(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
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
    if (training) strip<true, true>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2);
    else strip<true, false>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2);
  } else {
    if (training) strip<false, true>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2);
    else strip<false, false>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2);
  }
}
