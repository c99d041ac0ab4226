"""Specs of the dense matrix plans and the operand checks they share."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..dtypes import DTypeInfo, dtype_info, f32, is_integer_value
from ..errors import ClosedResourceError, ContractError
from ..graph._capture import _ACTIVE, _capture_info
from ..graph._capture import _records as _captures
from ..memory import check_device_buffer

if TYPE_CHECKING:
    from ..launch import LaunchConfig, TypedKernel
    from ..runtime import Context, Stream

__all__ = ["DenseMatmulSpec", "DenseVectorSpec", "EngineViews", "Operand", "PlanBase", "resolve_dtypes", "check_operand",
           "check_disjoint", "check_kernel_name", "scalar_operand", "int_knob", "check_stream", "check_scalar",
           "refuse_stream", "check_capture_origin", "BOUND_STREAM_HINT", "PDL_TRIGGERS", "check_pdl_trigger",
           "pdl_defines"]

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
            # stored as a Python int: numpy integers would wrap in the size products the checks rely on
            object.__setattr__(self, name, _dim(name, getattr(self, name)))

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
            # stored as a Python int: numpy integers would wrap in the size products the checks rely on
            object.__setattr__(self, name, _dim(name, getattr(self, name)))

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
    """Raise unless ``stream`` is an open stream of ``context`` (construction time)."""
    from ..runtime import Stream

    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
    stream._check_usable("stream", context)


@dataclass(frozen=True)
class Operand:
    """One buffer argument of a plan's ``execute``, as the plan checks it (fixed at construction, so
    that ``execute`` builds nothing).

    Attributes:
        name: the argument's name (``"a"``, ``"x"``...), as errors name it.
        info: its element type. count: the least number of elements. shape: e.g. ``"[M, K] = [4, 128]"``.
        alignment: bytes its address must be a multiple of (a power of two: what the kernel's loads or
            stores need); ``reason`` says which kernel needs it and why.
    """

    name: str
    info: DTypeInfo
    count: int
    shape: str
    alignment: int
    reason: str
    mask: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise ValueError(f"alignment {self.alignment} is not a power of two")
        object.__setattr__(self, "mask", self.alignment - 1)


def check_operand(op: Operand, buf: Any, context: Context) -> int:
    """Check that ``buf`` is a live DeviceBuffer of ``op.info`` in ``context`` with at least
    ``op.count`` elements at an address aligned to ``op.alignment``; return its device address.

    Raises:
        ContractError, UseAfterFree: naming ``op.name`` (:func:`mircuda.memory.check_device_buffer`).
    """
    ptr: int = check_device_buffer(op.name, buf, context, op.info, op.count, op.shape)._ptr
    if ptr & op.mask:
        raise ContractError(op.name, f"an address aligned to {op.alignment} bytes ({op.reason})", hex(ptr))
    return ptr


def check_kernel_name(kernel: Any, expected: str = "None or a kernel name") -> None:
    """A plan's ``kernel=``: None, or a name -- a non-empty ``str`` (an empty or blank name once fell through to
    the library lookup and surfaced as CutlassNotFound, as if the library were missing).

    Raises:
        ContractError: naming ``kernel``, with ``expected`` (the plan's wording) and the value received.
    """
    if kernel is not None and (not isinstance(kernel, str) or not kernel.strip()):
        raise ContractError("kernel", expected + " (a non-empty str)", repr(kernel))


def int_knob(value: Any) -> Any:
    """A tuning knob's integer as a Python int when it is a numpy integer (:func:`mircuda.dtypes.is_integer_value`,
    the one rule for integer arguments); anything else unchanged, for the knob's own check to name."""
    return int(value) if is_integer_value(value) and not isinstance(value, int) else value


def scalar_operand(name: str, count: int = 1) -> Operand:
    """A device FP32 scale read by a kernel (``count`` elements: 1, or one per expert), as an operand of
    :func:`check_disjoint`."""
    return Operand(name, dtype_info(f32), count, f"[{count}] FP32", 4, "FP32 loads")


def check_disjoint(out: Operand, out_ptr: int, others: Iterable[tuple[Operand, int]]) -> None:
    """Refuse an output whose bytes a kernel writes, ``[out_ptr, out_ptr + out.count * itemsize)``, overlap
    the bytes another operand is read or written at (``(op, address)``; address 0: absent): the kernel
    would read what it is writing, or two products would write the same bytes, a race with no defined
    result.

    Raises:
        ContractError: naming ``out.name``, with both byte ranges.
    """
    end = out_ptr + out.count * out.info.itemsize
    for op, ptr in others:
        op_end = ptr + op.count * op.info.itemsize
        if ptr and ptr < end and out_ptr < op_end:
            raise ContractError(out.name, f"an output that does not overlap {op.name} (the kernels would race on "
                                "the shared bytes)", f"{out.name} at [{out_ptr:#x}, {end:#x}) overlapping {op.name} "
                                f"at [{ptr:#x}, {op_end:#x})")


BOUND_STREAM_HINT = ("a plan is bound to the stream it was made with: its workspace and launch state are not "
                     "shared safely between streams; make one plan per stream, or enqueue this work on the "
                     "plan's stream and order it with events (Stream.wait_event)")


def refuse_stream(stream: Any, bound: Stream, context: Context) -> NoReturn:
    """The slow path of a plan's stream check, for a ``stream`` that is not the plan's: raise the
    ContractError naming ``stream`` (a closed plan stream is reported by ``Stream._check_usable``)."""
    from ..runtime import Stream

    if not isinstance(stream, Stream):
        raise ContractError("stream", f"the plan's stream {bound!r}", type(stream).__name__)
    received = repr(stream) if stream.context is context else f"{stream!r} of {stream.context!r}"
    raise ContractError("stream", f"the plan's stream {bound!r}", received, BOUND_STREAM_HINT)


def check_capture_origin(stream: Stream, bound: Stream) -> None:
    """Called only while a mircuda capture is in progress (``_captures`` is not empty): refuse the
    plan's stream when it takes part in a capture begun on another stream (forked into it). That
    graph launches only on its capture stream (``Graph.launch``), so its replays would use the plan's
    workspace unordered with the plan's work on its own stream.

    Raises:
        ContractError: naming ``stream``.
    """
    status, cid, _, _ = _capture_info(stream)
    if status != _ACTIVE:
        return
    record = _captures.get(cid)
    if record is not None and record.stream is not bound:
        raise ContractError("stream", f"the plan's stream {bound!r}, capturing on its own or not at all",
                            f"{stream!r} forked into a capture begun on {record.stream!r}",
                            "the graph would launch on that stream, racing with the plan's work on its own; "
                            "capture on the plan's stream (Stream.capture) or make a plan for the other stream")


def check_scalar(name: str, value: Any) -> float:
    """alpha/beta: a real number (bool refused) rounded once to the f32 every kernel takes, as the
    typed launch rounds an f32 parameter; a value f32 cannot hold is refused."""
    from ..launch import Param, scalar_converter

    conv = _SCALARS.get(name)
    if conv is None:
        conv = _SCALARS[name] = scalar_converter(Param(name, "scalar", dtype_info(np.float32)))
    out = float(conv(value))
    if not math.isfinite(out):  # a NaN or infinite alpha/beta only ever gives a NaN or infinite D
        raise ContractError(name, "a finite real number", repr(value))
    return out


_SCALARS: dict[str, Any] = {}


def plan_stream(stream: Any, context: Any) -> None:
    """Construction-time check of a plan's context and stream."""
    from ..runtime import Context

    if not isinstance(context, Context):
        raise ContractError("context", "a mircuda Context", type(context).__name__)
    if context.closed:
        raise ClosedResourceError("argument 'context': the context was closed")
    check_stream(stream, context)


class EngineViews:
    """The bound kernel and launch geometry of a plan that runs one NVRTC GEMV engine (``self._engine``:
    a VectorKernel, Fp8Gemv or Fp4Gemv), read through; one home for what the vector plans expose."""

    _engine: Any

    @property
    def kernel(self) -> TypedKernel:
        """The bound kernel (``kernel.contract`` lists its parameters: what a graph node is updated with)."""
        return self._engine.kernel

    @property
    def launch_config(self) -> LaunchConfig:
        """``ceil(N / rows)`` blocks of ``32 * warps`` threads (an FP4 plan with ``row_warps`` G > 1:
        ``ceil(N / (rows G))`` blocks of ``32 G`` threads; one running ``fp4_mma_bf16`` split in clusters of C > 1
        blocks, ``split_k`` or its default: ``C ceil(N / rows)`` blocks, the cluster shape compiled into the
        kernel)."""
        return self._engine.config

    @property
    def rows(self) -> int:
        """Weight (output) rows per block (per warp of an FP4 plan with ``row_warps`` > 1)."""
        return self._engine.rows

    @property
    def warps(self) -> int:
        """Warps per block splitting K (1 for an FP4 plan with ``row_warps`` G > 1, whose blocks hold G warps that
        each take their own rows whole)."""
        return self._engine.warps


class PlanBase:
    """What every dense plan says about itself: its spec, element types, context and stream."""

    _spec: Any
    _in: DTypeInfo
    _out: DTypeInfo
    _context: Context
    _stream: Stream
    _operands: tuple[Operand, ...]

    def _check_stream(self, stream: Any) -> None:
        """``execute``'s stream check: ``stream`` must be the plan's own (one identity test, plus one
        test of a dict while any mircuda capture is in progress); it makes the context current.

        Raises:
            ContractError: naming ``stream``. ClosedResourceError: the plan's stream was closed.
        """
        if stream is not self._stream:
            refuse_stream(stream, self._stream, self._context)
        stream._check_usable("stream", self._context)
        if _captures:
            check_capture_origin(stream, self._stream)

    @property
    def stream(self) -> Stream:
        """The stream the plan was made with: the only one ``execute`` takes."""
        return self._stream

    @property
    def operands(self) -> tuple[Operand, ...]:
        """What ``execute`` checks of each buffer argument: element type, least length, alignment."""
        return self._operands

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


PDL_TRIGGERS = ("early", "late")
"""Where programmatic dependent launch lets the next kernel start (``MIRCUDA_PDL_TRIGGER_LATE``; see
``cuda_src/decode_common.cuh``): at the start of each block, or after its loads."""


def check_pdl_trigger(pdl_trigger: Any) -> None:
    """``pdl_trigger`` must be None (the kernel's default, late), ``"early"`` or ``"late"``.

    Raises:
        ContractError: anything else, named ``pdl_trigger``."""
    if pdl_trigger is not None and (not isinstance(pdl_trigger, str) or pdl_trigger not in PDL_TRIGGERS):
        raise ContractError("pdl_trigger", "None, 'early' or 'late' (where programmatic dependent launch lets the "
                                           "next kernel start)", repr(pdl_trigger))


def pdl_defines(pdl_trigger: str | None) -> dict[str, int]:
    """``{"MIRCUDA_PDL_TRIGGER_LATE": 0 | 1}`` for a given trigger, ``{}`` for the kernel's default."""
    return {} if pdl_trigger is None else {"MIRCUDA_PDL_TRIGGER_LATE": int(pdl_trigger == "late")}
