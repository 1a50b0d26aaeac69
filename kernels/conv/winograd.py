"""WINOGRAD: the chapter's convolution by Winograd's minimal filtering algorithm F(2x2, 3x3), a different
algorithm rather than a stage of the direct one (its own deep-dive page, not the stage registry).

Each 2 x 2 block of outputs comes from a 4 x 4 block of inputs: Y = A^T [(G g G^T) * (B^T d B)] A with
``*`` elementwise, so a (channel, output channel) pair costs 16 multiply-adds per 4 outputs where the
direct convolution spends 36. ``numpy_conv`` is the algorithm in float64 NumPy; ``stage`` is the CUDA
C++ kernel (kernels/conv/winograd.cu) as a Stage that ``common.run`` and ``common.check_stage`` accept.
"""

from __future__ import annotations

import re
import sys
from itertools import pairwise

import numpy as np

from ..harness import accesses, check, cuda_cpp, device, perfmodel, sass
from . import common, cuda_stages, model, registry
from .common import Problem, Stage, problem_of, require_problem

NAME = "WINOGRAD"
TWO_PASS = "WINOGRAD two-pass"  # the first version: each thread's 8 tiles in one run, loads of V in two passes
HALO = "HALO TILE"  # the direct stage it is set beside: the same 16 x 16 tiles, halo and copies
FILE = "conv/winograd.cu"
KERNEL, FILTER_KERNEL = "conv_winograd", "winograd_filter"
BKC = 16  # input channels per shared-memory step, the .cu file's default
MIN_CC = 80  # the halo and filter copies are cp.async
BN, TILE, THREADS = 32, 16, 256  # output channels, output pixels per side and threads of a block
# What Nsight Compute reports for each kernel: warp instructions, issue activity and why warps waited
NCU = {
    "warp instructions": perfmodel.NCU_METRICS[0],
    "issue %": model.NCU_PIPES["issue %"],
    "shared-load wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    **model.NCU_STALLS,
}

# F(2x2, 3x3)'s transforms (Lavin and Gray, 2016): inputs B^T d B, filters G g G^T, outputs A^T m A.
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def numpy_conv(x_nchw, f_kcrs) -> np.ndarray:
    """The convolution (3x3, stride 1, zero padding 1) by F(2x2, 3x3) in float64 NumPy, NCHW: every
    4 x 4 input block transformed, 16 matrix products over the channels, every product transformed back."""
    x = np.asarray(x_nchw, dtype=np.float64)
    f = np.asarray(f_kcrs, dtype=np.float64)
    if x.ndim != 4 or f.ndim != 4:
        raise ValueError(f"x and f: expected 4-D NCHW and KCRS arrays, got shapes {x.shape} and {f.shape}")
    problem_of(x.shape, f.shape, "nchw")  # a 3x3 filter whose channels match the input's
    n, c, h, w = x.shape
    th, tw = -(-h // 2), -(-w // 2)  # 2 x 2 output blocks; odd sizes compute one padded row or column
    padded = np.zeros((n, c, 2 * th + 2, 2 * tw + 2))
    padded[:, :, 1 : h + 1, 1 : w + 1] = x
    # d[n, c, i, j, 4, 4]: the input block of output block (i, j) starts at padded row 2i, column 2j
    rows = np.arange(th)[:, None] * 2 + np.arange(4)
    cols = np.arange(tw)[:, None] * 2 + np.arange(4)
    d = padded[:, :, rows[:, None, :, None], cols[None, :, None, :]]
    v = np.einsum("ab,ncijbe,fe->ncijaf", BT, d, BT)
    u = np.einsum("ab,kcbe,fe->kcaf", G, f, G)
    m = np.einsum("ncijaf,kcaf->nkijaf", v, u)  # the 16 products, summed over the channels
    y = np.einsum("ab,nkijbe,fe->nkijaf", AT, m, AT)  # (n, k, i, j, 2, 2)
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, f.shape[0], 2 * th, 2 * tw)[:, :, :h, :w]


def tiles(p: Problem) -> int:
    """16 x 16 output tiles over all images of ``p`` (padded at the right and bottom edges)."""
    return p.n * -(-p.h // TILE) * -(-p.w // TILE)


def multiply_adds(p: Problem) -> dict[str, int]:
    """Multiply-adds of the direct convolution and of F(2x2, 3x3), each on the tiles its kernel computes
    (HALO TILE and WINOGRAD both cover the image in 16 x 16 tiles, padded at the edges)."""
    require_problem(p)
    pixels = tiles(p) * TILE * TILE
    return {"direct": 9 * p.c * p.k * pixels, "winograd": 16 * p.c * p.k * pixels // 4}


def smem_bytes(bkc: int = BKC) -> int:
    """Dynamic shared memory of a block, the .cu file's constants: two buffers of the 18 x 18 halo
    (rows padded by 4 floats) and of U's chunk, and V, reused as the output transform's staging (64
    tiles x 8 channels, each run of 4 tiles 4 floats further on)."""
    halo = (TILE + 2) * ((TILE + 2) * bkc + 4)
    v = max(16 * bkc * (TILE * TILE // 4 + 4), 16 * (64 * 8 + 64))
    return 4 * (2 * (halo + 16 * bkc * BN) + v)


def unsupported(props: dict, bkc: int = BKC) -> str | None:
    """Why the GPU ``props`` describes (device.properties() keys) cannot run WINOGRAD: its copies are
    ``cp.async`` (sm_80 on), and its block's shared memory must fit what one block may have; None if it can."""
    cc = int(props["cc"])
    if cc < MIN_CC:
        return f"{NAME} needs sm_{MIN_CC} or newer (cp.async); this GPU is sm_{cc}"
    if smem_bytes(bkc) > props["smem_per_block_optin_bytes"]:
        return (
            f"{NAME} needs {smem_bytes(bkc) / 1024:.0f} KB of shared memory per block; this GPU allows "
            f"{props['smem_per_block_optin_bytes'] / 1024:.0f} KB"
        )
    return None


def _options(bkc: int, one_pass: bool) -> tuple[str, ...]:
    return f"-DBKC={bkc}", f"-DV_ONE_PASS={int(one_pass)}"


def load_kernels(bkc: int = BKC, one_pass: bool = True) -> tuple:
    """(filter transform, convolution) of a build, loaded through CuPy (needs a GPU)."""
    opts = _options(bkc, one_pass)
    return cuda_cpp.load(FILE, FILTER_KERNEL, options=opts), cuda_cpp.load(FILE, KERNEL, options=opts)


def tile_runs(one_pass: bool = True) -> dict[str, int]:
    """RUN and SECOND as the .cu file defines them: thread tg's 8 tiles are RUN * tg + 0..3 and, SECOND
    tiles on, 4 more."""
    if not isinstance(one_pass, bool):
        raise TypeError(f"one_pass: True or False, got {one_pass!r}")
    text = cuda_cpp.source_path(FILE).read_text()
    found = re.findall(r"constexpr int (RUN|SECOND) = V_ONE_PASS \? (\d+) : (\d+);", text)
    if {name for name, _, _ in found} != {"RUN", "SECOND"}:
        raise RuntimeError(f"{FILE}: RUN and SECOND not found as 'constexpr int NAME = V_ONE_PASS ? a : b;'")
    return {name: int(a if one_pass else b) for name, a, b in found}


def v_load_passes(one_pass: bool = True) -> tuple[int, int]:
    """(passes, fewest): the passes through shared memory that a quarter warp's float4 load of V takes in
    the product loop, and the fewest its distinct words could take, from the .cu file's layout. Shared
    memory serves a 16-byte load a quarter warp (8 threads, 128 bytes) at a time; in a quarter, threads
    that read different words of one bank take turns (``accesses.bank_degree``). Threads 0-7 at channel
    0; every quarter reads the same banks (its group's V starts a multiple of 32 words further on)."""
    addresses = [4 * tile_runs(one_pass)["RUN"] * tg for tg in range(8)]  # bytes: a thread's first tile
    return accesses.bank_degree(addresses, 16), accesses.min_bank_degree(addresses, 16)


def v_loads(p: Problem) -> int:
    """Warp-wide float4 loads of V in the product loops of a launch on ``p``: 2 per channel (a thread's
    8 tiles) in each of a block's 8 warps, the channels padded to whole chunks."""
    require_problem(p)
    return 2 * -(-p.c // BKC) * BKC * (THREADS // 32) * blocks(p)


def compile_info(bkc: int = BKC, arch: str = "sm_90", one_pass: bool = True) -> cuda_cpp.Compiled:
    """Both kernels compiled (NVRTC) without a GPU: ptxas's registers and spills, and the cubin
    (``one_pass=False``: the first version, TWO_PASS)."""
    return cuda_cpp.compile_cubin(FILE, arch, _options(bkc, one_pass))


def warp_instructions(compiled: cuda_cpp.Compiled, kernel: str, trips: tuple[int, ...]) -> int:
    """Instructions one warp issues, from the SASS: the loops' bodies (innermost first, each inside the
    next) run ``trips`` times per trip of the loop around them (the last: per warp), everything else
    once. A kernel that exits early or branches is counted as if it ran every instruction."""
    ins = sass.disassemble(compiled, kernel)
    bodies = [b for b in sass.loops(ins) if len(b) > 1]  # not the 1-instruction spin after EXIT
    if len(bodies) != len(trips):
        raise ValueError(f"{kernel}: its SASS has {len(bodies)} loops, {len(trips)} trip counts given")
    if any(inner[0] not in outer or inner[-1] not in outer for inner, outer in pairwise(bodies)):
        raise ValueError(f"{kernel}: its loops are not nested one inside the next")
    issued, inside = 0, 0  # instructions of one trip of the current loop, and the length of the loop it holds
    for body, t in zip(bodies, trips, strict=True):
        issued = t * (len(body) - inside + issued)
        inside = len(body)
    return len(ins) - inside + issued


def block_instructions(p: Problem, halo: bool = False) -> tuple[int, int]:
    """(warp instructions one block issues, blocks an SM holds) for WINOGRAD or (``halo``) HALO TILE with
    its default tile on ``p``, from the SASS: a block's 8 warps each run the chunk loop once per chunk of
    input channels and the inner loop once per pair (WINOGRAD) or group of 4 (HALO TILE) of its channels."""
    require_problem(p)
    if halo:
        spec = registry.get(HALO)
        compiled, kernel, bkc, step = cuda_stages.compile_info(HALO), spec.kernel, spec.tile["BKC"], 4
        smem = spec.dynamic_smem_bytes(spec.tile)
    else:
        compiled, kernel, bkc, step, smem = compile_info(), KERNEL, BKC, 2, smem_bytes()
    warps = THREADS // 32  # both kernels' blocks have 256 threads
    per_warp = warp_instructions(compiled, kernel, (bkc // step, -(-p.c // bkc)))
    registers = next(r.registers for r in compiled.resources if r.kernel == kernel)
    by_smem = device.target_properties()["smem_per_sm_bytes"] // smem
    return warps * per_warp, min(perfmodel.register_warps(registers) // warps, by_smem)


def blocks(p: Problem, halo: bool = False) -> int:
    """Blocks WINOGRAD or (``halo``) HALO TILE launches on ``p``: 16 x 16 tiles x blocks of output channels."""
    return tiles(p) * -(-p.k // (registry.get(HALO).tile["BN"] if halo else BN))


def predicted_ms(p: Problem, halo_ms: float, sms: int) -> float:
    """WINOGRAD's time on ``p`` if its SMs issue instructions as fast as HALO TILE's did in ``halo_ms``:
    HALO's time scaled by the instructions an SM issues (a block's, times the waves of blocks)."""
    issued = []
    for halo in (False, True):
        per_block, resident = block_instructions(p, halo)
        issued.append(per_block * -(-blocks(p, halo) // (sms * resident)))
    return halo_ms * issued[0] / issued[1]


def stage(bkc: int = BKC, one_pass: bool = True) -> Stage:
    """WINOGRAD as a Stage (layout NHWC, filter (3, 3, C, K)): each launch transforms the filter and
    then convolves, so a timed call includes both. C and K must be multiples of 4 (16-byte copies).
    ``one_pass=False``: the first version, whose loads of V take two passes (TWO_PASS)."""
    if isinstance(bkc, bool) or not isinstance(bkc, int) or bkc < 8 or bkc % 8:
        raise ValueError(f"bkc: a positive multiple of 8 (the transform's 8-channel groups), got {bkc!r}")
    if not isinstance(one_pass, bool):
        raise TypeError(f"one_pass: True or False, got {one_pass!r}")
    name, smem = NAME if one_pass else TWO_PASS, smem_bytes(bkc)
    kernels, u_cache = {}, {}

    def launch(x, f, y, p):
        import cupy

        if smem > device.properties()["smem_per_block_optin_bytes"]:  # before CuPy's own error
            raise RuntimeError(f"{name} needs {smem} bytes of shared memory per block; this GPU allows less")
        if not kernels:
            kernels["filter"], kernels["conv"] = load_kernels(bkc, one_pass)
            kernels["conv"].max_dynamic_shared_size_bytes = smem
        x, f, y = (cupy.asarray(a) for a in (x, f, y))
        key = (p.c, p.k, cupy.cuda.Device().id)
        if key not in u_cache:  # the transformed filter's buffer, kept between calls of the same shape
            u_cache[key] = cupy.empty(16 * p.c * p.k, dtype=np.float32)
        u = u_cache[key]
        kernels["filter"](((p.c * p.k + 255) // 256,), (256,), (f, u, np.int32(p.c), np.int32(p.k)))
        args = (x, u, y, *(np.int32(v) for v in (p.n, p.h, p.w, p.c, p.k)))
        kernels["conv"]((tiles(p), -(-p.k // BN)), (THREADS,), args, shared_mem=smem)

    options = {"BKC": bkc, "V_ONE_PASS": int(one_pass)}
    return Stage(name, "nhwc", launch, c_multiple=4, k_multiple=4, needs_gpu=True, options=options)


# The kernels _launch_once runs, in this order: ncu names both WINOGRAD versions conv_winograd
PROFILED = (TWO_PASS, NAME, HALO)


def _profiled_stages() -> dict[str, Stage]:
    return {TWO_PASS: stage(one_pass=False), NAME: stage(), HALO: cuda_stages.stage(HALO)}


def ncu_rows(problem: str = "conv1") -> list[dict]:
    """WINOGRAD's two versions and HALO TILE once each on ``problem`` under Nsight Compute (``NCU``'s
    metrics), as results rows with metric "ncu <label>"; empty, with a line saying why, where ncu cannot run."""
    text = check.ncu_csv(["-m", __name__, problem], NCU.values(), "regex:conv_", "the profile")
    return [] if text is None else perfmodel.ncu_launch_rows(text, PROFILED, NCU, problem)


def _launch_once(problem: str) -> None:
    """The kernels of PROFILED once each on ``problem``, in that order (what ``ncu_rows`` profiles)."""
    p = common.PROBLEMS[problem]
    x, f = (device.xp().asarray(a) for a in common.to_layout(*common.random_inputs(p, seed=0), "nhwc"))
    stages = _profiled_stages()
    for name in PROFILED:
        common.run(stages[name], x, f)
    device.xp().cuda.Device().synchronize()


if __name__ == "__main__":
    _launch_once(sys.argv[1])
