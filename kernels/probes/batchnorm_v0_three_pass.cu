// BatchNorm v0 (the MI25's example 14a): one thread per pixel normalizes its column of `batch`
// values (x is batch x pixels, row-major) over the batch. Three passes over the column: the mean,
// then the variance around it, then the output -- every value is read three times.
#define EPS 1e-5f

extern "C" __global__ void batchnorm(const float* __restrict__ x, float* __restrict__ y, int pixels, int batch) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pixels) return;
    float sum = 0.0f;
    for (int n = 0; n < batch; ++n) sum += x[(size_t)n * pixels + p];
    const float mean = sum / batch;
    float sq = 0.0f;
    for (int n = 0; n < batch; ++n) {
        const float d = x[(size_t)n * pixels + p] - mean;
        sq += d * d;
    }
    const float inv = rsqrtf(sq / batch + EPS);
    for (int n = 0; n < batch; ++n)
        y[(size_t)n * pixels + p] = (x[(size_t)n * pixels + p] - mean) * inv;
}
