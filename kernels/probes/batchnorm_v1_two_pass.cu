// BatchNorm v1 (the MI25's example 14d): the mean and the variance from one pass, as sums of x and
// x^2 (var = E[x^2] - mean^2), then the output pass: two reads of every value instead of three.
// The price: cancellation when the mean is large against the spread.
#define EPS 1e-5f

extern "C" __global__ void batchnorm(const float* __restrict__ x, float* __restrict__ y, int pixels, int batch) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pixels) return;
    float sum = 0.0f, sumsq = 0.0f;
    for (int n = 0; n < batch; ++n) {
        const float v = x[(size_t)n * pixels + p];
        sum += v;
        sumsq += v * v;
    }
    const float mean = sum / batch;
    const float inv = rsqrtf(fmaxf(sumsq / batch - mean * mean, 0.0f) + EPS);
    for (int n = 0; n < batch; ++n)
        y[(size_t)n * pixels + p] = (x[(size_t)n * pixels + p] - mean) * inv;
}
