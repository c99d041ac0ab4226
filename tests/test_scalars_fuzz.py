"""Property tests (hypothesis) of contracts, argument packing and LaunchConfig (issue 12, "fuzzing in CI").

Only mircuda's documented errors may escape, and no wrong value may pass: every packed float is checked
against an exact oracle (fractions and the format's neighbouring codes, independent of mircuda's
rounding) and against numpy/ml_dtypes wherever their conversion rounds once.
"""

from __future__ import annotations

import math
import string
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mircuda as mc
from mircuda.dtypes import SUPPORTED, DTypeInfo, dtype_info

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FLOATS = [i for i in SUPPORTED.values() if i.kind == "float"]
INTS = [i for i in SUPPORTED.values() if i.kind in ("int", "uint")]
WIDE_LONGDOUBLE = np.finfo(np.longdouble).nmant > np.finfo(np.float64).nmant


def one_of_values(values: list[object]) -> st.SearchStrategy[object]:
    """Like ``st.sampled_from``, for values that cannot be hashed (generic timedelta64, arrays)."""
    return st.integers(0, len(values) - 1).map(lambda i: values[i])


class FakeContext:
    _closed = True
    _handle = 1


_PACKERS: dict[str, mc.ArgumentPacker] = {}


def pack(info: DTypeInfo, value: object) -> bytes:
    p = _PACKERS.get(info.name)
    if p is None:
        p = _PACKERS[info.name] = mc.ArgumentPacker(mc.cuda_export("k", v=info.scalar_type), FakeContext())
    return p.pack(value)


# ---- an exact oracle of round-to-nearest-even into a format, from its codes -------------------------

def _code_value(info: DTypeInfo, code: int) -> float:
    return float(np.array([code], f"u{info.itemsize}").view(info.dtype).astype(np.float64)[0])


def oracle(info: DTypeInfo, exact: Fraction) -> bytes | None:
    """The format's code nearest ``exact`` (ties to the even code), or None beyond the finite range."""
    a = abs(exact)
    top = int(np.array(ml_dtypes.finfo(info.dtype).max, info.dtype).view(f"u{info.itemsize}"))
    top_value = Fraction(_code_value(info, top))
    if a > top_value:
        half = (top_value - Fraction(_code_value(info, top - 1))) / 2
        if a - top_value > half or (a - top_value == half and top & 1):
            return None
        code = top
    else:
        with np.errstate(over="ignore"):
            guess = int(np.array(float(a)).astype(info.dtype).view(f"u{info.itemsize}"))
        guess = min(guess, top)  # a double rounding may have crossed into inf/NaN codes
        candidates = [c for c in (guess - 1, guess, guess + 1) if 0 <= c <= top]
        best = min(abs(Fraction(_code_value(info, c)) - a) for c in candidates)
        nearest = [c for c in candidates if abs(Fraction(_code_value(info, c)) - a) == best]
        code = nearest[0] if len(nearest) == 1 else next(c for c in nearest if c % 2 == 0)
    value = _code_value(info, code)
    # The sign through ml_dtypes' own encoding (exact: the value is the format's): -0 where it has one.
    return np.array(-value if exact < 0 else value).astype(info.dtype).tobytes()


def packed_value(info: DTypeInfo, data: bytes) -> float:
    return float(np.frombuffer(data, f"u{info.itemsize}").view(info.dtype).astype(np.float64)[0])


def check_real(info: DTypeInfo, value: object, exact: Fraction, numpy_rounds_once: bool) -> None:
    want = oracle(info, exact)
    if want is None:
        with pytest.raises(mc.ContractError) as err:
            pack(info, value)
        assert err.value.argument == "v"
        return
    got = pack(info, value)
    if exact == 0:  # +-0.0 keep their sign, the integer 0 is +0: the magnitude is what is checked here
        assert packed_value(info, got) == 0
    else:  # a negative value too small for the format rounds to -0, as IEEE 754 says
        assert got == want, (info.name, value)
    if numpy_rounds_once:
        with np.errstate(over="ignore", invalid="ignore"):
            ref = np.array(value, info.dtype)
        if np.isfinite(ref.astype(np.float64)) and (info.name != "e2m1" or abs(exact) < 7):
            assert got == ref.tobytes(), (info.name, value)


# ---- floats, ints and long doubles into every float type ---------------------------------------------

@FUZZ
@given(info=st.sampled_from(FLOATS), x=st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True))
def test_a_double_packs_rounded_once_into_every_float_type(info: DTypeInfo, x: float) -> None:
    # ml_dtypes converts a double to bfloat16 through float32 (two roundings): numpy is compared only
    # where that is one rounding; the oracle always.
    with np.errstate(over="ignore"):
        as_f32 = float(np.float32(x))
    once = info.name != "bf16" or as_f32 == x or not math.isfinite(as_f32)
    check_real(info, x, Fraction(x), once)
    if x == 0:
        assert pack(info, x) == np.array(x, info.dtype).tobytes()  # +-0 keep their sign


@FUZZ
@given(info=st.sampled_from(FLOATS), data=st.data())
def test_values_near_the_formats_own_numbers_pack_as_the_oracle_says(info: DTypeInfo, data: st.DataObject) -> None:
    # Ties, half-way subnormals and the overflow edge are where rounding goes wrong: aim at them.
    top = int(np.array(ml_dtypes.finfo(info.dtype).max, info.dtype).view(f"u{info.itemsize}"))
    code = data.draw(st.integers(0, top - 1), label="code")
    lo, hi = Fraction(_code_value(info, code)), Fraction(_code_value(info, code + 1))
    offset = data.draw(st.sampled_from([Fraction(1, 2), Fraction(0), Fraction(1, 3), Fraction(2, 3),
                                        Fraction(1, 2) + Fraction(1, 2**40), Fraction(1, 2) - Fraction(1, 2**40),
                                        Fraction(3, 2)]), label="offset")
    exact = lo + (hi - lo) * offset
    if data.draw(st.booleans(), label="negative"):
        exact = -exact
    x = float(exact)
    if Fraction(x) == exact:
        with np.errstate(over="ignore"):
            once = info.name != "bf16" or float(np.float32(x)) == x
        check_real(info, x, exact, once)
    if exact.denominator == 1:
        check_real(info, int(exact), exact, abs(exact) <= 2**53 and info.name != "bf16")


@FUZZ
@given(info=st.sampled_from(FLOATS), n=st.one_of(st.integers(-(2**70), 2**70), st.integers(-(2**1100), 2**1100)))
def test_an_integer_packs_rounded_once_from_its_exact_value(info: DTypeInfo, n: int) -> None:
    check_real(info, n, Fraction(n), abs(n) <= 2**53 and info.name != "bf16")


@FUZZ
@given(info=st.sampled_from(FLOATS),
       t=st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]),
       data=st.data())
def test_a_numpy_integer_packs_as_the_python_integer_does(info: DTypeInfo, t: type, data: st.DataObject) -> None:
    ii = np.iinfo(t)
    n = data.draw(st.integers(int(ii.min), int(ii.max)))
    try:
        want: bytes | type = pack(info, n)
    except mc.ContractError:
        want = mc.ContractError
    if want is mc.ContractError:
        with pytest.raises(mc.ContractError):
            pack(info, t(n))
    else:
        assert pack(info, t(n)) == want


@pytest.mark.skipif(not WIDE_LONGDOUBLE, reason="numpy.longdouble is a double on this platform")
@FUZZ
@given(info=st.sampled_from(FLOATS), x=st.floats(allow_nan=False, allow_infinity=False),
       tail=st.integers(-(2**20), 2**20), scale=st.integers(-16400, 16300))
def test_a_long_double_packs_rounded_once_from_its_exact_value(info: DTypeInfo, x: float, tail: int,
                                                               scale: int) -> None:
    with np.errstate(all="ignore"):
        v = np.longdouble(x) + np.ldexp(np.longdouble(tail), scale)
    assume(np.isfinite(v))
    n, d = v.as_integer_ratio()
    check_real(info, v, Fraction(n, d), False)


@FUZZ
@given(info=st.sampled_from(FLOATS), x=st.sampled_from([math.inf, -math.inf, math.nan, -math.nan]),
       wrap=st.sampled_from([float, np.float64, np.float32, np.float16]))
def test_infinities_and_nan_pass_only_where_ml_dtypes_keeps_them(info: DTypeInfo, x: float, wrap: type) -> None:
    v = wrap(x)
    with np.errstate(invalid="ignore", over="ignore"):
        kept = np.array(float(v), info.dtype).astype(np.float64)
    same = (math.isnan(x) and math.isnan(kept)) or kept == x
    if same:
        assert pack(info, v) == np.array(float(v), info.dtype).tobytes()
    else:
        with pytest.raises(mc.ContractError, match="has no"):
            pack(info, v)


@FUZZ
@given(source=st.sampled_from(FLOATS), target=st.sampled_from(FLOATS), data=st.data())
def test_a_scalar_of_one_float_type_packs_into_another_by_its_value(source: DTypeInfo, target: DTypeInfo,
                                                                       data: st.DataObject) -> None:
    top = int(np.array(ml_dtypes.finfo(source.dtype).max, source.dtype).view(f"u{source.itemsize}"))
    code = data.draw(st.integers(0, min(top, 2**32)))
    raw = np.array([code], f"u{source.itemsize}").view(source.dtype)[0]
    x = _code_value(source, code)
    try:
        want: bytes | None = pack(target, x)
    except mc.ContractError:
        want = None
    if want is None:
        with pytest.raises(mc.ContractError):
            pack(target, raw)
    else:
        assert pack(target, raw) == want


# A float type added later converts through the same path: ml_dtypes' other signed formats stand in for
# it (IEEE-like with infinities, "fn" without, "fnuz" with one NaN and no -0, 6-bit formats in a byte).
LATER = [DTypeInfo(t.__name__, t, np.dtype(t), 1, "?", "float", 6 if t.__name__.startswith("float6") else 8)
         for t in (ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3, ml_dtypes.float8_e3m4, ml_dtypes.float8_e4m3fnuz,
                   ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float6_e2m3fn,
                   ml_dtypes.float6_e3m2fn)]


@FUZZ
@given(info=st.sampled_from(LATER), data=st.data())
def test_formats_mircuda_may_add_convert_through_the_same_path(info: DTypeInfo, data: st.DataObject) -> None:
    from mircuda.launch._pack import FloatFormat

    fmt = FloatFormat(info)
    x = data.draw(st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                            st.floats(-1e5, 1e5), st.integers(-(2**20), 2**20)))
    exact = Fraction(x)
    want = oracle(info, exact)
    if want is None:
        with pytest.raises(mc.ContractError, match="'v'"):
            fmt.round("v", x)
        return
    got = np.array([fmt.encode(fmt.round("v", x))], "u1").tobytes()
    if exact != 0:
        assert got == want, (info.name, x)
        with np.errstate(over="ignore", invalid="ignore"):
            ref = np.array(float(x), info.dtype)  # ml_dtypes rounds a double to these formats once
        if np.isfinite(ref.astype(np.float64)):
            assert got == ref.tobytes(), (info.name, x)
    else:
        assert packed_value(info, got) == 0


# ---- integers into every integer type ----------------------------------------------------------------

@FUZZ
@given(info=st.sampled_from(INTS), n=st.integers(-(2**70), 2**70),
       wrap=st.sampled_from([int, np.int64, np.uint64, np.int8]))
def test_an_integer_packs_as_numpy_stores_it_or_is_refused_out_of_range(info: DTypeInfo, n: int, wrap: type) -> None:
    if wrap is not int:
        ii = np.iinfo(wrap)
        assume(ii.min <= n <= ii.max)
    v = wrap(n)
    ii = np.iinfo(info.dtype)
    if ii.min <= n <= ii.max:
        assert pack(info, v) == np.array(n, info.dtype).tobytes()
    else:
        with pytest.raises(mc.ContractError, match=info.name) as err:
            pack(info, v)
        assert err.value.argument == "v"


# ---- anything at all into any parameter --------------------------------------------------------------

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.complex_numbers(), st.text(max_size=8),
    st.binary(max_size=8), st.lists(st.integers(), max_size=3), st.tuples(st.floats()),
    st.fractions(), st.decimals(allow_nan=True),
    one_of_values([np.timedelta64(3), np.datetime64(3, "s"), np.bool_(True), np.float32("nan"), np.zeros(3),
                     np.array(1.0), np.longdouble("1e4000") if WIDE_LONGDOUBLE else np.longdouble(1), np.str_("1"),
                     np.complex64(1), ml_dtypes.bfloat16(1.5), ml_dtypes.float8_e5m2(2), ml_dtypes.int4(3),
                     object(), float, np.float32]),
)


@FUZZ
@given(info=st.sampled_from(list(SUPPORTED.values())), v=ANYTHING)
def test_any_value_either_packs_or_is_refused_by_name(info: DTypeInfo, v: object) -> None:
    try:
        got = pack(info, v)
    except mc.ContractError as err:
        assert err.argument == "v" and "expected" in str(err)
        return
    assert len(got) == info.itemsize
    # What passed is a number of the right kind, and packs as the value it is.
    if info.kind == "bool":
        assert type(v) is bool or isinstance(v, np.bool_)
        assert got == bytes([int(bool(v))])
    elif info.kind in ("int", "uint"):
        assert isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.timedelta64))
        assert got == np.array(int(v), info.dtype).tobytes()
    else:
        assert not isinstance(v, (bool, np.bool_, str, bytes, complex, np.timedelta64, np.datetime64))
        got_value = packed_value(info, got)
        x = float(v)  # type: ignore[arg-type]
        if math.isnan(x):
            assert math.isnan(got_value)
        elif math.isinf(x):
            assert got_value == x
        else:
            want = oracle(info, Fraction(x) if not isinstance(v, int) else Fraction(v))
            assert want is not None and (got == want or got_value == 0 == packed_value(info, want))


# ---- contracts -----------------------------------------------------------------------------------------

SPECS = st.one_of(
    one_of_values([t for t in SUPPORTED] + [bool, int, float, complex, str, None, object, np.longdouble,
                                               np.complex64, np.float32(1), np.zeros(2), "f32", "float32"]),
    one_of_values([mc.DeviceBuffer[t] for t in SUPPORTED] + [mc.In[mc.DeviceBuffer[mc.f32]],
                                                                mc.Out[mc.DeviceBuffer[mc.bf16]],
                                                                mc.InOut[mc.DeviceBuffer[mc.u8]]]),
    st.text(max_size=6), st.integers(), st.floats(),
)
NAMES = st.one_of(st.sampled_from(["x", "n", "stream", "config", "_x", "class", "alpha", "β", "a1"]),
                  st.text(alphabet=string.ascii_letters + string.digits + "_", min_size=1, max_size=6))


@FUZZ
@given(symbol=st.one_of(st.text(max_size=8), st.sampled_from(["k", "kernel_1", "1k", ""])),
       params=st.dictionaries(NAMES, SPECS, max_size=4))
def test_cuda_export_builds_the_declared_contract_or_names_the_fault(symbol: str, params: dict) -> None:
    try:
        contract = mc.cuda_export(symbol, **params)
    except mc.ContractError as err:
        assert err.argument in {"symbol", *params} and "expected" in str(err)
        return
    assert contract.symbol == symbol and contract.names == tuple(params)
    for p, spec in zip(contract.params, params.values()):
        if p.kind == "scalar":
            assert isinstance(spec, type) and p.info is dtype_info(spec)
            assert spec not in (int, float, complex)
        else:
            assert p.access in ("in", "out", "inout")


@FUZZ
@given(t=st.one_of(st.text(max_size=12), st.sampled_from([",", "float", "int", "(", "f4,f4", "O", "V8", "S3"])))
def test_dtype_info_of_any_name_is_a_supported_type_with_a_width_or_a_contract_error(t: str) -> None:
    try:
        info = dtype_info(t)
    except mc.ContractError as err:
        assert err.argument == "dtype"
        return
    assert info in SUPPORTED.values()
    assert t == info.name or any(c.isdigit() for c in t) or t == "bool"


# ---- launch geometry -----------------------------------------------------------------------------------

DIM = st.one_of(st.integers(-3, 2**40), one_of_values([np.int32(4), np.uint64(7), np.int8(-1)]),
                st.booleans(), st.floats(), st.none(), st.text(max_size=2),
                one_of_values([np.timedelta64(5), np.datetime64(5, "s"), np.bool_(True), np.float32(2)]))
GEOMETRY = st.one_of(DIM, st.lists(DIM, max_size=4), st.tuples(DIM, DIM), st.tuples(DIM, DIM, DIM))


def _dims_ok(value: object) -> tuple[int, int, int] | None:
    def ok(d: object) -> bool:
        return isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_, np.timedelta64)) and d >= 1

    dims = (value,) if not isinstance(value, (tuple, list)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(ok(d) for d in dims):
        return None
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


@FUZZ
@given(grid=GEOMETRY, block=GEOMETRY, shared=DIM)
def test_launch_config_normalizes_what_is_valid_and_refuses_the_rest(grid: object, block: object,
                                                                      shared: object) -> None:
    g, b = _dims_ok(grid), _dims_ok(block)
    s_ok = isinstance(shared, (int, np.integer)) and not isinstance(shared, (bool, np.bool_, np.timedelta64)) \
        and shared >= 0
    try:
        config = mc.LaunchConfig(grid, block, shared)  # type: ignore[arg-type]
    except mc.LaunchConfigError:
        assert g is None or b is None or not s_ok
        return
    assert (config.grid, config.block, config.shared_mem_bytes) == (g, b, int(shared))  # type: ignore[arg-type]
    assert all(type(d) is int for d in (*config.grid, *config.block))  # type: ignore[misc]


@FUZZ
@given(n=DIM, block=DIM)
def test_for_elements_covers_every_element_or_refuses(n: object, block: object) -> None:
    try:
        config = mc.LaunchConfig.for_elements(n, block)  # type: ignore[arg-type]
    except mc.LaunchConfigError:
        assert _dims_ok(n) is None or _dims_ok(block) is None
        return
    n, block = int(n), int(block)  # type: ignore[call-overload]
    assert config.block == (block, 1, 1)
    assert (config.grid[0] - 1) * block < n <= config.grid[0] * block  # type: ignore[index]
