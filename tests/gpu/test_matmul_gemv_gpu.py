"""DenseMatmulPlan's batched GEMV (M <= 32) on the GPU: every M from 1 to 16 on aligned and odd shapes,
fp16/bf16/f32-out, alpha/beta, every split of K over warps, M = 17..32 and two 16-row weight tiles per warp
(the measured table's range), against float64 numpy with poisoned outputs and fresh random data. It
needs no CUTLASS library (NVRTC compiles it for the device)."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close, assert_still_poisoned, poison, random, run
from matmul_helpers import name as type_name

PAIRS = [(mc.bf16, None), (mc.bf16, mc.f32), (mc.f16, None), (mc.f16, mc.f32)]
PAIR_IDS = ["bf16", "bf16-f32", "f16", "f16-f32"]
SHAPES = [  # (N, K): 16-byte loads with a K tail and a partial row block; element loads (odd K)
    (520, 2056), (37, 1003)]


@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("n, k", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("m", range(1, 17))
def test_every_m_matches_float64(context, stream, pool, rng, input, output, m, n, k) -> None:
    alpha = float(rng.uniform(0.5, 2.0))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, alpha, 0.0)
    assert plan.kernel.family == ("dense_vector" if m == 1 else "batched_gemv"), plan.describe()
    assert plan.kernel.origin == "nvrtc"
    assert plan.alignment_bytes == (16 if k % 8 == 0 else 2) and plan.handle == 0 and plan.workspace_bytes == 0
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("m", [1, 5, 8, 9, 16])
def test_alpha_and_beta_read_c(context, stream, pool, rng, input, output, m) -> None:
    alpha, beta = float(rng.uniform(-2, -0.5)), float(rng.uniform(0.25, 1.5))
    _, got, want, mag, out = run(context, stream, pool, rng, m, 1000, 4104, input, output, alpha, beta)
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("m", [3, 16])
@pytest.mark.parametrize("n, k, warps", [(64, 4096, {3: 8, 16: 8}), (14336, 264, {3: 1, 16: 2}), (4096, 4096, None),
                                         (16, 8, {3: 1, 16: 1})])
def test_every_split_of_k_matches_float64(context, stream, pool, rng, m, n, k, warps) -> None:
    # 14336 x 264 at M = 16: two-step chunks let two warps split K (one at four steps), see choose_gemv.
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, mc.bf16, mc.f32, 1.0, 0.0)
    text = plan.describe()
    assert "batched_gemv_bf16_f32_v16" in text and f"MIRCUDA_GEMV_M={m}" in text and "Why: " in text
    if warps is not None:
        assert f"x {warps[m]} warp(s)" in text, text
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("n, k", SHAPES, ids=lambda v: str(v))
def test_the_batched_gemv_forced_at_m_1_matches_float64(context, stream, pool, rng, n, k) -> None:
    plan, got, want, mag, out = run(context, stream, pool, rng, 1, n, k, mc.f16, mc.f32, 1.5, 0.0,
                                    kernel="batched_gemv_f16_f32")
    assert plan.kernel.family == "batched_gemv" and "MIRCUDA_GEMV_M=1" in plan.describe()
    assert_close(got, want, mag, out)


def test_operands_are_checked_before_anything_is_enqueued(context, stream, pool, rng) -> None:
    """Each refused call raises naming the operand and enqueues nothing: every poisoned output is
    still poison afterwards, while valid inputs would have written it."""
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(4, 64, 128))
    a = upload(context, stream, pool, random(rng, mc.bf16, 4 * 128))
    b = upload(context, stream, pool, random(rng, mc.bf16, 64 * 128))
    c = upload(context, stream, pool, poison(mc.bf16, 4 * 64))
    short = upload(context, stream, pool, poison(mc.bf16, 4 * 64 - 1))
    f32 = upload(context, stream, pool, poison(mc.f32, 4 * 64))
    for args, argument in [((a, b, short), "c"), ((a, b, f32), "c"), ((b, short, c), "b"), ((a, b, c, None), "alpha")]:
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args)
        assert info.value.argument == argument
        assert_still_poisoned(context, stream, c, short, f32)
    plan.execute(stream, a, b, c)  # accepted: the output is written
    assert np.isfinite(download(context, stream, c).astype(np.float32)).all()
    f32.free(stream)
    for buf in (a, b, c, short):
        buf.free(stream)


@pytest.mark.parametrize("m", [1, 4])  # the dense vector kernel, the batched GEMV
@pytest.mark.parametrize("kwargs, argument", [({"compiler": object()}, "compiler"), ({"compiler": "nvrtc"}, "compiler"),
                                              ({"library": "libmircuda_cutlass.so"}, "library")])
def test_construction_checks_the_compiler_and_the_library(context, stream, m, kwargs, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, 64, 128), **kwargs)
    assert info.value.argument == argument and info.value.received == repr(kwargs[argument])


@pytest.mark.cutlass
def test_the_gemv_agrees_with_a_forced_cutlass_kernel(context, stream, pool, rng, library) -> None:
    lib = library
    cc = context.device_info().compute_capability
    names = [k.name for k in lib.kernels if k.runs_on(cc) and k.input == "bf16" and k.output == "f32"
             and k.family != "simt"]
    if not names:
        pytest.skip("no tensor-core kernel for this device")
    m, n, k = 7, 264, 1024
    a, b = random(rng, mc.bf16, m, k), random(rng, mc.bf16, n, k)
    ba, bb = upload(context, stream, pool, a.ravel()), upload(context, stream, pool, b.ravel())
    outs = []
    for kernel in (None, names[0]):
        plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), output=mc.f32, kernel=kernel)
        c = upload(context, stream, pool, poison(mc.f32, m * n))
        plan.execute(stream, ba, bb, c)
        outs.append((plan.kernel.family, download(context, stream, c).reshape(m, n)))
        c.free(stream)
        plan.close()
    (fam0, gemv), (fam1, cutlass) = outs
    assert fam0 == "batched_gemv" and fam1 != "batched_gemv"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for got in (gemv, cutlass):
        assert_close(got, a64 @ b64.T, np.abs(a64) @ np.abs(b64).T, "f32")
    ba.free(stream)
    bb.free(stream)


@pytest.mark.parametrize("unroll", [4, 2])
@pytest.mark.parametrize("m, n, k", [(16, 520, 2056), (9, 4096, 4104)])
def test_both_chunk_lengths_match_float64(monkeypatch, context, stream, pool, rng, unroll, m, n, k) -> None:
    import mircuda.matmul._gemv as gemv

    monkeypatch.setattr(gemv, "unroll_candidates", lambda m, row_tiles=1: (unroll,))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, mc.bf16, None, 1.0, 0.0)
    assert f"MIRCUDA_GEMV_UNROLL={unroll}" in plan.describe()
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("n, k", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("m", [1, 5, 16, 17, 24, 31, 32])
@pytest.mark.parametrize("rows", ["", "rows32_"], ids=["16rows", "32rows"])
def test_forced_row_tilings_match_float64_for_every_m_up_to_32(context, stream, pool, rng, input, output, m, n, k, rows) -> None:
    # the measured table's range (M <= 32; the sweep tries both forms at every M): forced here, alpha and
    # beta, C read and written in place
    name = f"batched_gemv_{rows}{type_name(input)}_{type_name(output or input)}"
    alpha, beta = float(rng.uniform(0.5, 2.0)), float(rng.choice([0.0, 0.75]))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, alpha, beta, kernel=name)
    text = plan.describe()
    assert plan.kernel.name == name and f"MIRCUDA_GEMV_M={m}" in text
    assert ("MIRCUDA_GEMV_ROW_TILES=2" in text) is bool(rows) and f"blocks of {32 if rows else 16} weight rows" in text
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("unroll, row_tiles", [(4, 1), (2, 1), (1, 1), (2, 2), (1, 2)])
@pytest.mark.parametrize("m, n, k", [(32, 4096, 4104), (20, 14336, 264), (32, 48, 8)])
def test_every_chunk_length_and_row_tiling_at_m_32_matches_float64(monkeypatch, context, stream, pool, rng, unroll,
                                                                    row_tiles, m, n, k) -> None:
    import mircuda.matmul._gemv as gemv

    monkeypatch.setattr(gemv, "unroll_candidates", lambda m, row_tiles=1: (unroll,))
    name = "batched_gemv_rows32_bf16_f32" if row_tiles == 2 else "batched_gemv_bf16_f32"
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, mc.bf16, mc.f32, 1.0, 0.0, kernel=name)
    assert f"MIRCUDA_GEMV_UNROLL={unroll}" in plan.describe()
    assert_close(got, want, mag, out)



@pytest.mark.parametrize("m, n, k", [(16, 14336, 4096), (9, 4104, 1032), (16, 48, 8), (2, 520, 2056)])
def test_four_steps_with_two_row_tiles_up_to_m_16_match_float64(monkeypatch, context, stream, pool, rng, m, n, k) -> None:
    # unroll_candidates offers four steps to the 32-row tiling at M <= 16 (the measured table's M = 16 rows):
    # the 238-register kernel, N not a multiple of 32, K not a multiple of a chunk, and K shorter than one step
    import mircuda.matmul._gemv as gemv

    monkeypatch.setattr(gemv, "unroll_candidates", lambda m, row_tiles=1: (4,))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, mc.bf16, None, 1.0, 0.0,
                                    kernel="batched_gemv_rows32_bf16_bf16")
    text = plan.describe()
    assert "MIRCUDA_GEMV_UNROLL=4" in text and "MIRCUDA_GEMV_ROW_TILES=2" in text
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("m", [12, 16])
def test_a_grid_resident_in_one_wave_is_preferred_and_matches_float64(context, stream, pool, rng, m) -> None:
    """N = 26000 at M = 12 / 16 (not in the measured table): 1625 one-warp blocks of 16 rows. On the H200 the
    four-step kernel (162 registers: 12 resident per SM) would take 1.03 waves and the two-step one (M = 12: 96
    registers, 20 per SM; M = 16: 98, 16 per SM) holds them in one, so the plan takes two steps (choose_gemv); the
    device's occupancy query agrees."""
    from mircuda.matmul._vector import blocks_per_sm

    n, k = 26000, 520
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, mc.bf16, None, 1.0, 0.0)
    gemv = plan._nvrtc
    info = context.device_info()
    if info.compute_capability == (9, 0) and info.multiprocessor_count == 132:
        assert "MIRCUDA_GEMV_UNROLL=2" in plan.describe() and gemv.warps == 1, plan.describe()
        assert -(-n // 16) <= 132 * blocks_per_sm(context, gemv.kernel, gemv.warps)
    assert_close(got, want, mag, out)
