/* The C floor of the launch benchmarks: the driver API called from C, nothing else.
 *
 * Usage: launch_floor KERNEL.cubin SYMBOL CALLS_PER_BATCH BATCHES [NODES [DEVICE]]
 *
 * The kernel takes one pointer argument (a 4096-byte device buffer) and runs as 1 block of 32 threads.
 * Each batch enqueues CALLS_PER_BATCH times on one non-blocking stream, the stream synchronized
 * between batches; three warm-up batches are discarded.
 * - 4 arguments: each call is one cuLaunchKernel on device 0 (benchmarks/launch_overhead.py).
 *   Prints one line: the median over batches of host microseconds per launch.
 * - NODES = 0: the same launch loop on device DEVICE (default 0).
 * - NODES >= 1: NODES launches are captured from the stream into a graph (cuStreamBeginCapture in
 *   thread-local mode, cuStreamEndCapture, cuGraphInstantiate with flags 0, cuGraphUpload on the
 *   stream, as mircuda's Stream.capture does), and each call is one cuGraphLaunch of it
 *   (python -m mircuda graph-profile). The first line is the median host microseconds per replay.
 * With 5 or 6 arguments the buffer is zeroed before the first batch and a second line follows:
 * "counter U", the buffer's first 32-bit word after the last batch, so that a counting kernel (e.g.
 * graph_profile.cu's tick, +1 per launch) proves that every launch or replayed node ran.
 * Exit status: 0; 1 when a driver call fails (its name on stderr); 2 on bad arguments. */
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char* n_ = 0; \
    cuGetErrorName(r_, &n_); fprintf(stderr, "%s failed: %s\n", #call, n_ ? n_ : "?"); return 1; } } while (0)

static double now_us(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}
static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y);
}
/* A whole decimal integer in [least, most], else a message naming the argument and 0. */
static int parse_int(const char* text, const char* name, long least, long most, int* out) {
    char* end = 0;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < least || v > most) {
        fprintf(stderr, "launch_floor: %s: expected an integer in [%ld, %ld], received '%s'\n", name, least, most, text);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 5 || argc > 7) {
        fprintf(stderr, "usage: %s KERNEL.cubin SYMBOL CALLS BATCHES [NODES [DEVICE]]\n", argv[0]);
        return 2;
    }
    int calls, batches, nodes = 0, ordinal = 0;
    if (!parse_int(argv[3], "CALLS", 1, 100000000, &calls) || !parse_int(argv[4], "BATCHES", 1, 1000000, &batches)
        || (argc > 5 && !parse_int(argv[5], "NODES", 0, 1000000, &nodes))
        || (argc > 6 && !parse_int(argv[6], "DEVICE", 0, 1023, &ordinal)))
        return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
    char* image = malloc(size); if (fread(image, 1, size, f) != (size_t)size) return 2; fclose(f);
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUstream stream; CUdeviceptr p;
    CHECK(cuInit(0)); CHECK(cuDeviceGet(&dev, ordinal)); CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx)); CHECK(cuModuleLoadData(&mod, image)); CHECK(cuModuleGetFunction(&fn, mod, argv[2]));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)); CHECK(cuMemAlloc(&p, 4096));
    void* params[] = {&p};
    int counting = argc > 5;
    if (counting) CHECK(cuMemsetD32(p, 0, 4096 / 4));
    CUgraph graph = 0; CUgraphExec exec = 0;
    if (nodes > 0) {
        CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        for (int i = 0; i < nodes; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0));
        CHECK(cuStreamEndCapture(stream, &graph));
        CHECK(cuGraphInstantiate(&exec, graph, 0));
        CHECK(cuGraphUpload(exec, stream));
    }
    double* per = malloc(sizeof(double) * batches);
    for (int b = -3; b < batches; ++b) {  /* three warm-up batches */
        CHECK(cuStreamSynchronize(stream));
        double t0 = now_us();
        if (exec) {
            for (int i = 0; i < calls; ++i) CHECK(cuGraphLaunch(exec, stream));
        } else {
            for (int i = 0; i < calls; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0));
        }
        double t1 = now_us();
        if (b >= 0) per[b] = (t1 - t0) / calls;
    }
    CHECK(cuStreamSynchronize(stream));
    qsort(per, batches, sizeof(double), cmp);
    printf("%.4f\n", per[batches / 2]);
    if (counting) {
        unsigned int counter = 0;
        CHECK(cuMemcpyDtoH(&counter, p, sizeof counter));
        printf("counter %u\n", counter);
    }
    if (exec) { CHECK(cuGraphExecDestroy(exec)); CHECK(cuGraphDestroy(graph)); }
    return 0;
}
