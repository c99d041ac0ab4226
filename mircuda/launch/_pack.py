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


def _bits(dtype: Any, bits_type: Any, value: float) -> int:
    return int(np.asarray(value, dtype=np.float64).astype(dtype).view(bits_type))


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
        return float(v)

    if info.name in ("f32", "f64"):
        return as_float
    if info.name == "f16":
        def conv_f16(v: Any) -> int:
            try:
                return int(struct.unpack("<H", struct.pack("<e", as_float(v)))[0])
            except OverflowError:
                raise ContractError(name, "a value representable as f16 (|x| <= 65504)", repr(v)) from None
        return conv_f16
    target = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e2m1": ml_dtypes.float4_e2m1fn}[info.name]
    bits = np.uint16 if info.itemsize == 2 else np.uint8
    return lambda v: _bits(target, bits, as_float(v))


_ML_FLOAT_SCALARS = {ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn}


def _int_range(info: DTypeInfo) -> tuple[int, int]:
    ii = np.iinfo(info.dtype)
    return int(ii.min), int(ii.max)


def _show(v: Any) -> str:
    text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(v).__name__} {text}"
