"""Issue 12, items 4 and 5 (API edges): each failing input, as a test holding the right value."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import SUPPORTED, dtype_info
from mircuda.launch import KernelContract, Param


class FakeContext:
    """Stands in for a Context: packing only compares identities."""

    _closed = True
    _handle = 1


def pack(dtype: object, value: object) -> bytes:
    return mc.ArgumentPacker(mc.cuda_export("k", v=dtype), FakeContext()).pack(value)


FLOATS = [i for i in SUPPORTED.values() if i.kind == "float"]
NARROW = [i for i in FLOATS if i.itemsize < 4]
WIDE_LONGDOUBLE = np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant


# Item 4: every float conversion equals ml_dtypes bit for bit at its edges (ties, subnormals, saturation).

def test_e4m3_464_is_the_tie_below_the_nan_slot_and_rounds_to_448() -> None:
    assert pack(mc.e4m3, 464.0) == bytes([0x7E]) == np.array(464.0, ml_dtypes.float8_e4m3fn).tobytes()
    assert pack(mc.e4m3, -464) == bytes([0xFE])
    assert pack(mc.e4m3, np.float32(463.99)) == bytes([0x7E])
    with pytest.raises(mc.ContractError, match="'v'.*e4m3") as info:
        pack(mc.e4m3, 464.00001)  # ml_dtypes: NaN
    assert info.value.argument == "v"


def _edges(info) -> list[float]:
    """Ties, subnormals and the saturation edge of a float format, all exact doubles (and exact float32s,
    so that ml_dtypes' double -> float32 -> bfloat16 path rounds once)."""
    fi = ml_dtypes.finfo(info.dtype)
    top = float(fi.max)
    codes = np.array([int(np.array(fi.max, info.dtype).view(f"u{info.itemsize}")) - 1], f"u{info.itemsize}")
    below_top = float(codes.view(info.dtype).astype(np.float64)[0])  # the code just below the largest
    half_ulp_top = (top - below_top) / 2
    tiny = float(fi.smallest_subnormal)
    normal = float(fi.smallest_normal)
    one_ulp = 2.0 ** -int(fi.nmant)
    values = [0.0, -0.0, tiny, tiny / 2, tiny * 1.5, tiny * 2.5, tiny / 4, normal - tiny / 2, normal,
              1.0 + one_ulp / 2, 1.0 + one_ulp * 1.5, 1.0 + one_ulp / 4, 3.0 * one_ulp / 2,
              top, below_top + half_ulp_top, top + half_ulp_top / 2]
    return [s * v for v in values for s in (1.0, -1.0)]


@pytest.mark.parametrize("info", FLOATS, ids=lambda i: i.name)
def test_every_float_type_packs_its_edges_as_ml_dtypes_does(info) -> None:
    for x in _edges(info):
        if info.name == "bf16":  # ml_dtypes goes through float32: these rounds once there too
            assert float(np.float32(x)) == x
        want = np.array(x, info.dtype)
        assert pack(info.scalar_type, x) == want.tobytes(), (info.name, x)


@pytest.mark.parametrize("info", FLOATS, ids=lambda i: i.name)
def test_the_overflow_tie_is_refused_exactly_where_ml_dtypes_leaves_the_finite_range(info) -> None:
    fi = ml_dtypes.finfo(info.dtype)
    top = np.array(fi.max, info.dtype)
    code = int(top.view(f"u{info.itemsize}"))
    below = float(np.array([code - 1], f"u{info.itemsize}").view(info.dtype).astype(np.float64)[0])
    top_int = int(float(fi.max))  # (int() of an ml_dtypes scalar overflows for bf16)
    tie = top_int + (top_int - int(below)) // 2  # an integer in every format here: exact as an int
    ties = [tie, float(tie)] if info.itemsize < 8 else [tie]  # f64's tie is beyond the doubles
    with np.errstate(over="ignore"):
        ml = np.array(float(tie), info.dtype).astype(np.float64) if info.itemsize < 8 else np.inf
    for t in ties:
        if code & 1:  # the largest finite code is odd: the tie goes up, out of range (inf, NaN, or e2m1's 6.0)
            assert not np.isfinite(ml) or info.name == "e2m1"
            with pytest.raises(mc.ContractError, match="'v'"):
                pack(info.scalar_type, t)
            with pytest.raises(mc.ContractError, match="'v'"):
                pack(info.scalar_type, -t)
        else:  # e4m3: 448 is 0x7E, even; 464 stays 448
            assert pack(info.scalar_type, t) == np.array(float(t), info.dtype).tobytes() == top.tobytes()
        assert pack(info.scalar_type, tie - 1) == top.tobytes()


def test_e2m1_saturation_in_ml_dtypes_is_an_error_here() -> None:
    # ml_dtypes saturates e2m1 (no inf, no NaN): 7.0 -> 6.0 and 1e30 -> 6.0. Rounded to nearest even,
    # 7.0 goes to 8.0, beyond the format: refused, like every value ml_dtypes cannot represent.
    assert float(np.array(1e30, ml_dtypes.float4_e2m1fn)) == 6.0
    for x in (7.0, 1e30, -7):
        with pytest.raises(mc.ContractError, match="e2m1"):
            pack(mc.e2m1, x)
    assert pack(mc.e2m1, 6.99) == bytes([0x7])


@pytest.mark.parametrize("dtype, value", [(mc.e4m3, float("inf")), (mc.e4m3, float("-inf")),
                                          (mc.e2m1, float("inf")), (mc.e2m1, float("nan"))])
def test_infinities_and_nan_a_format_lacks_are_refused_by_name(dtype, value) -> None:
    with pytest.raises(mc.ContractError, match="has no") as info:
        pack(dtype, value)
    assert info.value.argument == "v"


@pytest.mark.parametrize("info", [i for i in FLOATS if i.name not in ("e4m3", "e2m1")], ids=lambda i: i.name)
def test_formats_with_infinity_and_nan_keep_them(info) -> None:
    for x in (float("inf"), float("-inf"), float("nan")):
        assert pack(info.scalar_type, x) == np.array(x, info.dtype).tobytes()


def test_a_bf16_parameter_rounds_a_double_once() -> None:
    # ml_dtypes rounds a double to bfloat16 through float32 (1 + 2**-8 + 2**-30 -> 1 + 2**-8 -> 1.0);
    # mircuda, like CUDA's __double2bfloat16, rounds once: up to 1 + 2**-7.
    x = 1 + 2**-8 + 2**-30
    assert pack(mc.bf16, x) == struct.pack("<H", 0x3F81)
    assert pack(mc.bf16, x) == np.array(np.float32(1 + 2**-7), ml_dtypes.bfloat16).tobytes()


# Item 5: integers above 2**53 and long doubles round once; out-of-range finite values are refused.

def test_an_integer_above_2_53_rounds_once_into_f32() -> None:
    assert pack(mc.f32, 2**60 + 2**36 + 1) == np.float32(2**60 + 2**37).tobytes()
    assert pack(mc.f32, 2**60 + 2**36) == np.float32(2**60).tobytes()  # the exact tie: to even
    assert pack(mc.f16, 2**11 + 1 + 0) == np.float16(2048).tobytes()  # tie: to even
    assert pack(mc.bf16, 2**60 + 2**52 + 1) == np.array(np.float32(2**60 + 2**53), ml_dtypes.bfloat16).tobytes()
    assert pack(mc.f64, 2**60 + 2**7 + 1) == struct.pack("<d", float(2**60 + 2**8))
    assert pack(mc.f32, np.uint64(2**64 - 1)) == np.float32(2**64).tobytes()


@pytest.mark.skipif(not WIDE_LONGDOUBLE, reason="numpy.longdouble is a double on this platform")
@pytest.mark.parametrize("info", FLOATS, ids=lambda i: i.name)
def test_a_longdouble_beyond_the_range_is_refused_not_made_infinite(info) -> None:
    with pytest.raises(mc.ContractError, match="'v'") as err:
        pack(info.scalar_type, np.longdouble("1e400"))
    assert "1e+400" in str(err.value)
    with pytest.raises(mc.ContractError, match="'v'"):
        pack(info.scalar_type, -np.longdouble("1e400"))
    assert pack(info.scalar_type, np.longdouble("1e-400")) == np.array(0.0, info.dtype).tobytes()


@pytest.mark.skipif(not WIDE_LONGDOUBLE, reason="numpy.longdouble is a double on this platform")
def test_a_longdouble_rounds_once() -> None:
    x = np.longdouble(1) + np.longdouble(2.0**-24) + np.longdouble(2.0**-60)  # just above an f32 tie
    assert float(x) == 1 + 2**-24  # through a double it would be the tie itself, rounding down to 1.0
    assert pack(mc.f32, x) == np.float32(1 + 2**-23).tobytes()
    assert pack(mc.f64, x) == struct.pack("<d", 1 + 2**-24)


def test_matmul_alpha_beta_round_once_to_f32_and_refuse_overflow() -> None:
    from mircuda.matmul._spec import check_scalar

    assert check_scalar("alpha", 2**60 + 2**36 + 1) == float(np.float32(2**60 + 2**37))
    assert check_scalar("beta", 0.1) == float(np.float32(0.1))
    with pytest.raises(mc.ContractError, match="'alpha'"):
        check_scalar("alpha", 1e39)
    with pytest.raises(mc.ContractError, match="'beta'"):
        check_scalar("beta", np.timedelta64(1))


# Item 5: integer checks take int and numpy integers, never bool, timedelta64 or datetime64.

NOT_INTEGERS = [np.timedelta64(5), np.timedelta64(5, "ns"), np.datetime64(5, "s"), True, np.bool_(True), 5.0]


@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
def test_launch_geometry_takes_only_integers(value) -> None:
    for make in (lambda: mc.LaunchConfig(value, 32), lambda: mc.LaunchConfig(1, (value, 1)),
                 lambda: mc.LaunchConfig(1, 32, value), lambda: mc.LaunchConfig.for_elements(value),
                 lambda: mc.LaunchConfig.for_elements(32, value)):
        with pytest.raises(mc.LaunchConfigError):
            make()
    assert mc.LaunchConfig(np.int64(5), np.uint8(32), np.int32(0)).grid == (5, 1, 1)


@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
@pytest.mark.parametrize("dtype", [mc.i32, mc.u64, mc.i8])
def test_integer_parameters_take_only_integers(dtype, value) -> None:
    with pytest.raises(mc.ContractError, match="an integer") as info:
        pack(dtype, value)
    assert info.value.argument == "v"


@pytest.mark.parametrize("value", [np.timedelta64(5), np.datetime64(5, "s"), True, np.bool_(False), "1", None, 1j])
@pytest.mark.parametrize("info", FLOATS, ids=lambda i: i.name)
def test_float_parameters_take_only_real_numbers(info, value) -> None:
    with pytest.raises(mc.ContractError, match="a real number") as err:
        pack(info.scalar_type, value)
    assert err.value.argument == "v"


def test_matmul_dimensions_take_only_integers() -> None:
    with pytest.raises(mc.ContractError):
        mc.DenseMatmulSpec(np.timedelta64(4), 64, 64)


# Item 5: dtype_info and cuda_export.

@pytest.mark.parametrize("spec", [",", "float", "int", "uint", "double", "f", "d", "", "float32,float32", "(",
                                  np.float32(0.5), np.zeros(4), np.array(1.0), [np.float32], 3, ">f4", "M8", "U4"])
def test_dtype_info_refuses_with_a_contract_error(spec) -> None:
    with pytest.raises(mc.ContractError) as info:
        dtype_info(spec)
    assert info.value.argument == "dtype"


def test_width_less_names_say_so_and_named_widths_are_accepted() -> None:
    with pytest.raises(mc.ContractError, match="does not say a width"):
        dtype_info("float")
    with pytest.raises(mc.ContractError, match="does not say a width"):
        dtype_info("int")
    with pytest.raises(mc.ContractError, match="value, not a type"):
        dtype_info(np.float32(0.5))
    named = {"float32": "f32", "f4": "f32", "<f8": "f64", "int64": "i64", "float16": "f16", "bfloat16": "bf16",
             "float8_e4m3fn": "e4m3", "float4_e2m1fn": "e2m1", "uint8": "u8", "bool": "bool", "i8": "i8"}
    assert {k: dtype_info(k).name for k in named} == named


def test_cuda_export_refuses_values_given_as_types() -> None:
    with pytest.raises(mc.ContractError, match="value, not a type") as info:
        mc.cuda_export("k", alpha=np.float32(0.5))
    assert info.value.argument == "alpha"
    with pytest.raises(mc.ContractError, match="value, not a type") as info:
        mc.cuda_export("k", x=np.zeros(4))
    assert info.value.argument == "x"
    with pytest.raises(mc.ContractError) as info:
        mc.cuda_export("k", x="f32")
    assert info.value.argument == "x"


def test_kernel_contract_checks_its_parameters_where_it_is_built() -> None:
    with pytest.raises(mc.ContractError, match="tuple of Param") as info:
        KernelContract("k", "abc")  # type: ignore[arg-type]
    assert info.value.argument == "params"
    with pytest.raises(mc.ContractError, match="tuple of Param"):
        KernelContract("k", ("abc",))  # type: ignore[arg-type]
    f32 = dtype_info(mc.f32)
    with pytest.raises(mc.ContractError, match="one parameter of each name"):
        KernelContract("k", (Param("x", "scalar", f32), Param("x", "scalar", f32)))
    with pytest.raises(mc.ContractError, match="x.info"):
        Param("x", "scalar", "f32")  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="x.access"):
        Param("x", "buffer", f32)
    with pytest.raises(mc.ContractError, match="x.kind"):
        Param("x", "pointer", f32)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="'stream'"):
        Param("stream", "scalar", f32)
    built = KernelContract("k", [Param("x", "buffer", f32, "in"), Param("n", "scalar", dtype_info(mc.i32))])
    assert built.params == mc.cuda_export("k", x=mc.In[mc.DeviceBuffer[mc.f32]], n=mc.i32).params


# Item 5: declare_device of a function the file does not define.

def test_declare_device_of_a_missing_function_says_it_is_not_defined() -> None:
    mn = pytest.importorskip("mircuda.numba_ext")
    src = mc.cuda_kernel('extern "C" __device__ float twice(float x) { return 2.0f * x; }', "helper.cu")
    nope = mn.declare_device("nope", "float32(float32)", src)

    def k(out):  # type: ignore[no-untyped-def]
        out[0] = nope(out[0])

    with pytest.raises(mc.ContractError, match=r"defined in helper.cu.*no function of that name") as info:
        mn.numba_kernel(k, "void(float32[:])").build("sm_90", mc.CompileOptions())
    assert info.value.argument == "nope"
    assert "parameter(s)" not in str(info.value)
