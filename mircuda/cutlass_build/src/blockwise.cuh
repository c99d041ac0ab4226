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
// SFB [ceil(N/128), ceil(K/128)] row-major, the layout a per-token quantizer writes. CUTLASS's SM90
// mainloop reads a K-major SFA with 128 scattered 4-byte cp.async per k-tile, an M-major one with one TMA
// copy (M a multiple of 4); so the SM90 cooperative kernel (Sm90ScalesMnA) has its runner copy SFA M-major,
// padded to 4 rows, into its workspace with a small kernel before each GEMM (sfa_to_m_major): the scales
// are 1/128 of A's bytes, and the copy measured faster in total (blockwise_instance.cuh gives the figures).
#pragma once

#include <limits>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/arch/grid_dependency_control.h"
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
// SFA M-major ([ceil(K/128), M] row-major: the layout torch's blockwise _scaled_mm takes): the SM90 mainloop then
// loads SFA's 128 scales of a k-tile with one TMA copy instead of 128 scattered 4-byte cp.async (M a multiple of 4,
// TMA's 16-byte stride).
using Sm90ScalesMnA = cutlass::detail::Sm90BlockwiseScaleConfig<kScaleM, kScaleN, kScaleK, cute::GMMA::Major::MN,
                                                                cute::GMMA::Major::K>;
// Copies SFA from mircuda's K-major layout ([M, kb] row-major) to the M-major one ([kb, ld] row-major, ld = M
// rounded up to 4) in a runner's workspace, the pad rows zero: one thread per scale, consecutive threads along M,
// so the writes coalesce (the reads stride by kb floats; the tensor is 1/128 of A's bytes).
// Under programmatic dependent launch (the runner's pdl_) it waits for the previous kernel (which may write sfa, or
// still read the copy of the previous execute) before it touches memory, and lets the GEMM launch at once: the
// GEMM waits for this grid's completion before it reads anything; a dependent grid launches only once every block of
// this one has triggered or exited, so all of them are resident and none is starved by the GEMM's blocks. (Triggering
// before the wait would be as safe, this grid completing only after the previous one, and would let the GEMM's
// launch overlap the previous kernel's tail as well: not yet measured on the GPU, so not done.) Without the attribute
// both instructions do nothing (and on a TU without CUTLASS_ENABLE_GDC_FOR_SM90 they are not emitted).
static __global__ void sfa_to_m_major(const float* __restrict__ sfa, float* __restrict__ out, int m, int kb, int ld) {
  cutlass::arch::wait_on_dependent_grids();
  cutlass::arch::launch_dependent_grids();
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  const int block = blockIdx.y;
  if (row < ld) out[static_cast<size_t>(block) * ld + row] = row < m ? sfa[static_cast<size_t>(row) * kb + block] : 0.f;
}

// The swapped problem D^T = B . A^T (Config's Swapped): the weights are CUTLASS's A with 128 x 128 scale blocks,
// the activations its B with one scale per column and 128-K block; both still K-major, the same tensors.
using Sm90ScalesSwapped = cutlass::detail::Sm90BlockwiseScaleConfig<kScaleN, kScaleM, kScaleK, cute::GMMA::Major::K,
                                                                    cute::GMMA::Major::K>;
using Sm120Scales = cutlass::detail::Sm120BlockwiseScaleConfig<kScaleM, kScaleN, kScaleK, cute::UMMA::Major::K,
                                                               cute::UMMA::Major::K>;

// CUTLASS 4.2's SM90 cooperative blockwise kernel (sm90_gemm_tma_warpspecialized_cooperative.hpp) calls
// wait_on_dependent_grids() in its Mainloop and Epilogue producer warps but not in its MainloopAux warp, whose
// load_auxiliary reads the scales from global memory (cp.async); the ping-pong kernel waits in all three. This
// mainloop is the built one with load_auxiliary waiting first, so a kernel compiled with grid dependency control
// may be launched with programmatic dependent launch (after the first tile the wait returns at once). Everything
// else (types, Params, the other members) is the base's.
template <class Base>
struct AuxWaitsMainloop : Base {
  using Base::Base;
  template <class... Args>
  CUTLASS_DEVICE void load_auxiliary(Args&&... args) {
    cutlass::arch::wait_on_dependent_grids();
    Base::load_auxiliary(static_cast<Args&&>(args)...);
  }
};

// EpilogueTile, Source and Swapped are varied only by the experimental families (blockwise_instance.cuh): the
// epilogue's subtile (CUTLASS's auto choice by default), C's element type (void: no source operand, beta must
// be 0; CUTLASS then delays the TMA store and reserves no smem for C), and whether the kernel solves the
// swapped problem D^T[N, M] = B . A^T (weights on CUTLASS's M side, D^T column-major: the same bytes as D
// row-major), which frees the token tile from the weights' 128-row scale blocks (Scales must then be
// Sm90ScalesSwapped).
template <class Arch, class Scales, class TileShape, class ClusterShape, class MainloopSchedule,
          class EpilogueSchedule, class Scheduler,
          class EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto, class Source = cutlass::bfloat16_t,
          bool Swapped = false>
struct Config {
  using In = cutlass::float_e4m3_t;
  using Out = cutlass::bfloat16_t;
  using ElementC = Source;
  using LayoutA = cutlass::layout::RowMajor;     // K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // K contiguous ([N,K] row-major)
  using LayoutC = std::conditional_t<Swapped, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr bool kSwapped = Swapped;
  using LayoutSFA = decltype(Scales::deduce_layoutSFA());
  using LayoutSFB = decltype(Scales::deduce_layoutSFB());
  using ScaleConfig = Scales;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<In>::value;  // 16-byte TMA granularity
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<Out>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      Arch, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, EpilogueTile,
      float, float, ElementC, LayoutC, kAlignOut, Out, LayoutC, kAlignOut, EpilogueSchedule>::CollectiveOp;

  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      Arch, cutlass::arch::OpClassTensorOp, In, cute::tuple<LayoutA, LayoutSFA>, kAlignIn, In,
      cute::tuple<LayoutB, LayoutSFB>, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  // The SM90 kernels of a TU with grid dependency control wait in load_auxiliary too (AuxWaitsMainloop).
  using Mainloop = std::conditional_t<kGdcSm90 && std::is_same_v<Arch, cutlass::arch::Sm90>,
                                      AuxWaitsMainloop<BuiltMainloop>, BuiltMainloop>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  // SFA M-major: the runner keeps an M-major copy of the caller's K-major SFA in its workspace.
  static constexpr bool kSfaMn = std::is_same_v<Scales, Sm90ScalesMnA>;
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
    // The M-major SFA copy: its rows (scale_ld) must stay an int, as CUTLASS's problem shape is, and its grid has
    // one y index per 128-K block (gridDim.y <= 65535: K up to 8388480).
    if (Cfg::kSfaMn && (m_ > std::numeric_limits<int>::max() - 3 || scale_blocks() > 65535)) {
      return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
    }
    return Gemm::can_implement(placeholder_arguments()) == cutlass::Status::kSuccess ? MIRCUDA_CUTLASS_OK
                                                                                     : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override { return scale_offset() + scale_bytes(); }

  // Programmatic dependent launch of the GEMM (and of the SFA copy before it): only where this TU's kernel waits
  // before touching global memory (kGdcSm90: the SM90 cooperative and ping-pong families).
  int set_pdl(bool on) override {
    if (on && !kGdcSm90) return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
    pdl_ = on;
    return MIRCUDA_CUTLASS_OK;
  }

  int set_workspace(void* workspace, size_t) override {
    workspace_ = workspace;
    // Where the M-major SFA copy goes, found once here rather than on every launch (the offset is CUTLASS's
    // workspace size, which builds a whole argument set).
    sfa_copy_ = Cfg::kSfaMn ? reinterpret_cast<float*>(static_cast<char*>(workspace) + scale_offset()) : nullptr;
    return MIRCUDA_CUTLASS_OK;
  }

  int execute_scaled(cudaStream_t stream, const void* a, const void* b, const void* sfa, const void* sfb,
                     const void* c, void* d, float alpha, float beta) override {
    if (!Cfg::kHasSource && beta != 0.f) return MIRCUDA_CUTLASS_INVALID_ARGUMENT;  // no C operand to add
    // An error left pending by earlier work would surface after the copy's launch or in CUTLASS's run() (which
    // answers kErrorInternal for it): say it as the CUDA error it is, before anything is enqueued (as sm90.cuh).
    if (cudaError_t pending = cudaGetLastError(); pending != cudaSuccess) {
      set_cuda_error(pending);
      return MIRCUDA_CUTLASS_CUDA_ERROR;
    }
    if constexpr (Cfg::kSfaMn) {
      // The caller's K-major SFA, copied M-major into the workspace first (same stream: the GEMM reads it after).
      cudaLaunchConfig_t config{};
      config.gridDim = dim3((scale_ld() + 255) / 256, scale_blocks());
      config.blockDim = dim3(256);
      config.stream = stream;
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attribute.val.programmaticStreamSerializationAllowed = 1;
      config.attrs = &attribute;
      config.numAttrs = pdl_ ? 1 : 0;
      cudaError_t error = cudaLaunchKernelEx(&config, sfa_to_m_major, static_cast<const float*>(sfa), sfa_copy_, m_,
                                             scale_blocks(), scale_ld());
      // Read (and clear) the last error either way, so that a failed launch leaves nothing for the next execute.
      const cudaError_t last = cudaGetLastError();
      if (error == cudaSuccess) error = last;
      if (error != cudaSuccess) {
        set_cuda_error(error);
        return MIRCUDA_CUTLASS_CUDA_ERROR;
      }
      sfa = sfa_copy_;
    }
    auto args = arguments(a, b, sfa, sfb, c, d, alpha, beta);
    // initialize() builds the TMA descriptors for these pointers into the kernel parameters (host
    // side); nothing is allocated or synchronized.
    cutlass::Status status = gemm_.initialize(args, workspace_, stream);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    status = gemm_.run(stream, nullptr, pdl_);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  static inline const void* const kPlaceholder = reinterpret_cast<const void*>(uintptr_t{1} << 20);

  int scale_blocks() const { return (k_ + kScaleK - 1) / kScaleK; }
  // The M-major copy's rows: M rounded up to 4 floats (TMA's 16-byte global strides; CUTLASS's can_implement
  // asks for the scale tensor's extent as well), so any M is taken: the kernel reads scales of the zero pad rows
  // only for tile rows past M, whose A rows TMA reads as zeros and whose outputs are never stored.
  int scale_ld() const { return (m_ + 3) / 4 * 4; }
  size_t scale_offset() const {
    const size_t gemm = Gemm::get_workspace_size(placeholder_arguments());
    return Cfg::kSfaMn ? (gemm + 255) / 256 * 256 : gemm;
  }
  size_t scale_bytes() const {
    return Cfg::kSfaMn ? static_cast<size_t>(scale_blocks()) * static_cast<size_t>(scale_ld()) * sizeof(float) : 0;
  }

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
    // The swapped kernel's problem is (N, M, K) with the operands and their scales exchanged.
    const int pm = Cfg::kSwapped ? n_ : m_;
    const int pn = Cfg::kSwapped ? m_ : n_;
    const void* pa = Cfg::kSwapped ? b : a;
    const void* pb = Cfg::kSwapped ? a : b;
    const void* psfa = Cfg::kSwapped ? sfb : sfa;
    const void* psfb = Cfg::kSwapped ? sfa : sfb;
    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(pm, k_, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(pn, k_, 1));
    auto stride_c = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, cute::make_shape(pm, pn, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(pm, pn, 1));
    auto problem = cute::make_shape(pm, pn, k_, 1);
    // The M-major SFA is the workspace copy, of scale_ld() rows.
    auto layout_sfa = Cfg::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(Cfg::kSfaMn ? scale_ld() : pm, pn,
                                                                                k_, 1));
    auto layout_sfb = Cfg::ScaleConfig::tile_atom_to_shape_SFB(problem);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {pm, pn, k_, 1},
        {static_cast<const ElementA*>(pa), stride_a, static_cast<const ElementB*>(pb), stride_b,
         static_cast<const float*>(psfa), layout_sfa, static_cast<const float*>(psfb), layout_sfb},
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
  float* sfa_copy_ = nullptr;  // kSfaMn: the M-major SFA copy inside workspace_
  bool pdl_ = false;
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
