// NCHW index generation (the MI25's section 2.8): for channel 0 of an NCHW tensor, write each
// (n, h, w)'s flat NCHW offset into an NHW array. One thread per element, blocks along H*W, one
// grid row per image: a pure stream of 4-byte stores, so GB/s against the copy ceiling is the measure.
extern "C" __global__ void nhw_index(int* __restrict__ buf, int h, int w, int c) {
    const int x = blockDim.x * blockIdx.x + threadIdx.x;
    const int n = blockIdx.y;
    if (x < h * w)
        buf[x + n * h * w] = x + n * c * h * w;
}
