"""Typed device buffers (pool allocations) and pinned host buffers."""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from .. import _cuda
from ..dtypes import DTypeInfo, dtype_info, is_integer_value
from ..errors import ClosedResourceError, ContractError, UseAfterFree

if TYPE_CHECKING:
    from ..runtime import Context, Event, Stream

__all__ = ["DeviceBuffer", "PinnedBuffer", "check_device_buffer", "describe_argument", "free_address",
           "HOST_ARRAY_HINT", "peer_accessible"]

T = TypeVar("T")
_B = TypeVar("_B", bound="DeviceBuffer[Any]")


SIZE_MAX = 2**64 - 1
"""The largest byte count the driver's ``size_t`` parameters take."""


def _check_count(name: str, count: object) -> int:
    """``count`` as a Python int (a numpy integer too: sizes computed from it must not wrap in its type)."""
    if type(count) is not int and not is_integer_value(count):
        raise ContractError(name, "a non-negative int (elements)", repr(count))
    if count < 0:
        raise ContractError(name, "a non-negative int (elements)", repr(count))
    return int(count)


def _check_bytes(name: str, nbytes: object) -> None:
    """Refuse by ``name`` a byte count that is not an int in [0, :data:`SIZE_MAX`] (the driver's ``size_t``)."""
    if type(nbytes) is not int or not 0 <= nbytes <= SIZE_MAX:
        raise ContractError(name, "a non-negative int below 2**64 (bytes)", repr(nbytes))


def _check_size(name: str, count: int, itemsize: int, dtype: str) -> int:
    """``count * itemsize`` bytes, refused above :data:`SIZE_MAX` (the driver's ``size_t``) by ``name``."""
    nbytes = count * itemsize
    if nbytes > SIZE_MAX:
        raise ContractError(name, f"at most {SIZE_MAX // itemsize} elements of {dtype} (a byte count below 2**64)",
                            repr(count))
    return nbytes


class DeviceBuffer(Generic[T]):
    """``count`` elements of one dtype in device memory, allocated from a :class:`MemoryPool`.

    ``DeviceBuffer[mc.f32]`` is the type of a float32 buffer in kernel contracts. A buffer is uniquely
    owned (it cannot be copied); ``free(stream)`` releases it stream-ordered (``cuMemFreeAsync``) and
    any later use raises :class:`UseAfterFree`. A buffer that is dropped without ``free`` is freed by a
    finalizer on the stream that allocated it (or, if that stream was closed, synchronously: ``cuCtxSynchronize``
    then ``cuMemFree``); the finalizer never raises. The caller orders uses on other streams before that free.
    """

    __slots__ = ("_ptr", "_count", "_scalar", "_info", "_nbytes", "_context", "_stream",
                 "_finalizer", "_freed", "_holds", "__weakref__")
    _ptr: int
    _count: int
    _scalar: type
    _info: DTypeInfo
    _nbytes: int
    _context: Context
    _stream: Stream
    _finalizer: weakref.finalize[..., DeviceBuffer[Any]] | None  # None for an empty buffer
    _freed: bool
    _holds: int  # live graphs that hold this buffer

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("allocate device buffers with MemoryPool.allocate(dtype, stream, count)")

    def __class_getitem__(cls, item: Any) -> Any:
        # typing turns a str subscript into a forward reference, which kernel contracts then refuse by name;
        # a str that is no Python name ("", " ", "f 32") would fail inside typing with IndexError or SyntaxError.
        if isinstance(item, str) and not item.isidentifier():
            raise ContractError("DeviceBuffer[T]", "an element type object such as mc.f32", repr(item),
                                "a parameter type is a type object, not its name")
        return super().__class_getitem__(item)  # type: ignore[misc]

    @classmethod
    def _adopt(cls: type[_B], context: Context, stream: Stream, info: DTypeInfo, count: int, ptr: int) -> _B:
        self = object.__new__(cls)
        self._ptr = ptr
        self._count = count
        self._scalar = info.scalar_type
        self._info = info
        self._nbytes = count * info.itemsize
        self._context = context
        self._stream = stream
        self._freed = False
        self._holds = 0
        if ptr:
            self._finalizer = weakref.finalize(self, _free_quietly, ptr, stream, context)
            self._finalizer.atexit = False
        else:
            self._finalizer = None
        return self

    # -- properties -------------------------------------------------------------------------
    def _live(self) -> None:
        if self._freed:
            raise UseAfterFree(f"{self!r} was freed")

    @property
    def handle(self) -> int:
        """The device address (``CUdeviceptr``) as an int; 0 for an empty buffer."""
        self._live()
        return self._ptr

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element dtype (numpy; ml_dtypes for bf16, e4m3, e2m1)."""
        return self._info.dtype

    @property
    def scalar_type(self) -> type:
        """The element's numpy scalar type (``mc.f32`` ...)."""
        return self._scalar

    @property
    def nbytes(self) -> int:
        """Size in bytes: ``len(buffer) * dtype.itemsize``."""
        return self._nbytes

    @property
    def context(self) -> Context:
        return self._context

    @property
    def stream(self) -> Stream:
        """The stream the buffer was allocated on (and is freed on by the finalizer)."""
        return self._stream

    @property
    def freed(self) -> bool:
        """True once ``free()`` was called; any use then raises :class:`UseAfterFree`."""
        return self._freed

    def __len__(self) -> int:
        return self._count

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3: a 1-D C-contiguous array whose ``stream`` is the allocating stream.

        A consumer that follows the v3 rule orders its work after that stream before touching the data.
        """
        self._live()
        return {
            "shape": (self._count,),
            "typestr": self._info.dtype.str,
            "descr": self._info.dtype.descr,
            "data": (self._ptr, False),
            "strides": None,
            "version": 3,
            "stream": self._stream._handle or None,
        }

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export the buffer as a 1-d DLPack tensor (no copy) for ``torch.from_dlpack``,
        ``cupy.from_dlpack``, ``jax.dlpack.from_dlpack``...

        A consumer with ``max_version >= (1, 0)`` gets a ``"dltensor_versioned"`` capsule (DLPack 1.1:
        the read-only flag of a read-only borrowed buffer; e2m1 as ``kDLFloat4_e2m1fn``, 4 bits padded
        to a byte), older consumers the legacy ``"dltensor"`` capsule. bf16 is ``kDLBfloat``, e4m3
        ``kDLFloat8_e4m3fn``. The capsule keeps this buffer alive until the consumer's deleter runs;
        ``free()`` is still the owner's call (free it only after the consumer is done with it).

        Stream order (the DLPack exchange rule): ``stream`` is the consumer's stream (``None``: the
        legacy default stream, 1; 2: per-thread default; -1: no ordering); mircuda makes it wait on
        the device for the work enqueued so far on the buffer's allocating stream (an event).

        Raises:
            BufferError: ``copy=True`` (mircuda never copies on export), ``dl_device`` another device,
                or a legacy capsule for what only a versioned one can flag (read-only, e2m1).
            ContractError: ``stream`` is 0 or not an int; ``max_version`` is malformed.
            UseAfterFree: the buffer was freed.
        """
        from ._foreign import export_dlpack

        self._live()
        return export_dlpack(self, (self._count,), None, self._ptr, stream=stream, max_version=max_version,
                             dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(2, ordinal)``: DLPack's ``kDLCUDA`` and this buffer's device."""
        from ._foreign import dlpack_device

        return dlpack_device(self)

    # -- lifetime ---------------------------------------------------------------------------
    def free(self, stream: Stream) -> None:
        """Release the memory on ``stream`` (``cuMemFreeAsync``): work enqueued on ``stream`` before
        the free may still use it. Freeing twice raises :class:`UseAfterFree`.

        Raises:
            ContractError: ``stream`` belongs to another context or is closed; the buffer is held by a
                live graph.
        """
        self._live()
        _require_stream(stream)
        stream._check_usable("stream", self._context)
        if self._holds:
            raise ContractError("buffer", "a buffer that no live graph holds",
                                f"a buffer held by {self._holds} live graph(s)",
                                "destroy the graph (Graph.close() or into_resources()) first")
        if self._ptr:
            _cuda.call("cuMemFreeAsync", self._ptr, stream._cu)
        if self._finalizer is not None:  # set exactly when _ptr was nonzero at allocation
            self._finalizer.detach()
        self._freed = True
        self._ptr = 0

    def __copy__(self) -> DeviceBuffer[T]:
        raise TypeError("a DeviceBuffer is uniquely owned; copy its contents with Stream.copy_device_range")

    __deepcopy__ = __copy__

    def __reduce__(self) -> Any:
        raise TypeError("a DeviceBuffer cannot be pickled")

    def __repr__(self) -> str:
        state = "freed" if self._freed else hex(self._ptr)
        return f"DeviceBuffer[{self._info.name}](len={self._count}, {state})"


def _require_stream(stream: object) -> None:
    from ..runtime import Stream

    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__)


HOST_ARRAY_HINT = ("host arrays must be copied to a DeviceBuffer first: stage them with "
                   "pinned = context.allocate_pinned(array.dtype, len(array)); pinned.write_prefix(array); "
                   "stream.copy_to_device(pinned, buffer)")
"""The hint of every refusal of a host array where device or pinned memory is needed."""


def describe_argument(value: object) -> str:
    """A short description of a refused argument for an error's ``received`` (a numpy array by its
    dtype and shape, anything else by its type name)."""
    if isinstance(value, np.ndarray):
        return f"a pageable numpy array (dtype {value.dtype}, shape {value.shape})"
    return type(value).__name__


def check_device_buffer(argument: str, value: object, context: Context, dtype: DTypeInfo | None = None,
                        count: int = 0, shape: str = "") -> DeviceBuffer[Any]:
    """Return ``value`` if it is a live ``DeviceBuffer`` of ``context`` (of ``dtype`` when given) with
    at least ``count`` elements; the one check behind kernel arguments, plan operands and stream copies.

    Args:
        argument: the argument's name, for the errors.
        dtype: the element type required, or None for any.
        count: the fewest elements accepted.
        shape: what the elements are, for the errors (e.g. ``"[M, K] = [4, 64]"``).

    Raises:
        ContractError: ``value`` is not a DeviceBuffer (a host array gets :data:`HOST_ARRAY_HINT`), has
            another dtype, belongs to another context (open or closed) that did not open it to
            ``context`` (:func:`peer_accessible`: ``MemoryPool.set_access``, ``Context.enable_peer_access``)
            or has fewer than ``count`` elements.
        UseAfterFree: the buffer was freed.
    """
    if not isinstance(value, DeviceBuffer):
        expected = f"a DeviceBuffer[{dtype.name}]" if dtype is not None else "a DeviceBuffer"
        hint = HOST_ARRAY_HINT if hasattr(value, "__array_interface__") or hasattr(value, "__array__") else ""
        raise ContractError(argument, f"{expected} of {shape}" if shape else expected, describe_argument(value), hint)
    if value._freed:
        raise UseAfterFree(f"argument {argument!r}: {value!r} was freed")
    if dtype is not None and value._scalar is not dtype.scalar_type:
        raise ContractError(argument, f"a DeviceBuffer[{dtype.name}]", f"a DeviceBuffer[{value._info.name}]")
    if value._context is not context and not peer_accessible(value, context):  # a closed one shows as closed
        raise ContractError(argument, f"a buffer of {context!r}", f"a buffer of {value._context!r}",
                            _PEER_HINT if _other_device(value._context, context) else "")
    if value._count < count:
        raise ContractError(argument, f"at least {count} elements ({shape})" if shape else f"at least {count} elements",
                            f"{value._count} elements")
    return value


_PEER_HINT = ("a buffer of another device is accepted after pool.set_access(context) (pool buffers) or "
              "context.enable_peer_access(owner) (borrowed buffers)")


def peer_accessible(value: DeviceBuffer[Any], context: Context) -> bool:
    """Whether ``value``, a buffer of another context, may be used by work in ``context``: a buffer of
    a pool (``MemoryPool.allocate``) whose pool granted ``context``'s device access
    (``MemoryPool.set_access``), or a borrowed buffer (``from_dlpack``...) whose context ``context``
    enabled peer access to (``Context.enable_peer_access``). Both contexts must be open."""
    owner = value._context
    if getattr(owner, "_closed", True) or getattr(context, "_closed", True):
        return False
    if type(value) is DeviceBuffer:  # pool memory: only cuMemPoolSetAccess opens it to other devices
        pool = getattr(owner, "_pool", None)
        device = getattr(context, "_device", None)
        return pool is not None and device is not None and device.ordinal in pool._access
    return getattr(owner, "_handle", None) in getattr(context, "_peers", ())


def _other_device(owner: object, context: object) -> bool:
    a, b = getattr(owner, "_device", None), getattr(context, "_device", None)
    return a is not None and b is not None and a is not b


_EVENTS_KEPT = 8
"""A pinned buffer keeps at most about this many streams' events beyond those still pending."""


def free_address(ptr: int, stream: Stream, context: Context) -> None:
    """Free device memory at ``ptr`` as a dropped buffer is freed: stream-ordered on ``stream``
    (``cuMemFreeAsync``), synchronously (``cuMemFree``) when ``stream`` was closed, and not at all
    when the memory went with its context (``Context._memory_alive``: a context closed while another
    mircuda Context of the device still holds the primary context keeps its memory, freed synchronously).
    The synchronous free waits for the context first (``cuCtxSynchronize``): a destroyed stream's work still
    runs, and ``cuMemFree`` does not wait for it on pool memory.

    Raises:
        CudaError: the driver refused the free.
    """
    with _live_memory(context) as alive:
        if not alive:
            return
        if stream._handle:
            _cuda.call("cuMemFreeAsync", ptr, stream._cu)
        else:
            _cuda.call("cuCtxSynchronize")
            _cuda.call("cuMemFree", ptr)


@contextlib.contextmanager
def _live_memory(context: Context) -> Iterator[bool]:
    """Whether ``context``'s memory is still there to free (``Context._memory_alive``), with the context made
    current and its device's lock held while it is: no retain or release between the check and the free (a
    new primary context could hand out the same addresses)."""
    if not context._memory_alive():  # a context closed for good: no lock needed to say so
        yield False
        return
    with context._device._lock:
        alive = context._memory_alive()
        if alive:
            _cuda.make_current(context._handle)
        yield alive


_free_quietly = _cuda.finalizer(free_address)
"""The finalizer of a dropped DeviceBuffer (never raises)."""


class PinnedBuffer(Generic[T]):
    """``count`` elements of page-locked host memory (``cuMemHostAlloc``), the staging area for
    asynchronous copies.

    Copies through a pinned buffer are tracked: ``write_prefix`` and ``to_numpy`` first wait for the
    copies in flight that use this buffer, on every stream that copied it (a host synchronization on one
    event per stream, documented on each).
    """

    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _context: Context
    _info: DTypeInfo
    _count: int
    _nbytes: int
    _events: dict[int, Event]  # Stream._serial -> the event recorded after this buffer's last copy there
    _pending: set[int]  # the streams (serials) whose recorded copy wait() has not yet waited for
    _closed: bool
    _ptr: int
    _array: np.ndarray[Any, Any]
    _finalizer: weakref.finalize[..., PinnedBuffer[Any]] | None  # None for an empty buffer

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("allocate pinned buffers with Context.allocate_pinned(dtype, count)")

    @classmethod
    def _allocate(cls, context: Context, dtype: Any, count: int) -> PinnedBuffer[Any]:
        info = dtype_info(dtype)
        count = _check_count("count", count)
        nbytes = _check_size("count", count, info.itemsize, info.name)
        self = object.__new__(cls)
        self._context = context
        self._info = info
        self._count = count
        self._nbytes = nbytes
        self._events = {}
        self._pending = set()
        self._closed = False
        if nbytes:
            self._ptr = int(_cuda.call("cuMemHostAlloc", nbytes, 0))
            raw = (ctypes.c_uint8 * nbytes).from_address(self._ptr)
            self._array = np.frombuffer(memoryview(raw), dtype=np.uint8).view(info.dtype)
            # The finalizer shares the events dict, so it waits for every copy in flight before freeing.
            self._finalizer = weakref.finalize(self, _free_host_quietly, self._ptr, context, self._events)
            self._finalizer.atexit = False
        else:
            self._ptr = 0
            self._array = np.empty(0, dtype=info.dtype)
            self._finalizer = None
        return self

    @property
    def handle(self) -> int:
        """The host address as an int (0 for an empty buffer)."""
        self._check_open()
        return self._ptr

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element dtype (numpy; ml_dtypes for bf16, e4m3, e2m1)."""
        return self._info.dtype

    @property
    def scalar_type(self) -> type:
        """The element's numpy scalar type (``mc.f32`` ...)."""
        return self._info.scalar_type

    @property
    def nbytes(self) -> int:
        """Size in bytes: ``len(buffer) * dtype.itemsize``."""
        return self._nbytes

    @property
    def context(self) -> Context:
        return self._context

    def __len__(self) -> int:
        return self._count

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError("the pinned buffer was closed")

    def _event_for(self, stream: Stream) -> Event:
        """The event that tracks this buffer's copies on ``stream``, made on first use (the Stream copy
        methods ask for it before they enqueue). One event per stream: a copy on another stream must not
        replace the record of one still in flight on this one."""
        event = self._events.get(stream._serial)
        if event is None:
            if len(self._events) >= _EVENTS_KEPT:  # many short-lived streams: drop the events already waited for
                for key in [k for k in self._events if k not in self._pending]:
                    self._events.pop(key).close()
            event = self._events[stream._serial] = self._context.create_event(timing=False)
        return event

    def _mark_in_flight(self, stream: Stream) -> None:
        """Record that the copy just enqueued on ``stream`` uses this buffer (called by the Stream copy methods)."""
        self._event_for(stream).record(stream)
        self._pending.add(stream._serial)

    def wait(self) -> None:
        """Block the calling thread until every copy in flight that uses this buffer has completed, on
        every stream that copied it."""
        self._check_open()
        while self._pending:
            key = next(iter(self._pending))
            self._events[key].synchronize()
            self._pending.discard(key)

    def write_prefix(self, array: Any) -> None:
        """Copy a host array into the first ``len(array)`` elements (a host copy).

        Waits first for copies in flight that read this buffer, so staging a new input never races
        an earlier upload (a host synchronization on this buffer's event, only when one is pending).

        Raises:
            ContractError: ``array`` is not 1-D, has another dtype, or is longer than the buffer.
        """
        self._check_open()
        a = np.asarray(array)
        if a.dtype != self._info.dtype:
            raise ContractError("array", f"dtype {self._info.dtype.name}", f"dtype {a.dtype.name}")
        if a.ndim != 1:
            raise ContractError("array", "a 1-D array", f"an array of shape {a.shape}",
                                "flatten it first (array.ravel())")
        if len(a) > self._count:
            raise ContractError("array", f"at most {self._count} elements", f"{len(a)} elements")
        self.wait()
        self._array[: len(a)] = a

    def to_numpy(self, count: int | None = None) -> np.ndarray[Any, Any]:
        """Return a copy of the first ``count`` elements (all by default) as a numpy array.

        **Host synchronization point:** blocks until every copy in flight that uses this buffer has
        completed (e.g. a ``Stream.copy_to_host`` into it).

        Raises:
            ContractError: ``count`` is negative or larger than the buffer.
        """
        self._check_open()
        n = self._count if count is None else _check_count("count", count)
        if n > self._count:
            raise ContractError("count", f"at most {self._count}", repr(count))
        self.wait()
        return self._array[:n].copy()

    def close(self) -> None:
        """Wait for copies in flight that use the buffer, then free it (``cuMemFreeHost``). Idempotent."""
        if self._closed:
            return
        self.wait()
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()
        for event in self._events.values():
            event.close()

    def __enter__(self) -> PinnedBuffer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PinnedBuffer[{self._info.name}](len={self._count})"


@_cuda.finalizer
def _free_host_quietly(ptr: int, context: Context, events: dict[int, Event]) -> None:
    with _live_memory(context) as alive:
        if not alive:
            return
        for event in list(events.values()):
            _cuda.call_status("cuEventSynchronize", event._cu)
        _cuda.call_status("cuMemFreeHost", ptr)
