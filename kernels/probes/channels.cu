// Memory channels (the MI25's section 2.10): a GPU's DRAM is split into channels, each owning a slice
// of the address space. Warp w reads one 128-byte line at byte offset w * stride; if the mapping
// from address to channel were a plain bit field, power-of-two strides would pile every line onto
// a few channels. NVIDIA hashes the address bits, which this probe tests.
extern "C" __global__ void strided_lines(const float* __restrict__ buf, long long stride_words, int lines,
                                         float* __restrict__ sink) {
    const int lane = threadIdx.x % 32;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int warps = gridDim.x * blockDim.x / 32;
    float acc = 0.0f;
    for (int line = warp; line < lines; line += warps)
        acc += buf[line * stride_words + lane];
    sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;  // keeps every load alive
}
