// V10: V9 with three columns per thread and the shift applied once per element in shared memory.
// V9's row loop (bench.hot_loop counts it) is mostly FFMAs, then the products u^2, v^2, uv of the 12
// pixels it reads, the shift x - 0.5 of those pixels, shared loads, and loop, address and copy overhead
// that does not grow with the columns. Three adjacent columns read 13 pixels instead of 12 for two, so
// the products per column fall from 18 to 13 and the overhead is shared by three (the reads stay at
// about 9 per column: 4-byte words, as 3 * lane is odd on odd lanes); the shift moves to the lane that
// copied the element (4 FADDs per lane and image, on the row after the one being computed, meant to
// keep it off the x-pass's path): under 3 per column instead of 12. Both images of a row share one
// buffer and address.
// The price: 150 partial sums in registers, so far more registers a thread and fewer one-warp blocks
// per SM (each scheduler keeps its warps in its own quarter of the register file): fewer warps per
// scheduler to pick from.
// Prediction: fewer instructions per pixel than V9 at V9's issue rate; fewer warps may cost some issue
// rate. Notebook 02b measures both: kept as the lesson that the instructions saved must not cost the
// warps the issue rate depends on.
#include <cuda_pipeline.h>

#include "ssim_common.cuh"

namespace {
using namespace ssim;
constexpr int kThreads = 32;
constexpr int kColsPerThread = 3;
constexpr int kCols = kThreads * kColsPerThread;  // output columns per block
constexpr int kRows = 72;                          // output rows per strip
constexpr int kLead = 8;                           // the row buffer starts at x0 - kLead (16-byte aligned)
constexpr int kRowLen = kCols + 2 * kLead;         // 112 floats: 28 16-byte chunks per image
constexpr int kChunks = kRowLen / 4;
constexpr int kTaps = kWindow + kColsPerThread - 1;  // pixels one thread reads per row and image
constexpr int kPending = kWindow - 1;  // output rows that still wait for input rows
constexpr int kStages = 4;             // row buffers: one read, one shifted, kStages - 2 rows in flight
constexpr int kUnroll = 2;             // input rows per trip of the row loop
}  // namespace

// One strip of kRows output rows and kCols columns, specialized: interior (whole aligned chunks on both
// sides, 16-byte copies) or not, inference or training.
template <bool interior, bool training>
__device__ __forceinline__ void strip(const float* __restrict__ img1, const float* __restrict__ img2,
                                      float* __restrict__ out, float* d_mu1, float* d_s11, float* d_s12,
                                      int h, int w, float (*rows)[2][kRowLen]) {
  const int lane = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs

  // Row r of the strip is image row y0 - 5 + r; rows outside the image are zero-filled from a clamped
  // (mapped) address. The interior path copies 16 bytes per lane and image from lanes 0..27. Both
  // images of a row sit in one buffer, kRowLen floats apart: one shared address serves both.
  const int chunk = x0 - kLead + 4 * lane;  // this lane's first element in a row (interior path)
  auto load_row = [&](int r, int buf) {
    const int y = y0 - kRadius + r;
    const bool row_in = static_cast<unsigned>(y) < static_cast<unsigned>(h);
    const size_t row = static_cast<size_t>(row_in ? y : 0) * w;
    if constexpr (interior) {
      if (lane < kChunks) {
        copy_async<16>(&rows[buf][0][4 * lane], a + (row + chunk), row_in ? 16 : 0);
        copy_async<16>(&rows[buf][1][4 * lane], b + (row + chunk), row_in ? 16 : 0);
      }
    } else {
      for (int c = lane; c < kRowLen; c += kThreads) {
        const int x = x0 - kLead + c;
        const bool in = row_in && x >= 0 && x < w;
        const size_t offset = row + (in ? x : 0);
        copy_async<4>(&rows[buf][0][c], a + offset, in ? 4 : 0);
        copy_async<4>(&rows[buf][1][c], b + offset, in ? 4 : 0);
      }
    }
  };
  // x - kShift on the elements this lane copied (its own copies have landed: no barrier needed first);
  // the zero-filled padding becomes -kShift like every other pixel. The next __syncwarp publishes it.
  auto shift_row = [&](int buf) {
    if constexpr (interior) {
      if (lane < kChunks) {
        float4* q1 = reinterpret_cast<float4*>(rows[buf][0]) + lane;
        float4* q2 = reinterpret_cast<float4*>(rows[buf][1]) + lane;
        const float4 u = *q1, v = *q2;
        *q1 = make_float4(u.x - kShift, u.y - kShift, u.z - kShift, u.w - kShift);
        *q2 = make_float4(v.x - kShift, v.y - kShift, v.z - kShift, v.w - kShift);
      }
    } else {
      shift_own(rows[buf][0], lane, kThreads, kRowLen);
      shift_own(rows[buf][1], lane, kThreads, kRowLen);
    }
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
  // "at most kStages - 1 - (r' - r) newer groups pending" after the commit of row r'.
  for (int r = 0; r < kStages - 1; ++r) {
    if (r < steps) load_row(r, r);
    __pipeline_commit();
  }
  __pipeline_wait_prior(kStages - 2);  // row 0
  shift_row(0);
  __syncwarp();
  const int x = x0 + kColsPerThread * lane;  // this thread's first column
  size_t i = plane + static_cast<size_t>(y0) * w + x;  // its pixel in the next output row to write
  float* o = out + i;  // the same as a pointer: one 64-bit add per row (i itself only in training)
  // kUnroll rows per trip: within a trip the shifted sums are renamed, not moved (V9).
#pragma unroll kUnroll
  for (int r = 0; r < steps; ++r) {  // input row y0 - 5 + r, already shifted
    const int buf = r % kStages;
    // Buffer (r - 1) % kStages: every lane finished reading it before the last step's __syncwarp.
    if (r + kStages - 1 < steps) load_row(r + kStages - 1, (r + kStages - 1) % kStages);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 2);  // row r + 1 has landed
    if (r + 1 < steps) shift_row((r + 1) % kStages);

    // Column x + j, tap k is row element x + j - 5 + k = buffer element kLead - 5 + 3 * lane + j + k:
    // pixel t = j + k of the thread's 13. 3 * lane is odd on odd lanes, so the reads are 4-byte words
    // (a stride of 3 words across the warp: no bank conflicts).
    const float* p1 = rows[buf][0] + kLead - kRadius + kColsPerThread * lane;
    const float* p2 = rows[buf][1] + kLead - kRadius + kColsPerThread * lane;
    float h5[kColsPerThread][kMoments] = {};
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      const float u = p1[t], v = p2[t];
      const float val[kMoments] = {u, v, u * u, v * v, u * v};
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int k = t - j;
        if (k < 0 || k >= kWindow) continue;
#pragma unroll
        for (int m = 0; m < kMoments; ++m) h5[j][m] = fmaf(kGauss[k], val[m], h5[j][m]);
      }
    }
    float done[kColsPerThread][kMoments];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) ypass_shift(pending[j], h5[j], done[j]);
    if (r >= 2 * kRadius) {
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j)  // interior: all three inside (x + 2 < x0 + kCols <= w)
        if (interior || x + j < w) o[j] = ssim_fast(i + j, done[j], d_mu1, d_s11, d_s12, training);
      i += w;
      o += w;
    }
    __syncwarp();  // publishes row r + 1's shift; buffer r % kStages is refilled in the next step
  }
}

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_v10(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
         float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  // Whole aligned chunks in the image on both sides: true for all but the edge blocks when w % 4 == 0
  // and both images start 16-byte aligned (the stores are 4-byte words: out needs no alignment).
  const int x0 = blockIdx.x * kCols;
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 + kCols + kLead <= w;
  __shared__ __align__(16) float rows[kStages][2][kRowLen];  // row buffers, shared by the four bodies
  if (interior) {
    if (training) strip<true, true>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows);
    else strip<true, false>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows);
  } else {
    if (training) strip<false, true>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows);
    else strip<false, false>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows);
  }
}
