"""Contexts: a retained primary context and the resources created from it."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..errors import ClosedResourceError, ContractError

if TYPE_CHECKING:
    from ..memory import MemoryPool, PinnedBuffer
    from ._device import Device, DeviceInfo, Driver
    from ._event import Event
    from ._profiler import ProfilerRange
    from ._stream import Stream

__all__ = ["Context"]


class Context:
    """A retained primary context of one device.

    A context may be used from any Python thread: every call that needs it makes it current in the
    calling thread first. ``close()`` destroys the streams created from it and releases the retain;
    using the context, its streams or its buffers afterwards raises :class:`ClosedResourceError`.
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _driver: Driver
    _device: Device
    _cu: Any  # CUcontext
    _handle: int
    _closed: bool
    _streams: weakref.WeakSet[Stream]
    _pool: MemoryPool | None
    _peers: set[int]  # handles of the contexts whose allocations this one may access (enable_peer_access)
    _generation: int  # the device's retain generation when this context was made (see _memory_alive)
    _finalizer: weakref.finalize[..., Context]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("use Driver.create_context(device)")

    @classmethod
    def _retain(cls, driver: Driver, device: Device) -> Context:
        self = object.__new__(cls)
        with device._lock:
            cu = _cuda.call("cuDevicePrimaryCtxRetain", device._cu)
            device._retains += 1
            self._generation = device._generation
        self._driver = driver
        self._device = device
        self._cu = cu
        self._handle = int(cu)
        self._closed = False
        self._streams = weakref.WeakSet()
        self._pool = None
        self._peers = set()
        self._finalizer = weakref.finalize(self, _release, device)
        self._finalizer.atexit = False
        return self

    # -- identity ---------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The ``CUcontext`` as an int."""
        return self._handle

    @property
    def device(self) -> Device:
        return self._device

    @property
    def closed(self) -> bool:
        """True after ``close()``: the context and everything created from it are unusable."""
        return self._closed

    def device_info(self) -> DeviceInfo:
        """Static properties of this context's device."""
        return self._device.info()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedResourceError("the context was closed")

    def _make_current(self) -> None:
        self._check_open()
        _cuda.make_current(self._handle)

    def _memory_alive(self) -> bool:
        """Whether memory allocated in this context still exists and is this process's to free: the context is
        open, or it was closed while another mircuda Context kept the device's primary context retained ever
        since (the same ``CUcontext``: its allocations outlive this object's retain). Once every retain was
        released the primary context may have been destroyed with its memory, and a later one may reuse the
        addresses: then nothing is freed."""
        return not self._closed or (self._device._retains > 0 and self._device._generation == self._generation)

    # -- resources --------------------------------------------------------------------------
    def create_stream(self, priority: int | None = None) -> Stream:
        """Create a non-blocking stream (``CU_STREAM_NON_BLOCKING``).

        Args:
            priority: ``None`` for the default priority, or a value in the range of
                :meth:`stream_priority_range` (lower numbers run first).

        Raises:
            ContractError: ``priority`` is outside the device's range.
        """
        from ._stream import Stream

        self._make_current()
        if priority is None:
            prio = 0
        else:
            least, greatest = self.stream_priority_range()
            if type(priority) is not int or not greatest <= priority <= least:
                raise ContractError("priority", f"an int in [{greatest}, {least}] or None", repr(priority))
            prio = priority
        stream = Stream._create(self, prio)
        self._streams.add(stream)
        return stream

    def adopt_stream(self, stream: Any) -> Stream:
        """A :class:`Stream` over a stream another library created, for mircuda work that must order
        with that library's: a torch ``torch.cuda.Stream``, a CuPy ``cupy.cuda.Stream``, a cuda.core
        stream (anything with ``__cuda_stream__()``), or a raw ``CUstream`` handle (int).

        mircuda never destroys an adopted stream (``Stream.owned`` is False; ``close()`` only ends
        mircuda's use) and keeps ``stream`` alive while the returned Stream lives; the caller keeps
        the owner from destroying it while mircuda still enqueues work on it. A mircuda Stream of
        this context is returned as it is.

        Raises:
            ContractError: not a stream object or handle; handle 0 (the NULL stream), 1 (the legacy
                default stream) or 2 (the per-thread default stream), which mircuda refuses because
                they synchronize implicitly (torch's and CuPy's default streams are these); a stream
                of another context.
            CudaError: the handle is not a valid stream (``cuStreamGetCtx`` failed).
        """
        from ._foreign import adopt_stream

        self._make_current()
        return adopt_stream(self, stream)

    def stream_priority_range(self) -> tuple[int, int]:
        """``(least, greatest)`` stream priorities; the greatest priority is the smaller number."""
        self._make_current()
        least, greatest = _cuda.call("cuCtxGetStreamPriorityRange")
        return int(least), int(greatest)

    def create_event(self, timing: bool = False) -> Event:
        """Create an event. ``timing=False`` (the default) makes a cheaper dependency-only event."""
        from ._event import Event

        self._make_current()
        return Event._create(self, timing)

    def default_memory_pool(self) -> MemoryPool:
        """The device's default stream-ordered memory pool (``cuDeviceGetDefaultMemPool``).

        Raises:
            UnsupportedPlatform: the device does not support memory pools.
        """
        from ..errors import UnsupportedPlatform
        from ..memory import MemoryPool

        self._make_current()
        if self._pool is None:
            if not self.device_info().memory_pools_supported:
                raise UnsupportedPlatform(f"{self._device!r} does not support stream-ordered memory pools")
            self._pool = MemoryPool._wrap(self, _cuda.call("cuDeviceGetDefaultMemPool", self._device._cu))
        return self._pool

    def allocate_pinned(self, dtype: Any, count: int) -> PinnedBuffer[Any]:
        """Allocate ``count`` elements of page-locked host memory (``cuMemHostAlloc``)."""
        from ..memory import PinnedBuffer

        self._make_current()
        return PinnedBuffer._allocate(self, dtype, count)

    def start_profiler_range(self) -> ProfilerRange:
        """Start collecting profile data (``cuProfilerStart``) until the range is stopped."""
        from ._profiler import ProfilerRange

        self._make_current()
        return ProfilerRange._start(self)

    def synchronize(self) -> None:
        """Block the calling thread until all work in this context is done (``cuCtxSynchronize``)."""
        self._make_current()
        _cuda.call("cuCtxSynchronize")

    # -- peers (several devices) ---------------------------------------------------------------
    def _check_other(self, other: object) -> Context:
        if not isinstance(other, Context):
            raise ContractError("other", "a mircuda Context", type(other).__name__)
        if other._closed:
            raise ClosedResourceError("argument 'other': the context was closed")
        self._check_open()
        return other

    def can_access_peer(self, other: Context) -> bool:
        """Whether kernels in this context may read and write ``other``'s device memory directly
        (``cuDeviceCanAccessPeer``: an NVLink or PCIe peer-to-peer path). True for a context of this
        context's own device.

        Raises:
            ContractError: ``other`` is not a Context. ClosedResourceError: either context was closed.
        """
        other = self._check_other(other)
        if other._device is self._device:
            return True
        return _cuda.can_access_peer(self._device._cu, other._device._cu)

    def enable_peer_access(self, other: Context) -> None:
        """Let kernels and copies in this context access ``other``'s memory allocated with
        ``cuMemAlloc`` (``cuCtxEnablePeerAccess``; one direction: call it on both for both). Idempotent:
        a second call does nothing. Memory from ``other``'s stream-ordered pool needs
        ``other.default_memory_pool().set_access(self)`` instead (pools ignore this switch).

        Afterwards a :class:`BorrowedDeviceBuffer` of ``other`` (e.g. a torch tensor's memory) is
        accepted as a kernel argument or plan operand in this context.

        Raises:
            ContractError: ``other`` is not a Context, or is a context of this context's own device.
            ClosedResourceError: either context was closed.
            UnsupportedPlatform: the hardware has no peer path between the two devices
                (``cuDeviceCanAccessPeer`` says 0); nothing was changed.
            CudaError: the driver refused (``cuCtxEnablePeerAccess``, e.g. ``CUDA_ERROR_TOO_MANY_PEERS``).
        """
        from ..errors import UnsupportedPlatform

        other = self._check_other(other)
        if other._device is self._device:
            raise ContractError("other", f"a context of another device than {self._device!r}",
                                f"a context of {other._device!r}")
        if other._handle in self._peers:
            return
        if not _cuda.can_access_peer(self._device._cu, other._device._cu):
            raise UnsupportedPlatform(f"{self._device!r} cannot access {other._device!r}'s memory: "
                                      "cuDeviceCanAccessPeer reports no peer-to-peer path between them")
        self._make_current()
        _cuda.enable_peer_access(other._cu)
        self._peers.add(other._handle)

    def peer_access_enabled(self, other: Context) -> bool:
        """Whether :meth:`enable_peer_access` was called for ``other`` through this object."""
        return isinstance(other, Context) and other._handle in self._peers

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy this context's streams and release the primary-context retain. Idempotent."""
        if self._closed:
            return
        for stream in list(self._streams):
            stream.close()
        self._closed = True
        self._finalizer()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else hex(self._handle)
        return f"Context({self._device!r}, {state})"


@_cuda.finalizer
def _release(device: Device) -> None:
    with device._lock:
        device._retains -= 1
        if device._retains == 0:
            device._generation += 1
        _cuda.forget_current()
        _cuda.call_status("cuDevicePrimaryCtxRelease", device._cu)
