"""WINOGRAD: the chapter's convolution by Winograd's minimal filtering algorithm F(2x2, 3x3), a different
algorithm rather than a stage of the direct one (its own deep-dive page, not the stage registry).

Each 2 x 2 block of outputs comes from a 4 x 4 block of inputs: Y = A^T [(G g G^T) * (B^T d B)] A with
``*`` elementwise, so a (channel, output channel) pair costs 16 multiply-adds per 4 outputs where the
direct convolution spends 36. ``numpy_conv`` is the algorithm in float64 NumPy; ``stage`` is the CUDA
C++ kernel (kernels/conv/winograd.cu) as a Stage that ``common.run`` and ``common.check_stage`` accept.
"""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np

from ..harness import check, cuda_cpp, device, perfmodel, sass
from . import common, cuda_stages, model, registry
from .common import Problem, Stage, problem_of, require_problem

NAME = "WINOGRAD"
HALO = "HALO TILE"  # the direct stage it is set beside: the same 16 x 16 tiles, halo and copies
FILE = "conv/winograd.cu"
KERNEL, FILTER_KERNEL = "conv_winograd", "winograd_filter"
BKC = 16  # input channels per shared-memory step, the .cu file's default
BN, TILE, THREADS = 32, 16, 256  # output channels, output pixels per side and threads of a block
# What Nsight Compute reports for each kernel: warp instructions, issue activity and why warps waited
NCU = {"warp instructions": perfmodel.NCU_METRICS[0], "issue %": model.NCU_PIPES["issue %"], **model.NCU_STALLS}

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
    (rows padded by 4 floats) and of U's chunk, and V, reused as the output transform's staging."""
    halo = (TILE + 2) * ((TILE + 2) * bkc + 4)
    v = max(16 * bkc * (TILE * TILE // 4 + 4), 16 * (64 * 8 + 32))
    return 4 * (2 * (halo + 16 * bkc * BN) + v)


def compile_info(bkc: int = BKC, arch: str = "sm_90") -> cuda_cpp.Compiled:
    """Both kernels compiled (NVRTC) without a GPU: ptxas's registers and spills, and the cubin."""
    return cuda_cpp.compile_cubin(FILE, arch, (f"-DBKC={bkc}",))


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


def stage(bkc: int = BKC) -> Stage:
    """WINOGRAD as a Stage (layout NHWC, filter (3, 3, C, K)): each launch transforms the filter and
    then convolves, so a timed call includes both. C and K must be multiples of 4 (16-byte copies)."""
    if isinstance(bkc, bool) or not isinstance(bkc, int) or bkc < 8 or bkc % 8:
        raise ValueError(f"bkc: a positive multiple of 8 (the transform's 8-channel groups), got {bkc!r}")
    opts, smem = (f"-DBKC={bkc}",), smem_bytes(bkc)
    kernels, u_cache = {}, {}

    def launch(x, f, y, p):
        import cupy

        if smem > device.properties()["smem_per_block_optin_bytes"]:  # before CuPy's own error
            raise RuntimeError(f"{NAME} needs {smem} bytes of shared memory per block; this GPU allows less")
        if not kernels:
            kernels["filter"] = cuda_cpp.load(FILE, FILTER_KERNEL, options=opts)
            kernels["conv"] = cuda_cpp.load(FILE, KERNEL, options=opts)
            kernels["conv"].max_dynamic_shared_size_bytes = smem
        x, f, y = (cupy.asarray(a) for a in (x, f, y))
        key = (p.c, p.k, cupy.cuda.Device().id)
        if key not in u_cache:  # the transformed filter's buffer, kept between calls of the same shape
            u_cache[key] = cupy.empty(16 * p.c * p.k, dtype=np.float32)
        u = u_cache[key]
        kernels["filter"](((p.c * p.k + 255) // 256,), (256,), (f, u, np.int32(p.c), np.int32(p.k)))
        args = (x, u, y, *(np.int32(v) for v in (p.n, p.h, p.w, p.c, p.k)))
        kernels["conv"]((tiles(p), -(-p.k // BN)), (THREADS,), args, shared_mem=smem)

    return Stage(NAME, "nhwc", launch, c_multiple=4, k_multiple=4, needs_gpu=True, options={"BKC": bkc})


def ncu_rows(problem: str = "conv1") -> list[dict]:
    """WINOGRAD and HALO TILE once each on ``problem`` under Nsight Compute (``NCU``'s metrics), as
    results rows with metric "ncu <label>"; empty, with a line saying why, where ncu cannot run."""
    ncu = check.cuda_tool("ncu", "the profile")
    if not ncu:
        return []
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))}
    cmd = [ncu, "--csv", "--kernel-name", "regex:conv_", "--metrics", ",".join(NCU.values())]
    out = subprocess.run(
        [*cmd, sys.executable, "-m", __name__, problem], capture_output=True, text=True, timeout=600, cwd=root, env=env
    )
    if out.returncode != 0 or '"Metric Name"' not in out.stdout:
        raise RuntimeError(f"ncu failed ({out.returncode}): {(out.stderr or out.stdout)[-2000:]}")
    names = {KERNEL: NAME, registry.get(HALO).kernel: HALO}
    labels = {metric: label for label, metric in NCU.items()}
    return [
        {"kernel": names[kernel], "problem": problem, "metric": f"ncu {labels[metric]}", "value": value, "unit": ""}
        for kernel, metric, value in perfmodel.ncu_values(out.stdout)
        if kernel in names and metric in labels
    ]


def _launch_once(problem: str) -> None:
    """WINOGRAD and HALO TILE once each on ``problem`` (what ``ncu_rows`` profiles)."""
    p = common.PROBLEMS[problem]
    x, f = (device.xp().asarray(a) for a in common.to_layout(*common.random_inputs(p, seed=0), "nhwc"))
    for s in (stage(), cuda_stages.stage(HALO)):
        common.run(s, x, f)
    device.xp().cuda.Device().synchronize()


if __name__ == "__main__":
    _launch_once(sys.argv[1])
