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

from ..dtypes import DTypeInfo
from ..errors import ContractError
from ..memory import ArrayView, BorrowedDeviceBuffer, DeviceBuffer, from_cuda_array_interface
from ..runtime import Context, Stream
from ..runtime._foreign import order_after
from . import _compat

__all__ = ["numba_stream", "as_numba_array", "as_device_buffer", "BorrowedDeviceBuffer", "order_after"]

_streams: weakref.WeakKeyDictionary[Stream, Any] = weakref.WeakKeyDictionary()
_streams_lock = threading.Lock()


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


def as_device_buffer(obj: Any, context: Context, stream: Stream, *, dtype: Any = None) -> BorrowedDeviceBuffer:
    """A :class:`DeviceBuffer` view of another library's device array (a Numba device array, a CuPy
    array...), through its ``__cuda_array_interface__``, for mircuda work on ``stream``: the core's
    :func:`mircuda.from_cuda_array_interface` (writable arrays only), kept here for Numba users.

    Raises:
        ContractError: see :func:`mircuda.from_cuda_array_interface`.
    """
    return from_cuda_array_interface(obj, context, stream, dtype=dtype)
