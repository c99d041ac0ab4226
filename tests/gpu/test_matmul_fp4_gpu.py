"""NVFP4 on the GPU: BlockScaledFp4VectorPlan and BlockScaledFp4Plan against a float64 reference of the
dequantized operands (odd N, K a multiple of 16 but not of 64 or 128, both scale layouts with their
padding, NVFP4 and BF16 activations, poisoned outputs with a guard band), the device quantizer and scale
converters bit for bit against the numpy reference, numba_execute from @njit, and graph capture and
replay with the global scales changed in device memory."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import ACCUMULATION, UNIT_ROUNDOFF, assert_close
from mircuda.matmul import _fp4_reference as ref
from mircuda.matmul._fp4 import DECODES, default_vector_decode

GUARD = 64
"""Elements past the output that the kernels must leave untouched (poisoned before, compared after)."""
E4M3 = ml_dtypes.float8_e4m3fn


def bf16_data(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """Normal values with a per-row magnitude spread over e^-3..e^3, one all-zero block when possible."""
    x = (rng.standard_normal((rows, k)) * np.exp(rng.uniform(-3, 3, (rows, 1)))).astype(ml_dtypes.bfloat16)
    if rows > 1:
        x[1, :16] = 0
    return x


def poisoned(context, stream, pool, count: int) -> mc.DeviceBuffer:
    return upload(context, stream, pool, np.full(count + GUARD, np.nan, np.float32).astype(ml_dtypes.bfloat16))


def check_guard(got: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` outputs; the guard band after them must still be the poison."""
    assert np.isnan(got[count:].astype(np.float32)).all(), "a kernel wrote past the output"
    return got[:count]


class Operand:
    """A quantized operand on the host and the device: codes, scales (in ``layout``), global scale."""

    def __init__(self, context, stream, pool, x: np.ndarray, layout: str) -> None:
        rows, k = x.shape
        self.packed, self.scales, self.global_ = ref.quantize(x, layout=layout)
        self.value = ref.dequantize(self.packed, self.scales, rows, k, layout)  # float64, without the global
        self.codes = upload(context, stream, pool, self.packed.ravel())
        self.scale_buf = upload(context, stream, pool, self.scales.ravel().view(E4M3))
        self.global_buf = upload(context, stream, pool, np.array([self.global_], np.float32))

    def free(self, stream) -> None:
        for b in (self.codes, self.scale_buf, self.global_buf):
            b.free(stream)


def reference(a64: np.ndarray, b64: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    return scale * (a64 @ b64.T), abs(scale) * (np.abs(a64) @ np.abs(b64).T)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float64 -> the nearest BF16 value (ties to even; 8 significant bits) in one rounding, as float64."""
    m, e = np.frexp(x)
    return np.ldexp(np.rint(m * 256.0), e - 8)


def alpha_eff(alpha: float, *globals_: float | None) -> float:
    """The kernels' FP32 ``(alpha * global_a) * global_b`` (absent globals skipped)."""
    scale = np.float32(alpha)
    for g in globals_:
        if g is not None:
            scale = np.float32(scale * np.float32(g))
    return float(scale)


def assert_close_plan(plan: Any, got: np.ndarray, a64: np.ndarray, b64: np.ndarray, alpha: float,
                      global_a: float | None, global_b: float | None) -> None:
    """``got`` (BF16 [M, N]) against float64 ``alpha * global_a * global_b * a64 . b64^T`` of the
    dequantized operands.

    Every path but the portable one with ``epilogue="folded"``: :func:`assert_close` (FP32 accumulation,
    one BF16 rounding at the output). Folded, one operand (A when NVFP4, else B) enters the dense plan as
    ``x_k' = RN_bf16(x_k * alpha_eff) = x_k alpha_eff (1 + d_k)`` with ``|d_k| <= u = 2^-8`` (one
    round-to-nearest to BF16's 8 significant bits), so the sum the dense plan rounds is
    ``sum_k alpha_eff a_k b_k (1 + d_k)``: it differs from the exact one by at most
    ``u * |alpha_eff| * sum_k |a_k b_k| = u * magnitude``, and its FP32 accumulation error is at most
    ``ACCUMULATION * (1 + u) * magnitude`` (the products grew by at most 1 + u). So the bound is
    ``2 u |want| + (ACCUMULATION (1 + u) + u) * magnitude`` (the 2 u |want| also covers alpha_eff's two
    FP32 roundings, 2^-23 relative). Then, tighter: against the float64 product of the folded operand
    rounded as the kernel rounds it (one RN to BF16 of the exact product), the ordinary bound."""
    scale = alpha * (global_a if global_a is not None else 1.0) * (global_b if global_b is not None else 1.0)
    want, mag = reference(a64, b64, scale)
    if getattr(plan, "epilogue", None) != "folded":
        assert_close(got, want, mag, "bf16")
        return
    u = UNIT_ROUNDOFF["bf16"]
    assert_close(got, want, mag * (ACCUMULATION * (1 + u) + u) / ACCUMULATION, "bf16")
    fold = alpha_eff(alpha, global_a, global_b)
    if plan.activation == "fp4":
        a64 = round_bf16(a64 * fold)
    else:
        b64 = round_bf16(b64 * fold)
    want, mag = reference(a64, b64, 1.0)
    assert_close(got, want, mag, "bf16")


VECTOR_SHAPES = [(4096, 4096), (37, 1040), (1, 48), (13, 80), (4097, 4112), (300, 96), (1000, 2064)]
"""(N, K): odd N; K = 1040, 80, 4112, 2064 are multiples of 16 but not of 32 (8-byte loads); 48 and 96 of
16/32 but not of 64; 4096 of everything."""


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("activation", ["fp4", "bf16"])
@pytest.mark.parametrize("n, k", VECTOR_SHAPES, ids=str)
def test_the_vector_plan_matches_float64(context, stream, pool, rng, n, k, activation, layout) -> None:
    w = Operand(context, stream, pool, bf16_data(rng, n, k), layout)
    x_host = bf16_data(rng, 1, k)
    alpha = float(rng.uniform(0.5, 2.0))
    y = poisoned(context, stream, pool, n)
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), activation=activation,
                                       scale_layout=layout)
    if activation == "fp4":
        x = Operand(context, stream, pool, x_host, layout)
        plan.execute(stream, x.codes, x.scale_buf, w.codes, w.scale_buf, y, global_x=x.global_buf,
                     global_w=w.global_buf, alpha=alpha)
        x64, scale = x.value, alpha * float(x.global_) * float(w.global_)
    else:
        bx = upload(context, stream, pool, x_host.ravel())
        plan.execute(stream, bx, None, w.codes, w.scale_buf, y, global_w=w.global_buf, alpha=alpha)
        x64, scale = x_host.astype(np.float64), alpha * float(w.global_)
    got = check_guard(download(context, stream, y), n)
    want, mag = reference(x64, w.value, scale)
    assert_close(got, want[0], mag[0], "bf16")
    text = plan.describe()
    assert "fp4_matvec_bf16" in text and ("16-byte" if k % 32 == 0 else "8-byte") in text
    if context.device_info().compute_capability == (9, 0):
        decode = default_vector_decode("sm_90", 1, k, activation)  # dp4a with NVFP4 activations and K % 32 == 0
        assert f"decode={decode!r}" in text and (decode == "dp4a") == ("IDP4A" in text)
        assert ("cvt.rn.f16x2.e2m1x2 needs" in text) == (decode != "dp4a")
    w.free(stream)
    y.free(stream)
    if activation == "fp4":
        x.free(stream)
    else:
        bx.free(stream)


MATRIX_KERNELS = [None, "fp4_matvec_bf16", "fp4_mma_bf16"]
"""BlockScaledFp4Plan(kernel=...) for M <= 16: the default (:func:`expected_kernel`: fp4_mma_bf16 for 2 <= M <= 16
with NVFP4 activations but M = 2 on the integer path, else fp4_matvec_bf16) and each NVRTC kernel forced."""


@pytest.mark.parametrize("kernel", MATRIX_KERNELS, ids=str)
@pytest.mark.parametrize("m", [2, 3, 8, 16])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("activation", ["fp4", "bf16"])
@pytest.mark.parametrize("n, k", [(4096, 4096), (37, 1040), (131, 80), (33, 160), (4097, 96)], ids=str)
def test_the_matrix_plan_decode_kernel_matches_float64(context, stream, pool, rng, m, n, k, activation, layout,
                                                       kernel) -> None:
    """K = 1040 and 80: multiples of 16, not 32 (8-byte loads); 160 and 96: of 32, not 64 (16-byte loads)."""
    if kernel == "fp4_mma_bf16" and activation == "bf16":
        with pytest.raises(mc.ContractError) as info:
            mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), activation=activation,
                                  scale_layout=layout, kernel=kernel)
        assert info.value.argument == "kernel"
        return
    run_matrix(context, stream, pool, rng, m, n, k, activation, layout, expect_path="gemv", kernel=kernel)


@pytest.mark.parametrize("m", [17, 64, 130])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("activation", ["fp4", "bf16"])
@pytest.mark.parametrize("n, k", [(1024, 1024), (37, 1040), (256, 4112)], ids=str)
def test_the_portable_path_matches_float64(context, stream, pool, rng, m, n, k, activation, layout) -> None:
    try:
        lib = mc.matmul.load_library()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    cc = context.device_info().compute_capability
    if (activation, layout) == ("fp4", "tiled") and k % 32 == 0 and any(x.runs_on(cc) for x in lib.block_scaled_kernels):
        pytest.skip("runs the SM120 CUTLASS path here (tests/gpu/test_matmul_fp4_cutlass_gpu.py)")
    run_matrix(context, stream, pool, rng, m, n, k, activation, layout, expect_path="decode+dense")


def portable_or_skip(context, k: int, activation: str, layout: str) -> None:
    """Skips where the CUTLASS library is missing or the SM120 block-scaled kernels take the plan."""
    try:
        lib = mc.matmul.load_library()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    cc = context.device_info().compute_capability
    if (activation, layout) == ("fp4", "tiled") and k % 32 == 0 and any(x.runs_on(cc) for x in lib.block_scaled_kernels):
        pytest.skip("runs the SM120 CUTLASS path here (tests/gpu/test_matmul_fp4_cutlass_gpu.py)")


@pytest.mark.parametrize("epilogue", ["folded", "exact"])
@pytest.mark.parametrize("m", [17, 33, 200])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("activation", ["fp4", "bf16"])
@pytest.mark.parametrize("n, k", [(37, 1040), (1001, 96), (255, 4112), (4099, 4096)], ids=str)
def test_the_portable_path_epilogues_match_float64(context, stream, pool, rng, m, n, k, activation, layout,
                                                   epilogue) -> None:
    """Odd N; K = 1040 and 4112 multiples of 16 but not of 32, 96 of 32 not of 64 (several decode blocks
    per row, partial last decode block, tiled scale padding)."""
    portable_or_skip(context, k, activation, layout)
    run_matrix(context, stream, pool, rng, m, n, k, activation, layout, expect_path="decode+dense",
               epilogue=epilogue)


def expected_kernel(m: int, activation: str, kernel: str | None, k: int, context: mc.Context) -> str:
    """The default NVRTC kernel: the CUDA-core one at M = 1 and with BF16 activations; its integer path also at
    M = 2 where that applies (K % 32 == 0, a target without the E2M1 conversion: cc < 10); else tensor cores."""
    if kernel is not None:
        return kernel
    integer_m2 = m == 2 and k % 32 == 0 and context.device_info().compute_capability[0] < 10
    return "fp4_mma_bf16" if m >= 2 and activation == "fp4" and not integer_m2 else "fp4_matvec_bf16"


def run_matrix(context, stream, pool, rng, m, n, k, activation, layout, expect_path, kernel=None,
               epilogue=None) -> None:
    b = Operand(context, stream, pool, bf16_data(rng, n, k), layout)
    a_host = bf16_data(rng, m, k)
    alpha = float(rng.uniform(0.5, 2.0))
    d = poisoned(context, stream, pool, m * n)
    knobs = {} if epilogue is None else {"epilogue": epilogue}
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), activation=activation,
                                 scale_layout=layout, kernel=kernel, **knobs)
    assert plan.path == expect_path, plan.describe()
    if expect_path == "decode+dense":
        assert plan.epilogue == (epilogue or "folded") and f"epilogue='{plan.epilogue}'" in plan.describe()
        assert (plan._c32 is None) is (plan.epilogue == "folded")
    if expect_path == "gemv":
        want_kernel = expected_kernel(m, activation, kernel, k, context)
        assert plan.gemv_kernel == want_kernel and f"kernel {want_kernel}" in plan.describe()
    if activation == "fp4":
        a = Operand(context, stream, pool, a_host, layout)
        plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                     global_b=b.global_buf, alpha=alpha)
        a64, ga = a.value, float(a.global_)
    else:
        ba = upload(context, stream, pool, a_host.ravel())
        plan.execute(stream, ba, None, b.codes, b.scale_buf, d, global_b=b.global_buf, alpha=alpha)
        a64, ga = a_host.astype(np.float64), None
    got = check_guard(download(context, stream, d), m * n).reshape(m, n)
    assert_close_plan(plan, got, a64, b.value, alpha, ga, float(b.global_))
    assert ("DenseMatmulPlan" in plan.describe()) is (expect_path == "decode+dense")
    plan.close()
    b.free(stream)
    d.free(stream)
    if activation == "fp4":
        a.free(stream)
    else:
        ba.free(stream)


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("rows, k", [(1, 16), (130, 80), (257, 4112), (64, 4096)], ids=str)
def test_the_quantizer_matches_the_numpy_reference_bit_for_bit(context, stream, pool, rng, rows, k, given,
                                                               layout) -> None:
    x = bf16_data(rng, rows, k)
    given_value = np.float32(rng.uniform(1e-4, 1e-2)) if given else None
    packed, scales, g = ref.quantize(x, global_value=given_value, layout=layout)
    quantizer = mc.Fp4Quantizer(context, stream, rows, k, layout)
    bx = upload(context, stream, pool, x.ravel())
    bq = upload(context, stream, pool, np.full(rows * k // 2, 0xEE, np.uint8))
    bs = upload(context, stream, pool, np.full(quantizer.scale_bytes, 0xFF, np.uint8).view(E4M3))  # padding too
    bg = upload(context, stream, pool, np.array([np.nan], np.float32))
    bgi = upload(context, stream, pool, np.array([given_value if given else np.nan], np.float32))
    quantizer.execute(stream, bx, bq, bs, global_out=bg, global_in=bgi if given else None)
    assert (download(context, stream, bq) == packed.ravel()).all()
    assert (download(context, stream, bs).view(np.uint8) == scales.ravel()).all()
    assert download(context, stream, bg)[0].view(np.uint32) == np.float32(g).view(np.uint32)
    # A second run reuses the amax workspace (reset on the device): the same bits.
    quantizer.execute(stream, bx, bq, bs, global_out=bg, global_in=bgi if given else None)
    assert (download(context, stream, bq) == packed.ravel()).all()
    quantizer.close()
    for buf in (bx, bq, bs, bg, bgi):
        buf.free(stream)


@pytest.mark.parametrize("rows, k", [(1, 16), (130, 80), (256, 128), (300, 4112)], ids=str)
def test_the_scale_converters_match_the_numpy_reference_bit_for_bit(context, stream, pool, rng, rows, k) -> None:
    lin = rng.integers(1, 0x7F, (rows, k // 16), dtype=np.uint8)
    conv = mc.Fp4ScaleConverter(context, stream, rows, k)
    blin = upload(context, stream, pool, lin.ravel().view(E4M3))
    btiled = upload(context, stream, pool, np.full(ref.scale_bytes(rows, k, "tiled"), 0xFF, np.uint8).view(E4M3))
    back = upload(context, stream, pool, np.zeros(lin.size, np.uint8).view(E4M3))
    conv.to_tiled(stream, blin, btiled)
    assert (download(context, stream, btiled).view(np.uint8) == ref.scales_to_tiled(lin)).all()  # padding zeroed
    conv.to_linear(stream, btiled, back)
    assert (download(context, stream, back).view(np.uint8) == lin.ravel()).all()
    for buf in (blin, btiled, back):
        buf.free(stream)


def test_operands_are_checked_before_anything_is_enqueued(context, stream, pool, rng) -> None:
    n, k = 130, 80
    w = Operand(context, stream, pool, bf16_data(rng, n, k), "tiled")
    x = Operand(context, stream, pool, bf16_data(rng, 1, k), "tiled")
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), scale_layout="tiled")
    y = poisoned(context, stream, pool, n)
    short = pool.allocate(E4M3, stream, n * k // 16)  # the linear size: the tiled padding is missing
    cases = [({"w_scales": short}, "w_scales"), ({"x_scales": None}, "x_scales"),
             ({"global_w": x.codes}, "global_w"), ({"w": x.codes}, "w")]
    for override, argument in cases:
        args = {"x": x.codes, "x_scales": x.scale_buf, "w": w.codes, "w_scales": w.scale_buf, "y": y}
        kw = {"global_x": x.global_buf, "global_w": w.global_buf}
        for key, value in override.items():
            (args if key in args else kw)[key] = value
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, args["x"], args["x_scales"], args["w"], args["w_scales"], args["y"], **kw)
        assert info.value.argument == argument
    assert np.isnan(download(context, stream, y).astype(np.float32)).all()  # nothing ran
    for buf in (y, short):
        buf.free(stream)
    w.free(stream)
    x.free(stream)


@pytest.mark.parametrize("m, kernel, epilogue", [(1, None, None), (4, None, None), (4, "fp4_matvec_bf16", None),
                                                 (16, None, None), (64, None, "folded"), (64, None, "exact")],
                         ids=str)
def test_plans_run_from_numba_njit(context, stream, pool, rng, m, kernel, epilogue) -> None:
    numba = pytest.importorskip("numba")
    n, k = 1000, 1040
    if m > 16:
        try:
            mc.matmul.load_library()
        except mc.CutlassNotFound as exc:
            pytest.skip(str(exc))
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "linear")
    knobs = {} if epilogue is None else {"epilogue": epilogue}
    plan: Any = (mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k)) if m == 1 else
                 mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=kernel, **knobs))
    if 1 < m <= 16:
        assert plan.gemv_kernel == expected_kernel(m, "fp4", kernel, k, context)
    outs = [poisoned(context, stream, pool, m * n) for _ in range(2)]
    execute = plan.numba_execute

    @numba.njit
    def loop(s, pa, psa, pb, psb, ds, ga, gb):
        status = 0
        for i in range(len(ds)):
            status |= execute(s, pa, psa, pb, psb, ds[i], ga, gb, 1.0 + i)
        return status

    ds = np.array([o.handle for o in outs], np.uint64)
    assert loop(stream.handle, a.codes.handle, a.scale_buf.handle, b.codes.handle, b.scale_buf.handle, ds,
                a.global_buf.handle, b.global_buf.handle) == 0
    assert execute(stream.handle + 1, a.codes.handle, 0, b.codes.handle, 0, outs[0].handle, 0, 0, 1.0) != 0
    for i, out in enumerate(outs):
        got = check_guard(download(context, stream, out), m * n).reshape(m, n)
        assert_close_plan(plan, got, a.value, b.value, 1.0 + i, float(a.global_), float(b.global_))
    if m > 1:
        plan.close()
    for buf in outs:
        buf.free(stream)
    a.free(stream)
    b.free(stream)


def replay_with_new_global_a(context, stream, graph, plan, a, b, d, m, n, *, alpha: float) -> float:
    """Replays ``graph`` twice, staging a new ``global_a`` (the operand's, then three times it) in device memory
    before each replay, and checks ``d`` against float64 with the value the replay read; returns the last one."""
    ga = float(a.global_)
    for ga in (float(a.global_), float(a.global_) * 3.0):
        staging = context.allocate_pinned(mc.f32, 1)
        staging.write_prefix(np.array([ga], np.float32))
        stream.copy_to_device(staging, a.global_buf)
        graph.launch(stream)
        got = check_guard(download(context, stream, d), m * n).reshape(m, n)
        assert_close_plan(plan, got, a.value, b.value, alpha, float(np.float32(ga)), float(b.global_))
    return ga


@pytest.mark.parametrize("m, kernel", [(1, None), (8, None), (8, "fp4_matvec_bf16"), (3, None), (64, None)],
                         ids=str)
def test_a_captured_graph_reads_the_global_scales_when_it_runs(context, stream, pool, rng, m, kernel) -> None:
    n, k = 520, 2064
    if m > 16:
        try:
            mc.matmul.load_library()
        except mc.CutlassNotFound as exc:
            pytest.skip(str(exc))
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "tiled")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "tiled")
    d = poisoned(context, stream, pool, m * n)
    if m == 1:
        plan: Any = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), scale_layout="tiled")
        run = lambda _: plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d,  # noqa: E731
                                     global_x=a.global_buf, global_w=b.global_buf, alpha=0.5)
    else:
        plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout="tiled",
                                     kernel=kernel)
        if m <= 16:
            assert plan.gemv_kernel == expected_kernel(m, "fp4", kernel, k, context)
        run = lambda _: plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d,  # noqa: E731
                                     global_a=a.global_buf, global_b=b.global_buf, alpha=0.5)
    graph = stream.capture((a.codes, a.scale_buf, b.codes, b.scale_buf, d, a.global_buf, b.global_buf), run)
    replay_with_new_global_a(context, stream, graph, plan, a, b, d, m, n, alpha=0.5)
    graph.close()
    if m > 1:
        plan.close()
    d.free(stream)
    a.free(stream)
    b.free(stream)


@pytest.mark.parametrize("epilogue", ["folded", "exact"])
@pytest.mark.parametrize("activation", ["fp4", "bf16"])
def test_a_captured_portable_plan_follows_the_global_scales(context, stream, pool, rng, activation, epilogue) -> None:
    """M = 33, odd N, linear scales: between replays global_b (and global_a for NVFP4 activations) change in
    device memory; folded, they reach the operand decode (fp4_decode_scaled_bf16 reads them when it runs)."""
    m, n, k = 33, 131, 1040
    portable_or_skip(context, k, activation, "linear")
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a_host = bf16_data(rng, m, k)
    a = Operand(context, stream, pool, a_host, "linear") if activation == "fp4" else None
    ba = upload(context, stream, pool, a_host.ravel()) if a is None else None
    d = poisoned(context, stream, pool, m * n)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), activation=activation,
                                 epilogue=epilogue)
    assert plan.path == "decode+dense" and plan.epilogue == epilogue
    if a is not None:
        graph = stream.capture((a.codes, a.scale_buf, b.codes, b.scale_buf, d, a.global_buf, b.global_buf),
                               lambda _: plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d,
                                                      global_a=a.global_buf, global_b=b.global_buf, alpha=0.75))
    else:
        graph = stream.capture((ba, b.codes, b.scale_buf, d, b.global_buf),
                               lambda _: plan.execute(stream, ba, None, b.codes, b.scale_buf, d,
                                                      global_b=b.global_buf, alpha=0.75))
    staging = context.allocate_pinned(mc.f32, 1)
    for factor_a, factor_b in ((1.0, 1.0), (3.0, 0.1), (0.37, 5.0)):
        gb = float(np.float32(float(b.global_) * factor_b))
        staging.write_prefix(np.array([gb], np.float32))
        stream.copy_to_device(staging, b.global_buf)
        ga = None
        if a is not None:
            ga = float(np.float32(float(a.global_) * factor_a))
            stream.synchronize()
            staging.write_prefix(np.array([ga], np.float32))
            stream.copy_to_device(staging, a.global_buf)
        stream.synchronize()
        graph.launch(stream)
        got = check_guard(download(context, stream, d), m * n).reshape(m, n)
        a64 = a.value if a is not None else a_host.astype(np.float64)
        assert_close_plan(plan, got, a64, b.value, 0.75, ga, gb)
    graph.close()
    plan.close()
    d.free(stream)
    b.free(stream)
    if a is not None:
        a.free(stream)
    else:
        ba.free(stream)


# -- the decoders of fp4_common.cuh (MIRCUDA_FP4_DECODE) and the kernels' knobs ---------------------------
PROBE = """
extern "C" __global__ void fp4_decode_probe(unsigned* out, const unsigned* words, int n, int halves) {
    fp4::decode_table_fill();  // block-wide, before any lookup
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned h[4];
        if (halves) {  // fp4::decode_half, one half2 at a time (the grouped mma kernel's form)
            h[0] = fp4::decode_half(words[i], 0);
            h[1] = fp4::decode_half(words[i], 1);
            h[2] = fp4::decode_half(words[i], 2);
            h[3] = fp4::decode_half(words[i], 3);
        } else {
            fp4::decode_word(words[i], h);
        }
        for (int j = 0; j < 4; ++j) out[4 * i + j] = h[j];
    }
}
"""


def skip_unless_decoder_runs(context, decode: str) -> None:
    if decode == "e4m3" and context.device_info().compute_capability < (8, 9):
        pytest.skip("cvt.rn.f16x2.e4m3x2 needs cc >= 8.9")


@pytest.mark.parametrize("halves", [False, True], ids=["decode_word", "decode_half"])
@pytest.mark.parametrize("decode", DECODES)
def test_every_decoder_decodes_every_word_on_the_device_as_the_numpy_emulation(context, stream, pool, decode,
                                                                              halves) -> None:
    """fp4::decode_word (and fp4::decode_half, its halves one at a time) compiled by NVRTC for this device (the
    e4m3 decoder's cvt and the table's shared memory run here, not in the emulation), checked against
    tests/test_matmul_fp4_decode.py's emulation, which is itself checked against the E2M1 values."""
    from importlib import resources

    from tests.test_matmul_fp4_decode import all_words, decode_word

    skip_unless_decoder_runs(context, decode)
    header = resources.files("mircuda").joinpath("cuda_src/fp4_common.cuh").read_text()
    source = mc.CudaSource(header + PROBE, "fp4_decode_probe.cu")
    kernel = mc.Compiler(context).compile(source, mc.CompileOptions(
        defines={"MIRCUDA_FP4_DECODE": DECODES.index(decode)})).kernel(mc.cuda_export(
            "fp4_decode_probe", out=mc.Out[mc.DeviceBuffer[mc.u32]], words=mc.In[mc.DeviceBuffer[mc.u32]], n=mc.i32,
            halves=mc.i32))
    words = all_words()
    bw = upload(context, stream, pool, words)
    out = upload(context, stream, pool, np.full(4 * words.size, 0xDEADBEEF, np.uint32))
    kernel.launch(stream, mc.LaunchConfig((-(-words.size // 256),), (256,)), out, bw, words.size, int(halves))
    got = download(context, stream, out).reshape(-1, 4)
    assert np.array_equal(got, decode_word(decode, words))
    out.free(stream)
    bw.free(stream)


KNOB_SHAPES = [(4096, 4096), (37, 1040), (301, 96)]
"""(N, K): odd N; 1040 a multiple of 16 not 32 (8-byte loads); 96 of 32 not 64 (16-byte loads)."""


@pytest.mark.parametrize("block_sum", ["fp16", "fp32"])
@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", KNOB_SHAPES, ids=str)
def test_the_vector_plan_matches_float64_with_every_decoder(context, stream, pool, rng, n, k, layout, decode,
                                                            block_sum) -> None:
    skip_unless_decoder_runs(context, decode)
    for activation in ("fp4", "bf16"):
        if activation == "bf16" and block_sum == "fp16":
            with pytest.raises(mc.ContractError) as info:
                mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), activation=activation,
                                            scale_layout=layout, decode=decode, block_sum=block_sum)
            assert info.value.argument == "block_sum"
            continue
        run_vector(context, stream, pool, rng, n, k, activation, layout, decode=decode, block_sum=block_sum)


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("n, k", [(37, 1040), (300, 14336)], ids=str)
def test_the_vector_plan_matches_float64_with_every_row_count_stage_count_and_the_mma_kernel(
        context, stream, pool, rng, n, k, decode, rows, stages) -> None:
    """Warps 1 and 8 too: the ring's steps per warp run from many (K = 14336, one warp) to fewer than the ring."""
    skip_unless_decoder_runs(context, decode)
    run_vector(context, stream, pool, rng, n, k, "fp4", "tiled", decode=decode, rows=rows, stages=stages, warps=1)
    run_vector(context, stream, pool, rng, n, k, "fp4", "linear", decode=decode, rows=rows, stages=stages, warps=8)
    # M = 1 on the tensor-core kernel (16 or 32 rows per block)
    run_vector(context, stream, pool, rng, n, k, "fp4", "linear", decode=decode, kernel="fp4_mma_bf16",
               rows=4 * rows, stages=stages)


@pytest.mark.parametrize("prefetch, persistent", [(True, False), (False, True), (True, True)], ids=str)
@pytest.mark.parametrize("warps", [1, 8])
@pytest.mark.parametrize("rows, stages", [(4, 2), (4, 3), (8, 4)], ids=str)
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", [(37, 1040), (301, 96), (300, 14336), (40000, 256)], ids=str)
def test_the_vector_plan_with_the_l2_prefetch_or_the_persistent_grid_matches_float64(
        context, stream, pool, rng, n, k, layout, rows, stages, warps, prefetch, persistent) -> None:
    """prefetch=True: L2 prefetches of each warp's ring prologue and first scale line before
    griddepcontrol.wait; persistent=True: one wave of blocks walking the row blocks, the ring crossing them
    (N = 40000: many row blocks per block; N = 37: fewer row blocks than SMs); 8- and 16-byte loads, 4 and 8
    rows, fewer steps than the ring, both layouts, NVFP4 and BF16 activations."""
    decode = "e4m3" if context.device_info().compute_capability >= (8, 9) else "pairs"
    knobs = dict(decode=decode, rows=rows, stages=stages, warps=warps, prefetch=prefetch, persistent=persistent)
    run_vector(context, stream, pool, rng, n, k, "fp4", layout, **knobs)
    run_vector(context, stream, pool, rng, n, k, "bf16", layout, block_sum="fp32", **knobs)


@pytest.mark.parametrize("name", ["prefetch", "persistent"])
def test_the_flag_knobs_are_the_cuda_core_kernels_and_take_booleans(context, stream, name) -> None:
    for kw in ({name: 1}, {name: "yes"}, {name: True, "kernel": "fp4_mma_bf16"}):
        with pytest.raises(mc.ContractError) as info:
            mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 256), **kw)
        assert info.value.argument == name
    with pytest.raises(mc.ContractError) as info:  # M = 4 runs the tensor-core kernel by default
        mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 256), **{name: True})
    assert info.value.argument == name
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 256), kernel="fp4_matvec_bf16",
                               **{name: True}) as plan:
        assert ("L2 prefetch" if name == "prefetch" else "persistent blocks (one wave)") in plan.describe()


@pytest.mark.parametrize("m", [2, 5, 16])
def test_the_persistent_grid_runs_m_up_to_16_and_stays_within_one_wave(context, stream, pool, rng, m) -> None:
    n, k = 40000, 512  # 10000 row blocks: more than one wave of any block size, so each block walks several
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "linear")
    d = poisoned(context, stream, pool, m * n)
    with mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel="fp4_matvec_bf16",
                               persistent=True) as plan:
        info = context.device_info()
        grid = plan._gemv.config.grid[0]
        assert grid <= info.multiprocessor_count * 32 and grid < -(-n // plan._gemv.rows)
        plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                     global_b=b.global_buf, alpha=0.5)
    got = check_guard(download(context, stream, d), m * n).reshape(m, n)
    want, mag = reference(a.value, b.value, 0.5 * float(a.global_) * float(b.global_))
    assert_close(got, want, mag, "bf16")
    for x in (a, b):
        x.free(stream)
    d.free(stream)


def run_vector(context, stream, pool, rng, n, k, activation, layout, **knobs) -> None:
    w = Operand(context, stream, pool, bf16_data(rng, n, k), layout)
    x_host = bf16_data(rng, 1, k)
    alpha = float(rng.uniform(0.5, 2.0))
    y = poisoned(context, stream, pool, n)
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), activation=activation,
                                       scale_layout=layout, **knobs)
    text = plan.describe()
    assert f"kernel {knobs.get('kernel', 'fp4_matvec_bf16')}" in text
    if "decode" in knobs:
        assert f"decode={knobs['decode']!r}" in text
    if "block_sum" in knobs:
        assert f"block_sum={knobs['block_sum']!r}" in text
    if "stages" in knobs:
        assert f"-D MIRCUDA_FP4_STAGES={knobs['stages']}" in text
    if "warps" in knobs:
        assert f"x {knobs['warps']} warp(s)" in text
    assert ("L2 prefetch" in text) == bool(knobs.get("prefetch"))
    assert ("persistent blocks" in text) == bool(knobs.get("persistent"))
    if activation == "fp4":
        x = Operand(context, stream, pool, x_host, layout)
        plan.execute(stream, x.codes, x.scale_buf, w.codes, w.scale_buf, y, global_x=x.global_buf,
                     global_w=w.global_buf, alpha=alpha)
        x64, scale = x.value, alpha * float(x.global_) * float(w.global_)
    else:
        bx = upload(context, stream, pool, x_host.ravel())
        plan.execute(stream, bx, None, w.codes, w.scale_buf, y, global_w=w.global_buf, alpha=alpha)
        x64, scale = x_host.astype(np.float64), alpha * float(w.global_)
    got = check_guard(download(context, stream, y), n)
    want, mag = reference(x64, w.value, scale)
    assert_close(got, want[0], mag[0], "bf16")
    w.free(stream)
    y.free(stream)
    (x.free(stream) if activation == "fp4" else bx.free(stream))


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("m, n, k", [(4, 64, 4096), (16, 40, 4160)], ids=str)
def test_the_mma_kernel_keeps_the_products_of_the_smallest_scales_exact(context, stream, pool, rng, m, n, k, decode,
                                                                        layout) -> None:
    """Every scale byte of both operands subnormal UE4M3 (0x01..0x07: 2^-9..7 x 2^-9): the decoded FP16 operands
    q s 2^-L (and q s 2^-(L+8) where the kernel takes the scales shifted) are FP16 subnormals down to 2^-24, which
    an FP16 multiply or the tensor cores must keep, not flush: flushed, the outputs would be zero. K = 4096 with
    full warp steps, 4160 without."""
    skip_unless_decoder_runs(context, decode)
    kb = k // 16
    packed_b = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    packed_a = rng.integers(0, 256, (m, k // 2), dtype=np.uint8)
    sb_lin = rng.integers(1, 8, (n, kb), dtype=np.uint8)
    sa_lin = rng.integers(1, 8, (m, kb), dtype=np.uint8)
    b64 = ref.dequantize(packed_b, sb_lin, n, k)
    a64 = ref.dequantize(packed_a, sa_lin, m, k)
    bufs = [upload(context, stream, pool, x.ravel()) for x in (packed_a, packed_b)]
    scales = [upload(context, stream, pool, (ref.scales_to_tiled(x) if layout == "tiled" else x.ravel()).view(E4M3))
              for x in (sa_lin, sb_lin)]
    d = poisoned(context, stream, pool, m * n)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout=layout,
                                 kernel="fp4_mma_bf16", decode=decode)
    plan.execute(stream, bufs[0], scales[0], bufs[1], scales[1], d)
    got = check_guard(download(context, stream, d), m * n).astype(np.float64).reshape(m, n)
    want, mag = reference(a64, b64, 1.0)
    assert np.abs(want).max() > 0 and np.count_nonzero(got) > 0.9 * got.size
    assert_close(got, want, mag, "bf16")
    for b in (*bufs, *scales, d):
        b.free(stream)


@pytest.mark.parametrize("warps", [3, 5, 6, 7])
@pytest.mark.parametrize("m, n, k", [(4, 300, 4096), (16, 37, 14336), (8, 4097, 96)], ids=str)
def test_the_mma_kernel_matches_float64_with_any_warp_count(context, stream, pool, rng, m, n, k, warps) -> None:
    """MMA_WARPS: fp4_mma_bf16's warps take K steps w, w + warps, ... (counts that do not divide the steps, more
    warps than steps at K = 96) and meet in shared memory."""
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "linear")
    d = poisoned(context, stream, pool, m * n)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel="fp4_mma_bf16", warps=warps)
    assert f"x {warps} warp(s) splitting K" in plan.describe()
    plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf, global_b=b.global_buf)
    got = check_guard(download(context, stream, d), m * n).astype(np.float64).reshape(m, n)
    assert_close_plan(plan, got, a.value, b.value, 1.0, float(a.global_), float(b.global_))
    for x in (a, b):
        x.free(stream)
    d.free(stream)


@pytest.mark.parametrize("split_k, warps", [(2, 4), (3, 2), (4, 1), (2, 3)], ids=str)
@pytest.mark.parametrize("m, n, k, layout", [(4, 300, 4096, "linear"), (16, 37, 14336, "tiled"),
                                             (8, 4097, 96, "linear"), (3, 520, 2064, "tiled")], ids=str)
def test_the_mma_kernel_matches_float64_with_clusters_splitting_k(context, stream, pool, rng, m, n, k, layout,
                                                                   split_k, warps) -> None:
    """split_k (cc >= 9.0): a cluster of split_k blocks takes one row block's K steps in turn (blocks with no step at
    K = 96, steps that do not divide evenly, partial steps at K = 2064), and ranks 1.. add their sums into rank 0's
    shared memory; odd N leaves the last row block partial."""
    if context.device_info().compute_capability < (9, 0):
        pytest.skip("thread block clusters need cc >= 9.0")
    b = Operand(context, stream, pool, bf16_data(rng, n, k), layout)
    a = Operand(context, stream, pool, bf16_data(rng, m, k), layout)
    d = poisoned(context, stream, pool, m * n)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout=layout,
                                 kernel="fp4_mma_bf16", warps=warps, split_k=split_k)
    text = plan.describe()
    assert f"in clusters of {split_k} blocks per row block" in text and f"-D MIRCUDA_FP4_SPLIT_K={split_k}" in text
    assert f"{-(-n // 32) * split_k} blocks of 32 weight rows x {warps} warp(s)" in text
    plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf, global_b=b.global_buf)
    got = check_guard(download(context, stream, d), m * n).astype(np.float64).reshape(m, n)
    assert_close_plan(plan, got, a.value, b.value, 1.0, float(a.global_), float(b.global_))
    plan.close()
    for x in (a, b):
        x.free(stream)
    d.free(stream)


def test_a_split_mma_kernel_replays_in_a_graph_and_runs_from_numba(context, stream, pool, rng) -> None:
    """The cluster shape is the kernel's own (__cluster_dims__): a graph node and the njit executor launch it as
    the plan does; between replays the global scale changes in device memory."""
    if context.device_info().compute_capability < (9, 0):
        pytest.skip("thread block clusters need cc >= 9.0")
    numba = pytest.importorskip("numba")
    m, n, k = 8, 1000, 4096
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "linear")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "linear")
    d = poisoned(context, stream, pool, m * n)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel="fp4_mma_bf16", split_k=2)
    graph = stream.capture((a.codes, a.scale_buf, b.codes, b.scale_buf, d, a.global_buf, b.global_buf),
                           lambda _: plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d,
                                                  global_a=a.global_buf, global_b=b.global_buf, alpha=0.5))
    ga = replay_with_new_global_a(context, stream, graph, plan, a, b, d, m, n, alpha=0.5)
    graph.close()
    execute = plan.numba_execute

    @numba.njit
    def run(s, pa, psa, pb, psb, pd, ga, gb):
        return execute(s, pa, psa, pb, psb, pd, ga, gb, 2.0)

    e = poisoned(context, stream, pool, m * n)
    assert run(stream.handle, a.codes.handle, a.scale_buf.handle, b.codes.handle, b.scale_buf.handle, e.handle,
               a.global_buf.handle, b.global_buf.handle) == 0
    got = check_guard(download(context, stream, e), m * n).reshape(m, n)
    assert_close_plan(plan, got, a.value, b.value, 2.0, float(np.float32(ga)), float(b.global_))  # the last replay's
    plan.close()
    for x in (a, b):
        x.free(stream)
    for buf in (d, e):
        buf.free(stream)


def test_the_mma_kernel_asks_2_byte_aligned_activation_scales_where_it_loads_scale_pairs(context, stream) -> None:
    """K % 32 == 0: fp4_mma_bf16 reads a row's two scale bytes of a step as one 16-bit word (MIRCUDA_FP4_SCALE_PAIRS),
    activations' as well as weights': both scale operands need 2-byte alignment (the activation scales needed 1
    before). K % 32 != 0 (one group per lane, byte loads): 1."""
    for k, want in ((4096, 2), (1040, 1)):
        plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, k), kernel="fp4_mma_bf16")
        align = {op.name: op.alignment for op in plan.operands}
        assert (align["a_scales"], align["b_scales"]) == (want, want), k
        assert ("MIRCUDA_FP4_FULL_STEPS=1" in plan.describe()) == (k == 4096)


@pytest.mark.parametrize("rows, stages", [("default", None), ("other", 3)])
@pytest.mark.parametrize("kernel", ["fp4_mma_bf16", "fp4_matvec_bf16"])
@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("m", [3, 16])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", [(37, 1040), (4097, 96), (300, 4096)], ids=str)
def test_the_matrix_decode_kernels_match_float64_with_every_decoder(context, stream, pool, rng, m, n, k, layout,
                                                                    decode, kernel, rows, stages) -> None:
    """rows "other": 16 weight rows per block (one 16-row tile per warp; the default is two) for
    fp4_mma_bf16, 8 for fp4_matvec_bf16 (its default at M > 1 is 4)."""
    skip_unless_decoder_runs(context, decode)
    block_rows = None if rows == "default" else 16 if kernel == "fp4_mma_bf16" else 8
    activations = ("fp4",) if kernel == "fp4_mma_bf16" else ("fp4", "bf16")
    for activation in activations:
        b = Operand(context, stream, pool, bf16_data(rng, n, k), layout)
        a_host = bf16_data(rng, m, k)
        d = poisoned(context, stream, pool, m * n)
        plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), activation=activation,
                                     scale_layout=layout, kernel=kernel, decode=decode, warps=2, rows=block_rows,
                                     stages=stages)
        assert plan.gemv_kernel == kernel and f"decode={decode!r}" in plan.describe()
        if block_rows is not None:
            assert f"blocks of {block_rows} weight rows" in plan.describe()
        if activation == "fp4":
            a = Operand(context, stream, pool, a_host, layout)
            plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                         global_b=b.global_buf, alpha=0.75)
            a64, scale = a.value, 0.75 * float(a.global_) * float(b.global_)
        else:
            ba = upload(context, stream, pool, a_host.ravel())
            plan.execute(stream, ba, None, b.codes, b.scale_buf, d, global_b=b.global_buf, alpha=0.75)
            a64, scale = a_host.astype(np.float64), 0.75 * float(b.global_)
        got = check_guard(download(context, stream, d), m * n).reshape(m, n)
        want, mag = reference(a64, b.value, scale)
        assert_close(got, want, mag, "bf16")
        plan.close()
        b.free(stream)
        d.free(stream)
        (a.free(stream) if activation == "fp4" else ba.free(stream))


def test_the_plans_refuse_knobs_they_cannot_use_by_name(context, stream) -> None:
    cases = [
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 64), activation="bf16",
                                             kernel="fp4_mma_bf16"), "kernel"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 64), kernel="gemv"), "kernel"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 64), decode="nibbles"), "decode"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 64), kernel="fp4_mma_bf16",
                                             rows=8), "rows"),
        (lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(64, 64, 64), decode="pairs"), "decode"),
        (lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 64), block_sum="fp16",
                                       kernel="fp4_mma_bf16"), "block_sum"),
        (lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 64), warps=9), "warps"),
        (lambda: mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(4, 64, 64), stages=1), "stages"),
        (lambda: mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(64, 64), stages=8), "stages"),
    ]
    for make, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            make()
        assert info.value.argument == argument


@pytest.mark.parametrize("kernel", ["fp4_matvec_bf16", "fp4_mma_bf16"])
@pytest.mark.parametrize("decode", DECODES)
def test_saturated_blocks_sum_exactly_in_every_decoder(context, stream, pool, decode, kernel) -> None:
    """Every code +-6 (E2M1's largest) in both operands with unit scales: each 16-element block sums
    +-16 * 36, the bound the FP16 block sums of the CUDA-core kernel are proved exact up to (its comment:
    8 products of 36 per half2 lane, with the decoders' factors 2^-(L + A)), and the result is exact in
    BF16, so any rounding or overflow inside the kernel shows as a wrong value, not as noise."""
    skip_unless_decoder_runs(context, decode)
    n, k = 24, 4096
    six, minus_six = 0x7, 0xF  # E2M1 codes of 6 and -6
    w_codes = np.full((n, k // 2), six | six << 4, np.uint8)
    w_codes[1::2] = minus_six | minus_six << 4  # odd rows negative: both signs through the decoders
    w_codes[2, : k // 4] = six | minus_six << 4  # row 2: a first half alternating, its sum 36 * 0 + 36 * k/2
    x_codes = np.full((1, k // 2), six | six << 4, np.uint8)
    unit = np.full(k // 16, 0x38, np.uint8)  # UE4M3 1.0
    y = poisoned(context, stream, pool, n)
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), decode=decode, kernel=kernel)
    bufs = [upload(context, stream, pool, a) for a in (x_codes.ravel(), np.tile(unit, 1).view(E4M3),
                                                        w_codes.ravel(), np.tile(unit, n).view(E4M3))]
    plan.execute(stream, bufs[0], bufs[1], bufs[2], bufs[3], y)
    got = check_guard(download(context, stream, y), n).astype(np.float64)
    want = np.where(np.arange(n) % 2 == 1, -36.0 * k, 36.0 * k)
    want[2] = 36.0 * (k // 2)  # k/2 elements alternate +-36 (sum 0), the other k/2 give +36 each
    assert np.array_equal(got, want), (got, want)
    for b in bufs:
        b.free(stream)
    y.free(stream)
