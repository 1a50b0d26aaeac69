// What HALO TILE and WINOGRAD share: 16-byte cp.async copies, and the copy of a block's input halo.
#pragma once

// 16 bytes global -> shared, bypassing the registers; valid == false writes 16 zero bytes (the halo
// outside the image, channels past C, output channels past K) and reads nothing.
__device__ __forceinline__ void copy16(float* dst, const float* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}

// Starts the copies of an H x W pixel halo whose first pixel is image row h0 - 1, column w0 - 1, channels
// c0 .. c0 + CHANNELS - 1 of NHWC image img, into dst: pixel rows PITCH floats apart, channels innermost.
// The block's THREADS threads share the float4s; zeros outside the image and past C.
template <int H, int W, int CHANNELS, int PITCH, int THREADS>
__device__ __forceinline__ void copy_halo(float* dst, const float* __restrict__ x, int tid, int img, int h0, int w0,
                                          int c0, int height, int width, int n_in) {
    constexpr int VECS = H * W * CHANNELS / 4;
#pragma unroll
    for (int l = 0; l < (VECS + THREADS - 1) / THREADS; ++l) {   // compile-time trips: unrolled
        const int e = tid + l * THREADS;
        if (VECS % THREADS && e >= VECS) break;
        const int pix = e / (CHANNELS / 4), c = c0 + 4 * (e % (CHANNELS / 4));
        const int hr = pix / W, hc = pix % W, ih = h0 + hr - 1, iw = w0 + hc - 1;
        const bool ok = ih >= 0 && ih < height && iw >= 0 && iw < width && c < n_in;
        copy16(&dst[hr * PITCH + hc * CHANNELS + (c - c0)],
               ok ? x + ((size_t)(img * height + ih) * width + iw) * n_in + c : x, ok);
    }
}
