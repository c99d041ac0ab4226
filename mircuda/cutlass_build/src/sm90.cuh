// SM90 (Hopper, sm_90a) kernels: CUTLASS 3.x TMA + WGMMA warp-specialized GEMMs from the collective
// builders, and the runner that binds one to a shape for the C ABI.
//
// The problem mircuda poses: C[M,N] = alpha * A[M,K] . B[N,K]^T + beta * C, A and C row-major, B
// [N,K] row-major (CUTLASS's column-major K x N), FP32 accumulation. A swapped kernel computes the
// transpose C^T[N,M] = B[N,K] . A[M,K]^T instead (CUTLASS's A is the weights, its B the activations,
// its C column-major [N,M], the same bytes as C row-major [M,N]): the small M becomes the tile's N
// (decode), and the large N fills the 128-row WGMMA tile.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

// Grid dependency control (CUTLASS's cutlass/arch/grid_dependency_control.h), every SM90 dense kernel: the kernel
// waits (griddepcontrol.wait) before its producer warps load and lets the next kernel launch on its last tile, so
// the runner may launch it with programmatic dependent launch (set_pdl; DenseMatmulPlan does on cc 9.0). Defined
// before any CUTLASS header. The split-K and stream-K families take it through StreamKGdcScheduler (below).
#define CUTLASS_ENABLE_GDC_FOR_SM90 1

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
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
namespace sm90 {

using namespace cute;

// The stream-K scheduler with is_last_tile callable: CUTLASS 4.2's (PersistentTileSchedulerSm90StreamK) passes a
// member of its const this to a function taking a non-const reference, so a kernel compiled with grid dependency
// control (CUTLASS_ENABLE_GDC_FOR_SM90), which asks it after every tile whether that was the last, does not
// compile (fixed upstream after 4.2 by NVIDIA/cutlass PR 2686). This one answers on a copy of itself, zeroes the
// flags with a kernel instead of a memset (initialize_workspace) and waits before its fixup reads them; everything
// else is CUTLASS's. The cooperative kernel names its scheduler only through TileSchedulerSelector (below), so it
// gets this class wherever Config passes the tag.
struct StreamKSchedulerGdc {};

// Whether the execute on this thread launches with programmatic dependent launch: Runner::execute of a stream-K
// kernel sets it before initialize(), whose scheduler (below) launches the flag-zeroing kernel with it. CUTLASS's
// initialize_workspace has no parameter to carry it.
inline thread_local bool tls_programmatic = false;

// Zeroes the stream-K flags (bytes at flags) as the kernel that precedes the GEMM on its stream, in place of
// CUTLASS's cudaMemsetAsync: a memset is no kernel, so a programmatic launch cannot overlap it, and the GEMM's
// prologue then waits for it in full. This kernel waits for the grid before it (an earlier execute of the same plan
// may still read these flags), and lets the GEMM launch as soon as every block has stored its zeros. A template in
// an unnamed namespace, so compiled only into the TUs that launch it; the linker keeps one TU's copy of the inline
// initialize_workspace that launches it, and with it that TU's kernel, which needs no attribute set beforehand (the
// trap Schedule's comment below describes).
namespace {
template <int kThreads>
__global__ void __launch_bounds__(kThreads) zero_stream_k_flags(uint8_t* flags, size_t bytes) {
  cutlass::arch::wait_on_dependent_grids();
  const size_t stride = size_t(gridDim.x) * kThreads;
  const size_t first = size_t(blockIdx.x) * kThreads + threadIdx.x;
  // CUTLASS rounds each workspace part to 16 bytes (MinWorkspaceAlignment) in a 256-byte aligned allocation; the
  // byte loop keeps the kernel right for any other size or offset.
  if ((reinterpret_cast<uintptr_t>(flags) | bytes) % sizeof(uint4) == 0) {
    uint4* words = reinterpret_cast<uint4*>(flags);
    for (size_t i = first; i < bytes / sizeof(uint4); i += stride) words[i] = make_uint4(0, 0, 0, 0);
  } else {
    for (size_t i = first; i < bytes; i += stride) flags[i] = 0;
  }
  cutlass::arch::launch_dependent_grids();
}
}  // namespace

template <class TileShape, class ClusterShape>
class StreamKGdcScheduler
    : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape>;

 public:
  CUTLASS_HOST_DEVICE StreamKGdcScheduler() {}
  CUTLASS_DEVICE StreamKGdcScheduler(typename Base::Params const& params) : Base(params) {}

  // CUTLASS's workspace set-up with the flags zeroed by zero_stream_k_flags (above) instead of a memset: the same
  // region (the barrier part, after the reduction part, sized by CUTLASS's get_workspace_component_sizes with the
  // arguments its initialize_workspace passes), launched programmatically when tls_programmatic says so.
  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(typename Base::Arguments const& args, void* workspace,
                                              cudaStream_t stream, ProblemShape const& problem_shape,
                                              cutlass::KernelHardwareInfo const& hw_info, uint32_t mma_warp_groups,
                                              const uint32_t epilogue_subtile = 1,
                                              [[maybe_unused]] uint32_t num_accumulator_mtxs = 1,
                                              cutlass::CudaHostAdapter* cuda_adapter = nullptr) {
    auto problem_shape_mnkl = cute::append<4>(problem_shape, 1);
    const TileShape tile_shape;
    const ClusterShape cluster_shape;
    const dim3 problem_blocks = Base::get_tiled_cta_shape_mnl(problem_shape_mnkl, tile_shape, cluster_shape);
    const uint32_t k_tiles =
        cute::size(cute::ceil_div(cute::shape<2>(problem_shape_mnkl), cute::shape<2>(TileShape{})));
    size_t barrier_bytes = 0;
    size_t reduction_bytes = 0;
    Base::Params::get_workspace_component_sizes(
        problem_blocks, k_tiles, cutlass::gemm::to_gemm_coord(tile_shape),
        cutlass::gemm::to_gemm_coord(cluster_shape), barrier_bytes, reduction_bytes, hw_info,
        args.splits, args.max_swizzle_size, args.raster_order, args.decomposition_mode, args.reduction_mode,
        mma_warp_groups, cutlass::sizeof_bits<typename Base::BarrierType>::value,
        cutlass::sizeof_bits<ElementAccumulator>::value, epilogue_subtile, 1);
    if (barrier_bytes == 0) return cutlass::Status::kSuccess;
    if (workspace == nullptr) return cutlass::Status::kErrorWorkspaceNull;
    constexpr int kThreads = 256;
    const size_t words = (barrier_bytes + sizeof(uint4) - 1) / sizeof(uint4);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(std::min<size_t>((words + kThreads - 1) / kThreads, 1024)));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = tls_programmatic ? 1 : 0;
    // A failed launch leaves its error for Runner::execute, which reports it as the CUDA error it is.
    const cudaError_t error = cudaLaunchKernelEx(&config, zero_stream_k_flags<kThreads>,
                                                 static_cast<uint8_t*>(workspace) + reduction_bytes, barrier_bytes);
    return error == cudaSuccess ? cutlass::Status::kSuccess : cutlass::Status::kErrorInternal;
  }

  // CUTLASS's fixup after a wait for the grid before: the flags it reads were zeroed by that grid. The consumer warps
  // that call it reach it only after the producer's wait in practice (their first tile's operands come from it), but
  // the wait makes it so by rule; it returns at once when the grid before is done.
  template <class FrgTensorC>
  CUTLASS_DEVICE static void fixup(typename Base::Params const& params, typename Base::WorkTileInfo const& work_tile_info,
                                   FrgTensorC& accumulators, uint32_t num_barriers, uint32_t barrier_idx) {
    cutlass::arch::wait_on_dependent_grids();
    Base::fixup(params, work_tile_info, accumulators, num_barriers, barrier_idx);
  }

  // Whether no work follows work_tile_info for this CTA: it goes on over more K of another tile (stream-K units
  // span tiles), or the unit advance_count grids on holds work. Only decides when launch_dependents is
  // executed, never what is computed: a dependent grid waits for this one's completion anyway.
  CUTLASS_DEVICE bool is_last_tile(typename Base::WorkTileInfo work_tile_info, uint32_t advance_count = 1) const {
    if (this->continue_current_work(work_tile_info)) return false;
    Base next(static_cast<Base const&>(*this));
    next.advance_to_next_work(advance_count);
    return !next.get_current_work().is_valid();
  }
};

}  // namespace sm90
}  // namespace mircuda

namespace cutlass::gemm::kernel::detail {
template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<mircuda::sm90::StreamKSchedulerGdc, arch::Sm90, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = mircuda::sm90::StreamKGdcScheduler<TileShape, ClusterShape>;
};
}  // namespace cutlass::gemm::kernel::detail

namespace mircuda {
namespace sm90 {

// The M extent of CUTLASS's automatic epilogue tile: 128 rows for a cooperative kernel (two consumer warp groups share
// a tile), 64 for a ping-pong one, and never more than the CTA tile (a cooperative tile of 64 rows would need another
// rule: the builder takes an explicit cooperative epilogue tile of 128 rows only).
template <class MainloopSchedule, class TileShape>
inline constexpr int kAutoEpilogueM =
    std::min(std::is_same_v<MainloopSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative> ? 128 : 64,
             static_cast<int>(cute::size<0>(TileShape{})));

// StreamK: with the stream-K scheduler, let CUTLASS's heuristic decomposition split the last wave's
// tiles over K (stream-K) when the tile count leaves SMs idle, instead of data-parallel tiles or the
// caller's even split-K slices.
template <class In, class Out, class TileShape, class ClusterShape, class MainloopSchedule, class EpilogueSchedule,
          class Scheduler, bool Swapped, bool StreamK = false>
struct Config {
  using LayoutA = cutlass::layout::RowMajor;     // K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // K contiguous ([N,K] row-major)
  using LayoutC = std::conditional_t<Swapped, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<In>::value;    // 16-byte TMA granularity
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<Out>::value;

  template <class EpilogueTile>
  using EpilogueWith = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, EpilogueTile, float, float, Out,
      LayoutC, kAlignOut, Out, LayoutC, kAlignOut, EpilogueSchedule>::CollectiveOp;
  template <class Epi>
  using MainloopBeside = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, LayoutA, kAlignIn, In, LayoutB, kAlignIn, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  // The epilogue's shared memory (its C and D buffers) is carved out of what the mainloop's stages may use. CUTLASS's
  // automatic epilogue tile (128x32 cooperative, 64x32 ping-pong: sm90_compute_tile_shape_or_override) is 32 output
  // columns whatever the output type, so an FP32 output doubles those buffers and costs some tiles a mainloop stage
  // (the swapped 128x64x128 split-K kernel: 4 stages for BF16, 3 for FP32). A 16-column epilogue tile gives the stage
  // back, at the price of twice the epilogue subtiles (each a TMA store and two barriers). Measured on an H200
  // (2026-12-03): worth it for a cooperative kernel left with 4 stages or fewer (benchmarks/results/
  // epilogue_tile_ab.json, the same kernel with either tile: the swapped 128x192 BF16 split-K kernel at M = 192
  // 14336x4096 40.64 -> 39.00 µs, 4 -> 5 stages); not for a ping-pong kernel (same A/B: 64x128 BF16, 8 -> 9 stages,
  // 19.22 -> 20.73 µs at M = 128 6144x4096); not for one that has 5 (the FP32 128x128 stream-K and swapped split-K
  // kernels, 5 -> 6: 36.06 -> 38.17 and 36.03 -> 38.11 µs at M = 128 14336x4096, a large output, in two sweeps of
  // that day, not an A/B; the A/B measured the swapped one 3.4 % faster at M = 256 4096x14336, a small output).
  // Every other kernel keeps the automatic tile and its type.
  using AutoEpilogue = EpilogueWith<cutlass::epilogue::collective::EpilogueTileAuto>;
  using NarrowEpilogue = EpilogueWith<Shape<Int<kAutoEpilogueM<MainloopSchedule, TileShape>>, _16>>;
  static constexpr int kAutoStages = MainloopBeside<AutoEpilogue>::DispatchPolicy::Stages;
  static constexpr bool kNarrowEpilogue =
      std::is_same_v<MainloopSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative> && kAutoStages <= 4 &&
      MainloopBeside<NarrowEpilogue>::DispatchPolicy::Stages > kAutoStages;
  using Epilogue = std::conditional_t<kNarrowEpilogue, NarrowEpilogue, AutoEpilogue>;
  using Mainloop = MainloopBeside<Epilogue>;

  // The stream-K tag swapped for ours (StreamKGdcScheduler, above), which compiles with grid dependency control.
  using KernelScheduler =
      std::conditional_t<std::is_same_v<Scheduler, cutlass::gemm::StreamKScheduler>, StreamKSchedulerGdc, Scheduler>;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, KernelScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  // The mainloop stages the collective builder fits beside the epilogue's shared memory (StageCountAutoCarveout).
  static constexpr int kBuilderStages = Mainloop::DispatchPolicy::Stages;
  static constexpr bool kSwapped = Swapped;
  static constexpr bool kCooperative =
      std::is_same_v<MainloopSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  static constexpr bool kStreamK = std::is_same_v<Scheduler, cutlass::gemm::StreamKScheduler>;
  static constexpr bool kStreamKHeuristic = StreamK;
  static_assert(!StreamK || kStreamK, "stream-K decomposition needs the stream-K scheduler");
};

// The scheduler settings a runner hands CUTLASS at run time: one compiled kernel serves several
// registry entries that differ only here. They must come from the kernel's own translation unit: a
// second TU instantiating the same kernel type gets its own copy of the kernel and of its static host
// stub, while CUTLASS's kernel_launch<Kernel> (a weak symbol) is merged into one copy. Its runner then
// raises the dynamic shared-memory limit (cudaFuncSetAttribute) on its own TU's copy and launches the
// other's, above 48 KB without the limit: the launch fails and run() says kErrorInternal. The _nd
// entries of 2026-12-01 (one TU each, beside the deterministic TU of the same kernel) failed so on
// every shape; nm on that library shows the three kernels' host stubs twice.
//   kMaxSwizzle        CUTLASS's max_swizzle_size; 0: the Config's (4 for cooperative unswapped
//                      kernels, 1 otherwise)
//   kForceStreamK      DecompositionMode::StreamK instead of Heuristic (stream-K kernels): stream-K
//                      work whenever the last wave is partial, also when it is more than half full
//   kNondeterministic  ReductionMode::Nondeterministic: a middle K split adds its partial sums once
//                      the first split has stored its own, instead of waiting for every split before it
//   kProgrammatic      false: never launched with programmatic dependent launch (set_pdl(true) answers
//                      NOT_IMPLEMENTABLE, so a plan launches it plainly), for the cells where the early
//                      start costs more than it saves: the ping-pong 64x128 kernel at M = 192 on
//                      4096x14336, 46.86 µs without and 48.97 with (H200, 2026-12-03, cutlass_pdl_ab.json)
template <int MaxSwizzle = 0, bool ForceStreamK = false, bool Nondeterministic = false, bool Programmatic = true>
struct Schedule {
  static constexpr int kMaxSwizzle = MaxSwizzle;
  static constexpr bool kForceStreamK = ForceStreamK;
  static constexpr bool kNondeterministic = Nondeterministic;
  static constexpr bool kProgrammatic = Programmatic;
};
using ConfigSchedule = Schedule<>;

template <class Cfg, class Sched = ConfigSchedule>
class Runner final : public mircuda::Runner {
 public:
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementC = typename Kernel::ElementC;
  using ElementD = typename Kernel::ElementD;

  Runner(int m, int n, int k, int splits, cutlass::KernelHardwareInfo hw)
      : m_(m), n_(n), k_(k), splits_(splits), hw_(hw) {}

  // Can-implement with placeholder addresses (16-byte aligned, never dereferenced).
  int check() const {
    auto args = arguments(kPlaceholder, kPlaceholder, const_cast<void*>(kPlaceholder), 1.f, 0.f);
    return Gemm::can_implement(args) == cutlass::Status::kSuccess ? MIRCUDA_CUTLASS_OK
                                                                   : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override {
    return Gemm::get_workspace_size(arguments(kPlaceholder, kPlaceholder, const_cast<void*>(kPlaceholder), 1.f, 0.f));
  }

  int set_workspace(void* workspace, size_t) override {
    workspace_ = workspace;
    return MIRCUDA_CUTLASS_OK;
  }

  // Programmatic dependent launch: every kernel of this file waits before touching global memory (the macro at its
  // top). A split-K or stream-K execute whose flags need zeroing launches zero_stream_k_flags before the GEMM, both
  // programmatically: the zeroing overlaps the tail of the kernel before, the GEMM's prologue the zeroing.
  int set_pdl(bool on) override {
    if (on && !Sched::kProgrammatic) return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
    pdl_ = on;
    return MIRCUDA_CUTLASS_OK;
  }

  int execute(cudaStream_t stream, const void* a, const void* b, void* c, float alpha, float beta) override {
    // An error left pending by earlier work (a failed call, an earlier kernel's fault) would surface in
    // CUTLASS's run(), which clears it with cudaGetLastError and answers kErrorInternal: the code would
    // be lost. Say it as the CUDA error it is, before anything is enqueued.
    if (cudaError_t pending = cudaGetLastError(); pending != cudaSuccess) {
      set_cuda_error(pending);
      return MIRCUDA_CUTLASS_CUDA_ERROR;
    }
    auto args = arguments(a, b, c, alpha, beta);
    if constexpr (Cfg::kStreamK) tls_programmatic = pdl_;
    // initialize() builds the TMA descriptors for these pointers and, for split-K or stream-K, zeroes the
    // reduction flags in the workspace on `stream` (zero_stream_k_flags); nothing is allocated or synchronized.
    cutlass::Status status = gemm_.initialize(args, workspace_, stream);
    if (status != cutlass::Status::kSuccess) {
      if constexpr (Cfg::kStreamK) {
        if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
          set_cuda_error(error);
          return MIRCUDA_CUTLASS_CUDA_ERROR;
        }
      }
      return status_from_cutlass(static_cast<int>(status));
    }
    status = gemm_.run(stream, nullptr, pdl_);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  static inline const void* const kPlaceholder = reinterpret_cast<const void*>(uintptr_t{1} << 20);

  typename Gemm::Arguments arguments(const void* a, const void* b, void* c, float alpha, float beta) const {
    const int pm = Cfg::kSwapped ? n_ : m_;
    const int pn = Cfg::kSwapped ? m_ : n_;
    const void* pa = Cfg::kSwapped ? b : a;
    const void* pb = Cfg::kSwapped ? a : b;
    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(pm, k_, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(pn, k_, 1));
    auto stride_c = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, cute::make_shape(pm, pn, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(pm, pn, 1));
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {pm, pn, k_, 1},
        {static_cast<const ElementA*>(pa), stride_a, static_cast<const ElementB*>(pb), stride_b},
        // alpha and beta by value: with their pointer forms (alpha_ptr, beta_ptr) the epilogue's scalar broadcast
        // would read global memory before griddepcontrol.wait, which programmatic dependent launch (set_pdl) forbids.
        {{alpha, beta}, static_cast<const ElementC*>(c), stride_c, static_cast<ElementD*>(c), stride_d},
        hw_};
    if constexpr (Sched::kMaxSwizzle > 0) {
      // The *_swz1 entries. With 4, CUTLASS rounds both tile counts up to a multiple of 4 once the
      // smaller is 3 or more (of 2 when it is 2) and computes the added tiles on zeros: at M = 384 on
      // N = 6144, 4x48 = 192 tiles of 128x128 for 3x48 = 144 (the 12.58 MB stream-K workspace ncu
      // measured is 192 tiles' FP32 partials), and at M = 768 on N = 4096, 8x24 128x192 tiles (two
      // waves) for 6x22 = 132 (one). Its stream-K groups (up to one per M tile with 1) then share the A
      // tile instead of the weights. benchmarks/streamk_model.py computes both.
      args.scheduler.max_swizzle_size = Sched::kMaxSwizzle;
    } else if constexpr (Cfg::kCooperative && !Cfg::kSwapped) {
      // Persistent tiles visited in groups of 4 along the raster (CUTLASS's max_swizzle_size; the
      // default, 1, walks whole rows of tiles): neighbouring CTAs share A and B tiles in L2. Measured
      // on an H200 on 2026-11-29 (bf16, cooperative 128x256x64, swizzle 1/2/4/8 x raster
      // heuristic/M/N): at M = 8192 the default was the slowest (14336 x 4096: 829 TFLOP/s, 882 with
      // 4; 4096 x 14336: 868, 912 with 4), and 4 was within 1 % of the best on all six shapes. The
      // ping-pong kernel keeps the default: with 4, M = 512 on 14336 x 4096 fell from 0.90 to 0.63 of
      // cuBLAS.
      args.scheduler.max_swizzle_size = 4;
    }
    if constexpr (Cfg::kStreamK) {
      using Mode = typename Kernel::TileScheduler::DecompositionMode;
      args.scheduler.splits = splits_;
      if constexpr (Sched::kForceStreamK) {
        static_assert(Cfg::kStreamKHeuristic, "a forced stream-K decomposition replaces the heuristic one");
        args.scheduler.decomposition_mode = Mode::StreamK;
      } else {
        args.scheduler.decomposition_mode =
            Cfg::kStreamKHeuristic ? Mode::Heuristic : (splits_ > 1 ? Mode::SplitK : Mode::DataParallel);
      }
      if constexpr (Sched::kNondeterministic) {
        args.scheduler.reduction_mode = Kernel::TileScheduler::ReductionMode::Nondeterministic;
      }
    } else {
      static_assert(!Sched::kForceStreamK && !Sched::kNondeterministic,
                    "stream-K settings need the stream-K scheduler");
    }
    return args;
  }

  int m_, n_, k_, splits_;
  cutlass::KernelHardwareInfo hw_;
  bool pdl_ = false;  // launch with programmatic dependent launch (set_pdl)
  void* workspace_ = nullptr;
  Gemm gemm_;
};

template <class Cfg, class Sched = ConfigSchedule>
int create(int m, int n, int k, int splits, mircuda::Runner** out) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    set_cuda_error(error);
    return MIRCUDA_CUTLASS_CUDA_ERROR;
  }
  auto hw = cutlass::KernelHardwareInfo::make_kernel_hardware_info<typename Cfg::Kernel>(device);
  // The cluster-occupancy query may fail softly (hw.max_active_clusters = 0: CUTLASS then sizes the
  // persistent grid from the SM count); clear its error so that run() does not report it later.
  (void)cudaGetLastError();
  auto* runner = new Runner<Cfg, Sched>(m, n, k, Cfg::kStreamK ? splits : 1, hw);
  const int status = runner->check();
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  *out = runner;
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace sm90
}  // namespace mircuda
