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
  // Launch the kernel with programmatic dependent launch (cudaLaunchAttributeProgrammaticStreamSerialization) from
  // the next execute on, or not (the default). NOT_IMPLEMENTABLE for on when the kernel does not wait (kGdcSm90).
  virtual int set_pdl(bool on) { return on ? MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE : MIRCUDA_CUTLASS_OK; }
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

// Whether this translation unit's CUTLASS kernels were compiled with CUTLASS_ENABLE_GDC_FOR_SM90 (sm90.cuh defines
// it for every SM90 dense TU, blockwise_instance.cuh for the SM90 FP8 cooperative and ping-pong ones): on sm_90a such a kernel executes griddepcontrol.wait before it touches
// global memory (its producer warps, before their first load) and griddepcontrol.launch_dependents on its last tile,
// so it may be launched with programmatic dependent launch. A kernel compiled without it must never be.
// (Internal linkage: its value differs between TUs; each runner type lives in one TU.)
#if defined(CUTLASS_ENABLE_GDC_FOR_SM90)
constexpr bool kGdcSm90 = true;
#else
constexpr bool kGdcSm90 = false;
#endif

bool register_kernel(const KernelEntry& entry);
void set_cuda_error(cudaError_t error);
int status_from_cutlass(int cutlass_status);  // cutlass::Status as int

// Whether the kernel holds SASS that loads on the current device.
bool compiled_for_current_device(const mircuda_cutlass_kernel_info& info);

}  // namespace mircuda

#define MIRCUDA_STR2(x) #x
#define MIRCUDA_STR(x) MIRCUDA_STR2(x)
