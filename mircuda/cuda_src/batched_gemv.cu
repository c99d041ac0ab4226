// DenseMatmulPlan's decode kernel: C[M,N] = alpha * A[M,K] . W[N,K]^T + beta * C[M,N] for M <= 16,
// a "batched GEMV": the weights are read once, at HBM bandwidth, and each 16-byte weight load serves
// all M rows of A.
//
// A is row-major [M, K] (lda = K: the M activation rows), W row-major [N, K] (one weight row per
// output feature), C row-major [M, N]; A and W are FP16 or BF16, accumulation is FP32, C is the input
// type or FP32. M is a compile-time constant (NVRTC -D MIRCUDA_GEMV_M=1..16), compiled by NVRTC for
// the current device (any cc >= 8.0) through mircuda's Compiler.
//
// The products run on the tensor cores with the warp-level mma.sync.m16n8k16 (FP32 accumulation,
// PTX ISA "Warp-level matrix fragments for mma.m16n8k16"): the weights are the 16-row A operand, the
// M activation rows are the 8-column B operand (one n8 tile for M <= 8, two for M <= 16). A CUDA-core
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
// Work split: block b owns weight rows [16b, 16b + 16); its warps (blockDim.x / 32, at most 8) split K
// in chunks of 128 columns (four 32-column steps): warp w takes chunks w, w + warps, ... The `_v16`
// variant needs K % 8 == 0 and 16-byte aligned A and W: each lane issues eight 16-byte weight loads
// per chunk and the next chunk's loads before consuming the current one (register double
// buffering, as in dense_vector.cu), so 8-16 loads per lane are in flight. Weights are read once, so
// they bypass L1 (ld.global.nc.L1::no_allocate); activations are read by every block and stay cached.
// The `_any` variant takes any K and any 2-byte alignment with element loads. On cc >= 9.0 the kernel
// supports programmatic dependent launch (see the prologue of batched_gemv). Rows past N read row
// N - 1 (in bounds, never stored); activation rows past M are zeros; beta == 0 never reads C.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef MIRCUDA_GEMV_M
#error "compile with -D MIRCUDA_GEMV_M=<rows of A, 1..16>"
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
static_assert(kM >= 1 && kM <= 16, "MIRCUDA_GEMV_M must be in 1..16");
constexpr int kTiles = (kM + 7) / 8;  // n8 tiles of activation rows
constexpr int kRows = 16;             // weight rows per block: the mma's M
constexpr int kMaxWarps = 8;          // warps per block splitting K
constexpr int kStep = 32;             // columns per pair of mmas: 4 lanes x 8
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
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
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

// One 32-column step: weight rows g (lo) and g + 8 (hi) against the activation tiles.
template <class In>
__device__ __forceinline__ void step(float (&acc)[kTiles][4], const uint4& lo, const uint4& hi,
                                     const uint4 (&x)[kTiles]) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        In::mma(acc[j], lo.x, hi.x, lo.y, hi.y, x[j].x, x[j].y);
        In::mma(acc[j], lo.z, hi.z, lo.w, hi.w, x[j].z, x[j].w);
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

    const long long rlo = row0 + g < n ? row0 + g : (long long)n - 1;
    const long long rhi = row0 + g + 8 < n ? row0 + g + 8 : (long long)n - 1;
    const unsigned short* wlo = w + rlo * (long long)k;
    const unsigned short* whi = w + rhi * (long long)k;
    const unsigned short* xrow[kTiles];
    bool xlive[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        const int m = g + 8 * j;
        xlive[j] = m < kM;
        xrow[j] = a + (long long)(m < kM ? m : kM - 1) * k;
    }
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
            if (ch < full) decode::prefetch_l2((t < 2 ? wlo : whi) + ch * kChunk + (t & 1) * 64);
        }
        decode::pdl_trigger_early();
        decode::pdl_wait();
    }
#endif
    float acc[kTiles][4];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    const int steps = (k + kStep - 1) / kStep;  // 32-column steps, the last one possibly partial
    int s = warp;                               // the next step this warp takes after the chunked loop

    if (Vec) {
        const int full = k / kChunk;  // chunks whose 128 columns are all inside K
        int ch = warp;
        if (ch < full) {
            uint4 lo[kUnroll], hi[kUnroll], x[kUnroll][kTiles];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int col = ch * kChunk + u * kStep + 8 * t;
                lo[u] = load_weights(wlo + col);
                hi[u] = load_weights(whi + col);
#pragma unroll
                for (int j = 0; j < kTiles; ++j)
                    x[u][j] = xlive[j] ? __ldg(reinterpret_cast<const uint4*>(xrow[j] + col)) : zero;
            }
            // Register double buffering: the next chunk's loads are issued before this one is
            // consumed; the loop back-edge keeps ptxas from sinking them next to their uses.
            for (;;) {
                const int next = ch + warps;
                const bool more = next < full;
                uint4 nlo[kUnroll], nhi[kUnroll], nx[kUnroll][kTiles];
                if (more) {
#pragma unroll
                    for (int u = 0; u < kUnroll; ++u) {
                        const int col = next * kChunk + u * kStep + 8 * t;
                        nlo[u] = load_weights(wlo + col);
                        nhi[u] = load_weights(whi + col);
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
                    lo[u] = nlo[u];
                    hi[u] = nhi[u];
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
            uint4 lo = zero, hi = zero, x[kTiles];
#pragma unroll
            for (int j = 0; j < kTiles; ++j) x[j] = zero;
            if (col < k) {
                lo = load_weights(wlo + col);
                hi = load_weights(whi + col);
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
            step<In>(acc, load_any(wlo, col, k), load_any(whi, col, k), x);
        }
    }

    decode::pdl_trigger_late();
    if (warps > 1) {  // sum the warps' partial products; warp 0 stores
        __shared__ float partial[kMaxWarps][kTiles][4][32];
#pragma unroll
        for (int j = 0; j < kTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) partial[warp][j][e][lane] = acc[j][e];
        __syncthreads();
        if (warp != 0) return;
        for (int i = 1; i < warps; ++i)
#pragma unroll
            for (int j = 0; j < kTiles; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[j][e] += partial[i][j][e][lane];
    }
    // acc[j] = (row g, act 8j + 2t), (row g, act 8j + 2t + 1), (row g + 8, act 8j + 2t), (row g + 8, ...).
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int m = 8 * j + 2 * t + (e & 1);
            const long long row = row0 + g + (e >> 1) * 8;
            if (m < kM && row < n) {
                Out* p = c + (long long)m * n + row;
                float v = alpha * acc[j][e];
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
