// One blockwise-scaled FP8 kernel (E4M3 x E4M3 -> BF16, 1 x 128 / 128 x 128 FP32 scales): a generated
// TU defines the family and the SASS targets, then includes this file, which defines the kernel and
// registers it with the library at load time.
//
//   MIRCUDA_ARCH_LIST  the SASS targets of this TU as 10 * major + minor: 90 or 120
//   one of MIRCUDA_SM90_FP8_COOP, MIRCUDA_SM90_FP8_PINGPONG, MIRCUDA_SM120_FP8, or an experimental
//   MIRCUDA_SM90_FP8_EXP_* family (below; family MIRCUDA_CUTLASS_SM90_BLOCKWISE_EXPERIMENTAL, which no
//   plan chooses by itself: they are measured by name against the cooperative kernel)
#pragma once

#if defined(MIRCUDA_SM90_FP8_COOP) || defined(MIRCUDA_SM90_FP8_PINGPONG)
// Grid dependency control (cutlass/arch/grid_dependency_control.h), as sm90.cuh's dense kernels:
// the kernel waits (griddepcontrol.wait) before its warps touch global memory and lets the next kernel launch on
// its last tile, so the runner may launch it with programmatic dependent launch (set_pdl; BlockwiseFp8Plan does on
// cc 9.0). CUTLASS 4.2's cooperative kernel never waits in its MainloopAux warp (the scale loads), so the
// cooperative family's mainloop is wrapped to wait there (blockwise.cuh, AuxWaitsMainloop).
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#endif
#include "blockwise.cuh"

namespace {

using namespace cute;
namespace bw = mircuda::blockwise;

// An experimental family may register several names that differ only in the persistent scheduler's runtime
// arguments (its kEntries; the kernel code is shared): name, factory with bw::Schedule's swizzle (1, 2, 4, 8)
// and raster (0 heuristic, 1 along M, 2 along N) of the family's KernelConfig.
struct ExpEntry {
  const char* name;
  mircuda::Factory factory;
};
#define MIRCUDA_ENTRY(name, swizzle, raster) {name, &bw::create<KernelConfig, swizzle, raster>}

#if defined(MIRCUDA_SM90_FP8_COOP)
// Large M: 128x128x128 tiles (one 128-K scale block per k-tile), two consumer warp groups on one tile,
// A multicast to a 1x2 cluster (CUTLASS example 67's groupwise configuration), SFA read M-major by TMA from the
// runner's copy (bw::Sm90ScalesMnA, blockwise.cuh). ncu on the H200 (2026-12-03, M = 2048 on 4096x4096) found the
// K-major form (128 scattered 4-byte cp.async per k-tile) at 66 us against 55 for cuBLASLt's blockwise kernel of
// the same tile, cluster, block and registers; the M-major form, its copy included, raised the geometric mean over
// fp8_sm90_variants.py's 8 points from 0.849 to 0.895 of torch's rowwise _scaled_mm and from 0.906 to 0.956 of its
// blockwise one as an experimental family beside this kernel (fp8_sm90_sfa_m_major_experimental.json), and measured
// 0.915 and 0.980 as this kernel in the next run (fp8_sm90_sfa_m_major.json; all under benchmarks/results/).
using KernelConfig = bw::Config<cutlass::arch::Sm90, bw::Sm90ScalesMnA, Shape<_128, _128, _128>, Shape<_1, _2, _1>,
                                cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                                cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::gemm::PersistentScheduler>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_BLOCKWISE_COOPERATIVE, kTile[3] = {128, 128, 128}, kCluster[2] = {1, 2};
// TMA needs 16-byte rows: K E4M3 and N BF16 elements; partial last 128-blocks of K and N are read as
// zeros (TMA) and their scales predicated (CUTLASS's SM90 blockwise mainloop), so K, N need not be
// multiples of 128.
constexpr int kMultiple[3] = {1, 8, 16};
#define MIRCUDA_NAME "sm90_blockwise_coop_128x128x128_c1x2_e4m3_bf16"
#elif defined(MIRCUDA_SM90_FP8_PINGPONG)
// Medium M: 64x128x128 tiles, two consumer warp groups alternating tiles.
using KernelConfig = bw::Config<cutlass::arch::Sm90, bw::Sm90Scales, Shape<_64, _128, _128>, Shape<_1, _1, _1>,
                                cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
                                cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_BLOCKWISE_PINGPONG, kTile[3] = {64, 128, 128}, kCluster[2] = {1, 1};
constexpr int kMultiple[3] = {1, 8, 16};
#define MIRCUDA_NAME "sm90_blockwise_pingpong_64x128x128_e4m3_bf16"
#elif defined(MIRCUDA_SM90_FP8_EXP_C2X1) || defined(MIRCUDA_SM90_FP8_EXP_C1X1) || defined(MIRCUDA_SM90_FP8_EXP_SCHED) || \
    defined(MIRCUDA_SM90_FP8_EXP_EPI64) || defined(MIRCUDA_SM90_FP8_EXP_NOC) || defined(MIRCUDA_SM90_FP8_EXP_NOC_EPI64) || \
    defined(MIRCUDA_SM90_FP8_EXP_256X128)
// Experiments on the large-M cooperative kernel (issue 13's M >= 2048 goal): each family is the
// cooperative 128x128x128 kernel above with one thing changed, and may register several names that differ
// only in the persistent scheduler's runtime arguments (bw::Schedule; the kernel code is shared).
#define MIRCUDA_EXPERIMENTAL 1
#if defined(MIRCUDA_SM90_FP8_EXP_C2X1)
using ExpCluster = Shape<_2, _1, _1>;  // B (weights) multicast to 2 CTAs along M instead of A
#elif defined(MIRCUDA_SM90_FP8_EXP_C1X1)
using ExpCluster = Shape<_1, _1, _1>;  // no multicast
#else
using ExpCluster = Shape<_1, _2, _1>;
#endif
#if defined(MIRCUDA_SM90_FP8_EXP_EPI64) || defined(MIRCUDA_SM90_FP8_EXP_NOC_EPI64)
using ExpEpilogueTile = Shape<_128, _64>;  // 2 epilogue subtiles per tile instead of CUTLASS's 4 of 128x32
#else
using ExpEpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto;
#endif
#if defined(MIRCUDA_SM90_FP8_EXP_NOC) || defined(MIRCUDA_SM90_FP8_EXP_NOC_EPI64)
using ExpSource = void;  // no C: no smem for it (more mainloop stages), TMA store delayed; beta must be 0
#else
using ExpSource = cutlass::bfloat16_t;
#endif
#if defined(MIRCUDA_SM90_FP8_EXP_256X128)
// 128x128 per consumer warp group: two FP32 accumulators of 128 registers each. A register-pressure check, not in
// the build's families: nvcc 13.0 -Xptxas -v, 2026-12-02: 546 bytes of spill stores, 560 of spill loads (208-byte
// stack frame) under the consumers' 232 registers, so it is left out. 128x256 does not compile in CUTLASS 4.2: with 1x128 scales of A and two 128-column
// scale blocks of B per tile, fp8_accumulation.hpp's scale_core asserts "Accumulator and scaleB must have same shape".
using ExpTile = Shape<_256, _128, _128>;
#else
using ExpTile = Shape<_128, _128, _128>;
#endif
using KernelConfig = bw::Config<cutlass::arch::Sm90, bw::Sm90Scales, ExpTile, ExpCluster,
                                cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                                cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::gemm::PersistentScheduler,
                                ExpEpilogueTile, ExpSource>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_BLOCKWISE_EXPERIMENTAL;
constexpr int kTile[3] = {size<0>(ExpTile{}), size<1>(ExpTile{}), size<2>(ExpTile{})};
constexpr int kCluster[2] = {size<0>(ExpCluster{}), size<1>(ExpCluster{})};
constexpr int kMultiple[3] = {1, 8, 16};
constexpr int kStages = KernelConfig::Mainloop::DispatchPolicy::Stages;
#if defined(MIRCUDA_SM90_FP8_EXP_C2X1)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c2x1_e4m3_bf16", 4, 0),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c2x1_s8_e4m3_bf16", 8, 0)};
#elif defined(MIRCUDA_SM90_FP8_EXP_C1X1)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x1_e4m3_bf16", 4, 0),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x1_s8_e4m3_bf16", 8, 0)};
#elif defined(MIRCUDA_SM90_FP8_EXP_SCHED)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s1_e4m3_bf16", 1, 0),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s2_e4m3_bf16", 2, 0),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s8_e4m3_bf16", 8, 0),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s4_alongm_e4m3_bf16", 4, 1),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s4_alongn_e4m3_bf16", 4, 2),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s8_alongm_e4m3_bf16", 8, 1),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_s8_alongn_e4m3_bf16", 8, 2)};
#elif defined(MIRCUDA_SM90_FP8_EXP_EPI64)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_epi64_e4m3_bf16", 4, 0)};
#elif defined(MIRCUDA_SM90_FP8_EXP_NOC)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_noc_e4m3_bf16", 4, 0),
                                 MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_noc_s8_e4m3_bf16", 8, 0)};
#elif defined(MIRCUDA_SM90_FP8_EXP_NOC_EPI64)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_128x128x128_c1x2_noc_epi64_e4m3_bf16", 4, 0)};
#else
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_coop_256x128x128_c1x2_e4m3_bf16", 4, 0)};
#endif
#elif defined(MIRCUDA_SM90_FP8_EXP_PINGPONG_SFAMN)
// Experiment (issue 13, middle M): the ping-pong 64x128x128 kernel above with SFA read M-major by TMA from the
// runner's copy, as the cooperative kernel does since 2026-12-03 (64 scales per k-tile: one TMA copy instead of 64
// scattered cp.async). Measured on the H200 on 2026-12-03 at M = 32..512 on the four shapes: 0.85-0.96x the K-major
// kernel's speed, 2.2-4.1 us more at every point (benchmarks/results/fp8_pingpong_sfamn.json); not adopted.
#define MIRCUDA_EXPERIMENTAL 1
using KernelConfig = bw::Config<cutlass::arch::Sm90, bw::Sm90ScalesMnA, Shape<_64, _128, _128>, Shape<_1, _1, _1>,
                                cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
                                cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_BLOCKWISE_EXPERIMENTAL, kTile[3] = {64, 128, 128}, kCluster[2] = {1, 1};
constexpr int kMultiple[3] = {1, 8, 16};
constexpr int kStages = KernelConfig::Mainloop::DispatchPolicy::Stages;
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_pingpong_64x128x128_sfamn_e4m3_bf16", 4, 0)};
#elif defined(MIRCUDA_SM90_FP8_EXP_SWAP128) || defined(MIRCUDA_SM90_FP8_EXP_SWAP160) || \
    defined(MIRCUDA_SM90_FP8_EXP_SWAP192)
// Experiments on the large-M kernel (issue 13): the swapped problem D^T = B . A^T, so that the weights' 128 x 128
// scale blocks lie along CUTLASS's M and the token tile (its N) is free of them: 128 weight rows x 128, 160 or
// 192 tokens per tile, where the unswapped 128x256 does not compile (above). Each consumer warp group then holds
// 64 x TN of block sums and of running sums plus TN / 4 token scales in registers (192: 226 bytes of spill stores
// under ptxas 13.0). Cluster 2x1: the two weight tiles of a cluster share their token tile by multicast. Measured on
// the H200 (2026-12-03, benchmarks/results/fp8_sm90_swap_variants.json, 8 points at M = 2048 and 8192): geometric
// means 0.69, 0.49 and 0.39 of torch's rowwise _scaled_mm against the cooperative kernel's 0.85 (its token scales
// are K-major, 128-192 scattered cp.async per k-tile). Not adopted.
#define MIRCUDA_EXPERIMENTAL 1
#if defined(MIRCUDA_SM90_FP8_EXP_SWAP128)
using ExpTile = Shape<_128, _128, _128>;
#elif defined(MIRCUDA_SM90_FP8_EXP_SWAP160)
using ExpTile = Shape<_128, _160, _128>;
#else
using ExpTile = Shape<_128, _192, _128>;
#endif
using ExpCluster = Shape<_2, _1, _1>;
using KernelConfig = bw::Config<cutlass::arch::Sm90, bw::Sm90ScalesSwapped, ExpTile, ExpCluster,
                                cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                                cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::gemm::PersistentScheduler,
                                cutlass::epilogue::collective::EpilogueTileAuto, cutlass::bfloat16_t, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_BLOCKWISE_EXPERIMENTAL;
// tile and cluster as the user's problem reads them: M along tokens, N along weight rows
constexpr int kTile[3] = {size<1>(ExpTile{}), size<0>(ExpTile{}), size<2>(ExpTile{})};
constexpr int kCluster[2] = {size<1>(ExpCluster{}), size<0>(ExpCluster{})};
constexpr int kMultiple[3] = {1, 8, 16};
constexpr int kStages = KernelConfig::Mainloop::DispatchPolicy::Stages;
#if defined(MIRCUDA_SM90_FP8_EXP_SWAP128)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_swap_128x128x128_c1x2_e4m3_bf16", 4, 0)};
#elif defined(MIRCUDA_SM90_FP8_EXP_SWAP160)
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_swap_160x128x128_c1x2_e4m3_bf16", 4, 0)};
#else
constexpr ExpEntry kEntries[] = {MIRCUDA_ENTRY("sm90_blockwise_swap_192x128x128_c1x2_e4m3_bf16", 4, 0)};
#endif
#elif defined(MIRCUDA_SM120_FP8)
// SM12x: 128x128x128 tiles, cooperative (CUTLASS example 87b); GeForce parts have no TMA multicast,
// so the cluster is 1x1.
using KernelConfig = bw::Config<cutlass::arch::Sm120, bw::Sm120Scales, Shape<_128, _128, _128>, Shape<_1, _1, _1>,
                                cutlass::gemm::KernelScheduleSm120Blockwise,
                                cutlass::epilogue::collective::EpilogueScheduleAuto, void>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM120_BLOCKWISE, kTile[3] = {128, 128, 128}, kCluster[2] = {1, 1};
// CUTLASS 4.2's SM120 blockwise mainloop refuses partial scale blocks: N a multiple of 128 and K a
// multiple of the 128-K tile (sm120_mma_tma_blockwise_scaling.hpp, can_implement).
constexpr int kMultiple[3] = {1, 128, 128};
#define MIRCUDA_NAME "sm120_blockwise_128x128x128_e4m3_bf16"
#else
#error "no blockwise FP8 kernel family defined"
#endif

#undef MIRCUDA_ENTRY

constexpr int kArchs[] = {MIRCUDA_ARCH_LIST};

mircuda_cutlass_kernel_info make_info(const char* name) {
  mircuda_cutlass_kernel_info info{};
  info.name = name;
  info.family = kFamily;
  info.input = MIRCUDA_CUTLASS_E4M3;
  info.output = MIRCUDA_CUTLASS_BF16;
  info.tile_m = kTile[0];
  info.tile_n = kTile[1];
  info.tile_k = kTile[2];
  info.cluster_m = kCluster[0];
  info.cluster_n = kCluster[1];
#if defined(MIRCUDA_EXPERIMENTAL)
  info.stages = kStages;  // the collective builder's choice, reported for the experiments
#else
  info.stages = 0;  // chosen by the collective builder
#endif
  info.alignment_bytes = 16;
  info.split_k = 0;
  info.arch_count = static_cast<int>(sizeof(kArchs) / sizeof(kArchs[0]));
  for (int i = 0; i < info.arch_count && i < 4; ++i) info.archs[i] = kArchs[i];
  info.kind = MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED;
  info.m_multiple = kMultiple[0];
  info.n_multiple = kMultiple[1];
  info.k_multiple = kMultiple[2];
  info.scale_type = MIRCUDA_CUTLASS_F32;
  info.scale_m = bw::kScaleM;
  info.scale_n = bw::kScaleN;
  info.scale_k = bw::kScaleK;
  info.sfa_major = MIRCUDA_CUTLASS_K_MAJOR;
  info.sfb_major = MIRCUDA_CUTLASS_K_MAJOR;
  return info;
}

#if defined(MIRCUDA_EXPERIMENTAL)
bool register_all() {
  for (const ExpEntry& entry : kEntries) mircuda::register_kernel({make_info(entry.name), entry.factory});
  return true;
}
const bool kRegistered = register_all();
#else
const bool kRegistered = mircuda::register_kernel({make_info(MIRCUDA_NAME), &bw::create<KernelConfig>});
#endif

}  // namespace
