// EXPERIMENTAL: no plan runs this kernel. benchmarks/fp8_wgmma_probe.py measures it beside BlockwiseFp8Plan's
// kernels and torch (H200, 2026-12-02, benchmarks/results/fp8_wgmma_probe*.json): correct against float64 on every
// configuration tried. With the default 128-byte swizzle and 32 rows per block it is as fast as blockwise_fp8_mma
// only at M = 16 on 14336x4096 (20.14 against 20.69 us) and slower elsewhere (M = 1: 19.58 against 16.28; on
// N = 4096, one block per SM, 33.94 against 20.36 at M = 16 on 4096x14336). Without the swizzle each m64n32k32 wgmma
// took about 150-210 SM cycles whatever the ring depth or the barrier (about twice as slow again), so on a decode
// shape the tensor core's reads of small unswizzled tiles, then the one-block-per-SM latency chain (a stage's four
// wgmma, their wait and the scaling in sequence), bound it; see the closing note of 2026-12-02. Kept as the verified
// starting point of a native FP8 decode path: the shared-memory layouts, descriptors and fragment order below are
// checked on the GPU.
//
// A Hopper decode kernel (sm_90a, M = 1..16) of DeepSeek-V3 blockwise FP8,
//   D[m, n] = alpha * sum over K-blocks kb of sa[m, kb] * sb[n / 128, kb] * (A[m, kb-block] . B[n, kb-block])
//             + beta * C[m, n]
// with the operands of fp8_vector.cu and fp8_mma_gemv.cu: A E4M3 [M, K] row-major, sa FP32 [M, ceil(K / 128)]
// row-major, B E4M3 [N, K] row-major, sb FP32 [ceil(N / 128), ceil(K / 128)] row-major, C and D BF16 [M, N]
// row-major (C may be D; beta == 0 never reads C). K must be a multiple of 16; a partial last K-block is a block of
// the columns that exist. Same parameters as blockwise_fp8_gemv.
//
// Hopper has no FP8 mma.sync (ptxas turns blockwise_fp8_mma's into F2FP decodes and two FP16 HMMA each), but its
// warpgroup MMA takes E4M3 natively: wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 (PTX ISA 8.0, sm_90a;
// SASS QGMMA.64xNx32.F32.E4M3.E4M3). The weights are its N side, the activation rows its M side: a block of one
// warpgroup owns R = MIRCUDA_FP8_WG_ROWS weight rows (N: 8, 16 or 32), and of the 64 rows of the M side only the
// first M (warp 0's accumulator rows) are stored.
//
// A ring of MIRCUDA_FP8_WG_STAGES 128-K stages in shared memory, filled by cp.async (16 bytes, no registers). A stage
// holds, in the canonical K-major layouts without swizzle (PTX ISA "Shared Memory Matrix Layout": 8-row x 16-byte
// core matrices), the R weight rows (K chunks at 128 bytes: the leading byte offset; 8-row groups at 1024: the
// stride byte offset), the activation rows (K chunks at 256, row groups at 128; rows 16-63 of the M side read
// whatever follows, into accumulator rows that are never stored, so the ring ends with slack) and the scales
// sa[0..M-1, kb], sb[row0 / 128, kb]. Each stage is four wgmma (the first with scale-d = 0: a fresh block sum), then
// warp 0 multiplies the block sums by sa * sb and adds them in FP32 (one FMA per output and block, as the
// definition reads). R divides 128, so a block's rows share one row of sb.
//
// Programmatic dependent launch (cc 9.0): the ring prologue's weights are copied before griddepcontrol.wait (the
// weights are never written by the previous kernel of the stream); activations and scales after it. Rows past N
// read row N - 1 (never stored).
#include <cuda_bf16.h>

#ifndef MIRCUDA_FP8_M
#error "compile with -D MIRCUDA_FP8_M=<rows of A, 1..16>"
#endif
#ifndef MIRCUDA_FP8_WG_ROWS
#define MIRCUDA_FP8_WG_ROWS 16
#endif
#ifndef MIRCUDA_FP8_WG_STAGES
#define MIRCUDA_FP8_WG_STAGES 8
#endif
// How a stage's arrival is awaited: 0 cp.async.wait_group, fence.proxy.async and a block barrier; 1 the same without
// the proxy fence; 2 (default) an mbarrier per stage (cp.async.mbarrier.arrive.noinc of every thread, then
// mbarrier.try_wait.parity, as CUTLASS's SM90 cp.async + GMMA mainloops wait), no block barrier in the loop. The three
// measured alike (the probe's results), which is what showed that the waits are not what bounds the kernel.
#ifndef MIRCUDA_FP8_WG_SYNC
#define MIRCUDA_FP8_WG_SYNC 2
#endif
// Activation copies through L1 (1, the default: cp.async.ca, the blocks of an SM share the lines; at M = 16 on
// 14336x4096 34.5 against 57 us) or past it (0: .cg); and whether each block starts its K walk at K-block
// blockIdx.x mod ceil(K / 128) (1: the blocks then ask L2 for different activation lines at once; measured no
// faster) or at K-block 0 (0, the default: the same summation order in every block).
#ifndef MIRCUDA_FP8_WG_ACT_L1
#define MIRCUDA_FP8_WG_ACT_L1 1
#endif
// The stages' shared-memory layout: 0 the canonical K-major layouts without swizzle (below); 1 (default) the
// 128-byte swizzle (PTX ISA "Shared Memory Matrix Layout", K-major, 128B): every row's 128-byte K-block is one row
// of 8-row x 128-byte atoms, its 16-byte chunk c stored at chunk c ^ (row % 8), atoms 1024-byte aligned, the
// stride byte offset 1024 and the 32-K slice j at start + 32 j (the hardware applies the XOR to the address).
#ifndef MIRCUDA_FP8_WG_SWIZZLE
#define MIRCUDA_FP8_WG_SWIZZLE 1  // measured faster at every shape and M tried (fp8_wgmma_probe_swizzle.json)
#endif
#ifndef MIRCUDA_FP8_WG_ROTATE
#define MIRCUDA_FP8_WG_ROTATE 0
#endif
#ifndef MIRCUDA_PDL_TRIGGER_LATE
#define MIRCUDA_PDL_TRIGGER_LATE 1
#endif
#include "decode_common.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "blockwise_fp8_wgmma needs sm_90a (wgmma.mma_async)"
#endif

namespace {

constexpr int kM = MIRCUDA_FP8_M;
constexpr int kRows = MIRCUDA_FP8_WG_ROWS;  // weight rows per block: the wgmma's N
constexpr int kStages = MIRCUDA_FP8_WG_STAGES;
constexpr int kBlockK = 128;
constexpr int kArows = kM <= 8 ? 8 : 16;    // activation rows copied per stage (the rest of the 64 are never read back)
constexpr bool kSwizzle = MIRCUDA_FP8_WG_SWIZZLE != 0;
constexpr int kWBytes = kRows * kBlockK;
constexpr int kABytes = 16 * kBlockK;
constexpr int kSBytes = 128;  // sa[0..15] at 0, sb at 64
// A stage without swizzle: weights, activations, scales. With the 128-byte swizzle: activations, weights (both
// 1024-byte aligned; the scales live in their own array).
constexpr int kWOffset = kSwizzle ? kABytes : 0;
constexpr int kAOffset = kSwizzle ? 0 : kWBytes;
constexpr int kStageBytes = kWBytes + kABytes + (kSwizzle ? 0 : kSBytes);
// The A descriptor spans 64 rows: rows 16-63 read past a stage's activations (their products land in accumulator
// rows that are never stored): up to 767 bytes without swizzle, up to 8 KiB from the stage's start with it,
// so the ring ends with that much slack.
constexpr int kSlack = kSwizzle ? (64 * kBlockK > kStageBytes ? 64 * kBlockK - kStageBytes : 0) : 1024;
constexpr int kAcc = kRows / 2;  // FP32 accumulator registers per thread of m64nRk32
static_assert(kM >= 1 && kM <= 16, "MIRCUDA_FP8_M must be in 1..16");
static_assert(kRows == 8 || kRows == 16 || kRows == 32, "MIRCUDA_FP8_WG_ROWS must be 8, 16 or 32");
static_assert(kStages >= 2 && kStages * kStageBytes + kSlack + (kSwizzle ? kStages * kSBytes : 0) <= 48 * 1024,
              "MIRCUDA_FP8_WG_STAGES: 2.. and at most 48 KiB");
static_assert(!kSwizzle || kStageBytes % 1024 == 0, "swizzled atoms must stay 1024-byte aligned");

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 (or 4) bytes global -> shared; `bytes` 0 writes zeros and reads nothing (past K or M).
__device__ __forceinline__ void copy16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void copy16_l1(unsigned dst, const void* src, int bytes) {
#if MIRCUDA_FP8_WG_ACT_L1
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
#else
    copy16(dst, src, bytes);
#endif
}
__device__ __forceinline__ void copy4(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
[[maybe_unused]] __device__ __forceinline__ void copy_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
[[maybe_unused]] __device__ __forceinline__ void barrier_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// An arrive-on `bar` once every cp.async this thread issued before has landed (not counted as pending: the
// barrier's count is the number of threads that do this per phase).
[[maybe_unused]] __device__ __forceinline__ void copy_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra WAIT;\n}\n"
        ::"r"(bar), "r"(parity) : "memory");
}

// The shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): start address, leading (K
// direction) and stride (8-row group) byte offsets in 16-byte units at bits 0-13, 16-29 and 32-45; no swizzle.
__device__ __forceinline__ unsigned long long descriptor(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3ffff) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (kSwizzle ? 1ull << 62 : 0ull);  // layout type 1: 128B swizzle
}
// The descriptors of 32-K slice j of a stage: A (activations, 64 rows) and B (weights, kRows rows).
__device__ __forceinline__ unsigned long long a_descriptor(unsigned slot, int j) {
    return kSwizzle ? descriptor(slot + kAOffset + 32 * j, 16, 1024) : descriptor(slot + kAOffset + 512 * j, 256, 128);
}
__device__ __forceinline__ unsigned long long b_descriptor(unsigned slot, int j) {
    return kSwizzle ? descriptor(slot + kWOffset + 32 * j, 16, 1024) : descriptor(slot + kWOffset + 256 * j, 128, 1024);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Ties a register to the asm around it, so that the compiler neither reads an accumulator before
// wgmma.wait_group nor writes one after the wgmma that reads it was issued.
__device__ __forceinline__ void pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d (kAcc registers) = (scale_d ? d : 0) + A (descriptor a: 64 x 32) x B (descriptor b: kRows x 32), E4M3 -> FP32.
__device__ __forceinline__ void wgmma(float (&d)[kAcc], unsigned long long a, unsigned long long b, int scale_d) {
    if constexpr (kRows == 8) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(a), "l"(b), "r"(scale_d));
    } else if constexpr (kRows == 16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "l"(a), "l"(b), "r"(scale_d));
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
            "%11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "l"(a), "l"(b), "r"(scale_d));
    }
}

// Copies the weights of K-block kb into ring slot `slot`: row r, 16-byte K chunk c at (r / 8) 1024 + c 128 +
// (r % 8) 16, so that chunk q = (r / 8) 64 + c 8 + r % 8, copied by thread q % 128, lands at 16 q.
__device__ __forceinline__ void load_weights(unsigned slot, const unsigned char* __restrict__ b, long long row0, int n,
                                             int k, int kb, int tid) {
#pragma unroll
    for (int i = 0; i < (kRows * 8 + 127) / 128; ++i) {
        const int q = tid + 128 * i;
        if (kRows * 8 % 128 == 0 || q < kRows * 8) {
            // swizzled: 8 threads per row (each 128-byte K-block read whole), chunk c at c ^ (r % 8)
            const int r = kSwizzle ? q >> 3 : (q >> 6) * 8 + (q & 7), c = kSwizzle ? q & 7 : (q >> 3) & 7;
            const long long row = row0 + r < n ? row0 + r : (long long)n - 1;
            const int col = kb * kBlockK + 16 * c;
            const unsigned to = kSwizzle ? slot + kWOffset + r * 128 + ((c ^ (r & 7)) << 4) : slot + 16 * q;
            copy16(to, b + row * (long long)k + (col < k ? col : 0), col < k ? 16 : 0);
        }
    }
}

// Copies the activations of K-block kb (row r, chunk c at c 256 + (r / 8) 128 + (r % 8) 16, swizzled at r 128 +
// (c ^ (r % 8)) 16; rows past M and columns past K as zeros) into ring slot `slot`, and sa[0..M-1, kb] and
// sb[row0 / 128, kb] to `scales` (floats 0..15 and 16).
__device__ __forceinline__ void load_activations(unsigned slot, unsigned scales, const unsigned char* __restrict__ a,
                                                 const float* __restrict__ sa, const float* sbrow, int k, int kblocks,
                                                 int kb, int tid) {
    if (tid < kArows * 8) {
        const int r = tid >> 3, c = tid & 7;
        const int col = kb * kBlockK + 16 * c;
        const bool in = r < kM && col < k;
        const unsigned to = kSwizzle ? slot + kAOffset + r * 128 + ((c ^ (r & 7)) << 4)
                                     : slot + kAOffset + c * 256 + (r >> 3) * 128 + (r & 7) * 16;
        copy16_l1(to, a + (in ? (long long)r * k + col : 0), in ? 16 : 0);
    }
    if (tid < kM) copy4(scales + 4 * tid, sa + (long long)tid * kblocks + kb, 4);
    if (tid == kM) copy4(scales + 64, sbrow + kb, 4);
}

__device__ __forceinline__ void fp8_wgmma_gemv(__nv_bfloat16* d, const __nv_bfloat16* c, const unsigned char* __restrict__ a,
                                               const float* __restrict__ sa, const unsigned char* __restrict__ b,
                                               const float* __restrict__ sb, float alpha, float beta, int n, int k) {
    __shared__ __align__(1024) unsigned char ring[kStages * kStageBytes + kSlack];
    // the scales of each stage: inside it without swizzle, in their own array with it
    __shared__ __align__(16) float scale_ring[kSwizzle ? kStages : 1][32];
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const long long row0 = (long long)blockIdx.x * kRows;
    const int kblocks = (k + kBlockK - 1) / kBlockK;
    const unsigned base = smem_addr(ring);
    auto scales_of = [&](int at) {
        return kSwizzle ? smem_addr(&scale_ring[0][0]) + at * kSBytes : base + at * kStageBytes + kWBytes + kABytes;
    };
    const float* sbrow = sb + (row0 / kBlockK) * (long long)kblocks;
    // iteration i multiplies K-block kb_of(i) (the sum over K-blocks is the same in any order up to FP32 rounding)
    const int first = MIRCUDA_FP8_WG_ROTATE ? (int)(blockIdx.x % (unsigned)kblocks) : 0;
    auto kb_of = [&](int i) { const int v = i + first; return v < kblocks ? v : v - kblocks; };
#if MIRCUDA_FP8_WG_SYNC == 2
    // Every slot is filled ahead: a slot is refilled by each thread once its warpgroup's wgmma of that slot has
    // completed (wgmma is collective: the whole warpgroup's reads of the slot are then done).
    constexpr int kAhead = kStages;
    __shared__ __align__(8) unsigned long long full[kStages];
    const unsigned bars = smem_addr(full);
    if (tid == 0)
        for (int s = 0; s < kStages; ++s) barrier_init(bars + 8 * s, 128);
    __syncthreads();
#else
    constexpr int kAhead = kStages - 1;  // the slot of the stage being multiplied is refilled after the next barrier
#endif

    // The ring prologue: its weights before griddepcontrol.wait (never written by the previous kernel of the
    // stream), its activations and scales after it.
#pragma unroll
    for (int s = 0; s < kAhead; ++s)
        if (s < kblocks) load_weights(base + s * kStageBytes, b, row0, n, k, kb_of(s), tid);
    decode::pdl_trigger_early();
    decode::pdl_wait();
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
        if (s < kblocks) load_activations(base + s * kStageBytes, scales_of(s), a, sa, sbrow, k, kblocks, kb_of(s), tid);
#if MIRCUDA_FP8_WG_SYNC == 2
        // the prologue's weights all land before this thread's first arrival; a stage past K is never awaited
        if (s < kblocks) copy_arrive(bars + 8 * s);
#else
        // All the prologue's weights join the first commit group with stage 0's activations; from then on group s
        // completes stage s, so waiting until at most kStages - 2 groups are pending leaves stage kb complete.
        copy_commit();
#endif
    }

    float acc[kAcc];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc[e] = 0.f;
    const bool worker = warp == 0;  // accumulator rows 0..15 (the activation rows) live in warp 0
    for (int kb = 0; kb < kblocks; ++kb) {  // kb: the iteration (K-block kb_of(kb))
        const int at = kb % kStages;
        const unsigned slot = base + at * kStageBytes;
#if MIRCUDA_FP8_WG_SYNC == 2
        barrier_wait(bars + 8 * at, (kb / kStages) & 1);
#else
        copy_wait<kStages - 2>();  // this thread's copies of stage kb have landed
#if MIRCUDA_FP8_WG_SYNC == 0
        // make them visible to the async proxy (wgmma reads shared memory through it)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
        __syncthreads();  // every warp's copies landed; every warp's wgmma of stage kb - 1 is done, its slot free
        {
            const int next = kb + kStages - 1;
            if (next < kblocks) {
                const unsigned to = base + (next % kStages) * kStageBytes;
                load_weights(to, b, row0, n, k, kb_of(next), tid);
                load_activations(to, scales_of(next % kStages), a, sa, sbrow, k, kblocks, kb_of(next), tid);
            }
            copy_commit();
        }
#endif
        float part[kAcc];
#pragma unroll
        for (int e = 0; e < kAcc; ++e) {
            part[e] = 0.f;
            pin(part[e]);
        }
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; ++j)  // 32-K slice j: K chunks 2 j, 2 j + 1
            wgmma(part, a_descriptor(slot, j), b_descriptor(slot, j), j);
        wgmma_commit();
        wgmma_wait();
#pragma unroll
        for (int e = 0; e < kAcc; ++e) pin(part[e]);
        if (worker) {
            const float* scales = kSwizzle ? scale_ring[kSwizzle ? at : 0]
                                           : reinterpret_cast<const float*>(ring + at * kStageBytes + kWBytes + kABytes);
            const float sbv = scales[16];
            const float s0 = (g < kM ? scales[g] : 0.f) * sbv;  // (sa * sb, rounded once in FP32, as the other kernels)
            const float s1 = (g + 8 < kM ? scales[g + 8] : 0.f) * sbv;
#pragma unroll
            for (int e = 0; e < kAcc; ++e) acc[e] = fmaf(part[e], (e & 2) ? s1 : s0, acc[e]);
        }
#if MIRCUDA_FP8_WG_SYNC == 2
        __syncwarp();  // warp 0's lanes have read the slot's scales before any of them refills them
        {
            const int next = kb + kStages;
            if (next < kblocks) {
                load_weights(slot, b, row0, n, k, kb_of(next), tid);
                load_activations(slot, scales_of(at), a, sa, sbrow, k, kblocks, kb_of(next), tid);
                copy_arrive(bars + 8 * at);
            }
        }
#endif
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // no copy outlives the block (every stage issued was awaited)
    decode::pdl_trigger_late();
    if (!worker) return;
    // Accumulator register 4 j + e of m64nRk32: row (activation) g + 8 (e >> 1), column (weight row) 8 j + 2 t + (e & 1).
#pragma unroll
    for (int e = 0; e < kAcc; ++e) {
        const int m = g + 8 * ((e >> 1) & 1);
        const long long row = row0 + 8 * (e >> 2) + 2 * t + (e & 1);
        if (m < kM && row < n) {
            const long long at = (long long)m * n + row;
            float v = alpha * acc[e];
            if (beta != 0.f) v = fmaf(beta, __bfloat162float(c[at]), v);  // beta == 0: C is never read
            d[at] = __float2bfloat16_rn(v);
        }
    }
}

}  // namespace

// d and c may be the same buffer (no __restrict__ on them): each output is read before it is written,
// by the same thread.
extern "C" __global__ void __launch_bounds__(128)
    blockwise_fp8_wgmma(__nv_bfloat16* d, const __nv_bfloat16* c, const unsigned char* __restrict__ a,
                        const float* __restrict__ sa, const unsigned char* __restrict__ b,
                        const float* __restrict__ sb, float alpha, float beta, int n, int k) {
    fp8_wgmma_gemv(d, c, a, sa, b, sb, alpha, beta, n, k);
}
