/* A stand-in for libcuda.so, so that benchmarks/c/launch_floor.c runs on a machine without a GPU
 * (tests/test_launch_floor_c.py). It implements only the entry points launch_floor calls, appends one
 * line per call to the file named by STANDIN_CUDA_LOG, and plays graph_profile.cu's tick kernel: every
 * kernel that "runs" adds 1 to the first 32-bit word of the allocated buffer (a launch outside a
 * capture runs at once; a captured launch adds a node; a graph launch runs its nodes). Device
 * ordinals >= 2 and every function name other than "tick" are refused, as the driver would. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned int g_memory[1024];
static int g_capturing = 0, g_nodes = 0;

static void note(const char* fmt, long a, long b) {
    const char* path = getenv("STANDIN_CUDA_LOG");
    if (!path) return;
    FILE* f = fopen(path, "a");
    if (!f) return;
    fprintf(f, fmt, a, b);
    fputc('\n', f);
    fclose(f);
}

CUresult cuGetErrorName(CUresult error, const char** name) {
    *name = error == CUDA_ERROR_NOT_FOUND ? "CUDA_ERROR_NOT_FOUND"
          : error == CUDA_ERROR_INVALID_DEVICE ? "CUDA_ERROR_INVALID_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}
CUresult cuInit(unsigned int flags) { note("cuInit %ld", flags, 0); return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
    note("cuDeviceGet %ld", ordinal, 0);
    if (ordinal < 0 || ordinal >= 2) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
    note("cuDevicePrimaryCtxRetain %ld", dev, 0); *ctx = (CUcontext)0xC0; return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) { note("cuCtxSetCurrent", 0, 0); return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule* mod, const void* image) {
    note("cuModuleLoadData", 0, 0); *mod = (CUmodule)0x10; return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* fn, CUmodule mod, const char* name) {
    note("cuModuleGetFunction", 0, 0);
    if (strcmp(name, "tick") != 0) return CUDA_ERROR_NOT_FOUND;
    *fn = (CUfunction)0xF0;
    return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
    note("cuStreamCreate %ld", flags, 0); *stream = (CUstream)0x51; return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr* p, size_t bytes) {
    note("cuMemAlloc %ld", (long)bytes, 0);
    g_memory[0] = 0xDEADBEEFu;  /* not zeroed, like fresh device memory */
    *p = (CUdeviceptr)(size_t)g_memory;
    return CUDA_SUCCESS;
}
CUresult cuMemsetD32(CUdeviceptr p, unsigned int value, size_t count) {
    note("cuMemsetD32 %ld %ld", value, (long)count);
    for (size_t i = 0; i < count && i < 1024; ++i) ((unsigned int*)(size_t)p)[i] = value;
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
    note("cuMemcpyDtoH %ld", (long)bytes, 0); memcpy(dst, (const void*)(size_t)src, bytes); return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int smem, CUstream stream, void** params,
                        void** extra) {
    note("cuLaunchKernel %ld %ld", gx * gy * gz, bx * by * bz);
    unsigned int* counter = (unsigned int*)(size_t)*(CUdeviceptr*)params[0];
    if (g_capturing) ++g_nodes; else ++counter[0];
    return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream stream) { note("cuStreamSynchronize", 0, 0); return CUDA_SUCCESS; }
CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
    note("cuStreamBeginCapture %ld", mode, 0); g_capturing = 1; g_nodes = 0; return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
    note("cuStreamEndCapture", 0, 0); g_capturing = 0; *graph = (CUgraph)0x6A; return CUDA_SUCCESS;
}
CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
    note("cuGraphInstantiate %ld", (long)flags, 0); *exec = (CUgraphExec)0xE0; return CUDA_SUCCESS;
}
CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) { note("cuGraphUpload", 0, 0); return CUDA_SUCCESS; }
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    note("cuGraphLaunch", 0, 0);
    g_memory[0] += (unsigned int)g_nodes;
    return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec exec) { note("cuGraphExecDestroy", 0, 0); return CUDA_SUCCESS; }
CUresult cuGraphDestroy(CUgraph graph) { note("cuGraphDestroy", 0, 0); return CUDA_SUCCESS; }
