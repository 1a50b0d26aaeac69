// V7: V6's arithmetic with its overhead taken out, engineered on V6's SASS before it ran. ncu counts
// V6's thread-instructions per output pixel, less than half of them FFMAs (notebook 02b's profiler
// table). The SASS shows where the rest go:
//  * register moves (the hot-loop table of notebook 02b counts them): the partial sums shifted one
//    register per input row (p[i] = p[i + 1] + ...) and ptxas, having scheduled the new sums into fresh
//    registers, copied them back at the end of the loop. Here each output row's sum stays in one slot of
//    a ring, (row mod 10), and the row loop is unrolled 10 times so every slot index is a constant: no
//    moves for the sums;
//  * IEEE divisions (a dozen instructions and a slow-path branch each): one approximate reciprocal;
//  * a per-element copy loop with bounds tests and shared stores of zeros: rows now arrive as 16-byte
//    cp.async copies from an aligned window x0 - 8 .. x0 + 72 (20 lanes x 2 images), the padding
//    zero-filled by cp.async itself (edge blocks and widths not a multiple of 4 keep a per-element path,
//    zero-filled the same way); adjacent output columns are written as one 8-byte store;
//  * ptxas is held to 128 registers (16 one-warp blocks per SM instead of V6's 12; the few spills
//    are a handful of local accesses per row).
// Prediction (SASS of the unrolled loop): the instructions per output pixel fall by the moves, the
// division and the copy overhead removed, and at V6's issue rate the time falls in proportion; a little
// more if the extra warps raise the issue rate. Notebook 02b computes the numbers and measures them.
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

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
extern "C" __global__ void __maxnreg__(128)
ssim_v7(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
        float* d_mu1, float* d_s11, float* d_s12, int h, int w, int training) {
  __shared__ __align__(16) float rows1[kStages][kRowLen];
  __shared__ __align__(16) float rows2[kStages][kRowLen];
  const int lane = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int steps = min(kRows, h - y0) + 2 * kRadius;  // input rows this strip needs
  // Whole aligned chunks in the image on both sides: true for all but the edge blocks when w % 4 == 0
  // (and the arrays start 16-byte aligned, as CuPy allocates them; a view at an odd offset takes the
  // per-element path).
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2) |
                         reinterpret_cast<size_t>(out)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 + kCols + kLead <= w;

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
        if (interior) {  // both columns inside, and i even (w % 4 == 0): one aligned 8-byte store
          float2 s;
          s.x = ssim_fast(i, done[0], d_mu1, d_s11, d_s12, training != 0);
          s.y = ssim_fast(i + 1, done[1], d_mu1, d_s11, d_s12, training != 0);
          *reinterpret_cast<float2*>(out + i) = s;
        } else {
#pragma unroll
          for (int j = 0; j < kColsPerThread; ++j)
            if (x + j < w) out[i + j] = ssim_fast(i + j, done[j], d_mu1, d_s11, d_s12, training != 0);
        }
      }
      __syncwarp();  // buffer q % kStages is refilled (with row r + kStages) in the next step
    }
  }
}
