"""The Tensor Memory Accelerator's descriptors of steps 8-12: the filters and the output as tiled
matrices, the input in im2col mode. Each holds its array's address: build one for every new array."""

from __future__ import annotations

import numpy as np

from .problems import Problem
from .registry import BLOCK_M, TMA_STORE_COLS, WS_BLOCK_N


def _encode(mode: str, what: str, rank: int, address: int, *layout):
    """The driver's ``cuTensorMapEncode<mode>`` (Tiled or Im2col) of an fp16 tensor of ``rank``
    dimensions at ``address``, laid out as ``layout`` says (the mode's sizes, strides, box and element
    strides), with what every map of the chapter shares: the 128-byte swizzle, L2 promotion by 256 B,
    zeros read and nothing written outside. Returns the 128-byte device array a kernel reads; a
    RuntimeError naming ``what`` if the driver refuses."""
    import cupy
    from cuda.bindings import driver as cu

    (err,) = cu.cuInit(0)
    if err == cu.CUresult.CUDA_SUCCESS:
        err, tensor_map = getattr(cu, f"cuTensorMapEncode{mode}")(
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            rank,
            address,
            *layout,
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncode{mode} failed for {what}: {err}")
    return cupy.asarray(np.array(tensor_map.opaque, dtype=np.uint64))


def _tensor_map(a, rows: int, cols: int, box: tuple[int, int]):
    """A TMA descriptor of the fp16 array ``a`` seen as a (rows, cols) row-major matrix, in boxes of
    ``box`` = (box rows, box cols). It holds a's address: build it for every new array."""
    from cuda.bindings.driver import cuuint32_t as u32
    from cuda.bindings.driver import cuuint64_t as u64

    return _encode(
        "Tiled",
        f"an array of shape {tuple(a.shape)}",
        2,
        a.data.ptr,
        # sizes from the innermost dimension out, then the row stride in bytes
        [u64(cols), u64(rows)],
        [u64(2 * cols)],
        [u32(box[1]), u32(box[0])],
        [u32(1), u32(1)],
    )


def filter_tensor_map(w, rows: int = WS_BLOCK_N):
    """Steps 8-11's TMA descriptor of the KRSC filters seen as a (K, RSC) matrix: boxes of ``rows`` rows
    (the step's block_n) x 64 taps, the tile a K step multiplies."""
    return _tensor_map(w, w.shape[0], w.size // w.shape[0], (rows, 64))


def input_tensor_map(x, problem: Problem):
    """Step 10's im2col TMA descriptor of the NHWC input: one load gathers 128 output pixels x 64
    channels for one filter tap, in the 128-byte swizzle, zeros outside the image. The box corners are
    where the filter's corner may stand (-pad to pad - (R - 1) past each edge); the traversal stride is
    the convolution's. It holds x's address: build it for every new array."""
    from cuda.bindings.driver import cuuint32_t as u32
    from cuda.bindings.driver import cuuint64_t as u64

    n, h, w, c = problem.x_shape
    return _encode(
        "Im2col",
        problem.label(),
        4,
        x.data.ptr,
        [u64(c), u64(w), u64(h), u64(n)],  # innermost first, like the strides and corners
        [u64(2 * c), u64(2 * c * w), u64(2 * c * w * h)],
        [-problem.pad, -problem.pad],
        [problem.pad - (problem.s - 1), problem.pad - (problem.r - 1)],
        64,
        BLOCK_M,
        [u32(1), u32(problem.stride), u32(problem.stride), u32(1)],
    )


def output_tensor_map(y):
    """Steps 9-11's TMA descriptor of the NPQK output seen as an (M, K) matrix: boxes of 128 rows x 64
    channels, a quarter of a 128x256 tile's staged output."""
    return _tensor_map(y, y.size // y.shape[-1], y.shape[-1], (BLOCK_M, TMA_STORE_COLS))
