// The device setup of the grouped block-scaled NVFP4 plans, independent of any CUTLASS kernel type
// (grouped_setup.cu, compiled for every arch of the build so that it also runs, and is tested, on GPUs
// that cannot run the sm_120f grouped GEMM). See mircuda_cutlass.h (GROUPED_BLOCK_SCALED,
// mircuda_cutlass_grouped_setup) for what it computes.
#pragma once

#include <cuda_runtime_api.h>

#include "mircuda_cutlass.h"

namespace mircuda {
namespace grouped {

constexpr int kSlotRows = 128;  // the tiled layout's atom rows: each group's scales start at a multiple

// The 64-bit slot geometry of a plan (rows of one set's scale workspace, bytes of one scale row).
struct SlotGeometry {
  long long slot_rows;
  long long row_bytes;  // ceil(K/64) * 4: K/16 scales padded to whole 4-scale atoms
};

inline SlotGeometry slot_geometry(int capacity, int groups, int k) {
  const long long chunks = (static_cast<long long>(capacity) + kSlotRows - 1) / kSlotRows;
  const long long extra = groups < capacity ? groups : capacity;
  return {(chunks + extra) * kSlotRows, (static_cast<long long>(k) + 63) / 64 * 4};
}

struct SetupParams {
  const int* row_counts;
  const int* offsets;
  const int* matrix_indices;
  int* error_flag;
  int groups, sets, n, k, capacity, bank_size;
  long long slot_rows, row_bytes;
  mircuda_cutlass_grouped_operands operands[2];
};

// Enqueue grouped_setup (one block) and grouped_repack_sfa on stream; MIRCUDA_CUTLASS_OK or CUDA_ERROR.
int launch_setup(cudaStream_t stream, const SetupParams& params, const mircuda_cutlass_grouped_tables& tables);

}  // namespace grouped
}  // namespace mircuda
