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

// Streamed weight-code loads of the decode kernels: read once, so not kept in L1. MIRCUDA_FP4_L2_128B=1 adds
// the .L2::128B prefetch-size hint (PTX ISA 7.4, sm_75+: L2 fetches the whole 128-byte line), as the dense and
// FP8 decode kernels do: a lane's 8 or 16 bytes leave the rest of the line to other lanes or steps.
#ifndef MIRCUDA_FP4_L2_128B
#define MIRCUDA_FP4_L2_128B 0
#endif
#if MIRCUDA_FP4_L2_128B
#define MIRCUDA_FP4_LD_CODES "ld.global.nc.L1::no_allocate.L2::128B"
#else
#define MIRCUDA_FP4_LD_CODES "ld.global.nc.L1::no_allocate"
#endif
// A row's two adjacent UE4M3 scale bytes (K-blocks kb and kb + 1, kb even: adjacent in the linear and the tiled
// layout alike) in bits 0..15, one 16-bit load; `p` must be 2-byte aligned (the plans require aligned scales where
// their kernels read pairs).
__device__ __forceinline__ unsigned load_scale_pair(const unsigned char* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// A lane's 16 (N = 4 words) or 8 (N = 2) bytes of weight codes.
template <int N>
__device__ __forceinline__ void load_codes(const unsigned char* p, unsigned (&v)[N]) {
    static_assert(N == 2 || N == 4, "load_codes reads 8 or 16 bytes");
    if constexpr (N == 4) {
        asm volatile(MIRCUDA_FP4_LD_CODES ".v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "l"(p));
    } else {
        asm volatile(MIRCUDA_FP4_LD_CODES ".v2.u32 {%0, %1}, [%2];" : "=r"(v[0]), "=r"(v[1]) : "l"(p));
    }
}

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

// ---- Word decoders for the decode kernels (fp4_vector.cu, fp4_mma_gemv.cu) ----------------------------
// decode_word() turns a 32-bit word of eight E2M1 codes (element j in bits 4j..4j+3) into four half2 h[0..3]
// holding value * 2^-kDecodeLog2 exactly, in the ORDER of the chosen variant: half i holds elements
// word_element(i, 0) (low half) and word_element(i, 1) (high half). A dot product only needs both of its
// operands decoded (or indexed) the same way, so the kernels pair the halves with the matching activation
// elements. MIRCUDA_FP4_DECODE picks the variant (one compile-time choice per kernel, so one GPU run can
// compare them; fp4-profile --sweep does):
//   0 bytes: decode8() above, byte by byte, natural order (the cvt.rn.f16x2.e2m1x2 path where it exists),
//            about 6 integer operations per byte; x 2^-14.
//   1 pairs: half i = (element i, element i + 4): FP16 bits ((w << (9 - 4i)) & 0x0E000E00) |
//            ((w << (12 - 4i)) & 0x80008000): both nibbles move with one shift, no per-byte extraction;
//            2 shifts + 2 LOP3 per two values (one shift for i = 3); x 2^-14 (the E2M1 magnitude bits read
//            as FP16 exponent bits 0..1 and mantissa bit 9, as decode8 does).
//   2 e4m3:  E2M1 -> E4M3 bytes with bit operations (4 values per 32-bit result: the magnitude to bits 2..4,
//            the sign to bit 7 of each byte: E4M3's 2^(e-7)(1 + m/2) and subnormal 0.5m * 2^-6, exactly
//            value * 2^-6), then cvt.rn.f16x2.e4m3x2 (PTX ISA 7.8, sm_89+: SASS F2FP.F16.E4M3.UNPACK_B
//            on sm_90) per two values; 7 integer operations per word. Half 0 = (0, 2), 1 = (4, 6),
//            2 = (1, 3), 3 = (5, 7); x 2^-6. Needs cc >= 8.9.
//   3 table: a shared-memory table byte -> half2 of the exact FP16 values (x 1), replicated once per bank
//            (32 copies of 256 words = 32 KiB: lane l reads copy l, so a warp's lookups never conflict):
//            byte offset (((w >> 8j) & 0xff) << 7) | (lane << 2), one shift and one LOP3 per two values,
//            then one LDS. Natural order. The kernel fills it once per block (decode_table_fill).
#define MIRCUDA_FP4_DECODE_BYTES 0
#define MIRCUDA_FP4_DECODE_PAIRS 1
#define MIRCUDA_FP4_DECODE_E4M3 2
#define MIRCUDA_FP4_DECODE_TABLE 3
#ifndef MIRCUDA_FP4_DECODE
#define MIRCUDA_FP4_DECODE MIRCUDA_FP4_DECODE_BYTES
#endif
#if MIRCUDA_FP4_DECODE < 0 || MIRCUDA_FP4_DECODE > 3
#error "MIRCUDA_FP4_DECODE must be 0 (bytes), 1 (pairs), 2 (e4m3) or 3 (table)"
#endif
#if MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_E4M3 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "MIRCUDA_FP4_DECODE=2 (e4m3) needs compute capability >= 8.9 (cvt.rn.f16x2.e4m3x2)"
#endif

constexpr int kDecodeLog2 = MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_E4M3 ? 6
                            : MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_TABLE ? 0 : 14;

// 2^kDecodeLog2 as a float (undoes the decode's factor; a power of two: exact).
__device__ __forceinline__ float decode_unbias() { return (float)(1u << kDecodeLog2); }

// The element (0..7 of the word) in half i's low (hi = 0) or high (hi = 1) half.
__host__ __device__ constexpr int word_element(int i, int hi) {
    return MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_PAIRS  ? i + 4 * hi
           : MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_E4M3 ? 4 * (i & 1) + (i >> 1) + 2 * hi
                                                            : 2 * i + hi;
}

#if MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_TABLE
constexpr int kTableWords = 256 * 32;
// Byte b's copy for lane l at word b * 32 + l (bank l).
__shared__ unsigned decode_table[kTableWords];

// The exact FP16 bits of an E2M1 code (sign, then 0, 0.5, 1, 1.5, 2, 3, 4, 6 by magnitude).
__device__ __forceinline__ unsigned e2m1_to_half_bits(unsigned c) {
    const unsigned mag = c & 7u;
    const unsigned high = mag == 0u ? 0u : mag == 1u ? 0x38u : 0x3Cu + 2u * (mag - 2u);
    return ((c & 8u) << 12) | (high << 8);
}

// Every thread of the block calls this once before any decode_word(); it ends with __syncthreads().
// It reads nothing from global memory, so the kernels run it before griddepcontrol.wait.
__device__ __forceinline__ void decode_table_fill() {
    for (int i = threadIdx.x; i < kTableWords; i += blockDim.x) {
        const unsigned b = (unsigned)i >> 5;
        decode_table[i] = e2m1_to_half_bits(b & 15u) | (e2m1_to_half_bits(b >> 4) << 16);
    }
    __syncthreads();
}
#else
__device__ __forceinline__ void decode_table_fill() {}
#endif

#if MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_E4M3
// Two E4M3 bytes (the low and the high 16 bits of v) -> two half2 (exact: E4M3 values are FP16 values).
__device__ __forceinline__ void e4m3x4_to_half2x2(unsigned v, unsigned& lo, unsigned& hi) {
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
        : "=r"(lo), "=r"(hi) : "r"(v));
}
#endif

// Eight E2M1 codes -> four half2 in word_element() order, each value times 2^-kDecodeLog2 (exact).
__device__ __forceinline__ void decode_word(unsigned w, unsigned (&h)[4]) {
#if MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_PAIRS
    h[0] = ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
    h[1] = ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
    h[2] = ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
    h[3] = ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
#elif MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_E4M3
    const unsigned even = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);  // elements 0, 2, 4, 6
    const unsigned odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);        // elements 1, 3, 5, 7
    e4m3x4_to_half2x2(even, h[0], h[1]);
    e4m3x4_to_half2x2(odd, h[2], h[3]);
#elif MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_TABLE
    const char* base = reinterpret_cast<const char*>(decode_table);
    const unsigned lane4 = (threadIdx.x & 31u) << 2;
    h[0] = *reinterpret_cast<const unsigned*>(base + (((w << 7) & 0x7F80u) | lane4));
    h[1] = *reinterpret_cast<const unsigned*>(base + (((w >> 1) & 0x7F80u) | lane4));
    h[2] = *reinterpret_cast<const unsigned*>(base + (((w >> 9) & 0x7F80u) | lane4));
    h[3] = *reinterpret_cast<const unsigned*>(base + (((w >> 17) & 0x7F80u) | lane4));
#else
    decode8(w, h);
#endif
}

// Half2 i (0..3, a compile-time constant at every call) of decode_word(w, h): the same value, factor and
// order, computed alone (e4m3: one cvt, not decode_word's pair of them, which a caller taking the halves one
// at a time would run twice: fp4_grouped.cu's mma operands). The table variant reads decode_word's.
__device__ __forceinline__ unsigned decode_half(unsigned w, int i) {
#if MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_PAIRS
    const unsigned mag = i < 3 ? (w << (9 - 4 * i)) : (w >> 3);
    const unsigned sign = i < 3 ? (w << (12 - 4 * i)) : w;
    return (mag & 0x0E000E00u) | (sign & 0x80008000u);
#elif MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_E4M3
    const unsigned v = i < 2 ? ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u)   // elements 0, 2, 4, 6
                             : ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);        // elements 1, 3, 5, 7
    unsigned h;
    if (i & 1)
        asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, h;\n\t}" : "=r"(h) : "r"(v));
    else
        asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\t}" : "=r"(h) : "r"(v));
    return h;
#elif MIRCUDA_FP4_DECODE == MIRCUDA_FP4_DECODE_TABLE
    unsigned h[4];
    decode_word(w, h);
    return h[i];
#else
    return e2m1x2_to_half2_scaled(w >> (8 * i));
#endif
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

// The byte of scale block kb of row `row` in the tiled layout (katoms = ceil(K / 64)) or the linear one
// (kblocks = K / 16), chosen at compile time.
template <bool Tiled>
__device__ __forceinline__ long long scale_offset(long long row, int kb, int kblocks, int katoms) {
    if constexpr (Tiled) return tiled_offset(row, kb, katoms);
    else return linear_offset(row, kb, kblocks);
}

// scale_offset() split in two: a part of the row alone and a part of the K-block alone, whose sum it is
// in both layouts. A kernel walking K computes the row part once per row and the column part once per
// step for all its rows (32-bit: linear kb < 2^27 for any int K; tiled about 8 K, below 2^31 for K <= 2^28,
// wrapping above K = 2^29, so the plans refuse tiled scales with K > 2^28: TILED_DECODE_MAX_K).
template <bool Tiled>
__device__ __forceinline__ long long scale_row_offset(long long row, int kblocks, int katoms) {
    if constexpr (Tiled) return ((row >> 7) * katoms) * 512 + (row & 31) * 16 + ((row >> 5) & 3) * 4;
    else return row * kblocks;
}
template <bool Tiled>
__device__ __forceinline__ unsigned scale_col_offset(int kb) {
    if constexpr (Tiled) return ((unsigned)kb >> 2) * 512u + ((unsigned)kb & 3u);
    else return (unsigned)kb;
}

}  // namespace fp4
