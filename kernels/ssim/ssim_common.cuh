// What the CUDA C++ SSIM versions share: the window, its taps, the shift and the per-pixel formula.
#pragma once

namespace ssim {
constexpr int kRadius = 5;
constexpr int kWindow = 2 * kRadius + 1;
constexpr int kMoments = 5;

// Normalized exp(-(k-5)^2 / (2 * 1.5^2)) rounded to float32: common.GAUSS (a test compares them).
__constant__ float kGauss[kWindow] = {
    1.028380124e-03f, 7.598758209e-03f, 3.600077331e-02f, 1.093606874e-01f, 2.130055428e-01f,
    2.660117149e-01f, 2.130055428e-01f, 1.093606874e-01f, 3.600077331e-02f, 7.598758209e-03f,
    1.028380124e-03f};

// common.SHIFT: the kernels blur x - 0.5 (padding -0.5), so E[x^2] - mu^2 cancels on small numbers.
constexpr float kShift = 0.5f;

// Subtract the shift from the row elements this thread copied (first, first + stride, ...), once its
// copies have landed; a zero-filled padding element becomes -kShift like every other pixel.
__device__ __forceinline__ void shift_own(float* row, int first, int stride, int len) {
  for (int c = first; c < len; c += stride) row[c] -= kShift;
}

// The SSIM map and (in training) its derivatives at one pixel from the five blurred moments of the
// shifted images: the (co)variances need no correction, the means get the shift back.
__device__ __forceinline__ void store(size_t i, const float m[kMoments], float* out, float* d_mu1,
                                      float* d_s11, float* d_s12, bool training) {
  const float s11 = m[2] - m[0] * m[0], s22 = m[3] - m[1] * m[1], s12 = m[4] - m[0] * m[1];
  const float mu1 = m[0] + kShift, mu2 = m[1] + kShift;
  const float a = mu1 * mu1 + mu2 * mu2 + 1e-4f, b = s11 + s22 + 9e-4f;
  const float c = 2.f * mu1 * mu2 + 1e-4f, d = 2.f * s12 + 9e-4f;
  const float ab = a * b, ssim = (c * d) / ab;
  out[i] = ssim;
  if (training) {
    d_mu1[i] = (2.f * mu2 * d - 2.f * mu2 * c) / ab - 2.f * mu1 * ssim / a + 2.f * mu1 * ssim / b;
    d_s11[i] = -ssim / b;
    d_s12[i] = 2.f * c / ab;
  }
}
// V7 on: an asynchronous global -> shared copy of `bytes` (4 or 16) of which only the first `valid`
// are read and the rest zero-filled (cp.async's src-size operand), so the padding needs no branch; with
// valid == 0 nothing is read, but `src` must still be a mapped address: callers clamp it.
template <int bytes>
__device__ __forceinline__ void copy_async(float* dst, const float* src, int valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid));
}

// V7 on: store() with one approximate reciprocal (MUFU.RCP, relative error about 1e-7) instead of IEEE
// divisions, each of which costs a dozen instructions and a slow-path branch; 1/a = b/(ab) and
// 1/b = a/(ab). ab >= C1 * C2, far from the denormals the .ftz form flushes. Returns the map value; the
// caller writes it (adjacent pixels together), the derivative maps are written here.
__device__ __forceinline__ float ssim_fast(size_t i, const float m[kMoments], float* d_mu1, float* d_s11,
                                           float* d_s12, bool training) {
  const float s11 = fmaf(-m[0], m[0], m[2]), s22 = fmaf(-m[1], m[1], m[3]), s12 = fmaf(-m[0], m[1], m[4]);
  const float mu1 = m[0] + kShift, mu2 = m[1] + kShift;
  const float a = fmaf(mu1, mu1, fmaf(mu2, mu2, 1e-4f)), b = s11 + s22 + 9e-4f;
  const float c = fmaf(2.f * mu1, mu2, 1e-4f), d = fmaf(2.f, s12, 9e-4f);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a * b));
  const float ssim = c * d * r;
  if (training) {
    d_mu1[i] = 2.f * mu2 * (d - c) * r - 2.f * mu1 * ssim * (b - a) * r;
    d_s11[i] = -ssim * a * r;
    d_s12[i] = 2.f * c * r;
  }
  return ssim;
}
}  // namespace ssim
