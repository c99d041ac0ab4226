// Grouped block-scaled NVFP4 GEMMs for SM12x with device-resident routing (CUTLASS 3.x's pointer-array
// grouped OpClassBlockScaledTensorOp kernel, the scheme of CUTLASS example 79d, with device-only problem
// shapes) and the runner that binds one to (N, K, capacity, groups, bank size, sets) for the C ABI
// (mircuda_cutlass_grouped_plan_*).
//
// The problem, for each operand set s (1 or 2) and group g of G, when the group is valid:
//   rows [o, o + m) of D_s = alpha_s[e] * A_s[o : o + m] . B_s[e]^T (NVFP4 x NVFP4 -> BF16, FP32 accumulation)
// with m = row_counts[g], o = offsets[g], e = matrix_indices[g]; A_s is NVFP4 [capacity, K] row-major with
// LINEAR UE4M3 scales [capacity, K/16] (row r of A has scale row r), B_s[e] NVFP4 [N, K] row-major at byte
// e * N * K/2 of the bank with TILED scales (the SF_TILED layout of mircuda_cutlass.h) at byte
// e * ceil(N/128)*128 * ceil(K/64)*4 of the scale bank, D_s BF16 [capacity, N] row-major, alpha_s an FP32
// device array [bank_size] read when the kernel runs.
//
// Every execute first runs small kernels on the stream (so a captured graph follows routing rewritten on
// the device between replays; the host reads nothing):
//   grouped_setup and grouped_repack_sfa (grouped_setup.cu, compiled for every arch of the build):
//     check each group (a matrix index outside [0, bank_size) ORs 1 into the error flag; a negative count
//     or offset, or offset + count over capacity ORs 2) and treat an invalid group as empty; assign each
//     group a slot of ceil(m/128)*128 rows in the scale workspace (an exclusive prefix sum); write the
//     per-problem rows, pointers and alpha pointers (alpha_s + e) for all sets * G problems; copy each
//     group's linear activation scales into its slot in the tiled layout (the layout the kernel's TMA
//     reads; rows past m and scales past K/16 are zero).
//   grouped_layouts (this file): the CUTLASS kernel's problem shapes (m, N, K), strides and scale-factor
//     layouts per problem, from the rows.
// then the CUTLASS kernel (persistent: one CTA per SM, CUTLASS's group tile scheduler walks the groups'
// tiles reading the device problem shapes; an empty group has no tiles; the TMA descriptors are rewritten
// on the device per group).
//
// The scale workspace of each set holds slot_rows = ceil(capacity/128)*128 + 128 * min(G, capacity) rows:
// enough for every routing whose groups' row ranges do not overlap (sum of ceil(m_g/128)*128 <= capacity
// + 127 * non-empty groups). Overlapping ranges (which would write the same D rows twice) can overflow it;
// a group whose slot would end past it is skipped and ORs 2 into the error flag: never an out-of-bounds
// access.
#pragma once

#include "block_scaled.cuh"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "grouped_setup.hpp"

namespace mircuda {
namespace grouped {

using namespace cute;

constexpr int kLayoutThreads = 256;

template <class MainloopSchedule>
struct Config {
  using In = cutlass::nv_float4_t<cutlass::float_e2m1_t>;
  using Out = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;     // K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // K contiguous ([N,K] row-major)
  using LayoutD = cutlass::layout::RowMajor;
  using Arch = cutlass::arch::Sm120;
  using OpClass = cutlass::arch::OpClassBlockScaledTensorOp;
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _1, _1>;  // GeForce Blackwell has no TMA multicast
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
  static constexpr int kAlignIn = 32;      // E2M1 elements per 16-byte TMA granule
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<Out>::value;

  // No C (void): beta is 0 and the epilogue loads no source. Pointer layouts (LayoutD *) select the
  // pointer-array epilogue, whose LinearCombination takes one alpha pointer per group.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      Arch, OpClass, TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float, void,
      LayoutD*, kAlignOut, Out, LayoutD*, kAlignOut, cutlass::epilogue::collective::EpilogueScheduleAuto>::CollectiveOp;

  using Built = typename cutlass::gemm::collective::CollectiveBuilder<
      Arch, OpClass, In, LayoutA*, kAlignIn, In, LayoutB*, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Mainloop = mircuda::block_scaled::RetypedMainloop<Built>;  // see AsInt in block_scaled.cuh

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using ScaleConfig = typename Mainloop::Sm1xxBlkScaledConfig;

  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  using ElementA = typename Mainloop::ElementA;
  using ElementB = typename Mainloop::ElementB;
  using ElementSF = typename Mainloop::ElementSF;
  using ElementD = typename Kernel::ElementD;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using LayoutSFA = typename Mainloop::InternalLayoutSFA;
  using LayoutSFB = typename Mainloop::InternalLayoutSFB;
};

// The typed per-problem arrays of the CUTLASS kernel (S = sets * groups entries each), in the workspace.
template <class Cfg>
struct Typed {
  typename Cfg::Shape3* shapes;
  typename Cfg::StrideA* stride_a;
  typename Cfg::StrideB* stride_b;
  typename Cfg::StrideD* stride_d;
  typename Cfg::LayoutSFA* layout_sfa;
  typename Cfg::LayoutSFB* layout_sfb;
};

// One thread per problem: its shape (rows, N, K), packed strides and the tiled scale layouts of its rows.
template <class Cfg>
__global__ void __launch_bounds__(kLayoutThreads) grouped_layouts(const int* rows_of, int problems, int n, int k,
                                                                   Typed<Cfg> t) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= problems) return;
  const int m = rows_of[i];
  const int rows = m > 0 ? m : 1;  // an empty problem has no tiles: its layouts are never used; keep them well-formed
  t.shapes[i] = typename Cfg::Shape3{m, n, k};
  t.stride_a[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideA{}, cute::make_shape(rows, k, 1));
  t.stride_b[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideB{}, cute::make_shape(n, k, 1));
  t.stride_d[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideD{}, cute::make_shape(rows, n, 1));
  t.layout_sfa[i] = Cfg::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(rows, n, k, 1));
  t.layout_sfb[i] = Cfg::ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(rows, n, k, 1));
}

template <class Cfg>
class Runner final : public mircuda::Runner {
 public:
  using Gemm = typename Cfg::Gemm;
  using Kernel = typename Cfg::Kernel;

  Runner(int n, int k, int capacity, int groups, int bank_size, int sets, cutlass::KernelHardwareInfo hw)
      : n_(n), k_(k), capacity_(capacity), groups_(groups), bank_size_(bank_size), sets_(sets), hw_(hw),
        geometry_(slot_geometry(capacity, groups, k)) {}

  // The workspace: CUTLASS's (tensor maps per SM), then the tables, then the tiled activation scales.
  int layout() {
    const size_t entries = static_cast<size_t>(sets_) * groups_;
    size_t at = round(Gemm::get_workspace_size(arguments(placeholder())));
    auto place = [&](size_t bytes) {
      const size_t here = at;
      at = round(at + bytes);
      return here;
    };
    offsets_.rows = place(entries * sizeof(int));
    offsets_.a = place(entries * sizeof(void*));
    offsets_.b = place(entries * sizeof(void*));
    offsets_.sfa = place(entries * sizeof(void*));
    offsets_.sfb = place(entries * sizeof(void*));
    offsets_.d = place(entries * sizeof(void*));
    offsets_.alpha = place(entries * sizeof(void*));
    offsets_.slot_begin = place(static_cast<size_t>(groups_) * sizeof(int));
    offsets_.slot_end = place(static_cast<size_t>(groups_) * sizeof(int));
    offsets_.shapes = place(entries * sizeof(typename Cfg::Shape3));
    offsets_.stride_a = place(entries * sizeof(typename Cfg::StrideA));
    offsets_.stride_b = place(entries * sizeof(typename Cfg::StrideB));
    offsets_.stride_d = place(entries * sizeof(typename Cfg::StrideD));
    offsets_.layout_sfa = place(entries * sizeof(typename Cfg::LayoutSFA));
    offsets_.layout_sfb = place(entries * sizeof(typename Cfg::LayoutSFB));
    offsets_.sfa_tiled = place(static_cast<size_t>(sets_) * geometry_.slot_rows * geometry_.row_bytes);
    total_ = at;
    return Gemm::can_implement(arguments(placeholder())) == cutlass::Status::kSuccess
               ? MIRCUDA_CUTLASS_OK
               : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override { return total_; }

  int set_workspace(void* workspace, size_t) override {
    auto* base = static_cast<uint8_t*>(workspace);
    plain_ = mircuda_cutlass_grouped_tables{
        reinterpret_cast<int*>(base + offsets_.rows),
        reinterpret_cast<const void**>(base + offsets_.a),
        reinterpret_cast<const void**>(base + offsets_.b),
        reinterpret_cast<const void**>(base + offsets_.sfa),
        reinterpret_cast<const void**>(base + offsets_.sfb),
        reinterpret_cast<void**>(base + offsets_.d),
        reinterpret_cast<const float**>(base + offsets_.alpha),
        reinterpret_cast<int*>(base + offsets_.slot_begin),
        reinterpret_cast<int*>(base + offsets_.slot_end),
        base + offsets_.sfa_tiled};
    typed_ = Typed<Cfg>{reinterpret_cast<typename Cfg::Shape3*>(base + offsets_.shapes),
                        reinterpret_cast<typename Cfg::StrideA*>(base + offsets_.stride_a),
                        reinterpret_cast<typename Cfg::StrideB*>(base + offsets_.stride_b),
                        reinterpret_cast<typename Cfg::StrideD*>(base + offsets_.stride_d),
                        reinterpret_cast<typename Cfg::LayoutSFA*>(base + offsets_.layout_sfa),
                        reinterpret_cast<typename Cfg::LayoutSFB*>(base + offsets_.layout_sfb)};
    workspace_ = workspace;
    return Gemm::can_implement(arguments(tables())) == cutlass::Status::kSuccess ? MIRCUDA_CUTLASS_OK
                                                                                 : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  int execute_grouped(cudaStream_t stream, const int* row_counts, const int* offsets, const int* matrix_indices,
                      const mircuda_cutlass_grouped_operands* operands, int* error_flag) override {
    SetupParams p{};
    p.row_counts = row_counts;
    p.offsets = offsets;
    p.matrix_indices = matrix_indices;
    p.error_flag = error_flag;
    p.groups = groups_;
    p.sets = sets_;
    p.n = n_;
    p.k = k_;
    p.capacity = capacity_;
    p.bank_size = bank_size_;
    p.slot_rows = geometry_.slot_rows;
    p.row_bytes = geometry_.row_bytes;
    for (int s = 0; s < sets_; ++s) p.operands[s] = operands[s];
    int status = launch_setup(stream, p, plain_);
    if (status != MIRCUDA_CUTLASS_OK) return status;
    const int problems = sets_ * groups_;
    grouped_layouts<Cfg><<<(problems + kLayoutThreads - 1) / kLayoutThreads, kLayoutThreads, 0, stream>>>(
        plain_.rows, problems, n_, k_, typed_);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
      set_cuda_error(error);
      return MIRCUDA_CUTLASS_CUDA_ERROR;
    }
    // initialize() builds the kernel parameters (host side; the tables' addresses never change); nothing is
    // allocated or synchronized.
    cutlass::Status done = gemm_.initialize(arguments(tables()), workspace_, stream);
    if (done != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(done));
    done = gemm_.run(stream);
    if (done != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(done));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  struct Offsets {
    size_t rows, a, b, sfa, sfb, d, alpha, slot_begin, slot_end, shapes, stride_a, stride_b, stride_d, layout_sfa,
        layout_sfb, sfa_tiled;
  };
  // What the CUTLASS arguments point at.
  struct Pointers {
    typename Cfg::Shape3* shapes;
    const void* const* a;
    const void* const* b;
    const void* const* sfa;
    const void* const* sfb;
    void* const* d;
    const float* const* alpha;
    Typed<Cfg> typed;
  };

  static size_t round(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // Addresses that are never dereferenced (can-implement and the workspace size read no device memory).
  static Pointers placeholder() {
    auto* p = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
    Typed<Cfg> typed{reinterpret_cast<typename Cfg::Shape3*>(p), reinterpret_cast<typename Cfg::StrideA*>(p),
                     reinterpret_cast<typename Cfg::StrideB*>(p), reinterpret_cast<typename Cfg::StrideD*>(p),
                     reinterpret_cast<typename Cfg::LayoutSFA*>(p), reinterpret_cast<typename Cfg::LayoutSFB*>(p)};
    auto* q = reinterpret_cast<void* const*>(p);
    return {typed.shapes, q, q, q, q, q, reinterpret_cast<const float* const*>(p), typed};
  }

  Pointers tables() const {
    return {typed_.shapes, plain_.a, plain_.b, plain_.sfa, plain_.sfb, plain_.d, plain_.alpha, typed_};
  }

  typename Gemm::Arguments arguments(const Pointers& t) const {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {sets_ * groups_, t.shapes, nullptr};  // device shapes only
    // The setup writes plain addresses; the kernel reads them as its element pointers (same representation).
    args.mainloop.ptr_A = reinterpret_cast<const typename Cfg::ElementA**>(const_cast<const void**>(t.a));
    args.mainloop.dA = t.typed.stride_a;
    args.mainloop.ptr_B = reinterpret_cast<const typename Cfg::ElementB**>(const_cast<const void**>(t.b));
    args.mainloop.dB = t.typed.stride_b;
    args.mainloop.ptr_SFA = reinterpret_cast<const typename Cfg::ElementSF**>(const_cast<const void**>(t.sfa));
    args.mainloop.layout_SFA = t.typed.layout_sfa;
    args.mainloop.ptr_SFB = reinterpret_cast<const typename Cfg::ElementSF**>(const_cast<const void**>(t.sfb));
    args.mainloop.layout_SFB = t.typed.layout_sfb;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = nullptr;
    args.epilogue.ptr_D = reinterpret_cast<typename Cfg::ElementD**>(const_cast<void**>(t.d));
    args.epilogue.dD = t.typed.stride_d;
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
  SlotGeometry geometry_;
  Offsets offsets_{};
  size_t total_ = 0;
  mircuda_cutlass_grouped_tables plain_{};
  Typed<Cfg> typed_{};
  void* workspace_ = nullptr;
  Gemm gemm_;
};

template <class Cfg>
int create(int n, int k, int capacity, int groups, int bank_size, int sets, mircuda::Runner** out) {
  // 32-bit row indices on the device (slot rows, offsets) and 64-bit byte offsets.
  const SlotGeometry geometry = slot_geometry(capacity, groups, k);
  if (geometry.slot_rows >= (1ll << 31) || static_cast<long long>(sets) * groups >= (1ll << 31)) {
    return MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) {
    set_cuda_error(error);
    return MIRCUDA_CUTLASS_CUDA_ERROR;
  }
  auto hw = cutlass::KernelHardwareInfo::make_kernel_hardware_info<typename Cfg::Kernel>(device);
  // A soft failure of the cluster-occupancy query (max_active_clusters = 0) must not surface later.
  (void)cudaGetLastError();
  auto* runner = new Runner<Cfg>(n, k, capacity, groups, bank_size, sets, hw);
  const int status = runner->layout();
  if (status != MIRCUDA_CUTLASS_OK) {
    delete runner;
    return status;
  }
  *out = runner;
  return MIRCUDA_CUTLASS_OK;
}

}  // namespace grouped
}  // namespace mircuda
