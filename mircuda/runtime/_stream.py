"""Streams: non-blocking queues of device work, and the transfers enqueued on them."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import _cuda
from ..dtypes import is_integer_value
from ..errors import ClosedResourceError, ContractError

if TYPE_CHECKING:
    from ..graph import Graph
    from ..memory import DeviceBuffer, MemoryPool, PinnedBuffer
    from ._context import Context
    from ._event import Event

__all__ = ["Stream"]

R = TypeVar("R")

_STAGING_HINT = (
    "device transfers take pinned memory only: stage the array with "
    "pinned = context.allocate_pinned(array.dtype, len(array)); pinned.write_prefix(array)"
)

_SERIALS = itertools.count(1)


class Stream:
    """A non-blocking stream (``CU_STREAM_NON_BLOCKING``). Create with :meth:`Context.create_stream`.

    Every method enqueues asynchronously except :meth:`synchronize`, which blocks the calling thread.
    """

    __slots__ = ("_context", "_cu", "_handle", "_priority", "_finalizer", "_owner", "_serial", "__weakref__")
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _context: Context
    _cu: Any  # CUstream
    _handle: int
    _priority: int
    _finalizer: weakref.finalize[..., Stream] | None
    _owner: object  # an adopted stream's foreign owner (kept alive, never destroyed); None when mircuda owns it
    _serial: int  # unique in the process (a destroyed stream's handle may be reused): PinnedBuffer's event key

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("create streams with Context.create_stream()")

    @classmethod
    def _create(cls, context: Context, priority: int) -> Stream:
        drv = _cuda.driver()
        cu = _cuda.call("cuStreamCreateWithPriority", int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), priority)
        self = object.__new__(cls)
        self._context = context
        self._cu = cu
        self._handle = int(cu)
        self._priority = priority
        self._finalizer = weakref.finalize(self, _destroy, cu, context)
        self._finalizer.atexit = False
        self._owner = None
        self._serial = next(_SERIALS)
        return self

    @classmethod
    def _adopt(cls, context: Context, cu: Any, priority: int, owner: object) -> Stream:
        # A stream another library created: never destroyed here; `owner` (the library's stream
        # object, or the int handle) is kept alive as long as this Stream is.
        self = object.__new__(cls)
        self._context = context
        self._cu = cu
        self._handle = int(cu)
        self._priority = priority
        self._finalizer = weakref.finalize(self, _forget)
        self._finalizer.atexit = False
        self._owner = owner
        self._serial = next(_SERIALS)
        return self

    @property
    def handle(self) -> int:
        """The ``CUstream`` as an int (0 after ``close()``)."""
        return self._handle

    @property
    def context(self) -> Context:
        return self._context

    @property
    def owned(self) -> bool:
        """False for a stream adopted from another library (:meth:`Context.adopt_stream`): ``close()``
        then only ends mircuda's use of it and never destroys it."""
        return getattr(self, "_owner", None) is None

    def __cuda_stream__(self) -> tuple[int, int]:
        """The stream protocol of cuda.core (and others): ``(0, handle)``, version 0 of the protocol.

        Raises:
            ClosedResourceError: the stream was closed.
        """
        if not self._handle:
            raise ClosedResourceError("the stream was closed")
        return (0, self._handle)

    @property
    def priority(self) -> int:
        """The scheduling priority given at creation: lower numbers run first, within
        ``Context.stream_priority_range()``; 0 is the default."""
        return self._priority

    def _check_usable(self, argument: str, context: Context) -> None:
        """Raise unless this stream is open and belongs to ``context``; make the context current."""
        if not self._handle:
            raise ClosedResourceError(f"argument {argument!r}: the stream was closed")
        if self._context is not context:
            raise ContractError(argument, f"a stream of {context!r}", f"a stream of {self._context!r}")
        context._make_current()

    def _own(self) -> None:
        if not self._handle:
            raise ClosedResourceError("the stream was closed")
        self._context._make_current()

    # -- synchronization --------------------------------------------------------------------
    def synchronize(self) -> None:
        """Block the calling thread until all work enqueued on this stream has completed."""
        self._own()
        _cuda.call("cuStreamSynchronize", self._cu)

    def query(self) -> bool:
        """True when all work enqueued so far has completed; never blocks."""
        self._own()
        code, _ = _cuda.call_status("cuStreamQuery", self._cu)
        if code == _cuda.CUDA_ERROR_NOT_READY:
            return False
        if code:
            _cuda.raise_result(code, "cuStreamQuery")
        return True

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` completes (``cuStreamWaitEvent``).

        ``event`` may belong to another context, of this device or another one: that is how work on
        one GPU waits for work on another (the driver orders them on the devices; the host does not
        wait).

        Raises:
            ContractError: ``event`` is not an Event.
            ClosedResourceError: the event, its context or this stream was closed.
        """
        from ._event import Event

        if not isinstance(event, Event):
            raise ContractError("event", "an Event", repr(event))
        if event._context is not self._context:
            event._context._check_open()
        event._check()
        self._own()
        _cuda.call("cuStreamWaitEvent", self._cu, event._cu, 0)

    def record_event(self, event: Event) -> None:
        """Record ``event`` on this stream (the same as ``event.record(self)``)."""
        event.record(self)

    # -- graphs -----------------------------------------------------------------------------
    def capture(self, resources: R, fn: Callable[[R], object]) -> Graph[R]:
        """Capture the work ``fn(resources)`` enqueues into a CUDA graph, instantiate it and upload it.

        Begins a capture on this stream in thread-local mode (``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``),
        calls ``fn(resources)``, ends the capture, instantiates the graph (``cuGraphInstantiate``,
        flags 0) and uploads it on this stream (``cuGraphUpload``). Nothing runs on the device until
        :meth:`Graph.launch`. Work ``fn`` enqueues on other streams joins the capture when they wait on
        an event recorded on a capturing stream (fork), and must be joined back before ``fn`` returns.

        ``resources`` is one object holding what the sequence uses (buffers, modules, kernels, plans):
        the graph keeps it alive, and every :class:`DeviceBuffer` reachable from it is held (its
        ``free()`` raises) until the graph is closed. Reachable means: through dict keys and values,
        list/tuple/set/deque items, dataclass fields and object attributes (``__dict__`` and
        ``__slots__``), not into mircuda's runtime handles, numpy arrays, functions or classes.

        Inside the capture, stream-ordered allocations must be freed before ``fn`` returns (a graph
        owning an allocation could run only once), and buffers allocated outside it must not be
        freed there. Copies through pinned memory become graph nodes: ``PinnedBuffer.wait()`` does not
        track them; order host access after the replay (``Stream.synchronize`` or an event). Do not
        drop the last reference to a PinnedBuffer inside ``fn``: its finalizer synchronizes, which
        the capture forbids.

        Raises:
            CaptureError: ``fn`` raised (the error is chained; ``result_name`` is the driver's error
                name when it was a CUDA error), the capture was invalidated (e.g. a synchronizing call
                or a pageable copy; ``result_name`` such as ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``),
                a forked stream was not joined back, an allocation was not paired with its free, or
                instantiation failed. The capture is then ended and discarded and this stream is
                usable again.
            ContractError: ``fn`` is not callable.
            ClosedResourceError: the stream was closed.
        """
        from ..graph._capture import capture

        return capture(self, resources, fn)

    # -- transfers --------------------------------------------------------------------------
    def copy_to_device(self, src: PinnedBuffer[Any], dst: DeviceBuffer[Any], count: int | None = None, *,
                       src_offset: int = 0, dst_offset: int = 0) -> None:
        """Copy ``count`` elements from pinned host memory to a device buffer (``cuMemcpyHtoDAsync``).

        ``count`` defaults to ``len(src) - src_offset``. Offsets and counts are in elements.
        Inside a capture the copy becomes a graph node that reads ``src`` at each replay.

        Raises:
            ContractError: ``src`` is not a PinnedBuffer (a numpy array must be staged), dtypes differ,
                or a range exceeds a buffer.
        """
        from ..memory import check_device_buffer

        self._own()
        _check_pinned(src, "src", self._context)
        check_device_buffer("dst", dst, self._context)
        n = _check_range(src, dst, count, src_offset, dst_offset)
        src_offset, dst_offset = int(src_offset), int(dst_offset)
        if n:
            track = _tracks_pinned(self)
            if track:
                src._event_for(self)  # made before the copy: a copy is never left in flight untracked
            item = dst._info.itemsize
            _cuda.call("cuMemcpyHtoDAsync", dst._ptr + dst_offset * item, src._ptr + src_offset * item,
                       n * item, self._cu)
            if track:
                src._mark_in_flight(self)

    def copy_to_host(self, src: DeviceBuffer[Any], dst: PinnedBuffer[Any], count: int | None = None, *,
                     src_offset: int = 0, dst_offset: int = 0) -> None:
        """Copy ``count`` elements from a device buffer to pinned host memory (``cuMemcpyDtoHAsync``).

        The data is in ``dst`` once the stream reaches this point: ``dst.to_numpy()`` waits for it.
        Inside a capture the copy becomes a graph node and ``dst.to_numpy()`` does not wait for the
        replays: synchronize the stream (or an event recorded after the replay) first.

        Raises:
            ContractError: ``dst`` is not a PinnedBuffer, dtypes differ, or a range exceeds a buffer.
        """
        from ..memory import check_device_buffer

        self._own()
        check_device_buffer("src", src, self._context)
        _check_pinned(dst, "dst", self._context)
        n = _check_range(src, dst, count, src_offset, dst_offset)
        src_offset, dst_offset = int(src_offset), int(dst_offset)
        if n:
            track = _tracks_pinned(self)
            if track:
                dst._event_for(self)  # made before the copy: a copy is never left in flight untracked
            item = src._info.itemsize
            _cuda.call("cuMemcpyDtoHAsync", dst._ptr + dst_offset * item, src._ptr + src_offset * item,
                       n * item, self._cu)
            if track:
                dst._mark_in_flight(self)

    def copy_device_range(self, src: DeviceBuffer[Any], src_offset: int, dst: DeviceBuffer[Any],
                          dst_offset: int, count: int) -> None:
        """Copy ``count`` elements between device buffers of one dtype (``cuMemcpyDtoDAsync``).

        No host staging, no synchronization. Overlapping ranges of one buffer are not allowed.

        Raises:
            ContractError: a range exceeds a buffer, the dtypes differ, or the ranges overlap.
        """
        from ..memory import check_device_buffer

        self._own()
        check_device_buffer("src", src, self._context)
        check_device_buffer("dst", dst, self._context)
        if count is None:
            raise ContractError("count", "a non-negative int (elements)", "None")
        n = _check_range(src, dst, count, src_offset, dst_offset)
        src_offset, dst_offset = int(src_offset), int(dst_offset)
        if src is dst and n and abs(src_offset - dst_offset) < n:
            raise ContractError("dst_offset", f"a range not overlapping [{src_offset}, {src_offset + n})",
                                f"[{dst_offset}, {dst_offset + n})")
        if n:
            item = src._info.itemsize
            _cuda.call("cuMemcpyDtoDAsync", dst._ptr + dst_offset * item, src._ptr + src_offset * item,
                       n * item, self._cu)

    def copy_peer(self, src: DeviceBuffer[Any], dst: DeviceBuffer[Any], count: int | None = None, *,
                  src_offset: int = 0, dst_offset: int = 0, engine: str = "copy") -> None:
        """Copy ``count`` elements from a buffer of one device to a buffer of another (or the same)
        device, enqueued on this stream, which must belong to ``src``'s or ``dst``'s context. No host
        staging, no synchronization.

        ``count`` defaults to ``len(src) - src_offset``; counts and offsets are in elements. Order the
        other device's readers (or writers) with an event: ``other.wait_event(event)``.

        Engines:

        - ``"copy"`` (default): ``cuMemcpyPeerAsync``. Over NVLink the copy engines move the data
          directly; without a peer path the driver stages it. Needs no peer access switch and leaves
          the SMs free for kernels running beside the copy: the choice for copies that overlap compute.
        - ``"sm"``: a kernel on this stream's device (``cuda_src/peer_copy.cu``, compiled by NVRTC and
          loaded on the first call with a non-zero count in each context: make that call outside a
          stream capture) loads and stores the bytes itself, 16 bytes at a time when
          the source and destination addresses agree modulo 16 (else byte by byte, slowly), with a grid
          that fills every SM. It needs the other device's buffer opened to this stream's context
          (``pool.set_access(context)`` for pool buffers, ``context.enable_peer_access(owner)`` for
          borrowed ones). With a stream of ``src``'s device it writes into the peer's memory (push:
          usually the faster direction over NVLink); with one of ``dst``'s it reads it (pull). It
          occupies the SMs while it runs: the choice for large copies on an idle device, where NVLink
          can move more than the copy engines (the figures: ``python -m mircuda multi-gpu-profile``,
          part a).

        Raises:
            ContractError: a buffer is not a DeviceBuffer, the dtypes differ, a range exceeds a buffer,
                this stream belongs to neither buffer's context, ``engine`` is not ``"copy"`` or ``"sm"``,
                or (``engine="sm"``) the other device's buffer was not opened to this stream's context.
            UseAfterFree: a buffer was freed. ClosedResourceError: a context or this stream was closed.
            CompileError: (``engine="sm"``, first call) NVRTC rejected the kernel.
        """
        from ..memory import check_device_buffer

        self._own()
        if type(engine) is not str or engine not in ("copy", "sm"):
            raise ContractError("engine", "'copy' (cuMemcpyPeerAsync) or 'sm' (a copy kernel)", repr(engine))
        for name, value in (("src", src), ("dst", dst)):
            # Each buffer is checked against its own (open) context; the stream must be one of theirs.
            owner = getattr(value, "_context", None)
            check_device_buffer(name, value, owner if owner is not None else self._context)._context._check_open()
        if self._context is not src._context and self._context is not dst._context:
            raise ContractError("stream", f"a stream of the context of src ({src._context!r}) or dst "
                                f"({dst._context!r})", f"a stream of {self._context!r}")
        n = _check_range(src, dst, count, src_offset, dst_offset)
        if engine == "sm":
            # The kernel runs in this stream's context: the other buffer must be reachable from it.
            for name, value in (("src", src), ("dst", dst)):
                check_device_buffer(name, value, self._context)
        if n:
            item = src._info.itemsize
            dst_ptr, src_ptr = dst._ptr + int(dst_offset) * item, src._ptr + int(src_offset) * item
            if engine == "sm":
                from ..compile._peer_copy import sm_copy

                sm_copy(self, dst_ptr, src_ptr, n * item)
            else:
                _cuda.call("cuMemcpyPeerAsync", dst_ptr, dst._context._cu, src_ptr, src._context._cu, n * item,
                           self._cu)

    def memset(self, buffer: DeviceBuffer[Any], byte: int, *, offset: int = 0, count: int | None = None) -> None:
        """Set every byte of ``count`` elements (from ``offset``, in elements) to ``byte`` (``cuMemsetD8Async``)."""
        from ..memory import check_device_buffer

        self._own()
        check_device_buffer("buffer", buffer, self._context)
        if type(byte) is not int or not 0 <= byte <= 255:
            raise ContractError("byte", "an int in [0, 255]", repr(byte))
        offset = _nonneg("offset", offset)
        if offset > len(buffer):
            raise ContractError("offset", f"at most {len(buffer)} (the buffer's length)", repr(offset))
        n = len(buffer) - offset if count is None else _nonneg("count", count)
        if offset + n > len(buffer):
            raise ContractError("count", f"offset + count <= {len(buffer)}", f"{offset} + {n}")
        if n:
            item = buffer._info.itemsize
            _cuda.call("cuMemsetD8Async", buffer._ptr + offset * item, byte, n * item, self._cu)

    def upload(self, pool: MemoryPool, array: Any) -> DeviceBuffer[Any]:
        """Copy a host array (any numpy array, any order; read in C order) into a new 1-d buffer
        allocated from ``pool`` on this stream, staging through a temporary pinned buffer.

        **Blocks the calling thread** until the copy (and the work enqueued before it) has completed,
        so the pinned staging buffer can be freed. For hot paths use :meth:`copy_to_device` from a
        pinned buffer you keep. Shape: ``len(result) == array.size``; dtype: the array's.

        Raises:
            ContractError: ``pool`` is not a MemoryPool of this stream's context, the array's dtype
                is not a mircuda element type, or the stream is capturing.
        """
        from ..memory._staging import upload

        self._own()
        self._refuse_capture("upload")
        return upload(self, pool, array)

    def download(self, buffer: DeviceBuffer[Any]) -> np.ndarray[Any, Any]:
        """Copy a device buffer into a new 1-d numpy array, staging through a temporary pinned buffer.

        **Blocks the calling thread** until the copy (and the work enqueued before it on this stream)
        has completed. For hot paths use :meth:`copy_to_host` into a pinned buffer you keep.

        Raises:
            ContractError: ``buffer`` is not a DeviceBuffer of this stream's context, or the stream
                is capturing.
            UseAfterFree: the buffer was freed.
        """
        from ..memory._staging import download

        self._own()
        self._refuse_capture("download")
        return download(self, buffer)

    def _refuse_capture(self, what: str) -> None:
        if _cuda.is_capturing(self._cu):
            raise ContractError("stream", f"a stream that is not capturing ({what} blocks the host)",
                                "a capturing stream", "stage through a PinnedBuffer with copy_to_device/copy_to_host")

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the stream (``cuStreamDestroy``; pending work still completes). Idempotent.

        An adopted stream (``owned`` is False) is not destroyed: its owner keeps it; mircuda drops
        its handle and its reference to the owner."""
        self._handle = 0
        if self._finalizer is not None:
            self._finalizer()
        self._owner = None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        adopted = "" if getattr(self, "_owner", None) is None else ", adopted"  # stand-ins made without _adopt/_create
        return f"Stream({hex(self._handle) if self._handle else 'closed'}{adopted})"


@_cuda.finalizer
def _destroy(cu: Any, context: Context) -> None:
    if not context._closed:
        _cuda.call_status("cuStreamDestroy", cu)


@_cuda.finalizer
def _forget() -> None:
    """The finalizer of an adopted stream: its owner destroys it, never mircuda."""


def _tracks_pinned(stream: Stream) -> bool:
    """Whether a copy through a pinned buffer on ``stream`` is tracked for ``PinnedBuffer.wait()``: always but
    inside a capture, where the copy is a graph node, an event recorded on the capturing stream would only be
    a capture dependency (never completing for ``wait()``), and the graph's replays are what the caller waits on."""
    return not _cuda.is_capturing(stream._cu)


def _check_pinned(value: object, argument: str, context: Context) -> None:
    """Raise unless ``value`` is an open PinnedBuffer of ``context``."""
    from ..memory import PinnedBuffer, describe_argument

    if not isinstance(value, PinnedBuffer):
        if isinstance(value, np.ndarray):
            raise ContractError(argument, "a PinnedBuffer", describe_argument(value), _STAGING_HINT)
        raise ContractError(argument, "a PinnedBuffer", f"{type(value).__name__} {value!r}"[:200])
    if value._closed:
        raise ClosedResourceError(f"argument {argument!r}: {value!r} was closed")
    if value._context is not context:
        raise ContractError(argument, f"a buffer of {context!r}", f"a buffer of {value._context!r}")


def _nonneg(argument: str, value: object) -> int:
    if not is_integer_value(value) or value < 0:
        raise ContractError(argument, "a non-negative int (elements)", repr(value))
    return int(value)


def _check_range(src: Any, dst: Any, count: int | None, src_offset: int, dst_offset: int) -> int:
    """The element count of a copy between two checked buffers; raise on another dtype or a range
    that exceeds either buffer."""
    if src._info.dtype != dst._info.dtype:
        raise ContractError("dst", f"a buffer of dtype {src._info.dtype.name}", f"dtype {dst._info.dtype.name}")
    src_offset = _nonneg("src_offset", src_offset)
    dst_offset = _nonneg("dst_offset", dst_offset)
    n = len(src) - src_offset if count is None else _nonneg("count", count)
    if n < 0 or src_offset + n > len(src):
        raise ContractError("count", f"src_offset + count <= len(src) = {len(src)}", f"{src_offset} + {n}")
    if dst_offset + n > len(dst):
        raise ContractError("count", f"dst_offset + count <= len(dst) = {len(dst)}", f"{dst_offset} + {n}")
    return n
