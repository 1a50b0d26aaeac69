// F1: the whole training step of the mean-SSIM loss in one kernel: the mean and dL/dimg1, with no
// derivative map in DRAM. The forward (V13's strip: four moments, x-pass from a row buffer, shifting
// partial sums for the y-pass) forms the three derivatives of each finished row in registers and puts
// them in a row of shared memory; the backward (B1's strip) blurs that row at once, keeps its own
// shifting sums, and each finished gradient row is combined with the two images' pixels, still in the
// ring of image rows, and stored. So the step reads two images and writes one gradient: three planes
// instead of the eleven that V13's training mean and B1 move together.
// The price is recomputation at the edges: a block writes kOut gradient columns but forms the
// derivatives of kOut + 12 (6 beyond each side, 5 of them needed, which the neighbours form too), the last
// threads blur derivatives nobody needs, and a strip reads 20 image rows more than it writes. Four warps
// share a row (three block barriers per row) so that this band is a small part of the block's width.
// Prediction: no longer bound by DRAM; at least V13's moments over F1's band, at most that plus B1's
// time (B1 is bound by its bytes, so its blurs take no longer), with the eight planes of stored maps gone.
// F2 (the default; -DBACKWARD_LAG=0 builds F1): the backward one row behind the forward. In F1 a step's
// backward needs the derivative row its forward just stored, so a barrier separates them, and a third
// guards that row before the next step overwrites it; with the few warps F1's registers leave an SM, each
// barrier leaves the schedulers little to pick from, and the forward's arithmetic cannot fill the
// backward's waits for its shared loads. F2's backward blurs the row the forward stored in the step before, in a
// second row buffer: the barrier at the top of a step, which the copied image row needs anyway, makes
// that row visible too, so one barrier a step remains, and the two halves of a step share no data.
// Prediction: the same instructions (the same arithmetic in the same order: the same bits), fewer
// waits: faster than F1, and no faster than V13's moments over the band (F1's lower bound).
#include <cuda_pipeline.h>

#include "ssim_common.cuh"

#ifndef BACKWARD_LAG
#define BACKWARD_LAG 1  // F2; -DBACKWARD_LAG=0 builds F1
#endif

namespace {
using namespace ssim;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kColsPerThread = 2;
constexpr int kDCols = kThreads * kColsPerThread;  // derivative columns per block: x0 - 6 .. x0 + kOut + 5
constexpr int kOut = kDCols - 2 * kRadius - 2;     // gradient columns (a multiple of 4: aligned rows)
constexpr int kOutLanes = kOut / kColsPerThread;   // lanes that write the gradient
constexpr int kRows = 96;                          // gradient rows per strip
constexpr int kLead = 2 * kRadius + 2;             // the row buffer starts at x0 - 12 (16-byte aligned)
constexpr int kRowLen = kDCols + kLead;            // floats: the taps of every lane's two columns
constexpr int kPending = kWindow - 1;
constexpr int kMaps = 3;    // dm/dmu1, dm/dsigma1^2, dm/dsigma12
constexpr int kAhead = 3;   // image rows in flight
constexpr int kRing = 16;   // image row buffers: 14 needed (the rows in flight, the row in use and the 10
                            // before it, whose pixels the gradient row takes), rounded up to a power of 2
constexpr int kUnroll = 2;  // input rows per trip of the row loop
// Derivative row buffers: lagging, the backward reads one while the forward writes the other (an int
// the macro sets, which the Python side's reader of constants does not need).
constexpr unsigned kDerivRows = 1 + BACKWARD_LAG;
static_assert(kRing >= kAhead + 1 + 2 * kRadius + BACKWARD_LAG, "the gradient row's pixels must still be in the ring");
// 16-byte row copies from x0 - kLead and 8-byte gradient stores at x0 + 2 * lane need these.
static_assert(kOut % 4 == 0 && kLead % 4 == 0 && kRowLen % 4 == 0, "rows must start 16-byte aligned");
static_assert(kRowLen / 4 <= kThreads, "one 16-byte chunk of a row per thread at most");
}  // namespace

template <bool interior>
__device__ __forceinline__ void strip(const float* __restrict__ img1, const float* __restrict__ img2,
                                      float* __restrict__ dimg1, double* sums, int h, int w, bool valid, float g,
                                      float (*rows1)[kRowLen], float (*rows2)[kRowLen],
                                      float (*drow)[kMaps][kRowLen]) {
  const int lane = threadIdx.x;  // the block's thread: its columns are 2 * lane and 2 * lane + 1
  const int x0 = blockIdx.x * kOut, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;
  const int y_end = min(y0 + kRows, h);
  const int steps = y_end - y0 + 4 * kRadius;  // input rows: image rows y0 - 10 .. y_end + 9
  // Input row r is image row y0 - 10 + r; it completes derivative row y0 - 15 + r (r >= 10), which
  // completes gradient row y0 - 20 + r (r >= 20), whose pixels are input row r - 10.
  auto load_row = [&](int r) {
    copy_row<kRowLen, kLead, kThreads>(rows1, rows2, r % kRing, a, b, y0 - 2 * kRadius + r, h, w, x0, lane, interior);
  };

  float fwd[kColsPerThread][kMoments4][kPending];  // the forward's shifting sums (V13)
  float bwd[kColsPerThread][kMaps][kPending];      // the backward's (B1)
#pragma unroll
  for (int j = 0; j < kColsPerThread; ++j) {
#pragma unroll
    for (int i = 0; i < kPending; ++i) {
#pragma unroll
      for (int m = 0; m < kMoments4; ++m) fwd[j][m][i] = 0.f;
#pragma unroll
      for (int m = 0; m < kMaps; ++m) bwd[j][m][i] = 0.f;
    }
  }
  for (int d = 0; d < kDerivRows; ++d)  // threads past kOutLanes read these pads; their results are dropped
    for (int m = 0; m < kMaps; ++m)
      for (int c = kDCols + lane; c < kRowLen; c += kThreads) drow[d][m][c] = 0.f;
  for (int r = 0; r < kAhead; ++r) {  // one commit per row, empty ones past the end too
    if (r < steps) load_row(r);
    __pipeline_commit();
  }
  const int xd = x0 - kRadius - 1 + kColsPerThread * lane;  // this lane's first derivative column
  const int xo = x0 + kColsPerThread * lane;                // and first gradient column
  double total = 0.0;

  // The forward on input row r: the x-pass (V13), the y-pass, and from r = 10 on the derivative row
  // it completes, put in drow[r % kDerivRows], its SSIM values summed where this block owns the pixel.
  auto forward = [&](int r) {
    const int buf = r % kRing;
    // Pixel t of the 14 read from element 2 * lane is tap t - 1 - j of column j.
    const float2* p1 = reinterpret_cast<const float2*>(rows1[buf]) + lane;
    const float2* p2 = reinterpret_cast<const float2*>(rows2[buf]) + lane;
    float h4[kColsPerThread][kMoments4] = {};
#pragma unroll
    for (int pair = 0; pair < 7; ++pair) {
      const float2 u2 = p1[pair], v2 = p2[pair];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 2 * pair + e;
        if (t < 1 || t > kWindow + 1) continue;
        const float u = (e ? u2.y : u2.x) - kShift, v = (e ? v2.y : v2.x) - kShift;
        const float val[kMoments4] = {u, v, fmaf(v, v, u * u), u * v};
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) {
          const int k = t - 1 - j;
          if (k < 0 || k >= kWindow) continue;
#pragma unroll
          for (int m = 0; m < kMoments4; ++m) h4[j][m] = fmaf(kGauss[k], val[m], h4[j][m]);
        }
      }
    }
    float moments[kColsPerThread][kMoments4];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) ypass_shift(fwd[j], h4[j], moments[j]);
    if (r < 2 * kRadius) return;  // no derivative row is complete yet

    // The derivative row yd: zero outside the image (the backward's blur is zero-padded) and, for the
    // valid map's mean, outside the valid map.
    const int yd = y0 - 3 * kRadius + r;
    const bool row_in = yd >= 0 && yd < h && (!valid || (yd >= kRadius && yd < h - kRadius));
    const bool row_owned = row_in && yd >= y0 && yd < y_end;
    float d[kColsPerThread][kMaps];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      const int x = xd + j;
      const bool in = row_in && x >= 0 && x < w && (!valid || (x >= kRadius && x < w - kRadius));
      const float v = ssim_fast4(0, moments[j], &d[j][0], &d[j][1], &d[j][2], true);  // "stores" to registers
      if (row_owned && in && x >= x0 && x < x0 + kOut) s += v;
#pragma unroll
      for (int m = 0; m < kMaps; ++m) d[j][m] = in ? d[j][m] : 0.f;
    }
    total += s;
    float (*out)[kRowLen] = drow[r % kDerivRows];
#pragma unroll
    for (int m = 0; m < kMaps; ++m) reinterpret_cast<float2*>(out[m])[lane] = make_float2(d[0][m], d[1][m]);
  };

  // The backward (B1's x-pass and y-pass) on the derivative row the forward formed on input row r, and
  // from r = 20 on the gradient row that completes: y0 - 20 + r, its pixels in input row r - 10.
  auto backward = [&](int r) {
    float hx[kColsPerThread][kMaps] = {};
    const float2* dp[kMaps];
#pragma unroll
    for (int m = 0; m < kMaps; ++m) dp[m] = reinterpret_cast<const float2*>(drow[r % kDerivRows][m]) + lane;
    xpass_maps(dp, hx);
    float done[kColsPerThread][kMaps];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) ypass_shift(bwd[j], hx[j], done[j]);
    if (r >= 4 * kRadius && lane < kOutLanes) {
      const int pix = (r - 2 * kRadius) % kRing;
      const float2 u = reinterpret_cast<const float2*>(rows1[pix])[kLead / 2 + lane];
      const float2 v = reinterpret_cast<const float2*>(rows2[pix])[kLead / 2 + lane];
      const size_t i = plane + static_cast<size_t>(y0 - 4 * kRadius + r) * w + xo;
      const float g0 = gradient(g, u.x, v.x, done[0]), g1 = gradient(g, u.y, v.y, done[1]);
      if constexpr (interior) {  // both columns inside and i even (w % 4 == 0): one 8-byte store
        *reinterpret_cast<float2*>(dimg1 + i) = make_float2(g0, g1);
      } else {
        if (xo < w) dimg1[i] = g0;
        if (xo + 1 < w) dimg1[i + 1] = g1;
      }
    }
  };

  // Row r's copy has landed and every thread sees it (and, lagging, the derivative row of step r - 1).
  auto arrive = [&](int r) {
    if (r + kAhead < steps) load_row(r + kAhead);
    __pipeline_commit();
    __pipeline_wait_prior(kAhead);
    __syncthreads();
  };
#if BACKWARD_LAG
  // F2: the backward takes the derivative row of the step before, so the barrier at the top of a step
  // serves both the image row and that derivative row, and the two halves of a step share no data: one
  // barrier a step, and their instructions interleave. The loops are split where the halves start and
  // stop, so the main loop's body is one block of straight code.
  int r = 0;
#pragma unroll 1
  for (; r < 2 * kRadius + 1; ++r) {
    arrive(r);
    forward(r);
  }
#pragma unroll kUnroll
  for (; r < steps; ++r) {
    arrive(r);
    forward(r);
    backward(r - 1);
  }
  arrive(r);
  backward(r - 1);
#else
  // F1: the backward takes the derivative row at once, behind a barrier, and a third barrier guards
  // that row and the ring before the next step rewrites them.
#pragma unroll kUnroll
  for (int r = 0; r < steps; ++r) {
    arrive(r);
    forward(r);
    if (r < 2 * kRadius) continue;
    __syncthreads();
    backward(r);
    __syncthreads();
  }
#endif
#pragma unroll
  for (int dlt = 16; dlt > 0; dlt /= 2) total += __shfl_down_sync(0xffffffffu, total, dlt);
  if (lane % 32 == 0) atomicAdd(sums + blockIdx.z, total);  // one add per warp
}

// Grid (ceil(w / kOut), ceil(h / kRows), planes); block kThreads threads. img1, img2 and dimg1 are
// (planes, h, w) float32; sums[plane] (planes doubles the caller zeroes) gets the plane's SSIM sum (valid
// != 0: over the valid map only), dimg1 the gradient of the loss g * that sum, g read on the device.
extern "C" __global__ void __launch_bounds__(kThreads)
ssim_step_f1(const float* __restrict__ img1, const float* __restrict__ img2, float* __restrict__ dimg1,
             double* sums, int h, int w, int valid, const float* __restrict__ g) {
  const int x0 = blockIdx.x * kOut;
  const bool aligned = ((reinterpret_cast<size_t>(img1) | reinterpret_cast<size_t>(img2) |
                         reinterpret_cast<size_t>(dimg1)) % 16) == 0;
  const bool interior = aligned && (w % 4 == 0) && x0 >= kLead && x0 - kLead + kRowLen <= w;
  __shared__ __align__(16) float rows1[kRing][kRowLen];
  __shared__ __align__(16) float rows2[kRing][kRowLen];
  __shared__ __align__(16) float drow[kDerivRows][kMaps][kRowLen];
  if (interior) strip<true>(img1, img2, dimg1, sums, h, w, valid != 0, *g, rows1, rows2, drow);
  else strip<false>(img1, img2, dimg1, sums, h, w, valid != 0, *g, rows1, rows2, drow);
}
