// The kernel registry behind the C ABI: each instantiation TU registers one kernel at load time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mircuda_cutlass.h"

namespace mircuda {

// One plan: a CUTLASS operator bound to a shape, its workspace and (per execute) its pointers. A
// dense kernel's runner implements execute, a blockwise-scaled kernel's execute_scaled, a block-scaled
// (NVFP4) kernel's execute_block_scaled, a grouped block-scaled kernel's execute_grouped; the others answer
// INVALID_ARGUMENT (the C entry points check the kernel's kind first).
struct Runner {
  virtual ~Runner() = default;
  virtual size_t workspace_bytes() const = 0;
  // Called once the workspace is known (may prepare persistent state, e.g. zeroed semaphores).
  virtual int set_workspace(void* workspace, size_t bytes) = 0;
  virtual int execute(cudaStream_t, const void*, const void*, void*, float, float) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  virtual int execute_scaled(cudaStream_t, const void*, const void*, const void*, const void*, const void*, void*,
                             float, float) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  virtual int execute_block_scaled(cudaStream_t, const void*, const void*, const void*, const void*, void*,
                                   const float*, float) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  virtual int execute_grouped(cudaStream_t, const int*, const int*, const int*,
                              const mircuda_cutlass_grouped_operands*, int*) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  virtual int execute_grouped_dense(cudaStream_t, const int*, const int*, const int*,
                                    const mircuda_cutlass_grouped_dense_operands*, int*) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
};

// Creates a runner for (m, n, k, splits) on the current device, or returns a status.
using Factory = int (*)(int m, int n, int k, int splits, Runner** out);
// Creates a runner of a grouped kernel (MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED or _GROUPED_DENSE), or returns a
// status.
using GroupedFactory = int (*)(int n, int k, int capacity, int groups, int bank_size, int sets, Runner** out);

// A kernel: its info and the factory of its kind (factory for the single-problem kinds, grouped_factory for
// the grouped kind; the other one is null).
struct KernelEntry {
  mircuda_cutlass_kernel_info info;
  Factory factory;
  GroupedFactory grouped_factory = nullptr;
};

bool register_kernel(const KernelEntry& entry);
void set_cuda_error(cudaError_t error);
int status_from_cutlass(int cutlass_status);  // cutlass::Status as int

// Whether the kernel holds SASS that loads on the current device.
bool compiled_for_current_device(const mircuda_cutlass_kernel_info& info);

}  // namespace mircuda

#define MIRCUDA_STR2(x) #x
#define MIRCUDA_STR(x) MIRCUDA_STR2(x)
