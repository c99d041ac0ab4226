"""Stream-ordered memory pools (``cuMemAllocFromPoolAsync``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..dtypes import dtype_info
from ..errors import ContractError
from ._buffer import DeviceBuffer, _check_bytes, _check_count, _check_size, _require_stream, free_address

if TYPE_CHECKING:
    from ..runtime import Context, Stream

__all__ = ["MemoryPool"]

_ACCESS: dict[int, set[int]] = {}
"""Ordinals of the devices granted access, by ``CUmemoryPool`` handle: shared by every MemoryPool object
of one driver pool (each Context object of a device wraps the device's default pool anew)."""


class MemoryPool:
    """A CUDA memory pool. Obtain the device's default pool with :meth:`Context.default_memory_pool`.

    Allocations are stream-ordered: memory allocated on a stream may be used by work enqueued on that
    stream after the allocation (and on other streams once ordered after it with an event).
    """

    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _context: Context
    _cu: Any  # CUmemoryPool
    _handle: int
    _access: set[int]  # ordinals of the other devices granted read-write access (set_access)

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("obtain the pool with Context.default_memory_pool()")

    @classmethod
    def _wrap(cls, context: Context, cu_pool: Any) -> MemoryPool:
        self = object.__new__(cls)
        self._context = context
        self._cu = cu_pool
        self._handle = int(cu_pool)
        self._access = _ACCESS.setdefault(self._handle, set())
        return self

    @property
    def handle(self) -> int:
        """The ``CUmemoryPool`` as an int."""
        return self._handle

    @property
    def context(self) -> Context:
        return self._context

    def _attribute(self, name: str) -> int:
        drv = _cuda.driver()
        return int(_cuda.call("cuMemPoolGetAttribute", self._cu, getattr(drv.CUmemPool_attribute, name)))

    @property
    def release_threshold(self) -> int:
        """Bytes of freed memory the pool keeps reserved at a synchronization instead of returning it
        to the OS (``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``; the driver's default is 0)."""
        self._context._make_current()
        return self._attribute("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD")

    @release_threshold.setter
    def release_threshold(self, nbytes: int) -> None:
        _check_bytes("release_threshold", nbytes)
        self._context._make_current()
        drv = _cuda.driver()
        _cuda.call("cuMemPoolSetAttribute", self._cu,
                   drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, drv.cuuint64_t(nbytes))

    @property
    def reserved_bytes(self) -> int:
        """Bytes the pool currently holds from the OS (``CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT``)."""
        self._context._make_current()
        return self._attribute("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT")

    @property
    def used_bytes(self) -> int:
        """Bytes currently allocated from the pool (``CU_MEMPOOL_ATTR_USED_MEM_CURRENT``)."""
        self._context._make_current()
        return self._attribute("CU_MEMPOOL_ATTR_USED_MEM_CURRENT")

    def allocate(self, dtype: Any, stream: Stream, count: int) -> DeviceBuffer[Any]:
        """Allocate ``count`` elements of ``dtype`` on ``stream`` (contents undefined).

        A zero-count allocation is a valid, empty buffer (no device memory is reserved for it).

        Raises:
            ContractError: bad dtype, count or stream (another context's, closed).
            CudaError: the driver could not allocate (e.g. ``CUDA_ERROR_OUT_OF_MEMORY``).
        """
        info = dtype_info(dtype)
        count = _check_count("count", count)
        nbytes = _check_size("count", count, info.itemsize, info.name)
        _require_stream(stream)
        stream._check_usable("stream", self._context)
        ptr = 0
        if nbytes:
            ptr = int(_cuda.call("cuMemAllocFromPoolAsync", nbytes, self._cu, stream._cu))
        return DeviceBuffer._adopt(self._context, stream, info, count, ptr)

    def allocate_zeroed(self, dtype: Any, stream: Stream, count: int) -> DeviceBuffer[Any]:
        """Like :meth:`allocate`, then zero every byte on ``stream`` (``cuMemsetD8Async``)."""
        buf = self.allocate(dtype, stream, count)
        if buf.nbytes:
            try:
                _cuda.call("cuMemsetD8Async", buf._ptr, 0, buf.nbytes, stream._cu)
            except BaseException:
                buf.free(stream)
                raise
        return buf

    def allocate_bytes(self, stream: Stream, nbytes: int) -> int:
        """Allocate ``nbytes`` of untyped device memory on ``stream`` (``cuMemAllocFromPoolAsync``) and
        return its device address (0 for 0 bytes), for allocators of other libraries (Numba's memory
        manager plugin). The caller owns the address and releases it with :meth:`free_bytes`; nothing
        frees it otherwise. Prefer :meth:`allocate`, whose buffers are typed, checked and freed when
        dropped.

        Raises:
            ContractError: ``nbytes`` is not a non-negative int, or ``stream`` is not a stream of this
                pool's context.
            ClosedResourceError: the stream was closed.
            CudaError: the driver could not allocate (e.g. ``CUDA_ERROR_OUT_OF_MEMORY``).
        """
        _check_bytes("nbytes", nbytes)
        _require_stream(stream)
        stream._check_usable("stream", self._context)
        if not nbytes:
            return 0
        return int(_cuda.call("cuMemAllocFromPoolAsync", nbytes, self._cu, stream._cu))

    def free_bytes(self, stream: Stream, address: int) -> None:
        """Release an address :meth:`allocate_bytes` returned, as a dropped buffer is released:
        stream-ordered on ``stream`` (``cuMemFreeAsync``; work enqueued on it before may still use the
        memory), synchronously (``cuCtxSynchronize``, then ``cuMemFree``) when ``stream`` was closed, and not
        at all once the memory went with the context (closed, with no other mircuda Context of the device
        holding the primary context since). Address 0 is ignored. The caller orders uses on
        other streams before the free, and frees each address once.

        Raises:
            ContractError: ``address`` is not a non-negative int, or ``stream`` is not a stream of this
                pool's context.
            CudaError: the driver refused the free.
        """
        if type(address) is not int or address < 0:
            raise ContractError("address", "a device address (a non-negative int)", repr(address))
        _require_stream(stream)
        if stream._context is not self._context:
            raise ContractError("stream", f"a stream of {self._context!r}", f"a stream of {stream._context!r}")
        if address:
            free_address(address, stream, self._context)

    def set_access(self, context: Context, read_write: bool = True) -> None:
        """Let kernels and copies in ``context`` (a context of another device) read and write this
        pool's allocations (``cuMemPoolSetAccess`` with ``CU_MEM_ACCESS_FLAGS_PROT_READWRITE``), or take
        that access away with ``read_write=False`` (``CU_MEM_ACCESS_FLAGS_PROT_NONE``; pools have no
        read-only mode). Covers the pool's existing and future allocations. Idempotent.

        Afterwards a :class:`DeviceBuffer` of this pool is accepted as a kernel argument, plan operand
        or copy operand in ``context`` (mircuda otherwise refuses a buffer of another context by
        name). Order the work: the buffer's writer and ``context``'s readers run on different streams,
        so use an event (``Stream.wait_event`` takes another device's event).

        Raises:
            ContractError: ``context`` is not a Context, is this pool's own context or device (it always
                has access), or ``read_write`` is not a bool.
            ClosedResourceError: either context was closed.
            UnsupportedPlatform: the hardware has no peer path from ``context``'s device to this pool's
                (``cuDeviceCanAccessPeer`` says 0); nothing was changed.
            CudaError: the driver refused (``cuMemPoolSetAccess``).
        """
        from ..errors import UnsupportedPlatform
        from ..runtime import Context

        if not isinstance(context, Context):
            raise ContractError("context", "a mircuda Context", type(context).__name__)
        if type(read_write) is not bool:
            raise ContractError("read_write", "a bool", repr(read_write))
        owner = self._context
        owner._check_open()
        context._check_open()
        if context._device is owner._device:
            raise ContractError("context", f"a context of another device than the pool's ({owner._device!r})",
                                f"a context of {context._device!r}", "a device always has access to its own pool")
        ordinal = context._device.ordinal
        if read_write and not _cuda.can_access_peer(context._device._cu, owner._device._cu):
            raise UnsupportedPlatform(f"{context._device!r} cannot access {owner._device!r}'s memory: "
                                      "cuDeviceCanAccessPeer reports no peer-to-peer path between them")
        owner._make_current()
        _cuda.pool_set_access(self._cu, ordinal, read_write)
        if read_write:
            self._access.add(ordinal)
        else:
            self._access.discard(ordinal)

    def access_granted(self, context: Context) -> bool:
        """Whether kernels in ``context`` may access this pool's allocations: its own device always,
        another device after :meth:`set_access` (read from the driver, ``cuMemPoolGetAccess``)."""
        from ..runtime import Context

        if not isinstance(context, Context):
            raise ContractError("context", "a mircuda Context", type(context).__name__)
        if context._device is self._context._device:
            return True
        self._context._make_current()
        return _cuda.pool_get_access(self._cu, context._device.ordinal) != 0

    def trim_to(self, keep_bytes: int) -> None:
        """Return unused reserved memory to the OS, keeping at most ``keep_bytes`` (``cuMemPoolTrimTo``)."""
        _check_bytes("keep_bytes", keep_bytes)
        self._context._make_current()
        _cuda.call("cuMemPoolTrimTo", self._cu, keep_bytes)

    def __repr__(self) -> str:
        return f"MemoryPool({hex(self._handle)}, context={self._context!r})"
