// One kernel instantiation: a generated TU defines the element types and the family, then includes
// this file, which defines the kernel and registers it with the library at load time.
//
//   MIRCUDA_IN, MIRCUDA_OUT            CUTLASS element types (cutlass::bfloat16_t, cutlass::half_t, float)
//   MIRCUDA_IN_CODE, MIRCUDA_OUT_CODE  MIRCUDA_CUTLASS_BF16 / _F16 / _F32
//   MIRCUDA_TYPES                      "bf16_bf16", "bf16_f32", ...
//   MIRCUDA_ARCH_LIST                  the SASS targets of this TU as 10 * major + minor: 90, 120
//   one of MIRCUDA_SM90_COOP, MIRCUDA_SM90_PINGPONG, MIRCUDA_SM90_SWAP, MIRCUDA_SM90_SWAP64,
//          MIRCUDA_SM90_SWAP128, MIRCUDA_SM90_COOP128_STREAMK, MIRCUDA_SM90_PINGPONG128, MIRCUDA_SM90_COOP192,
//          MIRCUDA_SM90_COOP192_STREAMK, MIRCUDA_SM90_COOP144, MIRCUDA_SM90_COOP144_STREAMK, MIRCUDA_SM90_SWAP96,
//          MIRCUDA_SM90_SWAP64X96, MIRCUDA_SM90_COOP176, MIRCUDA_SM90_SWAP192, MIRCUDA_SM90_SWAP64X32,
//          MIRCUDA_SM90_SWAP64X48, MIRCUDA_SM90_SWAP64X64, MIRCUDA_SM90_PINGPONG64X96,
//          MIRCUDA_SM90_PINGPONG128X96, MIRCUDA_SM90_PINGPONG128X112, MIRCUDA_SM90_SWAP64X32_C4X1,
//          MIRCUDA_SM90_PINGPONG128X144, MIRCUDA_SM90_PINGPONG128X176,
//          MIRCUDA_SM80_DECODE,
//          MIRCUDA_SM80_WIDE, MIRCUDA_SM80_BULK,
//          MIRCUDA_SIMT
#pragma once

#if defined(MIRCUDA_SM90_COOP) || defined(MIRCUDA_SM90_PINGPONG) || defined(MIRCUDA_SM90_SWAP) || \
    defined(MIRCUDA_SM90_SWAP64) || defined(MIRCUDA_SM90_SWAP128) || defined(MIRCUDA_SM90_COOP128_STREAMK) || \
    defined(MIRCUDA_SM90_PINGPONG128) || defined(MIRCUDA_SM90_COOP192) || defined(MIRCUDA_SM90_COOP192_STREAMK) || \
    defined(MIRCUDA_SM90_COOP144) || defined(MIRCUDA_SM90_COOP144_STREAMK) || defined(MIRCUDA_SM90_SWAP96) || \
    defined(MIRCUDA_SM90_SWAP64X96) || defined(MIRCUDA_SM90_COOP176) || defined(MIRCUDA_SM90_SWAP192) || \
    defined(MIRCUDA_SM90_SWAP64X32) || defined(MIRCUDA_SM90_SWAP64X48) || defined(MIRCUDA_SM90_SWAP64X64) || \
    defined(MIRCUDA_SM90_PINGPONG64X96) || defined(MIRCUDA_SM90_PINGPONG128X96) || defined(MIRCUDA_SM90_PINGPONG128X112) || \
    defined(MIRCUDA_SM90_SWAP64X32_C4X1) || defined(MIRCUDA_SM90_PINGPONG128X144) || \
    defined(MIRCUDA_SM90_PINGPONG128X176)
#if defined(MIRCUDA_SM90_COOP144) || defined(MIRCUDA_SM90_COOP144_STREAMK) || \
    defined(MIRCUDA_SM90_COOP176) || defined(MIRCUDA_SM90_SWAP64X48) || defined(MIRCUDA_SM90_PINGPONG128X112) || \
    defined(MIRCUDA_SM90_PINGPONG128X144) || defined(MIRCUDA_SM90_PINGPONG128X176)
// WGMMA N = 48, 112, 144 or 176 (legal: N % 8 == 0 and N <= 256) is among CuTe's "extended" shapes: without this macro
// the collective builder's op selector (cute/arch/mma_sm90.hpp, ss_op_selector) skips it and tiles a
// 144-wide CTA with 64x16x16 instructions (N % 16 == 0 is the first shape it keeps). It only adds atoms
// and selector branches, so the other TUs, built without it, instantiate the same kernels as before.
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#endif
#include "sm90.cuh"
#define MIRCUDA_NS sm90
#else
#include "sm80.cuh"
#define MIRCUDA_NS sm80
#endif

namespace {

using namespace cute;

#if defined(MIRCUDA_SM90_COOP)
// Large M: 128x256 tiles, two consumer warp groups on one tile, weights multicast to a 2x1 cluster.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _256, _64>, Shape<_2, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::PersistentScheduler, false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 256, 64}, kCluster[2] = {2, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x256x64_c2x1_"
#elif defined(MIRCUDA_SM90_PINGPONG)
// Medium M: 64x128 tiles, two consumer warp groups alternating tiles (one's epilogue under the other's MMA).
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _128, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {64, 128, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_64x128x64_"
#elif defined(MIRCUDA_SM90_SWAP)
// Decode (small M): C^T = B . A^T with 128 weight rows x 32 tokens per tile, K split over the SMs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _32, _128>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {128, 32, 128}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 1;
#define MIRCUDA_PREFIX "sm90_swap_128x32x128_splitk_"
#elif defined(MIRCUDA_SM90_SWAP64)
// Middle M (33..64 tokens): the swapped split-K kernel with a 64-token tile, so one tile covers M.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _64, _128>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {128, 64, 128}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 1;
#define MIRCUDA_PREFIX "sm90_swap_128x64x128_splitk_"
#elif defined(MIRCUDA_SM90_SWAP128)
// Middle M (65..128 tokens): swapped, 128 weight rows x 128 tokens, K split; the weights still stream once.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _128, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {128, 128, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 1;
#define MIRCUDA_PREFIX "sm90_swap_128x128x64_splitk_"
#elif defined(MIRCUDA_SM90_COOP128_STREAMK)
// Middle to large M where 128x256 tiles leave a ragged last wave: 128x128 tiles, stream-K decomposition
// (CUTLASS's heuristic splits the leftover tiles over K across the idle SMs).
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _128, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, false, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 128, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x128x64_streamk_"
#elif defined(MIRCUDA_SM90_PINGPONG128)
// Medium M: 128x128 tiles, two consumer warp groups alternating whole tiles.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _128, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {128, 128, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_128x128x64_"
#elif defined(MIRCUDA_SM90_COOP192)
// Cooperative 128x192: at M = 384 on N = 6144 (Llama-3-8B's QKV) 96 tiles fill one wave of 132 SMs where
// 128x128 tiles make 144 (a second wave of 12). Measured on an H200 on 2026-12-01 (bf16, cold weights):
// 36.3 µs against 40.8 for the best other tile there (cuBLAS 28.6), and 37.1 against 41.3 at M = 512.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _192, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::PersistentScheduler, false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 192, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x192x64_"
#elif defined(MIRCUDA_SM90_COOP192_STREAMK)
// The 128x192 tile with the stream-K scheduler: per FLOP the cheapest SM90 tile measured (0.50 µs per
// 128x192x64 K tile against 0.35 per 128x128x64, cooperative, H200 2026-12-01), with its last waves
// spread over every SM. Only with max_swizzle_size 1 (no padding tiles; benchmarks/streamk_model.py).
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _192, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, false, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 192, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x192x64_streamk_swz1_"
#define MIRCUDA_PRIMARY_SCHEDULE mircuda::sm90::Schedule<1>
#elif defined(MIRCUDA_SM90_COOP144)
// Cooperative 128x144 (two consumer warp groups of 64x144; epilogue tile 128x16, gcd(32, 144)): at M = 384
// on N = 6144 (Llama-3-8B's QKV) 3x43 = 129 tiles fill one wave of 132 SMs with a 64-K-tile tile each
// (128x192: 96 tiles, 128x128: 144). Only with max_swizzle_size 1: with 4, CUTLASS rounds 3x43 up to
// 4x44 = 176 tiles (two waves). benchmarks/streamk_model.py predicts it (per-K-tile cost interpolated
// between the measured 128x128 and 128x192 tiles).
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _144, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::PersistentScheduler, false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 144, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x144x64_swz1_"
#define MIRCUDA_WGMMA_N 144
#define MIRCUDA_PRIMARY_SCHEDULE mircuda::sm90::Schedule<1>
#elif defined(MIRCUDA_SM90_COOP144_STREAMK)
// The 128x144 tile with the stream-K scheduler (heuristic decomposition), swizzle 1: where its tiles leave
// the last wave less than half full, CUTLASS spreads them over K across the idle SMs (M = 512 on 6144:
// 4x43 = 172 tiles, 1.3 waves, all stream-K; M = 384 on 6144, 129 tiles, stays data-parallel).
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _144, _64>, Shape<_1, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, false, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 144, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 0, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x144x64_streamk_swz1_"
#define MIRCUDA_WGMMA_N 144
#define MIRCUDA_PRIMARY_SCHEDULE mircuda::sm90::Schedule<1>
#elif defined(MIRCUDA_SM90_SWAP96)
// Middle M (65..96 tokens) on wide weights, after cuBLAS's nvjet_sm90_tst_128x96_64x7_4x1 (M = 96 on
// 14336x4096, H200 2026-12-01): swapped, 128 weight rows x 96 tokens (WGMMA 64x96 per consumer warp
// group), so M = 96 is one token tile and N = 14336 makes 112 CTAs; a 4x1 cluster along the weight rows
// multicasts the token tile to 4 CTAs. Stages from the shared-memory carveout (kStages: 7 for 16-bit C,
// 6 for f32; 28 KB each). Data-parallel, or split-K with the caller's slices.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _96, _64>, Shape<_4, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {128, 96, 64}, kCluster[2] = {4, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 1;
#define MIRCUDA_PREFIX "sm90_swap_128x96x64_c4x1_splitk_"
#define MIRCUDA_WGMMA_N 96
#elif defined(MIRCUDA_SM90_SWAP64X96)
// After cuBLAS's nvjet_sm90_tst_64x96_64x10_4x1 (M = 96 on 6144x4096): swapped, 64 weight rows x 96 tokens
// per tile, so N = 6144 makes 96 CTAs with a deep pipeline (20 KB per stage: 10 stages from the carveout
// for 16-bit C). A 64-row tile is one warp group's WGMMA M, which the cooperative kernel cannot split over
// two: the ping-pong kernel (one tile per consumer warp group; the PersistentScheduler, no split-K: CUTLASS's
// ping-pong kernel refuses the stream-K scheduler). 4x1 cluster along the weight rows.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _96, _64>, Shape<_4, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {64, 96, 64}, kCluster[2] = {4, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_swap_pingpong_64x96x64_c4x1_"
#define MIRCUDA_WGMMA_N 96
#elif defined(MIRCUDA_SM90_COOP176)
// After cuBLAS's nvjet_sm90_tst_168x128_64x5_2x1 (M = 384 on 14336x4096; 1x2 at M = 768): cooperative, 128
// tokens x 176 weight rows (WGMMA 64x176, extended shapes; epilogue tile 128x16, gcd(32, 176)), 3x82 = 246
// tiles at M = 384 on N = 14336, two waves like cuBLAS's 3x86 = 258 (128x128: 336, 2.5 waves); 1x2 cluster
// along N; swizzle 1. cuBLAS's own 168 does not compile with CUTLASS 4.2 (cluster 1x2 and 1x1 alike):
// cute/layout.hpp(1077): static assertion failed with "Stride Divisibility Condition", in the composition
// of the weight tile's shared-memory stages (168 x 64 = 10752 elements each) for its TMA copy.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _176, _64>, Shape<_1, _2, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::PersistentScheduler, false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_COOPERATIVE, kTile[3] = {128, 176, 64}, kCluster[2] = {1, 2};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_coop_128x176x64_c1x2_swz1_"
#define MIRCUDA_WGMMA_N 176
#define MIRCUDA_PRIMARY_SCHEDULE mircuda::sm90::Schedule<1>
#elif defined(MIRCUDA_SM90_SWAP192)
// After cuBLAS's nvjet_sm90_tst_128x192_64x5_4x1_coopB (M = 192 on 14336x4096): swapped cooperative, 128
// weight rows x 192 tokens (WGMMA 64x192), so M = 192 is one token tile and N = 14336 makes 112 CTAs;
// 4x1 cluster along the weight rows (multicast of the token tile); 40 KB per stage: the carveout fits 4
// beside the automatic epilogue tile's shared memory, 5 (as cuBLAS runs) beside the 16-column tile sm90::Config takes
// for 16-bit outputs (4 for FP32). Data-parallel, or split-K with the caller's slices.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _192, _64>, Shape<_4, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                           cutlass::epilogue::TmaWarpSpecializedCooperative,
                                           cutlass::gemm::StreamKScheduler, true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {128, 192, 64}, kCluster[2] = {4, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 1;
#define MIRCUDA_PREFIX "sm90_swap_128x192x64_c4x1_splitk_"
#define MIRCUDA_WGMMA_N 192
#elif defined(MIRCUDA_SM90_SWAP64X32)
// After cuBLAS's nvjet_sm90_tst_64x32_64x16_1x2 (M = 64 on 4096x4096, H200 2026-12-03): swapped ping-pong,
// 64 weight rows x 32 tokens per tile, so M = 64 on N = 4096 makes 64x2 = 128 CTAs (the 128x32 split-K tile
// makes 64 and needs K slices, each with its reduction); a 1x2 cluster along the tokens multicasts each
// weight tile to the two token tiles that read it (one read from L2 instead of two). 12 KB per stage: the
// carveout fits about 16 stages, as cuBLAS runs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _32, _64>, Shape<_1, _2, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {64, 32, 64}, kCluster[2] = {1, 2};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_swap_pingpong_64x32x64_c1x2_"
#define MIRCUDA_WGMMA_N 32
#elif defined(MIRCUDA_SM90_SWAP64X32_C4X1)
// The 64x32 swapped ping-pong tile with a 4x1 cluster along the weight rows, after the 4x1 clusters cuBLAS runs
// on 6144x4096 at M = 48 and 64 (64x48, 64x64): at M = 17-32 there is one token tile, so the 1x2 cluster above
// pads a second one, and the batched GEMV (18.05 µs at M = 24 on 6144x4096, bf16->f32) and cuBLAS (16.58)
// differ by 9 % (benchmarks/results/matmul_sweep_final_tile.json); the token tile is multicast to 4 CTAs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _32, _64>, Shape<_4, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {64, 32, 64}, kCluster[2] = {4, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_swap_pingpong_64x32x64_c4x1_"
#define MIRCUDA_WGMMA_N 32
#elif defined(MIRCUDA_SM90_SWAP64X48)
// After cuBLAS's nvjet_sm90_tst_64x48_64x15_4x1 (M = 48 on 6144x4096, H200 2026-12-03): swapped ping-pong,
// 64 weight rows x 48 tokens, one token tile up to M = 48 (96 CTAs on N = 6144); a 2x1 cluster along the
// weight rows multicasts the token tile. 14 KB per stage.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _48, _64>, Shape<_2, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {64, 48, 64}, kCluster[2] = {2, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_swap_pingpong_64x48x64_c2x1_"
#define MIRCUDA_WGMMA_N 48
#elif defined(MIRCUDA_SM90_SWAP64X64)
// After cuBLAS's nvjet_sm90_tst_64x64_64x13_2x1 (M = 128 on 4096x4096) and _4x1 (M = 64 on 6144x4096), H200
// 2026-12-03: swapped ping-pong, 64 weight rows x 64 tokens, so M = 128 on N = 4096 makes 64x2 = 128 CTAs
// (the 64x128 ping-pong tile makes 64); a 2x1 cluster along the weight rows multicasts the token tile.
// 16 KB per stage: about 13 stages, as cuBLAS runs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _64, _64>, Shape<_2, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           true>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_SWAPPED, kTile[3] = {64, 64, 64}, kCluster[2] = {2, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_swap_pingpong_64x64x64_c2x1_"
#define MIRCUDA_WGMMA_N 64
#elif defined(MIRCUDA_SM90_PINGPONG64X96)
// After cuBLAS's nvjet_sm90_tst_96x64_64x10_1x2_h (M = 128 on 6144x4096, H200 2026-12-03; cuBLAS names
// its tiles weight rows x tokens): ping-pong, 64 tokens x 96 weight rows, so M = 128 on N = 6144 makes
// 2x64 = 128 CTAs (the 64x128 ping-pong tile makes 96, 0.91 of cuBLAS there); a 2x1 cluster along the
// tokens multicasts each weight tile to the two token tiles that read it. 20 KB per stage: about 10
// stages from the carveout for 16-bit C, as cuBLAS runs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_64, _96, _64>, Shape<_2, _1, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {64, 96, 64}, kCluster[2] = {2, 1};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_64x96x64_c2x1_"
#define MIRCUDA_WGMMA_N 96
#elif defined(MIRCUDA_SM90_PINGPONG128X96)
// After cuBLAS's nvjet_sm90_tst_96x128_64x7_2x1 (M = 256 on 6144x4096): ping-pong, 128 tokens x 96 weight
// rows, so M = 256 on N = 6144 makes 2x64 = 128 CTAs (128x128 tiles make 96); a 1x2 cluster along the
// weight rows multicasts the token tile. 28 KB per stage: about 7 stages for 16-bit C, as cuBLAS runs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _96, _64>, Shape<_1, _2, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {128, 96, 64}, kCluster[2] = {1, 2};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_128x96x64_c1x2_"
#define MIRCUDA_WGMMA_N 96
#elif defined(MIRCUDA_SM90_PINGPONG128X112)
// After cuBLAS's nvjet_sm90_tst_112x128_64x7_2x1 (M = 128 and 256 on 14336x4096): ping-pong, 128 tokens x 112
// weight rows (WGMMA 64x112, extended shapes), so N = 14336 makes 128 weight tiles per token tile (128x128
// tiles make 112); a 1x2 cluster along the weight rows multicasts the token tile. 30 KB per stage: about 7
// stages for 16-bit C, as cuBLAS runs. The automatic epilogue tile is 64x16 here (gcd(32, 112) columns), the
// width sm90.cuh measured slower on the 64x128 ping-pong tile: the sweep decides.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _112, _64>, Shape<_1, _2, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {128, 112, 64}, kCluster[2] = {1, 2};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_128x112x64_c1x2_"
#define MIRCUDA_WGMMA_N 112
#elif defined(MIRCUDA_SM90_PINGPONG128X144)
// After cuBLAS's nvjet_sm90_tst_144x128_64x6_2x1 (M = 384 on 6144x4096; cuBLAS names weight rows first): ping-pong,
// 128 tokens x 144 weight rows, so N = 6144 makes 43 weight tiles per token tile: M = 768 makes 258 tiles, within the
// 264 a ping-pong kernel runs at once on 132 SMs (two per SM), where the cooperative 128x144 tile runs 1.95 waves
// (0.94-0.96 of cuBLAS there, sm90_dense.json of 2026-12-04); a 1x2 cluster along the weight rows multicasts the token
// tile. 144 FP32 accumulators per consumer thread; 34 KB per stage: about 6 stages for 16-bit C, as cuBLAS runs.
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _144, _64>, Shape<_1, _2, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {128, 144, 64}, kCluster[2] = {1, 2};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_128x144x64_c1x2_"
#define MIRCUDA_WGMMA_N 144
#elif defined(MIRCUDA_SM90_PINGPONG128X176)
// After cuBLAS's nvjet_sm90_tst_168x128_64x5_2x1 (M = 384 on 14336x4096): ping-pong, 128 tokens x 176 weight rows,
// so N = 14336 makes 82 weight tiles per token tile and M = 384 246 tiles, one round of the 264 a ping-pong kernel
// runs at once (the cooperative 128x176 tile runs them in 1.86 waves: 0.93-0.94 of cuBLAS); a 1x2 cluster along the
// weight rows multicasts the token tile. 176 FP32 accumulators per consumer thread; 38 KB per stage: about 5 stages.
// cuBLAS's 168 rows fail to build in ping-pong too, as for SM90_COOP176 above (the Stride Divisibility Condition on the
// 168 x 64 weight stage; 2026-12-04).
using KernelConfig = mircuda::sm90::Config<MIRCUDA_IN, MIRCUDA_OUT, Shape<_128, _176, _64>, Shape<_1, _2, _1>,
                                           cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                           cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler,
                                           false>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM90_PINGPONG, kTile[3] = {128, 176, 64}, kCluster[2] = {1, 2};
constexpr int kStages = KernelConfig::kBuilderStages, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm90_pingpong_128x176x64_c1x2_"
#define MIRCUDA_WGMMA_N 176
#elif defined(MIRCUDA_SM80_DECODE)
// Short M (decode): 32 rows x 128 columns, four warps side by side in N.
using KernelConfig = mircuda::sm80::Config<MIRCUDA_IN, MIRCUDA_OUT, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
                                           cutlass::gemm::GemmShape<32, 128, 64>, cutlass::gemm::GemmShape<32, 32, 64>,
                                           cutlass::gemm::GemmShape<16, 8, 16>, 4, 8, 128 / cutlass::sizeof_bits<MIRCUDA_OUT>::value>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM80_TENSOROP, kTile[3] = {32, 128, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 4, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm80_tensorop_32x128x64_4stage_"
#elif defined(MIRCUDA_SM80_WIDE)
// Wide one-row projections: 64x64x64, five stages (80 KB of shared memory, within SM120's 99 KB).
using KernelConfig = mircuda::sm80::Config<MIRCUDA_IN, MIRCUDA_OUT, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
                                           cutlass::gemm::GemmShape<64, 64, 64>, cutlass::gemm::GemmShape<32, 32, 64>,
                                           cutlass::gemm::GemmShape<16, 8, 16>, 5, 8, 128 / cutlass::sizeof_bits<MIRCUDA_OUT>::value>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM80_TENSOROP, kTile[3] = {64, 64, 64}, kCluster[2] = {1, 1};
constexpr int kStages = 5, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm80_tensorop_64x64x64_5stage_"
#elif defined(MIRCUDA_SM80_BULK)
// Bulk: 128x128x32, four stages (64 KB of shared memory), 2x2 warps of 64x64.
using KernelConfig = mircuda::sm80::Config<MIRCUDA_IN, MIRCUDA_OUT, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
                                           cutlass::gemm::GemmShape<128, 128, 32>, cutlass::gemm::GemmShape<64, 64, 32>,
                                           cutlass::gemm::GemmShape<16, 8, 16>, 4, 8, 128 / cutlass::sizeof_bits<MIRCUDA_OUT>::value>;
constexpr int kFamily = MIRCUDA_CUTLASS_SM80_TENSOROP, kTile[3] = {128, 128, 32}, kCluster[2] = {1, 1};
constexpr int kStages = 4, kAlignBytes = 16, kSplitK = 0;
#define MIRCUDA_PREFIX "sm80_tensorop_128x128x32_4stage_"
#elif defined(MIRCUDA_SIMT)
// Any shape and alignment: CUDA cores, 128x128x8 tiles, two stages, one element per access.
using KernelConfig = mircuda::sm80::Config<MIRCUDA_IN, MIRCUDA_OUT, cutlass::arch::OpClassSimt, cutlass::arch::Sm50,
                                           cutlass::gemm::GemmShape<128, 128, 8>, cutlass::gemm::GemmShape<32, 64, 8>,
                                           cutlass::gemm::GemmShape<1, 1, 1>, 2, 1, 1>;
constexpr int kFamily = MIRCUDA_CUTLASS_SIMT, kTile[3] = {128, 128, 8}, kCluster[2] = {1, 1};
constexpr int kStages = 2, kAlignBytes = 0, kSplitK = 0;  // 0: the element size
#define MIRCUDA_PREFIX "simt_128x128x8_2stage_"
#else
#error "no kernel family defined"
#endif

#if defined(MIRCUDA_WGMMA_N)
// A tile whose WGMMA width CuTe picks only with an opt-in macro: check that it did, instead of timing a
// kernel of narrow instructions.
static_assert(cute::size<1>(typename KernelConfig::Mainloop::TiledMma::Shape_MNK{}) == MIRCUDA_WGMMA_N,
              "the collective builder did not pick the WGMMA width of the tile (CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)");
#endif

constexpr int kArchs[] = {MIRCUDA_ARCH_LIST};

mircuda_cutlass_kernel_info make_info() {
  mircuda_cutlass_kernel_info info{};
  info.name = MIRCUDA_PREFIX MIRCUDA_TYPES;
  info.family = kFamily;
  info.input = MIRCUDA_IN_CODE;
  info.output = MIRCUDA_OUT_CODE;
  info.tile_m = kTile[0];
  info.tile_n = kTile[1];
  info.tile_k = kTile[2];
  info.cluster_m = kCluster[0];
  info.cluster_n = kCluster[1];
  info.stages = kStages;
  info.alignment_bytes = kAlignBytes ? kAlignBytes : static_cast<int>(sizeof(MIRCUDA_IN));
  info.split_k = kSplitK;
  info.arch_count = static_cast<int>(sizeof(kArchs) / sizeof(kArchs[0]));
  for (int i = 0; i < info.arch_count && i < 4; ++i) info.archs[i] = kArchs[i];
  info.kind = MIRCUDA_CUTLASS_KIND_DENSE;
  // K rows of A and B and N rows of C are 16-byte vectors for the tensor-core kernels (M is free:
  // rows of C^T are N for the swapped kernels); SIMT reads single elements.
  info.m_multiple = 1;
  info.k_multiple = kAlignBytes ? kAlignBytes / static_cast<int>(sizeof(MIRCUDA_IN)) : 1;
  info.n_multiple = kAlignBytes ? kAlignBytes / static_cast<int>(sizeof(MIRCUDA_OUT)) : 1;
  info.sfa_major = info.sfb_major = MIRCUDA_CUTLASS_NO_SCALES;
  return info;
}

#if defined(MIRCUDA_PRIMARY_SCHEDULE)
const bool kRegistered =
    mircuda::register_kernel({make_info(), &mircuda::MIRCUDA_NS::create<KernelConfig, MIRCUDA_PRIMARY_SCHEDULE>});
#else
const bool kRegistered = mircuda::register_kernel({make_info(), &mircuda::MIRCUDA_NS::create<KernelConfig>});
#endif

// The same kernel under other scheduler settings (mircuda::sm90::Schedule), registered from this TU:
// a second TU instantiating the kernel again would break it (sm90.cuh, Schedule). Selectable by name,
// and tried by the sweep, like the others; benchmarks/streamk_model.py predicts each one's decomposition:
//   _swz1_                max_swizzle_size 1: no padding tiles computed on zeros; stream-K groups that
//                         start in step share the weight tile B
//   _streamk_forced_swz1_ and DecompositionMode::StreamK: stream-K also when the last wave is more than
//                         half full (the heuristic's data-parallel case)
//   _streamk_nd_swz1_     and ReductionMode::Nondeterministic (heuristic decomposition): middle K splits
//                         add their partial sums in finishing order (M <= 192: 3-5 splits per tile)
//   _nopdl_               the kernel's own schedule, never launched with programmatic dependent launch
//                         (only here: the same variant of the nine CUTLASS kernels of the table's other entries
//                         below 0.97 at M = 128-768 was slower than its kernel in all 43 cells where both were
//                         timed, matmul_nopdl_nine_ab.json)
#if defined(MIRCUDA_SM90_PINGPONG)
#define MIRCUDA_PREFIX_NOPDL "sm90_pingpong_64x128x64_nopdl_"
#elif defined(MIRCUDA_SM90_COOP)
// 128x256 with its 2x1 cluster: the default 4 rounds the M tiles up to a multiple of 2 x 4 once both
// counts are 3 or more (M = 768: 8 for 6), and of 2 x 2 when the smaller is 2 (M = 96: 4 M tiles, four
// times the work); with 1, only up to the cluster's 2.
#define MIRCUDA_PREFIX_SWZ1 "sm90_coop_128x256x64_c2x1_swz1_"
#elif defined(MIRCUDA_SM90_COOP128_STREAMK)
#define MIRCUDA_PREFIX_SWZ1 "sm90_coop_128x128x64_streamk_swz1_"
#define MIRCUDA_PREFIX_FORCED_SWZ1 "sm90_coop_128x128x64_streamk_forced_swz1_"
#define MIRCUDA_PREFIX_ND_SWZ1 "sm90_coop_128x128x64_streamk_nd_swz1_"
#elif defined(MIRCUDA_SM90_COOP192)
#define MIRCUDA_PREFIX_SWZ1 "sm90_coop_128x192x64_swz1_"
#elif defined(MIRCUDA_SM90_COOP192_STREAMK)
#define MIRCUDA_PREFIX_FORCED_SWZ1 "sm90_coop_128x192x64_streamk_forced_swz1_"
#endif

#if defined(MIRCUDA_PREFIX_SWZ1) || defined(MIRCUDA_PREFIX_FORCED_SWZ1) || defined(MIRCUDA_PREFIX_ND_SWZ1) || \
    defined(MIRCUDA_PREFIX_NOPDL)
template <class Sched>
bool register_variant(const char* name) {
  mircuda_cutlass_kernel_info info = make_info();
  info.name = name;
  return mircuda::register_kernel({info, &mircuda::sm90::create<KernelConfig, Sched>});
}

#if defined(MIRCUDA_PREFIX_SWZ1)
const bool kRegisteredSwz1 = register_variant<mircuda::sm90::Schedule<1>>(MIRCUDA_PREFIX_SWZ1 MIRCUDA_TYPES);
#endif
#if defined(MIRCUDA_PREFIX_FORCED_SWZ1)
const bool kRegisteredForced =
    register_variant<mircuda::sm90::Schedule<1, true>>(MIRCUDA_PREFIX_FORCED_SWZ1 MIRCUDA_TYPES);
#endif
#if defined(MIRCUDA_PREFIX_ND_SWZ1)
const bool kRegisteredNd =
    register_variant<mircuda::sm90::Schedule<1, false, true>>(MIRCUDA_PREFIX_ND_SWZ1 MIRCUDA_TYPES);
#endif
#if defined(MIRCUDA_PREFIX_NOPDL)
const bool kRegisteredNoPdl =
    register_variant<mircuda::sm90::Schedule<0, false, false, false>>(MIRCUDA_PREFIX_NOPDL MIRCUDA_TYPES);
#endif
#endif

}  // namespace
