// Block-scaled NVFP4 GEMMs for SM12x (CUTLASS 3.x's OpClassBlockScaledTensorOp collective builders, as in
// CUTLASS example 79a) and the runner that binds one to a shape for the C ABI
// (mircuda_cutlass_block_scaled_plan_*).
//
// The problem: D[M,N] = alpha * sum_k (qa[m,k] SFA[m,k/16]) (qb[n,k] SFB[n,k/16]), BF16 D [M,N] row-major,
// FP32 accumulation. A is NVFP4 [M,K] row-major and B NVFP4 [N,K] row-major (CUTLASS's column-major K x N):
// E2M1 codes two per byte, element 2i in the low nibble (cutlass::float_e2m1_t packing); one UE4M3 scale
// (cutlass::float_ue4m3_t) per 16 consecutive K-elements of a row (cutlass::nv_float4_t's vector size).
//
// Scale layout: CUTLASS's SM1xx block-scaled layout (cutlass/detail/sm100_blockscaled_layout.hpp,
// Sm1xxBlockScaledConfig<16>::tile_atom_to_shape_SFA/SFB): 512-byte atoms of 128 rows x 4 scales, inside
// an atom row r = 32 r1 + r0 and scale j at byte 16 r0 + 4 r1 + j, atoms K-fastest; rows padded to 128 and
// K/16 to 4. It is mircuda's "tiled" layout (cuda_src/fp4_common.cuh tiled_offset), the one
// Fp4Quantizer(layout="tiled") writes and cuBLASLt's VEC16_UE4M3 reads.
//
// alpha: read from device memory (the LinearCombination epilogue's alpha_ptr) when the caller passes one,
// so a captured graph follows its current value; else the host value. beta is 0: the epilogue never loads
// its source C (given D's address, as CUTLASS example 79a declares a BF16 C).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/util/packed_stride.hpp"
#include "registry.hpp"

namespace mircuda {
namespace block_scaled {

using namespace cute;

constexpr int kScaleVector = 16;  // NVFP4: one UE4M3 scale per 16 K-elements

// CUTLASS 4.2's SM120 block-scaled builder shapes the scale factors' shared-memory layout atoms with
// Int<SfVectorSize>, SfVectorSize being a uint32_t. Through `template <int v> using Int = C<v>`, gcc 12
// keeps the argument's type (C<16u>) where cudafe++ (EDG) converts it (C<16>), so the kernel's host stub
// names another type than the one gcc instantiates and does not compile ("template-id
// '__wrapper__device_stub_device_kernel<...>' ... does not match any template declaration", measured with
// nvcc 13.0 + gcc 12.2). Re-typing those constants as int gives both compilers one type; it changes no
// value.
template <class T>
struct AsInt {
  using type = T;
};
template <auto v>
struct AsInt<cute::C<v>> {
  using type = cute::conditional_t<cute::is_same_v<decltype(v), unsigned int>, cute::C<static_cast<int>(v)>, cute::C<v>>;
};
template <class... Ts>
struct AsInt<cute::tuple<Ts...>> {
  using type = cute::tuple<typename AsInt<Ts>::type...>;
};
template <class Shape, class Stride>
struct AsInt<cute::Layout<Shape, Stride>> {
  using type = cute::Layout<typename AsInt<Shape>::type, typename AsInt<Stride>::type>;
};
template <class A, class Offset, class B>
struct AsInt<cute::ComposedLayout<A, Offset, B>> {
  using type = cute::ComposedLayout<typename AsInt<A>::type, typename AsInt<Offset>::type, typename AsInt<B>::type>;
};

// The builder's collective with its shared-memory layout atoms re-typed (see AsInt).
template <class Built>
using RetypedMainloop = cutlass::gemm::collective::CollectiveMma<
    typename Built::DispatchPolicy, typename Built::TileShape, typename Built::ElementPairA,
    typename Built::StridePairA, typename Built::ElementPairB, typename Built::StridePairB, typename Built::TiledMma,
    typename Built::GmemTiledCopyPairA, typename AsInt<typename Built::SmemLayoutAtomsA>::type,
    typename Built::SmemCopyAtomsA, typename Built::TransformA, typename Built::GmemTiledCopyPairB,
    typename AsInt<typename Built::SmemLayoutAtomsB>::type, typename Built::SmemCopyAtomsB,
    typename Built::TransformB>;

template <class TileShape, class MainloopSchedule>
struct Config {
  using In = cutlass::nv_float4_t<cutlass::float_e2m1_t>;
  using Out = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;     // K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // K contiguous ([N,K] row-major)
  using LayoutD = cutlass::layout::RowMajor;
  using Arch = cutlass::arch::Sm120;
  using OpClass = cutlass::arch::OpClassBlockScaledTensorOp;
  using ClusterShape = Shape<_1, _1, _1>;  // GeForce Blackwell has no TMA multicast
  static constexpr int kAlignIn = 32;      // E2M1 elements per 16-byte TMA granule
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<Out>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      Arch, OpClass, TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float, Out,
      LayoutD, kAlignOut, Out, LayoutD, kAlignOut, cutlass::epilogue::collective::EpilogueScheduleAuto>::CollectiveOp;

  using Built = typename cutlass::gemm::collective::CollectiveBuilder<
      Arch, OpClass, In, LayoutA, kAlignIn, In, LayoutB, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Mainloop = RetypedMainloop<Built>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using ScaleConfig = typename Mainloop::Sm1xxBlkScaledConfig;
};

template <class Cfg>
class Runner final : public mircuda::Runner {
 public:
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;

  Runner(int m, int n, int k, cutlass::KernelHardwareInfo hw) : m_(m), n_(n), k_(k), hw_(hw) {}

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

  int execute_block_scaled(cudaStream_t stream, const void* a, const void* b, const void* sfa, const void* sfb,
                           void* d, const float* alpha_device, float alpha) override {
    auto args = arguments(a, b, sfa, sfb, d, alpha_device, alpha);
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
    return arguments(kPlaceholder, kPlaceholder, kPlaceholder, kPlaceholder, const_cast<void*>(kPlaceholder), nullptr,
                     1.f);
  }

  typename Gemm::Arguments arguments(const void* a, const void* b, const void* sfa, const void* sfb, void* d,
                                     const float* alpha_device, float alpha) const {
    using Mainloop = typename Cfg::Mainloop;
    using ElementA = typename Mainloop::ElementA;
    using ElementB = typename Mainloop::ElementB;
    using ElementSF = typename Mainloop::ElementSF;
    using ElementD = typename Kernel::ElementD;
    auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(m_, k_, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(n_, k_, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(m_, n_, 1));
    auto problem = cute::make_shape(m_, n_, k_, 1);
    auto layout_sfa = Cfg::ScaleConfig::tile_atom_to_shape_SFA(problem);
    auto layout_sfb = Cfg::ScaleConfig::tile_atom_to_shape_SFB(problem);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m_, n_, k_, 1},
        {static_cast<const ElementA*>(a), stride_a, static_cast<const ElementB*>(b), stride_b,
         static_cast<const ElementSF*>(sfa), layout_sfa, static_cast<const ElementSF*>(sfb), layout_sfb},
        {{}, static_cast<const ElementD*>(d), stride_d, static_cast<ElementD*>(d), stride_d},
        hw_};
    args.epilogue.thread.alpha = alpha;
    args.epilogue.thread.beta = 0.f;
    args.epilogue.thread.alpha_ptr = alpha_device;  // when set, CUTLASS reads alpha here and ignores the value
    return args;
  }

  int m_, n_, k_;
  cutlass::KernelHardwareInfo hw_;
  void* workspace_ = nullptr;
  Gemm gemm_;
};

template <class Cfg>
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
  auto* runner = new Runner<Cfg>(m, n, k, hw);
  const int status = runner->check();
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  *out = runner;
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace block_scaled
}  // namespace mircuda
