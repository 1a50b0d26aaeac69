// Padding v0 (the MI25's first kernel): zero-pad NCHW planes h x w -> (h + 2p) x (w + 2p), each
// thread copying `channels` channels of one output pixel. The loops over a run-time bound are not
// unrolled (as HIPCC compiled them on the MI25), so `vals[i]` has no compile-time index and the
// array lives in local memory: STL/LDL in SASS, a trip to L1/L2 for every value.
extern "C" __global__ void pad(const float* __restrict__ in, float* __restrict__ out,
                               int channels, int c, int h, int w, int p) {
    const int oh = h + 2 * p, ow = w + 2 * p;
    const int pixel = blockIdx.x * blockDim.x + threadIdx.x;
    if (pixel >= oh * ow) return;
    const int c0 = channels * blockIdx.y, n = blockIdx.z;
    const int y = pixel / ow - p, x = pixel % ow - p;
    float vals[16];
    for (int i = 0; i < 16; ++i) vals[i] = 0.0f;
    if (y >= 0 && y < h && x >= 0 && x < w) {
        const float* src = in + ((size_t)n * c + c0) * h * w + y * w + x;
#pragma unroll 1
        for (int i = 0; i < channels; ++i) vals[i] = src[(size_t)i * h * w];
    }
    float* dst = out + ((size_t)n * c + c0) * oh * ow + pixel;
#pragma unroll 1
    for (int i = 0; i < channels; ++i) dst[(size_t)i * oh * ow] = vals[i];
}
