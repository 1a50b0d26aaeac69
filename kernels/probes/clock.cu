// The SM clock, measured: one thread spins on clock64() for `spin` cycles and reads the nanosecond
// timer on either side. cycles / ns = GHz, the clock every latency probe converts cycles with.
#include "arch.cuh"

extern "C" __global__ void clock_rate(long long spin, long long* out) {
    const unsigned long long ns0 = probe_timer();
    const long long c0 = probe_clock();
    long long c = c0;
    while (c - c0 < spin) c = probe_clock();
    const unsigned long long ns1 = probe_timer();
    out[0] = c - c0;
    out[1] = (long long)(ns1 - ns0);
}
