// Thread launch rate: an empty kernel. Its time is only the cost of creating blocks and threads,
// so threads / (time x clock) is how many threads the GPU starts per cycle for a block shape.
extern "C" __global__ void null_kernel(float* unused) {}
