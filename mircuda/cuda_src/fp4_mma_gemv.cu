// BlockScaledFp4Plan's tensor-core decode kernel for 2 <= M <= 16 with NVFP4 activations:
//   D[M, N] = alpha_eff * sum_k (qa[m,k] sa[m,k/16]) (qb[n,k] sb[n,k/16])   (FP32 accumulation, BF16 out)
// with the operands and parameters of fp4_vector.cu's fp4_matvec_bf16 (weights B [N, K/2] bytes of E2M1
// pairs, element 2i in the low nibble; activations A [M, K/2] likewise; UE4M3 scales per 16 K-elements
// in the linear or the tiled layout of fp4_common.cuh; alpha_eff = alpha * (*global_a) * (*global_b),
// read when the kernel runs), so the plans' launches, njit executor and graph node updates are shared.
// Any cc >= 8.0 (mma.sync.m16n8k16 with FP16 operands: PTX ISA 7.0, sm_80+). BF16 activations are not
// handled here (the plan keeps fp4_matvec_bf16 for them).
//
// Exact operands: a word of eight E2M1 codes decodes (fp4::decode_word, variant MIRCUDA_FP4_DECODE of
// fp4_common.cuh: 0 bytes, 1 pairs, 2 e4m3, 3 table) to four FP16 pairs, value times 2^-L (L = 14, 14,
// 6, 0), and each pair is multiplied (HMUL2) by its UE4M3 scale converted to FP16. The product
// q * s * 2^-L is exact in FP16: q * s is a multiple of 2^-10 (q of 0.5, s of 2^-9) with at most 6
// significant bits and below 2688, so q * s * 2^-L is a multiple of 2^-24 (FP16's subnormal step) at
// most 2688 (< 65504) for every L in 0..14. With L <= 6 (e4m3, table) the scale pairs enter as FP16
// s * 2^-8 (MIRCUDA_FP4_SCALE_PAIRS below: no HMUL2 by 2^8), and q * s * 2^-(L+8) is still a multiple
// of 2^-24. The tensor cores multiply these FP16 values exactly into FP32 and accumulate in FP32; the sum
// carries 2^-2L (and 2^-16 from shifted scales), undone (exactly, a power of two) with alpha at the end.
// Scaling the operands (instead of each 16-K MMA's sum) leaves the lanes free to read contiguous
// columns.
//
// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX ISA "Matrix fragments for mma.m16n8k16",
// lane = 4 g + t): A {a0, a1, a2, a3} = (row g, k 2t..2t+1), (row g + 8, k 2t..), (row g, k 2t+8..2t+9),
// (row g + 8, k 2t+8..); B {b0, b1} = (k 2t..2t+1, col g), (k 2t+8.., col g); C {c0..c3} = (row g, col
// 2t), (row g, col 2t+1), (row g + 8, col 2t), (row g + 8, col 2t+1); the lower k of a pair in the low
// half. The 16 weight rows are A, the activation rows B (one n8 tile for M <= 8, two for M <= 16; rows
// past M are zero registers, never loaded). Lane (g, t) owns E contiguous columns [c + E t, c + E t + E)
// of a warp step of 4 E columns (E = 32 when K % 32 == 0: 16-byte loads, else 16: 8-byte loads), in
// weight rows g and g + 8 and activation row g (+ 8). MMA j of the step takes the lane's decoded half2
// slots 2j (as k 2t, 2t+1) and 2j + 1 (as k 2t+8, 2t+9) of weights and activations alike (the same
// decoder, so the same two columns per slot), so every k meets the same column of both; over the four t
// the 16 k are 16 distinct columns, over j all 4 E.
//
// Work split: block b owns the 16 T weight rows [16 T b, 16 T b + 16 T), T = MIRCUDA_FP4_TILES (1 or 2:
// each warp runs the mmas of T 16-row tiles per step, so the activations it decodes serve T tiles; rows
// past N read row N - 1, never stored);
// its warps split K by steps: warp w takes steps w, w + warps, ...; the loads of the step S - 1 ahead are
// issued before the current one is consumed (a register ring of S = MIRCUDA_FP4_STAGES steps, 2..4; 2 is
// double buffering). Weights are read once (L1 bypassed, whole 128-byte lines into L2);
// activations and scales stay cached. The warps' sums meet in shared memory; warp 0 stores. With a cluster split
// (MIRCUDA_FP4_SPLIT_K = C > 1, below) cluster b's C blocks own those rows instead, block rank r's warp w takes
// steps r warps + w, + C warps, ..., the blocks' sums meet in rank 0's shared memory and rank 0's warp 0 stores.
// On cc >= 9.0 programmatic dependent launch: nothing the previous kernel may write is read before
// griddepcontrol.wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef MIRCUDA_FP4_M
#error "compile with -D MIRCUDA_FP4_M=<rows of A, 1..16>"
#endif
#ifndef MIRCUDA_FP4_TILED
#define MIRCUDA_FP4_TILED 0
#endif
#ifndef MIRCUDA_FP4_WIDE
#define MIRCUDA_FP4_WIDE 1
#endif
#ifndef MIRCUDA_FP4_TILES
#define MIRCUDA_FP4_TILES 1
#endif
#ifndef MIRCUDA_FP4_STAGES
#define MIRCUDA_FP4_STAGES 2
#endif
#ifndef MIRCUDA_PDL_TRIGGER_LATE  // the plans' pdl_trigger: "late" (1, the default) or "early" (0)
#define MIRCUDA_PDL_TRIGGER_LATE 1
#endif
// The weight loads ask L2 for whole 128-byte lines (fp4_common.cuh's MIRCUDA_FP4_L2_128B): a warp's 16-byte load
// covers 64 bytes of each of eight rows, and the line's other half is the next step's (another warp's where the
// block has several; with 8-byte loads, K % 32 != 0, a line spans four steps). H200,
// 2026-12-02, cold weights, one process, against the hint off: M = 4 / 8 / 16 0.1-3.4 % faster on the four Llama
// shapes (4096x14336 M = 8 16.74 -> 16.17 us, 14336x4096 M = 4 17.10 -> 16.77), none slower
// (benchmarks/results/fp4_l2_hint.json). The CUDA-core and grouped kernels (fp4_vector.cu, fp4_grouped.cu) measured
// no difference and keep fp4_common.cuh's default 0.
#ifndef MIRCUDA_FP4_L2_128B
#define MIRCUDA_FP4_L2_128B 1
#endif
// Scale pairs (1, the default; 0 the former byte loads, kept for A/B runs): with 16-byte code loads a lane's two
// 16-K groups have adjacent scale bytes in both layouts (linear: kb, kb + 1; tiled: kb even, so kb & 3 is 0 or 2
// inside one atom row), read by one 16-bit load per row (the plans then require 2-byte aligned scales); the scale
// pairs become FP16 without the HMUL2 by 2^8 where the decoder's factor leaves room (2^-L with L <= 6: the product
// q s 2^-(L+8) is still a multiple of 2^-24, FP16's subnormal step), and alpha takes the 2^16 back. With
// MIRCUDA_FP4_FULL_STEPS below: H200, 2026-12-02, cold weights, one process, against the kernel without both
// (benchmarks/results/fp4_mma_diet.json): 4.0-13.7 % less time at all 12 points of M = 4 / 8 / 16 on the four Llama
// shapes (14336x4096 M = 16 20.19 -> 17.88 us, 4096x14336 M = 4 15.81 -> 14.74), the pairs alone 0.7-5.4 %.
#ifndef MIRCUDA_FP4_SCALE_PAIRS
#define MIRCUDA_FP4_SCALE_PAIRS 1
#endif
// 1: K is a multiple of the warp step (4 kE columns), so every lane's columns of every step the loop visits are
// inside K and the loads need no predicate (the plans define it from K; 0 keeps the check).
#ifndef MIRCUDA_FP4_FULL_STEPS
#define MIRCUDA_FP4_FULL_STEPS 0
#endif
// Blocks per row block (1, the default; 2..4 on cc >= 9.0): a thread block cluster of that many blocks
// (__cluster_dims__, so a plain launch takes it) splits the K steps of one row block, and the other blocks add
// their warp-0 sums into the first block's shared memory (distributed shared memory, PTX ISA "mapa",
// "st.shared::cluster") in rank order after a cluster barrier: more resident warps per row block where the row
// blocks alone leave SMs idle or unevenly loaded (small N), with no workspace, no atomics and a fixed summation
// order (deterministic). The plans launch ceil(N / rows) x MIRCUDA_FP4_SPLIT_K blocks.
#ifndef MIRCUDA_FP4_SPLIT_K
#define MIRCUDA_FP4_SPLIT_K 1
#endif
#include "decode_common.cuh"
#include "fp4_common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "fp4_mma_bf16 needs compute capability >= 8.0 (mma.sync.m16n8k16 with FP16 operands)"
#endif

namespace {

constexpr int kM = MIRCUDA_FP4_M;
static_assert(kM >= 1 && kM <= 16, "MIRCUDA_FP4_M must be in 1..16");
constexpr int kN8 = (kM + 7) / 8;                // n8 tiles of activation rows
constexpr int kE = MIRCUDA_FP4_WIDE ? 32 : 16;   // columns per lane per step
constexpr int kWords = kE / 8;                   // 32-bit words of codes per row per lane
constexpr int kGroups = kE / 16;                 // 16-K scale groups per lane per step
constexpr int kMmas = kE / 4;                    // mmas per n8 tile per step
constexpr int kChunk = 4 * kE;                   // columns per warp step
constexpr int kMaxWarps = 8;
constexpr int kTiles = MIRCUDA_FP4_TILES;        // 16-row weight tiles per block (and per warp)
static_assert(kTiles == 1 || kTiles == 2, "MIRCUDA_FP4_TILES must be 1 or 2");
constexpr int kStages = MIRCUDA_FP4_STAGES;      // warp steps of loads held in registers (ring)
static_assert(kStages >= 2 && kStages <= 4, "MIRCUDA_FP4_STAGES must be 2, 3 or 4");
constexpr bool kPairs = MIRCUDA_FP4_SCALE_PAIRS != 0 && kGroups == 2;  // 16-bit loads of a row's two scale bytes
constexpr int kScaleRegs = kPairs ? 1 : kGroups;                      // registers of one row's scales per step
// Scales as FP16 times 2^-8 (no HMUL2 by 2^8) when the decoded operands keep it exact (see the top of the file).
constexpr bool kScaleShifted = kPairs && fp4::kDecodeLog2 <= 6;
constexpr bool kFullSteps = MIRCUDA_FP4_FULL_STEPS != 0;
constexpr int kSplit = MIRCUDA_FP4_SPLIT_K;       // blocks of a cluster splitting one row block's K steps
static_assert(kSplit >= 1 && kSplit <= 4, "MIRCUDA_FP4_SPLIT_K must be in 1..4");
#if MIRCUDA_FP4_SPLIT_K > 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "MIRCUDA_FP4_SPLIT_K > 1 needs compute capability >= 9.0 (thread block clusters)"
#endif

// The cluster primitives of the split (PTX ISA 7.8, sm_90): this block's rank and its cluster's index,
// a barrier in two halves, and a store into rank 0's copy of a shared variable.
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r = 0;
    if constexpr (kSplit > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_index() {
    unsigned c = blockIdx.x;
    if constexpr (kSplit > 1) asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(c));
    return c;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    if constexpr (kSplit > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive() {
    if constexpr (kSplit > 1) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    if constexpr (kSplit > 1) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void store_rank0(float* local, float v) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote) : "r"(a));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
    __half2 x = *reinterpret_cast<__half2*>(&a);
    const __half2 y = *reinterpret_cast<__half2*>(&b);
    x = __hmul2(x, y);
    return *reinterpret_cast<unsigned*>(&x);
}

// A UE4M3 byte as an FP16 pair (both halves; UE4M3 values are exact in FP16) without a conversion
// instruction: its bits (sign dropped) shifted into FP16's exponent and mantissa fields are its value
// times 2^-8 (normal: 2^(e-15) (1 + m/8) for E4M3's 2^(e-7) (1 + m/8); subnormal m 2^-17 for m 2^-9, an
// FP16 subnormal), and the HMUL2 by 2^8 (0x5C00) is exact. 0x7f (E4M3's NaN) gives 480, as
// fp4::ue4m3_to_float; the quantizers never write it.
__device__ __forceinline__ unsigned scale_half2(unsigned u) {
    const unsigned b = (u << 7) & 0x3F80u;
    return hmul2(b | (b << 16), 0x5C005C00u);
}

// Scale q (0 or 1) of a row's pair (byte q of `u`) as an FP16 pair: exactly as scale_half2 when !kScaleShifted,
// else the value times 2^-8 (the shifted bits alone, no HMUL2).
__device__ __forceinline__ unsigned pair_scale_half2(unsigned u, int q) {
    const unsigned b = (q == 0 ? u << 7 : u >> 1) & 0x3F80u;
    if constexpr (kScaleShifted) return b | (b << 16);
    else return hmul2(b | (b << 16), 0x5C005C00u);
}

// What the decoded operands carry besides the values: 2^-L from the decoder, and 2^-8 from shifted scales.
__device__ __forceinline__ float operand_unbias() {
    return fp4::decode_unbias() * (kScaleShifted ? 256.0f : 1.0f);
}

// A lane's codes of one row, decoded (fp4::decode_word: value * 2^-L in the decoder's element order) and
// multiplied by their UE4M3 scales: half2 slot 4 w + i covers two of word w's eight columns, slots
// [8 q, 8 q + 8) the 16-K group q.
__device__ __forceinline__ void operands(const unsigned (&codes)[kWords], const unsigned (&raw)[kScaleRegs],
                                         unsigned (&out)[4 * kWords]) {
    unsigned scale[kGroups];
#pragma unroll
    for (int q = 0; q < kGroups; ++q) scale[q] = kPairs ? pair_scale_half2(raw[0], q) : scale_half2(raw[q]);
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
        unsigned h[4];
        fp4::decode_word(codes[w], h);
#pragma unroll
        for (int i = 0; i < 4; ++i) out[4 * w + i] = hmul2(h[i], scale[w / 2]);
    }
}

// One warp step's operands for one lane: codes and UE4M3 scale bytes (zero past K or M; converted to FP16
// pairs when consumed, so that nothing waits for a load before its step is due).
struct Stage {
    unsigned w[2 * kTiles][kWords];  // rows g, g + 8 of tile 0, then of tile 1
    unsigned x[kN8][kWords];
    unsigned sw[2 * kTiles][kScaleRegs];  // scale bytes: one per register, or a row's pair in bits 0..15
    unsigned sx[kN8][kScaleRegs];
};

struct Operands {
    // Weight rows 16 tile + g and 16 tile + g + 8 (clamped to N - 1): their codes and scales at column 0
    // (a step adds its column's offset: no 64-bit row product per load).
    const unsigned char* wp[2 * kTiles];
    const unsigned char* sp[2 * kTiles];
    const unsigned char* xp[kN8];  // activation rows g + 8 j at column 0 (row 0 for rows past M: never read)
    const unsigned char* sxp[kN8]; // their scales' row part (fp4::scale_row_offset)
    bool xlive[kN8];               // the row is one of the M
    int t, k;
};

// A row's scales of K-block kb (kGroups of them, or the pair at kb, kb + 1) at row part `rowp`.
__device__ __forceinline__ void load_scales(unsigned (&v)[kScaleRegs], const unsigned char* rowp, int kb, bool in) {
    if constexpr (kPairs) {
        v[0] = in ? fp4::load_scale_pair(rowp + fp4::scale_col_offset<MIRCUDA_FP4_TILED != 0>(kb)) : 0u;
    } else {
#pragma unroll
        for (int q = 0; q < kGroups; ++q)
            v[q] = in ? __ldg(rowp + fp4::scale_col_offset<MIRCUDA_FP4_TILED != 0>(kb + q)) : 0u;
    }
}

__device__ __forceinline__ void load_stage(Stage& st, const Operands& op, int step) {
    const int col = step * kChunk + kE * op.t;
    // K % kE == 0: the lane's kE columns are all inside K or all outside (kFullSteps: always inside)
    const bool in = kFullSteps || col < op.k;
    const int kb = col >> 4;
    const unsigned coff = (unsigned)col >> 1;
#pragma unroll
    for (int r = 0; r < 2 * kTiles; ++r) {
        if (in) {
            fp4::load_codes(op.wp[r] + coff, st.w[r]);
        } else {
#pragma unroll
            for (int i = 0; i < kWords; ++i) st.w[r][i] = 0u;
        }
        load_scales(st.sw[r], op.sp[r], kb, in);
    }
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
        const bool live = in && op.xlive[j];
#pragma unroll
        for (int h = 0; h < kWords / 2; ++h) {
            uint2 v = make_uint2(0u, 0u);
            if (live) v = __ldg(reinterpret_cast<const uint2*>(op.xp[j] + coff) + h);
            st.x[j][2 * h] = v.x;
            st.x[j][2 * h + 1] = v.y;
        }
        load_scales(st.sx[j], op.sxp[j], kb, live);
    }
}

__device__ __forceinline__ void consume(float (&acc)[kTiles][kN8][4], const Stage& st) {
    // The activations are decoded once per step for all kTiles weight tiles.
    unsigned b[kN8][4 * kWords];
#pragma unroll
    for (int j = 0; j < kN8; ++j) operands(st.x[j], st.sx[j], b[j]);
#pragma unroll
    for (int tt = 0; tt < kTiles; ++tt) {
        unsigned a[2][4 * kWords];
        operands(st.w[2 * tt], st.sw[2 * tt], a[0]);
        operands(st.w[2 * tt + 1], st.sw[2 * tt + 1], a[1]);
        // MMA jm takes slots 2 jm (as k 2t, 2t+1) and 2 jm + 1 (k 2t+8, 2t+9) of both operands: every k
        // meets the same column of the weights and the activations, whatever the decoder's order.
#pragma unroll
        for (int j = 0; j < kN8; ++j)
#pragma unroll
            for (int jm = 0; jm < kMmas; ++jm)
                decode::mma_f16(acc[tt][j], a[0][2 * jm], a[1][2 * jm], a[0][2 * jm + 1], a[1][2 * jm + 1], b[j][2 * jm],
                    b[j][2 * jm + 1]);
    }
}

__device__ __forceinline__ void fp4_mma(__nv_bfloat16* __restrict__ y, const unsigned char* __restrict__ w,
                                        const unsigned char* __restrict__ sw, const unsigned char* __restrict__ x,
                                        const unsigned char* __restrict__ sx, const float* global_a,
                                        const float* global_b, float alpha, int n, int k) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int rank = (int)cluster_rank();  // 0 without a split
    const long long row0 = (long long)cluster_index() * (16 * kTiles);
    // Rank 0's shared memory is written by the others at the end: every block signals here that it runs, and
    // waits for the others' signal before its remote stores (the wait costs nothing by then).
    cluster_arrive_relaxed();

    Operands op;
    op.t = lane & 3;
    op.k = k;
    const int kblocks = k >> 4;
    const int katoms = (kblocks + 3) >> 2;
#pragma unroll
    for (int r = 0; r < 2 * kTiles; ++r) {
        long long row = row0 + 8 * r + g;  // r = 2 tile + half: 16 tile + 8 half + g
        row = row < n ? row : (long long)n - 1;
        op.wp[r] = w + row * (k / 2);
        op.sp[r] = sw + fp4::scale_row_offset<MIRCUDA_FP4_TILED != 0>(row, kblocks, katoms);
    }
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
        const int m = g + 8 * j;
        op.xlive[j] = m < kM;
        const long long mr = op.xlive[j] ? m : 0;
        op.xp[j] = x + mr * (k / 2);
        op.sxp[j] = sx + fp4::scale_row_offset<MIRCUDA_FP4_TILED != 0>(mr, kblocks, katoms);
    }

    fp4::decode_table_fill();  // the table variant's shared table (no global reads: before the wait)
    decode::pdl_trigger_early();
    decode::pdl_wait();
    float acc[kTiles][kN8][4];
#pragma unroll
    for (int tt = 0; tt < kTiles; ++tt)
#pragma unroll
        for (int j = 0; j < kN8; ++j) acc[tt][j][0] = acc[tt][j][1] = acc[tt][j][2] = acc[tt][j][3] = 0.f;

    // A register ring of kStages warp steps: the step kStages - 1 ahead is loaded before the current one
    // is consumed (2 stages: double buffering). Steps are warp-uniform: every lane runs every mma. The
    // cluster's kSplit x warps warps take the steps in turn (block rank r's warp w: r warps + w, + stride, ...).
    const int steps = (k + kChunk - 1) / kChunk;
    const int stride = warps * kSplit;
    int step = rank * warps + warp;
    Stage ring[kStages];
#pragma unroll
    for (int d = 0; d + 1 < kStages; ++d)
        if (step + d * stride < steps) load_stage(ring[d], op, step + d * stride);
    while (step < steps) {
#pragma unroll
        for (int d = 0; d < kStages; ++d) {
            if (step < steps) {
                const int ahead = step + (kStages - 1) * stride;
                if (ahead < steps) load_stage(ring[(d + kStages - 1) % kStages], op, ahead);
                consume(acc, ring[d]);
                step += stride;
            }
        }
    }

    decode::pdl_trigger_late();
    if (warps > 1) {
        // One tile at a time through the same shared array (the table variant already holds 32 KiB).
        __shared__ float partial[kMaxWarps][kN8][4][32];
#pragma unroll
        for (int tt = 0; tt < kTiles; ++tt) {
            if (tt > 0) __syncthreads();  // warp 0 has read the previous tile's sums
#pragma unroll
            for (int j = 0; j < kN8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) partial[warp][j][e][lane] = acc[tt][j][e];
            __syncthreads();
            if (warp == 0)
                for (int v = 1; v < warps; ++v)
#pragma unroll
                    for (int j = 0; j < kN8; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[tt][j][e] += partial[v][j][e][lane];
        }
        if (kSplit == 1 && warp != 0) return;
    }
    if constexpr (kSplit > 1) {
        // Ranks 1.. add their block sums into rank 0's slots; rank 0 adds the slots in rank order (fixed order:
        // the result does not depend on which block finishes first). Every thread takes part in the barriers.
        __shared__ float cluster_partial[kSplit > 1 ? kSplit - 1 : 1][kTiles][kN8][4][32];
        cluster_wait();  // every block of the cluster runs: rank 0's shared memory exists
        if (rank != 0 && warp == 0)
#pragma unroll
            for (int tt = 0; tt < kTiles; ++tt)
#pragma unroll
                for (int j = 0; j < kN8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) store_rank0(&cluster_partial[rank - 1][tt][j][e][lane], acc[tt][j][e]);
        cluster_arrive();
        cluster_wait();
        if (rank != 0 || warp != 0) return;
        for (int r = 0; r + 1 < kSplit; ++r)
#pragma unroll
            for (int tt = 0; tt < kTiles; ++tt)
#pragma unroll
                for (int j = 0; j < kN8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[tt][j][e] += cluster_partial[r][tt][j][e][lane];
    }
    // 2^2L undoes the decoder's 2^-L on both operands, and 2^16 the shifted scales' 2^-8 (exact: powers of two).
    float scale = alpha * (operand_unbias() * operand_unbias());
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
#pragma unroll
    for (int tt = 0; tt < kTiles; ++tt)
#pragma unroll
        for (int j = 0; j < kN8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = 8 * j + 2 * op.t + (e & 1);
                const long long row = row0 + 16 * tt + g + 8 * (e >> 1);
                if (m < kM && row < n) decode::store_out(y + (long long)m * n + row, scale * acc[tt][j][e]);
            }
}

}  // namespace

// Same parameters as fp4_matvec_bf16 (x is packed E2M1 here).
#if MIRCUDA_FP4_SPLIT_K > 1
#define MIRCUDA_FP4_CLUSTER __cluster_dims__(MIRCUDA_FP4_SPLIT_K, 1, 1)
#else
#define MIRCUDA_FP4_CLUSTER
#endif
extern "C" __global__ void MIRCUDA_FP4_CLUSTER __launch_bounds__(kMaxWarps * 32)
    fp4_mma_bf16(__nv_bfloat16* __restrict__ y, const unsigned char* __restrict__ w,
                 const unsigned char* __restrict__ sw, const void* __restrict__ x,
                 const unsigned char* __restrict__ sx, const float* global_a, const float* global_b, float alpha,
                 int n, int k) {
    fp4_mma(y, w, sw, reinterpret_cast<const unsigned char*>(x), sx, global_a, global_b, alpha, n, k);
}
