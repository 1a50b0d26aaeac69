// Uniform registers and constant memory: NVIDIA's counterpart of AMD's SGPRs. A value that is the
// same for every thread of a warp (a kernel argument, blockIdx, a loop counter over them) can live
// in a uniform register (UR0..UR63) and be computed once per warp by the uniform datapath
// (ULDC, UIADD3, UISETP, ...); a __constant__ read with a uniform index is an FFMA operand c[3][..].
__constant__ float poly[8];

// Horner's rule with coefficients in constant memory, the loop bound a kernel argument: uniform.
extern "C" __global__ void poly_uniform(const float* __restrict__ x, float* __restrict__ y, int n, int degree) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float xi = x[i];
    float acc = 0.0f;
    for (int k = degree; k >= 0; --k)
        acc = fmaf(acc, xi, poly[k & 7]);
    y[i] = acc;
}

// The same, but the coefficients come from a global array indexed per thread: vector registers.
extern "C" __global__ void poly_per_thread(const float* __restrict__ x, float* __restrict__ y,
                                           const float* __restrict__ coeffs, int n, int degree) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float xi = x[i];
    float acc = 0.0f;
    for (int k = degree + (i & 1); k >= 0; --k)  // a per-thread trip count: nothing is uniform
        acc = fmaf(acc, xi, coeffs[k & 7]);
    y[i] = acc;
}
