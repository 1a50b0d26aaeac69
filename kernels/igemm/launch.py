"""The one launcher that runs any step: arguments validated once, the kernel built for its options, a
function returned that only enqueues it (what timing needs); and ``conv``, which runs one step."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from ..harness import check, device
from .problems import array_module, split_plan, validate
from .registry import (
    EPILOGUE,
    FIXUP_TILE,
    PIPELINED,
    REGISTRY,
    SPECIALIZED,
    SPLIT_K,
    WS_REGISTERS,
    smem_bytes,
    step_info,
    unsupported,
)
from .tma import filter_tensor_map, input_tensor_map, output_tensor_map

SPLIT_REDUCE_THREADS = 256  # per block of igemm_split_reduce, 8 outputs each


@cache
def cuda_kernel(step: int, stages: int = 3, x_bypass_l1: bool = False, block_n: int | None = None):
    """The compiled CUDA C++ kernel of ``step`` (2-12), with its dynamic shared memory allowed.

    ``x_bypass_l1`` rebuilds step 4 or 5 with the input gather through cp.async.cg (past the L1);
    ``block_n`` (NARROW_N) builds step 11's 128x64 tiles."""
    from ..harness import cuda_cpp

    if device.on_gpu() and (why := unsupported(step, device.properties(), stages, block_n)):
        raise RuntimeError(why)  # before compiling: NVRTC's or the driver's error would not say why
    info = step_info(step)
    if not info.pipelined:
        return cuda_cpp.load(info.source, info.kernel)
    options = (f"-DSTAGES={stages}",) + (("-DX_BYPASS_L1",) if x_bypass_l1 else ())
    options += (f"-DBLOCK_N={block_n}",) if block_n not in (None, info.block_n) else ()
    if info.wgmma:
        kernel = cuda_cpp.load(info.source, info.kernel, options=options, arch="sm_90a")
        if info.specialized and kernel.num_regs != WS_REGISTERS:
            # setmaxnreg only moves registers the block holds: with another count the consumers'
            # request would never be granted and the kernel would hang.
            raise RuntimeError(
                f"step {step} was compiled to {kernel.num_regs} registers per thread; its "
                f"setmaxnreg split needs exactly {WS_REGISTERS}"
            )
    else:
        kernel = cuda_cpp.load(info.source, info.kernel, options=options)
    kernel.max_dynamic_shared_size_bytes = smem_bytes(step, stages, block_n)
    return kernel


def launcher(
    step: int,
    x,
    w,
    out,
    *,
    pad: int = 1,
    stride: int = 1,
    bias=None,
    alpha: float = 1.0,
    relu: bool = False,
    stages: int | None = None,
    x_bypass_l1: bool = False,
    blocks: int | None = None,
    splits: int | None = None,
    block_n: int | None = None,
) -> Callable[[], None]:
    """Validate once, then return a function that only enqueues the kernel (what timing needs).

    ``stages`` (the pipelined steps): the pipeline depth, by default the step's own. ``blocks`` (the
    persistent steps): how many blocks walk over the tiles (each split of a tile is a unit of its own);
    by default one per unit up to one per SM. ``splits`` (the split-K steps): how many blocks share
    each tile's K steps (default 1); above 1 a workspace of fp32 partials, which the tile's last split
    adds (fixup) or a second kernel adds. ``block_n`` (step 11): output channels per tile, the step's own
    or NARROW_N (whose default depth is the most stages it takes)."""
    problem = validate(step, x, w, out, pad=pad, stride=stride, bias=bias)
    info = step_info(step)
    if not info.epilogue and (alpha != 1.0 or relu):
        raise ValueError(f"step {step} computes the plain convolution; alpha and ReLU are fused in steps {EPILOGUE}")
    if stages is not None and not info.pipelined:
        raise ValueError(f"stages sets the pipeline depth of steps {PIPELINED} only; step {step} has none")
    if block_n is not None and block_n not in info.widths:
        widths = " or ".join(str(b) for b in info.widths)
        raise ValueError(f"block_n: step {step} builds tiles {widths} output channels wide, got {block_n!r}")
    narrow = block_n is not None and block_n != info.block_n
    width = block_n if narrow else info.block_n
    if stages is None:
        stages = info.narrow_stages if narrow else info.default_stages
    if info.pipelined:
        low, high = info.stage_range(width)
        if not (isinstance(stages, int) and low <= stages <= high):
            wide = f" {width} wide" if narrow else ""
            raise ValueError(f"stages of step {step}{wide} must be an integer from {low} to {high}, got {stages!r}")
    if x_bypass_l1 and not info.x_bypass_l1:
        rebuilt = " or ".join(str(s.number) for s in REGISTRY if s.x_bypass_l1)
        raise ValueError(f"x_bypass_l1 rebuilds step {rebuilt} only")
    if blocks is not None and not info.specialized:
        raise ValueError(f"blocks sets the grid of steps {SPECIALIZED} only")
    if splits is not None and not info.split_k:
        raise ValueError(f"splits divides K over the blocks of steps {SPLIT_K} only")
    k_per_split, splits = split_plan(problem, 1 if splits is None else splits, step)
    units = problem.tiles(width) * splits  # what a persistent grid's blocks walk
    if blocks is not None and not (isinstance(blocks, (int, np.integer)) and 1 <= blocks <= units):
        what = "tiles" if splits == 1 else f"units of {splits} splits per tile"
        raise ValueError(f"blocks must be an integer from 1 to the {units} {what}, got {blocks!r}")
    sms = device.target_properties()["sms"]
    if info.fixup and splits > 1 and blocks is not None and not splits <= blocks <= sms:
        raise ValueError(
            f"blocks: step {step}'s {splits} splits of a tile wait for each other, so every block must be "
            f"resident at once: from {splits} to the {sms} SMs, got {blocks!r}"
        )
    if not info.cuda_cpp:
        from .v1_naive import THREADS as NAIVE_THREADS
        from .v1_naive import igemm_naive

        naive_blocks = -(-int(np.prod(problem.y_shape)) // NAIVE_THREADS)
        kernel = igemm_naive[naive_blocks, NAIVE_THREADS]
        return lambda: kernel(x, w, out, problem.pad, problem.stride)
    # Raises a clear error in the simulator, or on a GPU that cannot run the step.
    kernel = cuda_kernel(step, stages, x_bypass_l1, width if narrow else None)
    import cupy

    i32 = cupy.int32
    pr = problem
    args = (
        input_tensor_map(x, problem) if info.tma_im2col else x,
        filter_tensor_map(w, width) if info.tma_filters else w,
        output_tensor_map(out) if info.tma_store else out,
        i32(pr.n),
        i32(pr.h),
        i32(pr.w),
        i32(pr.c),
        i32(pr.k),
        i32(pr.r),
        i32(pr.s),
        i32(pr.p),
        i32(pr.q),
        i32(pr.pad),
        i32(pr.stride),
    )
    if info.epilogue:
        if bias is None:
            bias = cupy.zeros(pr.k, dtype=cupy.float32)
        epilogue = (bias, cupy.float32(alpha), i32(bool(relu)))
        args += epilogue
    # Split K: the fp32 partials, and the kernel that adds them and applies the epilogue (reduce_args),
    # or (fixup) a tile-sized slot per unit and the tiles' arrival counters, which each launch leaves zero.
    partial = out  # unread without a split
    if splits > 1:
        partial = cupy.empty(units * FIXUP_TILE if info.fixup else splits * out.size, dtype=cupy.float32)
    if info.fixup:
        arrivals = cupy.zeros(problem.tiles(width) if splits > 1 else 1, dtype=cupy.uint32)
        args += (partial, arrivals, i32(k_per_split), out)  # the shares of split tiles are stored directly
    elif info.split_k:
        args += (partial, i32(k_per_split))
    if splits > 1 and not info.fixup:  # only the split-K steps, which all have the epilogue
        reduce_args = (partial, i32(splits), i32(out.size // pr.k), i32(pr.k), *epilogue, out)
        reduce_grid = (-(-out.size // (8 * SPLIT_REDUCE_THREADS)),)
    shared = smem_bytes(step, stages, width) if info.pipelined else 0
    grid = problem.grid() + (splits,)
    if info.specialized:
        grid = (int(blocks) if blocks else min(units, sms),)
    block = (info.threads,)
    reduce = split_reduce_kernel(step, stages) if splits > 1 and not info.fixup else None

    def launch():
        kernel(grid, block, args, shared_mem=shared)
        if reduce is not None:
            reduce(reduce_grid, (SPLIT_REDUCE_THREADS,), reduce_args)

    # Steps 8-12's args hold only descriptors of x's, w's and out's addresses: the launcher keeps them alive
    # itself, or a temporary could be freed, and its memory reused, while the TMA engine uses it.
    launch.x, launch.w, launch.out = x, w, out
    return launch


@cache
def split_reduce_kernel(step: int, stages: int):
    """Split K's second kernel, from the module of ``step``'s kernel at ``stages``."""
    from ..harness import cuda_cpp

    return cuda_cpp.load(step_info(step).source, "igemm_split_reduce", options=(f"-DSTAGES={stages}",), arch="sm_90a")


def conv(step: int, x, w, *, pad: int = 1, stride: int = 1, bias=None, out=None, **options):
    """Run one step and return its output (poisoned first, so nothing unwritten can pass); ``options``
    as ``launcher`` takes them."""
    if out is None:
        problem = validate(step, x, w, pad=pad, stride=stride, bias=bias)
        out = check.poison(array_module(x).empty(problem.y_shape, dtype=np.float16))
    launcher(step, x, w, out, pad=pad, stride=stride, bias=bias, **options)()
    return out
