"""kernels/harness/quantities.py: a quantity two chapters quote is read in one place, from the newest stored run."""

import pytest

from kernels.harness import quantities, results


def newest(chapter, kernel, metric, problem=None):
    rows = [
        r
        for r in results.load(chapter, results.REFERENCE_GPU)
        if r["kernel"] == kernel and r["metric"] == metric and problem in (None, r["problem"])
    ]
    return max(rows, key=lambda r: r["date"])


def test_latencies_are_the_newest_stored_probe_rows():
    ns, gpu = quantities.dram_latency_ns()
    row = newest("probes", "chase", "HBM latency ns")
    assert (ns, gpu) == (float(row["value"]), row["gpu"]) and 50 < ns < 5000
    cycles, _ = quantities.fma_latency_cycles()
    chain = newest("probes", "fma v2 double loop", "FMA per cycle per SM", "1 x 128 threads")
    assert cycles == pytest.approx(4 * 32 / float(chain["value"])) and 2 < cycles < 10  # 4 schedulers x 32 lanes
    step = float(newest("probes", "math", "latency", "FFMA (baseline)")["value"])
    assert cycles < step  # a loop's step adds its branch to the chain's latency


def test_launch_is_the_newest_stored_empty_kernel():
    us, gpu = quantities.empty_kernel_us()
    row = newest("probes", "empty kernel", "time", "1 x 1 thread")
    assert (us, gpu) == (float(row["value"]), row["gpu"]) and 0.5 < us < 50


def test_clocks_are_the_newest_stored_clock_probe_rows():
    mhz, gpu = quantities.sm_clock_mhz()
    row = newest("probes", "clock", "sm clock")
    assert (mhz, gpu) == (float(row["value"]), row["gpu"]) and 500 < mhz < 5000
    host, _ = quantities.host_clock_mhz()
    assert host == float(newest("probes", "clock", "sm clock, host timer")["value"]) and host != mhz


def test_copy_rate_is_the_largest_buffer_of_the_newest_run():
    gbps, _ = quantities.copy_gbps()
    rows = [r for r in results.load("machine", results.REFERENCE_GPU) if r["kernel"] == "memcpy"]
    last = max(r["date"] for r in rows)
    sizes = {int(r["problem"].split()[0]): float(r["value"]) for r in rows if r["date"] == last}
    assert gbps == sizes[max(sizes)]


def test_fma_ceiling_is_the_best_of_the_newest_sweep_and_sms_the_device_table():
    gflops, _ = quantities.fma_gflops()
    latest = results.latest("machine", results.REFERENCE_GPU)
    sweep = [float(r["value"]) for (k, _, m), r in latest.items() if k == "fma_chains" and m == "GFLOP/s"]
    assert len(sweep) > 1 and gflops == max(sweep)
    sms, _ = quantities.sm_count()
    assert sms == int(float(newest("machine", "device", "sms")["value"])) and sms > 0


def test_a_quantity_never_measured_is_a_clear_error():
    with pytest.raises(LookupError, match="run that chapter on a GPU"):
        quantities.stored("probes", "no such kernel", "latency")
