// V8: V7 with its hot loop cleared of cold code. V7's row loop is unrolled 10 times, and in each of the
// 10 copies the edge-block copy loop, the per-column stores and the training stores sit between the hot
// instructions. V7 gained less than its instruction count promised: the guess is instruction fetch
// (ncu: "no_instruction" stalls), the hot path spread over more code than the instruction caches hold.
// Here the strip is a template on (interior block, training) and the kernel picks one of the four at
// the top, so the loop an interior inference block runs holds only its own instructions.
// Prediction: the instruction count per pixel stays, the issue rate recovers to about V6's, and the
// time falls with it; if it does not move, fetch was not the cause (notebook 02b measures both).
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
constexpr int kSlots = kWindow - 1;  // partial sums per moment and column (the row loop's unroll)
constexpr int kStages = 5;           // row buffers, kStages - 1 rows in flight; divides kSlots
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

  // acc[j][m][s]: moment m of column j for the output row whose index is s modulo kSlots. At input row
  // R the outputs R - 5 .. R + 5 receive a tap: R - 5 completes and R + 5 starts, both in slot (R + 5) %
  // kSlots, so every sum stays in its register (V6 shifted its partial sums one register per row, and
  // ptxas paid for that with register moves, 57 per row in notebook 02b's hot-loop table). The row loop
  // is unrolled kSlots times so that every slot index is a compile-time constant.
  float acc[kColsPerThread][kMoments][kSlots];
#pragma unroll
  for (int j = 0; j < kColsPerThread; ++j)
#pragma unroll
    for (int m = 0; m < kMoments; ++m)
#pragma unroll
      for (int s = 0; s < kSlots; ++s) acc[j][m][s] = 0.f;

  // One commit per row, empty ones past the end too, so "row r has landed" is always
  // "at most kStages - 1 newer groups pending".
  for (int r = 0; r < kStages - 1; ++r) {
    if (r < steps) load_row(r, r);
    __pipeline_commit();
  }
  const int x = x0 + kColsPerThread * lane;  // this thread's first column
  size_t out_row = plane + static_cast<size_t>(y0) * w;  // the next output row to write
  for (int r0 = 0; r0 < steps; r0 += kSlots) {
#pragma unroll
    for (int q = 0; q < kSlots; ++q) {
      const int r = r0 + q;  // input row y0 - 5 + r; r0 % kSlots == 0 and kSlots % kStages == 0
      if (r >= steps) break;
      constexpr int kAhead = kStages - 1;
      if (r + kAhead < steps) load_row(r + kAhead, (q + kAhead) % kStages);
      __pipeline_commit();
      __pipeline_wait_prior(kStages - 1);
      __syncwarp();  // one warp per block: a warp barrier makes the other lanes' copies visible

      // Column x + j, tap k is row element x + j - 5 + k = buffer element kLead - 5 + 2 * lane + j + k.
      // The thread reads the 7 float2 words from element 2 * lane + 2 (aligned) and uses elements
      // 1..12: pixel t of those 14 is tap t - 1 of column 0 and tap t - 2 of column 1.
      const float2* p1 = reinterpret_cast<const float2*>(rows1[q % kStages]) + lane + 1;
      const float2* p2 = reinterpret_cast<const float2*>(rows2[q % kStages]) + lane + 1;
      float h5[kColsPerThread][kMoments] = {};
      xpass_pair(p1, p2, h5);
      // Output row (input row - 5) + i gets tap 10 - i; in slot terms: input-row index r (output row
      // r - 10 relative to the strip) completes slot q and starts it again.
      float done[kColsPerThread][kMoments];
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) ypass_ring(acc[j], q, h5[j], done[j]);
      if (r >= 2 * kRadius) {
        const size_t i = out_row + x;
        out_row += w;
        store_pair(i, x, w, done, out, d_mu1, d_s11, d_s12, training, interior);
      }
      __syncwarp();  // buffer q % kStages is refilled (with row r + kStages) in the next step
    }
  }
}

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __maxnreg__(128)
ssim_v8(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
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
