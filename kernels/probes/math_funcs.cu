// Math-function costs (the MI25's section 2.11): each thread iterates x = STEP(x) `iters` times, a
// dependent chain, so one warp's cycles per step is the function's latency and a full GPU's steps
// per second its throughput. -DMATH_FN=k picks the step; every step maps [0, 2] into itself.
// The loop is unrolled 8 times (iters a multiple of 8), so its counter costs little even for one FFMA.
#include "arch.cuh"

#ifndef MATH_FN
#define MATH_FN 0
#endif

#if MATH_FN == 0      // baseline: one FFMA
typedef float real;
#define STEP(x) fmaf(x, 0.5f, 0.5f)
#elif MATH_FN == 1    // sinf: accurate, with range reduction
typedef float real;
#define STEP(x) sinf(x + 1.0f)
#elif MATH_FN == 2    // __sinf: the hardware approximation (MUFU.SIN)
typedef float real;
#define STEP(x) __sinf(x + 1.0f)
#elif MATH_FN == 3    // double-precision sin (the MI25's 2339 cycles)
typedef double real;
#define STEP(x) sin(x + 1.0)
#elif MATH_FN == 4    // expf
typedef float real;
#define STEP(x) expf(-x)
#elif MATH_FN == 5    // __expf: MUFU.EX2 after one multiply
typedef float real;
#define STEP(x) __expf(-x)
#elif MATH_FN == 6    // double-precision exp
typedef double real;
#define STEP(x) exp(-x)
#elif MATH_FN == 7    // exp(a) * exp(b): two calls ...
typedef float real;
#define STEP(x) (expf(-x) * expf(-0.5f * x))
#elif MATH_FN == 8    // ... equal exp(a + b): one call
typedef float real;
#define STEP(x) expf(-1.5f * x)
#elif MATH_FN == 9    // sqrt(x) < b ...
typedef float real;
#define STEP(x) (sqrtf(x) < 0.8f ? 0.5f * x + 0.5f : 0.5f * x)
#elif MATH_FN == 10   // ... equals x < b * b for x >= 0: no square root
typedef float real;
#define STEP(x) (x < 0.64f ? 0.5f * x + 0.5f : 0.5f * x)
#elif MATH_FN == 11   // baseline in double: one DFMA
typedef double real;
#define STEP(x) fma(x, 0.5, 0.5)
#endif

extern "C" __global__ void math_chain(real* out, int iters, long long* cycles) {
    const int t = blockDim.x * blockIdx.x + threadIdx.x;
    real x = (real)(t % 64) / (real)64;  // different start per lane: no constant folding
    const long long c0 = probe_clock();
#pragma unroll 8
    for (int i = 0; i < iters; ++i)
        x = STEP(x);
    const long long c1 = probe_clock();
    out[t] = x;
    if (t == 0) cycles[0] = c1 - c0;
}
