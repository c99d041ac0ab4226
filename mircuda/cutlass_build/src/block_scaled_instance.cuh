// One block-scaled NVFP4 kernel (NVFP4 x NVFP4 -> BF16, UE4M3 scales per 16 in the tiled layout): a
// generated TU defines the family and the SASS targets, then includes this file, which defines the
// kernel and registers it with the library at load time.
//
//   MIRCUDA_ARCH_LIST  the SASS targets of this TU as 10 * major + minor: 120
//   one of MIRCUDA_SM120_NVFP4_COOP, MIRCUDA_SM120_NVFP4_PINGPONG
#pragma once

#include "block_scaled.cuh"

namespace {

using namespace cute;
namespace bs = mircuda::block_scaled;

#if defined(MIRCUDA_SM120_NVFP4_COOP)
// Large M: 128x128x128 tiles, two consumer warp groups (4x2 warps of mma.sync) on one tile (CUTLASS
// example 79a's configuration).
using KernelConfig = bs::Config<Shape<_128, _128, _128>, cutlass::gemm::KernelTmaWarpSpecializedNvf4Sm120>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM120_NVFP4_COOPERATIVE, kTile[3] = {128, 128, 128};
#define MIRCUDA_NAME "sm120_nvfp4_coop_128x128x128_e2m1_bf16"
#elif defined(MIRCUDA_SM120_NVFP4_PINGPONG)
// Medium M: 128x128x128 tiles, two consumer warp groups (2x2 warps each) alternating tiles, one's
// epilogue under the other's MMAs (CUTLASS example 79b's schedule).
using KernelConfig = bs::Config<Shape<_128, _128, _128>, cutlass::gemm::KernelTmaWarpSpecializedPingpongNvf4Sm120>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM120_NVFP4_PINGPONG, kTile[3] = {128, 128, 128};
#define MIRCUDA_NAME "sm120_nvfp4_pingpong_128x128x128_e2m1_bf16"
#else
#error "no block-scaled NVFP4 kernel family defined"
#endif

// TMA needs 16-byte rows: K E2M1 elements (K % 32) and N BF16 outputs (N % 8); M is free. Partial last
// tiles of M, N and K are read as zeros by TMA (the tiled scale layout is padded to whole atoms).
constexpr int kMultiple[3] = {1, 8, 32};
constexpr int kArchs[] = {MIRCUDA_ARCH_LIST};

mircuda_cutlass_kernel_info make_info() {
  mircuda_cutlass_kernel_info info{};
  info.name = MIRCUDA_NAME;
  info.family = kFamily;
  info.input = MIRCUDA_CUTLASS_E2M1;
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
  info.kind = MIRCUDA_CUTLASS_KIND_BLOCK_SCALED;
  info.m_multiple = kMultiple[0];
  info.n_multiple = kMultiple[1];
  info.k_multiple = kMultiple[2];
  info.scale_type = MIRCUDA_CUTLASS_UE4M3;
  info.scale_m = 1;
  info.scale_n = 1;
  info.scale_k = bs::kScaleVector;
  info.sfa_major = MIRCUDA_CUTLASS_SF_TILED;
  info.sfb_major = MIRCUDA_CUTLASS_SF_TILED;
  return info;
}

const bool kRegistered = mircuda::register_kernel({make_info(), &bs::create<KernelConfig>});

}  // namespace
