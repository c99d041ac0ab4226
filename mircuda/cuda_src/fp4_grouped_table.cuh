// The grouped NVFP4 plans' group table and setup kernel, shared by the two portable grouped kernels:
// fp4_grouped.cu (mma.sync m-tiles) and fp4_vector.cu compiled with MIRCUDA_FP4_GROUPED (CUDA-core rows
// for decode). The includer defines MIRCUDA_MOE_N, _K, _G, _E, _CAPACITY, _MT, _FIXED_ROWS and _SETS
// (mircuda.matmul._moe_kernels.grouped_options) and includes decode_common.cuh first.
//
// fp4_grouped_setup (ceil(max(G, E) / 256) blocks) validates each group (matrix index in [0, E) else error
// bit 1; count >= 0, offset >= 0 and offset + count <= capacity else bit 2; an invalid group is made empty
// and its bits OR-ed into *error), writes the group table, computes alpha_per_matrix[s E + e] = alpha_s *
// (*global_a_s) * global_b_s[e] for each operand set s, and the last block to finish (a self-resetting
// atomicInc ticket, so graph replays need no memset) writes the tile list: prefix[g] = the tiles
// (MIRCUDA_MOE_MT rows each) of the groups before g, prefix[G] their total (summed in 64 bits: a total of
// 2^31 - 1 tiles or more, which only overlapping row ranges reach, sets bit 2 and makes the total 0, so
// nothing is computed). A grouped kernel's block finds
// its tile's group with find_group (or find_group_scan) and reads the group's validated count, offset
// and matrix from the table, never the caller's routing.

#if !defined(MIRCUDA_MOE_N) || !defined(MIRCUDA_MOE_K) || !defined(MIRCUDA_MOE_G) || !defined(MIRCUDA_MOE_E) || \
    !defined(MIRCUDA_MOE_CAPACITY) || !defined(MIRCUDA_MOE_MT)
#error "compile with -D MIRCUDA_MOE_N, _K, _G, _E, _CAPACITY and _MT (mircuda.matmul._moe.grouped_options)"
#endif
#ifndef MIRCUDA_MOE_FIXED_ROWS
#define MIRCUDA_MOE_FIXED_ROWS 0
#endif
#ifndef MIRCUDA_MOE_SETS
#define MIRCUDA_MOE_SETS 1
#endif
#ifndef MIRCUDA_MOE_TILED
#define MIRCUDA_MOE_TILED 0
#endif

namespace {

constexpr int kN = MIRCUDA_MOE_N;
constexpr int kK = MIRCUDA_MOE_K;
constexpr int kG = MIRCUDA_MOE_G;
constexpr int kBank = MIRCUDA_MOE_E;
constexpr long long kCapacity = MIRCUDA_MOE_CAPACITY;
constexpr int kMT = MIRCUDA_MOE_MT;            // activation rows per m-tile
constexpr int kFixed = MIRCUDA_MOE_FIXED_ROWS;  // > 0: the indexed plan (row_counts = R, offsets = p R)
constexpr int kSets = MIRCUDA_MOE_SETS;
// The bank's geometry (not every includer uses every one of them).
[[maybe_unused]] constexpr int kKBlocks = kK / 16;           // UE4M3 scales per row
[[maybe_unused]] constexpr int kKAtoms = (kKBlocks + 3) / 4;   // 4-byte scale atoms per row of the tiled layout
[[maybe_unused]] constexpr long long kMatrixBytes = (long long)kN * (kK / 2);  // one bank matrix's codes
#if MIRCUDA_MOE_TILED
[[maybe_unused]] constexpr long long kMatrixScaleBytes = (long long)((kN + 127) / 128) * 128 * kKAtoms * 4;
#else
[[maybe_unused]] constexpr long long kMatrixScaleBytes = (long long)kN * kKBlocks;
#endif
static_assert(kMT >= 1, "MIRCUDA_MOE_MT must be positive");
static_assert(kSets == 1 || kSets == 2, "MIRCUDA_MOE_SETS must be 1 or 2");
static_assert(kG >= 1 && kBank >= 1 && kCapacity >= 1, "G, E and the capacity must be positive");

// The group table in the workspace (int32): prefix [G + 1] | count [G] | offset [G] | matrix [G] | ticket.
constexpr int kPrefix = 0;
constexpr int kCount = kG + 1;
constexpr int kOffset = 2 * kG + 1;
constexpr int kMatrix = 3 * kG + 1;
constexpr int kTicket = 4 * kG + 1;
// A tile list holds fewer m-tiles than this (prefix[G] fits int32); the grouped kernels walk it with 64-bit
// tile indices, so tile + gridDim never wraps.
constexpr long long kTileLimit = 0x7fffffffLL;

// The group of m-tile `tile`: the last g with prefix[g] <= tile (prefix is non-decreasing, prefix[0] = 0).
[[maybe_unused]] __device__ __forceinline__ int find_group(const int* prefix, int tile) {
    int lo = 0, hi = kG - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (prefix[mid] <= tile) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// For up to 128 groups each lane keeps prefix[lane + 32 i] in registers (loaded once, together with the
// total, before the tile loop), and a tile's group is the count of prefix entries <= tile, less one: a few
// ballots instead of log2(G) dependent L2 round trips on the way to the first weight load.
constexpr int kScan = kG <= 128 ? (kG + 31) / 32 : 0;

__device__ __forceinline__ int find_group_scan(const int (&pre)[kScan > 0 ? kScan : 1], int tile) {
    int count = 0;
#pragma unroll
    for (int i = 0; i < kScan; ++i) count += __popc(__ballot_sync(0xffffffffu, pre[i] <= tile));
    return count - 1;  // prefix[0] = 0 <= tile: count >= 1
}

__device__ __forceinline__ float global_value(const float* p, int i) { return p != nullptr ? p[i] : 1.0f; }

// Programmatic dependent launch (cc >= 9.0, when the plan launches with it; a no-op otherwise): lets the
// stream's next kernel start launching. Safe anywhere: that kernel reads and writes nothing before its
// griddepcontrol.wait, which waits for this whole grid to finish and its writes to be visible.
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

}  // namespace

// Parameters: 8 bytes each (pointers as addresses, alphas as double, rounded once to FP32 by the plan).
extern "C" __global__ void __launch_bounds__(256)
    fp4_grouped_setup(int* __restrict__ ws, int* __restrict__ error, float* __restrict__ alpha_per_matrix,
                      const int* __restrict__ row_counts, const int* __restrict__ offsets,
                      const int* __restrict__ matrix_indices, const float* global_a1, const float* global_b1,
                      double alpha1, const float* global_a2, const float* global_b2, double alpha2) {
    // Nothing is read or written before the previous kernel of the stream (which may still read the
    // workspace, e.g. the previous execute's grouped kernel) has finished.
    decode::pdl_wait();
    pdl_launch_dependents();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < kBank) {
        alpha_per_matrix[i] = (float)alpha1 * global_value(global_a1, 0) * global_value(global_b1, i);
        if (kSets == 2)
            alpha_per_matrix[kBank + i] = (float)alpha2 * global_value(global_a2, 0) * global_value(global_b2, i);
    }
    if (i < kG) {
        const int idx = matrix_indices[i];
        const long long count = kFixed > 0 ? (long long)kFixed : (long long)row_counts[i];
        const long long offset = kFixed > 0 ? (long long)i * kFixed : (long long)offsets[i];
        int bits = 0;
        if (idx < 0 || idx >= kBank) bits |= 1;
        if (count < 0 || offset < 0 || offset + count > kCapacity) bits |= 2;
        if (bits) atomicOr(error, bits);
        const bool ok = bits == 0;
        ws[kCount + i] = ok ? (int)count : 0;
        ws[kOffset + i] = ok ? (int)offset : 0;
        ws[kMatrix + i] = ok ? idx : 0;
    }
    // The last block to arrive builds the tile list (threadFenceReduction's pattern: fence, then ticket).
    __shared__ bool last;
    __shared__ long long warp_sums[8];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicInc(reinterpret_cast<unsigned*>(ws + kTicket), gridDim.x - 1) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // 64-bit sums: overlapping row ranges (not an error bit of their own) can add up to 2^31 m-tiles or
    // more, which int32 would wrap into a non-monotonic list (a tile's group and row then garbage).
    long long running = 0;
    for (int base = 0; base < kG; base += blockDim.x) {
        const int g = base + threadIdx.x;
        const int tiles = g < kG ? (__ldcg(ws + kCount + g) + kMT - 1) / kMT : 0;
        long long incl = tiles;
#pragma unroll
        for (int s = 1; s < 32; s <<= 1) {
            const long long v = __shfl_up_sync(0xffffffffu, incl, s);
            if (lane >= s) incl += v;
        }
        if (lane == 31) warp_sums[warp] = incl;
        __syncthreads();
        long long before = running;
        for (int w = 0; w < warp; ++w) before += warp_sums[w];
        if (g < kG) ws[kPrefix + g] = (int)min(before + incl - tiles, (long long)kTileLimit);
        long long total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += warp_sums[w];
        running += total;
        __syncthreads();
    }
    // A list of kTileLimit m-tiles or more (only overlapping row ranges reach it) is refused whole: bit 2,
    // total 0, so the grouped kernel computes nothing and reads nothing past the routing's rows.
    if (threadIdx.x == 0) {
        if (running >= kTileLimit) atomicOr(error, 2);
        ws[kPrefix + kG] = running < kTileLimit ? (int)running : 0;
    }
}
