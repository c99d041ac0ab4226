// DenseVectorPlan's kernel: y[N] = alpha * W[N,K] . x[K] + beta * y[N], the M = 1 matrix-vector product.
//
// W is row-major [N, K] (one weight row per output, as a linear layer stores it), x and W are FP16 or
// BF16, accumulation is FP32, y is the input type or FP32. Compiled by NVRTC for the current device
// (any cc >= 8.0) through mircuda's Compiler.
//
// Work split: block b owns output rows [R b, R b + R), R = DENSE_VECTOR_ROWS (8 or 16, chosen by the plan
// per shape). Its warps (blockDim.x / 32 of them, at most 8) split K: warp w reads the 256-column chunks
// w, w + warps, w + 2 warps, ... of all R rows, so one 16-byte load of x (eight inputs, four pairs
// converted to float2 once) serves R weight rows.
// The vector variant (`_v16`) needs K % 8 == 0 and 16-byte aligned W and x: each lane then loads 16
// bytes per row per chunk, and the loads of the next chunk are issued before the current one is
// consumed, so each lane keeps R to 2R independent 16-byte loads in flight, 2R to 4R with two chunks per
// step (DENSE_VECTOR_UNROLL=2; a bandwidth-bound kernel needs ~25 KB in flight per SM on an H200; 16 warps x
// 32 lanes x 8 x 16 B = 64 KB). The scalar variant (`_any`) takes any K and alignment.
// Weights are read once, so they bypass L1 (ld.global.nc.L1::no_allocate); x stays cached.
// Rows past N read row N-1 (in bounds, never stored); beta == 0 never reads y.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef DENSE_VECTOR_UNROLL
// chunks per pipeline step; 2 doubles the registers (254 on sm_90 with DENSE_VECTOR_MIN_BLOCKS=1): DenseVectorPlan's
// two-chunk form (mircuda.matmul._vector.takes_two_chunks, with the early trigger)
#define DENSE_VECTOR_UNROLL 1
#endif
#ifndef DENSE_VECTOR_ROWS
#define DENSE_VECTOR_ROWS 8
#endif
// 1: the first step's weights are loaded before griddepcontrol.wait (DenseVectorPlan(static_weights=True); see the
// prologue).
#ifndef MIRCUDA_PRELOAD_WEIGHTS
#define MIRCUDA_PRELOAD_WEIGHTS 0
#endif
static_assert(DENSE_VECTOR_ROWS == 8 || DENSE_VECTOR_ROWS == 16, "DENSE_VECTOR_ROWS must be 8 or 16");

// Where programmatic dependent launch lets the next kernel of the stream start (cc >= 9.0): at the
// start of each block (early), or once its loads are done (late). Measured on an H200 on 2026-11-29
// (bf16, cold weights, back to back, seven shapes): with 8 rows, early dependents cost up to 2 µs
// on grids of many blocks (6144 x 4096: 16.7 instead of 14.1 µs with the late trigger); with 16 rows
// (one wave of few blocks) the early trigger was faster (4096 x 4096: 10.1 instead of 10.6 µs).
#ifndef MIRCUDA_PDL_TRIGGER_LATE
#define MIRCUDA_PDL_TRIGGER_LATE (DENSE_VECTOR_ROWS == 8)
#endif
#include "decode_common.cuh"

namespace {

constexpr int kRows = DENSE_VECTOR_ROWS;  // output rows per block (and per warp)
constexpr int kMaxWarps = 8;   // warps per block splitting K
constexpr int kChunk = 256;    // columns per warp per step in the vector variant: 32 lanes x 8
// Register budget: 8 rows fit two blocks of 8 warps per SM (121 registers on sm_90); 16 rows double the
// loads in flight per lane and take one (238 registers; a lower bound spills). DENSE_VECTOR_MIN_BLOCKS
// overrides it for DenseVectorPlan's two-chunk form and `dense-vector-profile --sweep` (8 rows, unroll 2 and one
// block: no spills).
#ifndef DENSE_VECTOR_MIN_BLOCKS
#define DENSE_VECTOR_MIN_BLOCKS (DENSE_VECTOR_ROWS == 8 ? 2 : 1)
#endif
constexpr int kMinBlocks = DENSE_VECTOR_MIN_BLOCKS;

struct Bf16 {
    // A bf16 pair in a 32-bit word -> two floats (bf16 is the high half of an f32).
    static __device__ __forceinline__ float2 pair(unsigned u) {
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    }
    static __device__ __forceinline__ float one(unsigned short u) { return __uint_as_float(unsigned(u) << 16); }
};

struct F16 {
    static __device__ __forceinline__ float2 pair(unsigned u) {
        __half2 h;
        *reinterpret_cast<unsigned*>(&h) = u;
        return __half22float2(h);
    }
    static __device__ __forceinline__ float one(unsigned short u) { return __half2float(__ushort_as_half(u)); }
};

using decode::load_out;
using decode::store_out;

// A streamed 16-byte weight load: not kept in L1 (each weight is read once); L2 fetches whole 128-byte lines.
__device__ __forceinline__ uint4 load_weights(const unsigned short* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
// The same load, volatile: issued where it stands (before griddepcontrol.wait), never sunk past it.
__device__ __forceinline__ uint4 load_weights_early(const unsigned short* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#endif

template <class In>
__device__ __forceinline__ float dot8(const uint4& w, const float2 (&x)[4]) {
    const float2 a = In::pair(w.x), b = In::pair(w.y), c = In::pair(w.z), d = In::pair(w.w);
    float s = a.x * x[0].x;
    s = fmaf(a.y, x[0].y, s);
    s = fmaf(b.x, x[1].x, s);
    s = fmaf(b.y, x[1].y, s);
    s = fmaf(c.x, x[2].x, s);
    s = fmaf(c.y, x[2].y, s);
    s = fmaf(d.x, x[3].x, s);
    return fmaf(d.y, x[3].y, s);
}

template <class In>
__device__ __forceinline__ void unpack_x(const uint4& v, float2 (&x)[4]) {
    x[0] = In::pair(v.x);
    x[1] = In::pair(v.y);
    x[2] = In::pair(v.z);
    x[3] = In::pair(v.w);
}

template <class In, bool Vec, class Out>
__device__ __forceinline__ void dense_vector(Out* __restrict__ y, const unsigned short* __restrict__ w,
                                             const unsigned short* __restrict__ x, float alpha, float beta,
                                             int n, int k) {
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const long long row0 = (long long)blockIdx.x * kRows;

    const unsigned short* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const long long row = row0 + r < n ? row0 + r : (long long)n - 1;
        rows[r] = w + row * (long long)k;
    }
#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
    uint4 pre[DENSE_VECTOR_UNROLL][kRows];
#endif
#if __CUDA_ARCH__ >= 900
    {
        // Programmatic dependent launch (cc >= 9.0, the plan's launch attribute): nothing the previous
        // kernel of the stream may write is read before griddepcontrol.wait; the L2 prefetches of the
        // first two chunks of this warp's weights are safe (L2 is the point of coherence) and overlap
        // this kernel's ramp with that kernel's tail. Without the launch attribute both are no-ops.
        // Lane -> (row, 128-byte line of the chunk): rows (lane / 4) mod kRows; with 16 rows only the first 8.
        const int rr = (lane >> 2) % kRows;
        const long long r = row0 + rr < n ? row0 + rr : (long long)n - 1;
        const int full = k / kChunk;
        for (int i = 0; i < 2; ++i) {
            const int c = warp + i * warps;
            if (Vec && c < full)
                decode::prefetch_l2(w + r * (long long)k + c * kChunk + (lane & 3) * 64);
        }
#if MIRCUDA_PRELOAD_WEIGHTS
        // The first step's weights into registers before the wait (the caller's promise: no kernel of the
        // stream that may still be running writes W), so that this block streams during the previous grid's tail.
        if (Vec && warp + (DENSE_VECTOR_UNROLL - 1) * warps < full) {
#pragma unroll
            for (int u = 0; u < DENSE_VECTOR_UNROLL; ++u)
#pragma unroll
                for (int q = 0; q < kRows; ++q)
                    pre[u][q] = load_weights_early(rows[q] + (warp + u * warps) * kChunk + lane * 8);
        }
#endif
        decode::pdl_trigger_early();
        decode::pdl_wait();
    }
#endif
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.f;

    if (Vec) {
        // Register double buffering: the loads of step c + warps are issued before step c is consumed,
        // and the loop back-edge keeps ptxas from sinking them next to their uses (which it does to a
        // straight-line batch of loads, leaving only ~5 of them in flight).
        constexpr int U = DENSE_VECTOR_UNROLL;  // chunks per step
        const int full = k / kChunk;            // chunks whose 256 columns are all inside K
        const int step = U * warps;
        int c = warp;
        if (c + (U - 1) * warps < full) {
            uint4 wv[U][kRows];
            uint4 xv[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int col = (c + u * warps) * kChunk + lane * 8;
                xv[u] = __ldg(reinterpret_cast<const uint4*>(x + col));
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
#if MIRCUDA_PRELOAD_WEIGHTS && __CUDA_ARCH__ >= 900
                    wv[u][r] = pre[u][r];
#else
                    wv[u][r] = load_weights(rows[r] + col);
#endif
                }
            }
            for (;;) {
                const int next = c + step;
                const bool more = next + (U - 1) * warps < full;
                uint4 wn[U][kRows];
                uint4 xn[U];
                if (more) {
#pragma unroll
                    for (int u = 0; u < U; ++u) {
                        const int col = (next + u * warps) * kChunk + lane * 8;
                        xn[u] = __ldg(reinterpret_cast<const uint4*>(x + col));
#pragma unroll
                        for (int r = 0; r < kRows; ++r) wn[u][r] = load_weights(rows[r] + col);
                    }
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    float2 xf[4];
                    unpack_x<In>(xv[u], xf);
#pragma unroll
                    for (int r = 0; r < kRows; ++r) acc[r] += dot8<In>(wv[u][r], xf);
                }
                c = next;
                if (!more) break;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    xv[u] = xn[u];
#pragma unroll
                    for (int r = 0; r < kRows; ++r) wv[u][r] = wn[u][r];
                }
            }
        }
        const int chunks = (k + kChunk - 1) / kChunk;  // plus a partial chunk when K % 256 != 0
        for (; c < chunks; c += warps) {  // the remaining chunks, one at a time; lanes past K idle
            const int col = c * kChunk + lane * 8;
            if (col < k) {  // K % 8 == 0: the lane's eight columns are all inside K
                float2 xf[4];
                unpack_x<In>(__ldg(reinterpret_cast<const uint4*>(x + col)), xf);
#pragma unroll
                for (int r = 0; r < kRows; ++r) acc[r] += dot8<In>(load_weights(rows[r] + col), xf);
            }
        }
    } else {
        // Any K, any 2-byte alignment: one element per lane per row, coalesced across the warp.
#pragma unroll 4
        for (int col = warp * 32 + lane; col < k; col += warps * 32) {
            const float xf = In::one(__ldg(x + col));
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[r] = fmaf(In::one(__ldg(rows[r] + col)), xf, acc[r]);
        }
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    }
    // Every lane now holds all kRows row sums; lane r keeps row r's.
    float mine = acc[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r) mine = lane == r ? acc[r] : mine;

    decode::pdl_trigger_late();
    if (warps > 1) {
        __shared__ float partial[kMaxWarps][kRows];
        if (lane < kRows) partial[warp][lane] = mine;
        __syncthreads();
        if (warp != 0) return;
        if (lane < kRows) {
            mine = partial[0][lane];
            for (int i = 1; i < warps; ++i) mine += partial[i][lane];
        }
    }
    const long long row = row0 + lane;
    if (lane < kRows && row < n) {
        float v = alpha * mine;
        if (beta != 0.f) v = fmaf(beta, load_out(y + row), v);  // beta == 0: y is never read
        store_out(y + row, v);
    }
}

}  // namespace

#define MIRCUDA_DENSE_VECTOR(NAME, IN, VEC, OUT)                                                          \
    extern "C" __global__ void __launch_bounds__(kMaxWarps * 32, kMinBlocks)                                           \
        NAME(OUT* __restrict__ y, const unsigned short* __restrict__ w, const unsigned short* __restrict__ x, \
             float alpha, float beta, int n, int k) {                                                     \
        dense_vector<IN, VEC>(y, w, x, alpha, beta, n, k);                                                \
    }

MIRCUDA_DENSE_VECTOR(dense_vector_bf16_bf16_v16, Bf16, true, __nv_bfloat16)
MIRCUDA_DENSE_VECTOR(dense_vector_bf16_bf16_any, Bf16, false, __nv_bfloat16)
MIRCUDA_DENSE_VECTOR(dense_vector_bf16_f32_v16, Bf16, true, float)
MIRCUDA_DENSE_VECTOR(dense_vector_bf16_f32_any, Bf16, false, float)
MIRCUDA_DENSE_VECTOR(dense_vector_f16_f16_v16, F16, true, __half)
MIRCUDA_DENSE_VECTOR(dense_vector_f16_f16_any, F16, false, __half)
MIRCUDA_DENSE_VECTOR(dense_vector_f16_f32_v16, F16, true, float)
MIRCUDA_DENSE_VECTOR(dense_vector_f16_f32_any, F16, false, float)
