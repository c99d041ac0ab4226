// NVFP4 scale layouts and the portable path of BlockScaledFp4Plan:
// - fp4_scales_linear_to_tiled / fp4_scales_tiled_to_linear: UE4M3 scales between the linear layout
//   ([rows, K/16] row-major) and the tiled one of CUTLASS's SM1xx block-scaled kernels and cuBLASLt's
//   VEC16_UE4M3 (fp4_common.cuh: 512-byte atoms of 128 rows x 4 K-blocks; rows padded to 128 and K/16 to
//   4, padding written as zeros).
// - fp4_decode_bf16: codes x block scales -> BF16, exactly (an E2M1 value has 2 significant bits and a
//   UE4M3 value 4, between 2^-10 and 2880: the product fits BF16's 8 bits and its range). The global
//   scale is not applied.
// - fp4_decode_scaled_bf16: BF16(codes x block scales x alpha * global_a * global_b), one rounding per
//   element (BlockScaledFp4Plan's epilogue="folded": the dense plan then writes BF16 D directly).
// - fp4_scale_output: D = BF16(alpha * global_a * global_b * C) for C in FP32.
// - fp4_alpha_product: *out = alpha * global_a * global_b (the CUTLASS NVFP4 kernels' device alpha).
#include <cuda_bf16.h>
#include "fp4_common.cuh"

#ifndef MIRCUDA_FP4_TILED
#define MIRCUDA_FP4_TILED 0
#endif

extern "C" __global__ void fp4_scales_linear_to_tiled(unsigned char* __restrict__ tiled,
                                                      const unsigned char* __restrict__ linear, int rows, int kblocks) {
    const int katoms = (kblocks + 3) >> 2;
    const long long total = (((long long)rows + 127) >> 7) * katoms * 512;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= total) return;
    const long long atom = t >> 9;
    const int within = int(t & 511);
    const long long row = (atom / katoms) * 128 + ((within >> 2) & 3) * 32 + (within >> 4);
    const int kb = int(atom % katoms) * 4 + (within & 3);
    tiled[t] = row < rows && kb < kblocks ? linear[row * kblocks + kb] : (unsigned char)0;
}

extern "C" __global__ void fp4_scales_tiled_to_linear(unsigned char* __restrict__ linear,
                                                      const unsigned char* __restrict__ tiled, int rows, int kblocks) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)rows * kblocks) return;
    linear[t] = tiled[fp4::tiled_offset(t / kblocks, int(t % kblocks), (kblocks + 3) >> 2)];
}

// The decode kernels of the portable path. A flat word index w covers 32-bit code word w (elements
// 8w .. 8w+7 of the row-major [rows, K] operand: rows are contiguous, so no row arithmetic is needed
// except for the tiled scale offset) and BF16 output uint4 w; its scale is that of 16-element block w/2.
// Thread t of a block handles words base + i * kThreads + t (i < kWords): every warp-wide load reads
// 128 contiguous bytes of codes and every 16-byte store writes 512 contiguous bytes of output (stores
// are 4x the loads' bytes, so they are the ones kept whole; a thread's 16-byte code load would spread
// its 64 output bytes over four partly-written sectors per instruction instead).
//
// Per scale a thread builds a table of the eight E2M1 magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6) times
// the scale as BF16 (four registers: low bytes and high bytes of the entries), then each code is one
// byte lookup (PRMT) in each table, two PRMTs interleave the bytes into BF16 pairs, and the code's sign
// is XORed in. No per-element floating-point operation: the table is built once per code word.
//  - fp4_decode_bf16: entry = q * s, exact (q s is a multiple of 2^-10 with at most 6 significant bits
//    and |q s| <= 6 * 480, so it is a BF16 value; q * s is formed exactly in FP32 and converted
//    exactly). The global scales are not applied.
//  - fp4_decode_scaled_bf16: entry = RN_bf16(q * s * alpha_eff) with alpha_eff = (alpha * global_a) *
//    global_b in FP32 (read when the kernel runs; the order of fp4_scale_output): one rounding to BF16
//    (round to nearest even) of the exact product of the exact q s and alpha_eff. The FP32 product is
//    taken round-to-odd (RZ, then the last bit set when the FMA residual is non-zero), which makes the
//    following round-to-nearest-even to BF16 (8 bits < 24 - 2) equal to one rounding of the exact
//    product; this holds while the product is not below 2^-126 (FP32's normal range), where a residual
//    under 2^-150 could be lost. Negative codes give -entry (RN is symmetric); code 0 gives
//    RN(0 * alpha_eff). The two lanes of a scale (adjacent words) each build half of the table and swap
//    halves (SHFL), as the eight rounded products cost more than the lookups.
namespace decode {

constexpr int kThreads = 256;  // _fp4.py DECODE_THREADS
constexpr int kWords = 4;      // _fp4.py DECODE_WORDS: code words (8 elements each) per thread

// The BF16 table: byte j of lo/hi (0..7 over lo0:lo1, hi0:hi1) is the low/high byte of entry j.
struct Table {
    unsigned lo0, lo1, hi0, hi1;
};

__device__ __forceinline__ unsigned pack(float lo, float hi) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&b);
}

// From BF16 pairs (entry 0, 1), (2, 3), (4, 5), (6, 7).
__device__ __forceinline__ Table make_table(unsigned p01, unsigned p23, unsigned p45, unsigned p67) {
    return {__byte_perm(p01, p23, 0x6420), __byte_perm(p45, p67, 0x6420), __byte_perm(p01, p23, 0x7531),
            __byte_perm(p45, p67, 0x7531)};
}

__device__ __forceinline__ Table exact_table(unsigned scale_byte) {
    const float s = fp4::ue4m3_to_float(scale_byte);
    return make_table(pack(0.0f, 0.5f * s), pack(s, 1.5f * s), pack(2.0f * s, 3.0f * s), pack(4.0f * s, 6.0f * s));
}

// f * a rounded to FP32 with round-to-odd (see above); an infinite or NaN product is kept as it is.
__device__ __forceinline__ float product_to_odd(float f, float a) {
    const float r = __fmul_rz(f, a);
    const float residual = __fmaf_rn(f, a, -r);
    const unsigned bits = __float_as_uint(r);
    return residual != 0.0f && (bits & 0x7fffffffu) != 0x7f800000u ? __uint_as_float(bits | 1u) : r;
}

// Lane pairs (2j, 2j+1) decode adjacent words of one scale: the even lane rounds entries 0..3, the odd
// one 4..7. Every lane of the warp must call this (the shuffles take the full mask).
__device__ __forceinline__ Table scaled_table(unsigned scale_byte, float alpha_eff, bool upper) {
    const float s = fp4::ue4m3_to_float(scale_byte);
    const float q0 = upper ? 2.0f : 0.0f, q1 = upper ? 3.0f : 0.5f, q2 = upper ? 4.0f : 1.0f,
                q3 = upper ? 6.0f : 1.5f;
    const unsigned a = pack(product_to_odd(q0 * s, alpha_eff), product_to_odd(q1 * s, alpha_eff));
    const unsigned b = pack(product_to_odd(q2 * s, alpha_eff), product_to_odd(q3 * s, alpha_eff));
    const unsigned a_other = __shfl_xor_sync(0xffffffffu, a, 1);
    const unsigned b_other = __shfl_xor_sync(0xffffffffu, b, 1);
    return upper ? make_table(a_other, b_other, a, b) : make_table(a, b, a_other, b_other);
}

// Eight E2M1 codes (element 2i in the low nibble of byte i) -> four BF16 pairs, elements 0..7 in order.
__device__ __forceinline__ uint4 decode_word(unsigned w, const Table& t) {
    const unsigned magnitude = w & 0x77777777u;  // selector nibbles 0..7 (PRMT's sign mode bit clear)
    const unsigned sign_even = (w << 4) & 0x80808080u;  // bit 7 of byte i: the sign of element 2i
    const unsigned sign_odd = w & 0x80808080u;          // bit 7 of byte i: the sign of element 2i + 1
    const unsigned l0 = __byte_perm(t.lo0, t.lo1, magnitude), h0 = __byte_perm(t.hi0, t.hi1, magnitude);
    const unsigned l1 = __byte_perm(t.lo0, t.lo1, magnitude >> 16), h1 = __byte_perm(t.hi0, t.hi1, magnitude >> 16);
    uint4 out;
    out.x = __byte_perm(l0, h0, 0x5140) ^ (__byte_perm(sign_even, sign_odd, 0x4400) & 0x80008000u);
    out.y = __byte_perm(l0, h0, 0x7362) ^ (__byte_perm(sign_even, sign_odd, 0x5511) & 0x80008000u);
    out.z = __byte_perm(l1, h1, 0x5140) ^ (__byte_perm(sign_even, sign_odd, 0x6622) & 0x80008000u);
    out.w = __byte_perm(l1, h1, 0x7362) ^ (__byte_perm(sign_even, sign_odd, 0x7733) & 0x80008000u);
    return out;
}

// Offset of the scale of flat 16-element block `block` ([rows, K/16] in order).
__device__ __forceinline__ long long scale_offset(unsigned long long block, unsigned kblocks) {
#if MIRCUDA_FP4_TILED
    // The plan keeps rows * K/16 below 2^32: a 32-bit division.
    const unsigned row = unsigned(block) / kblocks;
    return fp4::tiled_offset(row, int(unsigned(block) - row * kblocks), int((kblocks + 3) >> 2));
#else
    (void)kblocks;
    return (long long)block;
#endif
}

// out [rows, K] BF16 (16-byte aligned), q [rows, K/2] codes (4-byte aligned), K % 16 == 0.
template <bool kScaled>
__device__ __forceinline__ void run(__nv_bfloat16* __restrict__ out, const unsigned char* __restrict__ q,
                                    const unsigned char* __restrict__ scales, int rows, int k, float alpha_eff) {
    const unsigned long long words = (unsigned long long)rows * unsigned(k >> 3);
    const unsigned kblocks = unsigned(k) >> 4;
    const unsigned long long first = (unsigned long long)blockIdx.x * (kThreads * kWords) + threadIdx.x;
    const unsigned* codes = reinterpret_cast<const unsigned*>(q);
    unsigned w[kWords], s[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) {  // every load in flight before the first decode
        const unsigned long long word = first + (unsigned long long)i * kThreads;
        const bool live = word < words;
        w[i] = live ? __ldg(codes + word) : 0u;
        s[i] = live ? __ldg(scales + scale_offset(word >> 1, kblocks)) : 0u;
    }
    uint4* dst = reinterpret_cast<uint4*>(out);
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
        const unsigned long long word = first + (unsigned long long)i * kThreads;
        // words is even (K / 8 is): both lanes of a scale are live or neither, and all reach the shuffle.
        const Table t = kScaled ? scaled_table(s[i], alpha_eff, threadIdx.x & 1) : exact_table(s[i]);
        if (word < words) dst[word] = decode_word(w[i], t);
    }
}

}  // namespace decode

extern "C" __global__ void __launch_bounds__(decode::kThreads)
fp4_decode_bf16(__nv_bfloat16* __restrict__ out, const unsigned char* __restrict__ q,
                const unsigned char* __restrict__ scales, int rows, int k) {
    decode::run<false>(out, q, scales, rows, k, 1.0f);
}

extern "C" __global__ void __launch_bounds__(decode::kThreads)
fp4_decode_scaled_bf16(__nv_bfloat16* __restrict__ out, const unsigned char* __restrict__ q,
                       const unsigned char* __restrict__ scales, const float* global_a, const float* global_b,
                       float alpha, int rows, int k) {
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    decode::run<true>(out, q, scales, rows, k, scale);
}

extern "C" __global__ void fp4_scale_output(__nv_bfloat16* __restrict__ d, const float* __restrict__ c,
                                            const float* global_a, const float* global_b, float alpha, long long count) {
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
        d[i] = __float2bfloat16_rn(scale * c[i]);
}

// BlockScaledFp4Plan's CUTLASS path (SM12x): the epilogue reads one FP32 alpha from device memory, so the
// product alpha * global_a * global_b (the same order of multiplication as fp4_scale_output) is written
// there first, when the kernel runs (a captured graph follows the global scales' current values).
extern "C" __global__ void fp4_alpha_product(float* __restrict__ out, const float* global_a, const float* global_b,
                                             float alpha) {
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    *out = scale;
}
