"""Properties of argument packing over generated values (hypothesis): every accepted scalar packs to
the bytes C's conversion gives, every integer outside its type's range is refused naming the
parameter, and the fast and slow paths agree (a Python int/float and the numpy scalar of the same
value pack the same). The examples are derandomized (the ``mircuda`` profile in conftest.py), so a
failure repeats on every run."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import mircuda as mc
from test_packing_and_config import FakeContext

INTS = {mc.i8: "<b", mc.u8: "<B", mc.i16: "<h", mc.u16: "<H", mc.i32: "<i", mc.u32: "<I", mc.i64: "<q", mc.u64: "<Q"}
F32_MAX = float(np.finfo(np.float32).max)


def packer(dtype: type) -> mc.ArgumentPacker:
    return mc.ArgumentPacker(mc.cuda_export("k", v=dtype), FakeContext())


@pytest.mark.parametrize("dtype", list(INTS), ids=lambda t: mc.dtypes.dtype_info(t).name)
@given(data=st.data())
def test_integers_pack_in_range_and_are_refused_outside(dtype, data) -> None:
    info = np.iinfo(mc.dtypes.dtype_info(dtype).dtype)
    lo, hi = int(info.min), int(info.max)
    p = packer(dtype)
    inside = data.draw(st.integers(lo, hi), label="inside")
    assert p.pack(inside) == struct.pack(INTS[dtype], inside)
    assert p.pack(np.dtype(info.dtype).type(inside)) == struct.pack(INTS[dtype], inside)
    outside = data.draw(st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1)), label="outside")
    with pytest.raises(mc.ContractError) as err:
        p.pack(outside)
    assert err.value.argument == "v" and str(outside) in str(err.value)


@given(st.floats(min_value=-F32_MAX, max_value=F32_MAX, allow_nan=False))
def test_finite_floats_pack_as_c_rounds_them_to_f32(value) -> None:
    p = packer(mc.f32)
    want = struct.pack("<f", value)  # C's double-to-float conversion: round to nearest even
    assert p.pack(value) == want and p.pack(np.float64(value)) == want


@pytest.mark.parametrize("dtype, rounded", [(mc.bf16, ml_dtypes.bfloat16), (mc.f16, np.float16)], ids=["bf16", "f16"])
@given(value=st.floats(allow_nan=False, allow_infinity=False, width=32))
@example(value=65504.0).via("f16 max")
@example(value=65519.0).via("rounds down to f16 max")
@example(value=-65520.0).via("rounds to f16 -inf: refused")
@example(value=3.3895313892515355e38).via("bf16 max")
@example(value=3.3961775292304600e38).via("rounds to bf16 inf: refused")
@example(value=5.96e-8).via("f16 subnormal")
def test_bf16_and_f16_pack_as_they_round_and_refuse_finite_overflow(dtype, rounded, value) -> None:
    with np.errstate(over="ignore"):
        want = rounded(value)  # round to nearest even; overflows to inf
    if np.isfinite(want):
        assert packer(dtype).pack(value) == want.tobytes()
    else:  # a finite value the type cannot hold is refused, never packed as inf
        with pytest.raises(mc.ContractError) as err:
            packer(dtype).pack(value)
        assert err.value.argument == "v"
