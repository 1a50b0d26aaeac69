// V14: V12 with the product step one row ahead. ncu on V12: fewer instructions than V11 but a lower
// issue rate and short_scoreboard stalls: each row begins with shared loads, the products, shared
// stores and a warp barrier, and only then can the x-pass load its 12 float4s and the FFMAs start.
// V14 double-buffers the products (even/odd[2]) and forms those of row r + 1 in step r, after row r's
// x-pass loads and beside its y-pass: the x-pass of row r reads products stored one step earlier,
// behind the barrier at the top of the step, and the pair step's loads and stores overlap independent
// FFMAs. One warp barrier per row instead of two; the wait is for row r + 1 (kStages - 2 rows in flight
// behind it instead of kStages - 1).
// Prediction: V12's instruction count at V11's issue rate. If the cap of 128 registers spills in the
// inference loop (the x-pass's loads now live beside the pair step's), or the issue rate stays at V12's,
// it is V12 again. Edge blocks (2 of 60 block columns at 3840 wide) run one row per trip: unrolled, their
// bodies spilled beyond the 128 bytes the tests allow a capped kernel.
// Notebook 02b measures it and reads ncu's stalls: kept as the lesson that the short-scoreboard stall
// was not the chain at the head of the row but the x-pass's own 16-byte loads feeding its FFMAs.
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
constexpr int kPairs = 38;  // pixel pairs of a row the x-pass reads: buffer elements 2 .. 77
static_assert(kThreads < kPairs && kPairs <= 2 * kThreads, "the pair step gives each lane one or two pairs");
}  // namespace

// The four blurred quantities of one shifted pixel pair (u, v): u, v, u*u + v*v, u*v.
__device__ __forceinline__ float4 moments(float u, float v) {
  return make_float4(u, v, fmaf(v, v, u * u), u * v);
}

// One strip of kRows output rows and kCols columns, specialized: interior (whole aligned chunks on both
// sides, 16-byte copies and 8-byte stores) or not, inference or training.
template <bool interior, bool training>
__device__ __forceinline__ void strip(const float* __restrict__ img1, const float* __restrict__ img2,
                                      float* __restrict__ out, float* d_mu1, float* d_s11, float* d_s12,
                                      int h, int w, float (*rows1)[kRowLen], float (*rows2)[kRowLen],
                                      float4 (*even)[kPairs], float4 (*odd)[kPairs]) {
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
  float pending[kColsPerThread][kMoments4][kPending];
#pragma unroll
  for (int j = 0; j < kColsPerThread; ++j)
#pragma unroll
    for (int m = 0; m < kMoments4; ++m)
#pragma unroll
      for (int i = 0; i < kPending; ++i) pending[j][m][i] = 0.f;

  // Pixel pair i of row r is buffer elements 2 + 2i and 3 + 2i (an aligned float2 of each image); its
  // moments go to even[r % 2][i] and odd[r % 2][i]. A zero-filled padding pixel becomes u = v = -kShift
  // like any other.
  auto pair_step = [&](int r) {
    const float2* row1 = reinterpret_cast<const float2*>(rows1[r % kStages]) + 1;
    const float2* row2 = reinterpret_cast<const float2*>(rows2[r % kStages]) + 1;
    auto pair = [&](int i) {
      const float2 p = row1[i], q = row2[i];
      even[r % 2][i] = moments(p.x - kShift, q.x - kShift);  // common.SHIFT
      odd[r % 2][i] = moments(p.y - kShift, q.y - kShift);
    };
    pair(lane);
    if (lane < kPairs - kThreads) pair(lane + kThreads);
  };

  // One commit per row, empty ones past the end too, so "row r has landed" is always
  // "at most kStages - 1 newer groups pending". Row 0's products are formed before the loop.
  for (int r = 0; r < kStages - 1; ++r) {
    if (r < steps) load_row(r, r);
    __pipeline_commit();
  }
  __pipeline_wait_prior(kStages - 2);
  __syncwarp();
  pair_step(0);
  const int x = x0 + kColsPerThread * lane;  // this thread's first column
  size_t out_row = plane + static_cast<size_t>(y0) * w;  // the next output row to write
  // kUnroll rows per trip (interior blocks): within a trip the shifted sums are renamed, not moved; at
  // the loop's end ptxas moves them back into place, once per trip instead of once per row.
#pragma unroll(interior ? kUnroll : 1)
  for (int r = 0; r < steps; ++r) {  // input row y0 - 5 + r
    // Buffer (r + 3) % 4 held row r - 1, whose products step r - 2 formed: free since the last barrier.
    if (r + kStages - 1 < steps) load_row(r + kStages - 1, (r + kStages - 1) % kStages);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 2);  // row r + 1 has landed
    // One warp per block: this barrier makes row r + 1's copies and row r's products (step r - 1)
    // visible, and orders step r - 1's reads of even/odd[(r + 1) % 2] before this step rewrites them.
    __syncwarp();

    // Column x + j, tap k is row element x + j - 5 + k = buffer element 3 + 2 * lane + j + k, i.e. pixel
    // t = j + k of the thread's 12 (t = 0..11): odd[lane + t / 2] for even t, even[lane + (t + 1) / 2]
    // for odd t.
    const float4* ev = even[r % 2];
    const float4* od = odd[r % 2];
    float h5[kColsPerThread][kMoments4] = {};
#pragma unroll
    for (int t = 0; t < kWindow + kColsPerThread - 1; ++t) {
      const float4 px = t % 2 ? ev[lane + (t + 1) / 2] : od[lane + t / 2];
      const float val[kMoments4] = {px.x, px.y, px.z, px.w};
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int k = t - j;
        if (k < 0 || k >= kWindow) continue;
#pragma unroll
        for (int m = 0; m < kMoments4; ++m) h5[j][m] = fmaf(kGauss[k], val[m], h5[j][m]);
      }
    }
    // Row r + 1's products, independent of the y-pass below, so the scheduler can interleave them. No
    // branch: in the last step it reads a stale buffer and writes products nothing reads.
    pair_step(r + 1);
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
      if constexpr (interior) {  // both columns inside, and i even (w % 4 == 0): one aligned 8-byte store
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
  }
}

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kThreads threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
// __maxnreg__(128): four one-warp blocks per scheduler, as V11 (uncapped, ptxas takes 129 and three
// fit); the training bodies then spill three values, the inference bodies nothing.
extern "C" __global__ void __maxnreg__(128)
ssim_v14(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ out,
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
  __shared__ float4 even[2][kPairs], odd[2][kPairs];  // the moments of two rows, see strip()
  if (interior) {
    if (training) strip<true, true>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, even, odd);
    else strip<true, false>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, even, odd);
  } else {
    if (training) strip<false, true>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, even, odd);
    else strip<false, false>(img1, img2, out, d_mu1, d_s11, d_s12, h, w, rows1, rows2, even, odd);
  }
}
