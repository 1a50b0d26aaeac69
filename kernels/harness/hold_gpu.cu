// Keeps the GPU busy for a given time so that the host can enqueue every timed repetition behind
// it: the repetitions then run back to back, and no event pair measures the host's launch latency.
extern "C" __global__ void hold_gpu(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
