"""Specs of the dense matrix plans and the operand checks they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import DTypeInfo, dtype_info, is_integer_value
from ..errors import ClosedResourceError, ContractError, UseAfterFree

if TYPE_CHECKING:
    from ..runtime import Context

__all__ = ["DenseMatmulSpec", "DenseVectorSpec", "PlanBase", "resolve_dtypes", "check_operand", "check_stream",
           "check_scalar"]

INPUT_DTYPES = ("bf16", "f16")
"""Input element types of the dense plans (FP32 accumulation in every kernel)."""


_DIM_LIMIT = 2**31 - 2**16
"""Dimensions stay below this: the kernels index with 32-bit ints and round K up to their chunk
(at most a few thousand elements), which must not overflow."""


def _dim(name: str, value: object) -> int:
    if not is_integer_value(value) or value < 1:
        raise ContractError(name, "a positive int", repr(value))
    if value >= _DIM_LIMIT:
        raise ContractError(name, f"a dimension below {_DIM_LIMIT} (the kernels index with 32-bit ints)", repr(value))
    return int(value)


@dataclass(frozen=True)
class DenseMatmulSpec:
    """The shape of ``C[M, N] = alpha * A[M, K] . B[N, K]^T + beta * C[M, N]``.

    A is row-major ``[M, K]`` (activations), B is ``[N, K]`` row-major (weights, one row per output
    feature, as a linear layer stores them), C is row-major ``[M, N]``.

    Raises:
        ContractError: a dimension is not a positive int below 2**31.
    """

    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            _dim(name, getattr(self, name))

    @property
    def flops(self) -> int:
        """Floating-point operations of one product (2 M N K)."""
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True)
class DenseVectorSpec:
    """The shape of ``y[N] = alpha * W[N, K] . x[K] + beta * y[N]`` (a matrix-vector product, M = 1).

    Raises:
        ContractError: a dimension is not a positive int below 2**31.
    """

    n: int
    k: int

    def __post_init__(self) -> None:
        for name in ("n", "k"):
            _dim(name, getattr(self, name))

    @property
    def flops(self) -> int:
        return 2 * self.n * self.k


def resolve_dtypes(input: Any, output: Any) -> tuple[DTypeInfo, DTypeInfo]:
    """Check the element types of a dense plan: input bf16 or f16; output the same or f32 (None: same).

    Raises:
        ContractError: naming ``input`` or ``output``.
    """
    try:
        i = dtype_info(input)
    except ContractError:
        i = None
    if i is None or i.name not in INPUT_DTYPES:
        raise ContractError("input", "mc.bf16 or mc.f16", repr(input))
    if output is None:
        return i, i
    try:
        o = dtype_info(output)
    except ContractError:
        o = None
    if o is None or o.name not in (i.name, "f32"):
        raise ContractError("output", f"mc.{i.name} (the input type) or mc.f32", repr(output))
    return i, o


def check_stream(stream: Any, context: Context) -> None:
    """Raise unless ``stream`` is an open stream of ``context``."""
    from ..runtime import Stream

    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
    stream._check_usable("stream", context)


def check_operand(name: str, buf: Any, info: DTypeInfo, count: int, context: Context, shape: str) -> int:
    """Check that ``buf`` is a live DeviceBuffer of ``info`` in ``context`` with at least ``count``
    elements; return its device address.

    Raises:
        ContractError, UseAfterFree, ClosedResourceError: naming ``name``.
    """
    from ..memory import DeviceBuffer

    if not isinstance(buf, DeviceBuffer):
        raise ContractError(name, f"a DeviceBuffer[{info.name}] of {shape}", type(buf).__name__)
    if buf._freed:
        raise UseAfterFree(f"argument {name!r}: {buf!r} was freed")
    if buf._scalar is not info.scalar_type:
        raise ContractError(name, f"a DeviceBuffer[{info.name}]", f"a DeviceBuffer[{buf._info.name}]")
    if buf._context is not context:
        if buf._context._closed:
            raise ClosedResourceError(f"argument {name!r}: the buffer's context was closed")
        raise ContractError(name, f"a buffer of {context!r}", f"a buffer of {buf._context!r}")
    if buf._count < count:
        raise ContractError(name, f"at least {count} elements ({shape})", f"{buf._count} elements")
    return buf._ptr


def check_scalar(name: str, value: Any) -> float:
    """alpha/beta: a real number (bool refused) rounded once to the f32 every kernel takes, as the
    typed launch rounds an f32 parameter; a value f32 cannot hold is refused."""
    from ..launch._contract import Param
    from ..launch._pack import scalar_converter

    conv = _SCALARS.get(name)
    if conv is None:
        conv = _SCALARS[name] = scalar_converter(Param(name, "scalar", dtype_info(np.float32)))
    return float(conv(value))


_SCALARS: dict[str, Any] = {}


def plan_stream(stream: Any, context: Any) -> None:
    """Construction-time check of a plan's context and stream."""
    from ..runtime import Context

    if not isinstance(context, Context):
        raise ContractError("context", "a mircuda Context", type(context).__name__)
    if context.closed:
        raise ClosedResourceError("argument 'context': the context was closed")
    check_stream(stream, context)


class PlanBase:
    """What every dense plan says about itself: its spec, element types and context."""

    _spec: Any
    _in: DTypeInfo
    _out: DTypeInfo
    _context: Context

    @property
    def spec(self) -> Any:
        """The plan's ``DenseMatmulSpec`` or ``DenseVectorSpec``."""
        return self._spec

    @property
    def input(self) -> type:
        """The element type of the inputs (A and B, or x and W)."""
        return self._in.scalar_type

    @property
    def output(self) -> type:
        """The element type of the output (C or y)."""
        return self._out.scalar_type

    @property
    def context(self) -> Context:
        return self._context
