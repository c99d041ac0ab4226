"""A Numba External Memory Management (EMM) plugin backed by a mircuda memory pool.

Numba's EMM interface (``numba.cuda.BaseCUDAMemoryManager``, version 1) allocates with
``memalloc(size)`` and frees through a finalizer of the returned pointer: neither has a stream. The
plugin is therefore bound to one explicit mircuda stream, and the rule is:

    Numba allocations come from the pool, stream-ordered on the bound stream
    (``cuMemAllocFromPoolAsync``), and are freed stream-ordered on the bound stream
    (``cuMemFreeAsync``). Numba work that uses them must run on the bound stream (pass
    ``manager.numba_stream`` to ``device_array``, ``to_device``, ``copy_to_host`` and launches), or be
    ordered before the bound stream's later work (an event) before the array is dropped.

Frees issued by Python finalizers (a Numba array going out of scope, at any point of any thread) never
call the driver: they queue the address, and the queue is drained at well-defined points on the
calling thread -- the plugin's next allocation, :meth:`PoolMemoryManager.flush` and ``close()``. A
drained free is enqueued after every use enqueued on the bound stream before the array was dropped,
so it cannot race them; while the bound stream is being captured into a graph, or inside Numba's
``defer_cleanup()``, the queue waits. Temporary device copies Numba makes of host arrays passed to
a launch do not go through the plugin (numba-cuda allocates those itself).
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from .. import _cuda
from ..errors import ClosedResourceError, ContractError, UnsupportedPlatform
from ..memory import MemoryPool
from ..runtime import Stream
from . import _compat

__all__ = ["PoolMemoryManager", "use_memory_pool"]

_install_lock = threading.Lock()
_active: list[PoolMemoryManager] = []


class PoolMemoryManager:
    """The installed EMM plugin: Numba's device allocations come from ``pool`` on ``stream``.

    Obtain with :func:`use_memory_pool`; ``close()`` (or leaving the ``with`` block) drains the
    queued frees and puts back the memory manager Numba had before. Allocations still alive then
    stay valid; their frees are enqueued on the bound stream when they are dropped.
    """

    def __init__(self, pool: MemoryPool, stream: Stream) -> None:
        self._pool = pool
        self._stream = stream
        self._context = pool.context
        self._pending: collections.deque[int] = collections.deque()
        self._deferred = 0
        self._closed = False
        self._allocations = 0
        self._previous_class: Any = None
        self._swapped: list[tuple[Any, Any]] = []
        self._plugin_class = _plugin_class(self)

    # -- what the plugin does for Numba -------------------------------------------------------
    def _allocate(self, numba_context: Any, size: int) -> Any:
        if self._closed:
            raise ClosedResourceError("the PoolMemoryManager was closed")
        device = getattr(getattr(numba_context, "device", None), "id", self._context.device.ordinal)
        if device != self._context.device.ordinal:
            raise ContractError("device", f"device {self._context.device.ordinal} (the pool's)", f"device {device}")
        self.flush()
        if size == 0:
            return _compat.memory_pointer(numba_context, 0, 0)
        address = self._pool.allocate_bytes(self._stream, size)
        self._allocations += 1
        return _compat.memory_pointer(numba_context, address, size, finalizer=_Release(self, address))

    def _release(self, address: int) -> None:
        # Called by a Python finalizer: never touches the driver while the manager is installed.
        if self._closed:
            _free_now(self, address)
        else:
            self._pending.append(address)

    # -- public ------------------------------------------------------------------------------
    @property
    def pool(self) -> MemoryPool:
        return self._pool

    @property
    def stream(self) -> Stream:
        """The bound stream: every allocation and free is ordered on it."""
        return self._stream

    @property
    def numba_stream(self) -> Any:
        """The bound stream as Numba's stream object (for ``device_array``, copies and launches)."""
        from ._interop import numba_stream

        return numba_stream(self._stream)

    @property
    def pending_frees(self) -> int:
        """Frees queued by finalizers and not yet enqueued on the bound stream."""
        return len(self._pending)

    @property
    def allocations(self) -> int:
        """Device allocations made through this plugin so far."""
        return self._allocations

    def flush(self) -> None:
        """Enqueue the queued frees on the bound stream (``cuMemFreeAsync``), from the calling thread.

        Does nothing inside Numba's ``defer_cleanup()`` or while the bound stream is being captured.
        """
        if self._deferred or not self._pending:
            return
        if self._context.closed:
            self._pending.clear()  # the context's memory went with it
            return
        if self._stream.handle:
            self._stream._own()
            status = _cuda.call("cuStreamIsCapturing", self._stream._cu)
            if int(status) != 0:  # CU_STREAM_CAPTURE_STATUS_NONE
                return
        while True:
            try:
                address = self._pending.popleft()
            except IndexError:  # drained (perhaps by another thread)
                break
            _free_now(self, address)

    @contextlib.contextmanager
    def _defer(self) -> Iterator[None]:
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
        self.flush()

    def close(self) -> None:
        """Drain the queued frees and put back Numba's previous memory manager. Idempotent."""
        if self._closed:
            return
        with _install_lock:
            self.flush()
            self._closed = True
            _compat.restore_memory_manager_class(self._previous_class)
            swapped = {id(ctx): previous for ctx, previous in self._swapped}
            for numba_context in _compat.existing_numba_contexts():
                if isinstance(numba_context.memory_manager, self._plugin_class):
                    previous = swapped.get(id(numba_context))
                    if previous is None:  # a Numba context created while this plugin was installed
                        cls = self._previous_class or _compat.default_memory_manager_class()
                        previous = cls(context=numba_context)
                        previous.initialize()
                    numba_context.memory_manager = previous
            self._swapped.clear()
            if self in _active:
                _active.remove(self)

    def __enter__(self) -> PoolMemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._allocations} allocations, {len(self._pending)} pending frees"
        return f"PoolMemoryManager({self._pool!r}, {self._stream!r}, {state})"


class _Release:
    """The finalizer of one allocation: queue its address (never raises)."""

    __slots__ = ("manager", "address")

    def __init__(self, manager: PoolMemoryManager, address: int) -> None:
        self.manager = manager
        self.address = address

    def __call__(self) -> None:
        try:
            self.manager._release(self.address)
        except Exception:
            pass


@_cuda.finalizer
def _free_now(manager: PoolMemoryManager, address: int) -> None:
    # As a dropped DeviceBuffer is freed: on the bound stream (synchronously once it was closed), never
    # raising (a failed free must not stop the drain of the others), and held back while a capture is open.
    manager._pool.free_bytes(manager._stream, address)


def _plugin_class(manager: PoolMemoryManager) -> type:
    base = _compat.HostOnlyCUDAMemoryManager

    class MircudaPoolMemoryManager(base):  # type: ignore[misc, valid-type]
        """Numba EMM plugin (interface version 1): device memory from a mircuda pool."""

        def initialize(self) -> None:
            pass

        def memalloc(self, size: int) -> Any:
            return manager._allocate(self.context, size)

        def get_memory_info(self) -> Any:
            from numba.cuda.cudadrv.driver import MemoryInfo

            manager._stream._own()
            free, total = _cuda.call("cuMemGetInfo")
            return MemoryInfo(free=int(free), total=int(total))

        def get_ipc_handle(self, memory: Any) -> Any:
            raise UnsupportedPlatform("IPC handles of mircuda pool allocations are not supported")

        def reset(self) -> None:
            manager.flush()
            super().reset()

        @contextlib.contextmanager
        def defer_cleanup(self) -> Iterator[None]:
            with super().defer_cleanup(), manager._defer():
                yield

        @property
        def interface_version(self) -> int:
            return 1

    return MircudaPoolMemoryManager


def use_memory_pool(pool: MemoryPool, stream: Stream) -> PoolMemoryManager:
    """Make Numba allocate device memory (``cuda.device_array``, ``to_device``...) from ``pool``,
    stream-ordered on ``stream`` -- the rule is in this module's documentation.

    Applies to Numba's context for the pool's device, whether it exists already or is created later.
    One plugin at a time: close the previous one first.

    Raises:
        ContractError: ``pool`` or ``stream`` has the wrong type or context, or another
            PoolMemoryManager is installed.
        ClosedResourceError: the stream was closed.
    """
    if not isinstance(pool, MemoryPool):
        raise ContractError("pool", "a mircuda MemoryPool", type(pool).__name__)
    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
    stream._check_usable("stream", pool.context)
    with _install_lock:
        if _active:
            raise ContractError("pool", "no other PoolMemoryManager installed", repr(_active[0]),
                                "close() the installed one first")
        manager = PoolMemoryManager(pool, stream)
        manager._previous_class = _compat.current_memory_manager_class()
        _compat.set_memory_manager(manager._plugin_class)
        for numba_context in _compat.existing_numba_contexts():
            if numba_context.device.id == pool.context.device.ordinal:
                replacement = manager._plugin_class(context=numba_context)
                replacement.initialize()
                manager._swapped.append((numba_context, numba_context.memory_manager))
                numba_context.memory_manager = replacement
        _active.append(manager)
    return manager
