"""Streams other libraries own: ordering against them on the device, and adopting them.

The ordering rule shared by the CUDA Array Interface v3 (``stream`` field) and DLPack
(``__dlpack__(stream=...)``): data is valid on the producer's stream; a consumer on another stream
orders itself after the producer's work **on the device**: an event recorded on the producer's stream,
waited on by the consumer's (``cuEventRecord`` + ``cuStreamWaitEvent``), never a host synchronization.

Stream handles follow CUDA's conventions: ``1`` is ``CU_STREAM_LEGACY`` (the legacy default stream), ``2``
is ``CU_STREAM_PER_THREAD``, ``0`` the NULL stream whose meaning depends on how the producer was built.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..errors import ContractError

if TYPE_CHECKING:
    from ._context import Context
    from ._event import Event
    from ._stream import Stream

__all__ = ["LEGACY_STREAM", "PER_THREAD_STREAM", "order_after", "order_before", "foreign_stream_handle",
           "adopt_stream"]

LEGACY_STREAM = 1
"""``CU_STREAM_LEGACY``: the legacy default stream's handle."""
PER_THREAD_STREAM = 2
"""``CU_STREAM_PER_THREAD``: the per-thread default stream's handle."""

_events = threading.local()


def _event(context: Context) -> Event:
    # One dependency-only event per thread and context: recording and waiting are both enqueued before
    # the next use, and cuStreamWaitEvent captures the event's state at the call.
    cache = getattr(_events, "by_context", None)
    if cache is None:
        cache = _events.by_context = weakref.WeakKeyDictionary()
    event = cache.get(context)
    if event is None or not event.handle:
        event = cache[context] = context.create_event(timing=False)
    return event


def order_after(consumer: Stream, producer: int | None) -> None:
    """Make later work on ``consumer`` wait for the work enqueued so far on the stream with handle
    ``producer``. Nothing to do when ``producer`` is None or ``consumer`` itself.

    Raises:
        CudaError: ``producer`` is not a stream of the consumer's context.
    """
    if producer is None or int(producer) == consumer.handle:
        return
    consumer._own()
    event = _event(consumer.context)
    code = _cuda.event_record(event.handle, int(producer))
    if code:
        _cuda.raise_result(code, "cuEventRecord", f"on the producer stream {int(producer):#x}")
    consumer.wait_event(event)


def order_before(producer: Stream, consumer: int | None) -> None:
    """Make later work on the stream with handle ``consumer`` wait for the work enqueued so far on
    ``producer`` (the producer's half of DLPack's exchange). Nothing to do for None or ``producer`` itself.

    Raises:
        CudaError: ``consumer`` is not a stream of the producer's context.
    """
    if consumer is None or int(consumer) == producer.handle:
        return
    producer._own()
    event = _event(producer.context)
    event.record(producer)
    _cuda.call("cuStreamWaitEvent", _cuda.driver().CUstream(int(consumer)), event._cu, 0)


def foreign_stream_handle(obj: Any) -> int:
    """The ``CUstream`` handle of a stream object: an int, anything with ``__cuda_stream__()``
    (cuda.core's protocol, ``(version, handle)``), a torch stream (``.cuda_stream``) or a CuPy
    stream (``.ptr``).

    Raises:
        ContractError: none of those, or a negative handle.
    """
    if isinstance(obj, bool):
        raise ContractError("stream", "a CUstream handle (int) or a stream object", repr(obj))
    if isinstance(obj, int):
        handle = obj
    elif hasattr(obj, "__cuda_stream__"):
        protocol = obj.__cuda_stream__
        value = protocol() if callable(protocol) else protocol
        if not (isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            raise ContractError("stream", "__cuda_stream__() returning (version, handle)", repr(value))
        handle = value[1]
    elif isinstance(getattr(obj, "cuda_stream", None), int):  # torch.cuda.Stream
        handle = obj.cuda_stream
    elif isinstance(getattr(obj, "ptr", None), int):  # cupy.cuda.Stream
        handle = obj.ptr
    else:
        raise ContractError("stream", "a CUstream handle (int), an object with __cuda_stream__, a torch or CuPy stream",
                            type(obj).__name__)
    if not 0 <= handle < 2**64:
        raise ContractError("stream", "a CUstream handle: a non-negative int below 2**64", repr(handle))
    return int(handle)


_DEFAULT_NAMES = {0: "0 (the NULL stream)", LEGACY_STREAM: "1 (CU_STREAM_LEGACY, the legacy default stream)",
                  PER_THREAD_STREAM: "2 (CU_STREAM_PER_THREAD, the per-thread default stream)"}


def adopt_stream(context: Context, obj: Any) -> Stream:
    """A :class:`Stream` over a stream another library created (see :meth:`Context.adopt_stream`)."""
    from ._stream import Stream

    if isinstance(obj, Stream):
        obj._check_usable("stream", context)
        return obj
    handle = foreign_stream_handle(obj)
    if handle in _DEFAULT_NAMES:
        raise ContractError("stream", "a created (non-default) stream", f"handle {_DEFAULT_NAMES[handle]}",
                            "mircuda has no default stream: create one in the other library "
                            "(torch.cuda.Stream(), cupy.cuda.Stream(non_blocking=True)) and adopt that")
    context._make_current()
    drv = _cuda.driver()
    cu = drv.CUstream(handle)
    code, owner_ctx = _cuda.call_status("cuStreamGetCtx", cu)
    if code:
        _cuda.raise_result(code, "cuStreamGetCtx", f"stream {handle:#x} is not a valid stream")
    if int(owner_ctx) != context.handle:
        raise ContractError("stream", f"a stream of {context!r}", f"a stream of context {int(owner_ctx):#x}")
    priority = int(_cuda.call("cuStreamGetPriority", cu))
    stream = Stream._adopt(context, cu, priority, obj)
    context._streams.add(stream)
    return stream
