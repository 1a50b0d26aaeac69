// The bank-conflict experiment: the two shared-memory access patterns of a 128x32 fp16 tile, with the
// layout given at run time as two strides, so every layout runs the same instructions.
//   address(row, chunk) = chunk * chunk_stride + row * row_stride   (bytes; a chunk is 8 halves)
// Row-major 64-byte rows: (64, 16). Four 128x8 blocks: (16, 2048). The source's layout, with a
// 32-byte gap between the blocks: (16, 2080).
#include "igemm_common.cuh"

constexpr int TILE_SMEM = 4 * 2080;   // large enough for all three layouts

// The copy-in: thread t writes 16 bytes to (row t / 4, chunk t % 4), as the GEMM kernels do.
extern "C" __global__ void tile_store(unsigned* out, int iters, int row_stride, int chunk_stride) {
    __shared__ __align__(128) unsigned char tile[TILE_SMEM];
    const int t = threadIdx.x;
    const unsigned addr = smem_addr(tile) + (t & 3) * chunk_stride + ((t >> 2) & 127) * row_stride;
#pragma unroll 8
    for (int i = 0; i < iters; ++i)   // volatile: every store is issued, none is merged away
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" :: "r"(addr), "r"(i) : "memory");
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = reinterpret_cast<const unsigned*>(tile)[t];
}

// The fragment reads: ldmatrix.x4 of a 16-row x 16-tap A fragment; lane l reads row l % 16 of chunk
// l / 16. Warp w reads rows 16 w .. 16 w + 15.
extern "C" __global__ void tile_ldmatrix(unsigned* out, int iters, int row_stride, int chunk_stride) {
    __shared__ __align__(128) unsigned char tile[TILE_SMEM];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    for (int i = t; i < TILE_SMEM / 4; i += blockDim.x)
        reinterpret_cast<unsigned*>(tile)[i] = i;
    __syncthreads();
    const unsigned addr = smem_addr(tile) + (lane >> 4) * chunk_stride + ((16 * warp + (lane & 15)) & 127) * row_stride;
    unsigned acc = 0;
#pragma unroll 8
    for (int i = 0; i < iters; ++i) {
        unsigned r[4];
        ldmatrix_x4(r, addr);
        acc ^= r[0] ^ r[1] ^ r[2] ^ r[3];
    }
    out[blockIdx.x * blockDim.x + t] = acc;
}
