"""Element types mircuda understands, as numpy scalar types (``ml_dtypes`` for bf16, fp8 and fp4).

The public names are numpy scalar *types* (``mc.f32 is numpy.float32``), so they can parametrize
``DeviceBuffer[mc.f32]`` and serve as kernel scalar parameter types.

Layouts: ``bf16`` is bfloat16 (1-8-7); ``e4m3`` is OCP FP8 E4M3 "fn" (no infinities, one NaN
pattern; OCP 8-bit Floating Point Specification 1.0); ``e2m1`` is OCP MX FP4 E2M1 (OCP Microscaling
Formats 1.0). numpy (via ml_dtypes) stores one ``e2m1`` value per byte; packed FP4 pairs (two values
per byte, as NVIDIA's tensor cores read them) travel in ``u8`` buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import ml_dtypes
import numpy as np

__all__ = [
    "bool_", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
    "f16", "bf16", "f32", "f64", "e4m3", "e2m1",
    "DTypeInfo", "dtype_info", "SUPPORTED", "is_integer_value",
]

bool_ = np.bool_
i8 = np.int8
i16 = np.int16
i32 = np.int32
i64 = np.int64
u8 = np.uint8
u16 = np.uint16
u32 = np.uint32
u64 = np.uint64
f16 = np.float16
bf16 = ml_dtypes.bfloat16
f32 = np.float32
f64 = np.float64
e4m3 = ml_dtypes.float8_e4m3fn
e2m1 = ml_dtypes.float4_e2m1fn


@dataclass(frozen=True)
class DTypeInfo:
    """What mircuda knows of one element type.

    Attributes:
        name: mircuda's short name (``"f32"``).
        scalar_type: the numpy scalar type (``numpy.float32``).
        dtype: the numpy dtype.
        itemsize: bytes per element as stored in a buffer.
        c_name: the CUDA C spelling (``"float"``, ``"__nv_bfloat16"``).
        kind: ``"bool"``, ``"int"``, ``"uint"`` or ``"float"``.
        bits: the value width in bits (4 for e2m1 even though it is stored in a byte).
    """

    name: str
    scalar_type: type
    dtype: np.dtype[Any]
    itemsize: int
    c_name: str
    kind: str
    bits: int


def _info(name: str, t: type, c_name: str, kind: str, bits: int) -> DTypeInfo:
    d = np.dtype(t)
    return DTypeInfo(name, t, d, d.itemsize, c_name, kind, bits)


SUPPORTED: dict[type, DTypeInfo] = {
    i.scalar_type: i
    for i in (
        _info("bool", bool_, "bool", "bool", 8),
        _info("i8", i8, "int8_t", "int", 8),
        _info("i16", i16, "int16_t", "int", 16),
        _info("i32", i32, "int32_t", "int", 32),
        _info("i64", i64, "int64_t", "int", 64),
        _info("u8", u8, "uint8_t", "uint", 8),
        _info("u16", u16, "uint16_t", "uint", 16),
        _info("u32", u32, "uint32_t", "uint", 32),
        _info("u64", u64, "uint64_t", "uint", 64),
        _info("f16", f16, "__half", "float", 16),
        _info("bf16", bf16, "__nv_bfloat16", "float", 16),
        _info("f32", f32, "float", "float", 32),
        _info("f64", f64, "double", "float", 64),
        _info("e4m3", e4m3, "__nv_fp8_e4m3", "float", 8),
        _info("e2m1", e2m1, "__nv_fp4_e2m1", "float", 4),
    )
}

_BY_DTYPE: dict[np.dtype[Any], DTypeInfo] = {i.dtype: i for i in SUPPORTED.values()}
_BY_NAME: dict[str, DTypeInfo] = {i.name: i for i in SUPPORTED.values()}


def is_integer_value(v: object) -> TypeGuard[int | np.integer[Any]]:
    """True for a Python or numpy integer *value*: ``int`` and ``numpy.integer``, but not ``bool``,
    ``numpy.bool_`` or ``numpy.timedelta64`` (numpy makes timedelta64 an integer subclass; a duration is
    not a count). Every integer argument mircuda checks (launch geometry, integer kernel parameters)
    uses this one rule."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_, np.timedelta64))


# Python's int/float/complex and None would silently mean i64/f64 to numpy: CUDA's float is 32-bit.
_WIDTHLESS_TYPES = (int, float, complex)


def dtype_info(t: Any) -> DTypeInfo:
    """Return the :class:`DTypeInfo` of an element type given as a scalar type (``mc.f32``), a numpy
    dtype, a numpy dtype name that states its width (``"float32"``, ``"f4"``, ``"bfloat16"``) or a
    mircuda name (``"f32"``).

    Refused, because they do not say a width: Python's ``int``, ``float`` and ``complex``, ``None``, and
    names without a width (``"float"``, ``"int"``, ``"double"``, ``"f"``); refused because they are not
    types: values such as ``numpy.float32(0.5)`` or arrays.

    Raises:
        ContractError: ``t`` is not one of the supported element types.
    """
    info = SUPPORTED.get(t) if isinstance(t, type) else None
    if info is not None:
        return info
    if t is bool:
        return SUPPORTED[bool_]
    if isinstance(t, str) and t in _BY_NAME:
        return _BY_NAME[t]
    d: np.dtype[Any] | None = None
    hint = ""
    if any(t is w for w in _WIDTHLESS_TYPES):  # identity: dtype('f8') == float
        hint = "Python's int and float do not say a width: use mc.i64, mc.f32, mc.f64..."
    elif isinstance(t, (type, np.dtype, str)):
        try:
            d = np.dtype(t)
        except Exception:  # numpy raises TypeError, ValueError or even SyntaxError for malformed names
            d = None
        if isinstance(t, str) and d is not None and not any(c.isdigit() for c in t):
            d = None  # "float", "int", "double", "f": numpy's platform or C names, no width stated
            hint = f"the name {t!r} does not say a width: use mircuda's names (f32, i64...) or numpy's (float32, int64...)"
    elif t is not None:
        hint = (f"a {type(t).__name__} is a value, not a type" +
                (f": its type is {type(t).__module__}.{type(t).__name__}" if isinstance(t, np.generic) else ""))
    info = _BY_DTYPE.get(d) if d is not None else None
    if info is None:
        from .errors import ContractError

        names = ", ".join(i.name for i in SUPPORTED.values())
        received = repr(t)
        if len(received) > 80:
            received = received[:77] + "..."
        if d is not None and d.byteorder == ">":
            received = f"{t!r} (big-endian {d.str}: CUDA is little-endian)"
        raise ContractError("dtype", f"one of {names} (a mircuda/numpy scalar type, dtype or name)", received, hint)
    return info
