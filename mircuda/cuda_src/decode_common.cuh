// Helpers shared by the decode kernels (dense_vector.cu, batched_gemv.cu): output conversion, and the
// pieces of programmatic dependent launch. mircuda inlines this file where a kernel includes it (NVRTC
// gets no include path); nvcc finds it beside the kernel. Each including file defines
// MIRCUDA_PDL_TRIGGER_LATE (0 or 1) first.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace decode {

__device__ __forceinline__ float load_out(const float* p) { return *p; }
__device__ __forceinline__ float load_out(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load_out(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_out(__half* p, float v) { *p = __float2half_rn(v); }

// Programmatic dependent launch (cc >= 9.0; the plans launch with programmatic stream serialization
// there). Below cc 9.0, or launched without the attribute, these are no-ops.
#if __CUDA_ARCH__ >= 900
// Asks L2 for the 128-byte line holding `p` (a hint: no register, no fault, no ordering). Safe before
// pdl_wait(): L2 is the point of coherence, so a line the previous kernel writes later stays current.
__device__ __forceinline__ void prefetch_l2(const unsigned short* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
#endif

// Lets the next kernel of the stream start: at the start of each block (early) or after its loads
// (late), as MIRCUDA_PDL_TRIGGER_LATE says; each kernel calls both, one of them does it.
__device__ __forceinline__ void pdl_trigger_early() {
#if __CUDA_ARCH__ >= 900 && !MIRCUDA_PDL_TRIGGER_LATE
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_trigger_late() {
#if __CUDA_ARCH__ >= 900 && MIRCUDA_PDL_TRIGGER_LATE
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Waits until the previous kernel of the stream has finished and its writes are visible: nothing it
// may write is read before this.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// c += A B on the tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX ISA 7.0, sm_80+; fragments
// as the PTX ISA's "Matrix fragments for mma.m16n8k16": A {a0..a3}, B {b0, b1}, C/D {c[0..3]}), the one FP16 mma
// of the decode kernels.
__device__ __forceinline__ void mma_f16(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                        unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace decode
