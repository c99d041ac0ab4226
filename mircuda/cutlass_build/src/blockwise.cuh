// Blockwise-scaled FP8 GEMMs (DeepSeek-V3 format) from CUTLASS 3.x's collective builders, and the
// runner that binds one to a shape for the C ABI (mircuda_cutlass_scaled_plan_*).
//
// The problem: D[M,N] = alpha * sum_kb SFA[m,kb] * SFB[n/128,kb] * (A_blk . B_blk) + beta * C, A E4M3
// [M,K] row-major, B E4M3 [N,K] row-major (CUTLASS's column-major K x N), C and D BF16 [M,N]
// row-major, FP32 scales of 1 x 128 blocks of A and 128 x 128 blocks of B, FP32 accumulation.
//
// Scale layouts. CUTLASS describes a scale tensor by a cute layout over the whole operand:
// ((granularity, blocks), (granularity_k, k_blocks), L) with stride 0 inside a block
// (cutlass/detail/blockwise_scale_layout.hpp, Sm1xxBlockwiseScaleConfig); the majorness picks which of
// the two block counts has stride 1. mircuda takes both K-major: SFA [M, ceil(K/128)] row-major and
// SFB [ceil(N/128), ceil(K/128)] row-major, the layout a per-token quantizer writes. On SM90 a K-major
// SFA is read with cp.async (CUTLASS loads SFA by TMA only when it is M-major, which would need M a
// multiple of 4 or a padded copy); the scales are 1/128 of A's bytes.
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/util/packed_stride.hpp"
#include "registry.hpp"

namespace mircuda {
namespace blockwise {

using namespace cute;

constexpr int kScaleM = 1, kScaleN = 128, kScaleK = 128;

// K-major scales on both sides (see the top of this file).
using Sm90Scales = cutlass::detail::Sm90BlockwiseScaleConfig<kScaleM, kScaleN, kScaleK, cute::GMMA::Major::K,
                                                             cute::GMMA::Major::K>;
using Sm120Scales = cutlass::detail::Sm120BlockwiseScaleConfig<kScaleM, kScaleN, kScaleK, cute::UMMA::Major::K,
                                                               cute::UMMA::Major::K>;

// EpilogueTile and Source are varied only by the experimental families (blockwise_instance.cuh): the
// epilogue's subtile (CUTLASS's auto choice by default) and C's element type (void: no source operand,
// beta must be 0; CUTLASS then delays the TMA store and reserves no smem for C).
template <class Arch, class Scales, class TileShape, class ClusterShape, class MainloopSchedule,
          class EpilogueSchedule, class Scheduler,
          class EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto, class Source = cutlass::bfloat16_t>
struct Config {
  using In = cutlass::float_e4m3_t;
  using Out = cutlass::bfloat16_t;
  using ElementC = Source;
  using LayoutA = cutlass::layout::RowMajor;     // K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // K contiguous ([N,K] row-major)
  using LayoutC = cutlass::layout::RowMajor;
  using LayoutSFA = decltype(Scales::deduce_layoutSFA());
  using LayoutSFB = decltype(Scales::deduce_layoutSFB());
  using ScaleConfig = Scales;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<In>::value;  // 16-byte TMA granularity
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<Out>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      Arch, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, EpilogueTile,
      float, float, ElementC, LayoutC, kAlignOut, Out, LayoutC, kAlignOut, EpilogueSchedule>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      Arch, cutlass::arch::OpClassTensorOp, In, cute::tuple<LayoutA, LayoutSFA>, kAlignIn, In,
      cute::tuple<LayoutB, LayoutSFB>, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr bool kSwizzle = std::is_same_v<MainloopSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
  static constexpr bool kHasSource = !std::is_void_v<ElementC>;
};

// The persistent tile scheduler's runtime arguments of the cooperative kernels: tiles visited in groups
// of `swizzle` (1, 2, 4 or 8) along the raster, raster order 0 = CUTLASS's heuristic (along M when the
// problem has more tiles along N), 1 = along M, 2 = along N (cutlass::gemm::kernel::detail::RasterOrderOptions).
struct Schedule {
  int swizzle;
  int raster;
};

// The cooperative kernels' schedule: groups of 4, CUTLASS's raster heuristic, as the dense cooperative
// kernel (sm90.cuh gives the measurement); untuned for FP8.
constexpr Schedule kDefaultSchedule{4, 0};

template <class Cfg>
class Runner final : public mircuda::Runner {
 public:
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;

  Runner(int m, int n, int k, cutlass::KernelHardwareInfo hw, Schedule schedule)
      : m_(m), n_(n), k_(k), hw_(hw), schedule_(schedule) {}

  // Can-implement with placeholder addresses (16-byte aligned, never dereferenced).
  int check() const {
    return Gemm::can_implement(placeholder_arguments()) == cutlass::Status::kSuccess ? MIRCUDA_CUTLASS_OK
                                                                                     : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override { return Gemm::get_workspace_size(placeholder_arguments()); }

  int set_workspace(void* workspace, size_t) override {
    workspace_ = workspace;
    return MIRCUDA_CUTLASS_OK;
  }

  int execute_scaled(cudaStream_t stream, const void* a, const void* b, const void* sfa, const void* sfb,
                     const void* c, void* d, float alpha, float beta) override {
    if (!Cfg::kHasSource && beta != 0.f) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;  // no C operand to add
    auto args = arguments(a, b, sfa, sfb, c, d, alpha, beta);
    // initialize() builds the TMA descriptors for these pointers into the kernel parameters (host
    // side); nothing is allocated or synchronized.
    cutlass::Status status = gemm_.initialize(args, workspace_, stream);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    status = gemm_.run(stream);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  static inline const void* const kPlaceholder = reinterpret_cast<const void*>(uintptr_t{1} << 20);

  typename Gemm::Arguments placeholder_arguments() const {
    return arguments(kPlaceholder, kPlaceholder, kPlaceholder, kPlaceholder, kPlaceholder,
                     const_cast<void*>(kPlaceholder), 1.f, 0.f);
  }

  typename Gemm::Arguments arguments(const void* a, const void* b, const void* sfa, const void* sfb, const void* c,
                                     void* d, float alpha, float beta) const {
    using ElementA = typename Kernel::ElementA;
    using ElementB = typename Kernel::ElementB;
    using ElementC = typename Kernel::ElementC;
    using ElementD = typename Kernel::ElementD;
    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(m_, k_, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(n_, k_, 1));
    auto stride_c = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, cute::make_shape(m_, n_, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(m_, n_, 1));
    auto problem = cute::make_shape(m_, n_, k_, 1);
    auto layout_sfa = Cfg::ScaleConfig::tile_atom_to_shape_SFA(problem);
    auto layout_sfb = Cfg::ScaleConfig::tile_atom_to_shape_SFB(problem);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m_, n_, k_, 1},
        {static_cast<const ElementA*>(a), stride_a, static_cast<const ElementB*>(b), stride_b,
         static_cast<const float*>(sfa), layout_sfa, static_cast<const float*>(sfb), layout_sfb},
        {{}, Cfg::kHasSource ? static_cast<const ElementC*>(c) : nullptr, stride_c, static_cast<ElementD*>(d), stride_d},
        hw_};
    args.epilogue.thread.alpha = alpha;
    args.epilogue.thread.beta = Cfg::kHasSource ? beta : 0.f;
    if constexpr (Cfg::kSwizzle) {
      args.scheduler.max_swizzle_size = schedule_.swizzle;  // kDefaultSchedule unless an experimental family
      args.scheduler.raster_order =
          static_cast<cutlass::gemm::kernel::detail::RasterOrderOptions>(schedule_.raster);
    }
    return args;
  }

  int m_, n_, k_;
  cutlass::KernelHardwareInfo hw_;
  Schedule schedule_;
  void* workspace_ = nullptr;
  Gemm gemm_;
};

template <class Cfg, int Swizzle = kDefaultSchedule.swizzle, int Raster = kDefaultSchedule.raster>
int create(int m, int n, int k, int, mircuda::Runner** out) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    set_cuda_error(error);
    return MIRCUDA_CUTLASS_CUDA_ERROR;
  }
  auto hw = cutlass::KernelHardwareInfo::make_kernel_hardware_info<typename Cfg::Kernel>(device);
  // A soft failure of the cluster-occupancy query (max_active_clusters = 0) must not surface later.
  (void)cudaGetLastError();
  auto* runner = new Runner<Cfg>(m, n, k, hw, Schedule{Swizzle, Raster});
  const int status = runner->check();
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  *out = runner;
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace blockwise
}  // namespace mircuda
