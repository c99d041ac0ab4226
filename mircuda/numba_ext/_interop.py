"""Sharing streams and device memory with Numba's own API (and any CUDA Array Interface producer).

The synchronization rule (CUDA Array Interface v3, ``stream`` field): data is valid on the
producer's stream; a consumer on another stream must order itself after that stream's work. mircuda
does that on the device, never on the host: it records an event on the producer's stream and makes
the consumer stream wait for it (``cuEventRecord`` + ``cuStreamWaitEvent``).

- :func:`as_numba_array` (mircuda -> Numba): the buffer's producer stream is the stream it was
  allocated on (what ``DeviceBuffer.__cuda_array_interface__`` exports); the array is for Numba work
  on ``stream``.
- :func:`as_device_buffer` (anything with ``__cuda_array_interface__`` -> mircuda): the exporter's
  ``stream`` field (absent or None: nothing to wait for) is ordered before ``stream``.
- Handing a ``DeviceBuffer`` straight to a Numba launch (``kernel[grid, block, s](buffer)``) is
  correct too, but numba-cuda 0.30.4 then also *host-synchronizes* the exported stream on every
  launch (``NUMBA_CUDA_ARRAY_INTERFACE_SYNC``, on by default) and cannot type bf16 or fp8 buffers
  (their CAI ``typestr`` is ``<V2``/``|V1``); :func:`as_numba_array` does neither.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from .. import _cuda
from ..dtypes import DTypeInfo, dtype_info
from ..errors import ContractError
from ..memory import DeviceBuffer
from ..runtime import Context, Stream
from . import _compat
from ._view import ArrayView

__all__ = ["numba_stream", "as_numba_array", "as_device_buffer", "BorrowedDeviceBuffer", "order_after"]

_streams: weakref.WeakKeyDictionary[Stream, Any] = weakref.WeakKeyDictionary()
_streams_lock = threading.Lock()
_events = threading.local()


def _require_stream(stream: Any) -> Stream:
    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
    stream._own()
    return stream


def numba_stream(stream: Stream) -> Any:
    """The Numba stream object for a mircuda stream (``numba.cuda.external_stream``), for Numba's
    classic launches and copies: ``kernel[grid, block, numba_stream(s)](...)``.

    One object per mircuda stream, cached. It does not own the stream: close the mircuda stream only
    after Numba's last use of it.

    Raises:
        ContractError: ``stream`` is not a mircuda Stream.
        ClosedResourceError: the stream was closed.
    """
    stream = _require_stream(stream)
    with _streams_lock:
        ns = _streams.get(stream)
        if ns is None:
            ns = _streams[stream] = _compat.external_stream(stream.handle)
    return ns


def order_after(consumer: Stream, producer: int | None) -> None:
    """Make later work on ``consumer`` wait for the work enqueued so far on the stream with handle
    ``producer`` (an event, no host synchronization). Nothing to do when ``producer`` is None or the
    consumer itself. ``1`` and ``2`` are CUDA's legacy and per-thread default streams.
    """
    if producer is None or producer == consumer.handle:
        return
    context = consumer.context
    cache = getattr(_events, "by_context", None)
    if cache is None:
        cache = _events.by_context = weakref.WeakKeyDictionary()
    event = cache.get(context)
    if event is None or not event.handle:
        event = cache[context] = context.create_event(timing=False)  # one per thread: no interleaving
    context._make_current()
    code = _cuda.event_record(event.handle, int(producer))
    if code:
        _cuda.raise_result(code, "cuEventRecord", f"on the producer stream {int(producer):#x}")
    consumer.wait_event(event)


def _numba_dtype(info: DTypeInfo) -> np.dtype[Any]:
    # Numba types ml_dtypes.bfloat16 arrays as its bfloat16; it has no FP8/FP4 type (their bytes).
    return np.dtype(np.uint8) if info.name in ("e4m3", "e2m1") else info.dtype


def as_numba_array(array: DeviceBuffer[Any] | ArrayView, stream: Stream) -> Any:
    """A Numba device array over a mircuda buffer (or N-d view), for Numba work on ``stream``.

    No copy, no host synchronization: ``stream`` is ordered after the buffer's allocating stream on
    the device (see the module's rule); the Numba array's default stream is ``stream``. Its dtype is
    the buffer's, except e4m3/e2m1 which Numba sees as ``uint8`` bytes. The array keeps the buffer
    alive; do not ``free()`` the buffer while Numba may still use the array.

    Raises:
        ContractError: ``array`` is not a DeviceBuffer or ArrayView, or ``stream`` belongs to another
            context.
        UseAfterFree: the buffer was freed.
    """
    if isinstance(array, ArrayView):
        buffer, shape, strides, address = array.buffer, array.shape, array.byte_strides, array.data
    elif isinstance(array, DeviceBuffer):
        buffer, shape, strides = array, (len(array),), (array.dtype.itemsize,)
        address = array.handle
    else:
        raise ContractError("array", "a DeviceBuffer or an ArrayView", type(array).__name__)
    stream = _require_stream(stream)
    if buffer.context is not stream.context:
        raise ContractError("stream", f"a stream of {buffer.context!r}", f"a stream of {stream.context!r}")
    order_after(stream, buffer.stream.handle or None)
    nstream = numba_stream(stream)
    span = buffer.nbytes - (address - buffer.handle) if address else 0
    memory = _compat.memory_pointer(_compat.current_numba_context(), address, span, owner=buffer)
    return _compat.DeviceNDArray(shape, strides, _numba_dtype(buffer._info), stream=nstream, gpu_data=memory)


class BorrowedDeviceBuffer(DeviceBuffer[Any]):
    """A :class:`DeviceBuffer` over memory another library owns (made by :func:`as_device_buffer`).

    It launches like any buffer of its dtype and context. It keeps the exporting object alive and
    never frees the memory: ``free(stream)`` only ends the borrow (later uses raise UseAfterFree).
    """

    __slots__ = ("_owner",)
    _owner: object  # the exporting object, kept alive while borrowed; None once the borrow ends

    def free(self, stream: Stream) -> None:
        """End the borrow (the memory stays with its owner). Raises UseAfterFree if already ended."""
        self._live()
        self._freed = True
        self._ptr = 0
        self._owner = None

    def __repr__(self) -> str:
        return "Borrowed" + super().__repr__()


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


def as_device_buffer(obj: Any, context: Context, stream: Stream, *, dtype: Any = None) -> BorrowedDeviceBuffer:
    """A :class:`DeviceBuffer` view of another library's device array (a Numba device array, a CuPy
    array...), through its ``__cuda_array_interface__``, for mircuda work on ``stream``.

    The array must be C-contiguous, writable and on ``context``'s device; it is seen as 1-d (all its
    elements in order). ``stream`` is ordered after the exporter's ``stream`` field on the device.
    ``dtype`` is needed where the interface cannot say it (bf16 and fp8 export ``<V2``/``|V1``);
    otherwise it must have the exported element size.

    Raises:
        ContractError: no interface, a mask, non-contiguous strides, a read-only array, another
            device's memory, an unsupported or ambiguous element type, or a stream of another context.
    """
    cai = getattr(obj, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        raise ContractError("obj", "an object with __cuda_array_interface__", type(obj).__name__)
    if not isinstance(context, Context):
        raise ContractError("context", "a mircuda Context", type(context).__name__)
    stream = _require_stream(stream)
    if stream.context is not context:
        raise ContractError("stream", f"a stream of {context!r}", f"a stream of {stream.context!r}")
    if cai.get("mask") is not None:
        raise ContractError("obj", "a CUDA array without a mask", "a masked array")
    info = _cai_dtype(obj, cai["typestr"], dtype)
    shape = tuple(int(n) for n in cai["shape"])
    count = 1
    for n in shape:
        count *= n
    strides = cai.get("strides")
    if strides is not None and count:
        want, step = [], info.itemsize
        for n in reversed(shape):
            want.append(step)
            step *= n
        if any(n != 1 and s != w for n, s, w in zip(shape, strides, reversed(want))):
            raise ContractError("obj", "a C-contiguous CUDA array", f"shape {shape} with byte strides {tuple(strides)}")
    address, readonly = cai["data"]
    if readonly:
        raise ContractError("obj", "a writable CUDA array", "a read-only one")
    address = int(address or 0)
    if count and address:
        drv = _cuda.driver()
        context._make_current()
        ordinal = _cuda.call("cuPointerGetAttribute",
                             drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address)
        if int(ordinal) != context.device.ordinal:
            raise ContractError("obj", f"memory of device {context.device.ordinal}", f"memory of device {int(ordinal)}")
    elif count:
        raise ContractError("obj", "a device address for a non-empty array", "data pointer 0")
    order_after(stream, cai.get("stream") if cai.get("version", 0) >= 3 else None)
    borrowed = BorrowedDeviceBuffer._adopt(context, stream, info, count, address if count else 0)
    if borrowed._finalizer is not None:  # the owner frees this memory, never mircuda
        borrowed._finalizer.detach()
        borrowed._finalizer = None
    borrowed._owner = obj
    return borrowed
