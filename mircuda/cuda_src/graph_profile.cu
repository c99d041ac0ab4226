// Kernels of `python -m mircuda graph-profile` (mircuda/graph/_profile.py).

// One step of the measured sequence: about as cheap as an empty kernel, but it leaves a count that
// proves every launch and every replayed node ran. Launched with 1 block of 32 threads; launches on
// one stream run in order, so the plain increment does not race.
extern "C" __global__ void tick(unsigned int* counter) {
    if (threadIdx.x == 0) counter[0] += 1u;
}

// Busy-waits for `nanoseconds` of the GPU's global timer. Enqueued before a timed region, it keeps the
// device busy while the host enqueues the region, so the events around the region time the device's
// back-to-back execution rather than the host's enqueue rate.
extern "C" __global__ void spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
