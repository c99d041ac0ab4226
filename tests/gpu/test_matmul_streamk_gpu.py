"""The SM90 entries of branch streamk against float64 (poisoned outputs, a guard band past C, alpha and
beta): the 128x128 stream-K kernel with max_swizzle_size 1 (heuristic, forced stream-K, nondeterministic
reduction), the 128x192 tile with swizzle 1 (data-parallel) and with the stream-K scheduler; and those of
branch tile144: the 128x144 tile (WGMMA N = 144) with swizzle 1, data-parallel and stream-K, and the
128x256 2x1-cluster kernel with swizzle 1; and those of branch midm kept after the H200 probe, after the
kernels cuBLAS runs at middle M (swapped 128x96 and swapped ping-pong 64x96 with 4x1 clusters, cooperative
128x176 with a 1x2 cluster, swapped 128x192 with a 4x1 cluster). Shapes: odd ones (partial tiles in M, N and K,
and fewer weight tiles than a cluster), the middle-M ones where the decomposition splits tiles over 2-5
CTAs (benchmarks/streamk_model.py gives each one's decomposition), and for branch midm's entries the
cells they were made for."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close, name, random, run

PAIRS = [(mc.bf16, None), (mc.bf16, mc.f32), (mc.f16, None), (mc.f16, mc.f32)]
PAIR_IDS = ["bf16", "bf16-f32", "f16", "f16-f32"]

ENTRIES = ["sm90_coop_128x128x64_streamk_swz1", "sm90_coop_128x128x64_streamk_forced_swz1",
           "sm90_coop_128x128x64_streamk_nd_swz1", "sm90_coop_128x192x64_swz1",
           "sm90_coop_128x192x64_streamk_swz1", "sm90_coop_128x192x64_streamk_forced_swz1",
           "sm90_coop_128x144x64_swz1", "sm90_coop_128x144x64_streamk_swz1", "sm90_coop_128x256x64_c2x1_swz1"]
MIDM_ENTRIES = ["sm90_swap_128x96x64_c4x1_splitk", "sm90_swap_pingpong_64x96x64_c4x1", "sm90_coop_128x176x64_c1x2_swz1",
                "sm90_swap_128x192x64_c4x1_splitk", "sm90_swap_pingpong_64x32x64_c1x2",
                "sm90_swap_pingpong_64x48x64_c2x1", "sm90_swap_pingpong_64x64x64_c2x1", "sm90_pingpong_64x96x64_c2x1",
                "sm90_pingpong_128x96x64_c1x2", "sm90_pingpong_128x112x64_c1x2",
                "sm90_swap_pingpong_64x32x64_c4x1", "sm90_pingpong_128x144x64_c1x2",
                "sm90_pingpong_128x176x64_c1x2"]
"""Branch midm's entries (families SM90_SWAP96, SM90_SWAP64X96, SM90_COOP176, SM90_SWAP192), the swapped
64-row ping-pong tiles after cuBLAS's kernels at M = 48-128 (SM90_SWAP64X32, SM90_SWAP64X48, SM90_SWAP64X64,
2026-12-03) and the clustered ping-pong tiles after cuBLAS's at M = 128 and 256 (SM90_PINGPONG64X96,
SM90_PINGPONG128X96, SM90_PINGPONG128X112), the swapped 64x32 tile with a 4x1 cluster for M = 17-32
(SM90_SWAP64X32_C4X1) and the ping-pong tiles after cuBLAS's at M = 384 (SM90_PINGPONG128X144, SM90_PINGPONG128X176,
2026-12-04). SM90_SWAP96_C2, SM90_PINGPONG144 and SM90_COOP96 were built and measured on the H200 on 2026-12-01,
won no cell against the entries before them, and were dropped; a 128x168 ping-pong tile (cuBLAS's 168 rows at M = 384)
does not build with CUTLASS's SM90 epilogue (instance.cuh)."""
MIDM_SPLIT_K = [e for e in MIDM_ENTRIES if e.endswith("_splitk")]

ODD = [
    (37, 136, 264),     # one partial tile, K tiles <= 8: data-parallel whatever the mode
    (129, 1032, 1000),  # partial tiles in M, N and K
    (300, 520, 1024),
    (1029, 264, 136),
]
MIDDLE = [
    (96, 4096, 4096),   # 32 tiles of 128x128 over 132 CTAs: 4-5 splits per tile (middle splits add atomically)
    (200, 2816, 4096),  # 44 tiles: the heuristic's even split-K (3 splits)
    (384, 6144, 4096),  # 144 tiles of 128x128, every one split over 2 CTAs (3 groups)
    (768, 4096, 4096),  # 6x22 tiles of 128x192: one wave with swizzle 1
    (512, 6144, 4096),  # 4x43 tiles of 128x144: all 172 stream-K over the 132 CTAs (4 groups)
]
MIDM_CELLS = [
    (96, 14336, 4096),   # swapped 128x96: 112 weight tiles, one token tile (cuBLAS 128x96 4x1)
    (96, 6144, 4096),    # swapped 64x96: 96 weight tiles (cuBLAS 64x96 4x1)
    (96, 4096, 14336),   # swapped 128x96: 32 weight tiles, 4 K slices by the rule (cuBLAS split-K 2x1)
    (192, 6144, 4096),   # swapped 128x96 4x1: 48 weight tiles x 2 token tiles
    (192, 14336, 4096),  # swapped 128x192: 112 weight tiles, one token tile
    (384, 14336, 4096),  # cooperative 128x176: 3x82 tiles, two waves
    (64, 4096, 4096),    # swapped 64x32 1x2: 64 weight tiles x 2 token tiles (cuBLAS 64x32 1x2)
    (48, 6144, 4096),    # swapped 64x48 2x1: 96 weight tiles, one token tile (cuBLAS 64x48 4x1)
    (128, 4096, 4096),   # swapped 64x64 2x1: 64 weight tiles x 2 token tiles (cuBLAS 64x64 2x1)
    (128, 6144, 4096),   # ping-pong 64x96 2x1: 2 token tiles x 64 weight tiles (cuBLAS 96x64 1x2)
    (256, 6144, 4096),   # ping-pong 128x96 1x2: 2 token tiles x 64 weight tiles (cuBLAS 96x128 2x1)
    (256, 14336, 4096),  # ping-pong 128x112 1x2: 2 token tiles x 128 weight tiles (cuBLAS 112x128 2x1)
    (24, 6144, 4096),    # swapped 64x32 4x1: 96 weight tiles, one token tile
    (768, 6144, 4096),   # ping-pong 128x144 1x2: 6x43 tiles, one round of two per SM (cuBLAS 144x128 2x1 at M = 384)
    (384, 14336, 4096),  # ping-pong 128x176 1x2: 3x82 tiles, one round (cuBLAS 168x128 2x1)
]
CASES = ([pytest.param(m, n, k, i, o, id=f"{m}-{n}-{k}-{p}") for m, n, k in ODD for (i, o), p in zip(PAIRS, PAIR_IDS)]
         + [pytest.param(m, n, k, i, o, id=f"{m}-{n}-{k}-{p}") for m, n, k in MIDDLE
            for (i, o), p in zip(PAIRS, PAIR_IDS) if p in ("bf16", "f16-f32")])
"""Every type pair on the odd shapes; one of each input and output width on the large ones."""
MIDM_CASES = [pytest.param(m, n, k, i, o, id=f"{m}-{n}-{k}-{p}") for m, n, k in MIDM_CELLS
              for (i, o), p in zip(PAIRS, PAIR_IDS) if p in ("bf16", "f16-f32")]


def _entry(library, prefix: str, input, output) -> str:  # type: ignore[no-untyped-def]
    out_t = input if output is None else output
    kernel = f"{prefix}_{name(input)}_{name(out_t)}"
    if kernel not in {k.name for k in library.kernels}:
        pytest.fail(f"{kernel} is not in {library.path}: build the library from this tree "
                    "(python -m mircuda build-cutlass --families SM90_COOP128_STREAMK,SM90_COOP192,SM90_COOP192_STREAMK,"
                    "SM90_COOP,SM90_COOP144,SM90_COOP144_STREAMK,SM90_SWAP96,SM90_SWAP64X96,SM90_COOP176,"
                    "SM90_SWAP192,SM90_SWAP64X32,SM90_SWAP64X48,SM90_SWAP64X64,SM90_PINGPONG64X96,SM90_PINGPONG128X96,"
                    "SM90_PINGPONG128X112,SM90_SWAP64X32_C4X1,SM90_PINGPONG128X144,"
                    "SM90_PINGPONG128X176)")
    return kernel


def _check_entry(context, stream, pool, rng, library, prefix: str, m: int, n: int, k: int, input,  # type: ignore[no-untyped-def]
                 output) -> None:
    """The entry ``prefix`` for ``input`` -> ``output`` (skipped off cc 9.0; a library without it fails with the
    build command) at M x N x K with a random alpha and beta (0 or not), against float64."""
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("SM90 kernels")
    kernel = _entry(library, prefix, input, output)
    alpha, beta = float(rng.uniform(0.5, 2.0)), float(rng.choice([0.0, rng.uniform(-1.0, 1.0)]))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, alpha, beta, kernel=kernel)
    assert plan.kernel_name == kernel
    assert_close(got, want, mag, out)


@pytest.mark.cutlass
@pytest.mark.parametrize("prefix", ENTRIES + MIDM_ENTRIES)
@pytest.mark.parametrize("m, n, k, input, output", CASES)
def test_streamk_entries_match_float64(context, stream, pool, rng, library, input, output, prefix, m, n, k) -> None:
    _check_entry(context, stream, pool, rng, library, prefix, m, n, k, input, output)


@pytest.mark.cutlass
@pytest.mark.parametrize("prefix", MIDM_ENTRIES)
@pytest.mark.parametrize("m, n, k, input, output", MIDM_CASES)
def test_midm_entries_match_float64_at_their_cells(context, stream, pool, rng, library, input, output, prefix, m,
                                                   n, k) -> None:
    _check_entry(context, stream, pool, rng, library, prefix, m, n, k, input, output)


@pytest.mark.cutlass
@pytest.mark.parametrize("prefix", MIDM_SPLIT_K)
@pytest.mark.parametrize("splits", [2, 3, 7])
def test_midm_swapped_entries_split_k_given_by_the_caller(context, stream, pool, rng, library, prefix, splits) -> None:
    # the 4x1 clusters with the stream-K scheduler's split-K mode: 9 weight tiles (rounded up to the
    # cluster), 2 token tiles, K = 4104 (65 K tiles of 64, the last partial) over 2, 3 or 7 slices
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("SM90 kernels")
    kernel = _entry(library, prefix, mc.bf16, None)
    plan, got, want, mag, out = run(context, stream, pool, rng, 150, 1096, 4104, mc.bf16, None, 1.0, 0.5,
                                    kernel=kernel, splits=splits)
    assert plan.kernel_name == kernel
    assert_close(got, want, mag, out)


@pytest.mark.cutlass
@pytest.mark.parametrize("prefix", [e for e in ENTRIES + MIDM_ENTRIES if "_nd_" not in e])
def test_deterministic_entries_give_the_same_bits_every_run(context, stream, pool, rng, library, prefix) -> None:
    # M = 384 on 6144x4096 (every 128x128 tile split over two CTAs) and M = 96 on 4096x4096 (4-5 splits):
    # the deterministic reduction adds the splits' partial sums in K order, so every run writes the same bits
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("SM90 kernels")
    kernel = _entry(library, prefix, mc.bf16, None)
    for m, n, k in [(384, 6144, 4096), (96, 4096, 4096)]:
        a, b = random(rng, mc.bf16, m, k), random(rng, mc.bf16, n, k)
        plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=kernel)
        ba, bb = upload(context, stream, pool, a.ravel()), upload(context, stream, pool, b.ravel())
        c = pool.allocate(mc.bf16, stream, m * n)
        runs = []
        for _ in range(4):
            stream.memset(c, 0xFF)
            plan.execute(stream, ba, bb, c)
            runs.append(download(context, stream, c).view(np.uint16).copy())
        assert all(np.array_equal(runs[0], r) for r in runs[1:]), f"{kernel} M={m}: runs differ"
        want = a.astype(np.float64) @ b.astype(np.float64).T
        rel = np.linalg.norm(runs[0].view(a.dtype).astype(np.float64).reshape(m, n) - want) / np.linalg.norm(want)
        assert rel < 1e-2, rel
        for buf in (ba, bb, c):
            buf.free(stream)
        plan.close()
