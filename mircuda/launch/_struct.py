"""By-value aggregate kernel parameters: CUDA's vector types (``float4``, ``int2``, ``half2`` ...) and
user structs, laid out as the CUDA C compiler lays them out, and packed into the parameter block.

Layout (the C rules, as NVCC/NVRTC apply them on x86-64 and aarch64 hosts): each field sits at the
next offset that is a multiple of its alignment; a struct's alignment is its largest field
alignment (or the type's declared ``__align__``, for the vector types) and its size is rounded up
to that alignment. Scalars are aligned to their size, device pointers to 8 bytes, arrays to their
element. The vector types' alignments are CUDA's ``vector_types.h`` ``__align__`` values (e.g.
``float2`` 8, ``float4`` 16, ``float3`` 4; ``__half2`` and ``__nv_bfloat162`` 4). At bind time each
parameter's offset and size are compared with the compiled kernel's (``cuFuncGetParamInfo``).

A value for an aggregate parameter is a ``dict`` of its fields, a tuple or list in field order, a
numpy structured scalar of its :attr:`StructType.dtype`, or (vector types, arrays) a 1-d numpy
array; every leaf is checked and converted as a scalar parameter of its type would be (ranges,
rounding to nearest even), device pointers as buffer parameters are (dtype, context, not freed).
"""

from __future__ import annotations

import ctypes
import keyword
import re
import struct as _struct
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Union

import ml_dtypes
import numpy as np

from ..dtypes import DTypeInfo, dtype_info, is_integer_value
from ..errors import ContractError

__all__ = ["StructField", "StructType", "VECTOR_TYPES", "struct", "vector_type"]

FieldType = Union[DTypeInfo, "StructType", "ArrayType", "PointerType"]


@dataclass(frozen=True)
class PointerType:
    """A device pointer field, ``T*``: a ``DeviceBuffer[T]`` argument, 8 bytes."""

    info: DTypeInfo
    size: int = 8
    alignment: int = 8

    @property
    def c_name(self) -> str:
        return f"{self.info.c_name}*"


@dataclass(frozen=True)
class ArrayType:
    """A by-value array field, ``T name[count]``."""

    element: FieldType
    count: int

    @property
    def size(self) -> int:
        return _size(self.element) * self.count

    @property
    def alignment(self) -> int:
        return _alignment(self.element)


@dataclass(frozen=True)
class StructField:
    """One field of a :class:`StructType`: its name, type and byte offset."""

    name: str
    type: FieldType
    offset: int


@dataclass(frozen=True)
class StructType:
    """A by-value kernel parameter type with C layout (build with :func:`struct` or take a vector type
    such as ``mc.float4``).

    Attributes:
        name: the C type name (``"Params"``, ``"float4"``).
        fields: the fields, with their offsets, in declaration order.
        size: ``sizeof`` in bytes (padded to the alignment).
        alignment: ``alignof`` in bytes.
        dtype: the numpy structured dtype with the same offsets and size (device pointers as ``u8``
            addresses), for building values with numpy.
    """

    name: str
    fields: tuple[StructField, ...]
    size: int
    alignment: int
    dtype: np.dtype[Any] = field(repr=False, compare=False)
    _leaves: tuple[tuple[str, int, FieldType], ...] = field(repr=False, compare=False, default=())

    @property
    def c_name(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"mc.struct({self.name!r}: {', '.join(f'{f.name}@{f.offset}' for f in self.fields)}; " \
               f"size {self.size}, align {self.alignment})"

    def ctype(self) -> type:
        """The parameter block slot: ``size`` bytes, placed at a multiple of ``alignment``."""
        return type(f"mircuda_{self.name}", (ctypes.c_char * self.size,), {"_mircuda_align_": self.alignment})

    def c_declaration(self) -> str:
        """A C declaration with the same layout (vector types are CUDA's own and need none)."""
        lines = [f"struct __align__({self.alignment}) {self.name} {{"]
        for f in self.fields:
            t, suffix = f.type, ""
            while isinstance(t, ArrayType):
                suffix += f"[{t.count}]"
                t = t.element
            lines.append(f"    {t.c_name} {f.name}{suffix};")
        return "\n".join(lines + ["};"])


def _size(t: FieldType) -> int:
    return t.itemsize if isinstance(t, DTypeInfo) else t.size


def _alignment(t: FieldType) -> int:
    return t.itemsize if isinstance(t, DTypeInfo) else t.alignment


def _field_type(spec: Any, where: str) -> FieldType:
    from ..memory import DeviceBuffer

    if isinstance(spec, (StructType, ArrayType, PointerType, DTypeInfo)):
        return spec
    if typing.get_origin(spec) is DeviceBuffer:
        (t,) = typing.get_args(spec)
        return PointerType(dtype_info(t))
    if isinstance(spec, tuple) and len(spec) == 2 and is_integer_value(spec[1]):
        if not 1 <= spec[1] <= PARAM_BYTES:
            raise ContractError(where, f"an array length from 1 to {PARAM_BYTES} (the parameter block's bytes)",
                                repr(spec[1]))
        return ArrayType(_field_type(spec[0], where), int(spec[1]))
    if any(spec is t for t in (int, float, complex, bool)) or isinstance(spec, str):
        raise ContractError(where, "an explicit type such as mc.f32 or mc.u32", repr(spec))
    try:
        return dtype_info(spec)
    except ContractError:
        raise ContractError(where, "a scalar type (mc.f32 ...), mc.DeviceBuffer[T], a struct or vector type "
                            "(mc.float4), or (type, count) for an array", repr(spec)) from None


def _leaf_dtype(t: FieldType) -> Any:
    if isinstance(t, DTypeInfo):
        return t.dtype
    if isinstance(t, PointerType):
        return np.dtype(np.uint64)
    if isinstance(t, ArrayType):
        return (_leaf_dtype(t.element), (t.count,))
    return t.dtype


def _flatten(t: FieldType, label: str, offset: int, out: list[tuple[str, int, FieldType]]) -> None:
    if isinstance(t, StructType):
        for f in t.fields:
            _flatten(f.type, f"{label}.{f.name}", offset + f.offset, out)
    elif isinstance(t, ArrayType):
        step = _size(t.element)
        for k in range(t.count):
            _flatten(t.element, f"{label}[{k}]", offset + k * step, out)
    else:
        out.append((label, offset, t))


PARAM_BYTES = 32764
"""The most bytes of kernel parameters a launch takes (CUDA 12.1 and later on Volta and newer, CUDA C++
Programming Guide, "Function Parameters"): a by-value struct is at most this large."""
MAX_ALIGNMENT = 4096
"""The largest ``alignment`` :func:`struct` takes (numpy's structured dtypes hold offsets as C ints)."""

CXX_KEYWORDS = frozenset({
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch",
    "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr",
    "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete",
    "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
    "requires", "restrict", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast",
    "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq"
})
"""C++20's keywords and alternative tokens (ISO/IEC 14882:2020, [lex.key]) and C's ``restrict``: NVRTC compiles
the declarations :meth:`StructType.c_declaration` writes as C++, where a type or field named ``int`` fails."""


CUDA_NAMES = frozenset({
    "dim3", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
    "uint16_t", "uint32_t", "uint64_t", "half", "half2", "nv_bfloat16", "nv_bfloat162", "threadIdx", "blockIdx",
    "blockDim", "gridDim", "warpSize", "NULL", "INFINITY", "NAN", "CUDART_INF_F", "CUDART_NAN_F",
})
"""Names a CUDA C++ translation unit already defines (NVRTC's built-in types and variables, ``<cstdint>``'s and
``<cuda_fp16.h>``/``<cuda_bf16.h>``'s types, and the common macros): a struct or field of that name is a
redefinition or expands into something else. The vector types (``float4``, ``uchar2``...) are matched by
:data:`_VECTOR_TYPE`."""
_IDENTIFIER = ("a C identifier that is no C++ or Python keyword, no reserved name (leading '__', or '_' and a "
               "capital) and no name CUDA already defines (float4, dim3, size_t, NULL...)")
_VECTOR_TYPE = re.compile(r"(u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]")


def _c_identifier(name: object, builtin: bool = False) -> bool:
    """An ASCII identifier that names nothing else in C++, CUDA or Python: not a keyword of either language (fields
    are also Python attributes), not a name C++ reserves for the implementation (``__x``, ``_X``), and not a type,
    variable or macro every CUDA translation unit has (:data:`CUDA_NAMES`, the vector types). ``builtin``: the
    name of one of those types themselves (:func:`vector_type`), held to the first two rules only."""
    if not (isinstance(name, str) and name.isidentifier() and name.isascii() and not keyword.iskeyword(name)
            and name not in CXX_KEYWORDS):
        return False
    return builtin or (name not in CUDA_NAMES and not _VECTOR_TYPE.fullmatch(name) and not name.startswith("__")
                       and not (name.startswith("_") and name[1:2].isupper()))

def struct(name: str, fields: Sequence[tuple[str, Any]] | np.dtype[Any], *, alignment: int | None = None) -> StructType:
    """Declare a by-value struct parameter type with C layout.

    Example::

        Params = mc.struct("Params", [("n", mc.u32), ("scale", mc.f32), ("ptr", mc.DeviceBuffer[mc.f32])])
        # struct Params { unsigned n; float scale; float* ptr; };  sizeof 16, alignof 8, ptr at 8

    Args:
        name: the C type name (a C identifier), used in messages and :meth:`StructType.c_declaration`.
        fields: ``(name, type)`` pairs in declaration order; a type is a scalar type (``mc.f32``),
            ``mc.DeviceBuffer[T]`` (a ``T*``), another struct or vector type (``mc.float4``), or
            ``(type, count)`` for a by-value array. Or a numpy structured dtype whose offsets and size
            are C's (``numpy.dtype([...], align=True)``); its fields must be mircuda scalar types or
            arrays of them.
        alignment: an ``__align__(N)`` larger than the natural alignment (a power of two).

    Raises:
        ContractError: a bad name, field or type; a numpy dtype whose layout is not C's (the first
            field at another offset is named).
    """
    return _declare(name, fields, alignment, builtin=False)


def _declare(name: str, fields: Sequence[tuple[str, Any]] | np.dtype[Any], alignment: int | None,
             builtin: bool) -> StructType:
    """:func:`struct`'s work; ``builtin`` for CUDA's own vector types, whose names a user's struct may not take."""
    if not _c_identifier(name, builtin):
        raise ContractError("name", _IDENTIFIER, repr(name))
    given_dtype: np.dtype[Any] | None = None
    if isinstance(fields, np.dtype):
        if fields.names is None:
            raise ContractError("fields", "a structured numpy dtype (with named fields)", str(fields))
        given_dtype = fields
        pairs: list[tuple[str, Any]] = []
        for n in fields.names:
            ft = fields.fields[n][0]  # type: ignore[index]
            pairs.append((n, (ft.base.type, int(np.prod(ft.shape))) if ft.shape else ft.type))
        fields = pairs
    if isinstance(fields, (str, bytes)) or not isinstance(fields, Sequence) or not fields:
        raise ContractError("fields", "a non-empty sequence of (name, type) pairs", repr(fields)[:80])
    out: list[StructField] = []
    offset, align = 0, 1
    for i, entry in enumerate(fields):
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise ContractError(f"fields[{i}]", "a (name, type) pair", repr(entry)[:80])
        fname, spec = entry
        if not _c_identifier(fname):
            raise ContractError(f"fields[{i}]", f"a field name that is {_IDENTIFIER}", repr(fname))
        if any(f.name == fname for f in out):
            raise ContractError(f"fields[{i}]", "each field name once", repr(fname))
        t = _field_type(spec, f"{name}.{fname}")
        a = _alignment(t)
        offset = (offset + a - 1) // a * a
        out.append(StructField(fname, t, offset))
        offset += _size(t)
        align = max(align, a)
    if alignment is not None:
        if not is_integer_value(alignment) or not 1 <= alignment <= MAX_ALIGNMENT or alignment & (alignment - 1):
            raise ContractError("alignment", f"a power of two from 1 to {MAX_ALIGNMENT}", repr(alignment))
        align = max(align, int(alignment))
    size = (offset + align - 1) // align * align
    if size > PARAM_BYTES:
        raise ContractError("fields", f"a struct of at most {PARAM_BYTES} bytes (CUDA's kernel parameter limit)",
                            f"{size} bytes")
    dtype = np.dtype({"names": [f.name for f in out], "formats": [_leaf_dtype(f.type) for f in out],
                      "offsets": [f.offset for f in out], "itemsize": size})
    if given_dtype is not None:
        for f in out:
            given = given_dtype.fields[f.name][1]  # type: ignore[index]
            if given != f.offset:
                raise ContractError(f"{name}.{f.name}", f"offset {f.offset} (C layout; numpy.dtype(..., align=True))",
                                    f"offset {given} in the numpy dtype")
        if given_dtype.itemsize != size:
            raise ContractError("fields", f"a dtype of {size} bytes (C layout, padded to alignment {align})",
                                f"{given_dtype.itemsize} bytes")
    leaves: list[tuple[str, int, FieldType]] = []
    for f in out:
        _flatten(f.type, f.name, f.offset, leaves)
    return StructType(name, tuple(out), size, align, dtype, tuple(leaves))


def vector_type(c_name: str, element: Any, count: int, alignment: int) -> StructType:
    """A CUDA vector type: ``count`` fields ``x, y, z, w`` of ``element`` with ``__align__(alignment)``."""
    return _declare(c_name, [(n, element) for n in "xyzw"[:count]], alignment, builtin=True)


# CUDA's vector_types.h (and cuda_fp16.h / cuda_bf16.h for __half2 / __nv_bfloat162): name, element,
# count, __align__. The 3-wide types have no __align__ beyond their element's.
_VECTORS: list[tuple[str, Any, int, int]] = []
for _c, _t, _sz in (("char", np.int8, 1), ("uchar", np.uint8, 1), ("short", np.int16, 2), ("ushort", np.uint16, 2),
                    ("int", np.int32, 4), ("uint", np.uint32, 4), ("float", np.float32, 4)):
    _VECTORS += [(f"{_c}2", _t, 2, 2 * _sz), (f"{_c}3", _t, 3, _sz), (f"{_c}4", _t, 4, 4 * _sz)]
_VECTORS += [("longlong2", np.int64, 2, 16), ("ulonglong2", np.uint64, 2, 16), ("double2", np.float64, 2, 16)]

VECTOR_TYPES: dict[str, StructType] = {n: vector_type(n, t, c, a) for n, t, c, a in _VECTORS}
"""CUDA's vector types by C name (``float4`` ...), plus ``half2`` (``__half2``) and ``bfloat162``
(``__nv_bfloat162``). 4-wide 64-bit types are left out: CUDA 13 deprecates them for ``_16a``/``_32a``
variants of two different alignments."""


def _half_pair(name: str, c_name: str, element: Any) -> StructType:
    t = _declare(name, [("x", element), ("y", element)], 4, builtin=True)
    return StructType(c_name, t.fields, t.size, t.alignment, t.dtype, t._leaves)


VECTOR_TYPES["half2"] = _half_pair("half2", "__half2", np.float16)
VECTOR_TYPES["bfloat162"] = _half_pair("bfloat162", "__nv_bfloat162", ml_dtypes.bfloat16)


# -- packing ----------------------------------------------------------------------------------------
_FORMAT = {"bool": "B", "i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "u32": "I", "i64": "q",
           "u64": "Q", "f32": "f", "f64": "d", "f16": "H", "bf16": "H", "e4m3": "B", "e2m1": "B"}


def struct_converter(argument: str, t: StructType, context: Any) -> Callable[[Any], bytes]:
    """The check and conversion of one aggregate argument to its ``t.size`` bytes (little-endian, C
    layout, padding zero).

    Raises (from the returned function):
        ContractError: a value of the wrong shape (missing, extra or unknown fields, a wrong count),
            or a leaf its type refuses (named ``argument.field[k]``); UseAfterFree for a freed buffer.
    """
    from ..memory import check_device_buffer
    from ._pack import scalar_converter

    fmt = ["<"]
    at = 0
    convs: list[Callable[[Any], Any]] = []
    for label, offset, leaf in t._leaves:
        if offset > at:
            fmt.append(f"{offset - at}x")
        full = f"{argument}.{label}"
        if isinstance(leaf, PointerType):
            fmt.append("Q")
            info = leaf.info

            def conv_ptr(v: Any, full: str = full, info: DTypeInfo = info) -> int:
                return check_device_buffer(full, v, context, info)._ptr
            convs.append(conv_ptr)
            at = offset + 8
        else:
            assert isinstance(leaf, DTypeInfo)
            fmt.append(_FORMAT[leaf.name])
            convs.append(scalar_converter(SimpleNamespace(name=full, info=leaf)))  # type: ignore[arg-type]
            at = offset + leaf.itemsize
    if t.size > at:
        fmt.append(f"{t.size - at}x")
    packer = _struct.Struct("".join(fmt))
    assert packer.size == t.size

    def convert(v: Any) -> bytes:
        leaves: list[Any] = []
        _leaf_values(argument, t, v, leaves)
        return packer.pack(*[c(x) for c, x in zip(convs, leaves)])
    return convert


def _leaf_values(where: str, t: FieldType, v: Any, out: list[Any]) -> None:
    if isinstance(t, (DTypeInfo, PointerType)):
        out.append(v)
        return
    if isinstance(t, ArrayType):
        items = _sequence(where, v, t.count, f"{t.count} values")
        for k, item in enumerate(items):
            _leaf_values(f"{where}[{k}]", t.element, item, out)
        return
    names = [f.name for f in t.fields]
    if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.names is not None:
        v = v[()]
    if isinstance(v, np.void) and v.dtype.names is not None:
        if tuple(v.dtype.names) != tuple(names):
            raise ContractError(where, f"a {t.name} (fields {', '.join(names)})",
                                f"a numpy record with fields {', '.join(v.dtype.names)}")
        v = {n: v[n] for n in names}
    if isinstance(v, dict):
        unknown = [k for k in v if k not in names]
        if unknown:
            raise ContractError(f"{where}.{unknown[0]}", f"a field of {t.name} ({', '.join(names)})",
                                "an unknown field")
        missing = [n for n in names if n not in v]
        if missing:
            raise ContractError(f"{where}.{missing[0]}", f"a value (a field of {t.name})", "nothing (it is missing)")
        items = [v[n] for n in names]
    else:
        items = _sequence(where, v, len(names), f"a {t.name}: a dict of {', '.join(names)} or {len(names)} values "
                          "in that order")
    for f, item in zip(t.fields, items):
        _leaf_values(f"{where}.{f.name}", f.type, item, out)


def _sequence(where: str, v: Any, count: int, expected: str) -> Sequence[Any]:
    if isinstance(v, np.ndarray) and v.ndim == 1:
        items: Sequence[Any] = list(v)
    elif isinstance(v, (tuple, list)):
        items = v
    else:
        text = repr(v)
        raise ContractError(where, expected, f"{type(v).__name__} {text[:77] + '...' if len(text) > 80 else text}")
    if len(items) != count:
        raise ContractError(where, expected, f"{len(items)} values")
    return items
