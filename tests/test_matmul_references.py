"""Bad input to the FP8 and NVFP4 numpy references: a ContractError naming the argument, never a wrong value."""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mircuda.errors import ContractError
from mircuda.matmul import _fp4_reference as fp4
from mircuda.matmul import (activation_scale_shape, dequantize_reference, quantize_activations_reference,
                            quantize_weights_reference, weight_scale_shape)


def test_dequantize_reads_uint8_as_e4m3_bits() -> None:
    codes, scales = quantize_activations_reference(np.array([[1.0, -2.0, 3.0]], np.float32))
    want = dequantize_reference(codes, scales, (1, 128))
    np.testing.assert_allclose(want, [[27 / 28, -27 / 14, 3.0]], rtol=1e-6)
    np.testing.assert_array_equal(dequantize_reference(codes.view(np.uint8), scales, (1, 128)), want)


@pytest.mark.parametrize("codes", [np.float32([[1, -2, 3]]), np.int8([[1, 2, 3]]), np.array([[1 + 0j]])])
def test_dequantize_refuses_non_code_dtypes(codes: np.ndarray) -> None:
    with pytest.raises(ContractError, match=rf"'codes'.*float8_e4m3fn.*received dtype {codes.dtype}"):
        dequantize_reference(codes, np.ones((1, 1), np.float32), (1, 128))


def test_dequantize_refuses_string_scales() -> None:
    codes, scales = quantize_activations_reference(np.ones((1, 3), np.float32))
    with pytest.raises(ContractError, match=r"'scales'.*received dtype <U1"):
        dequantize_reference(codes, np.full(scales.shape, "a"), (1, 128))


@pytest.mark.parametrize("fn", [activation_scale_shape, weight_scale_shape])
@pytest.mark.parametrize(("m", "k", "arg"), [(-1, 128, "m|n"), (4, 0, "k"), (4.5, 300, "m|n"), ("4", 128, "m|n"),
                                             (None, 1, "m|n"), (True, 128, "m|n"), (4, -300, "k")])
def test_scale_shapes_refuse_bad_sizes(fn: object, m: object, k: object, arg: str) -> None:
    with pytest.raises(ContractError, match=rf"'({arg})': expected a positive int, received {re_repr(k if arg == 'k' else m)}"):
        fn(m, k)  # type: ignore[operator]


def re_repr(v: object) -> str:
    import re
    return re.escape(repr(v))


def test_scale_shapes_values() -> None:
    assert activation_scale_shape(np.int64(4), 300) == (4, 3)
    assert weight_scale_shape(300, 129) == (3, 2)
    assert type(activation_scale_shape(np.int64(4), 1)[0]) is int


@pytest.mark.parametrize("x", [np.array([["a", "b"]]), np.array([[None, 1]], dtype=object), np.array([[1 + 5j, 2 + 0j]]),
                               np.array([[True, False]])])
@pytest.mark.parametrize("fn", [quantize_activations_reference, quantize_weights_reference])
def test_quantizer_refuses_non_real(x: np.ndarray, fn: object) -> None:
    with pytest.raises(ContractError, match=rf"'x'.*real numeric.*received dtype {x.dtype}"):
        fn(x)  # type: ignore[operator]


def test_quantizer_refuses_finite_beyond_bf16() -> None:
    with pytest.raises(ContractError, match=r"'x'.*round to a finite BF16.*3\.3961e38.*1e\+39.*\(0, 0\)"):
        quantize_activations_reference(np.array([[1e39, 1.0]]))


def test_the_bf16_bound_the_message_states_is_the_one_checked() -> None:
    # BF16's largest plus half a unit in its last place rounds to inf (the halfway case goes to the even code, inf);
    # just below it rounds to the largest and is taken
    largest, half_ulp = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0 ** (127 - 8)
    _, scales = quantize_activations_reference(np.array([[np.nextafter(largest + half_ulp, 0), 1.0]]))
    assert scales[0, 0] == np.float32(largest / 448)
    with pytest.raises(ContractError, match=r"'x'.*3\.3961e38"):
        quantize_activations_reference(np.array([[largest + half_ulp, 1.0]]))


def test_a_long_double_beyond_float64_is_a_finite_value_bf16_cannot_hold() -> None:
    # 1e400 is finite as a long double and inf as a float64: refused, not quantized into an inf scale and NaN codes
    x = np.array([[1.0, 2.0]], np.longdouble) * np.longdouble("1e400")
    if not np.isfinite(x).all():
        pytest.skip("this platform's long double is float64")
    with pytest.raises(ContractError, match=r"'x'.*round to a finite BF16.*at \(0, 0\)"):
        quantize_activations_reference(x)


@pytest.mark.parametrize("call, arg", [
    (lambda: dequantize_reference([[1, 2], [3]], np.ones((2, 1), np.float32), (1, 128)), "codes"),
    (lambda: fp4.dequantize([[1, 2], [3]], np.zeros((2, 1), np.uint8), 2, 16, "linear"), "packed"),
    (lambda: fp4.dequantize(np.zeros((2, 8), np.uint8), [[1], [1, 2]], 2, 16, "linear"), "scales"),
    (lambda: fp4.scales_to_tiled([[1], [1, 2]]), "linear"),
    (lambda: fp4.scales_to_linear([[1], [1, 2]], 2, 1), "tiled"),
    (lambda: fp4.pack_e2m1([[1, 2], [3]]), "codes"),
    (lambda: fp4.unpack_e2m1([[1], [1, 2]]), "packed"),
], ids=["fp8-codes", "fp4-packed", "fp4-scales", "to-tiled", "to-linear", "pack", "unpack"])
def test_a_ragged_nested_list_is_refused_by_name(call: Any, arg: str) -> None:
    with pytest.raises(ContractError, match=rf"'{arg}'.*received list \(setting an array element"):
        call()


def test_fp4_dequantize_refuses_packed_bytes_shaped_as_other_rows() -> None:
    # rows and K swapped, or the transpose: the same byte count, but read as other rows it gives a wrong result
    x = np.random.default_rng(7).standard_normal((32, 16)).astype(np.float32)
    packed, scales, _ = fp4.quantize(x)
    assert packed.shape == (32, 8)
    for bad, rows, k in ((packed, 16, 32), (np.ascontiguousarray(packed.T), 32, 16), (packed.reshape(1, 32, 8), 32, 16)):
        shaped = re.escape(f"{rows * k // 2} bytes, flat or shaped [{rows}, {k // 2}]")
        with pytest.raises(ContractError, match=rf"'packed'.*{shaped}.*received shape {re.escape(str(bad.shape))}"):
            fp4.dequantize(bad, scales, rows, k, "linear")
    flat = fp4.dequantize(packed.reshape(-1), scales, 32, 16, "linear")
    assert np.array_equal(flat, fp4.dequantize(packed, scales, 32, 16, "linear"))


def test_quantizer_non_finite_scales_match_device_rule() -> None:
    _, s = quantize_activations_reference(np.array([[np.nan, 1.0], [np.inf, 1.0], [-np.inf, 2.0]]))
    assert np.isnan(s[0, 0]) and s[1, 0] == np.inf and s[2, 0] == np.inf
    _, s = quantize_activations_reference(np.array([[448.0, 1.0]], dtype=ml_dtypes.bfloat16))
    assert s[0, 0] == 1.0


def test_fp4_shapes_and_sizes() -> None:
    with pytest.raises(ContractError, match=r"'x'.*K a multiple of 16.*\(2, 15\)"):
        fp4.quantize(np.zeros((2, 15)))
    with pytest.raises(ContractError, match=r"'x'.*\[rows, K\].*\(16,\)"):
        fp4.quantize(np.zeros(16))
    p, sc, _ = fp4.quantize(np.ones((3, 64), np.float32))
    with pytest.raises(ContractError, match=r"'packed': expected 128 bytes"):
        fp4.dequantize(p, sc, 4, 64)
    with pytest.raises(ContractError, match=r"'tiled': expected 512 bytes.*received 10 bytes"):
        fp4.scales_to_linear(np.zeros(10, np.uint8), 3, 4)
    for args, arg in [((-1, 16, "linear"), "rows"), ((4, -16, "linear"), "k"), ((4, 16.0, "tiled"), "k"),
                      ((4, 16, "x"), "layout")]:
        with pytest.raises(ContractError, match=rf"'{arg}'"):
            fp4.scale_shape(*args)
    assert fp4.scale_shape(np.int64(130), 80, "tiled") == (256, 8)


@pytest.mark.parametrize("g", [0.0, -1.0, np.inf, np.nan, True, "1", 1j])
def test_fp4_refuses_bad_global_scale(g: object) -> None:
    with pytest.raises(ContractError, match=r"'global_value': expected a finite positive real"):
        fp4.quantize(np.ones((1, 16), np.float32), global_value=g)  # type: ignore[arg-type]


def test_fp4_refuses_codes_out_of_range() -> None:
    with pytest.raises(ContractError, match=r"'codes': expected codes 0..15, received 17"):
        fp4.pack_e2m1(np.array([17, 1]))
    for bad, shown in [([16, 1], "16"), ([255], "255"), ([-1], "-1")]:
        with pytest.raises(ContractError, match=rf"'codes'.*received {shown}"):
            fp4.e2m1_decode(np.array(bad))
    with pytest.raises(ContractError, match=r"'codes'.*received dtype float64"):
        fp4.e2m1_decode(np.array([1.7]))
    np.testing.assert_array_equal(fp4.e2m1_decode(np.arange(16)), fp4.E2M1_VALUES)
    np.testing.assert_array_equal(fp4.pack_e2m1(np.array([1, 15])), [0xF1])


def test_fp4_round_trip_on_good_input() -> None:
    x = np.linspace(-6, 6, 64, dtype=np.float32).reshape(2, 32)
    p, sc, g = fp4.quantize(x, layout="tiled")
    lp, lsc, lg = fp4.quantize(x)
    assert g == lg
    np.testing.assert_array_equal(fp4.dequantize(p, sc, 2, 32, "tiled"), fp4.dequantize(lp, lsc, 2, 32))


def test_fp4_references_are_public_and_refuse_non_real() -> None:
    from mircuda import matmul

    assert matmul.fp4_quantize_reference is fp4.quantize and matmul.fp4_scale_shape is fp4.scale_shape
    assert set(matmul.__all__) >= {"fp4_quantize_reference", "fp4_dequantize_reference", "fp4_global_scale",
                                   "fp4_scale_shape", "fp4_scales_to_tiled", "fp4_scales_to_linear", "pack_e2m1",
                                   "unpack_e2m1"}
    for bad in (np.array([["a"] * 16]), np.ones((1, 16), complex)):
        with pytest.raises(ContractError, match=rf"'x'.*real array.*received dtype {bad.dtype}"):
            fp4.quantize(bad)
    with pytest.raises(ContractError, match=r"'x': expected finite values.*inf"):
        fp4.quantize(np.array([[np.inf] + [1.0] * 15], np.float32))
    assert fp4.global_scale(np.array([2688.0, -5376.0])) == np.float32(2.0)


def test_dequantize_uint8_every_bit_pattern() -> None:
    bits = np.arange(256, dtype=np.uint8).reshape(2, 128)
    got = dequantize_reference(bits, np.full((2, 1), 2.0, np.float32), (1, 128))
    want = bits.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0
    np.testing.assert_array_equal(got, want)  # NaN codes (0x7F, 0xFF) compare equal as NaN
    assert got[0, 0x38] == 2.0 and got[1, 0x38] == -2.0  # 0x38 is E4M3 1.0, 0xB8 is -1.0


# -- NVFP4 reference: numpy integer sizes, bounds, argument names, non-finite input, scale bytes -------------
_TILED_130x5 = fp4.scales_to_tiled(np.arange(650, dtype=np.int64).reshape(130, 5) % 0x7F)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(("rows", "kblocks"), [(130, np.uint8(5)), (np.uint8(130), 5), (np.int64(130), np.uint8(5)),
                                               (np.int16(130), np.int8(5)), (np.uint64(130), np.int32(5))], ids=str)
def test_fp4_scales_to_linear_takes_numpy_integer_sizes(rows: object, kblocks: object) -> None:
    got = fp4.scales_to_linear(_TILED_130x5, rows, kblocks)  # type: ignore[arg-type]
    np.testing.assert_array_equal(got, np.arange(650).reshape(130, 5) % 0x7F)
    assert fp4.scale_shape(rows, np.uint8(80), "tiled") == (256, 8)  # type: ignore[arg-type]
    assert all(type(v) is int for v in fp4.scale_shape(rows, np.uint8(80), "tiled"))  # type: ignore[arg-type]


@pytest.mark.filterwarnings("error")
def test_fp4_scales_to_linear_with_int8_sizes_checks_the_byte_count_without_wrapping() -> None:
    with pytest.raises(ContractError, match=r"'tiled': expected 1024 bytes \(the tiled layout of \[127, 5\] scales\), "
                                            r"received 2048 bytes"):
        fp4.scales_to_linear(_TILED_130x5, np.int8(127), np.int8(5))  # type: ignore[arg-type]


@pytest.mark.parametrize(("call", "arg"), [
    (lambda: fp4.scales_to_linear(_TILED_130x5, 130, 2**40), "kblocks"),
    (lambda: fp4.scales_to_linear(_TILED_130x5, 2**40, 5), "rows"),
    (lambda: fp4.scales_to_linear(_TILED_130x5, 130, fp4.KBLOCK_LIMIT), "kblocks"),
    (lambda: fp4.scale_shape(2**62, 2**62, "tiled"), "rows"),
    (lambda: fp4.scale_shape(4, 2**62, "tiled"), "k"),
    (lambda: fp4.scale_shape(2**31 - 2**16, 16, "linear"), "rows"),
    (lambda: fp4.scale_shape(1, 2**31 - 2**16, "linear"), "k"),
    (lambda: fp4.dequantize(np.zeros(8, np.uint8), np.zeros(1, np.uint8), 1, 2**40), "k"),
    (lambda: fp4.tiled_offsets(1, 2**40), "kblocks"),
], ids=["kblocks", "rows", "kblock-limit", "shape-rows", "shape-k", "rows-limit", "k-limit", "dequantize-k", "offsets"])
def test_fp4_sizes_are_bounded_like_the_plans_dimensions(call: Any, arg: str) -> None:
    with pytest.raises(ContractError, match=rf"'{arg}': expected a (dimension|count of K-blocks) below"):
        call()


def test_fp4_size_bounds_are_the_plans_dimension_bound() -> None:
    assert fp4.scale_shape(2**31 - 2**16 - 1, 2**31 - 2**16 - 16, "linear") == (2**31 - 2**16 - 1, 2**27 - 2**12 - 1)
    assert fp4.KBLOCK_LIMIT * 16 == 2147418112


def test_fp4_tiled_byte_count_is_checked_before_the_offsets_are_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    def allocate(*args: object) -> None:
        raise AssertionError("the offsets were computed before the byte count was checked")

    monkeypatch.setattr(fp4, "tiled_offsets", allocate)
    with pytest.raises(ContractError, match=r"'tiled': expected \d+ bytes .*received 2048 bytes"):
        fp4.scales_to_linear(_TILED_130x5, 1, fp4.KBLOCK_LIMIT - 1)


def test_fp4_dequantize_names_scales_for_a_bad_tiled_size() -> None:
    p, s, _ = fp4.quantize(np.ones((2, 16), np.float32))
    with pytest.raises(ContractError, match=r"argument 'scales': expected 512 bytes \(the tiled layout of \[2, 1\] "
                                            r"scales\), received 2 bytes"):
        fp4.dequantize(p, s, 2, 16, "tiled")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("given", [None, 1.0, 1e-3])
@pytest.mark.parametrize(("bad", "shown"), [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf"), (1e39, r"1e\+39"),
                                            (-3.5e38, r"-3.5e\+38")])
def test_fp4_quantize_refuses_values_not_finite_in_fp32_with_or_without_a_global(bad: float, shown: str,
                                                                                given: float | None) -> None:
    x = np.ones((2, 32))
    x[1, 17] = bad
    with pytest.raises(ContractError, match=rf"'x': expected finite values within FP32's range.*{shown}\)? at \(1, 17\)"):
        fp4.quantize(x, given)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e39])
def test_fp4_global_scale_refuses_values_not_finite_in_fp32(bad: float) -> None:
    with pytest.raises(ContractError, match=r"'x': expected finite values within FP32's range.* at \(3,\)"):
        fp4.global_scale(np.array([1.0, 2.0, 3.0, bad]))
    assert fp4.global_scale(np.array([3.4e38, -1.0])) == np.float32(np.float32(3.4e38) / np.float32(2688))


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("g", [1e38, 1e-45, 1e-39, float(np.nextafter(np.float32(np.finfo(np.float32).max / 6), np.float32(np.inf))),
                               10**400, -(10**400), np.timedelta64(1, "s"), np.float64(np.inf)],
                         ids=["1e38", "1e-45", "1e-39", "above-max", "int-10^400", "int--10^400", "timedelta", "inf"])
def test_fp4_refuses_a_global_for_which_the_formulas_give_no_finite_scales(g: object) -> None:
    with pytest.raises(ContractError, match=r"'global_value': expected a finite positive real \(FP32\) from "
                                            r"1.17549435e-38 .* to 5.67137244e\+37"):
        fp4.quantize(np.ones((1, 16), np.float32), g)  # type: ignore[arg-type]


@pytest.mark.filterwarnings("error")
def test_fp4_global_range_ends_quantize_without_warnings_saturating_or_flushing() -> None:
    x = np.full((1, 16), 1e38, np.float32)
    packed, scales, g = fp4.quantize(x, fp4.GLOBAL_MIN)  # quotients overflow FP32: saturate to 448 and +-6
    assert g == np.float32(2.0**-126) and scales[0, 0] == 0x7E and (packed == 0x77).all()
    packed, scales, g = fp4.quantize(-x, fp4.GLOBAL_MAX)  # 1e38 / (6 * 5.67e37) = 0.29: E4M3 0.28125
    assert g == np.float32(fp4.GLOBAL_MAX) and np.isfinite(np.float32(6) * g)
    assert fp4.ue4m3_decode(scales)[0, 0] == 0.28125 and (packed == 0xFF).all()  # -6 saturated
    packed, scales, _ = fp4.quantize(np.ones((1, 16), np.float32), fp4.GLOBAL_MAX)  # flushed to zero codes
    assert (packed == 0).all() and scales[0, 0] == 0


@pytest.mark.filterwarnings("error")
def test_fp4_refuses_a_computed_global_below_the_smallest_normal_fp32() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = 1e-44  # amax / 2688 rounds to 0: every division would be by zero, NaN scales and codes
    with pytest.raises(ContractError, match=r"'x': expected an amax\(\|x\|\) of 0 or at least about 3.16e-35.*"
                                            r"global_value\), received amax 9.8\d*e-45 \(global scale 0.0\)"):
        fp4.quantize(x)
    packed, scales, _ = fp4.quantize(x * 1e10, 1e-35)
    assert (scales < 0x7F).all() and (packed[0, 8:] == 0).all()


@pytest.mark.parametrize("layout", ["linear", "tiled"])
def test_fp4_dequantize_decodes_every_scale_byte_as_the_kernels_do(layout: str) -> None:
    # the reference is the kernels' oracle for any input: bit 7 of a UE4M3 byte is ignored and 0x7F / 0xFF are NaN
    p, _, _ = fp4.quantize(np.ones((130, 48), np.float32))
    lin = np.full((130, 3), 0x38, np.uint8)
    lin[0, 0], lin[1, 1], lin[129, 2] = 0xB8, 0x7F, 0xFF
    got = fp4.dequantize(p, lin if layout == "linear" else fp4.scales_to_tiled(lin), 130, 48, layout)
    np.testing.assert_array_equal(got[0, :16], got[0, 16:32])  # 0xB8 decodes as 0x38
    assert np.isnan(got[1, 16:32]).all() and np.isnan(got[129, 32:]).all()
    assert not np.isnan(got[2:129]).any() and (got[2:129] == got[2, 0]).all()


def test_fp4_dequantize_ignores_the_tiled_padding_and_takes_every_ue4m3_byte() -> None:
    p = np.full((128, 32), 0x22, np.uint8)  # codes 2: 1.0
    lin = np.arange(128 * 4, dtype=np.uint8).reshape(128, 4) % 0x7F
    tiled = fp4.scales_to_tiled(lin[:, :3])
    tiled[tiled == 0] = 0xFF  # the padding (and the zero scales' bytes: put those back)
    tiled[fp4.tiled_offsets(128, 3).reshape(-1)] = lin[:, :3].reshape(-1)
    got = fp4.dequantize(p[:, :24], tiled, 128, 48, "tiled")
    np.testing.assert_array_equal(got, np.repeat(fp4.ue4m3_decode(lin[:, :3]).astype(np.float64), 16, axis=1))


def test_fp4_documented_scale_shapes() -> None:
    x = np.ones((130, 80), np.float32)
    _, lin, _ = fp4.quantize(x)
    _, til, _ = fp4.quantize(x, layout="tiled")
    assert lin.shape == fp4.scale_shape(130, 80, "linear") == (130, 5)
    assert fp4.scale_shape(130, 80, "tiled") == (256, 8) and til.shape == (256 * 8,) == fp4.scales_to_tiled(lin).shape
    assert fp4.scale_bytes(130, 80, "tiled") == til.size


def test_fp4_layout_given_as_an_array_is_refused_by_name() -> None:
    with pytest.raises(ContractError) as info:
        fp4.scale_shape(1, 16, np.array(["linear", "tiled"]))
    assert info.value.argument == "layout"


def test_fp4_a_bfloat16_global_value_is_a_real_number() -> None:
    import ml_dtypes

    x = np.ones((2, 16), np.float32)
    assert fp4.quantize(x, ml_dtypes.bfloat16(1.0))[2] == fp4.quantize(x, 1.0)[2] == np.float32(1.0)
