// DenseMatmulPlan's decode kernel: C[M,N] = alpha * A[M,K] . W[N,K]^T + beta * C[M,N] for M <= 32,
// a "batched GEMV": the weights are read once, at HBM bandwidth, and each 16-byte weight load serves
// all M rows of A.
//
// A is row-major [M, K] (lda = K: the M activation rows), W row-major [N, K] (one weight row per
// output feature), C row-major [M, N]; A and W are FP16 or BF16, accumulation is FP32, C is the input
// type or FP32. M is a compile-time constant (NVRTC -D MIRCUDA_GEMV_M=1..32), compiled by NVRTC for
// the current device (any cc >= 8.0) through mircuda's Compiler.
//
// The products run on the tensor cores with the warp-level mma.sync.m16n8k16 (FP32 accumulation,
// PTX ISA "Warp-level matrix fragments for mma.m16n8k16"): the weights are the 16-row A operand, the
// M activation rows are the 8-column B operand (one n8 tile per 8 rows: up to four). A CUDA-core
// FMA loop would spend ~8 conversions and M FMAs per weight element, more instructions than a
// bandwidth-bound kernel can issue at M = 16; the mma spends one instruction per 16x8x16 products.
//
// Fragments are loaded straight from global memory with 16-byte loads. A dot product does not care
// in which order K is summed, only that both operands agree: lane (g = lane / 4, t = lane % 4) loads
// the eight columns [8t, 8t + 8) of a 32-column step for weight rows g and g + 8 and for activation
// row g, and hands columns 8t + {0,1 | 2,3} to one mma as its k = {2t, 2t+1 | 2t+8, 2t+9} and columns
// 8t + {4,5 | 6,7} to a second mma. Every operand of the same k then comes from the same column.
// Fragment layout (PTX ISA): A regs {a0a1, a2a3, a4a5, a6a7} = (row g, k 2t..), (row g+8, k 2t..),
// (row g, k 2t+8..), (row g+8, k 2t+8..); B regs {b0b1, b2b3} = (k 2t.., col g), (k 2t+8.., col g);
// C {c0, c1, c2, c3} = (row g, col 2t), (row g, col 2t+1), (row g+8, col 2t), (row g+8, col 2t+1).
//
// Work split: block b owns weight rows [16Tb, 16Tb + 16T), T = MIRCUDA_GEMV_ROW_TILES (1 or 2: each
// activation fragment a lane loads then serves T 16-row tiles, which matters above M = 16, where the
// activation loads outnumber the weight loads); its warps (blockDim.x / 32, at most 8) split K
// in chunks of 32 x MIRCUDA_GEMV_UNROLL columns (default four 32-column steps): warp w takes chunks w, w + warps, ... The `_v16`
// variant needs K % 8 == 0 and 16-byte aligned A and W: each lane issues 2 x T x unroll 16-byte weight
// loads per chunk and the next chunk's loads before consuming the current one (register double
// buffering, as in dense_vector.cu), so twice that many are in flight. Weights are read once, so
// they bypass L1 (ld.global.nc.L1::no_allocate); activations are read by every block and stay cached.
// The `_any` variant takes any K and any 2-byte alignment with element loads. On cc >= 9.0 the kernel
// supports programmatic dependent launch (see the prologue of batched_gemv). Rows past N read row
// N - 1 (in bounds, never stored); activation rows past M are zeros; beta == 0 never reads C.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef MIRCUDA_GEMV_M
#error "compile with -D MIRCUDA_GEMV_M=<rows of A, 1..32>"
#endif
#ifndef MIRCUDA_GEMV_ROW_TILES
#define MIRCUDA_GEMV_ROW_TILES 1
#endif

// Where programmatic dependent launch lets the next kernel of the stream start (cc >= 9.0): at the
// start of each block (early), or once its loads are done (late). Measured on an H200 on 2026-11-29
// (bf16, cold weights, back to back): for M <= 8 the late trigger was as fast or faster on every shape
// (14336 x 4096, M = 1: 28.8 instead of 31.4 µs; 6144 x 4096: 14.2 instead of 16.9), for M = 16 the
// early one was (4096 x 4096: 11.4 instead of 11.8 µs; the other shapes within 1 %).
#ifndef MIRCUDA_PDL_TRIGGER_LATE
#define MIRCUDA_PDL_TRIGGER_LATE (MIRCUDA_GEMV_M <= 8)
#endif
#include "decode_common.cuh"

namespace {

constexpr int kM = MIRCUDA_GEMV_M;
static_assert(kM >= 1 && kM <= 32, "MIRCUDA_GEMV_M must be in 1..32");
constexpr int kTiles = (kM + 7) / 8;  // n8 tiles of activation rows
// 16-row weight tiles per warp (the mma's M): each activation fragment a lane loads serves all of them,
// so two halve the activation reads per weight byte (which at M > 16 outnumber the weight loads).
constexpr int kRowTiles = MIRCUDA_GEMV_ROW_TILES;
static_assert(kRowTiles == 1 || kRowTiles == 2, "MIRCUDA_GEMV_ROW_TILES must be 1 or 2");
constexpr int kRows = 16 * kRowTiles;  // weight rows per block
constexpr int kMaxWarps = 8;          // warps per block splitting K
constexpr int kStep = 32;             // columns per pair of mmas: 4 lanes x 8
// 1: the first chunk's weights are loaded before griddepcontrol.wait (DenseMatmulPlan(static_weights=True); see the
// prologue).
#ifndef MIRCUDA_PRELOAD_WEIGHTS
#define MIRCUDA_PRELOAD_WEIGHTS 0
#endif
#ifndef MIRCUDA_GEMV_UNROLL
#define MIRCUDA_GEMV_UNROLL 4
#endif
constexpr int kUnroll = MIRCUDA_GEMV_UNROLL;  // steps per chunk
constexpr int kChunk = kStep * kUnroll;

struct Bf16 {
    static __device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
};

struct F16 {
    static __device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                               unsigned b0, unsigned b1) {
        decode::mma_f16(c, a0, a1, a2, a3, b0, b1);
    }
};

using decode::load_out;
using decode::store_out;

// A streamed 16-byte weight load: not kept in L1 (each weight is read once), and fetching the whole
// 128-byte line into L2 (a warp's load covers 64 bytes of each row; the next load takes the other 64:
// ~7 % faster on an H200). Volatile, so that the compiler never hoists one out of the branch that
// guards its address.
__device__ __forceinline__ uint4 load_weights(const unsigned short* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// Eight elements from `col` on, element by element (any alignment); zeros from column `k` on.
__device__ __forceinline__ uint4 load_any(const unsigned short* row, int col, int k) {
    unsigned e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = col + i < k ? unsigned(__ldg(row + col + i)) : 0u;
    return make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
}

// One 32-column step: weight rows g (lo) and g + 8 (hi) of each row tile against the activation tiles.
template <class In>
__device__ __forceinline__ void step(float (&acc)[kRowTiles][kTiles][4], const uint4 (&lo)[kRowTiles],
                                     const uint4 (&hi)[kRowTiles], const uint4 (&x)[kTiles]) {
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
            In::mma(acc[r][j], lo[r].x, hi[r].x, lo[r].y, hi[r].y, x[j].x, x[j].y);
            In::mma(acc[r][j], lo[r].z, hi[r].z, lo[r].w, hi[r].w, x[j].z, x[j].w);
        }
}

template <class In, bool Vec, class Out>
__device__ __forceinline__ void batched_gemv(Out* __restrict__ c, const unsigned short* __restrict__ a,
                                             const unsigned short* __restrict__ w, float alpha, float beta,
                                             int n, int k) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;  // the mma's group: weight rows g, g + 8; activation rows g (+ 8)
    const int t = lane & 3;   // the eight columns [8t, 8t + 8) of each step
    const long long row0 = (long long)blockIdx.x * kRows;

    const unsigned short* wlo[kRowTiles];
    const unsigned short* whi[kRowTiles];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
        const long long rlo = row0 + 16 * r + g < n ? row0 + 16 * r + g : (long long)n - 1;
        const long long rhi = row0 + 16 * r + g + 8 < n ? row0 + 16 * r + g + 8 : (long long)n - 1;
        wlo[r] = w + rlo * (long long)k;
        whi[r] = w + rhi * (long long)k;
    }
    const unsigned short* xrow[kTiles];
    bool xlive[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        const int m = g + 8 * j;
        xlive[j] = m < kM;
        xrow[j] = a + (long long)(m < kM ? m : kM - 1) * k;
    }
#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
    uint4 pre_lo[kUnroll][kRowTiles], pre_hi[kUnroll][kRowTiles];
#endif
#if __CUDA_ARCH__ >= 900
    {
        // Programmatic dependent launch (the plan launches with programmatic stream serialization on
        // cc >= 9.0): this block may start while the previous kernel of the stream still runs. Until
        // griddepcontrol.wait returns nothing that kernel may write is read; the L2 prefetches of the
        // first two chunks of weights are safe (L2 is the point of coherence) and overlap the ramp of
        // this kernel with the tail of the previous one. Without the launch attribute both are no-ops.
        const int full = k / kChunk;
        for (int i = 0; i < 2; ++i) {
            const int ch = warp + i * warps;
#pragma unroll
            for (int r = 0; r < kRowTiles; ++r)
                if (ch < full) decode::prefetch_l2((t < 2 ? wlo[r] : whi[r]) + ch * kChunk + (t & 1) * 64);
        }
#if MIRCUDA_PRELOAD_WEIGHTS
        // The first chunk's weights into registers before the wait (static_weights: the caller promised that
        // no kernel of the stream that may still be running writes W), so that this block streams during the
        // previous grid's tail.
        if (Vec && warp < full) {
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int col = warp * kChunk + u * kStep + 8 * t;
#pragma unroll
                for (int r = 0; r < kRowTiles; ++r) {
                    pre_lo[u][r] = load_weights(wlo[r] + col);
                    pre_hi[u][r] = load_weights(whi[r] + col);
                }
            }
        }
#endif
        decode::pdl_trigger_early();
        decode::pdl_wait();
    }
#endif
    float acc[kRowTiles][kTiles][4];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    const int steps = (k + kStep - 1) / kStep;  // 32-column steps, the last one possibly partial
    int s = warp;                               // the next step this warp takes after the chunked loop

    if (Vec) {
        const int full = k / kChunk;  // chunks whose 128 columns are all inside K
        int ch = warp;
        if (ch < full) {
            uint4 lo[kUnroll][kRowTiles], hi[kUnroll][kRowTiles], x[kUnroll][kTiles];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int col = ch * kChunk + u * kStep + 8 * t;
#pragma unroll
                for (int r = 0; r < kRowTiles; ++r) {
#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
                    lo[u][r] = pre_lo[u][r];
                    hi[u][r] = pre_hi[u][r];
#else
                    lo[u][r] = load_weights(wlo[r] + col);
                    hi[u][r] = load_weights(whi[r] + col);
#endif
                }
#pragma unroll
                for (int j = 0; j < kTiles; ++j)
                    x[u][j] = xlive[j] ? __ldg(reinterpret_cast<const uint4*>(xrow[j] + col)) : zero;
            }
            // Register double buffering: the next chunk's loads are issued before this one is
            // consumed; the loop back-edge keeps ptxas from sinking them next to their uses.
            for (;;) {
                const int next = ch + warps;
                const bool more = next < full;
                uint4 nlo[kUnroll][kRowTiles], nhi[kUnroll][kRowTiles], nx[kUnroll][kTiles];
                if (more) {
#pragma unroll
                    for (int u = 0; u < kUnroll; ++u) {
                        const int col = next * kChunk + u * kStep + 8 * t;
#pragma unroll
                        for (int r = 0; r < kRowTiles; ++r) {
                            nlo[u][r] = load_weights(wlo[r] + col);
                            nhi[u][r] = load_weights(whi[r] + col);
                        }
#pragma unroll
                        for (int j = 0; j < kTiles; ++j)
                            nx[u][j] = xlive[j] ? __ldg(reinterpret_cast<const uint4*>(xrow[j] + col)) : zero;
                    }
                }
#pragma unroll
                for (int u = 0; u < kUnroll; ++u) step<In>(acc, lo[u], hi[u], x[u]);
                ch = next;
                if (!more) break;
#pragma unroll
                for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
                    for (int r = 0; r < kRowTiles; ++r) {
                        lo[u][r] = nlo[u][r];
                        hi[u][r] = nhi[u][r];
                    }
#pragma unroll
                    for (int j = 0; j < kTiles; ++j) x[u][j] = nx[u][j];
                }
            }
        }
        // The steps past the whole chunks, one at a time over the warps (K % 8 == 0: a lane's eight
        // columns are all inside K or all outside; outside ones are zeros in both operands).
        s = full * kUnroll + warp;
        for (; s < steps; s += warps) {
            const int col = s * kStep + 8 * t;
            uint4 lo[kRowTiles], hi[kRowTiles], x[kTiles];
#pragma unroll
            for (int r = 0; r < kRowTiles; ++r) lo[r] = hi[r] = zero;
#pragma unroll
            for (int j = 0; j < kTiles; ++j) x[j] = zero;
            if (col < k) {
#pragma unroll
                for (int r = 0; r < kRowTiles; ++r) {
                    lo[r] = load_weights(wlo[r] + col);
                    hi[r] = load_weights(whi[r] + col);
                }
#pragma unroll
                for (int j = 0; j < kTiles; ++j)
                    if (xlive[j]) x[j] = __ldg(reinterpret_cast<const uint4*>(xrow[j] + col));
            }
            step<In>(acc, lo, hi, x);  // the whole warp: mma.sync needs every lane
        }
    } else {
        // Any K, any 2-byte alignment: element loads, zeros past K.
#pragma unroll 2
        for (; s < steps; s += warps) {
            const int col = s * kStep + 8 * t;
            uint4 x[kTiles];
#pragma unroll
            for (int j = 0; j < kTiles; ++j) x[j] = xlive[j] ? load_any(xrow[j], col, k) : zero;
            uint4 lo[kRowTiles], hi[kRowTiles];
#pragma unroll
            for (int r = 0; r < kRowTiles; ++r) {
                lo[r] = load_any(wlo[r], col, k);
                hi[r] = load_any(whi[r], col, k);
            }
            step<In>(acc, lo, hi, x);
        }
    }

    decode::pdl_trigger_late();
    if (warps > 1) {  // sum the warps' partial products, one row tile at a time; warp 0 stores
        __shared__ float partial[kMaxWarps][kTiles][4][32];
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
            if (r > 0) __syncthreads();  // warp 0 has read the previous row tile's sums
#pragma unroll
            for (int j = 0; j < kTiles; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) partial[warp][j][e][lane] = acc[r][j][e];
            __syncthreads();
            if (warp == 0)
                for (int i = 1; i < warps; ++i)
#pragma unroll
                    for (int j = 0; j < kTiles; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[r][j][e] += partial[i][j][e][lane];
        }
        if (warp != 0) return;
    }
    // acc[r][j] = (row 16r + g, act 8j + 2t), (row 16r + g, act 8j + 2t + 1), (row 16r + g + 8, act 8j + 2t),
    // (row 16r + g + 8, act 8j + 2t + 1).
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = 8 * j + 2 * t + (e & 1);
                const long long row = row0 + 16 * r + g + (e >> 1) * 8;
                if (m < kM && row < n) {
                    Out* p = c + (long long)m * n + row;
                    float v = alpha * acc[r][j][e];
                    if (beta != 0.f) v = fmaf(beta, load_out(p), v);  // beta == 0: C is never read
                    store_out(p, v);
                }
            }
        }
}

}  // namespace

#define MIRCUDA_BATCHED_GEMV(NAME, IN, VEC, OUT)                                                          \
    extern "C" __global__ void __launch_bounds__(kMaxWarps * 32)                                           \
        NAME(OUT* __restrict__ c, const unsigned short* __restrict__ a, const unsigned short* __restrict__ w, \
             float alpha, float beta, int n, int k) {                                                     \
        batched_gemv<IN, VEC>(c, a, w, alpha, beta, n, k);                                                \
    }

MIRCUDA_BATCHED_GEMV(batched_gemv_bf16_bf16_v16, Bf16, true, __nv_bfloat16)
MIRCUDA_BATCHED_GEMV(batched_gemv_bf16_bf16_any, Bf16, false, __nv_bfloat16)
MIRCUDA_BATCHED_GEMV(batched_gemv_bf16_f32_v16, Bf16, true, float)
MIRCUDA_BATCHED_GEMV(batched_gemv_bf16_f32_any, Bf16, false, float)
MIRCUDA_BATCHED_GEMV(batched_gemv_f16_f16_v16, F16, true, __half)
MIRCUDA_BATCHED_GEMV(batched_gemv_f16_f16_any, F16, false, __half)
MIRCUDA_BATCHED_GEMV(batched_gemv_f16_f32_v16, F16, true, float)
MIRCUDA_BATCHED_GEMV(batched_gemv_f16_f32_any, F16, false, float)
