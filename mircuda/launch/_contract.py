"""Kernel argument contracts: declared once, checked on every launch and every graph-node update."""

from __future__ import annotations

import keyword
import re
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import numpy as np

from ..dtypes import SUPPORTED, DTypeInfo, dtype_info
from ..errors import ContractError

__all__ = ["In", "Out", "InOut", "Param", "KernelContract", "cuda_export"]

Access = Literal["in", "out", "inout"]


@dataclass(frozen=True)
class _BufferSpec:
    access: Access
    info: DTypeInfo


class _AccessMarker:
    _access: Access

    def __class_getitem__(cls, item: Any) -> _BufferSpec:
        if isinstance(item, _BufferSpec):
            raise ContractError(f"{cls.__name__}[...]", "DeviceBuffer[T] (one access marker)", f"{item.access} marker inside")
        spec = _buffer_spec(item, "inout", f"{cls.__name__}[...]")
        if spec is None:
            raise ContractError(f"{cls.__name__}[...]", "DeviceBuffer[T]", repr(item))
        return _BufferSpec(cls._access, spec.info)


if TYPE_CHECKING:
    # Type checkers do not read a custom __class_getitem__: to them the markers are generic classes, so
    # ``In[DeviceBuffer[T]]`` in a contract type-checks as what it looks like. At run time they are the
    # classes below, whose subscription makes a buffer spec.
    _Buffer = TypeVar("_Buffer")

    class In(Generic[_Buffer]): ...

    class Out(Generic[_Buffer]): ...

    class InOut(Generic[_Buffer]): ...

else:
    class In(_AccessMarker):
        """``In[DeviceBuffer[T]]``: a buffer the kernel only reads."""

        _access = "in"

    class Out(_AccessMarker):
        """``Out[DeviceBuffer[T]]``: a buffer the kernel writes (and may read)."""

        _access = "out"

    class InOut(_AccessMarker):
        """``InOut[DeviceBuffer[T]]``: a buffer the kernel reads and writes (the meaning of a bare
        ``DeviceBuffer[T]``)."""

        _access = "inout"


def type_name_hint(name: str) -> str:
    """The hint for an element type given by its name (``DeviceBuffer["float32"]``): the mircuda type object that
    name stands for (``mc.f32``) when it names a supported type, else the supported names."""
    from .. import dtypes

    # the attribute each supported type is exported as (mc.bool_ for the type named "bool")
    exported = {t: a for a in dtypes.__all__ if isinstance(t := getattr(dtypes, a), type) and t in SUPPORTED}
    try:
        info = dtype_info(name)
    except ContractError:
        return (f"a parameter type is a type object, not its name, and {name!r} names no supported type: one of "
                + ", ".join(f"mc.{a}" for a in exported.values()))
    return f"a parameter type is a type object, not its name: DeviceBuffer[mc.{exported[info.scalar_type]}]"


def _buffer_spec(item: Any, access: Access, argument: str) -> _BufferSpec | None:
    """``item`` as a buffer parameter, or None when it is no buffer type; a bad element type is a ContractError
    naming ``argument`` (the parameter, or the access marker)."""
    from ..memory import DeviceBuffer

    if isinstance(item, _BufferSpec):
        return item
    if typing.get_origin(item) is DeviceBuffer:
        (t,) = typing.get_args(item)
        if isinstance(t, typing.ForwardRef):  # typing's form of a name in the subscript: DeviceBuffer["f32"]
            name = t.__forward_arg__
            raise ContractError(argument, "DeviceBuffer[T] with an element type object such as mc.f32",
                                f"DeviceBuffer[{name!r}]", type_name_hint(name))
        try:
            return _BufferSpec(access, dtype_info(t))
        except ContractError as exc:  # dtype_info names 'dtype': name the parameter instead
            raise ContractError(argument, f"DeviceBuffer[T] with T {exc.expected}", exc.received, exc.hint) from None
    return None


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    Attributes:
        name: the parameter's name (a Python identifier).
        kind: ``"buffer"`` (a device pointer), ``"scalar"`` or ``"struct"`` (a by-value vector type or
            struct, :class:`~mircuda.launch.StructType`).
        info: the element type (buffers) or the value type (scalars); for a struct, ``u8`` (it is
            passed as its bytes).
        access: for buffers, ``"in"``, ``"out"`` or ``"inout"``; ``None`` otherwise.
        struct: the struct or vector type of a ``"struct"`` parameter; ``None`` otherwise.
    """

    name: str
    kind: Literal["buffer", "scalar", "struct"]
    info: DTypeInfo
    access: Access | None = None
    struct: Any = None

    def __post_init__(self) -> None:
        from ._struct import StructType

        check_parameter_name(self.name)
        if self.kind not in ("buffer", "scalar", "struct"):
            raise ContractError(f"{self.name}.kind", "'buffer', 'scalar' or 'struct'", repr(self.kind))
        if not isinstance(self.info, DTypeInfo) or SUPPORTED.get(self.info.scalar_type) != self.info:
            raise ContractError(f"{self.name}.info", "a DTypeInfo from mc.dtype_info(...)", _brief(self.info))
        allowed: tuple[Any, ...] = ("in", "out", "inout") if self.kind == "buffer" else (None,)
        if not any(self.access == a and type(self.access) is type(a) for a in allowed):
            raise ContractError(f"{self.name}.access", " or ".join(map(repr, allowed)) + f" (a {self.kind})",
                                _brief(self.access))
        if (self.kind == "struct") != isinstance(self.struct, StructType):
            raise ContractError(f"{self.name}.struct", "a StructType for (only) a 'struct' parameter",
                                _brief(self.struct))

    def describe(self) -> str:
        if self.kind == "buffer":
            return f"{self.access} DeviceBuffer[{self.info.name}]"
        if self.kind == "struct":
            return f"struct {self.struct.name} ({self.struct.size} bytes)"
        return self.info.name


_RESERVED = {"stream", "config"}


def check_parameter_name(name: object) -> None:
    """A parameter name: an ASCII Python identifier, not a keyword, not starting with ``_`` and not
    ``stream``/``config`` (the launch's own arguments).

    Raises:
        ContractError: naming the parameter.
    """
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii() or name.startswith("_") \
            or name in _RESERVED or keyword.iskeyword(name):
        raise ContractError(str(name)[:80], "a parameter name that is an ASCII Python identifier, not starting with "
                            "'_', not a keyword and not 'stream'/'config'", _brief(name))


def _brief(v: object) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:77] + '...' if len(text) > 80 else text}"
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
# A C++ name expression as NVRTC takes it (``fill<float>``, ``ns::k<3, 4>``, ``&k``): a qualified
# name, then template arguments on one line. NVRTC itself judges the arguments when it compiles.
_EXPRESSION = re.compile(r"&?(::)?[A-Za-z_]\w*(::[A-Za-z_]\w*)*(\s*<[^\0\n\r]*>)?")


def is_name_expression(symbol: str) -> bool:
    """Whether a contract's ``symbol`` is a C++ name expression (not a plain C identifier)."""
    return _SYMBOL.fullmatch(symbol) is None


@dataclass(frozen=True)
class KernelContract:
    """The argument contract of one kernel: its symbol and ordered parameters.

    ``symbol`` is the name of an ``extern "C"`` kernel, or a C++ name expression (``"fill<float>"``)
    that the source declared in ``name_expressions``. Build with :func:`cuda_export`; bind to a loaded
    module with ``module.kernel(contract)``.
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

    symbol: str
    params: tuple[Param, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.symbol, str) or not (_SYMBOL.fullmatch(self.symbol)
                                                    or _EXPRESSION.fullmatch(self.symbol.strip())):
            raise ContractError("symbol", "a kernel name (a C identifier, as declared extern \"C\", or a C++ name "
                                "expression such as 'fill<float>' listed in the source's name_expressions)",
                                repr(self.symbol))
        object.__setattr__(self, "symbol", self.symbol.strip())
        # Checked here, not at bind time: a contract built by hand fails where it is written.
        if not isinstance(self.params, (tuple, list)) or not all(isinstance(p, Param) for p in self.params):
            raise ContractError("params", "a tuple of Param (or use mc.cuda_export(symbol, name=type, ...))",
                                _brief(self.params))
        object.__setattr__(self, "params", tuple(self.params))
        seen: set[str] = set()
        for p in self.params:
            if p.name in seen:
                raise ContractError(p.name, "one parameter of each name", "the name twice")
            seen.add(p.name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __repr__(self) -> str:
        ps = "".join(f", {p.name}: {p.describe()}" for p in self.params)
        return f"cuda_export({self.symbol!r}{ps})"


def cuda_export(symbol: str, **params: Any) -> KernelContract:
    """Declare the contract of kernel ``symbol``; parameters in declaration order.

    ``symbol`` is an ``extern "C"`` kernel's name, or a C++ name expression such as ``"fill<float>"``
    that the source lists in ``name_expressions`` (``mc.cuda_kernel(..., name_expressions=[...])``):
    the module binds it through the lowered name NVRTC gave it.

    Each keyword is a parameter: ``In[DeviceBuffer[T]]``, ``Out[DeviceBuffer[T]]``,
    ``InOut[DeviceBuffer[T]]`` or bare ``DeviceBuffer[T]`` (read and written) for a ``T*`` parameter,
    a scalar type (``mc.f32``, ``mc.i32``, ``mc.bool_``/``bool``, ...) for a by-value parameter, or a
    vector type (``mc.float4``, ``mc.int2``, ``mc.half2`` ...) or struct (:func:`mc.struct`) passed by
    value.

    Scalar parameters take Python and numpy scalars as ``TypedKernel.launch`` documents; Python's
    ``int`` and ``float`` are refused as parameter *types* because they do not say a width.

    Example::

        Fill = mc.cuda_export("fill", output=mc.Out[mc.DeviceBuffer[mc.f32]], value=mc.f32)

    Raises:
        ContractError: a parameter type is not one of the above, or a name is reserved.
    """
    from ._struct import StructType

    out: list[Param] = []
    for name, spec in params.items():
        check_parameter_name(name)
        buf = _buffer_spec(spec, "inout", name)
        if buf is not None:
            out.append(Param(name, "buffer", buf.info, buf.access))
            continue
        if isinstance(spec, StructType):
            out.append(Param(name, "struct", dtype_info(np.uint8), struct=spec))
            continue
        # Identity, not ==: an array compares elementwise, and numpy's dtype('f8') == float.
        if any(spec is t for t in (int, float, complex)) or isinstance(spec, str):
            raise ContractError(name, "an explicit scalar type such as mc.f32, mc.f64 or mc.i32", repr(spec),
                                "a parameter type is a type object, not its name" if isinstance(spec, str) else
                                "Python's int and float do not say a width (CUDA's float is 32-bit)")
        try:
            info = dtype_info(spec)
        except ContractError:
            hint = "" if isinstance(spec, type) else "that is a value, not a type" + (
                f" (its type is {type(spec).__module__}.{type(spec).__name__})" if isinstance(spec, np.generic) else "")
            raise ContractError(name, "DeviceBuffer[T], In/Out/InOut[DeviceBuffer[T]] or a scalar type "
                                "such as mc.f32", _brief(spec), hint) from None
        out.append(Param(name, "scalar", info))
    return KernelContract(symbol, tuple(out))
