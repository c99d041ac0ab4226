// NVFP4 helpers shared by fp4_vector.cu, fp4_quantize.cu and fp4_layout.cu: E2M1 and UE4M3 decoding,
// E2M1 round-to-nearest-even encoding, and the two scale layouts. mircuda inlines this file where a
// kernel includes it (NVRTC gets no include path).
//
// The format is NVIDIA ModelOpt's / TensorRT-LLM's NVFP4: E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and
// negatives), two per byte, element 2i in the low nibble (CUTLASS's and PyTorch's float4_e2m1fn_x2
// order); one UE4M3 scale per 16 consecutive K-elements; one FP32 global scale per tensor.
#pragma once
#include <cuda_fp16.h>

// cvt.rn.f16x2.e2m1x2 exists on the family-specific Blackwell targets only (PTX ISA 8.6: sm_100a,
// sm_101a, sm_120a; PTX ISA 8.8: the sm_100f/sm_101f/sm_120f families). NVRTC defines
// __CUDA_ARCH_FAMILY_SPECIFIC__ for the "f" and "a" targets and __CUDA_ARCH_SPECIFIC__ for the "a" ones;
// every other target (sm_80, sm_90, plain sm_120) takes the exact software decode below.
#if (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000) || \
    (defined(__CUDA_ARCH_SPECIFIC__) && __CUDA_ARCH_SPECIFIC__ >= 1000)
#define MIRCUDA_FP4_CVT 1
#else
#define MIRCUDA_FP4_CVT 0
#endif

namespace fp4 {

// Decoded values carry a factor 2^-14 (the software decode reads the E2M1 magnitude bits as an FP16
// whose exponent field is E2M1's: e -> 2^(e-15) (1 + m/2), subnormal m -> 2^-15 = 0.5 * 2^-14); the
// cvt path is scaled to match. decode_bias() undoes it and is folded into the block scales (a power of
// two: exact).
__device__ __forceinline__ float decode_bias() { return 16384.0f; }  // 2^14

// Two E2M1 codes (low nibble: element 2i, high: 2i+1) of the low byte of `b` -> half2 (x = 2i) times 2^-14.
__device__ __forceinline__ unsigned e2m1x2_to_half2_scaled(unsigned b) {
#if MIRCUDA_FP4_CVT
    unsigned h;
    asm("{\n\t.reg .b8 q;\n\tcvt.u8.u32 q, %1;\n\tcvt.rn.f16x2.e2m1x2 %0, q;\n\t}" : "=r"(h) : "r"(b & 0xffu));
    // multiply both halves by 2^-14 (exact: every E2M1 value times 2^-14 is a normal or subnormal FP16)
    const __half2 s = __floats2half2_rn(1.0f / 16384.0f, 1.0f / 16384.0f);
    __half2 v = *reinterpret_cast<__half2*>(&h);
    v = __hmul2(v, s);
    return *reinterpret_cast<unsigned*>(&v);
#else
    return ((b & 0x8u) << 12) | ((b & 0x7u) << 9) | ((b & 0x80u) << 24) | ((b & 0x70u) << 21);
#endif
}

// A 32-bit word of eight E2M1 codes -> four half2 (elements 0..7 in order) times 2^-14.
__device__ __forceinline__ void decode8(unsigned w, unsigned (&h)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = e2m1x2_to_half2_scaled(w >> (8 * i));
}

__device__ __forceinline__ float2 half2_to_float2(unsigned u) {
    __half2 h;
    *reinterpret_cast<unsigned*>(&h) = u;
    return __half22float2(h);
}

// A UE4M3 scale byte -> float: its bits (sign dropped) read as an FP16 with E4M3's exponent field
// (2^(e-15) (1 + m/8); subnormal m 2^-17) times 2^8 give E4M3's 2^(e-7) (1 + m/8) and m 2^-9, exactly.
// 0x7f (E4M3's NaN) decodes to 480; the quantizer never writes it.
__device__ __forceinline__ float ue4m3_to_float(unsigned u) {
    return __half2float(__ushort_as_half((unsigned short)((u & 0x7fu) << 7))) * 256.0f;
}

// Round-to-nearest-even onto E2M1 (satfinite: magnitudes above 6 give 6); returns the 4-bit code with
// the sign of `v` (so -0.1 gives 0x8, negative zero, as ml_dtypes' float4_e2m1fn does). NaN gives 0x7
// (the quantizer's inputs are finite).
__device__ __forceinline__ unsigned float_to_e2m1(float v) {
    const unsigned sign = __float_as_uint(v) >> 31 << 3;
    const float a = fabsf(v);
    unsigned c;
    // The grid 0, 0.5, 1, 1.5, 2, 3, 4, 6; a tie goes to the even code (mantissa bit 0).
    if (a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 5;
    else if (a <= 5.0f) c = 6;
    else c = 7;
    if (a != a) c = 7;
    return sign | c;
}

// Byte offset of the scale of (row, K-block kb) in the linear layout: [rows, K/16] row-major.
__device__ __forceinline__ long long linear_offset(long long row, int kb, int kblocks) {
    return row * kblocks + kb;
}

// Byte offset in the tiled layout of CUTLASS's SM1xx block-scaled kernels and cuBLASLt's VEC16_UE4M3
// (cutlass/detail/sm100_blockscaled_layout.hpp, Sm1xxBlockScaledBasicChunk::SfKMajorAtom tiled with
// tile_to_shape(..., Step<_2,_1,_3>)): 512-byte atoms of 128 rows x 4 K-blocks, atoms K-fastest
// (`katoms` = ceil(K/64) per 128 rows); inside an atom row r = 32 r1 + r0 and K-block j sit at
// r0 * 16 + r1 * 4 + j.
__device__ __forceinline__ long long tiled_offset(long long row, int kb, int katoms) {
    const long long atom = (row >> 7) * katoms + (kb >> 2);
    return atom * 512 + (row & 31) * 16 + ((row >> 5) & 3) * 4 + (kb & 3);
}

}  // namespace fp4
