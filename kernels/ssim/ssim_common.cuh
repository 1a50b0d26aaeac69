// What the CUDA C++ SSIM versions share: the window, its taps, the shift and the per-pixel formula, and
// the row copy, x-pass, y-passes and stores that several versions repeat (each comment names its users).
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

// V7-V9 (two adjacent columns per thread): the x-pass of the five moments at both columns, added to h5,
// from the 7 8-byte words p1[0..6], p2[0..6] of the unshifted rows of both images, whose pixel t is tap
// t - 1 - j of column j (pixels 0 and 13 are not used). Each pixel is shifted (common.SHIFT), squared and
// multiplied once, in registers (V6).
__device__ __forceinline__ void xpass_pair(const float2* p1, const float2* p2, float h5[2][kMoments]) {
#pragma unroll
  for (int pair = 0; pair < 7; ++pair) {
    const float2 u2 = p1[pair], v2 = p2[pair];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int t = 2 * pair + e;
      if (t < 1 || t > kWindow + 1) continue;  // resolved at compile time
      const float u = (e ? u2.y : u2.x) - kShift, v = (e ? v2.y : v2.x) - kShift;
      const float val[kMoments] = {u, v, u * u, v * v, u * v};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = t - 1 - j;
        if (k < 0 || k >= kWindow) continue;
#pragma unroll
        for (int m = 0; m < kMoments; ++m) h5[j][m] = fmaf(kGauss[k], val[m], h5[j][m]);
      }
    }
  }
}

// V6, V9, V10, B1, F1 (V4's shifting partial sums): the y-pass of one column's M sums (five moments in
// V6-V10, three maps in B1, both in F1) for one input row with x-pass values h. p[m][i] holds sum m of
// output row (this input row - 5 + i) so far: done[m] gets output row (input row - 5)'s completed sum,
// the others move down one slot with their tap added, and p[m][9] starts the newest row.
template <int M>
__device__ __forceinline__ void ypass_shift(float (&p)[M][kWindow - 1], const float (&h)[M], float (&done)[M]) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    done[m] = fmaf(kGauss[kWindow - 1], h[m], p[m][0]);  // the last input row this output row needs
#pragma unroll
    for (int i = 0; i < kWindow - 2; ++i) p[m][i] = fmaf(kGauss[kWindow - 2 - i], h[m], p[m][i + 1]);
    p[m][kWindow - 2] = kGauss[0] * h[m];  // the first input row output row (this + 10) needs
  }
}

// B1, F1 (two adjacent columns per thread): the x-pass of M rows of derivative maps, added to h, from
// the 7 8-byte words p[m][0..6] of each, whose pixel t is tap t - 1 - j of column j. Unlike xpass_pair,
// the values are blurred as they are: no shift, no products.
template <int M>
__device__ __forceinline__ void xpass_maps(const float2* const (&p)[M], float (&h)[2][M]) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int pair = 0; pair < 7; ++pair) {
      const float2 v2 = p[m][pair];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 2 * pair + e;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int k = t - 1 - j;
          if (k < 0 || k >= kWindow) continue;  // resolved at compile time
          h[j][m] = fmaf(kGauss[k], e ? v2.y : v2.x, h[j][m]);
        }
      }
    }
  }
}

// B1, F1: dL/dimg1 at one pixel from its blurred derivative maps d (dm/dmu1, dm/dsigma1^2, dm/dsigma12)
// and the two images' pixels a and b; g is dL/dmap.
__device__ __forceinline__ float gradient(float g, float a, float b, const float (&d)[3]) {
  return g * fmaf(b, d[2], fmaf(2.f * a, d[1], d[0]));
}

// V7, V8: the same y-pass on a ring of sums, slot s of sum[m] holding the output row whose index is s
// modulo 10: input row q (mod 10) completes the row in slot q and starts the next one there, so no sum
// moves. The caller unrolls its row loop 10 times, which makes q and every slot index a constant.
__device__ __forceinline__ void ypass_ring(float sum[kMoments][kWindow - 1], int q,
                                           const float h5[kMoments], float done[kMoments]) {
#pragma unroll
  for (int m = 0; m < kMoments; ++m) {
    done[m] = fmaf(kGauss[kWindow - 1], h5[m], sum[m][q]);
#pragma unroll
    for (int i = 1; i < kWindow - 1; ++i) {
      float& s = sum[m][(q + i) % (kWindow - 1)];
      s = fmaf(kGauss[kWindow - 1 - i], h5[m], s);
    }
    sum[m][q] = kGauss[0] * h5[m];
  }
}

// V7 on (V10 keeps its own: both images in one buffer): image row y of both images, elements
// x0 - kLead .. x0 - kLead + kLen - 1, into row buffer buf of rows1 and rows2 by cp.async; what lies
// outside the image is zero-filled by cp.async from a clamped (mapped) address. An interior block (whole
// aligned 16-byte chunks on both sides) copies 16 bytes per lane and image from lanes 0 .. kLen / 4 - 1,
// an edge block one element per lane and image at a time.
template <int kLen, int kLead, int kThreads>
__device__ __forceinline__ void copy_row(float (*rows1)[kLen], float (*rows2)[kLen], int buf,
                                         const float* a, const float* b, int y, int h, int w, int x0,
                                         int lane, bool interior) {
  const bool row_in = y >= 0 && y < h;
  const size_t row = static_cast<size_t>(row_in ? y : 0) * w;
  if (interior) {
    if (lane < kLen / 4) {
      const size_t offset = row + x0 - kLead + 4 * lane;
      copy_async<16>(&rows1[buf][4 * lane], a + offset, row_in ? 16 : 0);
      copy_async<16>(&rows2[buf][4 * lane], b + offset, row_in ? 16 : 0);
    }
  } else {
    for (int c = lane; c < kLen; c += kThreads) {
      const int x = x0 - kLead + c;
      const bool in = row_in && x >= 0 && x < w;
      const size_t offset = row + (in ? x : 0);
      copy_async<4>(&rows1[buf][c], a + offset, in ? 4 : 0);
      copy_async<4>(&rows2[buf][c], b + offset, in ? 4 : 0);
    }
  }
}

// V8, V9 (two adjacent columns x, x + 1 at output index i): V7's store of the map, one aligned 8-byte
// store in an interior block (both columns inside, i even as w % 4 == 0), else per column inside the
// image; ssim_fast writes the derivative maps. V7 keeps its own copy: there `interior` is a run-time
// branch, and behind a call ptxas lays out one of its ten unrolled copies differently.
__device__ __forceinline__ void store_pair(size_t i, int x, int w, const float done[2][kMoments], float* out,
                                           float* d_mu1, float* d_s11, float* d_s12, bool training,
                                           bool interior) {
  if (interior) {
    float2 s;
    s.x = ssim_fast(i, done[0], d_mu1, d_s11, d_s12, training);
    s.y = ssim_fast(i + 1, done[1], d_mu1, d_s11, d_s12, training);
    *reinterpret_cast<float2*>(out + i) = s;
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (x + j < w) out[i + j] = ssim_fast(i + j, done[j], d_mu1, d_s11, d_s12, training);
  }
}
}  // namespace ssim

// V11 on: four moments instead of five. sigma1^2 and sigma2^2 enter SSIM (and its derivatives) only
// through their sum, so the kernels blur u, v, u*u + v*v and u*v of the shifted images (m[0..3]) and
// s11 + s22 = m[2] - m[0]^2 - m[1]^2. Otherwise ssim_fast: the same formula, outputs and derivatives.
// The means get the shifts c1, c2 back: kShift, or in V15 the shifts that follow the data.
namespace ssim {
constexpr int kMoments4 = 4;

__device__ __forceinline__ float ssim_fast4(size_t i, const float m[kMoments4], float* d_mu1, float* d_s11,
                                            float* d_s12, bool training, float c1 = kShift, float c2 = kShift) {
  const float s_sum = fmaf(-m[0], m[0], fmaf(-m[1], m[1], m[2])), s12 = fmaf(-m[0], m[1], m[3]);
  const float mu1 = m[0] + c1, mu2 = m[1] + c2;
  const float a = fmaf(mu1, mu1, fmaf(mu2, mu2, 1e-4f)), b = s_sum + 9e-4f;
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
