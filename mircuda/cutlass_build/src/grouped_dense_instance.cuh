// One grouped BF16 kernel for SM90 (BF16 x BF16 -> BF16 over device-routed groups; see grouped_dense.cuh): a
// generated TU defines the family and the SASS targets, then includes this file, which defines the kernel and
// registers it with the library at load time.
//
//   MIRCUDA_ARCH_LIST  the SASS targets of this TU as 10 * major + minor: 90
//   one of MIRCUDA_SM90_GROUPED_COOP, MIRCUDA_SM90_GROUPED_PINGPONG
#pragma once

#include "grouped_dense.cuh"

namespace {

// No `using namespace cute` here (see grouped_block_scaled_instance.cuh: the host stub names KernelConfig).
namespace gd = mircuda::grouped_dense;

// No clusters (1x1): a group's row count is arbitrary, so clusters along M would idle at every group's last
// tiles, and along N they would round N = 768 (fine-grained experts) up to whole cluster pairs of 256-column
// tiles; TMA multicast is given up for that.
#if defined(MIRCUDA_SM90_GROUPED_COOP)
// Many rows per group: 128x256x64 tiles, two consumer warp groups (64 rows each) on one tile.
using KernelConfig = gd::Config<cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                                cute::Shape<cute::_128, cute::_256, cute::_64>, cute::Shape<cute::_1, cute::_1, cute::_1>>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_GROUPED_COOPERATIVE;
constexpr int kTile[3] = {128, 256, 64};
#define MIRCUDA_NAME "sm90_grouped_coop_128x256x64_c1x1_bf16_bf16"
#elif defined(MIRCUDA_SM90_GROUPED_PINGPONG)
// Fewer rows per group: 128x128x64 tiles (twice the tiles to spread over the SMs), two consumer warp groups
// alternating tiles (one's epilogue under the other's MMAs).
using KernelConfig = gd::Config<cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_1, cute::_1, cute::_1>>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_GROUPED_PINGPONG;
constexpr int kTile[3] = {128, 128, 64};
#define MIRCUDA_NAME "sm90_grouped_pingpong_128x128x64_c1x1_bf16_bf16"
#else
#error "no grouped BF16 kernel family defined"
#endif

// TMA needs 16-byte rows and 16-byte aligned group bases: K and N multiples of 8 BF16 elements; a group's row
// count is free (partial tiles are read as zeros and never stored).
constexpr int kMultiple[3] = {1, 8, 8};
constexpr int kArchs[] = {MIRCUDA_ARCH_LIST};

mircuda_cutlass_kernel_info make_info() {
  mircuda_cutlass_kernel_info info{};
  info.name = MIRCUDA_NAME;
  info.family = kFamily;
  info.input = MIRCUDA_CUTLASS_BF16;
  info.output = MIRCUDA_CUTLASS_BF16;
  info.tile_m = kTile[0];
  info.tile_n = kTile[1];
  info.tile_k = kTile[2];
  info.cluster_m = 1;
  info.cluster_n = 1;
  info.stages = 0;  // chosen by the collective builder
  info.alignment_bytes = 16;
  info.split_k = 0;
  info.arch_count = static_cast<int>(sizeof(kArchs) / sizeof(kArchs[0]));
  for (int i = 0; i < info.arch_count && i < 4; ++i) info.archs[i] = kArchs[i];
  info.kind = MIRCUDA_CUTLASS_KIND_GROUPED_DENSE;
  info.m_multiple = kMultiple[0];
  info.n_multiple = kMultiple[1];
  info.k_multiple = kMultiple[2];
  info.scale_type = 0;
  info.sfa_major = MIRCUDA_CUTLASS_NO_SCALES;
  info.sfb_major = MIRCUDA_CUTLASS_NO_SCALES;
  return info;
}

const bool kRegistered = mircuda::register_kernel({make_info(), nullptr, &gd::create<KernelConfig>});

}  // namespace
