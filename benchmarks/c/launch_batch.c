/* The C floor as a function, for benchmarks/launch_paired.py: one batch of cuLaunchKernel calls timed in C,
 * called through ctypes from the process that times mircuda's launch, so that both sides of each ratio
 * run in the same process, on the same context, stream and kernel, one batch apart.
 *
 * double mircuda_launch_batch_us(CUfunction fn, CUstream stream, CUdeviceptr arg, int calls)
 *   Synchronizes the stream (untimed), then enqueues `calls` launches of fn (1 block of 32 threads, the one
 *   pointer argument `arg`) and returns host microseconds per launch; a negative value is the failing
 *   CUresult, negated. */
#include <cuda.h>
#include <time.h>

static double now_us(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

double mircuda_launch_batch_us(CUfunction fn, CUstream stream, CUdeviceptr arg, int calls) {
    void* params[] = {&arg};
    CUresult r = cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS) return -(double)r;
    double t0 = now_us();
    for (int i = 0; i < calls; ++i) {
        r = cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0);
        if (r != CUDA_SUCCESS) return -(double)r;
    }
    return (now_us() - t0) / calls;
}
