"""Symmetric memory: device buffers from ``ncclMemAlloc`` registered as NCCL windows
(``ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)``), for NCCL's symmetric kernels.

NCCL >= 2.27 runs small collectives with *symmetric kernels* when the send and receive buffers of
every rank lie in symmetric windows of the communicator: each rank loads and stores its peers'
windows directly over NVLink (NCCL's "LSA", load/store accessible, kernels), with no proxy and no
staging through NCCL's own buffers, which makes an 8-64 KiB all-reduce a few microseconds. NCCL
picks the kernel itself at each call; nothing here chooses it.

NVLink multicast stays off (``NCCL_NVLS_ENABLE=0``, set by :mod:`mircuda.nccl._library`): NCCL then
never builds multicast objects for windows and uses the LSA variants of its symmetric kernels; the
multimem (NVLS) variants are simply not candidates. mircuda itself never calls ``cuMulticastCreate``.

Lifetimes. ``ncclMemAlloc`` and ``ncclMemFree`` are not stream-ordered; window registration is
collective (every rank registers, same size), deregistration is local. A buffer is released —
its window deregistered (``ncclCommWindowDeregister``), then its memory freed (``ncclMemFree``) — by
:meth:`SymmetricBuffer.free`, when it is dropped (finalizer, never raises), or when its communicator is
closed or aborted, which releases every buffer it still has *before* the communicator is destroyed
(a window must be deregistered while its communicator exists). Each release first waits for the
device (``cuCtxSynchronize``): the memory may not be unmapped under running work.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..dtypes import dtype_info
from ..errors import ClosedResourceError, ContractError
from ..memory import BorrowedDeviceBuffer
from ._library import bindings, checked

if TYPE_CHECKING:
    from ..runtime import Stream
    from ._communicator import Communicator

__all__ = ["SymmetricBuffer", "WIN_COLL_SYMMETRIC", "allocate_symmetric"]

WIN_COLL_SYMMETRIC = 0x01
"""``NCCL_WIN_COLL_SYMMETRIC`` (nccl.h, NCCL >= 2.27): the window takes part in symmetric collectives."""


class SymmetricBuffer(BorrowedDeviceBuffer):
    """A :class:`~mircuda.DeviceBuffer` whose memory comes from ``ncclMemAlloc`` and is registered as a
    symmetric window on one :class:`~mircuda.nccl.Communicator` (from
    :meth:`Communicator.allocate_symmetric`). Kernels, plans and stream copies take it like any buffer
    of its dtype and context; NCCL collectives whose send and receive buffers are all such windows
    (on every rank) may run NCCL's symmetric kernels.

    ``free(stream)`` synchronizes the context (the memory is not stream-ordered), deregisters the
    window and frees the memory; later uses raise UseAfterFree. Closing the communicator releases it
    the same way.
    """

    __slots__ = ()

    @property
    def communicator(self) -> Communicator:
        """The communicator whose window holds this buffer.

        Raises:
            UseAfterFree: the buffer was released."""
        self._live()
        return self._owner.communicator  # type: ignore[attr-defined]

    @property
    def registered(self) -> bool:
        """Whether NCCL holds a window for this buffer: False before the end of the group that
        registers it, and where the communicator has no symmetric support (NCCL then registers
        nothing: ranks without direct CUDA P2P between them, several nodes, ``NCCL_WIN_ENABLE=0`` or
        ``NCCL_CUMEM_ENABLE=0``); collectives on it still work, without the symmetric kernels."""
        self._live()
        window = getattr(self._owner, "window", None)
        return window is not None and bool(window)

    def free(self, stream: Stream) -> None:
        """Wait for the device, deregister the window and free the memory (``cuCtxSynchronize``,
        ``ncclCommWindowDeregister``, ``ncclMemFree``). ``stream`` is checked only (this memory is not
        stream-ordered).

        Raises:
            UseAfterFree: already released. ContractError: ``stream`` is not a stream of the buffer's
                context; a live graph holds the buffer. NcclError: NCCL refused (the buffer is
                released all the same).
        """
        from ..runtime import Stream

        self._live()
        if not isinstance(stream, Stream):
            raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
        stream._check_usable("stream", self._context)
        if self._holds:
            raise ContractError("buffer", "a buffer that no live graph holds",
                                f"a buffer held by {self._holds} live graph(s)",
                                "destroy the graph (Graph.close() or into_resources()) first")
        memory = self._owner
        assert isinstance(memory, _Memory)
        memory.release()

    def __repr__(self) -> str:
        state = "freed" if self._freed else hex(self._ptr)
        return f"SymmetricBuffer[{self._info.name}](len={self._count}, {state})"


class _Memory:
    """One ``ncclMemAlloc`` allocation and its window; the owner of a :class:`SymmetricBuffer`."""

    __slots__ = ("communicator", "ptr", "nbytes", "window", "buffer", "finalizer")

    def __init__(self, communicator: Communicator, ptr: int, nbytes: int) -> None:
        self.communicator = communicator
        self.ptr = ptr
        self.nbytes = nbytes
        self.window: Any = None  # nccl.bindings.nccl.Window once registered (filled at ncclGroupEnd in a group)
        self.buffer: weakref.ref[SymmetricBuffer] | None = None
        self.finalizer: weakref.finalize[..., SymmetricBuffer] | None = None

    def register(self) -> None:
        """Collective (every rank, same size): ``ncclCommWindowRegister`` with ``NCCL_WIN_COLL_SYMMETRIC``."""
        comm = self.communicator
        _cuda.make_current(comm._context.handle, force=True)
        self.window = bindings.comm_window_register(comm._comm, self.ptr, self.nbytes, WIN_COLL_SYMMETRIC)

    def release(self, deregister: bool = True) -> None:
        """Deregister and free, once; the buffer reads as freed afterwards.

        Raises:
            NcclError, CudaError: a call failed (the memory is released as far as it could be)."""
        ptr, self.ptr = self.ptr, 0
        comm = self.communicator
        comm._symmetric.pop(id(self), None)
        buf = self.buffer() if self.buffer is not None else None
        if buf is not None:
            buf._freed = True
            buf._ptr = 0
            buf._owner = None
        if self.finalizer is not None:
            self.finalizer.detach()
        if not ptr or comm._context._closed:
            return  # the context's memory went with it
        window, self.window = self.window, None
        _cuda.make_current(comm._context.handle, force=True)
        try:
            _cuda.call("cuCtxSynchronize")
            if deregister and window is not None and window and not comm._closed:
                checked("ncclCommWindowDeregister", bindings.comm_window_deregister, comm._comm, window)
        finally:
            _cuda.make_current(comm._context.handle, force=True)  # ncclMemFree finds the device by pointer
            checked("ncclMemFree", bindings.mem_free, ptr)


@_cuda.finalizer
def _release_quietly(memory: _Memory) -> None:
    memory.release()


def allocate_symmetric(communicator: Communicator, dtype: Any, stream: Stream, count: int,
                       issue: Any) -> SymmetricBuffer:
    """:meth:`Communicator.allocate_symmetric`'s body (``issue`` is the group-aware call issuer)."""
    from ..runtime import Stream

    if communicator._closed:
        raise ClosedResourceError("allocate_symmetric: the communicator was closed")
    info = dtype_info(dtype)
    if type(count) is not int or count < 1:
        raise ContractError("count", "a positive int (elements)", repr(count), "the call: ncclMemAlloc")
    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", type(stream).__name__, "the call: ncclMemAlloc")
    context = communicator._context
    stream._check_usable("stream", context)
    nbytes = count * info.itemsize
    _cuda.make_current(context.handle, force=True)  # ncclMemAlloc allocates on the runtime's current device
    ptr = int(checked("ncclMemAlloc", bindings.mem_alloc, nbytes))
    memory = _Memory(communicator, ptr, nbytes)
    communicator._symmetric[id(memory)] = memory
    try:
        buf = SymmetricBuffer._adopt(context, stream, info, count, ptr)
        if buf._finalizer is not None:  # released through the _Memory, never by cuMemFree
            buf._finalizer.detach()
            buf._finalizer = None
        buf._owner = memory
        buf._readonly = False
        memory.buffer = weakref.ref(buf)
        memory.finalizer = weakref.finalize(buf, _release_quietly, memory)
        memory.finalizer.atexit = False
        issue("ncclCommWindowRegister", memory.register)
    except BaseException:
        try:
            memory.release(deregister=False)
        except Exception:
            pass  # the first error is the one to report
        raise
    return buf
