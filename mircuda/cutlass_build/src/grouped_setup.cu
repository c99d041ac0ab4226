// The device setup of the grouped block-scaled NVFP4 plans (see grouped_setup.hpp): routing checks and
// error flag, per-problem rows and pointers, each group's slot in the scale workspace, and the activation
// scales repacked from linear into the tiled layout per group.
#include <cstdint>

#include "grouped_setup.hpp"
#include "registry.hpp"

namespace mircuda {
namespace grouped {
namespace {

constexpr int kSetupThreads = 1024;  // grouped_setup: one block walks the groups 1024 at a time
constexpr int kRepackThreads = 256;

// Inclusive sum of v over the block (blockDim.x a multiple of 32, at most 1024); scratch: 32 entries.
__device__ long long block_inclusive_sum(long long v, long long* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int d = 1; d < 32; d <<= 1) {
    const long long u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    long long w = lane < warps ? scratch[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const long long u = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += u;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  __syncthreads();  // scratch is reused by the next call
  return v;
}

__global__ void __launch_bounds__(kSetupThreads) grouped_setup(SetupParams p, mircuda_cutlass_grouped_tables t) {
  __shared__ long long scratch[32];
  __shared__ long long carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int G = p.groups;
  for (int base = 0; base < G; base += blockDim.x) {
    const int g = base + static_cast<int>(threadIdx.x);
    int m = 0, offset = 0, e = 0, error = 0;
    if (g < G) {
      m = p.row_counts[g];
      offset = p.offsets[g];
      e = p.matrix_indices[g];
      if (e < 0 || e >= p.bank_size) error |= 1;
      if (m < 0 || offset < 0 || static_cast<long long>(offset) + m > p.capacity) error |= 2;
      if (error) m = 0;
    }
    const long long padded = (static_cast<long long>(m) + kSlotRows - 1) / kSlotRows * kSlotRows;
    const long long before = carry;
    const long long end = before + block_inclusive_sum(padded, scratch);
    const long long begin = end - padded;
    if (g < G) {
      if (end > p.slot_rows) {  // only overlapping row ranges get here (see mircuda_cutlass.h)
        error |= 2;
        m = 0;
      }
      if (error) {
        atomicOr(p.error_flag, error);
        offset = 0;
        e = 0;
      }
      // A skipped group keeps its begin (slot_begin stays non-decreasing for grouped_repack_sfa's search),
      // never past slot_rows.
      const long long b = begin < p.slot_rows ? begin : p.slot_rows;
      t.slot_begin[g] = static_cast<int>(b);
      t.slot_end[g] = static_cast<int>(m > 0 ? end : b);
      const long long a_row = p.k / 2, b_matrix = static_cast<long long>(p.n) * (p.k / 2);
      const long long sfb_matrix = (static_cast<long long>(p.n) + 127) / 128 * 128 * p.row_bytes;
      for (int s = 0; s < p.sets; ++s) {
        const mircuda_cutlass_grouped_operands& op = p.operands[s];
        const int i = s * G + g;
        t.rows[i] = m;
        t.a[i] = static_cast<const uint8_t*>(op.a) + offset * a_row;
        t.b[i] = static_cast<const uint8_t*>(op.b_bank) + e * b_matrix;
        t.sfa[i] = t.sfa_tiled + (s * p.slot_rows + (m > 0 ? begin : 0)) * p.row_bytes;
        t.sfb[i] = static_cast<const uint8_t*>(op.sfb_bank_tiled) + e * sfb_matrix;
        t.d[i] = static_cast<uint8_t*>(op.d) + static_cast<long long>(offset) * p.n * 2;
        t.alpha[i] = op.alpha_per_matrix + e;
      }
    }
    __syncthreads();  // every thread has read carry
    if (threadIdx.x == blockDim.x - 1) carry = end;
    __syncthreads();
  }
}

// Block (x, set): the x-th 128-row chunk of the set's slots. Finds the group whose slot holds it (the last
// group with slot_begin <= row: slot_begin is non-decreasing), then writes the chunk's 128 rows x row_bytes
// tiled bytes: 512-byte atoms of 128 rows x 4 scales, K-fastest; in an atom row 32 r1 + r0, scale j at byte
// 16 r0 + 4 r1 + j (cutlass/detail/sm100_blockscaled_layout.hpp; mircuda's "tiled" layout). Rows past the
// group's and scales past K/16 are zero.
__global__ void __launch_bounds__(kRepackThreads) grouped_repack_sfa(SetupParams p, mircuda_cutlass_grouped_tables t) {
  const long long row0 = static_cast<long long>(blockIdx.x) * kSlotRows;
  int lo = 0, hi = p.groups;  // first group with slot_begin > row0
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (t.slot_begin[mid] <= row0) lo = mid + 1; else hi = mid;
  }
  const int g = lo - 1;
  if (g < 0 || row0 >= t.slot_end[g]) return;
  const int s = blockIdx.y;
  const long long into = row0 - t.slot_begin[g];
  const long long first = static_cast<long long>(p.offsets[g]) + into;  // source row of row0
  const long long rows = p.row_counts[g] - into;                        // rows of the group from row0 on
  const int scales = p.k / 16;
  const uint8_t* src = static_cast<const uint8_t*>(p.operands[s].sfa_linear);
  uint32_t* dst = reinterpret_cast<uint32_t*>(t.sfa_tiled + (s * p.slot_rows + row0) * p.row_bytes);
  const int words = static_cast<int>(kSlotRows * p.row_bytes / 4);  // 4 scales of one row per word
  for (int w = threadIdx.x; w < words; w += blockDim.x) {
    const int atom = w / 128, within = w % 128;  // 128 words per 512-byte atom
    const int r0 = within / 4, r1 = within % 4;
    const int r = 32 * r1 + r0, col = 4 * atom;
    uint32_t word = 0;
    if (r < rows) {
      const uint8_t* row = src + (first + r) * scales;
      for (int j = 0; j < 4; ++j) {
        if (col + j < scales) word |= static_cast<uint32_t>(row[col + j]) << (8 * j);
      }
    }
    dst[w] = word;
  }
}

}  // namespace

int launch_setup(cudaStream_t stream, const SetupParams& p, const mircuda_cutlass_grouped_tables& t) {
  grouped_setup<<<1, kSetupThreads, 0, stream>>>(p, t);
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) {
    const dim3 chunks(static_cast<unsigned>(p.slot_rows / kSlotRows), static_cast<unsigned>(p.sets));
    grouped_repack_sfa<<<chunks, kRepackThreads, 0, stream>>>(p, t);
    error = cudaGetLastError();
  }
  if (error != cudaSuccess) {
    set_cuda_error(error);
    return MIRCUDA_CUTLASS_CUDA_ERROR;
  }
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace grouped
}  // namespace mircuda

extern "C" int mircuda_cutlass_grouped_setup(mircuda_cutlass_stream stream, int n, int k, int capacity, int groups,
                                             int bank_size, int sets, const int* row_counts, const int* offsets,
                                             const int* matrix_indices, const mircuda_cutlass_grouped_operands* operands,
                                             int* error_flag, const mircuda_cutlass_grouped_tables* tables) {
  using namespace mircuda::grouped;
  if (n < 1 || k < 1 || capacity < 1 || groups < 1 || bank_size < 1 || (sets != 1 && sets != 2)) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (n % 8 || k % 32) return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  if (row_counts == nullptr || offsets == nullptr || matrix_indices == nullptr || operands == nullptr ||
      error_flag == nullptr || tables == nullptr) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  const mircuda_cutlass_grouped_tables& t = *tables;
  if (t.rows == nullptr || t.a == nullptr || t.b == nullptr || t.sfa == nullptr || t.sfb == nullptr ||
      t.d == nullptr || t.alpha == nullptr || t.slot_begin == nullptr || t.slot_end == nullptr ||
      t.sfa_tiled == nullptr || reinterpret_cast<uintptr_t>(t.sfa_tiled) % 16) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  const SlotGeometry geometry = slot_geometry(capacity, groups, k);
  if (geometry.slot_rows >= (1ll << 31)) return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  SetupParams p{};
  p.row_counts = row_counts;
  p.offsets = offsets;
  p.matrix_indices = matrix_indices;
  p.error_flag = error_flag;
  p.groups = groups;
  p.sets = sets;
  p.n = n;
  p.k = k;
  p.capacity = capacity;
  p.bank_size = bank_size;
  p.slot_rows = geometry.slot_rows;
  p.row_bytes = geometry.row_bytes;
  for (int s = 0; s < sets; ++s) {
    const mircuda_cutlass_grouped_operands& op = operands[s];
    if (op.a == nullptr || op.sfa_linear == nullptr || op.b_bank == nullptr || op.sfb_bank_tiled == nullptr ||
        op.d == nullptr || op.alpha_per_matrix == nullptr) {
      return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
    }
    p.operands[s] = op;
  }
  return launch_setup(reinterpret_cast<cudaStream_t>(stream), p, t);
}
