"""The implicit-GEMM chapter's names in one place, for its notebooks, tests and scripts
(``from kernels.igemm import common as ig``). Each lives in the module of its concern:

- ``registry``: the steps, one record each, and what follows from a record (shared memory, the GPUs
  that can run it, its name in the results);
- ``problems``: the convolution, the chapter's problems, the float32 reference, the layers a step
  refuses, argument validation;
- ``tma``: the Tensor Memory Accelerator's descriptors;
- ``launch``: the one launcher that runs any step;
- ``choice``: which step to run on a problem, from a model calibrated on the chapter's stored run.
"""

from .choice import (  # noqa: F401  (re-exported: the chapter's names in one place)
    DEPTH_SWEEP,
    FIXUP_ROUND_TRIPS,
    SLOT_RESERVED_BYTES,
    Choice,
    _cost,
    best_step,
    depth_fit,
    estimate_ms,
    fit_head_tail,
    fixup_ms,
    k_half,
    launch_ms,
    split_reduce_ms,
    stored_heads,
    stored_rates,
    tile_model,
    variants,
)
from .launch import SPLIT_REDUCE_THREADS, conv, cuda_kernel, launcher, split_reduce_kernel  # noqa: F401
from .problems import (  # noqa: F401
    CHUNK,
    CI_PROBLEM,
    FIRST_LAYER,
    IM2COL_CORNER,
    IM2COL_MAX_STRIDE,
    MAX_ELEMENTS,
    ODD_PROBLEMS,
    PROBLEM,
    Problem,
    compare,
    gemm_problem,
    k_steps,
    random_inputs,
    reference,
    refusal,
    require_problem,
    split_plan,
    validate,
)
from .registry import (  # noqa: F401
    BLOCK_M,
    BLOCK_N,
    CHUNK_STRIDE_BYTES,
    EPILOGUE,
    EPILOGUE_BYTES,
    FIXUP_TILE,
    NARROW_N,
    NEEDS,
    PIPELINED,
    REGISTRY,
    SPECIALIZED,
    SPLIT_K,
    STAGE_BYTES,
    STAGE_RANGE,
    STEPS,
    THREADS,
    TILE_BYTES,
    TMA_STORE_COLS,
    WGMMA,
    WGMMA_ALIGN,
    WGMMA_STAGE_BYTES,
    WGMMA_THREADS,
    WS_BLOCK_N,
    WS_REGISTERS,
    WS_STAGE_BYTES,
    WS_STAGING_BYTES,
    WS_THREADS,
    Step,
    default_stages,
    left_out,
    smem_bytes,
    stage_bytes,
    step_info,
    stored_name,
    swizzle128,
    threads,
    unsupported,
)
from .tma import filter_tensor_map, input_tensor_map, output_tensor_map  # noqa: F401
