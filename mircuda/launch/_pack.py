"""Argument packing: the kernel-parameter block of one kernel, and per-type value conversion.

A kernel's parameters live in one contiguous block laid out as the C ABI does (each value at an
offset aligned to its size); ``kernelParams`` is an array of pointers into that block, built once.
A launch only writes values into the block and calls the driver, which copies them.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import ml_dtypes
import numpy as np

from ..dtypes import SUPPORTED, DTypeInfo, is_integer_value
from ..errors import ContractError
from ._contract import Param

__all__ = ["ArgumentBlock", "Slot", "scalar_converter", "SCALAR_CTYPES", "SlotCType", "FloatFormat", "float_format"]

SlotCType: TypeAlias = "type[ctypes._SimpleCData[Any]]"
"""The ctypes type of one ABI value (``ctypes.c_uint64``, ``ctypes.c_float``, ...)."""


def _slot_ctype(info: DTypeInfo) -> SlotCType:
    if info.kind == "bool":
        return ctypes.c_uint8
    if info.kind == "float" and info.itemsize in (4, 8):
        return ctypes.c_float if info.itemsize == 4 else ctypes.c_double
    # Integers by their width and sign; floats narrower than 32 bits as their bit patterns.
    prefix = "c_int" if info.kind == "int" else "c_uint"
    ctype: SlotCType = getattr(ctypes, f"{prefix}{info.itemsize * 8}")
    return ctype


SCALAR_CTYPES: dict[str, SlotCType] = {i.name: _slot_ctype(i) for i in SUPPORTED.values()}
"""The ctypes slot of each scalar type. Floats narrower than 32 bits are stored as their bit patterns."""


class Slot:
    """One ABI value in the block: its ctypes view, offset and size (bytes)."""

    __slots__ = ("view", "offset", "size", "label")

    def __init__(self, view: Any, offset: int, size: int, label: str) -> None:
        self.view = view
        self.offset = offset
        self.size = size
        self.label = label


class ArgumentBlock:
    """A contiguous parameter block and its ``void*`` array, for a list of ``(label, ctype)`` slots.

    Each slot sits at the next multiple of its alignment: its size for scalars, ``_mircuda_align_``
    for the byte arrays of by-value structs (:meth:`~mircuda.launch.StructType.ctype`)."""

    def __init__(self, slots: Sequence[tuple[str, SlotCType]]) -> None:
        offset = 0
        placed: list[tuple[str, SlotCType, int]] = []
        for label, ctype in slots:
            size = ctypes.sizeof(ctype)
            # C scalars are aligned to their size; aggregates (launch._struct) carry their alignment.
            align = getattr(ctype, "_mircuda_align_", size)
            offset = (offset + align - 1) // align * align
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


class FloatFormat:
    """A floating-point format as numpy/ml_dtypes define it, and the exact conversion of a real number to it.

    Every float type (f16, bf16, f32, f64, e4m3, e2m1 and any type added to :mod:`mircuda.dtypes`)
    converts through this one path, with its parameters read from ``ml_dtypes.finfo`` and its encoding
    from ml_dtypes: the input's exact value (a Python int is exact, a float or ``numpy.longdouble`` is
    exact as its ``as_integer_ratio``) is rounded once to nearest, ties to even, with the format's
    subnormals; the bits are ml_dtypes' encoding of that value. So the result equals ml_dtypes' (and
    CUDA's round-to-nearest conversions) bit for bit wherever ml_dtypes rounds once. (ml_dtypes converts
    a double to bfloat16 through float32, rounding twice: for the few doubles just above a bf16 tie
    that differs from the correctly rounded value, which is what mircuda packs.)

    Refused: finite values whose rounded value lies beyond the largest finite value (ml_dtypes gives
    inf or NaN there, or saturates for e2m1, which has neither), and infinities or NaN the format cannot
    hold (ml_dtypes turns them into another value).
    """

    def __init__(self, info: DTypeInfo) -> None:
        fi = ml_dtypes.finfo(info.dtype)
        self.info = info
        self.precision = int(fi.nmant) + 1  # significant bits, the hidden one included
        self.min_exponent = int(fi.minexp)  # exponent of the smallest normal number
        self.max = float(fi.max)
        self.max_exponent = math.frexp(self.max)[1] - 1
        self.as_bits = info.itemsize < 4  # stored in its slot as its bit pattern
        self._table: dict[float, int] | None = None
        self._sign = 1 << (info.bits - 1)  # the sign bit of the value's bits (e2m1: bit 3 of its byte)

    def _bits_table(self) -> dict[float, int]:
        """Positive finite value -> bit pattern, from ml_dtypes (at most 2**16 entries, built once)."""
        if self._table is None:
            ui = np.dtype(f"u{self.info.itemsize}")
            codes = np.arange(1 << (self.info.itemsize * 8), dtype=np.uint64).astype(ui)
            if self.info.bits < self.info.itemsize * 8:  # e2m1: 4 bits in a byte
                codes = codes[codes < (1 << self.info.bits)]
            codes = codes[(codes & self._sign) == 0]
            with np.errstate(invalid="ignore"):
                values = codes.view(self.info.dtype).astype(np.float64)
            keep = np.isfinite(values)
            self._table = dict(zip(values[keep].tolist(), codes[keep].tolist()))
        return self._table

    def encode(self, value: float) -> Any:
        """The slot value of ``value``, a number this format holds exactly (or its inf/NaN)."""
        if not self.as_bits:
            return value
        if math.isnan(value) or math.isinf(value) or value == 0:  # ml_dtypes' own encoding, sign included
            ui = np.dtype(f"u{self.info.itemsize}")
            with np.errstate(invalid="ignore"):
                return int(np.array(value).astype(self.info.dtype).view(ui))
        table = self._bits_table()
        return table[abs(value)] | (self._sign if value < 0 else 0)

    def round(self, argument: str, v: Any) -> float:
        """``v`` (a Python/numpy real, checked by the caller) rounded once to this format, as a float.

        Raises:
            ContractError: ``v`` is beyond the format's range, or an inf/NaN it cannot hold.
        """
        name = self.info.name
        if isinstance(v, (int, np.integer)):  # the caller refused bool and timedelta64
            iv = int(v)
            negative, n, k = iv < 0, abs(iv), 0
        else:
            if isinstance(v, np.floating) and np.dtype(type(v)).itemsize > 8:  # longdouble: wider than a double
                special = not np.isfinite(v)
                x = float(v) if special else 0.0
                if not special:
                    negative = bool(np.signbit(v))
                    n, d = abs(v).as_integer_ratio()
            else:
                x = float(v)  # exact: every other float type is at most a double
                special = math.isnan(x) or math.isinf(x)
                if not special:
                    negative = math.copysign(1.0, x) < 0
                    n, d = abs(x).as_integer_ratio()
            if special:
                with np.errstate(over="ignore", invalid="ignore"):
                    held = float(np.array(x).astype(self.info.dtype).astype(np.float64))
                if (math.isnan(x) and math.isnan(held)) or x == held:
                    return x
                what = "NaN" if math.isnan(x) else "infinity"
                raise ContractError(argument, f"a finite number ({name} has no {what})", _show(v))
            k = d.bit_length() - 1  # d is a power of two
        # v = +-n * 2**-k exactly. Round n to `precision` significant bits (fewer below the smallest normal).
        exponent = n.bit_length() - 1 - k if n else self.min_exponent
        if exponent > self.max_exponent + 1:
            return self._overflow(argument, v)
        quantum = max(exponent, self.min_exponent) - (self.precision - 1)  # exponent of one unit in the last place
        shift = k + quantum
        if shift <= 0:
            m = n << -shift
        else:
            m, rest = n >> shift, n & ((1 << shift) - 1)
            half = 1 << (shift - 1)
            if rest > half or (rest == half and m & 1):
                m += 1
        try:
            value = math.ldexp(m, quantum)
        except OverflowError:
            return self._overflow(argument, v)
        if value > self.max:
            return self._overflow(argument, v)
        return -value if negative else value

    def _overflow(self, argument: str, v: Any) -> float:
        raise ContractError(argument, f"a value representable as {self.info.name} (|x| <= {self.max:g} after "
                            "rounding to nearest even)", _show(v))


_FORMATS: dict[str, FloatFormat] = {}


def float_format(info: DTypeInfo) -> FloatFormat:
    """The (shared, cached) :class:`FloatFormat` of a float element type."""
    fmt = _FORMATS.get(info.name)
    if fmt is None:
        fmt = _FORMATS[info.name] = FloatFormat(info)
    return fmt


def _is_float_type(t: Any) -> bool:
    try:
        ml_dtypes.finfo(t)
    except Exception:
        return False
    return True


# ml_dtypes' float scalar types (bfloat16, float8_*, float4_*, ...) are not numpy.floating subclasses.
_ML_FLOAT_SCALARS: frozenset[type] = frozenset(
    t for t in (getattr(ml_dtypes, n) for n in dir(ml_dtypes))
    if isinstance(t, type) and issubclass(t, np.generic) and not issubclass(t, np.number)
    and "complex" not in t.__name__ and _is_float_type(t))


def is_real_value(v: object) -> bool:
    """True for a value a float parameter takes: an integer (as :func:`is_integer_value` says), a Python
    float, a numpy float or an ml_dtypes float scalar. ``bool`` and ``numpy.bool_`` are not numbers here."""
    return isinstance(v, (float, np.floating)) or type(v) in _ML_FLOAT_SCALARS or is_integer_value(v)


def scalar_converter(param: Param) -> Callable[[Any], Any]:
    """The slow-path check and conversion of one scalar argument to its slot value.

    Integers take ``int`` and ``numpy.integer`` values in the type's range (not bool, not timedelta64).
    Floats take integers, Python, numpy and ml_dtypes floats, rounded once to nearest even from their
    exact value (see :class:`FloatFormat`). Bool takes ``bool`` and ``numpy.bool_``.

    Raises (from the returned function):
        ContractError: wrong type (e.g. a float for an integer parameter, a bool for a number), an
            integer out of the parameter's range, or a real the float type cannot hold.
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
            if not is_integer_value(v):
                raise ContractError(name, f"an integer for {info.name}", _show(v))
            iv = int(v)
            if not lo <= iv <= hi:
                raise ContractError(name, f"an integer in [{lo}, {hi}] ({info.name})", repr(iv))
            return iv
        return conv_int

    fmt = float_format(info)

    def conv_float(v: Any) -> Any:
        if not is_real_value(v):
            raise ContractError(name, f"a real number for {info.name}", _show(v))
        return fmt.encode(fmt.round(name, v))
    return conv_float


def _int_range(info: DTypeInfo) -> tuple[int, int]:
    ii = np.iinfo(info.dtype)
    return int(ii.min), int(ii.max)


def _show(v: Any) -> str:
    text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(v).__name__} {text}"
