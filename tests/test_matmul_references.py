"""Bad input to the FP8 and NVFP4 numpy references: a ContractError naming the argument, never a wrong value."""

from __future__ import annotations

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
    with pytest.raises(ContractError, match=r"'x'.*BF16's range.*1e\+39.*\(0, 0\)"):
        quantize_activations_reference(np.array([[1e39, 1.0]]))


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
