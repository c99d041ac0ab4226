"""Argument packing: the kernel-parameter block of one kernel, and per-type value conversion.

A kernel's parameters live in one contiguous block laid out as the C ABI does (each value at an
offset aligned to its size); ``kernelParams`` is an array of pointers into that block, built once.
A launch only writes values into the block and calls the driver, which copies them.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ..dtypes import DTypeInfo
from ..errors import ContractError
from ._contract import Param

__all__ = ["ArgumentBlock", "Slot", "scalar_converter", "SCALAR_CTYPES"]

SCALAR_CTYPES: dict[str, type] = {
    "bool": ctypes.c_uint8, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
    "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64, "f16": ctypes.c_uint16, "bf16": ctypes.c_uint16, "f32": ctypes.c_float,
    "f64": ctypes.c_double, "e4m3": ctypes.c_uint8, "e2m1": ctypes.c_uint8,
}
"""The ctypes slot of each scalar type. 16- and 8-bit floats are stored as their bit patterns."""


class Slot:
    """One ABI value in the block: its ctypes view, offset and size (bytes)."""

    __slots__ = ("view", "offset", "size", "label")

    def __init__(self, view: Any, offset: int, size: int, label: str) -> None:
        self.view = view
        self.offset = offset
        self.size = size
        self.label = label


class ArgumentBlock:
    """A contiguous parameter block and its ``void*`` array, for a list of ``(label, ctype)`` slots."""

    def __init__(self, slots: Sequence[tuple[str, type]]) -> None:
        offset = 0
        placed: list[tuple[str, type, int]] = []
        for label, ctype in slots:
            size = ctypes.sizeof(ctype)
            offset = (offset + size - 1) // size * size
            placed.append((label, ctype, offset))
            offset += size
        self.size = offset
        self.storage = ctypes.create_string_buffer(max(offset, 1))
        base = ctypes.addressof(self.storage)
        self.slots = [Slot(ctype.from_buffer(self.storage, off), off, ctypes.sizeof(ctype), label)
                      for label, ctype, off in placed]
        self.pointers = (ctypes.c_void_p * max(len(placed), 1))(*[base + s.offset for s in self.slots])
        self.params_address = ctypes.addressof(self.pointers) if placed else 0

    def packed_bytes(self) -> bytes:
        """The parameter block as the driver will copy it (little-endian, C ABI offsets)."""
        return self.storage.raw[: self.size]


class _NarrowFloat:
    """Exact round-to-nearest-even from a Python float (a double) to a narrow float format.

    Every value of bf16, e4m3 and e2m1 is exactly representable as a double, so rounding picks between
    the two neighbouring table entries with exact arithmetic (no double rounding through float32).
    Finite values beyond the format's range, and infinities or NaN where the format has none, are
    refused rather than turned into another value.
    """

    def __init__(self, name: str, dtype: Any, bits_type: Any) -> None:
        nbits = 4 if name == "e2m1" else np.dtype(bits_type).itemsize * 8  # ml_dtypes keeps e2m1 in 4 low bits
        patterns = np.arange(1 << (nbits - 1), dtype=bits_type)  # sign bit clear
        with np.errstate(invalid="ignore"):
            values = patterns.view(dtype).astype(np.float64)
        finite = np.isfinite(values)
        order = np.argsort(values[finite], kind="stable")
        self.values = values[finite][order]
        self.patterns = patterns[finite][order].astype(np.int64)
        self.sign = 1 << (nbits - 1)
        self.name = name
        self.max = float(self.values[-1])
        self.inf = int(patterns[np.isinf(values) & (values > 0)][0]) if np.isinf(values).any() else None
        # The canonical quiet NaN where the format has NaN (bf16: 0x7FC0; e4m3fn: its only NaN, 0x7F).
        self.nan = {"bf16": 0x7FC0, "e4m3": 0x7F}.get(name)

    def bits(self, argument: str, x: float) -> int:
        import math

        if math.isnan(x):
            if self.nan is None:
                raise ContractError(argument, f"a number ({self.name} has no NaN)", "nan")
            return self.nan
        sign = self.sign if math.copysign(1.0, x) < 0 else 0
        a = abs(x)
        if math.isinf(a):
            if self.inf is None:
                raise ContractError(argument, f"a finite number ({self.name} has no infinity)", repr(x))
            return sign | self.inf
        i = int(np.searchsorted(self.values, a))
        if i == len(self.values):  # above the largest finite value: round down only within half an ulp
            half_ulp = (self.values[-1] - self.values[-2]) / 2
            if a - self.max < half_ulp:
                return sign | int(self.patterns[-1])
            raise ContractError(argument, f"a value representable as {self.name} (|x| <= {self.max:g})", repr(x))
        if self.values[i] == a or i == 0:
            return sign | int(self.patterns[i])
        lo, hi = self.values[i - 1], self.values[i]
        if a - lo < hi - a or (a - lo == hi - a and self.patterns[i - 1] % 2 == 0):
            return sign | int(self.patterns[i - 1])
        return sign | int(self.patterns[i])


_NARROW: dict[str, _NarrowFloat] = {}


def _narrow(name: str) -> _NarrowFloat:
    table = _NARROW.get(name)
    if table is None:
        dtype = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e2m1": ml_dtypes.float4_e2m1fn}[name]
        bits = np.uint16 if name == "bf16" else np.uint8
        table = _NARROW[name] = _NarrowFloat(name, dtype, bits)
    return table


def scalar_converter(param: Param) -> Callable[[Any], Any]:
    """The slow-path check and conversion of one scalar argument to its slot value.

    Raises (from the returned function):
        ContractError: wrong type (e.g. a float for an integer parameter, a bool for a number) or an
            integer out of the parameter's range.
    """
    info: DTypeInfo = param.info
    name = param.name

    if info.kind == "bool":
        def conv_bool(v: Any) -> int:
            if type(v) is bool or isinstance(v, np.bool_):
                return int(bool(v))
            raise ContractError(name, "a bool", _show(v))
        return conv_bool

    if info.kind in ("int", "uint"):
        lo, hi = _int_range(info)

        def conv_int(v: Any) -> int:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise ContractError(name, f"an integer for {info.name}", _show(v))
            iv = int(v)
            if not lo <= iv <= hi:
                raise ContractError(name, f"an integer in [{lo}, {hi}] ({info.name})", repr(iv))
            return iv
        return conv_int

    def as_float(v: Any) -> float:
        if type(v) in _ML_FLOAT_SCALARS:  # ml_dtypes scalars (bfloat16, float8...) are not np.floating
            return float(v)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ContractError(name, f"a real number for {info.name}", _show(v))
        try:
            return float(v)
        except OverflowError:  # an int beyond the double range
            raise ContractError(name, f"a value representable as {info.name}", _show(v)) from None

    if info.name == "f64":
        return as_float
    if info.name == "f32":
        def conv_f32(v: Any) -> float:
            x = as_float(v)
            try:
                struct.pack("<f", x)  # refuses finite values that would round to infinity
            except OverflowError:
                raise ContractError(name, "a value representable as f32 (|x| <= 3.4028235e38)", repr(v)) from None
            return x
        return conv_f32
    if info.name == "f16":
        def conv_f16(v: Any) -> int:
            try:
                return int(struct.unpack("<H", struct.pack("<e", as_float(v)))[0])
            except OverflowError:
                raise ContractError(name, "a value representable as f16 (|x| <= 65504)", repr(v)) from None
        return conv_f16
    table = _narrow(info.name)
    return lambda v: table.bits(name, as_float(v))


_ML_FLOAT_SCALARS = {ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn}


def _int_range(info: DTypeInfo) -> tuple[int, int]:
    ii = np.iinfo(info.dtype)
    return int(ii.min), int(ii.max)


def _show(v: Any) -> str:
    text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(v).__name__} {text}"
