// One grouped block-scaled NVFP4 kernel (NVFP4 x NVFP4 -> BF16 over device-routed groups; see
// grouped_block_scaled.cuh): a generated TU defines the family and the SASS targets, then includes this
// file, which defines the kernel and registers it with the library at load time.
//
//   MIRCUDA_ARCH_LIST  the SASS targets of this TU as 10 * major + minor: 120
//   one of MIRCUDA_SM120_NVFP4_GROUPED_COOP, MIRCUDA_SM120_NVFP4_GROUPED_PINGPONG
#pragma once

#include "grouped_block_scaled.cuh"

namespace {

// No `using namespace cute` here: the host stub names KernelConfig through this anonymous namespace, which
// cute's own anonymous namespace would make ambiguous (nvcc 13.0 + gcc 12).
namespace gs = mircuda::grouped;

#if defined(MIRCUDA_SM120_NVFP4_GROUPED_COOP)
// Large groups: 128x128x128 tiles, two consumer warp groups (4x2 warps of mma.sync) on one tile (the
// default schedule of CUTLASS example 79d).
using KernelConfig = gs::Config<cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM120_NVFP4_GROUPED_COOPERATIVE;
#define MIRCUDA_NAME "sm120_nvfp4_grouped_coop_128x128x128_e2m1_bf16"
#elif defined(MIRCUDA_SM120_NVFP4_GROUPED_PINGPONG)
// Many tiles: two consumer warp groups (2x2 warps each) alternating tiles, one's epilogue under the other's
// MMAs (example 79d's ping-pong variant).
using KernelConfig = gs::Config<cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM120_NVFP4_GROUPED_PINGPONG;
#define MIRCUDA_NAME "sm120_nvfp4_grouped_pingpong_128x128x128_e2m1_bf16"
#else
#error "no grouped block-scaled NVFP4 kernel family defined"
#endif

// TMA needs 16-byte rows and 16-byte aligned group bases: K E2M1 elements (K % 32) and N BF16 outputs
// (N % 8); a group's row count is free (partial tiles are read as zeros and never stored).
constexpr int kMultiple[3] = {1, 8, 32};
constexpr int kArchs[] = {MIRCUDA_ARCH_LIST};

mircuda_cutlass_kernel_info make_info() {
  mircuda_cutlass_kernel_info info{};
  info.name = MIRCUDA_NAME;
  info.family = kFamily;
  info.input = MIRCUDA_CUTLASS_E2M1;
  info.output = MIRCUDA_CUTLASS_BF16;
  info.tile_m = 128;
  info.tile_n = 128;
  info.tile_k = 128;
  info.cluster_m = 1;
  info.cluster_n = 1;
  info.stages = 0;  // chosen by the collective builder
  info.alignment_bytes = 16;
  info.split_k = 0;
  info.arch_count = static_cast<int>(sizeof(kArchs) / sizeof(kArchs[0]));
  for (int i = 0; i < info.arch_count && i < 4; ++i) info.archs[i] = kArchs[i];
  info.kind = MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED;
  info.m_multiple = kMultiple[0];
  info.n_multiple = kMultiple[1];
  info.k_multiple = kMultiple[2];
  info.scale_type = MIRCUDA_CUTLASS_UE4M3;
  info.scale_m = 1;
  info.scale_n = 1;
  info.scale_k = mircuda::block_scaled::kScaleVector;
  info.sfa_major = MIRCUDA_CUTLASS_K_MAJOR;   // the caller's activation scales: linear [capacity, K/16]
  info.sfb_major = MIRCUDA_CUTLASS_SF_TILED;  // the bank's scales
  return info;
}

const bool kRegistered = mircuda::register_kernel({make_info(), nullptr, &gs::create<KernelConfig>});

}  // namespace
