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
// Every execute first runs two small kernels of this file on the stream (so a captured graph follows
// routing rewritten on the device between replays; the host reads nothing):
//   grouped_setup (one block): checks each group (a matrix index outside [0, bank_size) ORs 1 into the
//     error flag; a negative count or offset, or offset + count over capacity ORs 2) and treats an invalid
//     group as empty; assigns each group a slot of ceil(m/128)*128 rows in the scale workspace (an
//     exclusive prefix sum); writes the CUTLASS kernel's per-group problem shapes (m, N, K), pointers,
//     strides, scale-factor layouts and alpha pointers (alpha_s + e) for all sets * G groups.
//   grouped_repack_sfa (one block per 128-row chunk of the slots, per set): copies each group's linear
//     activation scales into its slot in the tiled layout (the layout the kernel's TMA reads; rows past
//     m and scales past K/16 are zero).
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

namespace mircuda {
namespace grouped {

using namespace cute;

constexpr int kSetupThreads = 1024;   // grouped_setup: one block walks the groups 1024 at a time
constexpr int kRepackThreads = 256;
constexpr int kSlotRows = 128;        // the tiled layout's atom rows: each group's scales start at a multiple

// The 64-bit slot geometry of a plan (rows of one set's scale workspace, bytes of one scale row).
struct SlotGeometry {
  long long slot_rows;
  long long row_bytes;  // ceil(K/64) * 4: K/16 scales padded to whole 4-scale atoms
};

inline SlotGeometry slot_geometry(int capacity, int groups, int k) {
  const long long chunks = (static_cast<long long>(capacity) + kSlotRows - 1) / kSlotRows;
  const long long extra = groups < capacity ? groups : capacity;
  return {(chunks + extra) * kSlotRows, (static_cast<long long>(k) + 63) / 64 * 4};
}

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

// The device arrays of a plan, all inside the caller's workspace (S = sets * groups entries each).
template <class Cfg>
struct Tables {
  typename Cfg::Shape3* shapes;
  const typename Cfg::ElementA** a;
  const typename Cfg::ElementB** b;
  const typename Cfg::ElementSF** sfa;
  const typename Cfg::ElementSF** sfb;
  typename Cfg::ElementD** d;
  const float** alpha;
  typename Cfg::StrideA* stride_a;
  typename Cfg::StrideB* stride_b;
  typename Cfg::StrideD* stride_d;
  typename Cfg::LayoutSFA* layout_sfa;
  typename Cfg::LayoutSFB* layout_sfb;
  int* slot_begin;  // [groups] first row of the group's slot (an exclusive prefix sum, skipped groups included)
  int* slot_end;    // [groups] slot_begin + ceil(m/128)*128, or slot_begin when the group is skipped
  uint8_t* sfa_tiled;  // [sets][slot_rows][row_bytes]
};

struct SetupParams {
  const int* row_counts;
  const int* offsets;
  const int* matrix_indices;
  int* error_flag;
  int groups, sets, n, k, capacity, bank_size;
  long long slot_rows, row_bytes;
  mircuda_cutlass_grouped_operands operands[2];
};

// Inclusive sum of v over the block (blockDim.x a multiple of 32, at most 1024); scratch: 32 entries.
__device__ inline long long block_inclusive_sum(long long v, long long* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int d = 1; d < 32; d <<= 1) {
    const long long u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    long long w = lane < warps ? scratch[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const long long u = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += u;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  __syncthreads();  // scratch is reused by the next call
  return v;
}

template <class Cfg>
__global__ void __launch_bounds__(kSetupThreads) grouped_setup(SetupParams p, Tables<Cfg> t) {
  __shared__ long long scratch[32];
  __shared__ long long carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int G = p.groups;
  for (int base = 0; base < G; base += blockDim.x) {
    const int g = base + static_cast<int>(threadIdx.x);
    int m = 0, offset = 0, e = 0, error = 0;
    if (g < G) {
      m = p.row_counts[g];
      offset = p.offsets[g];
      e = p.matrix_indices[g];
      if (e < 0 || e >= p.bank_size) error |= 1;
      if (m < 0 || offset < 0 || static_cast<long long>(offset) + m > p.capacity) error |= 2;
      if (error) m = 0;
    }
    const long long padded = (static_cast<long long>(m) + kSlotRows - 1) / kSlotRows * kSlotRows;
    const long long end = carry + block_inclusive_sum(padded, scratch);
    const long long begin = end - padded;
    if (g < G) {
      if (end > p.slot_rows) {  // only overlapping row ranges get here (see the top of this file)
        error |= 2;
        m = 0;
      }
      if (error) atomicOr(p.error_flag, error);
      const bool live = m > 0;
      // Skipped groups keep begin (the prefix stays monotone for grouped_repack_sfa's search), never past
      // slot_rows.
      const long long b = begin < p.slot_rows ? begin : p.slot_rows;
      t.slot_begin[g] = static_cast<int>(b);
      t.slot_end[g] = static_cast<int>(live ? end : b);
      if (error) {
        offset = 0;
        e = 0;
      }
      const int k = p.k, n = p.n;
      const long long a_row = k / 2, b_matrix = static_cast<long long>(n) * (k / 2);
      const long long sfb_matrix = (static_cast<long long>(n) + 127) / 128 * 128 * p.row_bytes;
      for (int s = 0; s < p.sets; ++s) {
        const mircuda_cutlass_grouped_operands& op = p.operands[s];
        const int i = s * G + g;
        t.shapes[i] = typename Cfg::Shape3{m, n, k};
        t.a[i] = reinterpret_cast<const typename Cfg::ElementA*>(static_cast<const uint8_t*>(op.a) + offset * a_row);
        t.b[i] = reinterpret_cast<const typename Cfg::ElementB*>(static_cast<const uint8_t*>(op.b_bank) + e * b_matrix);
        t.sfa[i] = reinterpret_cast<const typename Cfg::ElementSF*>(
            t.sfa_tiled + (s * p.slot_rows + (live ? begin : 0)) * p.row_bytes);
        t.sfb[i] = reinterpret_cast<const typename Cfg::ElementSF*>(
            static_cast<const uint8_t*>(op.sfb_bank_tiled) + e * sfb_matrix);
        t.d[i] = reinterpret_cast<typename Cfg::ElementD*>(static_cast<uint8_t*>(op.d) +
                                                           static_cast<long long>(offset) * n * 2);
        t.alpha[i] = op.alpha_per_matrix + e;
        const int rows = m > 0 ? m : 1;  // an empty group's layouts are never used; keep them well-formed
        t.stride_a[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideA{}, cute::make_shape(rows, k, 1));
        t.stride_b[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideB{}, cute::make_shape(n, k, 1));
        t.stride_d[i] = cutlass::make_cute_packed_stride(typename Cfg::StrideD{}, cute::make_shape(rows, n, 1));
        t.layout_sfa[i] = Cfg::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(rows, n, k, 1));
        t.layout_sfb[i] = Cfg::ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(rows, n, k, 1));
      }
    }
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) carry = end;
    __syncthreads();
  }
}

// Block (x, set): the x-th 128-row chunk of the set's slots. Finds the group whose slot holds it (the last
// group with slot_begin <= row: slot_begin is non-decreasing), then writes the chunk's 128 rows x row_bytes
// tiled bytes: 512-byte atoms of 128 rows x 4 scales, K-fastest; in an atom row 32 r1 + r0, scale j at byte
// 16 r0 + 4 r1 + j (cutlass/detail/sm100_blockscaled_layout.hpp; mircuda's "tiled" layout).
template <class Cfg>
__global__ void __launch_bounds__(kRepackThreads) grouped_repack_sfa(SetupParams p, Tables<Cfg> t) {
  const long long row0 = static_cast<long long>(blockIdx.x) * kSlotRows;
  int lo = 0, hi = p.groups;  // first group with slot_begin > row0
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (t.slot_begin[mid] <= row0) lo = mid + 1; else hi = mid;
  }
  const int g = lo - 1;
  if (g < 0 || row0 >= t.slot_end[g]) return;
  const int s = blockIdx.y;
  const int m = p.row_counts[g];  // valid: the group has a slot
  const long long first = static_cast<long long>(p.offsets[g]) + (row0 - t.slot_begin[g]);  // source row of row0
  const int rows = static_cast<int>(m - (row0 - t.slot_begin[g]));  // rows of the group from row0 on
  const int scales = p.k / 16;
  const uint8_t* src = static_cast<const uint8_t*>(p.operands[s].sfa_linear);
  uint32_t* dst = reinterpret_cast<uint32_t*>(t.sfa_tiled + (s * p.slot_rows + row0) * p.row_bytes);
  const int words = static_cast<int>(kSlotRows * p.row_bytes / 4);  // 4 scales of one row per word
  for (int w = threadIdx.x; w < words; w += blockDim.x) {
    const int atom = w / 128, within = w % 128;  // 128 words per 512-byte atom
    const int r0 = within / 4, r1 = within % 4;
    const int r = 32 * r1 + r0, col = 4 * atom;
    uint32_t word = 0;
    if (r < rows) {
      const uint8_t* row = src + (first + r) * scales;
      for (int j = 0; j < 4; ++j) {
        if (col + j < scales) word |= static_cast<uint32_t>(row[col + j]) << (8 * j);
      }
    }
    dst[w] = word;
  }
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
    size_t at = round(cutlass_bytes_ = Gemm::get_workspace_size(arguments(placeholder_tables())));
    auto place = [&](size_t bytes) {
      const size_t here = at;
      at = round(at + bytes);
      return here;
    };
    offsets_.shapes = place(entries * sizeof(typename Cfg::Shape3));
    offsets_.a = place(entries * sizeof(void*));
    offsets_.b = place(entries * sizeof(void*));
    offsets_.sfa = place(entries * sizeof(void*));
    offsets_.sfb = place(entries * sizeof(void*));
    offsets_.d = place(entries * sizeof(void*));
    offsets_.alpha = place(entries * sizeof(void*));
    offsets_.stride_a = place(entries * sizeof(typename Cfg::StrideA));
    offsets_.stride_b = place(entries * sizeof(typename Cfg::StrideB));
    offsets_.stride_d = place(entries * sizeof(typename Cfg::StrideD));
    offsets_.layout_sfa = place(entries * sizeof(typename Cfg::LayoutSFA));
    offsets_.layout_sfb = place(entries * sizeof(typename Cfg::LayoutSFB));
    offsets_.slot_begin = place(static_cast<size_t>(groups_) * sizeof(int));
    offsets_.slot_end = place(static_cast<size_t>(groups_) * sizeof(int));
    offsets_.sfa_tiled = place(static_cast<size_t>(sets_) * geometry_.slot_rows * geometry_.row_bytes);
    total_ = at;
    return Gemm::can_implement(arguments(placeholder_tables())) == cutlass::Status::kSuccess
               ? MIRCUDA_CUTLASS_OK
               : MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE;
  }

  size_t workspace_bytes() const override { return total_; }

  int set_workspace(void* workspace, size_t) override {
    auto* base = static_cast<uint8_t*>(workspace);
    tables_ = Tables<Cfg>{
        reinterpret_cast<typename Cfg::Shape3*>(base + offsets_.shapes),
        reinterpret_cast<const typename Cfg::ElementA**>(base + offsets_.a),
        reinterpret_cast<const typename Cfg::ElementB**>(base + offsets_.b),
        reinterpret_cast<const typename Cfg::ElementSF**>(base + offsets_.sfa),
        reinterpret_cast<const typename Cfg::ElementSF**>(base + offsets_.sfb),
        reinterpret_cast<typename Cfg::ElementD**>(base + offsets_.d),
        reinterpret_cast<const float**>(base + offsets_.alpha),
        reinterpret_cast<typename Cfg::StrideA*>(base + offsets_.stride_a),
        reinterpret_cast<typename Cfg::StrideB*>(base + offsets_.stride_b),
        reinterpret_cast<typename Cfg::StrideD*>(base + offsets_.stride_d),
        reinterpret_cast<typename Cfg::LayoutSFA*>(base + offsets_.layout_sfa),
        reinterpret_cast<typename Cfg::LayoutSFB*>(base + offsets_.layout_sfb),
        reinterpret_cast<int*>(base + offsets_.slot_begin),
        reinterpret_cast<int*>(base + offsets_.slot_end),
        base + offsets_.sfa_tiled};
    cutlass_workspace_ = workspace;
    return Gemm::can_implement(arguments(tables_)) == cutlass::Status::kSuccess ? MIRCUDA_CUTLASS_OK
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
    grouped_setup<Cfg><<<1, kSetupThreads, 0, stream>>>(p, tables_);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
      set_cuda_error(error);
      return MIRCUDA_CUTLASS_CUDA_ERROR;
    }
    const dim3 chunks(static_cast<unsigned>(geometry_.slot_rows / kSlotRows), static_cast<unsigned>(sets_));
    grouped_repack_sfa<Cfg><<<chunks, kRepackThreads, 0, stream>>>(p, tables_);
    error = cudaGetLastError();
    if (error != cudaSuccess) {
      set_cuda_error(error);
      return MIRCUDA_CUTLASS_CUDA_ERROR;
    }
    // initialize() builds the kernel parameters (host side; the tables' addresses never change); nothing is
    // allocated or synchronized.
    cutlass::Status status = gemm_.initialize(arguments(tables_), cutlass_workspace_, stream);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    status = gemm_.run(stream);
    if (status != cutlass::Status::kSuccess) return status_from_cutlass(static_cast<int>(status));
    return MIRCUDA_CUTLASS_OK;
  }

 private:
  struct Offsets {
    size_t shapes, a, b, sfa, sfb, d, alpha, stride_a, stride_b, stride_d, layout_sfa, layout_sfb, slot_begin,
        slot_end, sfa_tiled;
  };

  static size_t round(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // Addresses that are never dereferenced (can-implement and the workspace size read no device memory).
  static Tables<Cfg> placeholder_tables() {
    Tables<Cfg> t{};
    auto* p = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
    t.shapes = reinterpret_cast<typename Cfg::Shape3*>(p);
    t.a = reinterpret_cast<const typename Cfg::ElementA**>(p);
    t.b = reinterpret_cast<const typename Cfg::ElementB**>(p);
    t.sfa = reinterpret_cast<const typename Cfg::ElementSF**>(p);
    t.sfb = reinterpret_cast<const typename Cfg::ElementSF**>(p);
    t.d = reinterpret_cast<typename Cfg::ElementD**>(p);
    t.alpha = reinterpret_cast<const float**>(p);
    t.stride_a = reinterpret_cast<typename Cfg::StrideA*>(p);
    t.stride_b = reinterpret_cast<typename Cfg::StrideB*>(p);
    t.stride_d = reinterpret_cast<typename Cfg::StrideD*>(p);
    t.layout_sfa = reinterpret_cast<typename Cfg::LayoutSFA*>(p);
    t.layout_sfb = reinterpret_cast<typename Cfg::LayoutSFB*>(p);
    return t;
  }

  typename Gemm::Arguments arguments(const Tables<Cfg>& t) const {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {sets_ * groups_, t.shapes, nullptr};  // device shapes only
    args.mainloop.ptr_A = t.a;
    args.mainloop.dA = t.stride_a;
    args.mainloop.ptr_B = t.b;
    args.mainloop.dB = t.stride_b;
    args.mainloop.ptr_SFA = t.sfa;
    args.mainloop.layout_SFA = t.layout_sfa;
    args.mainloop.ptr_SFB = t.sfb;
    args.mainloop.layout_SFB = t.layout_sfb;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = nullptr;
    args.epilogue.ptr_D = t.d;
    args.epilogue.dD = t.stride_d;
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.f;
    fusion.beta = 0.f;
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    fusion.alpha_ptr_array = t.alpha;  // one FP32 per group, read when the kernel runs
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
  size_t cutlass_bytes_ = 0, total_ = 0;
  Tables<Cfg> tables_{};
  void* cutlass_workspace_ = nullptr;
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
