// V3-1-cpp: V3-1 (Numba) translated line by line into CUDA C++: the same 128 threads, one output column
// each, the same strip of 64 rows walked top to bottom (all 74 input rows, also in the last strip), the
// same five 11-row rings rotated through registers, the same plain global loads with a bounds branch into
// one shared row per image (shifted on the way in) and the same two barriers per row. Its x-pass, rotation
// and y-pass are V3's lines: V3's float32 operations in V3's order, so V3's tolerances hold unchanged.
// It isolates the language: V3-1 -> V3-1-cpp changes only the compiler (NVRTC instead of Numba's NVVM:
// register allocation, addresses from a raw pointer instead of an array descriptor's 64-bit shape and
// strides), and V3-1-cpp -> V3 only the loads (cp.async with zero-fill instead of the bounds branch, the
// next row in flight in a second buffer, the last strip stopped at the image's bottom edge, __restrict__).
// Prediction: most of the V3-1 -> V3 step comes from the language. ptxas gives this kernel about V3's
// register count, far below Numba's V3-1, so an SM holds as many blocks as with V3; their warps compute
// while one block waits for its row, which leaves double buffering little latency to hide.
#include "ssim_common.cuh"

namespace {
using namespace ssim;
constexpr int kCols = 128;  // threads per block = output columns per block (V3-1's GPU_TILE bx)
constexpr int kRows = 64;   // output rows per strip (GPU_TILE by)
constexpr int kRowLen = kCols + 2 * kRadius;
}  // namespace

// Grid (ceil(w / kCols), ceil(h / kRows), planes); block kCols threads. img1, img2, out and the
// derivative maps are (planes, h, w) float32; with training == 0 the derivative pointers are unused.
// No __restrict__, as Numba promises no aliasing either (with it, ptxas for sm_90 spills three ring values
// around the calls of the division's slow path in store()).
extern "C" __global__ void __launch_bounds__(kCols)
ssim_v3_1(const float* img1, const float* img2, float* out, float* d_mu1, float* d_s11, float* d_s12, int h,
          int w, int training) {
  __shared__ float row1[kRowLen];
  __shared__ float row2[kRowLen];
  const int tx = threadIdx.x;
  const int x0 = blockIdx.x * kCols, y0 = blockIdx.y * kRows;
  const size_t plane = static_cast<size_t>(blockIdx.z) * h * w;
  const float* a = img1 + plane;
  const float* b = img2 + plane;

  float q[kMoments][kWindow];  // V3-1's five tuples; constant indices after unrolling: registers
#pragma unroll
  for (int m = 0; m < kMoments; ++m)
#pragma unroll
    for (int k = 0; k < kWindow; ++k) q[m][k] = 0.f;

  for (int r = 0; r < kRows + 2 * kRadius; ++r) {
    const int y_in = y0 - kRadius + r;
    for (int c = tx; c < kRowLen; c += kCols) {
      const int x_in = x0 - kRadius + c;
      if (y_in >= 0 && y_in < h && x_in >= 0 && x_in < w) {  // stored shifted (common.SHIFT), padding too
        const size_t i = static_cast<size_t>(y_in) * w + x_in;
        row1[c] = a[i] - kShift;
        row2[c] = b[i] - kShift;
      } else {
        row1[c] = -kShift;
        row2[c] = -kShift;
      }
    }
    __syncthreads();

    float h5[kMoments] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kWindow; ++k) {
      const float u = row1[tx + k], v = row2[tx + k], g = kGauss[k];
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
    __syncthreads();  // the next row may only overwrite row1/row2 once every thread read them

    if (r >= 2 * kRadius) {
      // The rings hold input rows r-10 .. r, oldest first.
      float mom[kMoments];
#pragma unroll
      for (int m = 0; m < kMoments; ++m) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < kWindow; ++k) s = fmaf(kGauss[k], q[m][k], s);
        mom[m] = s;
      }
      const int y = y0 + r - 2 * kRadius, x = x0 + tx;
      if (y < h && x < w)
        store(plane + static_cast<size_t>(y) * w + x, mom, out, d_mu1, d_s11, d_s12, training != 0);
    }
  }
}
