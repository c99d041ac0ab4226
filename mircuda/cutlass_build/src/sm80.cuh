// CUTLASS 2.x GemmUniversal kernels: the SM80-style TensorOp path (mma.sync; the SM120 family's 16-bit
// path, since CUTLASS 4.2's SM120 collective builder has none) and the SIMT fallback (arch::Sm50, any
// alignment). Layouts as in sm90.cuh: A row-major [M,K], B column-major K x N (= [N,K] row-major),
// C row-major [M,N].
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "registry.hpp"

namespace mircuda {
namespace sm80 {

template <class In, class Out, class OpClass, class Arch, class Threadblock, class Warp, class Instruction, int Stages,
          int AlignIn, int AlignOut>
struct Config {
  using Epilogue = cutlass::epilogue::thread::LinearCombination<Out, AlignOut, float, float>;
  using Gemm = cutlass::gemm::device::GemmUniversal<
      In, cutlass::layout::RowMajor, In, cutlass::layout::ColumnMajor, Out, cutlass::layout::RowMajor, float, OpClass,
      Arch, Threadblock, Warp, Instruction, Epilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
      Stages, AlignIn, AlignIn>;
};

template <class Cfg>
class Runner final : public mircuda::Runner {
 public:
  using Gemm = typename Cfg::Gemm;

  Runner(int m, int n, int k) : m_(m), n_(n), k_(k) {}

  int check() const {
    return Gemm::can_implement(arguments(kPlaceholder, kPlaceholder, const_cast<void*>(kPlaceholder), 1.f, 0.f)) ==
                   cutlass::Status::kSuccess
               ? MIRCUDA_CUTLASS_OK
               : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override {
    return Gemm::get_workspace_size(arguments(kPlaceholder, kPlaceholder, const_cast<void*>(kPlaceholder), 1.f, 0.f));
  }

  // Parameters (grid, iterators, the shared-memory attribute) are prepared once here; execute only
  // swaps in the pointers and scalars (GemmUniversalBase::update) and launches.
  int set_workspace(void* workspace, size_t) override {
    cutlass::Status status =
        gemm_.initialize(arguments(kPlaceholder, kPlaceholder, const_cast<void*>(kPlaceholder), 1.f, 0.f), workspace);
    return status_from_cutlass(static_cast<int>(status));
  }

  int execute(cudaStream_t stream, const void* a, const void* b, void* c, float alpha, float beta) override {
    gemm_.update(arguments(a, b, c, alpha, beta));
    cutlass::Status status = gemm_.run(stream);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  static inline const void* const kPlaceholder = reinterpret_cast<const void*>(uintptr_t{1} << 20);

  typename Gemm::Arguments arguments(const void* a, const void* b, void* c, float alpha, float beta) const {
    const int64_t m = m_, n = n_, k = k_;
    return typename Gemm::Arguments(cutlass::gemm::GemmUniversalMode::kGemm, cutlass::gemm::GemmCoord(m_, n_, k_),
                                    1, {alpha, beta}, a, b, c, c, m * k, n * k, m * n, m * n, k, k, n, n);
  }

  int m_, n_, k_;
  Gemm gemm_;
};

template <class Cfg>
int create(int m, int n, int k, int, mircuda::Runner** out) {
  auto* runner = new Runner<Cfg>(m, n, k);
  const int status = runner->check();
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  *out = runner;
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace sm80
}  // namespace mircuda
