// BlockScaledFp4VectorPlan's and BlockScaledFp4Plan's (M <= 16) kernel:
//   D[M, N] = alpha_eff * sum_k (qa[m,k] sa[m,k/16]) (qb[n,k] sb[n,k/16])   (FP32 accumulation, BF16 out)
// with NVFP4 weights B ([N, K/2] bytes of E2M1 pairs, element 2i in the low nibble; UE4M3 scales, one per
// 16 K-elements) and activations A either NVFP4 (MIRCUDA_FP4_ACT_BF16 = 0: [M, K/2] bytes + scales) or
// BF16 (MIRCUDA_FP4_ACT_BF16 = 1: [M, K] row-major, no scales). alpha_eff = alpha * (*global_a if given)
// * (*global_b if given): the FP32 global scales are read from device memory when the kernel runs, so a
// captured graph follows their current values. Compiled by NVRTC for the current device (any cc >= 8.0).
//
// Compile-time parameters: MIRCUDA_FP4_M (rows of A, 1..16), MIRCUDA_FP4_ROWS (weight rows per block:
// 4 or 8), MIRCUDA_FP4_TILED (scales in the tiled layout of fp4_common.cuh, else linear), MIRCUDA_FP4_WIDE
// (1: each lane loads 16 bytes = 32 weights per row per step, needs K % 32 == 0; 0: 8 bytes = 16 weights,
// any K % 16 == 0), MIRCUDA_FP4_DECODE (the E2M1 word decoder of fp4_common.cuh: 0 bytes, 1 pairs, 2 e4m3,
// 3 table), MIRCUDA_FP4_STAGES (2..4: steps of weight loads in a register ring, kStages - 1 of them in
// flight while a step computes), MIRCUDA_FP4_HALF_SUM (1, NVFP4 activations only: each 16-element
// block's products summed in FP16 by HFMA2, see below; 0: FP32 per product), MIRCUDA_FP4_PREFETCH (1: before
// griddepcontrol.wait, L2 prefetches of each warp's first kStages - 1 steps of weight lines and its first
// scale lines, as dense_vector.cu and fp8_vector.cu do; 0: none), MIRCUDA_FP4_PERSISTENT (1: a grid of at most
// one wave whose blocks walk the row blocks b, b + gridDim.x, ...; each warp's register ring runs on from one
// row block into the next, so its loads stay in flight across row blocks (no ring prologue or drain per
// block, no tail wave); 0: one block per row block).
//
// Work split: block b owns weight rows [R b, R b + R); its warps split K in chunks of 32 lanes x E
// elements (E = 32 or 16), warp w taking chunks w, w + warps, ...; each lane streams its E weights of the
// R rows (one 16- or 8-byte load per row, past L1), decodes them to FP16 pairs (value * 2^-L, L =
// fp4::kDecodeLog2 of the decoder: 14, 6 or 0) in the decoder's element order, and multiplies them with
// the same elements of the M activation rows. Each block's sum is scaled by sa * sb * 2^L (an exact
// product of two UE4M3 values and a power of two) and accumulated in FP32 with one rounding.
//
// FP32 path (BF16 activations, or MIRCUDA_FP4_HALF_SUM=0): every weight pair is converted to FP32 and
// multiplied there; the activations are read as FP32 at the decoder's element positions (a compile-time
// register index: the element order costs nothing). Products of FP4 operands (q_a q_b 2^-2L) are exact in
// FP32 and so are their sums over a block (at most 36 * 16 * 2^-2L, multiples of 2^-2L-2: 13 bits).
//
// FP16 path (NVFP4 activations, MIRCUDA_FP4_HALF_SUM=1, the default): no per-weight conversion. The
// activation pairs are decoded by the same decoder, once per lane and step for all R rows, and kept at
// value * 2^-A (A = kActLog2: L for the e4m3 decoder, L = 6; 0 for the others, whose 2^-L an exact HMUL2
// undoes); the weight pairs stay value * 2^-L and meet them in HFMA2. Exactness: each product
// q_a q_b 2^-(L+A) is a multiple of 2^-(L+A+2) (q_a, q_b multiples of 0.5) of magnitude <= 36 * 2^-(L+A);
// each half of the half2 accumulator sums the 8 products of its positions in one 16-element block, so every
// partial sum is an integer of magnitude at most 288 * 4 = 1152 < 2^11 (reached by saturated blocks) times
// 2^-(L+A+2), which FP16 (11-bit significand, subnormal step 2^-24 <= 2^-(L+A+2): 2^-14 for e4m3, 2^-16
// for bytes and pairs, 2^-2 for the table) holds exactly, so every HFMA2 rounds nothing. The block's half2
// is converted to FP32 once per 16 elements, its halves added (exact in FP32), then scaled by
// sa * sb * 2^(L+A) (exact).
//
// Rows past N read row N - 1 (never stored). On cc >= 9.0 the kernel supports programmatic dependent launch: nothing the
// previous kernel of the stream may write is read before griddepcontrol.wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef MIRCUDA_FP4_M
#define MIRCUDA_FP4_M 1
#endif
#ifndef MIRCUDA_FP4_ROWS
#define MIRCUDA_FP4_ROWS 8
#endif
#ifndef MIRCUDA_FP4_TILED
#define MIRCUDA_FP4_TILED 0
#endif
#ifndef MIRCUDA_FP4_ACT_TILED
#define MIRCUDA_FP4_ACT_TILED MIRCUDA_FP4_TILED
#endif
#ifndef MIRCUDA_FP4_GROUPED
#define MIRCUDA_FP4_GROUPED 0
#endif
#ifndef MIRCUDA_FP4_PREFETCH
#define MIRCUDA_FP4_PREFETCH 0
#endif
#ifndef MIRCUDA_FP4_PERSISTENT
#define MIRCUDA_FP4_PERSISTENT 0
#endif
#ifndef MIRCUDA_FP4_WIDE
#define MIRCUDA_FP4_WIDE 1
#endif
#ifndef MIRCUDA_FP4_ACT_BF16
#define MIRCUDA_FP4_ACT_BF16 0
#endif
#ifndef MIRCUDA_FP4_STAGES
#define MIRCUDA_FP4_STAGES 2
#endif
#ifndef MIRCUDA_FP4_DP4A
#define MIRCUDA_FP4_DP4A 0
#endif
#ifndef MIRCUDA_MOE_LEAN_TILES
#define MIRCUDA_MOE_LEAN_TILES 0
#endif
#ifndef MIRCUDA_FP4_MAX_REGS
#define MIRCUDA_FP4_MAX_REGS 0
#endif
#ifndef MIRCUDA_FP4_ROW_WARPS
#define MIRCUDA_FP4_ROW_WARPS 1
#endif
// 1: the integer path's first ring of weight codes and scales is loaded before griddepcontrol.wait (experimental).
#ifndef MIRCUDA_PRELOAD_WEIGHTS
#define MIRCUDA_PRELOAD_WEIGHTS 0
#endif
#ifndef MIRCUDA_FP4_HALF_SUM
#define MIRCUDA_FP4_HALF_SUM 1
#endif
#if MIRCUDA_FP4_HALF_SUM && !MIRCUDA_FP4_ACT_BF16
#define MIRCUDA_FP4_FP16_PATH 1
#else
#define MIRCUDA_FP4_FP16_PATH 0
#endif
#ifndef MIRCUDA_PDL_TRIGGER_LATE  // the plans' pdl_trigger: "late" (1, the default) or "early" (0)
#define MIRCUDA_PDL_TRIGGER_LATE 1
#endif
#include "decode_common.cuh"
#include "fp4_common.cuh"

namespace {

constexpr int kM = MIRCUDA_FP4_M;
constexpr int kRows = MIRCUDA_FP4_ROWS;
constexpr int kMaxWarps = 8;
constexpr int kBlocks = MIRCUDA_FP4_WIDE ? 2 : 1;  // 16-element blocks per lane per step
[[maybe_unused]] constexpr int kElems = 16 * kBlocks;
static_assert(kM >= 1 && kM <= 16, "MIRCUDA_FP4_M must be in 1..16");
static_assert(kRows == 4 || kRows == 8, "MIRCUDA_FP4_ROWS must be 4 or 8");
constexpr int kStages = MIRCUDA_FP4_STAGES;  // steps of weight loads held in registers (ring)
static_assert(kStages >= 2 && kStages <= 4, "MIRCUDA_FP4_STAGES must be 2, 3 or 4");
// Row warps (MIRCUDA_FP4_ROW_WARPS = G > 1, the integer path only; in the grouped kernel without the lean or
// persistent tile walks): each of a block's G warps takes its own row block whole (block b, warp j: row block
// G b + j; no K split, no shared memory), so the grid has G times fewer blocks. One-warp blocks cap an SM at 32
// resident warps (the 32-block limit of cc 9.0) and leave it idle through the ramp and tail of thousands of tiny
// blocks (ncu, 14336x4096 on the H200, 2026-12-01: SMs active 70 % of the cycles at 36 % occupancy).
constexpr int kRowWarps = MIRCUDA_FP4_ROW_WARPS;
static_assert(kRowWarps == 1 || ((kRowWarps == 2 || kRowWarps == 4 || kRowWarps == 8) && MIRCUDA_FP4_DP4A &&
                                 !MIRCUDA_FP4_PERSISTENT && !MIRCUDA_MOE_LEAN_TILES),
              "MIRCUDA_FP4_ROW_WARPS: 1, or 2, 4 or 8 on the integer path (MIRCUDA_FP4_DP4A), without the lean or "
              "persistent tile walks");

#if !MIRCUDA_FP4_ACT_BF16 && !MIRCUDA_FP4_DP4A
// The activations' scales: the weights' layout, except in the grouped kernel (linear activation scales).
__device__ __forceinline__ long long act_scale_offset(long long row, int kb, int kblocks, int katoms) {
    return fp4::scale_offset<MIRCUDA_FP4_ACT_TILED != 0>(row, kb, kblocks, katoms);
}
#endif

// Each weight row's code and scale pointers at column 0 (row N - 1 for rows past N): a step adds one
// column offset to them (col / 2 bytes of codes, fp4::scale_col_offset of its K-block), so no 64-bit row
// product is recomputed per load.
struct RowPointers {
    const unsigned char* w[kRows];
    const unsigned char* s[kRows];
};

#if !MIRCUDA_FP4_DP4A
__device__ __forceinline__ void set_row_pointers(RowPointers& p, const unsigned char* __restrict__ w,
                                                 const unsigned char* __restrict__ sw, long long row0, int n, int k,
                                                 int kblocks, int katoms) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const long long row = row0 + r < n ? row0 + r : (long long)n - 1;
        p.w[r] = w + row * (k / 2);
        p.s[r] = sw + fp4::scale_row_offset<MIRCUDA_FP4_TILED != 0>(row, kblocks, katoms);
    }
}
#endif

#if !MIRCUDA_FP4_DP4A  // the FP16/FP32 paths (the integer path has its own loads and products)
// One step of a lane: the codes of its kElems columns from `col` in each of the R weight rows, and
// their kBlocks scale bytes per row (one byte, or two adjacent ones read as a 16-bit word: with K % 32
// == 0 the K-block index is even and both layouts keep blocks 2j and 2j + 1 side by side).
__device__ __forceinline__ void load_step(const RowPointers& p, int col, unsigned (&codes)[kRows][2 * kBlocks],
                                          unsigned (&sraw)[kRows]) {
    const unsigned coff = (unsigned)col >> 1;
    const unsigned soff = fp4::scale_col_offset<MIRCUDA_FP4_TILED != 0>(col >> 4);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        fp4::load_codes(p.w[r] + coff, codes[r]);
        const unsigned char* s = p.s[r] + soff;
#if MIRCUDA_FP4_WIDE
        sraw[r] = fp4::load_scale_pair(s);
#else
        sraw[r] = __ldg(s);
#endif
    }
}

#if !MIRCUDA_FP4_FP16_PATH
// One 16-element block of activation row m for the FP32 path, as 16 floats in natural element order
// (FP4: times 2^-L). The FP4 codes are decoded with the weights' decoder, whose order is undone here by
// compile-time indices.
__device__ __forceinline__ void activation_block(const void* x, long long m, int col, int k, float (&xf)[16]) {
#if MIRCUDA_FP4_ACT_BF16
    const uint4* p = reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned short*>(x) + m * k + col);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const uint4 v = __ldg(p + h);
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            xf[8 * h + 2 * i] = __uint_as_float(u[i] << 16);
            xf[8 * h + 2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    }
#else
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned char*>(x) + m * (k / 2) + col / 2));
    const unsigned u[2] = {v.x, v.y};
#pragma unroll
    for (int w = 0; w < 2; ++w) {
        unsigned h[4];
        fp4::decode_word(u[w], h);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = fp4::half2_to_float2(h[i]);
            xf[8 * w + fp4::word_element(i, 0)] = f.x;
            xf[8 * w + fp4::word_element(i, 1)] = f.y;
        }
    }
#endif
}

#else
// The FP16 path's activations keep the decoder's factor 2^-L where the block sums stay exact with it
// (kActLog2 = L): the products q_a q_b 2^-2L are then multiples of 2^-(2L+2), which FP16 holds exactly
// (subnormals included) while 2L + 2 <= 24 (the e4m3 decoder, L = 6: multiples of 2^-14, block-half sums
// below 1152 such units), and the HMUL2 that would undo it per activation pair is saved (the weight
// scales take 2^L more). Larger L (14: bytes, pairs) would reach below FP16's subnormal step: those
// activations are multiplied back by 2^L (HMUL2, exact), kActLog2 = 0.
constexpr int kActLog2 = 2 * fp4::kDecodeLog2 + 2 <= 24 ? fp4::kDecodeLog2 : 0;

// One 16-element block of FP4 activation row m for the FP16 path: 8 half2 in the decoder's order (word w,
// half i at 4 w + i), E2M1 values times 2^-kActLog2.
__device__ __forceinline__ void activation_half2(const void* x, long long m, int col, int k, __half2 (&xh)[8]) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned char*>(x) + m * (k / 2) + col / 2));
    const unsigned u[2] = {v.x, v.y};
    const __half2 unbias = __float2half2_rn(fp4::decode_unbias());
#pragma unroll
    for (int w = 0; w < 2; ++w) {
        unsigned h[4];
        fp4::decode_word(u[w], h);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            __half2 t = *reinterpret_cast<const __half2*>(&h[i]);
            xh[4 * w + i] = fp4::kDecodeLog2 == kActLog2 ? t : __hmul2(t, unbias);
        }
    }
}
#endif

// A UE4M3 scale byte times 2^(L + extra) (the decoder's factor, and `extra` more, undone; exact).
template <int extra = 0>
__device__ __forceinline__ float scale_unbiased(unsigned u) {
    return __half2float(__ushort_as_half((unsigned short)((u & 0x7fu) << 7))) *
           (256.0f * (float)(1u << fp4::kDecodeLog2) * (float)(1u << extra));
}

// One step of a lane: its kElems columns from `col` of the R weight rows (codes, scale bytes sraw) times the
// M activation rows, accumulated into acc. Rows m >= mrows (the grouped kernel's last tile of a group)
// read row mrows - 1 again; their sums are never stored.
__device__ __forceinline__ void consume(float (&acc)[kM][kRows], const unsigned (&codes)[kRows][2 * kBlocks],
                                       const unsigned (&sraw)[kRows], const void* __restrict__ x,
                                       const unsigned char* __restrict__ sx, int col, int k, int kblocks, int katoms,
                                       int mrows) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
#pragma unroll
        for (int m0 = 0; m0 < kM; ++m0) {
            const int m = kM == 1 ? 0 : m0 < mrows ? m0 : mrows - 1;
#if MIRCUDA_FP4_ACT_BF16
            const float xs = 1.0f;
#else
            const float xs = fp4::ue4m3_to_float(__ldg(sx + act_scale_offset(m, (col >> 4) + b, kblocks, katoms)));
#endif
#if MIRCUDA_FP4_FP16_PATH
            __half2 xh[8];
            activation_half2(x, m, col + 16 * b, k, xh);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                __half2 s2 = __float2half2_rn(0.f);
#pragma unroll
                for (int word = 0; word < 2; ++word) {
                    unsigned h[4];
                    fp4::decode_word(codes[r][2 * b + word], h);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        s2 = __hfma2(*reinterpret_cast<const __half2*>(&h[i]), xh[4 * word + i], s2);
                }
                const float2 f = __half22float2(s2);
                const float ws = scale_unbiased<kActLog2>((sraw[r] >> (8 * b)) & 0xffu);
                acc[m0][r] = fmaf(f.x + f.y, ws * xs, acc[m0][r]);
            }
#else
            float xf[16];
            activation_block(x, m, col + 16 * b, k, xf);
#if !MIRCUDA_FP4_ACT_BF16
            const float xsu = xs * fp4::decode_unbias();
#else
            const float xsu = xs;
#endif
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                float p = 0.f;
#pragma unroll
                for (int word = 0; word < 2; ++word) {
                    unsigned h[4];
                    fp4::decode_word(codes[r][2 * b + word], h);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float2 f = fp4::half2_to_float2(h[i]);
                        p = fmaf(f.x, xf[8 * word + fp4::word_element(i, 0)], p);
                        p = fmaf(f.y, xf[8 * word + fp4::word_element(i, 1)], p);
                    }
                }
                const float ws = scale_unbiased((sraw[r] >> (8 * b)) & 0xffu);
                acc[m0][r] = fmaf(p, ws * xsu, acc[m0][r]);
            }
#endif
        }
    }
}

#endif  // !MIRCUDA_FP4_DP4A

// Before griddepcontrol.wait (MIRCUDA_FP4_PREFETCH, cc >= 9.0): L2 prefetches of the warp's ring prologue
// (its first kStages - 1 steps of the block's rows from row0) and of its first scale line.
__device__ __forceinline__ void prefetch_prologue(const unsigned char* __restrict__ w, const unsigned char* __restrict__ sw,
                                                  int n, int k, long long row0, int warp, int warps, int lane) {
#if MIRCUDA_FP4_PREFETCH && !MIRCUDA_FP4_GROUPED && __CUDA_ARCH__ >= 900
    // Programmatic dependent launch: the weights and their scales are never written by the previous
    // kernel of the stream, and an L2 prefetch is coherent anyway (L2 is the point of coherence), so
    // the lines of this warp's ring prologue are requested before griddepcontrol.wait and arrive
    // while that kernel finishes. Lane -> (row (lane / 4) mod R, 128-byte line lane % 4 of a step's
    // chunk of that row); with R = 4 the upper half-warp takes the next step. (The row is computed,
    // not indexed from rows[]: a run-time index would put rows[] in local memory.)
    const int rr = (lane >> 2) % kRows;
    const long long r = row0 + rr < n ? row0 + rr : (long long)n - 1;
    const int ahead = kRows == 4 ? lane >> 4 : 0;
    const int line = (lane & 3) * 128;  // bytes into the step's chunk of the row (32 kElems / 2 bytes)
    for (int d = ahead; d + 1 < kStages; d += kRows == 4 ? 2 : 1) {
        const int c0 = warp * 32 * kElems + d * warps * 32 * kElems;  // the step's first column (warps: the K split)
        if (c0 < k && line < 16 * kElems && c0 / 2 + line < k / 2)
            decode::prefetch_l2(reinterpret_cast<const unsigned short*>(w + r * (k / 2) + c0 / 2 + line));
    }
    if ((lane & 3) == 0 && warp * 32 * kElems < k)
        decode::prefetch_l2(reinterpret_cast<const unsigned short*>(
            sw + fp4::scale_offset<MIRCUDA_FP4_TILED != 0>(r, (warp * 32 * kElems) >> 4, k >> 4, ((k >> 4) + 3) >> 2)));
#else
    (void)w, (void)sw, (void)n, (void)k, (void)row0, (void)warp, (void)warps, (void)lane;
#endif
}

#if MIRCUDA_FP4_DP4A
// ---- The integer path (MIRCUDA_FP4_DP4A = 1: the plans' decode='dp4a'; M <= kDp4aMaxM, NVFP4 activations) ------
// E2M1 codes become int8 (value * 2, so 0, 1, 2, 3, 4, 6, 8, 12 and negatives) by a byte permute: PRMT's
// selector nibble is the E2M1 code itself, its low three bits index the magnitude table kLut0:kLut1 and its bit 3
// (the E2M1 sign) asks PRMT to replicate the sign bit of the selected byte, which is 0 in that table. So
// prmt(w) gives, byte by byte, 2|v| where v >= 0 and 0 where v < 0 (P), and prmt(w ^ 0x8888) the reverse (N):
// four elements per PRMT, natural order. The dot products with the int8 activations are IDP4A (__dp4a, four
// products and a sum per instruction): sum_j v_j a_j = dp4a(P, a) - dp4a(N, a), two int32 sums per row and
// block. Exact: every product is an integer of magnitude <= 144 (4 q_a q_b), a 16-element block's sums at most
// 2304 in magnitude; int32 holds them, FP32 holds their difference exactly; one FP32 rounding per block (the
// FFMA with the scale sa * sb, an exact product of two UE4M3 values), as in the FP16 path. The final factor
// 1/4 (both operands doubled) goes into the output scale. Per 8 weights: 4 PRMT, 3 integer operations
// (w >> 16, w ^ 0x88888888, its >> 16), 4 IDP4A (the FP16 path: 7 integer operations, 4 F2FP, 4 HFMA2).
// The activation codes (one 16-byte load per lane and step) and scales (one 16-bit load) travel in the load
// ring with the weights (lean_consume: refilled in place), so no load waits at the step that uses it; each
// lane turns its 32 activations into signed int8 once per step for all R rows: 0x80 + P - N per byte lies in
// [0x74, 0x8c] (one of P, N is 0, both <= 12), so one IADD3 makes all four bytes without a carry between them
// and an XOR with 0x80 gives the two's-complement byte.
// M > 1 (lean_consume_rows): each activation row is turned into int8 as above, and each weight word too (the same
// IADD3 and XOR: signed bytes instead of P and N), once per step, so that every further activation row costs one
// IDP4A per four weights, not two. Per 8 weights and row: 4 PRMT, 7 integer operations, then 2 IDP4A per
// activation row; per 16 weights, row and activation row an I2F, an FMUL (sa * sb) and an FFMA. The same
// exactness argument holds: the bytes are the same integers, the sums the same int32 sums.
constexpr int kDp4aMaxM = 4;
static_assert(kM >= 1 && kM <= kDp4aMaxM && !MIRCUDA_FP4_ACT_BF16 && MIRCUDA_FP4_WIDE &&
                  (kM == 1 || !MIRCUDA_FP4_GROUPED) &&
                  (!MIRCUDA_FP4_PERSISTENT || (MIRCUDA_FP4_GROUPED && MIRCUDA_MOE_LEAN_TILES)),
              "MIRCUDA_FP4_DP4A: 1 <= M <= 4 (1-row tiles in the grouped kernel), NVFP4 activations, 16-byte loads "
              "(K % 32 == 0), no persistent grid (but the grouped kernel's lean tile walk)");
constexpr unsigned kLut0 = 0x03020100u;  // 2|v| of E2M1 magnitudes 0..3: 0, 0.5, 1, 1.5
constexpr unsigned kLut1 = 0x0C080604u;  // 4..7: 2, 3, 4, 6

// The table sits in constant memory, read once into two registers: as literals, ptxas gives PRMT one of them
// as an immediate and copies the other into a fresh register before every PRMT (measured in the sm_90 SASS:
// one extra instruction per four weights).
__constant__ unsigned e2m1_int8_table[2] = {kLut0, kLut1};

__device__ __forceinline__ unsigned e2m1_lut(unsigned sel, uint2 lut) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lut.x), "r"(lut.y), "r"(sel));
    return d;
}

// Eight E2M1 activation codes -> two words of four signed int8 (2 v; elements 0..3, 4..7).
__device__ __forceinline__ void activation_int8(unsigned w, uint2 lut, unsigned& lo, unsigned& hi) {
    const unsigned x = w ^ 0x88888888u;
    lo = (0x80808080u + e2m1_lut(w, lut) - e2m1_lut(x, lut)) ^ 0x80808080u;
    hi = (0x80808080u + e2m1_lut(w >> 16, lut) - e2m1_lut(x >> 16, lut)) ^ 0x80808080u;
}

// A lane's 32 codes of a step (four words) -> eight words of four signed int8 each, in element order.
__device__ __forceinline__ void step_int8(const unsigned (&words)[4], uint2 lut, unsigned (&out)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) activation_int8(words[i], lut, out[2 * i], out[2 * i + 1]);
}
__device__ __forceinline__ void step_int8(const uint4& w, uint2 lut, unsigned (&out)[8]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    step_int8(words, lut, out);
}

// Two UE4M3 scale bytes (blocks 2j, 2j + 1 in bits 0..7, 8..15; sign bits ignored as ue4m3_to_float does) ->
// two floats, exactly (cvt.rn.f16x2.e4m3x2: every E4M3 value is an FP16 value).
// Below cc 8.9 (no E4M3 conversion) byte by byte with fp4::ue4m3_to_float.
__device__ __forceinline__ float2 ue4m3x2_to_float2(unsigned u) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned h;
    asm("{\n\t.reg .b16 l;\n\tcvt.u16.u32 l, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\t}" : "=r"(h) : "r"(u & 0x7f7fu));
    return fp4::half2_to_float2(h);
#else
    return make_float2(fp4::ue4m3_to_float(u & 0xffu), fp4::ue4m3_to_float((u >> 8) & 0xffu));
#endif
}

struct LeanStep {
    unsigned codes[kRows][4];  // 32 weights of each row
    unsigned sraw[kRows];      // their two scale bytes
    uint4 act[kM];             // the lane's 32 activation codes of each activation row
    unsigned araw[kM];         // their two scale bytes
};

// A lane's pointers at its first column (row N - 1 for rows past N). Step t of the warp reads at the pointers
// plus t (stride / 2) code bytes and t stride / 16 linear or t stride * 8 tiled scale bytes (the split of
// scale_offset of fp4_common.cuh: the stride is a multiple of 64 columns, so a step moves the tiled index by
// whole 512-byte atoms): each load advances its pointer by its step (a 64-bit add, two instructions). (One
// pointer per operand plus 32-bit row offsets saves registers on paper, but ptxas then spends a 64-bit add per
// load and as many registers: measured in the sm_90 SASS, 729 against 655 loop instructions for R = 4.)
struct LeanPointers {
    const unsigned char* w[kRows];
    const unsigned char* s[kRows];
    const unsigned char* x;   // activation row 0; row m lies m xrow code bytes and m sxrow scale bytes further
    const unsigned char* sx;
    unsigned xrow, sxrow;
};

template <bool Tiled>
__device__ __forceinline__ unsigned lean_scale_step(int stride) {
    return Tiled ? (unsigned)stride * 8u : (unsigned)stride >> 4;
}

// Row r's part of a step (its 32 codes and two scale bytes) at the pointers; moves them to the warp's next step.
__device__ __forceinline__ void lean_load_row(LeanPointers& p, int r, unsigned cstep, unsigned sstep, LeanStep& s) {
    fp4::load_codes(p.w[r], s.codes[r]);
    s.sraw[r] = fp4::load_scale_pair(p.s[r]);
    p.w[r] += cstep;
    p.s[r] += sstep;
}

// The activations' part of a step (32 codes, two scale bytes) at the pointers; moves them to the next step.
__device__ __forceinline__ void lean_load_act(LeanPointers& p, unsigned cstep, unsigned xsstep, LeanStep& s) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
        s.act[m] = __ldg(reinterpret_cast<const uint4*>(p.x + m * p.xrow));
        s.araw[m] = fp4::load_scale_pair(p.sx + m * p.sxrow);
    }
    p.x += cstep;
    p.sx += xsstep;
}

#if !(MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900)
// Loads the step at the pointers and moves them to the warp's next step.
__device__ __forceinline__ void lean_load(LeanPointers& p, unsigned cstep, unsigned sstep, unsigned xsstep, LeanStep& s) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) lean_load_row(p, r, cstep, sstep, s);
    lean_load_act(p, cstep, xsstep, s);
}
#endif

// Consumes the step in `s` and, when `reload`, refills `s` part by part with the step kStages - 1 ahead as each
// part is used up (the activations once decoded, each row once multiplied): the ring holds kStages - 1 steps of
// registers, not kStages, and the loads still start a step's worth of work before they are needed.
__device__ __forceinline__ void lean_consume(float (&acc)[kRows], LeanStep& s, uint2 lut, bool reload, LeanPointers& p,
                                             unsigned cstep, unsigned sstep, unsigned xsstep) {
    unsigned a[8];
    step_int8(s.act[0], lut, a);
    const float2 xs = ue4m3x2_to_float2(s.araw[0]);
    if (reload) lean_load_act(p, cstep, xsstep, s);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float2 ws = ue4m3x2_to_float2(s.sraw[r]);
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            int pos = 0, neg = 0;  // the sums of P and of N (the codes' positive and negative parts)
#pragma unroll
            for (int i = 2 * b; i < 2 * b + 2; ++i) {
                const unsigned w = s.codes[r][i];
                const unsigned x = w ^ 0x88888888u;
                pos = __dp4a((int)e2m1_lut(w, lut), (int)a[2 * i], pos);
                pos = __dp4a((int)e2m1_lut(w >> 16, lut), (int)a[2 * i + 1], pos);
                neg = __dp4a((int)e2m1_lut(x, lut), (int)a[2 * i], neg);
                neg = __dp4a((int)e2m1_lut(x >> 16, lut), (int)a[2 * i + 1], neg);
            }
            acc[r] = fmaf((float)(pos - neg), (b ? ws.y : ws.x) * (b ? xs.y : xs.x), acc[r]);
        }
        if (reload) lean_load_row(p, r, cstep, sstep, s);
    }
}

// M > 1: lean_consume's step for every activation row; the weights are turned into signed int8 once per row and step
// (see the top of the integer path), the activations once per step for all R rows.
__device__ __forceinline__ void lean_consume_rows(float (&acc)[kM][kRows], LeanStep& s, uint2 lut, bool reload,
                                                  LeanPointers& p, unsigned cstep, unsigned sstep, unsigned xsstep) {
    unsigned a[kM][8];
    float2 xs[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
        step_int8(s.act[m], lut, a[m]);
        xs[m] = ue4m3x2_to_float2(s.araw[m]);
    }
    if (reload) lean_load_act(p, cstep, xsstep, s);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float2 ws = ue4m3x2_to_float2(s.sraw[r]);
        unsigned v[8];
        step_int8(s.codes[r], lut, v);
        if (reload) lean_load_row(p, r, cstep, sstep, s);
#pragma unroll
        for (int b = 0; b < 2; ++b) {
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                int dot = 0;
#pragma unroll
                for (int i = 4 * b; i < 4 * b + 4; ++i) dot = __dp4a((int)v[i], (int)a[m][i], dot);
                acc[m][r] = fmaf((float)dot, (b ? ws.y : ws.x) * (b ? xs[m].y : xs[m].x), acc[m][r]);
            }
        }
    }
}

// The R row sums of the 32 lanes, reduced with R - 1 + log2(32 / R) shuffles instead of 5 R: at each of the
// first log2 R rounds (offsets 16, 8, ...) a lane keeps half of its rows and adds the partner's copy of them,
// handing over the other half; afterwards lane l holds row sum(bit i of l: the kept halves) and the rest of
// the offsets add that row over the lanes. Returns the lane's row and its total.
__device__ __forceinline__ float lean_reduce(float (&acc)[kRows], int lane, int& row) {
    constexpr int kSteps = kRows == 4 ? 2 : 3;
    row = 0;
#pragma unroll
    for (int st = 0, half = kRows / 2, off = 16; st < kSteps; ++st, half >>= 1, off >>= 1) {
        const bool upper = (lane & off) != 0;
#pragma unroll
        for (int i = 0; i < half; ++i) {
            const float give = upper ? acc[i] : acc[i + half];
            const float keep = upper ? acc[i + half] : acc[i];
            acc[i] = keep + __shfl_xor_sync(0xffffffffu, give, off);
        }
        row += upper ? half : 0;
    }
    float v = acc[0];
#pragma unroll
    for (int off = 16 / kRows; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The thread's indices; Opaque: read by volatile moves, which the compiler may not hoist out of a loop (the grouped
// kernel's walk over further tiles: hoisted, every lane-dependent offset of the body would stay live across the
// loop, 19-43 registers more in the sm_90 SASS).
struct LeanIds {
    unsigned tid, ntid, ctaid;
};

template <bool Opaque>
__device__ __forceinline__ LeanIds lean_ids() {
    if (!Opaque) return LeanIds{threadIdx.x, blockDim.x, blockIdx.x};
    LeanIds ids;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(ids.tid));
    asm volatile("mov.u32 %0, %%ntid.x;" : "=r"(ids.ntid));
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(ids.ctaid));
    return ids;
}

template <bool Opaque = false>
__device__ __forceinline__ void fp4_matvec_lean(__nv_bfloat16* __restrict__ y, const unsigned char* __restrict__ w,
                                                const unsigned char* __restrict__ sw, const unsigned char* __restrict__ x,
                                                const unsigned char* __restrict__ sx, const float* global_a,
                                                const float* global_b, float alpha, int n, int k, int y_row = 0,
                                                long long row_block = -1) {
    LeanIds ids = lean_ids<Opaque>();
    if (row_block >= 0) ids.ctaid = (unsigned)row_block;  // the grouped walk's row block, not blockIdx.x
    if (kRowWarps > 1) {  // the warp is a one-warp block of its own row block
        ids.ctaid = ids.ctaid * kRowWarps + (ids.tid >> 5);
        ids.tid &= 31u;
        ids.ntid = 32u;
    }
    const int warps = ids.ntid >> 5;
    const int warp = ids.tid >> 5;
    const int lane = ids.tid & 31;
    const long long row0 = (long long)ids.ctaid * kRows;
    if (kRowWarps > 1 && row0 >= n) return;  // the last block's spare warps (warp-uniform; nothing is shared)
    const int kblocks = k >> 4;
    const int katoms = (kblocks + 3) >> 2;
    const int stride = warps * 32 * 32;
    const int lane_col = warp * 32 * 32 + lane * 32;
    LeanPointers lp;
    {
        // One 64-bit product per operand: consecutive rows lie K / 2 code bytes apart and K / 16 linear or 16
        // tiled scale bytes (row0 is a multiple of R <= 8, so the block's rows share one 32-row group of a tiled
        // atom); rows past N repeat row N - 1.
        constexpr bool kTiled = MIRCUDA_FP4_TILED != 0;
        const unsigned char* pw = w + row0 * (k / 2) + (lane_col >> 1);
        const unsigned char* ps = sw + fp4::scale_row_offset<kTiled>(row0, kblocks, katoms) +
                                  fp4::scale_col_offset<kTiled>(lane_col >> 4);
        const unsigned srow = kTiled ? 16u : (unsigned)kblocks;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            lp.w[r] = pw;
            lp.s[r] = ps;
            if (row0 + r + 1 < n) {
                pw += k / 2;
                ps += srow;
            }
        }
        lp.x = x + (lane_col >> 1);
        lp.sx = sx + fp4::scale_col_offset<MIRCUDA_FP4_ACT_TILED != 0>(lane_col >> 4);
        // activation rows m < kM <= 4 share the first 32-row group of a tiled atom: 16 bytes apart
        lp.xrow = (unsigned)k / 2u;
        lp.sxrow = MIRCUDA_FP4_ACT_TILED ? 16u : (unsigned)kblocks;
    }
    const unsigned cstep = (unsigned)stride >> 1;
    const unsigned sstep = lean_scale_step<MIRCUDA_FP4_TILED != 0>(stride);
    const unsigned xsstep = lean_scale_step<MIRCUDA_FP4_ACT_TILED != 0>(stride);
    prefetch_prologue(w, sw, n, k, row0, warp, warps, lane);
    // The ring: kStages - 1 steps (weights, activations and all their scales) in flight, each buffer refilled
    // by lean_consume with the step kStages - 1 ahead of the one it held. A lane takes a step while its first
    // column is inside K (K % 32 == 0: all 32 columns are then). (A loop over the warp's first column instead of
    // a step count, which saves the division, costs 8 registers in ptxas 13.0: 80 for R = 4.)
    constexpr int kBuffers = kStages - 1;
    LeanStep ring[kBuffers];
    // warp-uniform; the stride is 1024 columns times a power of two (warps 1, 2, 4 or 8): a shift, no division
    const int steps = k > warp * 32 * 32 ? (k - warp * 32 * 32 + stride - 1) >> (9 + __ffs(warps)) : 0;
    float acc[kM][kRows];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[m][r] = 0.f;
#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
    // The ring's weight codes and scales before the wait (static weights: the caller promised that no kernel of
    // the stream that may still be running writes them), its activations after.
#pragma unroll
    for (int d = 0; d < kBuffers; ++d)
        if (d < steps && lane_col + d * stride < k)
#pragma unroll
            for (int r = 0; r < kRows; ++r) lean_load_row(lp, r, cstep, sstep, ring[d]);
    decode::pdl_trigger_early();
    decode::pdl_wait();
#pragma unroll
    for (int d = 0; d < kBuffers; ++d)
        if (d < steps && lane_col + d * stride < k) lean_load_act(lp, cstep, xsstep, ring[d]);
#else
    decode::pdl_trigger_early();
    decode::pdl_wait();
#pragma unroll
    for (int d = 0; d < kBuffers; ++d)
        if (d < steps && lane_col + d * stride < k) lean_load(lp, cstep, sstep, xsstep, ring[d]);
#endif
    const uint2 lut = make_uint2(e2m1_int8_table[0], e2m1_int8_table[1]);
    for (int t0 = 0; t0 < steps; t0 += kBuffers) {
#pragma unroll
        for (int d = 0; d < kBuffers; ++d) {
            const int t = t0 + d;
            if (t < steps && lane_col + t * stride < k) {
                const int ahead = t + kBuffers;
                const bool reload = ahead < steps && lane_col + ahead * stride < k;
                if constexpr (kM == 1)
                    lean_consume(acc[0], ring[d], lut, reload, lp, cstep, sstep, xsstep);
                else
                    lean_consume_rows(acc, ring[d], lut, reload, lp, cstep, sstep, xsstep);
            }
        }
    }
    int row;
    float v[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) v[m] = lean_reduce(acc[m], lane, row);
    decode::pdl_trigger_late();
    // lanes 0, 32 / R, 2 * 32 / R, ... hold rows 0, 1, 2, ... (the bits of the row are the lane's high bits)
    const bool holder = (lane & (32 / kRows - 1)) == 0;
    float scale = 0.25f * alpha;  // both int8 operands carry a factor 2
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    // output row m of D lies (y_row + m) N elements into y
    if (warps == 1) {
        if (holder && row0 + row < n)
#pragma unroll
            for (int m = 0; m < kM; ++m) decode::store_out(y + (long long)(y_row + m) * n + row0 + row, scale * v[m]);
        return;
    }
    __shared__ float partial[kMaxWarps][kM][kRows];
    if (holder)
#pragma unroll
        for (int m = 0; m < kM; ++m) partial[warp][m][row] = v[m];
    __syncthreads();
    if constexpr (kM == 1) {  // M = 1 as before the M-row path (the same SASS)
        if (ids.tid < kRows && row0 + ids.tid < n) {
            float s = partial[0][0][ids.tid];
            for (int j = 1; j < warps; ++j) s += partial[j][0][ids.tid];
            decode::store_out(y + (long long)y_row * n + row0 + ids.tid, scale * s);
        }
    } else if (ids.tid < kM * kRows) {
        const int m = (int)ids.tid / kRows, r = (int)ids.tid % kRows;
        if (row0 + r < n) {
            float s = partial[0][m][r];
            for (int j = 1; j < warps; ++j) s += partial[j][m][r];
            decode::store_out(y + (long long)(y_row + m) * n + row0 + r, scale * s);
        }
    }
}
#endif  // MIRCUDA_FP4_DP4A

#if !MIRCUDA_FP4_PERSISTENT && !MIRCUDA_FP4_DP4A
__device__ __forceinline__ void fp4_matvec(__nv_bfloat16* __restrict__ y, const unsigned char* __restrict__ w,
                                           const unsigned char* __restrict__ sw, const void* __restrict__ x,
                                           const unsigned char* __restrict__ sx, const float* global_a,
                                           const float* global_b, float alpha, int n, int k, int mrows = kM) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const long long row0 = (long long)blockIdx.x * kRows;
    const int kblocks = k >> 4;
    const int katoms = (kblocks + 3) >> 2;
    const int chunk = 32 * kElems;

    RowPointers rp;
    set_row_pointers(rp, w, sw, row0, n, k, kblocks, katoms);

    fp4::decode_table_fill();  // the table variant's shared table (no global reads: before the wait)
    prefetch_prologue(w, sw, n, k, row0, warp, warps, lane);
    decode::pdl_trigger_early();
    decode::pdl_wait();
    float acc[kM][kRows];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[m][r] = 0.f;

    // K % kElems == 0 (the plan picks the variant): a lane's kElems columns lie all inside K or all
    // past it. Register ring of kStages steps: the step kStages - 1 ahead is loaded before the current one
    // is consumed, so (kStages - 1) R weight loads per lane are in flight while it computes (2 stages:
    // double buffering as in dense_vector.cu). The ring is indexed at compile time (the loop over it is
    // unrolled), so it stays in registers.
    const int stride = warps * chunk;
    int col = warp * chunk + lane * kElems;
    unsigned codes[kStages][kRows][2 * kBlocks];
    unsigned sraw[kStages][kRows];
#pragma unroll
    for (int d = 0; d + 1 < kStages; ++d)
        if (col + d * stride < k) load_step(rp, col + d * stride, codes[d], sraw[d]);
    while (col < k) {
#pragma unroll
        for (int d = 0; d < kStages; ++d) {
            if (col < k) {
                const int ahead = col + (kStages - 1) * stride;
                if (ahead < k)
                    load_step(rp, ahead, codes[(d + kStages - 1) % kStages], sraw[(d + kStages - 1) % kStages]);
                consume(acc, codes[d], sraw[d], x, sx, col, k, kblocks, katoms, mrows);
                col += stride;
            }
        }
    }

    // Butterfly over the lanes: every lane then holds every sum; lane 0 hands them to warp 0.
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], off);
    decode::pdl_trigger_late();
    if (kM * kRows <= 8 && warps == 1) {  // block-uniform: every lane holds every sum, lane r stores row r
        float scale = alpha;
        if (global_a != nullptr) scale *= *global_a;
        if (global_b != nullptr) scale *= *global_b;
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                if (lane == m * kRows + r && row0 + r < n && m < mrows)
                    decode::store_out(y + (long long)m * n + row0 + r, scale * acc[m][r]);
        return;
    }
    __shared__ float partial[kMaxWarps][kM * kRows];
    if (lane == 0) {
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int r = 0; r < kRows; ++r) partial[warp][m * kRows + r] = acc[m][r];
    }
    __syncthreads();
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    for (int i = threadIdx.x; i < kM * kRows; i += blockDim.x) {
        float s = partial[0][i];
        for (int j = 1; j < warps; ++j) s += partial[j][i];
        const int m = i / kRows, r = i % kRows;
        const long long row = row0 + r;
        if (row < n && m < mrows) decode::store_out(y + (long long)m * n + row, scale * s);
    }
}

#endif  // !MIRCUDA_FP4_PERSISTENT && !MIRCUDA_FP4_DP4A

#if MIRCUDA_FP4_PERSISTENT && !MIRCUDA_FP4_DP4A
// The persistent form of fp4_matvec (MIRCUDA_FP4_PERSISTENT): block b takes row blocks b, b + gridDim.x, ...
// Every warp of the block walks the same number of steps per row block, S = ceil(K / stride) (a lane whose
// columns lie past K loads and adds nothing), so the block meets at every row block's end: butterfly over
// the lanes, the warps' partial sums through shared memory, one __syncthreads before and one after. Step t
// of the warp is (row block t / S, K step t % S); the ring holds steps t .. t + kStages - 2 in flight, also
// across a row-block boundary.
__device__ __forceinline__ void fp4_matvec_persistent(__nv_bfloat16* __restrict__ y, const unsigned char* __restrict__ w,
                                                      const unsigned char* __restrict__ sw, const void* __restrict__ x,
                                                      const unsigned char* __restrict__ sx, const float* global_a,
                                                      const float* global_b, float alpha, int n, int k,
                                                      int mrows = kM) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int kblocks = k >> 4;
    const int katoms = (kblocks + 3) >> 2;
    const int chunk = 32 * kElems;
    const int stride = warps * chunk;
    const int lane_col = warp * chunk + lane * kElems;
    const int S = (k + stride - 1) / stride;                      // steps per row block, every warp
    const long long row_blocks = ((long long)n + kRows - 1) / kRows;
    const long long mine = blockIdx.x < row_blocks ? (row_blocks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const long long T = mine * S;                                 // this warp's steps, all row blocks

    fp4::decode_table_fill();
    prefetch_prologue(w, sw, n, k, (long long)blockIdx.x * kRows, warp, warps, lane);
    decode::pdl_trigger_early();
    decode::pdl_wait();
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;

    // The load cursor: step tl = (row block jl, K step sl) and the rows of jl.
    long long jl = 0;
    int sl = 0;
    RowPointers lrows;
    auto set_rows = [&](long long j) {
        set_row_pointers(lrows, w, sw, ((long long)blockIdx.x + j * gridDim.x) * kRows, n, k, kblocks, katoms);
    };
    set_rows(0);
    unsigned codes[kStages][kRows][2 * kBlocks];
    unsigned sraw[kStages][kRows];
    auto load_next = [&](unsigned (&c)[kRows][2 * kBlocks], unsigned (&sr)[kRows]) {
        const int col = lane_col + sl * stride;
        if (col < k) load_step(lrows, col, c, sr);
        if (++sl == S) {
            sl = 0;
            ++jl;
            set_rows(jl);
        }
    };
#pragma unroll
    for (int d = 0; d + 1 < kStages; ++d)
        if (d < T) load_next(codes[d], sraw[d]);

    __shared__ float partial[kMaxWarps][kM * kRows];
    float acc[kM][kRows];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[m][r] = 0.f;
    long long jc = 0;  // the consume cursor: row block jc, K step sc
    int sc = 0;
    for (long long t0 = 0; t0 < T; t0 += kStages) {
#pragma unroll
        for (int d = 0; d < kStages; ++d) {
            if (t0 + d < T) {  // warp-uniform and block-uniform (every warp has the same T)
                if (t0 + d + kStages - 1 < T)
                    load_next(codes[(d + kStages - 1) % kStages], sraw[(d + kStages - 1) % kStages]);
                const int col = lane_col + sc * stride;
                if (col < k) consume(acc, codes[d], sraw[d], x, sx, col, k, kblocks, katoms, mrows);
                if (++sc == S) {  // the row block's last step: reduce, store, start the next one
                    sc = 0;
#pragma unroll
                    for (int m = 0; m < kM; ++m)
#pragma unroll
                        for (int r = 0; r < kRows; ++r) {
#pragma unroll
                            for (int off = 16; off > 0; off >>= 1)
                                acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], off);
                        }
                    if (lane == 0) {
#pragma unroll
                        for (int m = 0; m < kM; ++m)
#pragma unroll
                            for (int r = 0; r < kRows; ++r) partial[warp][m * kRows + r] = acc[m][r];
                    }
#pragma unroll
                    for (int m = 0; m < kM; ++m)
#pragma unroll
                        for (int r = 0; r < kRows; ++r) acc[m][r] = 0.f;
                    __syncthreads();
                    const long long row0 = ((long long)blockIdx.x + jc * gridDim.x) * kRows;
                    for (int i = threadIdx.x; i < kM * kRows; i += blockDim.x) {
                        float sum = partial[0][i];
                        for (int v = 1; v < warps; ++v) sum += partial[v][i];
                        const int m = i / kRows, r = i % kRows;
                        if (row0 + r < n && m < mrows) decode::store_out(y + (long long)m * n + row0 + r, scale * sum);
                    }
                    __syncthreads();  // partial is reused by the next row block
                    ++jc;
                }
            }
        }
    }
    decode::pdl_trigger_late();
}
#endif

}  // namespace

// Both kernels: at most kMaxWarps warps per block; on the integer path a register cap may be asked for instead
// (MIRCUDA_FP4_MAX_REGS, __maxnreg__: an experiment's knob, 0 by default).
#if MIRCUDA_FP4_DP4A && MIRCUDA_FP4_MAX_REGS > 0
#define MIRCUDA_FP4_BOUNDS __maxnreg__(MIRCUDA_FP4_MAX_REGS)
#else
#define MIRCUDA_FP4_BOUNDS __launch_bounds__(kMaxWarps * 32)
#endif

#if MIRCUDA_FP4_GROUPED
// The grouped NVFP4 plans' decode kernel (variant "vector" of mircuda.matmul._moe; MIRCUDA_FP4_GROUPED = 1
// with the MIRCUDA_MOE_* defines of fp4_grouped_table.cuh, MIRCUDA_MOE_MT = MIRCUDA_FP4_M, NVFP4
// activations with linear scales: MIRCUDA_FP4_ACT_TILED 0). The setup kernel of fp4_grouped_table.cuh runs
// first and lists the tiles: each group's rows in tiles of kM. Grid: x the weight-row blocks (kRows rows
// each), y the tile slots (block y takes tiles y, y + grid.y, ... of the list), z the operand set. Block
// (x, y, s) multiplies tile t's rows (at most kM, consecutive from the group's offset) by weight rows [kRows x,
// kRows x + kRows) of the group's matrix with fp4_matvec (the M <= 16 CUDA-core path above: each weight
// is decoded once for the kM rows), scaled by alpha_per_matrix[s E + e]; with MIRCUDA_FP4_DP4A (1-row tiles,
// K % 32 == 0) by fp4_matvec_lean, the integer path. Rows no group covers are never written; every index comes
// from the validated table.
#include "fp4_grouped_table.cuh"

static_assert(kMT == kM, "MIRCUDA_MOE_MT must equal MIRCUDA_FP4_M (rows per tile)");
static_assert(MIRCUDA_FP4_ACT_TILED == 0 && MIRCUDA_FP4_ACT_BF16 == 0,
              "the grouped plans' activations are NVFP4 with linear scales");
static_assert(MIRCUDA_FP4_WIDE == 0 || kK % 32 == 0, "MIRCUDA_FP4_WIDE needs K % 32 == 0");

extern "C" __global__ void MIRCUDA_FP4_BOUNDS
    fp4_grouped_bf16(const int* __restrict__ ws, const float* __restrict__ alpha_per_matrix,
                     const unsigned char* __restrict__ a1, const unsigned char* __restrict__ sa1,
                     const unsigned char* __restrict__ b1, const unsigned char* __restrict__ sb1,
                     __nv_bfloat16* __restrict__ d1, const unsigned char* __restrict__ a2,
                     const unsigned char* __restrict__ sa2, const unsigned char* __restrict__ b2,
                     const unsigned char* __restrict__ sb2, __nv_bfloat16* __restrict__ d2) {
    // The table is the setup kernel's output: nothing is read before it has finished.
    decode::pdl_wait();
    // The total and (up to 128 groups) the prefix entries are loaded together: one L2 round trip before
    // the group is known, not log2(G) dependent ones.
    const int lane = threadIdx.x & 31;
#if !(MIRCUDA_FP4_DP4A && MIRCUDA_MOE_LEAN_TILES)
    const int total = ws[kPrefix + kG];
    int pre[kScan > 0 ? kScan : 1];
#pragma unroll
    for (int i = 0; i < kScan; ++i) pre[i] = lane + 32 * i < kG ? ws[kPrefix + lane + 32 * i] : 0x7fffffff;
#endif
    const int set = kSets == 2 ? (int)blockIdx.z : 0;
    const unsigned char* a = set ? a2 : a1;
    const unsigned char* sa = set ? sa2 : sa1;
    const unsigned char* b = set ? b2 : b1;
    const unsigned char* sb = set ? sb2 : sb1;
    __nv_bfloat16* d = set ? d2 : d1;
#if MIRCUDA_FP4_DP4A && MIRCUDA_MOE_LEAN_TILES
    // The lean tile walk (MIRCUDA_MOE_LEAN_TILES, up to 128 groups): every load of the group table a tile needs is
    // issued in one L2 round trip (lane l holds prefix, offset and matrix of groups l, l + 32, ...; the tile's
    // group g is found by ballots and its entries taken from lane g % 32 by shuffles), not two dependent ones;
    // the matrix's alpha is read before the K loop and passed by value (the same product); nothing but the tile
    // index lives across the walk: the table is re-read per tile and the thread's indices are re-read by
    // volatile moves (lean_ids<true>), which the compiler may not hoist (hoisted, the lane offsets of the body
    // stayed live across its K loop: 99 and 123 registers for the mixtral and fine layers, sm_90 SASS).
    static_assert(kScan > 0, "MIRCUDA_MOE_LEAN_TILES: at most 128 groups");
    for (long long t = blockIdx.y;; t += gridDim.y) {  // block-uniform
        const int total = ws[kPrefix + kG];
        int tp[kScan], to[kScan], tm[kScan];
#pragma unroll
        for (int i = 0; i < kScan; ++i) {
            const bool in = lane + 32 * i < kG;
            tp[i] = in ? ws[kPrefix + lane + 32 * i] : 0x7fffffff;
            to[i] = in ? ws[kOffset + lane + 32 * i] : 0;
            tm[i] = in ? ws[kMatrix + lane + 32 * i] : 0;
        }
        if (t >= total) break;
        const int tile = (int)t;
        const int g = find_group_scan(tp, tile);
        int gp = 0, go = 0, gm = 0;
#pragma unroll
        for (int i = 0; i < kScan; ++i) {  // the holder's chunk i = g / 32 (uniform): compile-time register index
            const int p = __shfl_sync(0xffffffffu, tp[i], g & 31), o = __shfl_sync(0xffffffffu, to[i], g & 31),
                      m = __shfl_sync(0xffffffffu, tm[i], g & 31);
            if ((g >> 5) == i) gp = p, go = o, gm = m;
        }
        const long long xrow0 = (long long)go + (long long)(tile - gp);
        const float alpha = alpha_per_matrix[set * kBank + gm];
#if MIRCUDA_FP4_PERSISTENT
        // With a persistent grid (one wave over the tiles a routing is expected to fill): the block walks the
        // tile's weight-row blocks x, x + grid.x, ..., one table lookup for all of them (each row block's ring
        // starts afresh: no ring across row blocks).
        constexpr long long kRowBlocks = ((long long)kN + kRows - 1) / kRows;
        for (long long rb = blockIdx.x; rb < kRowBlocks; rb += gridDim.x) {
            fp4_matvec_lean<true>(d, b + (long long)gm * kMatrixBytes, sb + (long long)gm * kMatrixScaleBytes,
                                  a + xrow0 * (kK / 2), sa + xrow0 * (kK / 16), nullptr, nullptr, alpha, kN, kK,
                                  (int)xrow0, rb);
            if (rb + gridDim.x < kRowBlocks) __syncthreads();  // the shared partial sums are reused
        }
#else
        fp4_matvec_lean<true>(d, b + (long long)gm * kMatrixBytes, sb + (long long)gm * kMatrixScaleBytes,
                              a + xrow0 * (kK / 2), sa + xrow0 * (kK / 16), nullptr, nullptr, alpha, kN, kK, (int)xrow0);
#endif
        if (t + gridDim.y < total) __syncthreads();  // the shared partial sums are reused
    }
#else
    // One tile per y slot for every routing of disjoint ranges; overlapping ranges (or more tiles than
    // grid.y's 65535) make the blocks walk the list, as fp4_grouped.cu's do (64-bit: tile + gridDim.y
    // never wraps).
    for (long long t = blockIdx.y; t < total; t += gridDim.y) {  // block-uniform
        const int tile = (int)t;
        const int g = kScan > 0 ? find_group_scan(pre, tile) : find_group(ws + kPrefix, tile);
        const int local = tile - ws[kPrefix + g];
        const int rows = min(kM, ws[kCount + g] - local * kM);
        const long long xrow0 = (long long)ws[kOffset + g] + (long long)local * kM;
        const int e = ws[kMatrix + g];
#if MIRCUDA_FP4_DP4A
        // 1-row tiles (kM = 1: rows is 1): the integer path of the single plan, the same exactness argument. The
        // tile's activation row starts at xrow0 K / 2 code bytes and xrow0 K / 16 scale bytes: 16- and 2-byte
        // aligned for K % 32 == 0 (the plan checks a and a_scales for 16 and 2).
        fp4_matvec_lean(d + xrow0 * kN, b + (long long)e * kMatrixBytes, sb + (long long)e * kMatrixScaleBytes,
                        a + xrow0 * (kK / 2), sa + xrow0 * (kK / 16), nullptr, alpha_per_matrix + set * kBank + e, 1.0f,
                        kN, kK);
#elif MIRCUDA_FP4_PERSISTENT
        // blockIdx.x walks the weight-row blocks x, x + gridDim.x, ... of this tile
        fp4_matvec_persistent(d + xrow0 * kN, b + (long long)e * kMatrixBytes, sb + (long long)e * kMatrixScaleBytes,
                              a + xrow0 * (kK / 2), sa + xrow0 * (kK / 16), nullptr,
                              alpha_per_matrix + set * kBank + e, 1.0f, kN, kK, rows);
#else
        fp4_matvec(d + xrow0 * kN, b + (long long)e * kMatrixBytes, sb + (long long)e * kMatrixScaleBytes,
                   a + xrow0 * (kK / 2), sa + xrow0 * (kK / 16), nullptr, alpha_per_matrix + set * kBank + e, 1.0f,
                   kN, kK, rows);
#endif
        if (t + gridDim.y < total) __syncthreads();  // the shared partial sums are reused
    }
#endif
}

#else
extern "C" __global__ void MIRCUDA_FP4_BOUNDS
    fp4_matvec_bf16(__nv_bfloat16* __restrict__ y, const unsigned char* __restrict__ w,
                    const unsigned char* __restrict__ sw, const void* __restrict__ x,
                    const unsigned char* __restrict__ sx, const float* global_a, const float* global_b, float alpha,
                    int n, int k) {
#if MIRCUDA_FP4_DP4A
    fp4_matvec_lean(y, w, sw, reinterpret_cast<const unsigned char*>(x), sx, global_a, global_b, alpha, n, k);
#elif MIRCUDA_FP4_PERSISTENT
    fp4_matvec_persistent(y, w, sw, x, sx, global_a, global_b, alpha, n, k);
#else
    fp4_matvec(y, w, sw, x, sx, global_a, global_b, alpha, n, k);
#endif
}
#endif  // MIRCUDA_FP4_GROUPED
