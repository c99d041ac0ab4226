"""Blockwise FP8 without a GPU: the kernels compile with NVRTC for sm_89, sm_90 and sm_120f and decode
E4M3 with cvt.rn.f16x2.e4m3x2; the numpy reference quantizers' properties; the scale shapes; the plans'
and the quantizer's argument checks with stand-in contexts, streams and buffers (nothing is launched
when a check fails); the njit executor's parameter block with a stand-in launch."""

from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul import _fp8, _fp8_mma, _library, _quantize
from mircuda.matmul._fp8 import (
    FP8_GEMV_MAX_M,
    fp8_gemv_executor,
    fp8_gemv_options,
    fp8_gemv_rows,
    fp8_vector_source,
)
from mircuda.matmul._quantize import (
    activation_scale_shape,
    dequantize_reference,
    fp8_quantize_source,
    quantize_activations_reference,
    quantize_reference,
    quantize_weights_reference,
    weight_scale_shape,
)
from mircuda.matmul._vector import INVALID_HANDLE, INVALID_VALUE

E4M3_CODES = np.arange(256, dtype=np.uint8)


def ptx(source: mc.CudaSource, arch: str, options: mc.CompileOptions | None = None) -> str:
    defines = dict(options.defines) if options is not None else {}
    return mc.compile_program(source, arch, mc.CompileOptions(defines=defines, output="ptx")).image.decode()


def entry(text: str, symbol: str) -> str:
    body = text[text.index(f".entry {symbol}"):]
    return body[: body.index("\n}")]


# -- compilation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9, 16])
@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_120f"])
def test_the_gemv_compiles_for_every_m_and_target(arch, m) -> None:
    prog = mc.compile_program(fp8_vector_source(), arch, fp8_gemv_options(m, fp8_gemv_rows(m)))
    assert prog.image[:4] == b"\x7fELF" and b"blockwise_fp8_gemv" in prog.image


@pytest.mark.parametrize("arch", ["compute_89", "compute_90", "compute_120f"])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_the_gemv_decodes_e4m3_pairs_and_streams_weights_past_l1(arch, m) -> None:
    body = entry(ptx(fp8_vector_source(), arch, fp8_gemv_options(m, fp8_gemv_rows(m))), "blockwise_fp8_gemv")
    rows = fp8_gemv_rows(m)
    # 8 pairs per 16-byte load, for the weight rows and the M activation rows, in the loop and the tail.
    assert body.count("cvt.rn.f16x2.e4m3x2") >= 2 * 8 * (rows + m)
    assert body.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") >= 2 * rows
    assert "fma.rn.f32" in body  # FP32 accumulation


def test_on_hopper_and_later_the_gemv_waits_for_the_previous_grid_before_reading_its_operands() -> None:
    body = entry(ptx(fp8_vector_source(), "compute_90", fp8_gemv_options(1, 8)), "blockwise_fp8_gemv")
    wait = body.index("griddepcontrol.wait")
    assert all(body.find(op) > wait for op in ("ld.global", "st.global"))
    assert body.index("prefetch.global.L2") < wait  # the weights' L2 prefetch overlaps the previous tail
    # The trigger comes after the last weight load (late: many small blocks, as dense_vector.cu's 8 rows).
    assert body.index("griddepcontrol.launch_dependents") > body.rindex("ld.global.nc.L1::no_allocate")


@pytest.mark.parametrize("source", [fp8_vector_source, fp8_quantize_source])
def test_below_sm_89_the_fp8_kernels_refuse_to_compile_by_name(source) -> None:
    with pytest.raises(mc.CompileError, match="8.9"):
        mc.compile_program(source(), "sm_80", fp8_gemv_options(1, 8) if source is fp8_vector_source else None)


@pytest.mark.parametrize("defines, message", [({}, "MIRCUDA_FP8_M"), ({"MIRCUDA_FP8_M": 17}, "1..16"),
                                              ({"MIRCUDA_FP8_M": 1, "MIRCUDA_FP8_ROWS": 3}, "1, 2, 4 or 8"),
                                              ({"MIRCUDA_FP8_M": 16, "MIRCUDA_FP8_ROWS": 4}, "at most 32")])
def test_the_gemv_compiles_only_for_valid_m_and_rows(defines, message) -> None:
    with pytest.raises(mc.CompileError, match=message):
        mc.compile_program(fp8_vector_source(), "sm_90", mc.CompileOptions(defines=defines))


@pytest.mark.parametrize("arch", ["compute_89", "compute_90", "compute_120f"])
def test_the_quantizers_round_with_ieee_division_and_the_saturating_e4m3_conversion(arch) -> None:
    text = ptx(fp8_quantize_source(), arch)
    for symbol in ("quantize_rows_1x128", "quantize_blocks_128x128"):
        body = entry(text, symbol)
        assert "cvt.rn.satfinite.e4m3x2.f32" in body
        assert "div.rn.f32" in body and "div.approx" not in body and "div.full" not in body
        assert "redux.sync.max.u32" in body


def test_the_sources_inline_the_shared_decode_header() -> None:
    text = fp8_vector_source().text
    assert '#include "decode_common.cuh"' not in text and text.count("namespace decode {") == 1


@pytest.mark.parametrize("m, rows", [(1, 8), (2, 8), (3, 4), (4, 4), (5, 4), (8, 4), (9, 2), (16, 2)])
def test_rows_per_block_keep_one_output_per_lane(m, rows) -> None:
    assert fp8_gemv_rows(m) == rows and rows * m <= 32 and 128 % rows == 0


@pytest.mark.parametrize("m", [0, 17, 2.0, True])
def test_rows_are_defined_for_m_1_to_16_only(m) -> None:
    with pytest.raises(mc.ContractError) as info:
        fp8_gemv_rows(m)
    assert info.value.argument == "m" and info.value.received == repr(m)


# -- scale layouts and the reference quantizers ------------------------------------------------
@pytest.mark.parametrize("m, n, k, sa, sb", [(1, 4096, 4096, (1, 32), (32, 32)), (3, 200, 300, (3, 3), (2, 3)),
                                             (16, 129, 16, (16, 1), (2, 1)), (5, 128, 128, (5, 1), (1, 1))])
def test_scale_shapes_round_partial_blocks_up(m, n, k, sa, sb) -> None:
    assert activation_scale_shape(m, k) == sa and weight_scale_shape(n, k) == sb


def bf16_values(rng: np.random.Generator, *shape: int) -> np.ndarray:
    # Values over a wide exponent range (rows of very different magnitude), rounded to bf16.
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, size=shape[:-1] + (1,)))
    return x.astype(np.float32).astype(mc.bf16)


@pytest.mark.parametrize("block, shape", [((1, 128), (5, 300)), ((1, 128), (1, 128)), ((1, 128), (2, 16)),
                                          ((128, 128), (200, 300)), ((128, 128), (129, 4096)), ((128, 128), (3, 40))])
def test_reference_scales_are_amax_over_448_and_codes_reach_448(block, shape) -> None:
    rng = np.random.default_rng(7)
    x = bf16_values(rng, *shape)
    codes, scales = quantize_reference(x, block)
    assert codes.dtype == mc.e4m3 and codes.shape == shape and scales.dtype == np.float32
    rb, cb = block
    xf = x.astype(np.float32)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            tile = xf[i * rb:(i + 1) * rb, j * cb:(j + 1) * cb]
            amax = np.abs(tile).max()
            assert scales[i, j] == np.float32(amax) / np.float32(448)
            # The largest element maps to +-448 (E4M3's largest finite value) exactly.
            assert np.abs(codes[i * rb:(i + 1) * rb, j * cb:(j + 1) * cb].astype(np.float32)).max() == 448
    dq = dequantize_reference(codes, scales, block)
    full = np.repeat(np.repeat(scales.astype(np.float64), rb, 0), cb, 1)[: shape[0], : shape[1]]
    # Round to nearest E4M3: half an ulp of 2**-3 relative, or half the subnormal step 2**-9 times the scale.
    assert (np.abs(dq - xf) <= np.maximum(np.abs(xf) * 2.0**-4, full * 2.0**-10) * (1 + 1e-6)).all()


def test_reference_codes_are_the_nearest_even_e4m3_of_the_fp32_quotient() -> None:
    rng = np.random.default_rng(3)
    x = bf16_values(rng, 4, 256)
    codes, scales = quantize_activations_reference(x)
    q = x.astype(np.float32) / np.repeat(scales, 128, axis=1)
    # Every representable E4M3 value; the code must be the nearest, ties to the even code.
    values = E4M3_CODES.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    finite = np.isfinite(values)
    grid, grid_codes = values[finite], E4M3_CODES[finite]
    for v, code in zip(q.ravel().astype(np.float64), codes.view(np.uint8).ravel()):
        dist = np.abs(grid - v)
        best = grid_codes[dist == dist.min()]
        if len(best) > 1 and np.all(grid[dist == dist.min()] != 0):
            best = best[(best & 1) == 0]  # a tie: the even mantissa
        assert code in best


def test_an_all_zero_block_has_scale_one_and_zero_codes_of_the_inputs_sign() -> None:
    x = np.ones((2, 256), np.float32)
    x[0, :128] = 0.0
    x[1, 128:] = -0.0
    codes, scales = quantize_activations_reference(x.astype(mc.bf16))
    third = np.float32(1) / np.float32(448)
    assert np.array_equal(scales, np.array([[1.0, third], [third, 1.0]], np.float32))
    raw = codes.view(np.uint8)
    assert (raw[0, :128] == 0x00).all() and (raw[1, 128:] == 0x80).all()
    w, sw = quantize_weights_reference(np.zeros((130, 20), mc.bf16))
    assert (sw == 1.0).all() and (w.view(np.uint8) == 0).all()


def test_a_partial_block_scales_only_the_elements_that_exist() -> None:
    x = np.zeros((1, 130), np.float32)
    x[0, :128] = 1.0
    x[0, 128:] = [3.0, -6.0]
    codes, scales = quantize_activations_reference(x.astype(mc.bf16))
    assert scales[0, 1] == np.float32(6) / np.float32(448)
    assert codes.astype(np.float32)[0, 129] == -448


def test_a_block_of_bf16_subnormals_gets_an_fp32_subnormal_scale_and_codes_up_to_448() -> None:
    x = (np.arange(-64, 64) * 2.0**-133).astype(np.float32).astype(mc.bf16).reshape(1, 128)
    codes, scales = quantize_activations_reference(x)
    assert 0 < scales[0, 0] < np.finfo(np.float32).tiny and scales[0, 0] == np.float32(64 * 2.0**-133) / np.float32(448)
    assert np.abs(codes.astype(np.float32)).max() == 448 and codes.astype(np.float32)[0, 64] == 0


@pytest.mark.parametrize("block", [np.array([1, 128]), [1, 128], (1, 128.5), (1.0, 128), (True, 128),
                                   (128, 128.0)])
def test_a_block_must_be_one_of_the_two_tuples(block) -> None:
    # (1.0, 128) and (True, 128) compare equal to (1, 128) in Python: refused by name, not a TypeError later
    with pytest.raises(mc.ContractError) as info:
        quantize_reference(np.zeros((1, 4)), block)
    assert info.value.argument == "block"


def test_a_block_of_numpy_ints_is_taken_as_ints() -> None:
    codes, scales = quantize_reference(np.ones((1, 4)), (np.int64(1), np.int32(128)))
    assert scales.shape == (1, 1) and codes.shape == (1, 4)


def test_non_finite_inputs_make_the_scale_non_finite() -> None:
    x = np.ones((2, 128), np.float32)
    x[0, 5], x[1, 9] = np.nan, -np.inf
    _, scales = quantize_activations_reference(x.astype(mc.bf16))
    assert np.isnan(scales[0, 0]) and scales[1, 0] == np.inf


@pytest.mark.parametrize("args, argument", [((np.zeros(4), (1, 128)), "x"), ((np.zeros((0, 4)), (1, 128)), "x"),
                                            ((np.zeros((2, 4)), (128, 1)), "block"),
                                            ((np.zeros((2, 4)), [1, 128]), "block")])
def test_the_reference_checks_its_arguments(args, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        quantize_reference(*args)
    assert info.value.argument == argument


def test_dequantize_checks_the_scale_shape() -> None:
    with pytest.raises(mc.ContractError) as info:
        dequantize_reference(np.zeros((4, 256), mc.e4m3), np.ones((4, 3), np.float32), (1, 128))
    assert info.value.argument == "scales" and "(4, 2)" in info.value.expected


# -- plans and the quantizer with stand-ins -----------------------------------------------------
class Recorder:
    """Stands in for a bound kernel launch: records what would have been enqueued."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


class FakeEngine:
    symbol = "blockwise_fp8_gemv"

    def __init__(self, context: Any, m: int, n: int, k: int, compiler: Any, *, warps: Any = None, rows: Any = None,
                 pdl_trigger: Any = None, decode: Any = None, persistent: Any = None) -> None:
        self.m, self.rows, self.warps = m, rows or self.default_rows(m), warps or 1
        self.persistent = persistent
        self.pdl_trigger, self.decode = pdl_trigger, decode
        self.launch = Recorder()
        self.config = mc.LaunchConfig(-(-n // self.rows), 32)
        self.kernel = None

    @staticmethod
    def default_rows(m: int) -> int:
        return fp8_gemv_rows(m)

    def describe(self) -> str:
        return f"fake engine {self.symbol}"


class FakeMmaEngine(FakeEngine):
    symbol = "blockwise_fp8_mma"

    @staticmethod
    def default_rows(m: int) -> int:
        return 16


REAL_GEMV, REAL_MMA = _fp8.Fp8Gemv, _fp8.Fp8MmaGemv
"""The engines stand_ins replaces, for tests that need their own checks."""


def stand_ins(monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int] = (9, 0)) -> tuple[Any, Any]:
    from mircuda.runtime import Context, Stream

    context = object.__new__(Context)
    context._closed = False
    monkeypatch.setattr(Context, "_make_current", lambda self: None)
    monkeypatch.setattr(Context, "device_info", lambda self: SimpleNamespace(
        compute_capability=cc, name="stand-in", arch=f"sm_{cc[0]}{cc[1]}", multiprocessor_count=132,
        supports_programmatic_launch=cc >= (9, 0)))
    monkeypatch.setattr(Context, "__repr__", lambda self: "<stand-in context>")
    stream = object.__new__(Stream)
    stream._context, stream._handle = context, 0x50
    monkeypatch.setattr(_fp8, "Fp8Gemv", FakeEngine)
    monkeypatch.setattr(_fp8, "Fp8MmaGemv", FakeMmaEngine)
    monkeypatch.setattr(_fp8, "plan_compiler", lambda compiler, context: compiler)
    return context, stream


def buffer(context: Any, dtype: Any, count: int, address: int = 0x10000) -> Any:
    from mircuda.dtypes import dtype_info
    from mircuda.memory import DeviceBuffer

    buf = object.__new__(DeviceBuffer)
    info = dtype_info(dtype)
    buf._freed, buf._scalar, buf._info, buf._context, buf._count, buf._ptr = (False, info.scalar_type, info, context,
                                                                                count, address)
    return buf


def operands(context: Any, m: int, n: int, k: int) -> dict[str, Any]:
    kb, nb = -(-k // 128), -(-n // 128)
    # 256 MiB apart: disjoint whatever the shape (an output overlapping an input is refused)
    return {"a": buffer(context, mc.e4m3, m * k, 0x1000_0000), "sa": buffer(context, mc.f32, m * kb, 0x2000_0000),
            "b": buffer(context, mc.e4m3, n * k, 0x3000_0000), "sb": buffer(context, mc.f32, nb * kb, 0x4000_0000),
            "d": buffer(context, mc.bf16, m * n, 0x5000_0000)}


def test_a_valid_execute_launches_once_with_the_operands_in_kernel_order(monkeypatch) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(3, 200, 304))
    ops = operands(context, 3, 200, 304)
    plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"], 2.0, 0.5)
    (call,) = plan._launch.calls
    assert call[0] is stream and call[2] is ops["d"] and call[3] is ops["d"]  # c = None: accumulate into d
    assert call[4:8] == (ops["a"], ops["sa"], ops["b"], ops["sb"]) and call[8:] == (2.0, 0.5, 200, 304)
    c = buffer(context, mc.bf16, 600, 0x6000_0000)
    plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"], c=c)
    assert plan._launch.calls[1][3] is c and plan.sa_shape == (3, 3) and plan.sb_shape == (2, 3)


@pytest.mark.parametrize("change, argument", [
    ({"a": ("dtype", mc.u8)}, "a"), ({"a": ("count", 3 * 304 - 1)}, "a"), ({"a": ("address", 0x1008)}, "a"),
    ({"sa": ("count", 8)}, "sa"), ({"sa": ("dtype", mc.f16)}, "sa"), ({"b": ("address", 0x3004)}, "b"),
    ({"b": ("dtype", mc.bf16)}, "b"), ({"sb": ("count", 5)}, "sb"), ({"d": ("dtype", mc.f32)}, "d"),
    ({"d": ("count", 599)}, "d"), ({"c": ("count", 599)}, "c"), ({"c": ("dtype", mc.f16)}, "c"),
])
def test_bad_operands_are_refused_by_name_and_nothing_is_enqueued(monkeypatch, change, argument) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(3, 200, 304))
    ops = operands(context, 3, 200, 304)
    ops["c"] = buffer(context, mc.bf16, 600, 0x6000)
    ((name, (field, value)),) = change.items()
    old = ops[name]
    dtype = value if field == "dtype" else old._scalar
    count = value if field == "count" else old._count
    address = value if field == "address" else old._ptr
    ops[name] = buffer(context, dtype, count, address)
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"], c=ops["c"])
    assert info.value.argument == argument
    assert plan._launch.calls == []


def test_another_stream_a_freed_buffer_and_bad_scalars_are_refused_before_the_launch(monkeypatch) -> None:
    from mircuda.runtime import Stream

    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(200, 304))
    ops = operands(context, 1, 200, 304)
    args = (ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"])
    other = object.__new__(Stream)
    other._context, other._handle = context, 0x60
    with pytest.raises(mc.ContractError) as info:
        plan.execute(other, *args)
    assert info.value.argument == "stream"
    for alpha, beta, argument in (("1", 0.0, "alpha"), (1.0, None, "beta"), (True, 0.0, "alpha")):
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args, alpha, beta)
        assert info.value.argument == argument
    ops["sb"]._freed = True
    with pytest.raises(mc.UseAfterFree, match="sb"):
        plan.execute(stream, *args)
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, np.zeros(304, mc.e4m3), *args[1:])
    assert info.value.argument == "a"
    assert plan._launch.calls == []


def test_the_vector_plan_takes_one_row_of_scales(monkeypatch) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(4096, 4096 + 16))
    assert plan.sa_shape == (1, 33) and plan.sb_shape == (32, 33)
    assert "BlockwiseFp8VectorPlan" in plan.describe() and "N=4096" in plan.describe()


@pytest.mark.parametrize("k", [8, 100, 4100])
def test_k_not_a_multiple_of_16_is_refused_by_name(monkeypatch, k) -> None:
    context, stream = stand_ins(monkeypatch)
    for make in (lambda: mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(64, k)),
                 lambda: mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(2, 64, k))):
        with pytest.raises(mc.ContractError) as info:
            make()
        assert info.value.argument == "spec" and f"K = {k}" == info.value.received


@pytest.mark.parametrize("m", [17, 64, 8192])
def test_m_above_16_without_a_library_names_the_build_command(monkeypatch, m) -> None:
    context, stream = stand_ins(monkeypatch)

    def missing() -> Any:
        raise mc.CutlassNotFound("the CUTLASS library is not built: run `python -m mircuda build-cutlass`")

    monkeypatch.setattr(_library, "load_library", missing)
    with pytest.raises(mc.CutlassNotFound, match="build-cutlass"):
        mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, 4096, 4096))


@pytest.mark.parametrize("cc", [(8, 9), (10, 0)])
def test_m_above_16_on_a_device_without_cutlass_fp8_kernels_is_unavailable_by_name(monkeypatch, cc) -> None:
    context, stream = stand_ins(monkeypatch, cc=cc)
    monkeypatch.setattr(_library, "load_library", lambda: (_ for _ in ()).throw(mc.CutlassNotFound("none")))
    with pytest.raises(mc.BlockwiseFp8Unavailable, match=f"compute capability {cc[0]}.{cc[1]}") as info:
        mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(17, 4096, 4096))
    assert isinstance(info.value, mc.UnsupportedPlatform) and "M = 17" in str(info.value)


@pytest.mark.parametrize("knob, value", [("rows", 16), ("warps", 3), ("decode", "integer"), ("pdl_trigger", "early"),
                                         ("persistent", True)])
@pytest.mark.parametrize("cc", [(9, 0), (8, 9)])
def test_above_m_16_an_nvrtc_knob_is_refused_by_name_before_the_library_is_looked_for(monkeypatch, cc, knob,
                                                                                        value) -> None:
    """M > 16 runs a CUTLASS kernel, which takes none of the NVRTC knobs: they were refused only after the library
    was loaded and a kernel selected, so without the library a bad knob raised CutlassNotFound (the build command),
    and on cc 8.9 BlockwiseFp8Unavailable, instead of a ContractError naming the knob."""
    context, stream = stand_ins(monkeypatch, cc=cc)
    looked: list[bool] = []

    def load_library():  # type: ignore[no-untyped-def]
        looked.append(True)
        raise mc.CutlassNotFound("none")

    monkeypatch.setattr(_library, "load_library", load_library)
    with pytest.raises(mc.ContractError, match=r"\(CUTLASS\) runs M = 32") as info:
        mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(32, 14336, 4096), **{knob: value})
    assert info.value.argument == knob and not looked


@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
def test_decode_runs_the_tensor_core_kernel_for_k_up_to_4096_on_sm90(monkeypatch, m) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, 256, 512))
    symbol = "blockwise_fp8_mma"  # M = 1 too: fp8_m1_choice's rule for K <= 4096 on cc 9.x
    assert plan._engine.m == m and plan.kernel_name == symbol and f"M={m}" in plan.describe()
    assert f"fake engine {symbol}" in plan.describe() and plan.rows == (8 if symbol == "blockwise_fp8_gemv" else 16)
    # The operand checks name the kernel that runs.
    assert all(symbol in op.reason for op in plan._operands)


@pytest.mark.parametrize("kernel", ["blockwise_fp8_gemv", "blockwise_fp8_mma"])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_either_nvrtc_kernel_can_be_forced_with_its_knobs(monkeypatch, kernel, m) -> None:
    context, stream = stand_ins(monkeypatch)
    rows = 32 if kernel == "blockwise_fp8_mma" else 2
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, 256, 512), kernel=kernel, rows=rows, warps=2,
                               pdl_trigger="early", decode="hardware")
    assert plan.kernel_name == kernel and plan.rows == rows and plan.warps == 2
    assert plan._engine.pdl_trigger == "early" and plan._engine.decode == "hardware" and "forced" in plan.describe()


def test_the_vector_plan_runs_the_tensor_core_kernel_on_request(monkeypatch) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(4096, 4096), kernel="blockwise_fp8_mma",
                                     rows=32, pdl_trigger="late")
    assert plan.kernel_name == "blockwise_fp8_mma" and plan.rows == 32 and "forced by the caller" in plan.describe()
    assert "blockwise_fp8_mma" in repr(plan)
    default = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(4096, 14336))
    assert default.kernel_name == "blockwise_fp8_gemv" and "fp8_m1_choice" in default.describe()
    with pytest.raises(mc.ContractError) as info:
        mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(64, 64), kernel="sm90_anything")
    assert info.value.argument == "kernel"


# -- the M = 1 kernel by shape (fp8_m1_choice) -------------------------------------------------------
GEMV, MMA = "blockwise_fp8_gemv", "blockwise_fp8_mma"
M1_DEFAULTS = [(4096, 4096, MMA, 16), (14336, 4096, MMA, 32), (4096, 14336, GEMV, 8), (6144, 4096, MMA, 16),
               (1000, 4096 + 16, GEMV, 8), (1000, 8192, GEMV, 8), (8192, 8192, GEMV, 8), (1000, 1040, MMA, 16),
               (8197, 4096, MMA, 32), (8191, 4096, MMA, 16), (37, 304, MMA, 16)]
"""(N, K, kernel, rows) at M = 1 on cc 9.0: the four profiled shapes, then odd N, K past 4096 by one 16-column
step, K = 8192, and both sides of N = 8192."""


def m1_plan(context: Any, stream: Any, n: int, k: int, vector: bool, **knobs: Any) -> Any:
    if vector:
        return mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k), **knobs)
    return mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(1, n, k), **knobs)


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
@pytest.mark.parametrize("n, k, kernel, rows", M1_DEFAULTS, ids=str)
def test_both_plans_run_the_m_1_rules_kernel_and_rows_for_each_shape(monkeypatch, vector, n, k, kernel, rows) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = m1_plan(context, stream, n, k, vector)
    assert plan.kernel_name == kernel and plan.rows == rows and plan._engine.m == 1
    assert plan.launch_config.grid[0] == -(-n // rows)
    assert all(kernel in op.reason for op in plan._operands)
    text = plan.describe()
    # the engine's words, then the rule's reason with the measurement it follows
    assert f"fake engine {kernel}" in text and "Why: M = 1 on cc 9.0" in text and "fp8_m1_choice" in text
    assert "H200, 2026-12-01" in text and "fp8-profile --m 1 --sweep" in text
    assert ("tensor cores" in text) is (kernel == MMA) and ("K = 4096 (" in text) is (kernel == MMA)


@pytest.mark.parametrize("cc", [(8, 9), (10, 0), (12, 0)])
@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
def test_off_sm90_both_plans_keep_the_cuda_core_kernel_at_m_1(monkeypatch, vector, cc) -> None:
    context, stream = stand_ins(monkeypatch, cc=cc)
    for n, k in ((4096, 4096), (14336, 4096), (1000, 1040)):
        plan = m1_plan(context, stream, n, k, vector)
        assert plan.kernel_name == GEMV and plan.rows == 8
        assert f"M = 1 on cc {cc[0]}.{cc[1]}" in plan.describe() and "measured on the H200 only" in plan.describe()


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
def test_a_forced_kernel_overrides_the_m_1_rule(monkeypatch, vector) -> None:
    context, stream = stand_ins(monkeypatch)
    gemv = m1_plan(context, stream, 4096, 4096, vector, kernel=GEMV)
    assert gemv.kernel_name == GEMV and gemv.rows == 8 and "Why: forced by the caller" in gemv.describe()
    # the forced tensor-core kernel takes its own default rows, not the rule's 32 for N >= 8192
    mma = m1_plan(context, stream, 14336, 14336, vector, kernel=MMA)
    assert mma.kernel_name == MMA and mma.rows == 16 and "forced by the caller" in mma.describe()
    wide = m1_plan(context, stream, 14336, 4096, vector, kernel=MMA, rows=16)
    assert wide.kernel_name == MMA and wide.rows == 16


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
@pytest.mark.parametrize("n, k, knobs, kernel, rows, named", [
    (4096, 4096, {"rows": 4}, GEMV, 4, "rows=4"), (4096, 4096, {"rows": 8}, GEMV, 8, "rows=8"),
    (4096, 4096, {"persistent": True}, GEMV, 8, "persistent=True"),
    (4096, 14336, {"rows": 32}, MMA, 32, "rows=32"), (4096, 14336, {"decode": "integer"}, MMA, 16, "decode='integer'"),
    (14336, 4096, {"rows": 16}, MMA, 16, "rows=16"),
    # a knob of the rule's own kernel keeps the rule's rows (decode='integer' ran 16 rows where the rule runs 32)
    (14336, 4096, {"decode": "integer"}, MMA, 32, "decode='integer'"),
    (8192, 1024, {"decode": "integer", "warps": 2}, MMA, 32, "decode='integer'"),
    (4096, 4096, {"decode": "integer"}, MMA, 16, "decode='integer'"),
    (4096, 14336, {"persistent": True}, GEMV, 8, "persistent=True"),
    # knobs both kernels take leave the rule's kernel and rows
    (14336, 4096, {"warps": 2, "pdl_trigger": "early"}, MMA, 32, None),
    (4096, 14336, {"decode": "hardware", "persistent": False}, GEMV, 8, None),
], ids=str)
def test_a_knob_of_one_kernel_given_without_kernel_picks_that_kernel_at_m_1(monkeypatch, vector, n, k, knobs, kernel,
                                                                            rows, named) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = m1_plan(context, stream, n, k, vector, **knobs)
    assert plan.kernel_name == kernel and plan.rows == rows
    text = plan.describe()
    if named is None:
        assert "a knob of" not in text and "fp8_m1_choice's rule, the fastest" in text
    else:
        assert f"M = 1 with {named}, a knob of {kernel} only" in text and "fp8_m1_choice" in text


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
def test_knobs_of_both_kernels_without_kernel_are_refused_by_name(monkeypatch, vector) -> None:
    context, stream = stand_ins(monkeypatch)
    with pytest.raises(mc.ContractError) as info:  # rows=16 names the tensor-core kernel, which has no persistent grid
        m1_plan(context, stream, 4096, 14336, vector, rows=16, persistent=True)
    assert info.value.argument == "persistent" and "blockwise_fp8_mma" in info.value.expected


class CompileReached(Exception):
    """Raised by a stand-in compiler: the engine's checks let the arguments through to NVRTC."""


class RefusingCompiler:
    arch = "sm_90"

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        raise CompileReached


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
@pytest.mark.parametrize("n, k", [(4096, 4096), (14336, 4096), (4096, 14336)], ids=str)
@pytest.mark.parametrize("rows", [3, 64, 0, -8, True, 16.0, "8", np.array([8, 16])], ids=repr)
def test_m_1_rows_of_neither_kernel_are_refused_naming_both_kernels_rows(monkeypatch, vector, n, k, rows) -> None:
    """Without kernel= either kernel's rows are valid at M = 1 (they pick the kernel); a value of neither set was
    refused by the rule's kernel with only its own set as expected (4096x4096: 'None, 16 or 32', though 8 runs)."""
    context, stream = stand_ins(monkeypatch)
    with pytest.raises(mc.ContractError) as info:
        m1_plan(context, stream, n, k, vector, rows=rows)
    assert info.value.argument == "rows" and info.value.received == repr(rows)
    assert "(1, 2, 4, 8) (blockwise_fp8_gemv)" in info.value.expected
    assert "(16, 32) (blockwise_fp8_mma)" in info.value.expected


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
@pytest.mark.parametrize("n, k", [(4096, 4096), (4096, 14336)], ids=str)
@pytest.mark.parametrize("decode", ["INTEGER", 1, np.array(["integer", "hardware"])], ids=repr)
def test_m_1_decodes_of_neither_kernel_are_refused_naming_both(monkeypatch, vector, n, k, decode) -> None:
    """A two-element array once raised numpy's ValueError ('truth value ... ambiguous') from the knob's kernel
    choice; 'INTEGER' on 4096x14336 (the CUDA-core rule) was told 'None or hardware', though 'integer' runs."""
    context, stream = stand_ins(monkeypatch)
    with pytest.raises(mc.ContractError) as info:
        m1_plan(context, stream, n, k, vector, decode=decode)
    assert info.value.argument == "decode" and info.value.received == repr(decode)
    assert info.value.expected.startswith("None, 'hardware' or 'integer'")


@pytest.mark.parametrize("kernel", ["blockwise_fp8_gemv", "blockwise_fp8_mma"])
def test_the_m_1_kernels_knobs_still_reach_their_engines_checks(monkeypatch, kernel) -> None:
    """With the real engines (a compiler that refuses to be reached): the rule's choice and a knob's both get
    through the checks to NVRTC, and a knob of the other kernel with kernel= forced is refused by that engine."""
    context, stream = stand_ins(monkeypatch)
    monkeypatch.setattr(_fp8, "Fp8Gemv", REAL_GEMV)
    monkeypatch.setattr(_fp8, "Fp8MmaGemv", REAL_MMA)
    for n, k, knobs in ((4096, 4096, {}), (4096, 14336, {}), (4096, 4096, {"rows": np.int64(4)}),
                        (4096, 14336, {"decode": "integer"}), (14336, 4096, {"kernel": kernel})):
        with pytest.raises(CompileReached):
            mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k), compiler=RefusingCompiler(), **knobs)
    other = {"rows": 32} if kernel == "blockwise_fp8_gemv" else {"rows": 8}
    with pytest.raises(mc.ContractError) as info:
        mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(4096, 4096), compiler=RefusingCompiler(),
                                  kernel=kernel, **other)
    assert info.value.argument == "rows" and kernel in info.value.expected


@pytest.mark.parametrize("decode", [np.array(["hardware", "integer"]), 0, "integer"], ids=repr)
def test_the_cuda_core_engine_refuses_a_decode_that_is_not_hardware_by_name(decode) -> None:
    """An array once raised numpy's ValueError from ``decode != 'hardware'``."""
    with pytest.raises(mc.ContractError) as info:
        REAL_GEMV(SimpleNamespace(), 1, 64, 64, RefusingCompiler(), decode=decode)  # type: ignore[arg-type]
    assert info.value.argument == "decode" and info.value.received == repr(decode)


@pytest.mark.parametrize("kernel", [np.array(["blockwise_fp8_mma"]), np.array(["blockwise_fp8_gemv", "x"]),
                                    b"blockwise_fp8_mma"], ids=repr)
def test_the_vector_plan_takes_a_kernel_name_as_a_str_only(monkeypatch, kernel) -> None:
    """A one-element array of the name once passed (numpy's == made it equal), a two-element one raised ValueError."""
    context, stream = stand_ins(monkeypatch)
    with pytest.raises(mc.ContractError) as info:
        mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(4096, 4096), kernel=kernel)
    assert info.value.argument == "kernel" and info.value.received == repr(kernel)


def test_devices_below_cc_8_9_are_refused(monkeypatch) -> None:
    context, stream = stand_ins(monkeypatch, cc=(8, 6))
    for make in (lambda: mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(64, 64)),
                 lambda: mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(2, 64, 64)),
                 lambda: mc.BlockwiseFp8Quantizer(context, stream, 2, 64)):
        with pytest.raises(mc.UnsupportedPlatform, match="8.9"):
            make()


def test_construction_checks_its_arguments(monkeypatch) -> None:
    context, stream = stand_ins(monkeypatch)
    with pytest.raises(mc.ContractError, match="spec"):
        mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseMatmulSpec(1, 64, 64))
    with pytest.raises(mc.ContractError, match="spec"):
        mc.BlockwiseFp8Plan(context, stream, mc.DenseVectorSpec(64, 64))
    with pytest.raises(mc.ContractError, match="stream"):
        mc.BlockwiseFp8Plan(context, None, mc.DenseMatmulSpec(1, 64, 64))
    with pytest.raises(mc.ContractError, match="context"):
        mc.BlockwiseFp8VectorPlan(object(), stream, mc.DenseVectorSpec(64, 64))


@pytest.mark.parametrize("engine", ["gemv", "mma"])
@pytest.mark.parametrize("kwargs, argument, received", [
    ({"m": 0}, "m", "0"), ({"m": 17}, "m", "17"), ({"m": 2.0}, "m", "2.0"), ({"warps": 3}, "warps", "3"),
    ({"warps": True}, "warps", "True"), ({"rows": 3}, "rows", "3"), ({"rows": 64}, "rows", "64"),
    ({"rows": 16.0}, "rows", "16.0"), ({"pdl_trigger": "never"}, "pdl_trigger", "'never'"),
    ({"pdl_trigger": 1}, "pdl_trigger", "1"), ({"decode": "fast"}, "decode", "'fast'"),
    ({"decode": 1}, "decode", "1"),
])
def test_the_engines_check_their_knobs_before_the_device_is_asked(engine, kwargs, argument, received) -> None:
    args = {"m": 1, "warps": None, "rows": None, "pdl_trigger": None, "decode": None, **kwargs}
    make = _fp8.Fp8Gemv if engine == "gemv" else _fp8_mma.Fp8MmaGemv
    with pytest.raises(mc.ContractError) as info:  # no context, no compiler: the checks come first
        make(None, args["m"], 64, 64, None, warps=args["warps"], rows=args["rows"], pdl_trigger=args["pdl_trigger"],
             decode=args["decode"])
    assert info.value.argument == argument and info.value.received == received


def test_the_cuda_core_gemv_has_no_integer_decode() -> None:
    with pytest.raises(mc.ContractError) as info:
        _fp8.Fp8Gemv(None, 1, 64, 64, None, decode="integer")
    assert info.value.argument == "decode" and "cvt.rn.f16x2.e4m3x2" in info.value.expected


@pytest.mark.parametrize("m, rows", [(4, 16), (5, 8), (16, 4), (1, 16)])
def test_the_cuda_core_gemv_refuses_rows_past_one_output_per_lane(m, rows) -> None:
    with pytest.raises(mc.ContractError) as info:
        _fp8.Fp8Gemv(None, m, 64, 64, None, rows=rows)
    assert info.value.argument == "rows" and f"M = {m}" in info.value.expected


@pytest.mark.parametrize("kwargs, argument", [({"rows": 0}, "rows"), ({"k": -1}, "k"), ({"block": (128, 1)}, "block"),
                                              ({"block": "1x128"}, "block"), ({"rows": 2**24, "block": (128, 128)},
                                                                             "rows")])
def test_the_quantizer_checks_its_arguments_before_compiling(monkeypatch, kwargs, argument) -> None:
    context, stream = stand_ins(monkeypatch)
    args = {"rows": 4, "k": 256, "block": (1, 128), **kwargs}
    with pytest.raises(mc.ContractError) as info:
        mc.BlockwiseFp8Quantizer(context, stream, args["rows"], args["k"], args["block"])
    assert info.value.argument == argument


def test_the_quantizer_checks_operands_and_its_stream_before_the_launch(monkeypatch) -> None:
    from mircuda.runtime import Stream

    context, stream = stand_ins(monkeypatch)
    quantizer = object.__new__(mc.BlockwiseFp8Quantizer)  # its state, without compiling the kernel
    from mircuda.dtypes import dtype_info

    quantizer.rows, quantizer.k, quantizer.block, quantizer.scale_shape = 200, 300, (128, 128), (2, 3)
    quantizer._context, quantizer._stream, quantizer._launch, quantizer.config = context, stream, Recorder(), None
    from mircuda.matmul._spec import Operand

    quantizer._operands = (Operand("x", dtype_info(mc.bf16), 60000, "[R, K]", 2, "loads"),
                           Operand("codes", dtype_info(mc.e4m3), 60000, "[R, K]", 1, "stores"),
                           Operand("scales", dtype_info(mc.f32), 6, "[2, 3]", 4, "stores"))
    x, q, s = buffer(context, mc.bf16, 60000), buffer(context, mc.e4m3, 60000), buffer(context, mc.f32, 6)
    for args, argument in (((x, q, buffer(context, mc.f32, 5)), "scales"), ((x, buffer(context, mc.u8, 60000), s), "codes"),
                           ((buffer(context, mc.f16, 60000), q, s), "x"), ((x, buffer(context, mc.e4m3, 59999), s), "codes")):
        with pytest.raises(mc.ContractError) as info:
            quantizer.execute(stream, *args)
        assert info.value.argument == argument
    other = object.__new__(Stream)
    other._context, other._handle = context, 0x60
    with pytest.raises(mc.ContractError, match="stream"):
        quantizer.execute(other, x, q, s)
    assert quantizer._launch.calls == []
    quantizer.execute(stream, x, q, s)
    assert quantizer._launch.calls == [(stream, None, q, s, x, 200, 300)]


class FakeQuantizeCompiler:
    """Stands in for the NVRTC Compiler of the quantizer: its "kernel" records launches."""

    def compile(self, source: Any, options: Any = None) -> FakeQuantizeCompiler:
        return self

    def kernel(self, contract: Any) -> Any:
        return SimpleNamespace(contract=contract, launch=Recorder(),
                               attributes=SimpleNamespace(max_threads_per_block=1024))


def quantizer_stand_ins(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """stand_ins plus what constructing a BlockwiseFp8Quantizer asks of the device and the compiler."""
    from mircuda.runtime import Context

    context, stream = stand_ins(monkeypatch)
    monkeypatch.setattr(Context, "device_info", lambda self: SimpleNamespace(
        compute_capability=(9, 0), name="stand-in", arch="sm_90", multiprocessor_count=132,
        supports_programmatic_launch=True, max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
        max_grid_dims=(2**31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448))
    monkeypatch.setattr(_quantize, "plan_compiler", lambda compiler, context: FakeQuantizeCompiler())
    return context, stream


@pytest.mark.parametrize("integer", [np.int16, np.uint16, np.int32, np.uint32, np.int64], ids=lambda t: t.__name__)
@pytest.mark.parametrize("block, scale_shape, grid", [((1, 128), (300, 2), (75, 1, 1)), ((128, 128), (3, 2), (2, 3, 1))],
                         ids=["activations", "weights"])
def test_numpy_integer_sizes_of_the_quantizer_give_exact_python_int_operand_lengths(monkeypatch, integer, block,
                                                                                     scale_shape, grid) -> None:
    """rows and k may be numpy integers; every size computed from them is a Python int. np.int16(300) *
    np.int16(256) wraps to 11264 in numpy: an x of 11264 elements once passed the check of a [300, 256] problem and
    the kernel would have read past it (np.uint16 wrapped ceil(K / 128) and the grid as well)."""
    context, stream = quantizer_stand_ins(monkeypatch)
    quantizer = mc.BlockwiseFp8Quantizer(context, stream, integer(300), integer(256), block)
    assert (quantizer.rows, quantizer.k) == (300, 256) and type(quantizer.rows) is int and type(quantizer.k) is int
    ox, oq, os_ = quantizer._operands
    assert (ox.count, oq.count, os_.count) == (300 * 256, 300 * 256, scale_shape[0] * scale_shape[1])
    assert all(type(o.count) is int for o in (ox, oq, os_))
    assert quantizer.scale_shape == scale_shape and quantizer.config.grid == grid
    assert "[R, K] = [300, 256]" in ox.shape
    x, q = buffer(context, mc.bf16, 300 * 256, 0x1000_0000), buffer(context, mc.e4m3, 300 * 256, 0x2000_0000)
    s = buffer(context, mc.f32, os_.count, 0x3000_0000)
    for short, argument in (((buffer(context, mc.bf16, 11264, 0x1000_0000), q, s), "x"),
                            ((x, buffer(context, mc.e4m3, 11264, 0x2000_0000), s), "codes")):
        with pytest.raises(mc.ContractError) as info:
            quantizer.execute(stream, *short)
        assert info.value.argument == argument
    assert quantizer._launch.calls == []
    quantizer.execute(stream, x, q, s)
    (call,) = quantizer._launch.calls
    assert call[-2:] == (300, 256) and type(call[-2]) is int and type(call[-1]) is int


# -- the njit executor ----------------------------------------------------------------------------
def test_the_njit_executor_packs_the_kernel_parameters_in_c_abi_order() -> None:
    pytest.importorskip("numba")
    seen: list[tuple[int, ...]] = []
    blocks: list[bytes] = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # type: ignore[no-untyped-def]
        pointers = (ctypes.c_uint64 * 10).from_address(params)
        blocks.append(b"".join(ctypes.string_at(p, 8 if i < 6 else 4) for i, p in enumerate(pointers)))
        seen.append((f, gx, gy, gz, bx, by, bz, smem, stream, extra))
        return 0

    entry_point = proto(fake_launch)
    execute = fp8_gemv_executor(0xF00, 25, 64, 200, 304, launch_function=entry_point, stream=0x50)
    assert execute(np.uint64(0x50), 0x1000, 0x2004, 0x3010, 0x4008, 0x5002, 0x6002, 1.5, -0.25) == 0
    assert seen == [(0xF00, 25, 1, 1, 64, 1, 1, 0, 0x50, 0)]
    # (d, c, a, sa, b, sb, alpha, beta, n, k), as blockwise_fp8_gemv declares them.
    assert blocks[0] == struct.pack("<QQQQQQffii", 0x5002, 0x6002, 0x1000, 0x2004, 0x3010, 0x4008, 1.5, -0.25, 200, 304)
    for bad in ((0x1008, 0x2004, 0x3010, 0x4008, 0x5002, 0x6002), (0x1000, 0x2004, 0x3018, 0x4008, 0x5002, 0x6002),
                (0x1000, 0x2002, 0x3010, 0x4008, 0x5002, 0x6002), (0x1000, 0x2004, 0x3010, 0x4001, 0x5002, 0x6002),
                (0x1000, 0x2004, 0x3010, 0x4008, 0x5001, 0x6002), (0x1000, 0x2004, 0x3010, 0x4008, 0x5002, 0x6003)):
        assert execute(0x50, *bad, 1.0, 0.0) == INVALID_VALUE
    # Another stream than the plan's: nothing is launched.
    assert execute(0x51, 0x1000, 0x2004, 0x3010, 0x4008, 0x5002, 0x6002, 1.0, 0.0) == INVALID_HANDLE
    assert len(seen) == 1


def test_the_plans_are_exported() -> None:
    for name in ("BlockwiseFp8Plan", "BlockwiseFp8VectorPlan", "BlockwiseFp8Quantizer", "BlockwiseFp8Unavailable"):
        assert name in mc.__all__ and getattr(mc, name) is getattr(mc.matmul, name)
    assert mc.matmul.quantize_weights_reference is _quantize.quantize_weights_reference
    assert FP8_GEMV_MAX_M == 16


# -- the persistent grid (persistent=True, MIRCUDA_FP8_PERSISTENT) -----------------------------------------
@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_120f"])
@pytest.mark.parametrize("m, rows", [(1, 8), (1, 1), (4, 8), (16, 2)])
def test_the_persistent_kernel_compiles_without_spills(arch, m, rows) -> None:
    from mircuda.matmul._fp8 import fp8_gemv_options, fp8_vector_source

    opts = fp8_gemv_options(m, rows, persistent=True)
    assert dict(opts.defines)["MIRCUDA_FP8_PERSISTENT"] == "1"
    prog = mc.compile_program(fp8_vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                           ptxas_verbose=True))
    usage = prog.resource_usage()["blockwise_fp8_gemv"]
    assert usage.spill_store_bytes == usage.spill_load_bytes == usage.stack_frame_bytes == 0, usage


def test_the_persistent_knob_takes_none_or_a_bool_for_the_cuda_core_kernel() -> None:
    from mircuda.matmul._fp8 import SYMBOL, check_persistent
    from mircuda.matmul._fp8_mma import FP8_MMA_SYMBOL

    assert check_persistent(None, SYMBOL) is False and check_persistent(True, SYMBOL) is True
    assert check_persistent(False, FP8_MMA_SYMBOL) is False
    for bad, kernel in ((1, SYMBOL), ("yes", SYMBOL), (True, FP8_MMA_SYMBOL)):
        with pytest.raises(mc.ContractError) as info:
            check_persistent(bad, kernel)
        assert info.value.argument == "persistent"


def test_numpy_integer_knobs_reach_the_engine_as_ints(monkeypatch) -> None:
    import numpy as np

    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(4, 256, 512), kernel="blockwise_fp8_gemv",
                               rows=np.int64(2), warps=np.int32(2))
    assert (plan.rows, plan.warps) == (2, 2) and type(plan._engine.rows) is int and type(plan._engine.warps) is int
    vector = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(256, 512), rows=np.uint8(4))
    assert type(vector._engine.rows) is int and vector.rows == 4


def test_an_output_over_an_input_or_a_shifted_c_is_refused(monkeypatch) -> None:
    context, stream = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(3, 200, 304))
    ops = operands(context, 3, 200, 304)
    args = [ops[x] for x in ("a", "sa", "b", "sb")]
    for name in ("a", "sa", "b", "sb"):
        d = buffer(context, mc.bf16, 600, ops[name].handle + 16)
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args, d)
        assert info.value.argument == "d" and f"overlapping {name} at" in info.value.received
    shifted = buffer(context, mc.bf16, 600, ops["d"].handle + 2)  # c one element off d: a race
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, *args, ops["d"], 1.0, 1.0, c=shifted)
    assert info.value.argument == "d" and "overlapping c at" in info.value.received
    assert plan._launch.calls == []
    plan.execute(stream, *args, ops["d"], 1.0, 1.0, c=ops["d"])  # c is d: accumulate in place
    assert len(plan._launch.calls) == 1
