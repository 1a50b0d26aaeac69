// Padding v2: the channel count per thread is a compile-time constant (-DCHANNELS=k), so both
// loops unroll completely, every `vals[i]` has a constant index and the array lives in registers.
#ifndef CHANNELS
#define CHANNELS 16
#endif

extern "C" __global__ void pad(const float* __restrict__ in, float* __restrict__ out,
                               int channels, int c, int h, int w, int p) {
    const int oh = h + 2 * p, ow = w + 2 * p;
    const int pixel = blockIdx.x * blockDim.x + threadIdx.x;
    if (pixel >= oh * ow) return;
    const int c0 = CHANNELS * blockIdx.y, n = blockIdx.z;
    const int y = pixel / ow - p, x = pixel % ow - p;
    float vals[CHANNELS];
#pragma unroll
    for (int i = 0; i < CHANNELS; ++i) vals[i] = 0.0f;
    if (y >= 0 && y < h && x >= 0 && x < w) {
        const float* src = in + ((size_t)n * c + c0) * h * w + y * w + x;
#pragma unroll
        for (int i = 0; i < CHANNELS; ++i) vals[i] = src[(size_t)i * h * w];
    }
    float* dst = out + ((size_t)n * c + c0) * oh * ow + pixel;
#pragma unroll
    for (int i = 0; i < CHANNELS; ++i) dst[(size_t)i * oh * ow] = vals[i];
}
