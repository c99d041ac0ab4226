// BlockwiseFp8Plan's tensor-core decode kernel (M = 1..16; the plan runs it for 2 <= M <= 16, and
// BlockwiseFp8VectorPlan on request for M = 1): DeepSeek-V3 blockwise FP8,
//   D[m, n] = alpha * sum over K-blocks kb of sa[m, kb] * sb[n / 128, kb] * (A[m, kb-block] . B[n, kb-block])
//             + beta * C[m, n]
// with the operands of fp8_vector.cu: A E4M3 [M, K] row-major, sa FP32 [M, ceil(K / 128)] row-major,
// B E4M3 [N, K] row-major, sb FP32 [ceil(N / 128), ceil(K / 128)] row-major, C and D BF16 [M, N]
// row-major (C may be D; beta == 0 never reads C). Partial last blocks of K and N are blocks of the
// elements that exist; K must be a multiple of 16 (the plans refuse other K). Same parameters as
// blockwise_fp8_gemv, so the plans' launches, njit executor and graph node updates are shared.
//
// The products run on the tensor cores: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (PTX ISA
// 7.8, sm_89+; "Matrix fragments for mma.m16n8k32" with .e4m3). The weights are the 16-row A operand,
// the M activation rows the 8-column B operand (one n8 tile for M <= 8, two for M <= 16; rows past M
// are zero registers, never loaded). ptxas emits QMMA.16832.F32.E4M3.E4M3 for sm_89 and sm_120; for
// sm_90 (Hopper has no FP8 mma.sync) it decodes the fragments with F2FP.F16.E4M3.UNPACK_B and runs two
// HMMA.16816.F32 per mma: FP16 products of E4M3 values are exact and the sums FP32 either way. On sm_90 the
// kernel does that decode itself by default, once per fragment (MIRCUDA_FP8_CVT below).
//
// Fragments (lane = 4 g + t; PTX ISA): A regs {R0, R1, R2, R3} = (row g, k 4t..4t+3), (row g + 8,
// k 4t..), (row g, k 4t+16..4t+19), (row g + 8, k 4t+16..); B regs {R0, R1} = (k 4t..4t+3, col g),
// (k 4t+16.., col g); byte i of a register is element i. C {c0, c1, c2, c3} = (row g, col 2t),
// (row g, col 2t+1), (row g+8, col 2t), (row g+8, col 2t+1). A dot product only needs both operands
// to agree on which column is which k: lane (g, t) loads the 16 bytes [16t, 16t + 16) of a 64-column
// step for weight rows g and g + 8 (words lo.x..lo.w, hi.x..hi.w) and for activation row g (x.x..x.w),
// and feeds words (.x, .y) to one mma as its k 4t.. and 4t+16.., words (.z, .w) to a second one. Every
// k then takes the same column of the weights and the activations.
//
// MIRCUDA_FP8_INT_DECODE=1 (a tuning option for sm_90, default 0) decodes the fragments itself with
// integer operations instead: an E4M3 code b becomes the FP16 bits (b & 0x80) << 8 | (b & 0x7f) << 7,
// exactly b x 2^-8 (the exponent fields differ in bias by 8; E4M3 subnormals land on FP16 subnormals),
// two codes per 32-bit result in 2.5 integer operations (SHF/LOP3) where F2FP decodes two per
// instruction on a conversion unit; each m16n8k32 becomes two mma.m16n8k16 FP16 -> FP32 (exact
// products), and the block sum is multiplied by 2^16. The NaN codes 0x7f / 0xff (which the quantizers
// never write) decode as +-480 on this path.
//
// Block scaling (exactly the definition): a 128-K block is two 64-column steps, four mmas per n8 tile
// into a fresh FP32 fragment; that block sum is then multiplied by sa[m, kb] * sb[n / 128, kb] and
// added into the running FP32 sum (one FMA per output element and 128-K block).
//
// Work split: block b owns the 16 * T weight rows [16 T b, 16 T b + 16 T), T = MIRCUDA_FP8_TILES (1,
// 2 or 4: a divisor of 8, so the block's rows share one row of sb); its warps (blockDim.x / 32, at most
// 8) split K by 128-K blocks: warp w takes blocks w, w + warps, ... Each lane loads 4 T weight words
// of 16 bytes per K-block, and the loads of the K-block MIRCUDA_FP8_STAGES - 1 turns ahead are issued before the
// current one is consumed (a register ring, as in fp4_mma_gemv.cu): 4 T (STAGES - 1) independent 16-byte weight
// loads in flight per lane.
// Weights are read once: 16-byte loads that bypass L1 and fetch whole 128-byte lines into L2
// (ld.global.nc.L1::no_allocate.L2::128B: a warp's load covers 64 bytes of eight rows, the other step
// the other 64); activations and scales are read by every block and stay cached. The warps' sums meet
// in shared memory; warp 0 applies alpha and beta and stores. On cc >= 9.0 the kernel supports
// programmatic dependent launch (see the prologue). Rows past N read row N - 1 (in bounds, never stored).
#include <cuda_bf16.h>

#ifndef MIRCUDA_FP8_M
#error "compile with -D MIRCUDA_FP8_M=<rows of A, 1..16>"
#endif
#ifndef MIRCUDA_FP8_TILES
#define MIRCUDA_FP8_TILES 1
#endif
// Where programmatic dependent launch lets the next kernel of the stream start (see decode_common.cuh):
// late (after the loads) by default, as fp8_vector.cu; not yet measured for this kernel (fp8-profile
// --sweep measures both).
#ifndef MIRCUDA_PDL_TRIGGER_LATE
#define MIRCUDA_PDL_TRIGGER_LATE 1
#endif
#ifndef MIRCUDA_FP8_INT_DECODE
#define MIRCUDA_FP8_INT_DECODE 0
#endif
// Experimental, no plan sets it (the static_weights promise of DenseVectorPlan; see the prologue): 1 loads the
// first K-block's weights before griddepcontrol.wait, 2 the first two (both halves of the double buffer). H200,
// 2026-12-02, cold weights, back to back, against 0 (benchmarks/results/static_weights_ab.json): 2 took M = 8
// 4096x14336 from 19.68 to 16.85 us and 14336x4096 from 19.34 to 17.86 (the best of a warps/rows sweep each), but
// M = 16 4096x14336 from 20.26 to 25.19 and M = 1 14336x4096 from 16.10 to 18.39 (more registers, fewer warps);
// 1 moved every shape by at most 1.6 % (M = 16 4096x4096 7.90 -> 8.02; 2.1 % in the first run) except M = 8
// 4096x14336 (18.19) and M = 16 14336x4096 (21.23, worse: 8 bytes of spill at M = 16).
#ifndef MIRCUDA_PRELOAD_WEIGHTS
#define MIRCUDA_PRELOAD_WEIGHTS 0
#endif
// sm_90 only (1, the default; 0 the ptxas emulation, kept for A/B runs): Hopper has no FP8 mma.sync, and for each
// m16n8k32 E4M3 mma ptxas decodes both fragments (F2FP.F16.E4M3.UNPACK_B), runs two HMMA.16816 from a zero
// accumulator and adds the four results into the block sum with FADDs. With 1 the kernel decodes each weight and
// activation fragment once (cvt.rn.f16x2.e4m3x2, PTX ISA 7.8: two E4M3 codes to an exact FP16 pair; a register's
// bytes 0, 1 and 2, 3) and chains its m16n8k16 FP16 mmas on the block sum: no FADD, no decode repeated per n8 tile
// or weight tile. FP16 holds every E4M3 value exactly (not every product: 448 x 448 = 200704 is past FP16's 65504),
// and the tensor cores multiply FP16 operands exactly into FP32 (a product of two E4M3 values has at most 8
// significant bits), so the sums are FP32 sums of the exact products either way. Decoding the activation fragments
// with integer operations instead (PRMT, LOP3, IADD, SHF; a third of the conversions at M = 16) was 1-7 % slower at
// all 12 points of M = 4 / 8 / 16 on the four Llama shapes (H200, 2026-12-03,
// benchmarks/results/fp8_mma_x_int_experiment.json): the conversion unit is not this kernel's limit.
#ifndef MIRCUDA_FP8_CVT
#define MIRCUDA_FP8_CVT 1
#endif
// K-blocks of loads in a register ring (2..4: the next STAGES - 1 K-blocks in flight while one is consumed, the ring
// unrolled so that no register is copied between K-blocks; the plans define it: 3 for 2 <= M <= 8, 2 above and at
// M = 1 with 16-row blocks); 0 the former loop (double buffering through a copied stage), which the plans take with
// MIRCUDA_FP8_CVT=0 at M = 1 with 32-row blocks (benchmarks/results/fp8_mma_m1_ring.json), and which
// MIRCUDA_PRELOAD_WEIGHTS needs. H200, 2026-12-02, fp8-profile with each variant's macros, torch's rowwise _scaled_mm in each run
// (benchmarks/results/fp8_mma_diet.json), 14336x4096 M = 2 / 4 / 8 / 16: the former kernel 17.2 / 17.5 / 19.5 /
// 20.6 us, the cvt decode alone 17.3 / 17.5 / 19.1 / 20.1, with the ring of 2 16.6 / 17.3 / 17.3 / 18.4, of 3
// 16.6 / 16.6 / 16.4 / 22.8 (M = 16: 174 registers, and the occupancy rule then keeps one warp per block).
#ifndef MIRCUDA_FP8_STAGES
#define MIRCUDA_FP8_STAGES (MIRCUDA_PRELOAD_WEIGHTS ? 0 : 2)
#endif
#include "decode_common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "blockwise_fp8_mma needs compute capability >= 8.9 (mma.sync with .e4m3 operands)"
#endif

namespace {

constexpr int kM = MIRCUDA_FP8_M;
constexpr int kTiles = MIRCUDA_FP8_TILES;  // 16-row weight tiles per block (and per warp)
static_assert(kM >= 1 && kM <= 16, "MIRCUDA_FP8_M must be in 1..16");
static_assert(kTiles == 1 || kTiles == 2 || kTiles == 4, "MIRCUDA_FP8_TILES must be 1, 2 or 4");
static_assert(MIRCUDA_FP8_INT_DECODE == 0 || MIRCUDA_FP8_INT_DECODE == 1, "MIRCUDA_FP8_INT_DECODE must be 0 or 1");
constexpr int kN8 = (kM + 7) / 8;  // n8 tiles of activation rows
constexpr int kRows = 16 * kTiles;
constexpr int kMaxWarps = 8;       // warps per block splitting K
constexpr int kBlockK = 128;       // columns per scale block: two steps
constexpr int kStep = 64;          // columns per pair of mmas: 4 lanes x 16 bytes
constexpr int kStages = MIRCUDA_FP8_STAGES;
static_assert(kStages == 0 || (kStages >= 2 && kStages <= 4), "MIRCUDA_FP8_STAGES must be 0, 2, 3 or 4");
static_assert(kStages == 0 || MIRCUDA_PRELOAD_WEIGHTS == 0, "MIRCUDA_PRELOAD_WEIGHTS needs MIRCUDA_FP8_STAGES=0");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && MIRCUDA_FP8_CVT && !MIRCUDA_FP8_INT_DECODE
#define MIRCUDA_FP8_CVT_PATH 1  // the explicit decode below (sm_90 only: elsewhere the E4M3 mma is native)
#else
#define MIRCUDA_FP8_CVT_PATH 0
#endif

// A streamed 16-byte weight load (see dense_vector.cu). Volatile, so that it is never hoisted out of
// the branch that guards its address.
__device__ __forceinline__ uint4 load_weights(const unsigned char* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

#if MIRCUDA_FP8_INT_DECODE
constexpr float kBlockSumScale = 65536.f;  // 2^16: both operands were decoded as value x 2^-8

// Four E4M3 codes (byte i = element i) -> FP16 pairs (element 0, element 2) and (element 1, element 3),
// each value x 2^-8 exactly.
__device__ __forceinline__ unsigned f16_even(unsigned w) { return ((w << 7) & 0x3f803f80u) | ((w << 8) & 0x80008000u); }
__device__ __forceinline__ unsigned f16_odd(unsigned w) { return ((w >> 1) & 0x3f803f80u) | (w & 0x80008000u); }

// The m16n8k32 E4M3 product of the fragments below as two m16n8k16 FP16 products: the first takes
// elements 0 and 2 of every register, the second 1 and 3. In both, FP16 A register r (k 2t, 2t+1 or
// 2t+8, 2t+9) and B register r' pair the same two byte positions of the E4M3 registers that the
// m16n8k32 layout pairs (same k), so each k still meets one column of weights and activations.
__device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
    decode::mma_f16(c, f16_even(a0), f16_even(a1), f16_even(a2), f16_even(a3), f16_even(b0), f16_even(b1));
    decode::mma_f16(c, f16_odd(a0), f16_odd(a1), f16_odd(a2), f16_odd(a3), f16_odd(b0), f16_odd(b1));
}
#elif !MIRCUDA_FP8_CVT_PATH
constexpr float kBlockSumScale = 1.f;

__device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

#if MIRCUDA_FP8_CVT_PATH
// Four E4M3 codes -> FP16 pairs (bytes 0, 1) and (bytes 2, 3), exact.
__device__ __forceinline__ void e4m3_halves(unsigned w, unsigned& lo, unsigned& hi) {
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;\n\t}"
        : "=r"(lo), "=r"(hi) : "r"(w));
}

// A 16-byte fragment word set decoded: [0..3] the low pairs of .x .. .w, [4..7] the high pairs.
__device__ __forceinline__ void decode16(const uint4& v, unsigned (&h)[8]) {
    e4m3_halves(v.x, h[0], h[4]);
    e4m3_halves(v.y, h[1], h[5]);
    e4m3_halves(v.z, h[2], h[6]);
    e4m3_halves(v.w, h[3], h[7]);
}
#endif

// One 128-K block's operands for one lane: weights [tile][step][lo, hi], activations [step][n8 tile],
// the weight scale and the activation scales of this lane's output columns (zero past M).
struct Stage {
    uint4 w[kTiles][2][2];
    uint4 x[2][kN8];
    float sb;
    float sa[kN8][2];
};

struct Operands {
    const unsigned char* wlo[kTiles];  // weight rows g and g + 8 of each tile (clamped to N - 1)
    const unsigned char* whi[kTiles];
    const unsigned char* xrow[kN8];    // activation row g + 8 j (valid only where xlive)
    bool xlive[kN8];
    const float* sbrow;                // sb's row of this block's 128 weight rows
    const float* sa;
    int t;
    int kblocks;
};

// Loads K-block kb (col0 = its first column); `bound` = K for the partial last block (lanes whose 16
// columns lie past K load nothing and hold zeros), or INT_MAX for a whole block.
template <bool kWeights = true>
__device__ __forceinline__ void load_stage(Stage& st, const Operands& op, int kb, int bound) {
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const int col = kb * kBlockK + s * kStep + 16 * op.t;
        const bool in = col < bound;  // K % 16 == 0: the lane's 16 columns are all inside K or all outside
        if (kWeights) {
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                st.w[i][s][0] = in ? load_weights(op.wlo[i] + col) : zero;
                st.w[i][s][1] = in ? load_weights(op.whi[i] + col) : zero;
            }
        }
#pragma unroll
        for (int j = 0; j < kN8; ++j)
            st.x[s][j] = in && op.xlive[j] ? __ldg(reinterpret_cast<const uint4*>(op.xrow[j] + col)) : zero;
    }
    st.sb = __ldg(op.sbrow + kb);
#pragma unroll
    for (int j = 0; j < kN8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int m = 8 * j + 2 * op.t + e;
            st.sa[j][e] = m < kM ? __ldg(op.sa + (long long)m * op.kblocks + kb) : 0.f;
        }
}

#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
// The weights of whole K-block kb (inside K) alone, for the loads before griddepcontrol.wait.
__device__ __forceinline__ void load_block_weights(Stage& st, const Operands& op, int kb) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const int col = kb * kBlockK + s * kStep + 16 * op.t;
#pragma unroll
        for (int i = 0; i < kTiles; ++i) {
            st.w[i][s][0] = load_weights(op.wlo[i] + col);
            st.w[i][s][1] = load_weights(op.whi[i] + col);
        }
    }
}
#endif

// acc += (the block's mma sums) * sa[m, kb] * sb[n / 128, kb].
__device__ __forceinline__ void consume(float (&acc)[kTiles][kN8][4], const Stage& st) {
#if MIRCUDA_FP8_CVT_PATH
    // The m16n8k32 mma(lo.x, hi.x, lo.y, hi.y; x.x, x.y) as two m16n8k16 FP16 mmas: bytes 0, 1 of every register
    // (k 2t, 2t + 1 and 2t + 8, 2t + 9 of the FP16 layout), then bytes 2, 3; weights and activations take the same
    // bytes, so each k still meets one column of both. Each fragment is decoded once for all tiles and n8 tiles.
    unsigned xh[2][kN8][8];
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int j = 0; j < kN8; ++j) decode16(st.x[s][j], xh[s][j]);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
        float part[kN8][4];
#pragma unroll
        for (int j = 0; j < kN8; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            unsigned lo[8], hi[8];
            decode16(st.w[i][s][0], lo);
            decode16(st.w[i][s][1], hi);
#pragma unroll
            for (int j = 0; j < kN8; ++j)
#pragma unroll
                for (int q = 0; q < 8; q += 2)  // q: .x/.y low (0), .z/.w low (2), .x/.y high (4), .z/.w high (6)
                    decode::mma_f16(part[j], lo[q], hi[q], lo[q + 1], hi[q + 1], xh[s][j][q], xh[s][j][q + 1]);
        }
#pragma unroll
        for (int j = 0; j < kN8; ++j) {
            const float s0 = st.sa[j][0] * st.sb, s1 = st.sa[j][1] * st.sb;
            acc[i][j][0] = fmaf(part[j][0], s0, acc[i][j][0]);
            acc[i][j][1] = fmaf(part[j][1], s1, acc[i][j][1]);
            acc[i][j][2] = fmaf(part[j][2], s0, acc[i][j][2]);
            acc[i][j][3] = fmaf(part[j][3], s1, acc[i][j][3]);
        }
    }
#else
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
        const float s0 = st.sa[j][0] * st.sb, s1 = st.sa[j][1] * st.sb;  // (sa * sb, rounded once, in FP32)
#pragma unroll
        for (int i = 0; i < kTiles; ++i) {
            float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const uint4& lo = st.w[i][s][0];
                const uint4& hi = st.w[i][s][1];
                const uint4& x = st.x[s][j];
                mma(part, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
                mma(part, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
            }
            // (x kBlockSumScale: a power of two, exact; 1 unless the fragments were decoded as x 2^-8)
            acc[i][j][0] = fmaf(part[0] * kBlockSumScale, s0, acc[i][j][0]);  // (row g, col 2t)
            acc[i][j][1] = fmaf(part[1] * kBlockSumScale, s1, acc[i][j][1]);  // (row g, col 2t + 1)
            acc[i][j][2] = fmaf(part[2] * kBlockSumScale, s0, acc[i][j][2]);  // (row g + 8, col 2t)
            acc[i][j][3] = fmaf(part[3] * kBlockSumScale, s1, acc[i][j][3]);  // (row g + 8, col 2t + 1)
        }
    }
#endif
}

__device__ __forceinline__ void fp8_mma_gemv(__nv_bfloat16* d, const __nv_bfloat16* c, const unsigned char* __restrict__ a,
                                             const float* __restrict__ sa, const unsigned char* __restrict__ b,
                                             const float* __restrict__ sb, float alpha, float beta, int n, int k) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const long long row0 = (long long)blockIdx.x * kRows;

    Operands op;
    op.t = lane & 3;
    op.kblocks = (k + kBlockK - 1) / kBlockK;
    op.sa = sa;
    // kRows divides 128: all rows of this block (clamped ones too: never stored) are in 128-row block
    // row0 / 128.
    op.sbrow = sb + (row0 / kBlockK) * (long long)op.kblocks;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
        const long long lo = row0 + 16 * i + g, hi = lo + 8;
        op.wlo[i] = b + (lo < n ? lo : (long long)n - 1) * (long long)k;
        op.whi[i] = b + (hi < n ? hi : (long long)n - 1) * (long long)k;
    }
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
        const int m = g + 8 * j;
        op.xlive[j] = m < kM;
        op.xrow[j] = a + (long long)(m < kM ? m : 0) * k;
    }
    const int full = k / kBlockK;  // K-blocks whose 128 columns are all inside K
    Stage first;  // the first K-block of this warp (its weights loaded early with MIRCUDA_PRELOAD_WEIGHTS)
#if MIRCUDA_PRELOAD_WEIGHTS >= 2 && __CUDA_ARCH__ >= 900
    Stage second;
    bool first_step = true;
#endif
#if __CUDA_ARCH__ >= 900
    {
        // Programmatic dependent launch (as dense_vector.cu): the L2 prefetches of this warp's first two
        // K-blocks of weights (never written by the previous kernel of the stream; L2 is the point of
        // coherence) overlap this kernel's ramp with that kernel's tail; nothing that kernel may write
        // (A, the scales, C) is read before griddepcontrol.wait. Lane -> (K-block lane / 16, row lane % 16
        // of each tile). (Addresses are computed, not indexed from op: a run-time index would put the
        // arrays in local memory.)
        const int kb = warp + (lane >> 4) * warps;
        if (kb < full) {
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                const long long r = row0 + 16 * i + (lane & 15);
                decode::prefetch_l2(reinterpret_cast<const unsigned short*>(
                    b + (r < n ? r : (long long)n - 1) * (long long)k + kb * kBlockK));
            }
        }
#if MIRCUDA_PRELOAD_WEIGHTS
        // The first K-block's weights into registers before the wait (the caller's promise: no kernel of the
        // stream that may still be running writes B).
        if (warp < full) load_block_weights(first, op, warp);
#if MIRCUDA_PRELOAD_WEIGHTS >= 2
        if (warp + warps < full) load_block_weights(second, op, warp + warps);  // the double buffer's other half
#endif
#endif
        decode::pdl_trigger_early();
        decode::pdl_wait();
    }
#endif
    float acc[kTiles][kN8][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int j = 0; j < kN8; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

    int kb = warp;
    if constexpr (kStages > 0) {
        // The ring: the K-block kStages - 1 turns ahead is loaded before the current one is consumed (as
        // fp4_mma_gemv.cu); unrolled over the ring's slots, so no stage is copied.
        constexpr int kRing = kStages > 0 ? kStages : 1;  // (kStages == 0 never runs this branch)
        Stage ring[kRing];
#pragma unroll
        for (int d = 0; d + 1 < kRing; ++d)
            if (kb + d * warps < full) load_stage(ring[d], op, kb + d * warps, 0x7fffffff);
        while (kb < full) {
#pragma unroll
            for (int d = 0; d < kRing; ++d) {
                if (kb < full) {
                    const int ahead = kb + (kRing - 1) * warps;
                    if (ahead < full) load_stage(ring[(d + kRing - 1) % kRing], op, ahead, 0x7fffffff);
                    consume(acc, ring[d]);
                    kb += warps;
                }
            }
        }
    } else if (kb < full) {
        Stage& cur = first;
#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
        load_stage<false>(cur, op, kb, 0x7fffffff);
#else
        load_stage(cur, op, kb, 0x7fffffff);
#endif
        // Register double buffering: the next K-block's loads are issued before this one is consumed;
        // the loop back-edge keeps ptxas from sinking them next to their uses.
        for (;;) {
            const int next = kb + warps;
            const bool more = next < full;
            Stage nst;
#if MIRCUDA_PRELOAD_WEIGHTS >= 2 && __CUDA_ARCH__ >= 900
            if (more) {
                if (first_step) {
                    load_stage<false>(nst, op, next, 0x7fffffff);
#pragma unroll
                    for (int i = 0; i < kTiles; ++i)
#pragma unroll
                        for (int s = 0; s < 2; ++s) {
                            nst.w[i][s][0] = second.w[i][s][0];
                            nst.w[i][s][1] = second.w[i][s][1];
                        }
                } else {
                    load_stage(nst, op, next, 0x7fffffff);
                }
            }
            first_step = false;
#else
            if (more) load_stage(nst, op, next, 0x7fffffff);
#endif
            consume(acc, cur);
            kb = next;
            if (!more) break;
            cur = nst;
        }
    }
    // The partial K-block past the whole ones (K % 128 != 0), by the warp next in turn; the whole warp
    // runs it (mma.sync needs every lane), lanes past K with zeros.
    if (full * kBlockK < k && warp == full % warps) {
        Stage st;
        load_stage(st, op, full, k);
        consume(acc, st);
    }

    decode::pdl_trigger_late();
    if (warps > 1) {  // sum the warps' partial sums; warp 0 stores
        __shared__ float partial[kMaxWarps][kTiles][kN8][4][32];
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
#pragma unroll
            for (int j = 0; j < kN8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) partial[warp][i][j][e][lane] = acc[i][j][e];
        __syncthreads();
        if (warp != 0) return;
        for (int w = 1; w < warps; ++w)
#pragma unroll
            for (int i = 0; i < kTiles; ++i)
#pragma unroll
                for (int j = 0; j < kN8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] += partial[w][i][j][e][lane];
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int j = 0; j < kN8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = 8 * j + 2 * op.t + (e & 1);
                const long long row = row0 + 16 * i + g + 8 * (e >> 1);
                if (m < kM && row < n) {
                    const long long at = (long long)m * n + row;
                    float v = alpha * acc[i][j][e];
                    if (beta != 0.f) v = fmaf(beta, __bfloat162float(c[at]), v);  // beta == 0: C is never read
                    d[at] = __float2bfloat16_rn(v);
                }
            }
}

}  // namespace

// d and c may be the same buffer (no __restrict__ on them): each output is read before it is written,
// by the same thread.
extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
    blockwise_fp8_mma(__nv_bfloat16* d, const __nv_bfloat16* c, const unsigned char* __restrict__ a,
                      const float* __restrict__ sa, const unsigned char* __restrict__ b,
                      const float* __restrict__ sb, float alpha, float beta, int n, int k) {
    fp8_mma_gemv(d, c, a, sa, b, sb, alpha, beta, n, k);
}
