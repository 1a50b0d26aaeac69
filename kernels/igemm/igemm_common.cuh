// The PTX wrappers that steps 3-8 share (and the bank experiment, smem_layout.cu): one copy, so a
// diff of two steps shows only what the newer one changes. Hopper's own helpers are in hopper.cuh.
#pragma once

// The 32-bit shared-memory address of a generic pointer: the form ldmatrix, cp.async and wgmma take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---- Steps 3-5: fragments read by ldmatrix, multiplied by mma.sync ----------------------------------

// Four 8x8 fp16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D (16x8, fp32) += A (16x16, fp16, row-major) * B (16x8, fp16, column-major).
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- Steps 4-8: cp.async, global -> shared without passing through registers ------------------------

// 16 bytes global -> shared without registers; valid == false writes 16 zero bytes and reads nothing.
// .cg caches in L2 only (the filters: each block reads its rows once); .ca also in L1 (the input,
// whose pixels nine taps re-read). -DX_BYPASS_L1 sends the input past the L1 too (step 4's first try).
__device__ __forceinline__ void cp_async_16_cg(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_16_ca(unsigned dst, const void* src, bool valid) {
#ifdef X_BYPASS_L1
    cp_async_16_cg(dst, src, valid);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
#endif
}

// Close this thread's group of cp.async issued since the last commit (cp_async_wait counts groups).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most `pending` of this thread's committed groups are still in flight; the clobber
// keeps the compiler from moving shared-memory reads above the wait.
template <int pending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(pending) : "memory"); }
