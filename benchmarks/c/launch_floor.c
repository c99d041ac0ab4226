/* The C floor of the launch benchmark: cuLaunchKernel through the driver API, nothing else.
 * Usage: launch_floor KERNEL.cubin SYMBOL CALLS_PER_BATCH BATCHES
 * Prints one line: the median over batches of host microseconds per launch. */
#include <cuda.h>
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

int main(int argc, char** argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s KERNEL.cubin SYMBOL CALLS BATCHES\n", argv[0]); return 2; }
    int calls = atoi(argv[3]), batches = atoi(argv[4]);
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
    char* image = malloc(size); if (fread(image, 1, size, f) != (size_t)size) return 2; fclose(f);
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUstream stream; CUdeviceptr p;
    CHECK(cuInit(0)); CHECK(cuDeviceGet(&dev, 0)); CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx)); CHECK(cuModuleLoadData(&mod, image)); CHECK(cuModuleGetFunction(&fn, mod, argv[2]));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)); CHECK(cuMemAlloc(&p, 4096));
    void* params[] = {&p};
    double* per = malloc(sizeof(double) * batches);
    for (int b = -3; b < batches; ++b) {  /* three warm-up batches */
        CHECK(cuStreamSynchronize(stream));
        double t0 = now_us();
        for (int i = 0; i < calls; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0));
        double t1 = now_us();
        if (b >= 0) per[b] = (t1 - t0) / calls;
    }
    CHECK(cuStreamSynchronize(stream));
    qsort(per, batches, sizeof(double), cmp);
    printf("%.4f\n", per[batches / 2]);
    return 0;
}
