"""The integer path of ``fp4_matvec_bf16`` (``decode='dp4a'``: E2M1 -> int8 by PRMT, IDP4A, int32 block sums)
on the GPU: against the float64 reference of the dequantized operands (odd N, K a multiple of 32 but not of 64,
a K of one step and of many, both scale layouts, 4 and 8 rows, 2..4 stages, 1 and 8 warps, poisoned outputs
with a guard band), saturated blocks summed exactly, scales of the whole UE4M3 range, row warps (each warp of a
block its own row block: ``row_warps``) in both plans and from ``@numba.njit``, M = 2..4 activation rows in the
matrix plan, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close
from mircuda.matmul import _fp4_reference as ref
from test_matmul_fp4_gpu import E4M3, Operand, bf16_data, check_guard, poisoned, reference, run_vector

DP4A_SHAPES = [(4096, 4096), (301, 96), (37, 1056), (1, 32), (4097, 160), (300, 14336)]
"""(N, K): odd N and N = 1; 96, 1056 and 160 are multiples of 32 but not of 64; 32 one lane's step; 14336 many
steps per warp."""


@pytest.mark.parametrize("rows, stages", [(4, 2), (4, 3), (8, 2), (4, 4)], ids=str)
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", DP4A_SHAPES, ids=str)
def test_the_dp4a_vector_plan_matches_float64(context, stream, pool, rng, n, k, layout, rows, stages) -> None:
    for warps in (None, 1, 8):
        knobs = {"decode": "dp4a", "rows": rows, "stages": stages}
        if warps is not None:
            knobs["warps"] = warps
        run_vector(context, stream, pool, rng, n, k, "fp4", layout, **knobs)


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", [(301, 96), (300, 14336)], ids=str)
def test_the_dp4a_vector_plan_with_the_l2_prefetch_matches_float64(context, stream, pool, rng, n, k, layout) -> None:
    for rows in (4, 8):
        run_vector(context, stream, pool, rng, n, k, "fp4", layout, decode="dp4a", rows=rows, stages=2, prefetch=True)


@pytest.mark.parametrize("rows, stages", [(4, 2), (8, 3)], ids=str)
def test_saturated_blocks_sum_exactly_with_dp4a(context, stream, pool, rows, stages) -> None:
    """Every code +-6 in both operands with unit scales: each 16-element block's int32 sums reach 16 * 144 (the
    doubled operands), the result is exact in BF16, so any wrong byte of the PRMT table, sign or carry shows."""
    n, k = 24, 4096
    six, minus_six = 0x7, 0xF
    w_codes = np.full((n, k // 2), six | six << 4, np.uint8)
    w_codes[1::2] = minus_six | minus_six << 4
    w_codes[2, : k // 4] = six | minus_six << 4
    w_codes[4] = 0x8 | 0x8 << 4  # negative zeros
    x_codes = np.full((1, k // 2), six | six << 4, np.uint8)
    x_codes[0, k // 8: k // 4] = minus_six | minus_six << 4  # elements K/4 .. K/2 of the activations negative
    unit = np.full(k // 16, 0x38, np.uint8)  # UE4M3 1.0
    y = poisoned(context, stream, pool, n)
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), decode="dp4a", rows=rows,
                                       stages=stages)
    bufs = [upload(context, stream, pool, a) for a in (x_codes.ravel(), unit.view(E4M3), w_codes.ravel(),
                                                        np.tile(unit, n).view(E4M3))]
    plan.execute(stream, bufs[0], bufs[1], bufs[2], bufs[3], y)
    got = check_guard(download(context, stream, y), n).astype(np.float64)
    xv = np.where((np.arange(k) >= k // 4) & (np.arange(k) < k // 2), -6.0, 6.0)
    wv = np.where((np.arange(n) % 2 == 1)[:, None], -6.0, 6.0) * np.ones((1, k))
    wv[2, : k // 2] = np.tile([6.0, -6.0], k // 4)
    wv[4] = 0.0
    want = wv @ xv
    assert np.array_equal(got, want), (got, want)
    for b in bufs:
        b.free(stream)
    y.free(stream)


def test_dp4a_scales_span_the_ue4m3_range(context, stream, pool, rng) -> None:
    """Random codes with block scales from the smallest subnormal UE4M3 (2^-9) to 448 in both operands: the
    scale conversion (cvt.rn.f16x2.e4m3x2 of the two bytes) and the product sa * sb stay exact."""
    n, k = 64, 512
    w_codes = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    x_codes = rng.integers(0, 256, (1, k // 2), dtype=np.uint8)
    w_scales = rng.integers(1, 0x7F, (n, k // 16), dtype=np.uint8)  # 0x01 .. 0x7e: every positive finite UE4M3
    x_scales = rng.integers(1, 0x7F, (1, k // 16), dtype=np.uint8)
    w_scales[0, :] = 0x7E
    x_scales[0, :4] = [0x01, 0x7E, 0x08, 0x38]
    y = poisoned(context, stream, pool, n)
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), decode="dp4a")
    bufs = [upload(context, stream, pool, a) for a in (x_codes.ravel(), x_scales.ravel().view(E4M3),
                                                        w_codes.ravel(), w_scales.ravel().view(E4M3))]
    plan.execute(stream, bufs[0], bufs[1], bufs[2], bufs[3], y)
    got = check_guard(download(context, stream, y), n)
    w64 = ref.dequantize(w_codes, w_scales, n, k, "linear")
    x64 = ref.dequantize(x_codes, x_scales, 1, k, "linear")
    want, mag = reference(x64, w64, 1.0)
    assert_close(got, want[0], mag[0], "bf16")
    for b in bufs:
        b.free(stream)
    y.free(stream)


def test_dp4a_refusals_name_the_knob(context, stream) -> None:
    cases = [
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 48), decode="dp4a"), "decode"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 256), decode="dp4a",
                                             activation="bf16"), "decode"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 256), decode="dp4a",
                                             block_sum="fp16"), "block_sum"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 256), decode="dp4a",
                                             persistent=True), "persistent"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 256), decode="dp4a",
                                             kernel="fp4_mma_bf16"), "decode"),
        (lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(5, 64, 256), decode="dp4a",
                                       kernel="fp4_matvec_bf16"), "decode"),
        (lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(2, 64, 256), decode="dp4a",
                                       kernel="fp4_mma_bf16"), "decode"),
    ]
    for make, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            make()
        assert info.value.argument == argument
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(1, 64, 256), decode="dp4a") as plan:
        text = str(plan.describe())
        assert "IDP4A" in text and "MIRCUDA_FP4_DP4A=1" in text and "MIRCUDA_FP4_STAGES=2" in text  # its default


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", [(301, 4096), (37, 4128), (13, 80), (300, 14336)], ids=str)
def test_the_default_m1_plans_take_dp4a_where_it_applies_and_match_float64(context, stream, pool, rng, n, k,
                                                                           layout) -> None:
    """No knobs: decode='dp4a' with NVFP4 activations and K % 32 == 0 on targets without cvt.rn.f16x2.e2m1x2
    (the H200), 8 rows when K > 4096, 2 stages; K = 80 keeps the word decoder; BF16 activations too. Both plans."""
    from mircuda.matmul._fp4 import default_vector_decode, dp4a_rows, fp4_target

    cc = context.device_info().compute_capability
    arch = fp4_target(cc) or context.device_info().arch
    for activation in ("fp4", "bf16"):
        decode = default_vector_decode(arch, 1, k, activation)
        plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), activation=activation,
                                           scale_layout=layout)
        text = str(plan.describe())
        assert f"decode={decode!r}" in text
        if decode == "dp4a":
            assert f"-D MIRCUDA_FP4_ROWS={dp4a_rows(k)} " in text and "-D MIRCUDA_FP4_STAGES=2" in text
            assert "the default at M <= 2 where it applies" in text and "H200, 2026-12-01" in text
            assert {o.name: o.alignment for o in plan.operands}["x"] == 16
        with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(1, n, k), activation=activation,
                                   scale_layout=layout) as matrix:
            assert f"decode={decode!r}" in str(matrix.describe())
        run_vector(context, stream, pool, rng, n, k, activation, layout)
    if cc == (9, 0):
        assert default_vector_decode(arch, 1, k, "fp4") == ("dp4a" if k % 32 == 0 else "e4m3")


def test_a_given_decoder_overrides_the_dp4a_default(context, stream, pool, rng) -> None:
    n, k = 301, 4096
    for knobs in ({"decode": "pairs"}, {"block_sum": "fp32"}, {"persistent": True}):
        plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), **knobs)
        assert "decode='dp4a'" not in str(plan.describe())
        run_vector(context, stream, pool, rng, n, k, "fp4", "linear", **knobs)


# -- row warps: each warp of a block takes its own row block whole ------------------------------------------
@pytest.mark.parametrize("row_warps", [2, 4, 8])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", [(301, 96), (4097, 160), (1, 32), (300, 14336), (4096, 4096)], ids=str)
def test_row_warps_match_float64(context, stream, pool, rng, n, k, layout, row_warps) -> None:
    """N = 301, 4097, 1 leave the last block's spare warps past N (they store nothing: the guard band shows a
    stray store); 2 and 3 stages, 4 and 8 rows, and the L2 prefetch, whose lines follow each warp's own rows."""
    for rows, stages, prefetch in [(4, 2, None), (8, 2, None), (4, 3, True)]:
        run_vector(context, stream, pool, rng, n, k, "fp4", layout, decode="dp4a", rows=rows, stages=stages,
                   prefetch=prefetch, row_warps=row_warps)
        plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), decode="dp4a", rows=rows,
                                           row_warps=row_warps, scale_layout=layout)
        assert plan.row_warps == row_warps and plan.warps == 1
        assert plan.launch_config.grid == (-(-n // (rows * row_warps)), 1, 1)
        assert plan.launch_config.block == (32 * row_warps, 1, 1)
        text = str(plan.describe())
        assert f"-D MIRCUDA_FP4_ROW_WARPS={row_warps}" in text and f"{row_warps} warps, each taking" in text


def test_large_n_takes_default_row_warps_and_matches_float64(context, stream, pool, rng) -> None:
    """No knobs at N = 14336, K = 4096 on the integer path: a K split does not fit in one wave, so both plans take
    DEFAULT_ROW_WARPS (1792 blocks of 64 threads on an H200) and say why; row_warps=1 keeps one row block per block.
    Numerics of the default against float64 (the guard band catches a stray store)."""
    from mircuda.matmul._fp4 import DEFAULT_ROW_WARPS

    n, k = 14336, 4096
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k))
    if "decode='dp4a'" not in str(plan.describe()):
        pytest.skip("the default decoder here is not dp4a (a target with cvt.rn.f16x2.e2m1x2)")
    if plan.warps == 1 and plan.row_warps == 1:
        pytest.fail(f"one warp per block without row warps: {plan.describe()}")
    if plan.row_warps == DEFAULT_ROW_WARPS:
        assert plan.launch_config.block == (32 * DEFAULT_ROW_WARPS, 1, 1)
        assert "do not fit in one wave of two-warp blocks splitting K" in str(plan.describe())
        with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(1, n, k)) as matrix:
            assert f"-D MIRCUDA_FP4_ROW_WARPS={DEFAULT_ROW_WARPS}" in str(matrix.describe())
    if context.device_info().multiprocessor_count == 132:  # the H200 the default was measured on
        assert plan.row_warps == DEFAULT_ROW_WARPS and plan.launch_config.grid == (1792, 1, 1)
    plain = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), row_warps=1)
    assert plain.row_warps == 1 and "MIRCUDA_FP4_ROW_WARPS" not in str(plain.describe())
    run_vector(context, stream, pool, rng, n, k, "fp4", "linear")
    run_vector(context, stream, pool, rng, n, k, "fp4", "tiled")


def test_row_warps_in_the_matrix_plan_from_numba_njit(context, stream, pool, rng) -> None:
    """With the default decoder where that is dp4a (not on a cc 12.x target with cvt.rn.f16x2.e2m1x2, where
    row_warps alone is refused: decode='dp4a' is then asked for)."""
    numba = pytest.importorskip("numba")
    n, k = 1001, 4128
    default = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k))
    knobs = {} if "decode='dp4a'" in str(default.describe()) else {"decode": "dp4a"}
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a = Operand(context, stream, pool, bf16_data(rng, 1, k), "linear")
    d = poisoned(context, stream, pool, n)
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(1, n, k), row_warps=4, **knobs) as plan:
        assert "-D MIRCUDA_FP4_ROW_WARPS=4" in str(plan.describe()) and "decode='dp4a'" in str(plan.describe())
        execute = plan.numba_execute

        @numba.njit
        def run(s, pa, psa, pb, psb, pd, ga, gb):
            return execute(s, pa, psa, pb, psb, pd, ga, gb, 0.5)

        assert run(stream.handle, a.codes.handle, a.scale_buf.handle, b.codes.handle, b.scale_buf.handle, d.handle,
                   a.global_buf.handle, b.global_buf.handle) == 0
        got = check_guard(download(context, stream, d), n).astype(np.float64)
        want, mag = reference(a.value, b.value, 0.5 * float(a.global_) * float(b.global_))
        assert_close(got, want[0], mag[0], "bf16")
    for buf in (a, b):
        buf.free(stream)
    d.free(stream)


def test_row_warps_refusals_name_the_knob(context, stream) -> None:
    vector, matrix = mc.BlockScaledFp4VectorPlan, mc.BlockScaledFp4Plan
    cases = [
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps=3), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps=16), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps="2"), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps=2.0), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps=True), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps=np.int64(3)), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), decode="dp4a", persistent=True, row_warps=2),
         "persistent"),
        (lambda: matrix(context, stream, mc.DenseMatmulSpec(1, 64, 256), decode="e4m3", row_warps=4), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), decode="e4m3", row_warps=2), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 80), row_warps=2), "row_warps"),  # K % 32 != 0
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), activation="bf16", row_warps=2), "row_warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), decode="dp4a", warps=2, row_warps=2), "warps"),
        (lambda: vector(context, stream, mc.DenseVectorSpec(64, 256), kernel="fp4_mma_bf16", row_warps=2),
         "row_warps"),
        (lambda: matrix(context, stream, mc.DenseMatmulSpec(4, 64, 256), row_warps=2), "row_warps"),
        (lambda: matrix(context, stream, mc.DenseMatmulSpec(32, 64, 256), row_warps=2), "row_warps"),
    ]
    for make, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            make()
        assert info.value.argument == argument, (info.value.argument, argument)
    # row_warps=1 and numpy integers are the default configuration
    plan = vector(context, stream, mc.DenseVectorSpec(64, 256), row_warps=np.int64(1))
    assert plan.row_warps == 1 and "MIRCUDA_FP4_ROW_WARPS" not in str(plan.describe())


# -- the PDL trigger (pdl_trigger) of both FP4 decode kernels -------------------------------------------------
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("trigger", ["early", "late"])
def test_either_pdl_trigger_matches_float64_back_to_back(context, stream, pool, rng, m, trigger) -> None:
    """M = 1 (fp4_matvec_bf16, dp4a) and M = 8 (fp4_mma_bf16), launched twice back to back into the same output
    with different alphas: with either trigger the second launch waits for the first (griddepcontrol.wait), so
    its result stands."""
    n, k = 1001, 4128
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "linear")
    d = poisoned(context, stream, pool, m * n)
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), pdl_trigger=trigger) as plan:
        text = str(plan.describe())
        assert f"MIRCUDA_PDL_TRIGGER_LATE={int(trigger == 'late')}" in text
        if "programmatic dependent launch" in text:
            assert f"({trigger} trigger" in text
        for alpha in (3.0, 0.5):
            plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                         global_b=b.global_buf, alpha=alpha)
    got = check_guard(download(context, stream, d), m * n).astype(np.float64).reshape(m, n)
    want, mag = reference(a.value, b.value, 0.5 * float(a.global_) * float(b.global_))
    assert_close(got, want, mag, "bf16")
    for buf in (a, b):
        buf.free(stream)
    d.free(stream)


def test_a_bad_pdl_trigger_is_refused_by_name(context, stream) -> None:
    for make in (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 256), pdl_trigger="soon"),
                 lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 256), pdl_trigger=0),
                 lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(32, 64, 256), pdl_trigger="early"),
                 # a CUTLASS kernel's name (M <= 16): the knob tunes the NVRTC kernels only, refused before the
                 # library is looked up (so whether it is built does not matter)
                 lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 256),
                                               kernel="cutlass_block_scaled_nvfp4", pdl_trigger="late")):
        with pytest.raises(mc.ContractError) as info:
            make()
        assert info.value.argument == "pdl_trigger"


@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("persistent", [False, True], ids=["blocks", "persistent"])
def test_with_the_early_trigger_each_stage_reads_the_finished_output_of_the_one_before(context, stream, pool, rng, m,
                                                                                       persistent) -> None:
    """A decode chain of three FP4 plans, all with ``pdl_trigger="early"``, each stage's BF16 output the next one's
    activations (NaN-poisoned until written): NVFP4 activations into the default kernel (M = 1: fp4_matvec_bf16
    with dp4a; M = 8: fp4_mma_bf16), then twice BF16 activations into fp4_matvec_bf16 (the word decoder; with
    ``persistent``, the walking blocks). The early trigger lets each next kernel start beside the one before from
    its first instruction, so a read before ``griddepcontrol.wait`` would see the poison or a partial output; the
    back-to-back test above writes one output twice and reads none, which no early read would disturb."""
    d = 2048  # square weights: each output is the next input
    weights = [Operand(context, stream, pool, bf16_data(rng, d, d), "linear") for _ in range(3)]
    x = Operand(context, stream, pool, bf16_data(rng, m, d), "linear")
    outs = [poisoned(context, stream, pool, m * d) for _ in range(3)]
    spec = mc.DenseMatmulSpec(m, d, d)
    first = mc.BlockScaledFp4Plan(context, stream, spec, pdl_trigger="early")
    then = mc.BlockScaledFp4Plan(context, stream, spec, activation="bf16", pdl_trigger="early",
                                 persistent=persistent or None)
    for plan in (first, then):
        text = str(plan.describe())
        assert "MIRCUDA_PDL_TRIGGER_LATE=0" in text, text
        if context.device_info().supports_programmatic_launch:
            assert "(early trigger" in text, text
    first.execute(stream, x.codes, x.scale_buf, weights[0].codes, weights[0].scale_buf, outs[0],
                  global_a=x.global_buf, global_b=weights[0].global_buf)
    for i in (1, 2):
        then.execute(stream, outs[i - 1], None, weights[i].codes, weights[i].scale_buf, outs[i],
                     global_b=weights[i].global_buf)
    got = [check_guard(download(context, stream, out), m * d).astype(np.float64).reshape(m, d) for out in outs]
    want, mag = reference(x.value, weights[0].value, float(x.global_) * float(weights[0].global_))
    assert_close(got[0], want, mag, "bf16")
    for i in (1, 2):  # against the finished output of the stage before, as downloaded
        want, mag = reference(got[i - 1], weights[i].value, float(weights[i].global_))
        assert_close(got[i], want, mag, "bf16")
    for plan in (first, then):
        plan.close()
    for operand in (*weights, x):
        operand.free(stream)
    for out in outs:
        out.free(stream)


def run_dp4a_matrix(context, stream, pool, rng, m, n, k, layout, njit=False, **knobs) -> None:
    """BlockScaledFp4Plan with ``decode='dp4a'`` at M <= 4 (the kernel follows from the decoder) against float64,
    the output poisoned with a guard band; through ``numba_execute`` from ``@numba.njit`` when ``njit``."""
    b = Operand(context, stream, pool, bf16_data(rng, n, k), layout)
    a = Operand(context, stream, pool, bf16_data(rng, m, k), layout)
    d = poisoned(context, stream, pool, m * n)
    alpha = float(rng.uniform(0.5, 2.0))
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout=layout, decode="dp4a",
                               **knobs) as plan:
        text = str(plan.describe())
        assert plan.gemv_kernel == "fp4_matvec_bf16" and "MIRCUDA_FP4_DP4A=1" in text, text
        assert f"-D MIRCUDA_FP4_M={m}" in text, text
        if njit:
            numba = pytest.importorskip("numba")
            execute = plan.numba_execute

            @numba.njit
            def run(s, pa, psa, pb, psb, pd, ga, gb, alpha):
                return execute(s, pa, psa, pb, psb, pd, ga, gb, alpha)

            assert run(stream.handle, a.codes.handle, a.scale_buf.handle, b.codes.handle, b.scale_buf.handle, d.handle,
                       a.global_buf.handle, b.global_buf.handle, alpha) == 0
        else:
            plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                         global_b=b.global_buf, alpha=alpha)
    got = check_guard(download(context, stream, d), m * n).reshape(m, n).astype(np.float64)
    want, mag = reference(a.value, b.value, alpha * float(a.global_) * float(b.global_))
    assert_close(got, want, mag, "bf16")
    for buf in (a, b):
        buf.free(stream)
    d.free(stream)


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", DP4A_SHAPES, ids=str)
def test_dp4a_with_m_activation_rows_matches_float64(context, stream, pool, rng, m, n, k, layout) -> None:
    """Each M-row output of the integer path (activations and weights as signed int8, one IDP4A per four products
    and activation row) against float64: rows 4 and 8, 2 and 3 stages, with and without a K split and row warps."""
    for knobs in ({}, {"rows": 4, "stages": 3}, {"rows": 8, "warps": 8}, {"rows": 4, "warps": 2},
                  {"rows": 4, "row_warps": 2}, {"rows": 8, "row_warps": 4}):
        run_dp4a_matrix(context, stream, pool, rng, m, n, k, layout, **knobs)


@pytest.mark.parametrize("m", [2, 4])
def test_dp4a_with_m_activation_rows_from_numba_njit(context, stream, pool, rng, m) -> None:
    run_dp4a_matrix(context, stream, pool, rng, m, 1001, 4128, "linear", njit=True)
    run_dp4a_matrix(context, stream, pool, rng, m, 300, 14336, "tiled", njit=True, warps=4)


def test_saturated_blocks_sum_exactly_with_m_activation_rows(context, stream, pool) -> None:
    """M = 4 rows of +-6 codes (each row its own sign pattern) with unit scales against +-6 weights: every int32
    block sum is 16 * 144 in magnitude and the result is exact in BF16, for every activation row."""
    m, n, k = 4, 24, 4096
    six, minus_six = 0x7, 0xF
    w_codes = np.full((n, k // 2), six | six << 4, np.uint8)
    w_codes[1::2] = minus_six | minus_six << 4
    x_codes = np.full((m, k // 2), six | six << 4, np.uint8)
    x_codes[1] = minus_six | minus_six << 4
    x_codes[2, : k // 4] = minus_six | minus_six << 4
    x_codes[3] = six | minus_six << 4  # +6, -6 alternating
    unit = np.full(k // 16, 0x38, np.uint8)  # UE4M3 1.0
    d = poisoned(context, stream, pool, m * n)
    bufs = [upload(context, stream, pool, a) for a in (x_codes.ravel(), np.tile(unit, m).view(E4M3), w_codes.ravel(),
                                                        np.tile(unit, n).view(E4M3))]
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), decode="dp4a") as plan:
        plan.execute(stream, bufs[0], bufs[1], bufs[2], bufs[3], d)
    got = check_guard(download(context, stream, d), m * n).reshape(m, n).astype(np.float64)
    xv = np.full((m, k), 6.0)
    xv[1] = -6.0
    xv[2, : k // 2] = -6.0
    xv[3] = np.tile([6.0, -6.0], k // 2)
    wv = np.where((np.arange(n) % 2 == 1)[:, None], -6.0, 6.0) * np.ones((1, k))
    assert np.array_equal(got, xv @ wv.T), (got, xv @ wv.T)
    for b in bufs:
        b.free(stream)
    d.free(stream)
