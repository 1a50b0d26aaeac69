"""Run every probe kernel of the two probes chapters once, small, for compute-sanitizer (needs a GPU):

    compute-sanitizer --tool memcheck python -m kernels.probes.memcheck [compute | memory]

The kernels that compute a result are checked against their float64 or NumPy reference on poisoned
outputs and odd sizes, one verdict each; the timing probes run with small sizes and one repetition
(their numbers mean nothing under the sanitizer) and only have to run clean. Exits non-zero if a
check fails. It prints a count of the verdicts and every failure in full (``report.verdicts``), not a
line per pass.
"""

import sys

from ..harness import device
from . import report


def compute_runs():
    """(name, call) of the compute chapter: checks return a CheckResult, timing probes their rows."""
    from . import compute

    runs = [(f"check {v}", lambda v=v: compute.check_fma(v, threads=96, blocks=3)) for v in compute.FMA_KERNELS]
    runs += [(f"check {n}", lambda n=n: compute.check_math(n, iters=13)) for n in compute.MATH_FUNCS]
    return runs + [
        (
            "launch rate",
            lambda: compute.run_launch_rate([(1,), (7, 5), (3, 3, 3)], total_threads=4096, max_blocks=64, repeat=1),
        ),
        ("FMA throughput", lambda: compute.run_fma(list(compute.FMA_KERNELS), [96], blocks=3, iters=1000, repeat=1)),
        ("FMA tail", lambda: compute.run_fma_tail([1, 3], threads=96, iters=1000, repeat=1)),
        ("registers", lambda: compute.run_registers((32, 320), iters=4, threads=96, blocks_per_sm=1, repeat=1)),
        (
            "math functions",
            lambda: compute.run_math(
                list(compute.MATH_FUNCS), latency_iters=16, throughput_iters=16, blocks_per_sm=1, repeat=1
            ),
        ),
    ]


def memory_runs():
    """(name, call) of the memory chapter, as ``compute_runs``."""
    from . import batchnorm, launch_bound, memory, nchw, reduction

    versions = list(memory.PADDING_FILES)
    bn_cases = [("v0 three passes", 1), ("v1 two passes", 1)] + [
        ("v2 registers", k) for k in batchnorm.THREADS_PER_COLUMN
    ]
    runs = [(f"check divergence {d}", lambda d=d: memory.check_mem_divergence(d, n=1000)) for d in (0, 1, 31)]
    runs += [
        (f"check {v}", lambda v=v, ch=ch: memory.check_padding(v, ch, shape=(3, 16, 5, 7), p=2))
        for v in versions
        for ch in (1, 4)
    ]
    runs += [(f"check {v}", lambda v=v: reduction.check_block_sums(v)) for v in reduction.variants()]
    runs += [("check NCHW", lambda: nchw.check_nchw((3, 5, 7, 9), block=64))]
    runs += [
        (f"check {launch_bound.describe(v, o)}", lambda v=v, o=o: launch_bound.check_store(v, 4099, **o))
        for v, o in launch_bound.cases()
    ]
    runs += [(f"check {v} {k}", lambda v=v, k=k: batchnorm.check_batchnorm(v, k, pixels=333)) for v, k in bn_cases]
    return runs + [
        ("clock", lambda: memory.run_clock(spin=2**20)),
        ("hit latencies", lambda: memory.run_hit_latencies(steps=64)),
        ("latency sweep", lambda: memory.run_latency_sweep([2**14, 2**22], steps=64, l2_only=True)),
        ("cache line", lambda: memory.run_cache_line(steps=64)),
        ("memory divergence", lambda: memory.run_mem_divergence((0, 31), n=4099, repeat=1)),
        ("shared-memory latency", lambda: memory.run_smem_latency(steps=64)),
        ("bank conflicts", lambda: memory.run_bank_conflicts(range(1, 34), steps=16)),
        ("padding", lambda: memory.run_padding(versions, [1, 4], shape=(2, 8, 7, 7), repeat=1)),
        ("reduction", lambda: reduction.run_reduction(reduction.variants(), n=4099, repeat=1)),
        ("NCHW", lambda: nchw.run_nchw((2, 3, 5, 7), repeat=1)),
        ("launch bound", lambda: launch_bound.measure(4099, elems=(2,), repeat=1)),
        ("channels", lambda: memory.run_channels([128, 4224], lines=64, repeat=1)),
        ("BatchNorm", lambda: batchnorm.run_batchnorm(bn_cases, pixels=333, repeat=1)),
    ]


PARTS = {"compute": compute_runs, "memory": memory_runs}


def main(parts) -> int:
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"parts must be among {sorted(PARTS)}, got {sorted(unknown)}")
    if not device.on_gpu():
        print("needs a CUDA GPU; memcheck has nothing to check in the simulator")
        return 1
    checks, runs = [], []
    for part in parts or PARTS:
        for name, call in PARTS[part]():
            out = call()
            if isinstance(out, list):
                runs.append((name, len(out)))
            else:
                checks.append(out)
    print(report.verdicts(checks, runs))
    return 1 if any(not c.ok for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
