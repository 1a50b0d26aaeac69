"""What device.properties() reports for GPUs the book was not run on, for the tests of what each chapter
leaves out and of the per-GPU models (published specifications; memory sizes rounded to GiB)."""

from kernels.harness.device import REFERENCE_PROPERTIES

H100 = REFERENCE_PROPERTIES
A100 = {
    "name": "NVIDIA A100-SXM4-80GB",
    "cc": "80",
    "sms": 108,
    "l2_bytes": 40 * 2**20,
    "smem_per_sm_bytes": 164 * 1024,
    "smem_per_block_optin_bytes": 163 * 1024,
    "regs_per_sm": 65536,
    "max_threads_per_sm": 2048,
    "warp_size": 32,
    "global_mem_bytes": 80 * 2**30,
}
RTX_4090 = {
    "name": "NVIDIA GeForce RTX 4090",
    "cc": "89",
    "sms": 128,
    "l2_bytes": 72 * 2**20,
    "smem_per_sm_bytes": 100 * 1024,
    "smem_per_block_optin_bytes": 99 * 1024,
    "regs_per_sm": 65536,
    "max_threads_per_sm": 1536,
    "warp_size": 32,
    "global_mem_bytes": 24 * 2**30,
}
T4 = {
    "name": "Tesla T4",
    "cc": "75",
    "sms": 40,
    "l2_bytes": 4 * 2**20,  # Colab's free GPU
    "smem_per_sm_bytes": 64 * 1024,
    "smem_per_block_optin_bytes": 64 * 1024,
    "regs_per_sm": 65536,
    "max_threads_per_sm": 1024,
    "warp_size": 32,
    "global_mem_bytes": 15 * 2**30,
}
