// Grouped BF16 x BF16 -> BF16 GEMMs for SM90 with device-resident routing (CUTLASS 3.x's pointer-array grouped
// TMA + WGMMA warp-specialized kernels, the scheme of CUTLASS example 57 with device-only problem shapes) and
// the runner that binds one to (N, K, capacity, groups, bank size, sets) for the C ABI
// (mircuda_cutlass_grouped_plan_create + mircuda_cutlass_grouped_dense_plan_execute).
//
// The problem, for each operand set s (1 or 2) and group g of G, when the group is valid:
//   rows [o, o + m) of D_s = alpha_s[e] * A_s[o : o + m] . B_s[e]^T   (BF16 x BF16 -> BF16, FP32 accumulation)
// with m = row_counts[g], o = offsets[g], e = matrix_indices[g]; A_s BF16 [capacity, K] row-major, B_s[e] BF16
// [N, K] row-major at element e * N * K of the bank, D_s BF16 [capacity, N] row-major, alpha_s an FP32 device
// array [bank_size] read when the kernel runs (the epilogue scales the FP32 accumulator, then rounds once to
// BF16). mircuda's decode+grouped MoE path feeds it NVFP4 operands decoded exactly to BF16 and the plan's
// alpha_per_matrix.
//
// Every execute first runs grouped_dense_setup (one thread per problem, sets * G problems): it checks the
// group (a matrix index outside [0, bank_size) ORs 1 into the error flag; a negative count or offset, or
// offset + count over capacity ORs 2; an invalid group becomes empty: no tiles, nothing read or written) and
// writes the problem's shape (m, N, K), pointers, alpha pointer (alpha_s + e) and packed strides into the
// plan's workspace. Then the
// CUTLASS kernel (persistent; CUTLASS's group tile scheduler reads the device problem shapes, so the host
// reads no routing and a captured graph follows routing rewritten on the device).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/util/packed_stride.hpp"
#include "registry.hpp"

namespace mircuda {
namespace grouped_dense {

using namespace cute;

constexpr int kSetupThreads = 256;

template <class MainloopSchedule, class EpilogueSchedule, class TileShape_, class ClusterShape_>
struct Config {
  using In = cutlass::bfloat16_t;
  using Out = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;     // K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // K contiguous ([N,K] row-major)
  using LayoutD = cutlass::layout::RowMajor;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<In>::value;           // 16-byte TMA granules

  // No C (void): beta is 0 and the epilogue loads no source. Pointer layouts (LayoutD *) select the
  // pointer-array epilogue.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlign, Out, LayoutD*, kAlign,
      EpilogueSchedule>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, LayoutA*, kAlign, In, LayoutB*, kAlign, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementD = typename Kernel::ElementD;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

// The per-problem arrays the setup writes (S = sets * groups entries each), in the plan's workspace.
template <class Cfg>
struct Tables {
  typename Cfg::Shape3* shapes;
  const typename Cfg::ElementA** a;
  const typename Cfg::ElementB** b;
  typename Cfg::ElementD** d;
  const float** alpha;
  typename Cfg::StrideA* stride_a;
  typename Cfg::StrideB* stride_b;
  typename Cfg::StrideD* stride_d;
};

struct Routing {
  const int* row_counts;
  const int* offsets;
  const int* matrix_indices;
  int* error_flag;
  int groups, sets, n, k, capacity, bank_size;
  mircuda_cutlass_grouped_dense_operands operands[2];
};

// Thread i: problem i = s * G + g (group g of set s).
template <class Cfg>
__global__ void __launch_bounds__(kSetupThreads) grouped_dense_setup(Routing r, Tables<Cfg> t) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(r.sets) * r.groups) return;
  const int s = static_cast<int>(i / r.groups), g = static_cast<int>(i % r.groups);
  int m = r.row_counts[g], o = r.offsets[g], e = r.matrix_indices[g], error = 0;
  if (e < 0 || e >= r.bank_size) error |= 1;
  if (m < 0 || o < 0 || static_cast<long long>(o) + m > r.capacity) error |= 2;
  if (error) {
    if (s == 0) atomicOr(r.error_flag, error);  // one report per group
    m = 0;
    o = 0;
    e = 0;
  }
  const int rows = m > 0 ? m : 1;  // an empty problem has no tiles; keep its strides well-formed
  const mircuda_cutlass_grouped_dense_operands& op = r.operands[s];
  t.shapes[i] = typename Cfg::Shape3{m, r.n, r.k};
  t.a[i] = static_cast<const typename Cfg::ElementA*>(op.a) + static_cast<long long>(o) * r.k;
  t.b[i] = static_cast<const typename Cfg::ElementB*>(op.b_bank) + static_cast<long long>(e) * r.n * r.k;
  t.d[i] = static_cast<typename Cfg::ElementD*>(op.d) + static_cast<long long>(o) * r.n;
  t.alpha[i] = op.alpha_per_matrix + e;
  t.stride_a[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideA{}, cute::make_shape(rows, r.k, 1));
  t.stride_b[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideB{}, cute::make_shape(r.n, r.k, 1));
  t.stride_d[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideD{}, cute::make_shape(rows, r.n, 1));
}

template <class Cfg>
class Runner final : public mircuda::Runner {
 public:
  using Gemm = typename Cfg::Gemm;

  Runner(int n, int k, int capacity, int groups, int bank_size, int sets, cutlass::KernelHardwareInfo hw)
      : n_(n), k_(k), capacity_(capacity), groups_(groups), bank_size_(bank_size), sets_(sets), hw_(hw) {}

  // The workspace: CUTLASS's, then the per-problem tables.
  int layout() {
    const size_t entries = static_cast<size_t>(sets_) * groups_;
    size_t at = round(Gemm::get_workspace_size(arguments(placeholder())));
    auto place = [&](size_t bytes) {
      const size_t here = at;
      at = round(at + bytes);
      return here;
    };
    offsets_.shapes = place(entries * sizeof(typename Cfg::Shape3));
    offsets_.a = place(entries * sizeof(void*));
    offsets_.b = place(entries * sizeof(void*));
    offsets_.d = place(entries * sizeof(void*));
    offsets_.alpha = place(entries * sizeof(void*));
    offsets_.stride_a = place(entries * sizeof(typename Cfg::StrideA));
    offsets_.stride_b = place(entries * sizeof(typename Cfg::StrideB));
    offsets_.stride_d = place(entries * sizeof(typename Cfg::StrideD));
    total_ = at;
    return Gemm::can_implement(arguments(placeholder())) == cutlass::Status::kSuccess
               ? MIRCUDA_CUTLASS_OK
               : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override { return total_; }

  int set_workspace(void* workspace, size_t) override {
    auto* base = static_cast<uint8_t*>(workspace);
    tables_ = Tables<Cfg>{reinterpret_cast<typename Cfg::Shape3*>(base + offsets_.shapes),
                          reinterpret_cast<const typename Cfg::ElementA**>(base + offsets_.a),
                          reinterpret_cast<const typename Cfg::ElementB**>(base + offsets_.b),
                          reinterpret_cast<typename Cfg::ElementD**>(base + offsets_.d),
                          reinterpret_cast<const float**>(base + offsets_.alpha),
                          reinterpret_cast<typename Cfg::StrideA*>(base + offsets_.stride_a),
                          reinterpret_cast<typename Cfg::StrideB*>(base + offsets_.stride_b),
                          reinterpret_cast<typename Cfg::StrideD*>(base + offsets_.stride_d)};
    workspace_ = workspace;
    return Gemm::can_implement(arguments(tables_)) == cutlass::Status::kSuccess ? MIRCUDA_CUTLASS_OK
                                                                                : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  int execute_grouped_dense(cudaStream_t stream, const int* row_counts, const int* offsets, const int* matrix_indices,
                            const mircuda_cutlass_grouped_dense_operands* operands, int* error_flag) override {
    Routing r{};
    r.row_counts = row_counts;
    r.offsets = offsets;
    r.matrix_indices = matrix_indices;
    r.error_flag = error_flag;
    r.groups = groups_;
    r.sets = sets_;
    r.n = n_;
    r.k = k_;
    r.capacity = capacity_;
    r.bank_size = bank_size_;
    for (int s = 0; s < sets_; ++s) r.operands[s] = operands[s];
    const long long problems = static_cast<long long>(sets_) * groups_;
    grouped_dense_setup<Cfg><<<static_cast<unsigned>((problems + kSetupThreads - 1) / kSetupThreads), kSetupThreads,
                               0, stream>>>(r, tables_);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
      set_cuda_error(error);
      return MIRCUDA_CUTLASS_CUDA_ERROR;
    }
    // initialize() builds the kernel parameters on the host (the tables' addresses never change); nothing is
    // allocated or synchronized.
    cutlass::Status done = gemm_.initialize(arguments(tables_), workspace_, stream);
    if (done != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(done));
    done = gemm_.run(stream);
    if (done != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(done));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  struct Offsets {
    size_t shapes, a, b, d, alpha, stride_a, stride_b, stride_d;
  };

  static size_t round(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // Addresses never dereferenced (can-implement and the workspace size read no device memory).
  static Tables<Cfg> placeholder() {
    auto* p = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
    return {reinterpret_cast<typename Cfg::Shape3*>(p), reinterpret_cast<const typename Cfg::ElementA**>(p),
            reinterpret_cast<const typename Cfg::ElementB**>(p), reinterpret_cast<typename Cfg::ElementD**>(p),
            reinterpret_cast<const float**>(p), reinterpret_cast<typename Cfg::StrideA*>(p), reinterpret_cast<typename Cfg::StrideB*>(p),
            reinterpret_cast<typename Cfg::StrideD*>(p)};
  }

  typename Gemm::Arguments arguments(const Tables<Cfg>& t) const {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {sets_ * groups_, t.shapes, nullptr};  // device shapes only
    args.mainloop.ptr_A = t.a;
    args.mainloop.dA = t.stride_a;
    args.mainloop.ptr_B = t.b;
    args.mainloop.dB = t.stride_b;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = nullptr;
    args.epilogue.ptr_D = t.d;
    args.epilogue.dD = t.stride_d;
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.f;
    fusion.beta = 0.f;
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    fusion.alpha_ptr_array = t.alpha;  // one FP32 per problem, read when the kernel runs
    fusion.beta_ptr_array = nullptr;
    fusion.dAlpha = {_0{}, _0{}, 1};
    fusion.dBeta = {_0{}, _0{}, 0};
    args.hw_info = hw_;
    return args;
  }

  int n_, k_, capacity_, groups_, bank_size_, sets_;
  cutlass::KernelHardwareInfo hw_;
  Offsets offsets_{};
  size_t total_ = 0;
  Tables<Cfg> tables_{};
  void* workspace_ = nullptr;
  Gemm gemm_;
};

template <class Cfg>
int create(int n, int k, int capacity, int groups, int bank_size, int sets, mircuda::Runner** out) {
  if (static_cast<long long>(sets) * groups >= (1ll << 31)) return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    set_cuda_error(error);
    return MIRCUDA_CUTLASS_CUDA_ERROR;
  }
  auto hw = cutlass::KernelHardwareInfo::make_kernel_hardware_info<typename Cfg::Kernel>(device);
  (void)cudaGetLastError();  // a soft failure of the cluster-occupancy query must not surface later
  auto* runner = new Runner<Cfg>(n, k, capacity, groups, bank_size, sets, hw);
  const int status = runner->layout();
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  *out = runner;
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace grouped_dense
}  // namespace mircuda
