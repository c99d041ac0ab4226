// The grouped NVFP4 plans' portable path (mircuda/matmul/_moe.py; any cc >= 8.0): for every group g of
// the device-resident routing (row_counts[g], offsets[g], matrix_indices[g]),
//   D[r, n] = alpha_per_matrix[e] * sum_k (qa[r,k] sa[r,k/16]) (qb_e[n,k] sb_e[n,k/16]),   e = matrix_indices[g],
// for the rows r in [offsets[g], offsets[g] + row_counts[g]) (FP32 accumulation, BF16 out). Operands are
// NVFP4 as fp4_common.cuh describes them: A [capacity, K/2] bytes of E2M1 pairs with LINEAR UE4M3 scales
// [capacity, K/16]; the bank [E, N, K/2] (matrix e at byte e N K/2) with its scales per matrix in the
// linear ([N, K/16]) or the tiled layout (N padded to 128, K/16 to 4), matrices back to back.
//
// Two kernels, launched in this order on the plan's stream:
// - fp4_grouped_setup (fp4_grouped_table.cuh, shared with the vector variant of fp4_vector.cu): validates
//   the routing, sets the error flag, writes alpha_per_matrix and the tile list (prefix[g] = the m-tiles of
//   MIRCUDA_MOE_MT rows of the groups before g, prefix[G] their total).
// - fp4_grouped_bf16 (grid: x walks the m-tiles, persistent; y the weight-row blocks; z the operand set):
//   a block finds its m-tile's group in prefix (ballots over prefix held in registers for G <= 128, else a
//   binary search), then multiplies that group's rows by a
//   block of weight rows of its matrix. Weights are the 16-row A operand of mma.sync.m16n8k16 (FP16 x FP16
//   -> FP32), activation rows the n8 columns (rows past the group's count are zeros, never loaded); the
//   E2M1 x UE4M3 decode is exact in FP16 (fp4_mma_gemv.cu's argument: q s 2^-14 is a multiple of 2^-24
//   below 0.17), the 2^-28 undone with alpha at the end. Three variants (MIRCUDA_MOE_MODE):
//   1 split K (decode: few rows per group): 16 or 32 weight rows per block (MIRCUDA_MOE_FRAGS 1 or 2), the
//     block's 4, 8 or 16 warps (MIRCUDA_MOE_WARPS) take the K steps in turn through a register ring of 2-4
//     load stages (MIRCUDA_MOE_STAGES) and meet in shared memory; every lane decodes its weights and
//     activations in registers (MIRCUDA_MOE_DECODE below); at most 128 registers (__launch_bounds__);
//   0 split N: each warp owns 16 weight rows and the whole K, decoding both operands in registers (the
//     warps share the activation codes through L1);
//   2 staged (many rows per group): each warp owns 32 weight rows (two A fragments, so every B fragment
//     feeds two mmas), all warps walk K together; per K step the block decodes the m-tile's activation
//     chunk ONCE into shared memory (FP16, scale applied; double-buffered, one __syncthreads per step) and
//     the warps read their B fragments from there with one conflict-free 8-byte load each (rows padded
//     so the 16 lanes of a half-warp hit 32 distinct banks). Weights stream from global into registers,
//     the next step's loads in flight.
// Rows no group covers are never written. Every index is bounded: no out-of-bounds access for any routing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define MIRCUDA_PDL_TRIGGER_LATE 1
#ifndef MIRCUDA_MOE_DECODE
#define MIRCUDA_MOE_DECODE 0
#endif
#if MIRCUDA_MOE_DECODE < 0 || MIRCUDA_MOE_DECODE > 2
#error "MIRCUDA_MOE_DECODE must be 0 (bytes), 1 (pairs) or 2 (e4m3)"
#endif
// The E2M1 decoder is fp4_common.cuh's decode_word (its numbering: 0 bytes, 1 pairs, 2 e4m3).
#define MIRCUDA_FP4_DECODE MIRCUDA_MOE_DECODE
#include "decode_common.cuh"
#include "fp4_common.cuh"

#ifndef MIRCUDA_MOE_MODE
#define MIRCUDA_MOE_MODE 1
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "fp4_grouped_bf16 needs compute capability >= 8.0 (mma.sync.m16n8k16 with FP16 operands)"
#endif

#include "fp4_grouped_table.cuh"

namespace {

static_assert(kK % 16 == 0, "K must be a multiple of 16 (one UE4M3 scale per 16 K-elements)");
static_assert(kMT == 8 || kMT == 16 || kMT == 32 || kMT == 64, "MIRCUDA_MOE_MT must be 8, 16, 32 or 64");
constexpr int kMode = MIRCUDA_MOE_MODE;
static_assert(kMode >= 0 && kMode <= 2, "MIRCUDA_MOE_MODE must be 0 (split N), 1 (split K) or 2 (staged)");
static_assert(kMode != 2 || kMT >= 16, "the staged variant takes m-tiles of 16, 32 or 64 rows");

constexpr int kN8 = kMT / 8;                      // n8 tiles of activation rows
constexpr bool kWide = kK % 32 == 0;
constexpr int kE = kWide ? 32 : 16;               // columns per lane per step
constexpr int kWords = kE / 8;                    // 32-bit words of codes per row per lane
constexpr int kGroups = kE / 16;                  // 16-K scale groups per lane per step
constexpr int kMmas = kE / 4;                     // mmas per n8 tile per step
constexpr int kChunk = 4 * kE;                    // columns per warp step
constexpr int kSteps = (kK + kChunk - 1) / kChunk;
#ifndef MIRCUDA_MOE_WARPS
#define MIRCUDA_MOE_WARPS 8
#endif
constexpr int kWarps = MIRCUDA_MOE_WARPS;  // per block; 4, 8 or 16 for split_k, 8 for the others
static_assert(kWarps == 4 || kWarps == 8 || kWarps == 16, "MIRCUDA_MOE_WARPS must be 4, 8 or 16");
static_assert(kMode == 1 || kWarps == 8, "MIRCUDA_MOE_WARPS applies to split_k only");
// split_k keeps at most 128 registers per thread (2048 / kWarps / 32 / 4 blocks: 16 warps per SM with
// 64K registers) so that enough warps, each with its ring of loads, keep bytes in flight.
constexpr int kMinBlocks = kMode == 1 ? 512 / (kWarps * 32) : 1;

// -- the E2M1 decode (MIRCUDA_MOE_DECODE) ------------------------------------------------------------
// decode_half(w, i) turns the 32-bit word w of eight E2M1 codes (element j in bits 4j..4j+3) into its i-th
// half2 (i = 0..3) holding value * 2^-kDecodeLog2 exactly; half i holds elements word_element(i, 0) (low)
// and word_element(i, 1) (high). Both mma operands of a dot product go through the same decode, so any
// fixed order of the eight elements gives the same sum; the staged variant writes its shared-memory
// activations in that order too. Variants (one compile-time choice, so one GPU run can compare them):
//   0 bytes: fp4::e2m1x2_to_half2_scaled per byte (cvt.rn.f16x2.e2m1x2 on the sm_1x0f/a targets, else the
//            software decode), natural order; x 2^-14.
//   1 pairs: half i = (element i, element i + 4): FP16 bits ((w << (9 - 4i)) & 0x0E000E00) |
//            ((w << (12 - 4i)) & 0x80008000): the E2M1 magnitude bits land on FP16's exponent bits 0..1 and
//            mantissa bit 9, the sign on bit 15, for two elements with one shift each; x 2^-14.
//   2 e4m3:  the word to E4M3 bytes with bit operations (even elements ((w << 2) & 0x1C1C1C1C) |
//            ((w << 4) & 0x80808080), odd ones ((w >> 2) & 0x1C1C1C1C) | (w & 0x80808080): E2M1's
//            2^(e-1)(1 + m/2) and 0.5m become E4M3's 2^(e-7)(1 + m/2) and (4m) 2^-9, value x 2^-6 exactly),
//            then the hardware cvt.rn.f16x2.e4m3x2 (PTX ISA 7.8, cc >= 8.9) per two elements; half 0 =
//            (0, 2), 1 = (4, 6), 2 = (1, 3), 3 = (5, 7); x 2^-6.
// The UE4M3 scale goes to FP16 with bit operations: (u & 0x7f) << 7 read as FP16 is scale x 2^-8 exactly
// (E4M3's exponent field on FP16's low exponent bits, subnormals included). The e4m3 route multiplies by
// that (x 2^-6 x 2^-8), the others by it times 2^8 (an exact HMUL2 by 256: scale <= 480): the operand is
// q s 2^-14 for every variant, a multiple of 2^-24 below 0.17, exact in FP16 (fp4_mma_gemv.cu's argument),
// and the 2^-28 of a product is undone with alpha at the end.
constexpr int kDecode = MIRCUDA_MOE_DECODE;
// Scale pairs (1, the default; 0 the former byte loads, kept for A/B runs): in split_n and split_k, with 16-byte code
// loads (K % 32 == 0) a lane's two 16-K groups have adjacent scale bytes (linear: kb, kb + 1; tiled: kb even), read
// by one 16-bit load per weight and activation row and step, as fp4_mma_gemv.cu does; the plans then require 2-byte
// aligned a_scales and b_scales. H200, 2026-12-02 (benchmarks/results/moe_scale_pairs_ab.json): moe-profile's Mixtral
// layer at 16 tokens (split_k) 2.51 and 2.43 TB/s with the pairs, 2.36 and 2.36 without, alternated processes.
#ifndef MIRCUDA_MOE_SCALE_PAIRS
#define MIRCUDA_MOE_SCALE_PAIRS 1
#endif
static_assert(fp4::kDecodeLog2 == (kDecode == 2 ? 6 : 14), "the scale handling below assumes 2^-6 or 2^-14");

// Half2 i (0..3, a compile-time constant at every call) of word w (fp4_common.cuh: decode_word's half i).
__device__ __forceinline__ unsigned decode_half(unsigned w, int i) { return fp4::decode_half(w, i); }

__device__ __forceinline__ long long weight_scale_offset(long long row, int kb) {
#if MIRCUDA_MOE_TILED
    return fp4::tiled_offset(row, kb, kKAtoms);
#else
    return fp4::linear_offset(row, kb, kKBlocks);
#endif
}

__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
    __half2 x = *reinterpret_cast<__half2*>(&a);
    const __half2 y = *reinterpret_cast<__half2*>(&b);
    x = __hmul2(x, y);
    return *reinterpret_cast<unsigned*>(&x);
}

// A raw UE4M3 byte -> the half2 the decoded codes are multiplied by (scale x 2^-8 for e4m3, else x 1).
__device__ __forceinline__ unsigned scale_half2(unsigned u) {
    const unsigned s = (u & 0x7fu) << 7;
    const unsigned bits = s | (s << 16);
    return kDecode == 2 ? bits : hmul2(bits, 0x5C005C00u);  // 0x5C00: FP16 256
}

// Half2 i of a lane's codes (word i / 4, half i % 4) times its scale.
__device__ __forceinline__ unsigned operand(const unsigned (&codes)[kWords], int i, unsigned scale) {
    return hmul2(decode_half(codes[i >> 2], i & 3), scale);
}

// Weight-row fragments per warp: split_k takes MIRCUDA_MOE_FRAGS (1 or 2) 16-row A fragments per block,
// every B fragment feeding all of them; split_n and staged fix theirs (1 and 2).
#ifndef MIRCUDA_MOE_FRAGS
#define MIRCUDA_MOE_FRAGS 1
#endif
constexpr int kFrags = kMode == 2 ? 2 : kMode == 0 ? 1 : MIRCUDA_MOE_FRAGS;
static_assert(kFrags == 1 || kFrags == 2, "MIRCUDA_MOE_FRAGS must be 1 or 2");
static_assert(kMode == 1 || MIRCUDA_MOE_FRAGS == 1, "MIRCUDA_MOE_FRAGS applies to split_k only");
// Register ring of load stages (split_k, split_n): stages - 1 K steps of loads in flight while one computes.
#ifndef MIRCUDA_MOE_STAGES
#define MIRCUDA_MOE_STAGES 2
#endif
constexpr int kStages = MIRCUDA_MOE_STAGES;
static_assert(kStages >= 2 && kStages <= 4, "MIRCUDA_MOE_STAGES must be 2, 3 or 4");

// One warp's view of a tile: 16 kFrags weight rows of matrix e, up to kMT activation rows from `row0`.
struct Tile {
    const unsigned char* w;   // the matrix's codes
    const unsigned char* sw;  // the matrix's scales
    const unsigned char* x;   // A
    const unsigned char* sx;  // A's linear scales
    long long wrow[kFrags][2];  // weight rows 16 f + g and 16 f + g + 8 (clamped to N - 1)
    long long xrow0;          // the tile's first activation row
    int rows;                 // activation rows of the tile (1 .. kMT)
    int t;                    // lane & 3
    int g;                    // lane >> 2
};

#if MIRCUDA_MOE_MODE != 2
constexpr bool kPairs = MIRCUDA_MOE_SCALE_PAIRS != 0 && kGroups == 2;
constexpr int kScaleRegs = kPairs ? 1 : kGroups;  // registers of one row's scales per step
// Every step's columns inside K when K is a multiple of the warp step: the loads need no predicate.
constexpr bool kFullSteps = kK % kChunk == 0;

// One K step of a lane's operands: codes, and the scale BYTES (converted when consumed, so no instruction
// waits on a load before the step that uses it); with kPairs a row's two bytes in bits 0..15 of one register.
struct Stage {
    unsigned w[kFrags][2][kWords];
    unsigned x[kN8][kWords];
    unsigned sw[kFrags][2][kScaleRegs];
    unsigned sx[kN8][kScaleRegs];
};

// Scale q of a row's step: its byte, or byte q of the pair.
__device__ __forceinline__ unsigned scale_byte(const unsigned (&v)[kScaleRegs], int q) {
    if constexpr (kPairs) return q == 0 ? v[0] : v[0] >> 8;
    else return v[q];
}

__device__ __forceinline__ void load_stage(Stage& st, const Tile& tl, int step) {
    const int col = step * kChunk + kE * tl.t;
    // K % kE == 0: the lane's columns are all inside K or all outside (kFullSteps: always inside)
    const bool in = kFullSteps || col < kK;
    const int kb = col >> 4;
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (in) {
                fp4::load_codes(tl.w + tl.wrow[f][r] * (kK / 2) + col / 2, st.w[f][r]);
            } else {
#pragma unroll
                for (int i = 0; i < kWords; ++i) st.w[f][r][i] = 0u;
            }
            if constexpr (kPairs) {
                st.sw[f][r][0] = in ? fp4::load_scale_pair(tl.sw + weight_scale_offset(tl.wrow[f][r], kb)) : 0u;
            } else {
#pragma unroll
                for (int q = 0; q < kGroups; ++q)
                    st.sw[f][r][q] = in ? (unsigned)__ldg(tl.sw + weight_scale_offset(tl.wrow[f][r], kb + q)) : 0u;
            }
        }
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
        const int m = tl.g + 8 * j;
        const bool live = in && m < tl.rows;
        const long long row = tl.xrow0 + m;
#pragma unroll
        for (int h = 0; h < kWords / 2; ++h) {
            uint2 v = make_uint2(0u, 0u);
            if (live) v = __ldg(reinterpret_cast<const uint2*>(tl.x + row * (kK / 2) + col / 2) + h);
            st.x[j][2 * h] = v.x;
            st.x[j][2 * h + 1] = v.y;
        }
        if constexpr (kPairs) {
            st.sx[j][0] = live ? fp4::load_scale_pair(tl.sx + fp4::linear_offset(row, kb, kKBlocks)) : 0u;
        } else {
#pragma unroll
            for (int q = 0; q < kGroups; ++q)
                st.sx[j][q] = live ? (unsigned)__ldg(tl.sx + fp4::linear_offset(row, kb + q, kKBlocks)) : 0u;
        }
    }
}

__device__ __forceinline__ void consume(float (&acc)[kFrags][kN8][4], const Stage& st) {
    static_assert(kMmas == 4 * kGroups, "4 mmas (16 K-elements) per scale group");
#pragma unroll
    for (int q = 0; q < kGroups; ++q) {
        unsigned sw[kFrags][2], sx[kN8];
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
            sw[f][0] = scale_half2(scale_byte(st.sw[f][0], q));
            sw[f][1] = scale_half2(scale_byte(st.sw[f][1], q));
        }
#pragma unroll
        for (int j = 0; j < kN8; ++j) sx[j] = scale_half2(scale_byte(st.sx[j], q));
#pragma unroll
        for (int jm = 4 * q; jm < 4 * q + 4; ++jm) {
            unsigned a[kFrags][4];
#pragma unroll
            for (int f = 0; f < kFrags; ++f) {
                a[f][0] = operand(st.w[f][0], 2 * jm, sw[f][0]);
                a[f][1] = operand(st.w[f][1], 2 * jm, sw[f][1]);
                a[f][2] = operand(st.w[f][0], 2 * jm + 1, sw[f][0]);
                a[f][3] = operand(st.w[f][1], 2 * jm + 1, sw[f][1]);
            }
#pragma unroll
            for (int j = 0; j < kN8; ++j) {
                const unsigned b0 = operand(st.x[j], 2 * jm, sx[j]);
                const unsigned b1 = operand(st.x[j], 2 * jm + 1, sx[j]);
#pragma unroll
                for (int f = 0; f < kFrags; ++f) decode::mma_f16(acc[f][j], a[f][0], a[f][1], a[f][2], a[f][3], b0, b1);
            }
        }
    }
}

// The warp's K steps first, first + stride, ... through a ring of kStages register stages: the loads of
// the next kStages - 1 steps are in flight while one step computes; a slot is refilled right after it is
// consumed. Every ring index is a compile-time constant (the inner loop is unrolled), so the ring lives in
// registers.
__device__ __forceinline__ void run_steps(float (&acc)[kFrags][kN8][4], const Tile& tl, int first, int stride) {
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
#pragma unroll
        for (int j = 0; j < kN8; ++j) acc[f][j][0] = acc[f][j][1] = acc[f][j][2] = acc[f][j][3] = 0.f;
    const int n = first < kSteps ? (kSteps - first + stride - 1) / stride : 0;  // warp-uniform
    Stage ring[kStages];
#pragma unroll
    for (int s = 0; s < kStages; ++s)
        if (s < n) load_stage(ring[s], tl, first + s * stride);
    for (int base = 0; base < n; base += kStages) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            const int i = base + s;
            if (i < n) {
                consume(acc, ring[s]);
                if (i + kStages < n) load_stage(ring[s], tl, first + (i + kStages) * stride);
            }
        }
    }
}

#endif  // MIRCUDA_MOE_MODE != 2

__device__ __forceinline__ void store_tile(__nv_bfloat16* d, const float (&acc)[kN8][4], const Tile& tl,
                                           long long nrow0, float scale) {
#pragma unroll
    for (int j = 0; j < kN8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int m = 8 * j + 2 * tl.t + (e & 1);
            const long long n = nrow0 + tl.g + 8 * (e >> 1);
            if (m < tl.rows && n < kN) decode::store_out(d + (tl.xrow0 + m) * kN + n, scale * acc[j][e]);
        }
}

#if MIRCUDA_MOE_MODE == 2
// -- the staged variant (MIRCUDA_MOE_MODE 2) ------------------------------------------------------------
// Shared memory holds one K step (kChunk columns) of the m-tile's kMT activation rows, decoded: column
// c = E t + e (the lane-t chunk of fp4_mma's mapping) of row m at half index m kRowHalves + t kChunkHalves
// + e. A lane (g, t) reads, for mma jm of n8 tile j, the 4 halves at row 8 j + g, e = 4 jm .. 4 jm + 3:
// b0 = columns E t + 4 jm, +1 (k 2t, 2t+1) and b1 = +2, +3 (k 2t+8, 2t+9), the columns its weight bytes
// 2 jm and 2 jm + 1 hold. Padding: a lane chunk is 2E + 8 bytes, a row 4 (2E + 8): in a half-warp
// (g 0..3, t 0..3) the 8-byte loads start at banks (g (2E+8) + t (2E+8) / 4 + 2 jm) mod 32, all distinct
// and even for E = 32 (t: 0, 18, 4, 22; g: 0, 8, 16, 24) and E = 16 (t: 0, 10, 20, 30; g: 0, 8, 16, 24).
constexpr int kChunkHalves = kE + 4;
constexpr int kRowHalves = 4 * kChunkHalves;
constexpr int kStageHalves = kMT * kRowHalves;
constexpr int kUnitsPerRow = kChunk / 16;       // 16-column scale blocks per row per step
constexpr int kUnits = kMT * kUnitsPerRow;       // decode units per step (one 8-byte code load each)

// Half index in a stage of (row m, column c of the step).
__device__ __forceinline__ int staged_index(int m, int c) { return m * kRowHalves + (c / kE) * kChunkHalves + c % kE; }

// Decode step `step` of the tile's activation rows into `buf` (every thread of the block takes part).
__device__ __forceinline__ void stage_activations(__half* buf, const Tile& tl, int step) {
    for (int u = threadIdx.x; u < kUnits; u += kWarps * 32) {
        const int m = u / kUnitsPerRow;
        const int c0 = (u % kUnitsPerRow) * 16;
        const int col = step * kChunk + c0;
        uint2 v = make_uint2(0u, 0u);
        unsigned sc = 0u;
        if (m < tl.rows && col < kK) {  // K % 16 == 0: the 16 columns are all inside K or all outside
            const long long row = tl.xrow0 + m;
            v = __ldg(reinterpret_cast<const uint2*>(tl.x + row * (kK / 2) + col / 2));
            sc = scale_half2(__ldg(tl.sx + fp4::linear_offset(row, col >> 4, kKBlocks)));
        }
        uint2* out = reinterpret_cast<uint2*>(buf + staged_index(m, c0));  // 8-byte aligned: 2E + 8 and 2 c0 are
#pragma unroll
        for (int h = 0; h < 4; ++h) {  // half2 2h and 2h + 1 of the 16 columns (word h / 2) per 8-byte store
            const unsigned w = h < 2 ? v.x : v.y;
            const unsigned lo = hmul2(decode_half(w, (2 * h) & 3), sc);
            const unsigned hi = hmul2(decode_half(w, (2 * h + 1) & 3), sc);
            out[h] = make_uint2(lo, hi);
        }
    }
}

struct WeightStage {
    unsigned w[2][2][kWords];   // [fragment][row g, g + 8][words]
    unsigned sw[2][2][kGroups];
};

// Weight rows of the warp: fragment f, half r -> row nrow0 + 16 f + g + 8 r (clamped to N - 1).
__device__ __forceinline__ void load_weights(WeightStage& st, const unsigned char* w, const unsigned char* sw,
                                             const long long (&rows)[2][2], int t, int step) {
    const int col = step * kChunk + kE * t;
    const bool in = col < kK;
    const int kb = col >> 4;
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (in) {
                fp4::load_codes(w + rows[f][r] * (kK / 2) + col / 2, st.w[f][r]);
            } else {
#pragma unroll
                for (int i = 0; i < kWords; ++i) st.w[f][r][i] = 0u;
            }
#pragma unroll
            for (int q = 0; q < kGroups; ++q)
                st.sw[f][r][q] = in ? scale_half2(__ldg(sw + weight_scale_offset(rows[f][r], kb + q))) : 0u;
        }
}

__device__ __forceinline__ void consume_staged(float (&acc)[2][kN8][4], const WeightStage& st, const __half* buf,
                                               int g, int t) {
#pragma unroll
    for (int jm = 0; jm < kMmas; ++jm) {
        const int q = jm / 4;
        unsigned a[2][4];
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            a[f][0] = operand(st.w[f][0], 2 * jm, st.sw[f][0][q]);
            a[f][1] = operand(st.w[f][1], 2 * jm, st.sw[f][1][q]);
            a[f][2] = operand(st.w[f][0], 2 * jm + 1, st.sw[f][0][q]);
            a[f][3] = operand(st.w[f][1], 2 * jm + 1, st.sw[f][1][q]);
        }
#pragma unroll
        for (int j = 0; j < kN8; ++j) {
            const uint2 b = *reinterpret_cast<const uint2*>(buf + (8 * j + g) * kRowHalves + t * kChunkHalves + 4 * jm);
#pragma unroll
            for (int f = 0; f < 2; ++f) decode::mma_f16(acc[f][j], a[f][0], a[f][1], a[f][2], a[f][3], b.x, b.y);
        }
    }
}

#endif  // MIRCUDA_MOE_MODE == 2

}  // namespace

extern "C" __global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    fp4_grouped_bf16(const int* __restrict__ ws, const float* __restrict__ alpha_per_matrix,
                     const unsigned char* __restrict__ a1, const unsigned char* __restrict__ sa1,
                     const unsigned char* __restrict__ b1, const unsigned char* __restrict__ sb1,
                     __nv_bfloat16* __restrict__ d1, const unsigned char* __restrict__ a2,
                     const unsigned char* __restrict__ sa2, const unsigned char* __restrict__ b2,
                     const unsigned char* __restrict__ sb2, __nv_bfloat16* __restrict__ d2) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int set = kSets == 2 ? (int)blockIdx.z : 0;
    const unsigned char* a = set ? a2 : a1;
    const unsigned char* sa = set ? sa2 : sa1;
    const unsigned char* b = set ? b2 : b1;
    const unsigned char* sb = set ? sb2 : sb1;
    __nv_bfloat16* d = set ? d2 : d1;
#if MIRCUDA_MOE_MODE == 1
    const long long nrow0 = (long long)blockIdx.y * 16 * kFrags;
    __shared__ float partial[kWarps - 1][kFrags][kN8][4][32];
#elif MIRCUDA_MOE_MODE == 0
    const long long nrow0 = ((long long)blockIdx.y * kWarps + warp) * 16;
#else
    const long long nrow0 = ((long long)blockIdx.y * kWarps + warp) * 32;
    __shared__ __align__(16) __half stage[2][kStageHalves];
    long long wrows[2][2];
#pragma unroll
    for (int f = 0; f < 2; ++f)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const long long row = nrow0 + 16 * f + (lane >> 2) + 8 * r;
            wrows[f][r] = row < kN ? row : (long long)kN - 1;
        }
#endif
    Tile tl;
    tl.x = a;
    tl.sx = sa;
    tl.t = lane & 3;
    tl.g = lane >> 2;
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const long long row = nrow0 + 16 * f + tl.g + 8 * r;
            tl.wrow[f][r] = row < kN ? row : (long long)kN - 1;
        }
    const float bias = fp4::decode_bias() * fp4::decode_bias();  // 2^28 undoes 2^-14 on both operands
    // Everything above reads no memory; from here on the setup kernel's tile list and alphas are needed.
    decode::pdl_wait();
    const int total = ws[kPrefix + kG];
    int pre[kScan > 0 ? kScan : 1];
#pragma unroll
    for (int i = 0; i < kScan; ++i) pre[i] = lane + 32 * i < kG ? ws[kPrefix + lane + 32 * i] : 0x7fffffff;
    for (long long t = blockIdx.x; t < total; t += gridDim.x) {  // block-uniform; 64-bit: t + gridDim.x never wraps
        const int tile = (int)t;
        const int g = kScan > 0 ? find_group_scan(pre, tile) : find_group(ws + kPrefix, tile);
        const int local = tile - ws[kPrefix + g];
        const int count = ws[kCount + g];
        const int e = ws[kMatrix + g];
        tl.rows = min(kMT, count - local * kMT);
        tl.xrow0 = (long long)ws[kOffset + g] + (long long)local * kMT;
        tl.w = b + (long long)e * kMatrixBytes;
        tl.sw = sb + (long long)e * kMatrixScaleBytes;
        const float scale = alpha_per_matrix[set * kBank + e] * bias;
#if MIRCUDA_MOE_MODE == 1
        float acc[kFrags][kN8][4];
        run_steps(acc, tl, warp, kWarps);
        if (warp > 0)
#pragma unroll
            for (int f = 0; f < kFrags; ++f)
#pragma unroll
                for (int j = 0; j < kN8; ++j)
#pragma unroll
                    for (int q = 0; q < 4; ++q) partial[warp - 1][f][j][q][lane] = acc[f][j][q];
        __syncthreads();
        if (warp == 0) {
            for (int v = 0; v < kWarps - 1; ++v)
#pragma unroll
                for (int f = 0; f < kFrags; ++f)
#pragma unroll
                    for (int j = 0; j < kN8; ++j)
#pragma unroll
                        for (int q = 0; q < 4; ++q) acc[f][j][q] += partial[v][f][j][q][lane];
#pragma unroll
            for (int f = 0; f < kFrags; ++f) store_tile(d, acc[f], tl, nrow0 + 16 * f, scale);
        }
        __syncthreads();  // partial is reused by the next tile
#elif MIRCUDA_MOE_MODE == 0
        if (nrow0 < kN) {  // warp-uniform; no block-wide synchronization on this path
            float acc[1][kN8][4];
            run_steps(acc, tl, 0, 1);
            store_tile(d, acc[0], tl, nrow0, scale);
        }
#else
        float acc[2][kN8][4];
#pragma unroll
        for (int f = 0; f < 2; ++f)
#pragma unroll
            for (int j = 0; j < kN8; ++j) acc[f][j][0] = acc[f][j][1] = acc[f][j][2] = acc[f][j][3] = 0.f;
        // Warps past N (blockDim covers 256 rows) still decode and synchronize; their stores are skipped.
        WeightStage cur;
        load_weights(cur, tl.w, tl.sw, wrows, tl.t, 0);
        stage_activations(stage[0], tl, 0);
        __syncthreads();
        for (int step = 0; step < kSteps; ++step) {
            const bool more = step + 1 < kSteps;  // block-uniform
            WeightStage nst;
            if (more) {
                load_weights(nst, tl.w, tl.sw, wrows, tl.t, step + 1);
                stage_activations(stage[(step + 1) & 1], tl, step + 1);  // read two steps ago: free since the sync
            }
            consume_staged(acc, cur, stage[step & 1], tl.g, tl.t);
            __syncthreads();
            if (more) cur = nst;
        }
#pragma unroll
        for (int f = 0; f < 2; ++f) store_tile(d, acc[f], tl, nrow0 + 16 * f, scale);
#endif
    }
    pdl_launch_dependents();
}
