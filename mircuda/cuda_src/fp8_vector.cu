// BlockwiseFp8VectorPlan's and BlockwiseFp8Plan's decode kernel (M <= 16): DeepSeek-V3 blockwise FP8,
//   D[m, n] = alpha * sum over K-blocks kb of sa[m, kb] * sb[n / 128, kb] * (A[m, kb-block] . B[n, kb-block])
//             + beta * C[m, n]
// with A E4M3 [M, K] row-major, sa FP32 [M, ceil(K / 128)] row-major (one scale per 1 x 128 block),
// B E4M3 [N, K] row-major (a linear layer's weights), sb FP32 [ceil(N / 128), ceil(K / 128)] row-major
// (one scale per 128 x 128 block), C and D BF16 [M, N] row-major (C may be D; beta == 0 never reads C).
// Partial last blocks (K or N not a multiple of 128) are blocks of the elements that exist. K must be a
// multiple of 16 (each lane reads 16 bytes of one row; the plans refuse other K).
//
// M is a compile-time constant (-D MIRCUDA_FP8_M=1..16), and so are the weight rows per block
// (-D MIRCUDA_FP8_ROWS = 1, 2, 4 or 8; a divisor of 128, so a block's rows share one row of sb).
// Compiled by NVRTC for the current device (cc >= 8.9: cvt.rn.f16x2.e4m3x2 needs sm_89).
//
// Work split (as dense_vector.cu): block b owns weight rows [R b, R b + R); its warps (blockDim.x / 32,
// at most 8) split K in 512-column chunks (32 lanes x 16 bytes): warp w takes chunks w, w + warps, ...
// Lane l of chunk c reads columns [512 c + 16 l, 512 c + 16 l + 16): all inside one 128-K block
// (kb = 4 c + l / 8), so its 16-element partial dot product is in FP32 and gets one multiply by
// sa[m, kb] * sb[n / 128, kb] (per lane and 128-K block, never per element). Each E4M3 pair is decoded
// with one cvt.rn.f16x2.e4m3x2 (exact: every E4M3 value is an FP16 value) and widened to FP32; a weight
// pair is decoded once and used for all M activation rows.
// Weights are read once: 16-byte loads that bypass L1 and fetch whole 128-byte lines into L2
// (ld.global.nc.L1::no_allocate.L2::128B), the next chunk's weights, activations and scales issued
// before the current one is consumed (register double buffering, as in dense_vector.cu); activations
// and scales stay cached.
// On cc >= 9.0 the kernel supports programmatic dependent launch (see the prologue). Rows past N read
// row N - 1 (in bounds, never stored).
// -D MIRCUDA_FP8_PERSISTENT=1: the persistent form (fp8_gemv_persistent): a grid of at most one wave whose
// blocks walk the row blocks b, b + gridDim.x, ..., each warp's double buffer running on from one row block
// into the next (no per-block prologue or drain, no tail wave).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef MIRCUDA_FP8_M
#error "compile with -D MIRCUDA_FP8_M=<rows of A, 1..16>"
#endif
#ifndef MIRCUDA_FP8_ROWS
#define MIRCUDA_FP8_ROWS 8
#endif
#ifndef MIRCUDA_FP8_PERSISTENT
#define MIRCUDA_FP8_PERSISTENT 0
#endif
// The dense vector kernel measured the late trigger faster for grids of many 8-row blocks (H200,
// 2026-11-29; see dense_vector.cu); this kernel's grids are of that kind. Not yet measured for FP8.
#ifndef MIRCUDA_PDL_TRIGGER_LATE
#define MIRCUDA_PDL_TRIGGER_LATE 1
#endif
#include "decode_common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "blockwise_fp8_gemv needs compute capability >= 8.9 (cvt.rn.f16x2.e4m3x2)"
#endif

namespace {

constexpr int kM = MIRCUDA_FP8_M;
constexpr int kRows = MIRCUDA_FP8_ROWS;
static_assert(kM >= 1 && kM <= 16, "MIRCUDA_FP8_M must be in 1..16");
static_assert(kRows == 1 || kRows == 2 || kRows == 4 || kRows == 8, "MIRCUDA_FP8_ROWS must be 1, 2, 4 or 8");
static_assert(kRows * kM <= 32, "MIRCUDA_FP8_ROWS * MIRCUDA_FP8_M must be at most 32 (one output per lane)");
constexpr int kMaxWarps = 8;  // warps per block splitting K
constexpr int kChunk = 512;   // columns per warp per step: 32 lanes x 16 bytes
constexpr int kBlockK = 128;  // columns per scale block

// A streamed 16-byte weight load (see dense_vector.cu). Volatile, so that it is never hoisted out of
// the branch that guards its address.
__device__ __forceinline__ uint4 load_weights(const unsigned char* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Two E4M3 codes (the low byte is the element at the lower address) -> two floats (.x the low one).
__device__ __forceinline__ float2 e4m3x2(unsigned short codes) {
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(codes));
    __half2 pair;
    *reinterpret_cast<unsigned*>(&pair) = h;
    return __half22float2(pair);
}

// One chunk's operands for a lane: the 16 columns from `col` (inside K) of the weight rows and the
// activation rows, the weight scale and the activation scales of their 128-K block. Both forms load the next
// chunk's before this one is consumed (activations and scales too: an L1 miss of the activations or scales
// at the start of a chunk would otherwise wait in front of its arithmetic).
struct Chunk {
    uint4 w[kRows];
    uint4 x[kM];
    float sa[kM];
    float sb;
};

__device__ __forceinline__ void load_chunk(Chunk& st, const unsigned char* const (&rows)[kRows], const float* sbrow,
                                           const unsigned char* __restrict__ a, const float* __restrict__ sa,
                                           int col, int k, int kblocks) {
    const int kb = col / kBlockK;
#pragma unroll
    for (int r = 0; r < kRows; ++r) st.w[r] = load_weights(rows[r] + col);
    st.sb = __ldg(sbrow + kb);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
        st.x[m] = __ldg(reinterpret_cast<const uint4*>(a + (long long)m * k + col));
        st.sa[m] = __ldg(sa + (long long)m * kblocks + kb);
    }
}

// The chunk's 16-element dot products in FP32, then one multiply by sa * sb per row pair into acc.
__device__ __forceinline__ void consume_chunk(float (&acc)[kRows][kM], const Chunk& st) {
    float part[kRows][kM];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kM; ++m) part[r][m] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // the eight E4M3 pairs of the 16 bytes
        float2 wf[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const unsigned word = i < 2 ? st.w[r].x : i < 4 ? st.w[r].y : i < 6 ? st.w[r].z : st.w[r].w;
            wf[r] = e4m3x2((unsigned short)(i & 1 ? word >> 16 : word & 0xffffu));
        }
#pragma unroll
        for (int m = 0; m < kM; ++m) {
            const unsigned word = i < 2 ? st.x[m].x : i < 4 ? st.x[m].y : i < 6 ? st.x[m].z : st.x[m].w;
            const float2 xf = e4m3x2((unsigned short)(i & 1 ? word >> 16 : word & 0xffffu));
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                part[r][m] = fmaf(wf[r].x, xf.x, part[r][m]);
                part[r][m] = fmaf(wf[r].y, xf.y, part[r][m]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
        const float scale = st.sa[m] * st.sb;
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][m] = fmaf(part[r][m], scale, acc[r][m]);
    }
}

// The sums over the lanes: output i = r * kM + m is returned to lane i.
__device__ __forceinline__ float lane_sums(const float (&acc)[kRows][kM], int lane) {
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kM; ++m) {
            float v = acc[r][m];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            mine = lane == r * kM + m ? v : mine;
        }
    return mine;
}

#if !MIRCUDA_FP8_PERSISTENT
__device__ __forceinline__ void fp8_gemv(__nv_bfloat16* d, const __nv_bfloat16* c, const unsigned char* __restrict__ a,
                                         const float* __restrict__ sa, const unsigned char* __restrict__ b,
                                         const float* __restrict__ sb, float alpha, float beta, int n, int k) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const long long row0 = (long long)blockIdx.x * kRows;
    const int kblocks = (k + kBlockK - 1) / kBlockK;
    // kRows divides 128: every row of this block is in 128-row block row0 / 128 (a clamped row past N
    // takes that scale too; it is never stored).
    const float* sbrow = sb + (row0 / kBlockK) * (long long)kblocks;

    const unsigned char* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const long long row = row0 + r < n ? row0 + r : (long long)n - 1;
        rows[r] = b + row * (long long)k;
    }
    const int full = k / kChunk;  // chunks whose 512 columns are all inside K
#if __CUDA_ARCH__ >= 900
    {
        // Programmatic dependent launch (as dense_vector.cu): the L2 prefetches of this warp's first
        // two chunks of weights (the weights are never written by the previous kernel of the stream, and
        // L2 is the point of coherence) overlap this kernel's ramp with that kernel's tail; nothing that
        // kernel may write (A, the scales, C) is read before griddepcontrol.wait.
        // Lane -> (row lane / 4 mod R, 128-byte line lane % 4 of the chunk).
        // (The row's address is computed, not indexed from rows[]: a run-time index would put rows[] in
        // local memory.)
        const int rr = (lane >> 2) % kRows;
        const long long r = row0 + rr < n ? row0 + rr : (long long)n - 1;
        for (int i = 0; i < 2; ++i) {
            const int ch = warp + i * warps;
            if (ch < full)
                decode::prefetch_l2(reinterpret_cast<const unsigned short*>(b + r * (long long)k + ch * kChunk +
                                                                            (lane & 3) * 128));
        }
        decode::pdl_trigger_early();
        decode::pdl_wait();
    }
#endif
    float acc[kRows][kM];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;

    auto load = [&](Chunk& st, int col) { load_chunk(st, rows, sbrow, a, sa, col, k, kblocks); };
    auto consume = [&](const Chunk& st) { consume_chunk(acc, st); };

    int ch = warp;
    if (ch < full) {
        Chunk cur;
        load(cur, ch * kChunk + lane * 16);
        // Register double buffering: the next chunk is loaded before this one is consumed; the loop
        // back-edge keeps ptxas from sinking the loads next to their uses.
        for (;;) {
            const int next = ch + warps;
            const bool more = next < full;
            Chunk nst;
            if (more) load(nst, next * kChunk + lane * 16);
            consume(cur);
            ch = next;
            if (!more) break;
            cur = nst;
        }
    }
    // The partial chunk past the whole ones (K % 512 != 0): lanes whose 16 columns are inside K.
    const int chunks = (k + kChunk - 1) / kChunk;
    for (ch = full + warp; ch < chunks; ch += warps) {
        const int col = ch * kChunk + lane * 16;
        if (col < k) {  // K % 16 == 0: the lane's 16 columns are all inside K or all outside
            Chunk st;
            load(st, col);
            consume(st);
        }
    }

    float mine = lane_sums(acc, lane);  // output i = r * kM + m is kept by lane i

    decode::pdl_trigger_late();
    if (warps > 1) {
        __shared__ float partial[kMaxWarps][32];
        partial[warp][lane] = mine;
        __syncthreads();
        if (warp != 0) return;
        for (int i = 1; i < warps; ++i) mine += partial[i][lane];
    }
    const int r = lane / kM, m = lane % kM;
    const long long row = row0 + r;
    if (lane < kRows * kM && row < n) {
        const long long at = (long long)m * n + row;
        float v = alpha * mine;
        if (beta != 0.f) v = fmaf(beta, __bfloat162float(c[at]), v);  // beta == 0: C is never read
        d[at] = __float2bfloat16_rn(v);
    }
}

#else
// The persistent form. Every warp of a block walks the same S = ceil(K / (warps x 512)) chunk slots per row
// block (a lane whose 16 columns lie past K loads and adds nothing), so the block meets at each row block's
// end: the lanes' butterfly, the warps' sums through shared memory (one __syncthreads before, one after),
// warp 0 stores. Step t of a warp is (row block t / S, chunk slot t % S); the next step's operands are
// loaded before the current one is consumed, also across a row-block boundary.
__device__ __forceinline__ void fp8_gemv_persistent(__nv_bfloat16* d, const __nv_bfloat16* c,
                                                    const unsigned char* __restrict__ a, const float* __restrict__ sa,
                                                    const unsigned char* __restrict__ b, const float* __restrict__ sb,
                                                    float alpha, float beta, int n, int k) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int kblocks = (k + kBlockK - 1) / kBlockK;
    const int S = (k + warps * kChunk - 1) / (warps * kChunk);
    const long long row_blocks = ((long long)n + kRows - 1) / kRows;
    const long long mine_blocks = blockIdx.x < row_blocks ? (row_blocks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const long long T = mine_blocks * S;
#if __CUDA_ARCH__ >= 900
    {
        // As fp8_gemv: L2 prefetches of this warp's first two chunks of its first row block before
        // griddepcontrol.wait (weights are never written by the previous kernel; L2 is coherent).
        const long long row0 = (long long)blockIdx.x * kRows;
        const int rr = (lane >> 2) % kRows;
        const long long r = row0 + rr < n ? row0 + rr : (long long)n - 1;
        for (int i = 0; i < 2; ++i) {
            const int ch = warp + i * warps;
            if (mine_blocks > 0 && (ch + 1) * kChunk <= k)
                decode::prefetch_l2(reinterpret_cast<const unsigned short*>(b + r * (long long)k + ch * kChunk +
                                                                            (lane & 3) * 128));
        }
        decode::pdl_trigger_early();
        decode::pdl_wait();
    }
#endif
    // The load cursor: row block jl, chunk slot sl, and that row block's rows and scale row.
    long long jl = 0;
    int sl = 0;
    const unsigned char* rows[kRows];
    const float* sbrow = sb;
    auto set_rows = [&](long long j) {
        const long long row0 = ((long long)blockIdx.x + j * gridDim.x) * kRows;
        sbrow = sb + (row0 / kBlockK) * (long long)kblocks;  // kRows divides 128: one scale row per row block
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const long long row = row0 + r < n ? row0 + r : (long long)n - 1;
            rows[r] = b + row * (long long)k;
        }
    };
    set_rows(0);
    auto load_next = [&](Chunk& st) {
        const int col = (warp + sl * warps) * kChunk + lane * 16;
        if (col < k) load_chunk(st, rows, sbrow, a, sa, col, k, kblocks);
        if (++sl == S) {
            sl = 0;
            ++jl;
            set_rows(jl);
        }
    };
    float acc[kRows][kM];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;
    __shared__ float partial[kMaxWarps][32];
    long long jc = 0;  // the consume cursor
    int sc = 0;
    Chunk cur;
    if (T > 0) load_next(cur);
    for (long long t = 0; t < T; ++t) {  // block-uniform: every warp has the same T
        Chunk nst;
        if (t + 1 < T) load_next(nst);
        if ((warp + sc * warps) * kChunk + lane * 16 < k) consume_chunk(acc, cur);
        if (++sc == S) {  // the row block's last chunk slot: reduce, store, start the next row block
            sc = 0;
            float mine = lane_sums(acc, lane);
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
                for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;
            if (warps > 1) {
                partial[warp][lane] = mine;
                __syncthreads();
                for (int i = 1; i < warps; ++i) mine += partial[i][lane];
            }
            const long long row0 = ((long long)blockIdx.x + jc * gridDim.x) * kRows;
            const int r = lane / kM, m = lane % kM;
            const long long row = row0 + r;
            if (warp == 0 && lane < kRows * kM && row < n) {
                const long long at = (long long)m * n + row;
                float v = alpha * mine;
                if (beta != 0.f) v = fmaf(beta, __bfloat162float(c[at]), v);  // beta == 0: C is never read
                d[at] = __float2bfloat16_rn(v);
            }
            if (warps > 1) __syncthreads();  // partial is reused by the next row block
            ++jc;
        }
        cur = nst;
    }
    decode::pdl_trigger_late();
}
#endif  // MIRCUDA_FP8_PERSISTENT

}  // namespace

// d and c may be the same buffer (no __restrict__ on them): each output is read before it is written,
// by the same thread.
extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)
    blockwise_fp8_gemv(__nv_bfloat16* d, const __nv_bfloat16* c, const unsigned char* __restrict__ a,
                       const float* __restrict__ sa, const unsigned char* __restrict__ b,
                       const float* __restrict__ sb, float alpha, float beta, int n, int k) {
#if MIRCUDA_FP8_PERSISTENT
    fp8_gemv_persistent(d, c, a, sa, b, sb, alpha, beta, n, k);
#else
    fp8_gemv(d, c, a, sa, b, sb, alpha, beta, n, k);
#endif
}
