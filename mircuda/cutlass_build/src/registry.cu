// The C ABI of libmircuda_cutlass.so over the kernel registry.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "cutlass/cutlass.h"
#include "cutlass/version.h"
#include "registry.hpp"

struct mircuda_cutlass_plan {
  mircuda::Runner* runner;
  size_t workspace_bytes;
  bool workspace_set;
  int kind;  // the kernel's MIRCUDA_CUTLASS_KIND_*: which execute entry point it takes
  int sets;  // grouped plans: operand sets per execute (1 or 2); 1 for the others
};

namespace mircuda {
namespace {

std::vector<KernelEntry>& entries() {
  static std::vector<KernelEntry> all;
  return all;
}

std::once_flag sorted_once;

const std::vector<KernelEntry>& sorted() {
  std::call_once(sorted_once, [] {
    std::sort(entries().begin(), entries().end(), [](const KernelEntry& x, const KernelEntry& y) {
      return std::strcmp(x.info.name, y.info.name) < 0;
    });
  });
  return entries();
}

thread_local int last_cuda_error = 0;

}  // namespace

bool register_kernel(const KernelEntry& entry) {
  entries().push_back(entry);
  return true;
}

void set_cuda_error(cudaError_t error) { last_cuda_error = static_cast<int>(error); }

int status_from_cutlass(int s) {
  switch (static_cast<cutlass::Status>(s)) {
    case cutlass::Status::kSuccess: return MIRCUDA_CUTLASS_OK;
    case cutlass::Status::kErrorMisalignedOperand:
    case cutlass::Status::kErrorInvalidProblem:
    case cutlass::Status::kErrorNotSupported:
    case cutlass::Status::kErrorInvalidLayout: return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
    case cutlass::Status::kErrorArchMismatch: return MIRCUDA_CUTLASS_WRONG_ARCH;
    case cutlass::Status::kErrorWorkspaceNull: return MIRCUDA_CUTLASS_NO_WORKSPACE;
    default: {
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) {
        set_cuda_error(e);
        return MIRCUDA_CUTLASS_CUDA_ERROR;
      }
      return MIRCUDA_CUTLASS_INTERNAL_ERROR;
    }
  }
}

// sm_90a code runs on compute capability 9.0 only; family code (sm_120f) on every 12.x device.
bool compiled_for_current_device(const mircuda_cutlass_kernel_info& info) {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const int cc = 10 * major + minor;
  for (int i = 0; i < info.arch_count && i < 4; ++i) {
    const int arch = info.archs[i];
    if (arch == cc || (arch >= 100 && arch / 10 == cc / 10)) return true;
  }
  return false;
}

// Creates a plan of a kernel of `kind` (the C entry points of both kinds).
static int create_plan(int kind, int index, int m, int n, int k, int splits, mircuda_cutlass_plan** out) {
  const auto& all = sorted();
  if (out == nullptr || index < 0 || index >= static_cast<int>(all.size())) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  *out = nullptr;
  if (all[index].info.kind != kind) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  if (m < 1 || n < 1 || k < 1 || splits < 1) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  if (!compiled_for_current_device(all[index].info)) return MIRCUDA_CUTLASS_WRONG_ARCH;
  Runner* runner = nullptr;
  int status = all[index].factory(m, n, k, splits, &runner);
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  auto* plan = new (std::nothrow) mircuda_cutlass_plan{runner, runner->workspace_bytes(), false, kind, 1};
  if (plan == nullptr) {
    delete runner;
    return MIRCUDA_CUTLASS_INTERNAL_ERROR;
  }
  if (plan->workspace_bytes == 0) {
    status = runner->set_workspace(nullptr, 0);
    if (status != MIRCUDA_CUTLASS_OK) {
      delete runner;
      delete plan;
      return status;
    }
    plan->workspace_set = true;
  }
  *out = plan;
  return MIRCUDA_CUTLASS_OK;
}

// Creates a plan of a grouped kernel (MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED or _GROUPED_DENSE).
static int create_grouped_plan(int index, int n, int k, int capacity, int groups, int bank_size, int sets,
                               mircuda_cutlass_plan** out) {
  const auto& all = sorted();
  if (out == nullptr || index < 0 || index >= static_cast<int>(all.size())) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  *out = nullptr;
  const KernelEntry& entry = all[index];
  if ((entry.info.kind != MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED &&
       entry.info.kind != MIRCUDA_CUTLASS_KIND_GROUPED_DENSE) ||
      entry.grouped_factory == nullptr) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (n < 1 || k < 1 || capacity < 1 || groups < 1 || bank_size < 1 || (sets != 1 && sets != 2)) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (n % entry.info.n_multiple || k % entry.info.k_multiple) return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  if (!compiled_for_current_device(entry.info)) return MIRCUDA_CUTLASS_WRONG_ARCH;
  Runner* runner = nullptr;
  int status = entry.grouped_factory(n, k, capacity, groups, bank_size, sets, &runner);
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  auto* plan = new (std::nothrow)
      mircuda_cutlass_plan{runner, runner->workspace_bytes(), false, entry.info.kind, sets};
  if (plan == nullptr) {
    delete runner;
    return MIRCUDA_CUTLASS_INTERNAL_ERROR;
  }
  *out = plan;  // the workspace is never empty (device tables): set_workspace comes next
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace mircuda

extern "C" {

int mircuda_cutlass_abi_version(void) { return MIRCUDA_CUTLASS_ABI_VERSION; }

int mircuda_cutlass_cutlass_version(void) {
  return CUTLASS_MAJOR * 10000 + CUTLASS_MINOR * 100 + CUTLASS_PATCH;
}

int mircuda_cutlass_kernel_count(void) { return static_cast<int>(mircuda::sorted().size()); }

int mircuda_cutlass_kernel_info_get(int index, mircuda_cutlass_kernel_info* out) {
  const auto& all = mircuda::sorted();
  if (out == nullptr || index < 0 || index >= static_cast<int>(all.size())) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  *out = all[index].info;
  return MIRCUDA_CUTLASS_OK;
}

const char* mircuda_cutlass_status_string(int status) {
  switch (status) {
    case MIRCUDA_CUTLASS_OK: return "ok";
    case MIRCUDA_CUTLASS_INVALID_ARGUMENT: return "invalid argument";
    case MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE: return "the kernel cannot implement this problem";
    case MIRCUDA_CUTLASS_WRONG_ARCH: return "the library holds no code of this kernel for the current device";
    case MIRCUDA_CUTLASS_CUDA_ERROR: return "a CUDA runtime call failed";
    case MIRCUDA_CUTLASS_INTERNAL_ERROR: return "CUTLASS internal error";
    case MIRCUDA_CUTLASS_NO_WORKSPACE: return "the plan needs a workspace and none was set";
    default: return "unknown status";
  }
}

int mircuda_cutlass_last_cuda_error(void) { return mircuda::last_cuda_error; }

int mircuda_cutlass_plan_create(int index, int m, int n, int k, int splits, mircuda_cutlass_plan** out) {
  return mircuda::create_plan(MIRCUDA_CUTLASS_KIND_DENSE, index, m, n, k, splits, out);
}

int mircuda_cutlass_scaled_plan_create(int index, int m, int n, int k, mircuda_cutlass_plan** out) {
  return mircuda::create_plan(MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED, index, m, n, k, 1, out);
}

int mircuda_cutlass_block_scaled_plan_create(int index, int m, int n, int k, mircuda_cutlass_plan** out) {
  return mircuda::create_plan(MIRCUDA_CUTLASS_KIND_BLOCK_SCALED, index, m, n, k, 1, out);
}

int mircuda_cutlass_grouped_plan_create(int index, int n, int k, int capacity, int groups, int bank_size, int sets,
                                        mircuda_cutlass_plan** out) {
  return mircuda::create_grouped_plan(index, n, k, capacity, groups, bank_size, sets, out);
}

int mircuda_cutlass_plan_workspace_bytes(const mircuda_cutlass_plan* plan, size_t* out) {
  if (plan == nullptr || out == nullptr) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  *out = plan->workspace_bytes;
  return MIRCUDA_CUTLASS_OK;
}

int mircuda_cutlass_plan_set_workspace(mircuda_cutlass_plan* plan, void* workspace, size_t bytes) {
  if (plan == nullptr || bytes < plan->workspace_bytes || (plan->workspace_bytes && workspace == nullptr)) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  int status = plan->runner->set_workspace(workspace, bytes);
  plan->workspace_set = status == MIRCUDA_CUTLASS_OK;
  return status;
}

int mircuda_cutlass_plan_set_pdl(mircuda_cutlass_plan* plan, int enable) {
  if (plan == nullptr ||
      (plan->kind != MIRCUDA_CUTLASS_KIND_DENSE && plan->kind != MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED)) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  return plan->runner->set_pdl(enable != 0);
}

int mircuda_cutlass_plan_execute(mircuda_cutlass_plan* plan, mircuda_cutlass_stream stream, const void* a,
                                 const void* b, void* c, float alpha, float beta) {
  if (plan == nullptr || a == nullptr || b == nullptr || c == nullptr) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  if (plan->kind != MIRCUDA_CUTLASS_KIND_DENSE) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  if (!plan->workspace_set) return MIRCUDA_CUTLASS_NO_WORKSPACE;
  return plan->runner->execute(reinterpret_cast<cudaStream_t>(stream), a, b, c, alpha, beta);
}

int mircuda_cutlass_scaled_plan_execute(mircuda_cutlass_plan* plan, mircuda_cutlass_stream stream, const void* a,
                                        const void* b, const void* sfa, const void* sfb, const void* c, void* d,
                                        float alpha, float beta) {
  if (plan == nullptr || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (plan->kind != MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  if (!plan->workspace_set) return MIRCUDA_CUTLASS_NO_WORKSPACE;
  return plan->runner->execute_scaled(reinterpret_cast<cudaStream_t>(stream), a, b, sfa, sfb, c != nullptr ? c : d,
                                      d, alpha, beta);
}

int mircuda_cutlass_block_scaled_plan_execute(mircuda_cutlass_plan* plan, mircuda_cutlass_stream stream,
                                              const void* a, const void* b, const void* sfa, const void* sfb, void* d,
                                              const float* alpha_device, float alpha) {
  if (plan == nullptr || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (plan->kind != MIRCUDA_CUTLASS_KIND_BLOCK_SCALED) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  if (!plan->workspace_set) return MIRCUDA_CUTLASS_NO_WORKSPACE;
  return plan->runner->execute_block_scaled(reinterpret_cast<cudaStream_t>(stream), a, b, sfa, sfb, d, alpha_device,
                                            alpha);
}

int mircuda_cutlass_grouped_plan_execute(mircuda_cutlass_plan* plan, mircuda_cutlass_stream stream,
                                         const int* row_counts, const int* offsets, const int* matrix_indices,
                                         const mircuda_cutlass_grouped_operands* operands, int* error_flag) {
  if (plan == nullptr || row_counts == nullptr || offsets == nullptr || matrix_indices == nullptr ||
      operands == nullptr || error_flag == nullptr) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (plan->kind != MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  auto misaligned = [](const void* p, uintptr_t to) { return (reinterpret_cast<uintptr_t>(p) % to) != 0; };
  for (int s = 0; s < plan->sets; ++s) {
    const mircuda_cutlass_grouped_operands& op = operands[s];
    if (op.a == nullptr || op.sfa_linear == nullptr || op.b_bank == nullptr || op.sfb_bank_tiled == nullptr ||
        op.d == nullptr || op.alpha_per_matrix == nullptr) {
      return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
    }
    if (misaligned(op.a, 16) || misaligned(op.b_bank, 16) || misaligned(op.sfb_bank_tiled, 16) ||
        misaligned(op.d, 16) || misaligned(op.alpha_per_matrix, 4)) {
      return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
    }
  }
  if (misaligned(row_counts, 4) || misaligned(offsets, 4) || misaligned(matrix_indices, 4) ||
      misaligned(error_flag, 4)) {
    return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }
  if (!plan->workspace_set) return MIRCUDA_CUTLASS_NO_WORKSPACE;
  return plan->runner->execute_grouped(reinterpret_cast<cudaStream_t>(stream), row_counts, offsets, matrix_indices,
                                       operands, error_flag);
}

int mircuda_cutlass_grouped_dense_plan_execute(mircuda_cutlass_plan* plan, mircuda_cutlass_stream stream,
                                               const int* row_counts, const int* offsets, const int* matrix_indices,
                                               const mircuda_cutlass_grouped_dense_operands* operands,
                                               int* error_flag) {
  if (plan == nullptr || row_counts == nullptr || offsets == nullptr || matrix_indices == nullptr ||
      operands == nullptr || error_flag == nullptr) {
    return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  }
  if (plan->kind != MIRCUDA_CUTLASS_KIND_GROUPED_DENSE) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  auto misaligned = [](const void* p, uintptr_t to) { return (reinterpret_cast<uintptr_t>(p) % to) != 0; };
  for (int s = 0; s < plan->sets; ++s) {
    const mircuda_cutlass_grouped_dense_operands& op = operands[s];
    if (op.a == nullptr || op.b_bank == nullptr || op.d == nullptr || op.alpha_per_matrix == nullptr) {
      return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
    }
    if (misaligned(op.a, 16) || misaligned(op.b_bank, 16) || misaligned(op.d, 16) ||
        misaligned(op.alpha_per_matrix, 4)) {
      return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
    }
  }
  if (misaligned(row_counts, 4) || misaligned(offsets, 4) || misaligned(matrix_indices, 4) ||
      misaligned(error_flag, 4)) {
    return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }
  if (!plan->workspace_set) return MIRCUDA_CUTLASS_NO_WORKSPACE;
  return plan->runner->execute_grouped_dense(reinterpret_cast<cudaStream_t>(stream), row_counts, offsets,
                                             matrix_indices, operands, error_flag);
}

int mircuda_cutlass_plan_destroy(mircuda_cutlass_plan* plan) {
  if (plan == nullptr) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;
  delete plan->runner;
  delete plan;
  return MIRCUDA_CUTLASS_OK;
}

}  // extern "C"
