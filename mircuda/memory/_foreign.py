"""Device arrays of other libraries (torch, CuPy, JAX, Numba...) as mircuda buffers, and mircuda
buffers as DLPack tensors for them. No Numba import, no copy, no host synchronization.

Import: :func:`from_dlpack` (``__dlpack__`` / ``__dlpack_device__``, or a capsule),
:func:`from_cuda_array_interface` (``__cuda_array_interface__`` v2/v3) give a flat
:class:`BorrowedDeviceBuffer` of a C-contiguous array; :func:`as_array_view` gives an
:class:`ArrayView` of any array with non-negative strides (DLPack preferred, CAI otherwise).
Export: ``DeviceBuffer.__dlpack__`` / ``ArrayView.__dlpack__`` (:func:`export_dlpack`).

Stream order (see :mod:`mircuda.runtime._foreign`): on import the consumer stream passed in is
handed to the producer (DLPack: ``__dlpack__(stream=handle)``, the producer makes it wait) or made to
wait on the CAI ``stream`` field; on export mircuda makes the consumer's stream wait on the buffer's
allocating stream with an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _cuda
from ..dtypes import DTypeInfo, dtype_info
from ..errors import ContractError
from . import _dlpack
from ._buffer import DeviceBuffer
from ._view import ArrayView

if TYPE_CHECKING:
    from ..runtime import Context, Stream

__all__ = ["BorrowedDeviceBuffer", "from_dlpack", "from_cuda_array_interface", "as_array_view", "export_dlpack"]


class BorrowedDeviceBuffer(DeviceBuffer[Any]):
    """A :class:`DeviceBuffer` over memory another library owns (from :func:`from_dlpack`,
    :func:`from_cuda_array_interface` or :func:`as_array_view`).

    It launches like any buffer of its dtype and context. It keeps the exporting object (and, for
    DLPack, the consumed managed tensor) alive and never frees the memory: ``free(stream)`` only ends
    the borrow (the producer's deleter runs once the buffer is no longer referenced; later uses raise
    UseAfterFree). Its ``stream`` is the stream it was imported for. ``readonly`` is True when the
    producer flagged the memory read-only (accepted only with ``readonly=True``): mircuda's launches do
    not check it, the caller must only pass it as an ``In`` argument; its exports keep the flag.
    """

    __slots__ = ("_owner", "_readonly")
    _owner: object  # the exporting object (or the DLPack capsule's keeper); None once the borrow ends
    _readonly: bool

    @property
    def readonly(self) -> bool:
        """True when the producer exported the memory read-only."""
        return self._readonly

    def free(self, stream: Stream) -> None:
        """End the borrow (the memory stays with its owner; the owner may release it once the buffer is no
        longer referenced).

        Raises:
            UseAfterFree: the borrow already ended.
            ContractError: the buffer is held by a live graph, whose replays use the memory (as
                :meth:`DeviceBuffer.free` refuses).
        """
        self._live()
        if self._holds:
            raise ContractError("buffer", "a buffer that no live graph holds",
                                f"a borrowed buffer held by {self._holds} live graph(s)",
                                "destroy the graph (Graph.close() or into_resources()) first: its replays use the "
                                "memory the borrow keeps alive")
        self._freed = True
        self._ptr = 0
        self._owner = None

    def __repr__(self) -> str:
        return "Borrowed" + super().__repr__()


def _borrow(context: Context, stream: Stream, info: DTypeInfo, count: int, address: int, owner: object,
            readonly: bool) -> BorrowedDeviceBuffer:
    borrowed = BorrowedDeviceBuffer._adopt(context, stream, info, count, address if count else 0)
    if borrowed._finalizer is not None:  # the owner frees this memory, never mircuda
        borrowed._finalizer.detach()
        borrowed._finalizer = None
    borrowed._owner = owner
    borrowed._readonly = readonly
    return borrowed


@dataclass(frozen=True)
class _Foreign:
    data: int  # element (0, ..., 0)
    info: DTypeInfo
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements
    readonly: bool
    owner: object

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def c_contiguous(self) -> bool:
        step = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != step:
                return False
            step *= n
        return True

    def describe(self) -> str:
        return f"shape {self.shape} with element strides {self.strides}"


def _check_target(context: Any, stream: Any) -> None:
    from ..runtime import Context, Stream

    if not isinstance(context, Context):
        raise ContractError("context", "a mircuda Context", type(context).__name__)
    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
    stream._check_usable("stream", context)


def _check_readonly(foreign: _Foreign, readonly: bool) -> None:
    if foreign.readonly and not readonly:
        raise ContractError("obj", "a writable device array", "a read-only one",
                            "pass readonly=True to borrow it for reading only")


# -- DLPack ------------------------------------------------------------------------------------
def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _dlpack_foreign(obj: Any, context: Context, stream: Stream) -> _Foreign:
    if _is_capsule(obj):
        capsule = obj  # the caller ordered the producer's work before `stream` (a bare capsule has no stream)
    else:
        if not callable(getattr(obj, "__dlpack__", None)) or not callable(getattr(obj, "__dlpack_device__", None)):
            raise ContractError("obj", "an object with __dlpack__ and __dlpack_device__ (or a DLPack capsule)",
                                type(obj).__name__)
        device = tuple(int(v) for v in obj.__dlpack_device__())
        _check_device(device, context)
        try:
            capsule = obj.__dlpack__(stream=stream.handle, max_version=_dlpack.DLPACK_VERSION)
        except TypeError:  # a producer older than DLPack 1.0 takes no max_version
            capsule = obj.__dlpack__(stream=stream.handle)
    parsed, consumed = _dlpack.read_capsule(capsule)
    try:
        _check_device(parsed.device, context)
        if any(s < 0 for s in parsed.strides):
            raise ContractError("obj", "a DLPack tensor with non-negative strides", f"strides {parsed.strides}")
        if not parsed.data and int(np.prod(parsed.shape, dtype=np.int64)):
            raise ContractError("obj", "a device address for a non-empty tensor", "data pointer 0")
    except BaseException:
        consumed.release()
        raise
    return _Foreign(parsed.data, parsed.info, parsed.shape, parsed.strides, parsed.readonly, (obj, consumed))


def _check_device(device: tuple[int, ...], context: Context) -> None:
    ordinal = context.device.ordinal
    if device[0] not in (_dlpack.KDL_CUDA, _dlpack.KDL_CUDA_MANAGED) or (device[0] == _dlpack.KDL_CUDA
                                                                         and device[1] != ordinal):
        raise ContractError("obj", f"a tensor on CUDA device {ordinal} (DLPack device ({_dlpack.KDL_CUDA}, {ordinal}))",
                            f"DLPack device {tuple(device)}")


def from_dlpack(obj: Any, context: Context, stream: Stream, *, readonly: bool = False) -> BorrowedDeviceBuffer:
    """A flat :class:`BorrowedDeviceBuffer` over a DLPack producer's device tensor (torch, CuPy,
    JAX, another mircuda buffer...), for mircuda work on ``stream``. No copy.

    The tensor's elements, in C order, are the buffer's (``len == tensor.numel()``); bf16, e4m3 and
    e2m1 come through as DLPack encodes them (``kDLBfloat``, ``kDLFloat8_e4m3fn``,
    ``kDLFloat4_e2m1fn``). Stream order: ``stream``'s handle is passed to ``obj.__dlpack__(stream=...)``
    so the producer makes it wait for its pending work on the device. The buffer keeps ``obj`` alive
    and calls the producer's deleter once it is no longer referenced (or ``free``'d). A bare capsule
    is accepted too; ordering the producer's work before ``stream`` is then the caller's job.

    Raises:
        ContractError: not a DLPack producer; a tensor on another device or on the host; a
            non-C-contiguous tensor (use :func:`as_array_view`); a read-only tensor without
            ``readonly=True``; an element type mircuda lacks (named by its DLPack code); a context or
            stream that does not match.
    """
    _check_target(context, stream)
    foreign = _dlpack_foreign(obj, context, stream)
    try:
        return _flat(foreign, context, stream, readonly)
    except BaseException:
        _release(foreign)  # a refused tensor goes back to its producer now, not when the traceback dies
        raise


def _release(foreign: _Foreign) -> None:
    owner = foreign.owner
    if isinstance(owner, tuple) and len(owner) == 2 and isinstance(owner[1], _dlpack._Consumed):
        owner[1].release()


def _flat(foreign: _Foreign, context: Context, stream: Stream, readonly: bool) -> BorrowedDeviceBuffer:
    _check_readonly(foreign, readonly)
    if foreign.size and not foreign.c_contiguous():
        raise ContractError("obj", "a C-contiguous device array (a flat DeviceBuffer has no strides)",
                            foreign.describe(), "use mc.as_array_view(obj, context, stream) for a strided view")
    return _borrow(context, stream, foreign.info, foreign.size, foreign.data, foreign.owner, foreign.readonly)


# -- CUDA Array Interface ----------------------------------------------------------------------
def _cai_dtype(obj: Any, typestr: str, dtype: Any) -> DTypeInfo:
    exported = np.dtype(typestr)
    if dtype is not None:
        info = dtype_info(dtype)
        if info.itemsize != exported.itemsize:
            raise ContractError("dtype", f"an element type of {exported.itemsize} bytes (typestr {typestr!r})",
                                f"{info.name} ({info.itemsize} bytes)")
        return info
    own = getattr(obj, "dtype", None)
    if isinstance(own, np.dtype) and own.str == typestr and own.kind == "V":
        # A Numba or numpy-like array says more than its typestr: ml_dtypes' bf16 and fp8 export
        # '<V2' / '|V1' and have dtype kind 'V' themselves.
        try:
            return dtype_info(own)
        except ContractError:
            pass
    if exported.kind == "V":
        raise ContractError("dtype", "an explicit dtype= for a CUDA array whose typestr is a raw void",
                            repr(typestr), "bf16 and fp8 arrays export '<V2' / '|V1': pass dtype=mc.bf16 or mc.e4m3")
    return dtype_info(exported)


def _cai_foreign(obj: Any, context: Context, stream: Stream, dtype: Any) -> _Foreign:
    from ..runtime._foreign import order_after

    cai = getattr(obj, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        raise ContractError("obj", "an object with __cuda_array_interface__", type(obj).__name__)
    if cai.get("mask") is not None:
        raise ContractError("obj", "a CUDA array without a mask", "a masked array")
    info = _cai_dtype(obj, cai["typestr"], dtype)
    shape = tuple(int(n) for n in cai["shape"])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    item = info.itemsize
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= n
        element_strides = tuple(reversed(strides))
    else:
        if any(int(s) % item for s in byte_strides):
            raise ContractError("obj", f"byte strides that are multiples of the element size ({item})",
                                f"byte strides {tuple(byte_strides)}")
        element_strides = tuple(int(s) // item for s in byte_strides)
        if any(s < 0 for s in element_strides):
            raise ContractError("obj", "a CUDA array with non-negative strides", f"byte strides {tuple(byte_strides)}")
    address, readonly = cai["data"]
    address = int(address or 0)
    if count and not address:
        raise ContractError("obj", "a device address for a non-empty array", "data pointer 0")
    if count:
        drv = _cuda.driver()
        context._make_current()
        ordinal = _cuda.call("cuPointerGetAttribute",
                             drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address)
        if int(ordinal) != context.device.ordinal:
            raise ContractError("obj", f"memory of device {context.device.ordinal}", f"memory of device {int(ordinal)}")
    if cai.get("version", 0) >= 3 and cai.get("stream") is not None:
        if int(cai["stream"]) == 0:
            raise ContractError("obj", "a CUDA Array Interface stream that is not 0 (v3 forbids 0)", "stream 0")
        order_after(stream, int(cai["stream"]))
    return _Foreign(address, info, shape, element_strides, bool(readonly), obj)


def from_cuda_array_interface(obj: Any, context: Context, stream: Stream, *, dtype: Any = None,
                              readonly: bool = False) -> BorrowedDeviceBuffer:
    """A flat :class:`BorrowedDeviceBuffer` over an array exporting ``__cuda_array_interface__`` (a
    Numba device array, a CuPy array, a torch tensor...), for mircuda work on ``stream``. No copy.

    The array must be C-contiguous (any ndim; its elements in C order) and on ``context``'s device.
    ``stream`` is ordered after the interface's ``stream`` field (v3) on the device. ``dtype`` is
    needed where the interface cannot say it (bf16 and fp8 export ``<V2``/``|V1``); otherwise it must
    have the exported element size.

    Raises:
        ContractError: no interface, a mask, non-contiguous strides (use :func:`as_array_view`), a
            read-only array without ``readonly=True``, another device's memory, an unsupported or
            ambiguous element type, stream 0, or a stream of another context.
    """
    _check_target(context, stream)
    return _flat(_cai_foreign(obj, context, stream, dtype), context, stream, readonly)


# -- strided views -----------------------------------------------------------------------------
def as_array_view(obj: Any, context: Context, stream: Stream, *, dtype: Any = None,
                  readonly: bool = False) -> ArrayView:
    """An :class:`ArrayView` (shape, element strides) over another library's device array, strided
    or not: through DLPack when ``obj`` has ``__dlpack__`` (``dtype`` must then be None), else through
    ``__cuda_array_interface__``. Its ``buffer`` is a :class:`BorrowedDeviceBuffer` spanning element
    ``(0, ..., 0)`` to the last addressed element (offset 0). Stream order as :func:`from_dlpack` /
    :func:`from_cuda_array_interface`.

    Raises:
        ContractError: as those functions; negative strides; a zero-dimensional array.
    """
    _check_target(context, stream)
    if callable(getattr(obj, "__dlpack__", None)) or _is_capsule(obj):
        if dtype is not None:
            raise ContractError("dtype", "None for a DLPack producer (DLPack names its element type)", repr(dtype))
        foreign = _dlpack_foreign(obj, context, stream)
    else:
        foreign = _cai_foreign(obj, context, stream, dtype)
    try:
        _check_readonly(foreign, readonly)
        if not foreign.shape:
            raise ContractError("obj", "an array of at least one dimension", "a 0-d array")
        span = 0 if not foreign.size else 1 + sum((n - 1) * s for n, s in zip(foreign.shape, foreign.strides))
        buffer = _borrow(context, stream, foreign.info, span, foreign.data, foreign.owner, foreign.readonly)
        return ArrayView(buffer, foreign.shape, foreign.strides)
    except BaseException:
        _release(foreign)
        raise


# -- export -------------------------------------------------------------------------------------
def export_dlpack(buffer: DeviceBuffer[Any], shape: tuple[int, ...], strides: tuple[int, ...] | None, address: int,
                  *, stream: Any, max_version: Any, dl_device: Any, copy: Any) -> Any:
    """The work of ``__dlpack__`` for a buffer or a view of one (see :meth:`DeviceBuffer.__dlpack__`)."""
    from ..runtime._foreign import LEGACY_STREAM, order_before

    buffer._live()
    ordinal = buffer.context.device.ordinal
    if copy is True:
        raise BufferError("mircuda exports without copying (copy=True is not supported): copy on the device "
                          "with Stream.copy_device_range first")
    if dl_device is not None and tuple(dl_device) != (_dlpack.KDL_CUDA, ordinal):
        raise BufferError(f"mircuda exports to its own device only: DLPack device ({_dlpack.KDL_CUDA}, {ordinal}), "
                          f"asked for {tuple(dl_device)}")
    versioned = False
    if max_version is not None:
        if not (isinstance(max_version, tuple) and len(max_version) == 2 and all(isinstance(v, int) for v in max_version)):
            raise ContractError("max_version", "None or a (major, minor) tuple of ints", repr(max_version))
        versioned = max_version[0] >= 1
    if stream is None:
        consumer: int | None = LEGACY_STREAM  # the array API's rule for CUDA: None means the legacy default stream
    elif isinstance(stream, bool) or not isinstance(stream, int):
        raise ContractError("stream", "None, -1 or a CUDA stream handle (int)", repr(stream))
    elif stream == -1:
        consumer = None  # the consumer asked for no synchronization
    elif stream == 0 or stream < -1:
        raise ContractError("stream", "None, -1, 1, 2 or a stream handle > 2 (DLPack forbids 0 for CUDA: ambiguous)",
                            repr(stream))
    else:
        consumer = stream
    capsule = _dlpack.make_capsule(buffer, address, (_dlpack.KDL_CUDA, ordinal), buffer._info, shape, strides,
                                   versioned=versioned, readonly=bool(getattr(buffer, "_readonly", False)))
    if address and consumer is not None and buffer.stream.handle:  # a closed producer stream has nothing to wait for
        try:
            order_before(buffer.stream, consumer)
        except BaseException:
            del capsule  # its destructor runs the deleter: nothing stays exported
            raise
    return capsule


def dlpack_device(buffer: DeviceBuffer[Any]) -> tuple[int, int]:
    """``(kDLCUDA, device ordinal)``."""
    return (_dlpack.KDL_CUDA, buffer.context.device.ordinal)
