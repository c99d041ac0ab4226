"""Communicator: NCCL collectives and point-to-point transfers on mircuda streams and device buffers."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _cuda, dtypes
from ..dtypes import DTypeInfo
from ..errors import ClosedResourceError, ContractError
from ..memory import DeviceBuffer, check_device_buffer
from ..runtime import Stream
from ._library import UNIQUE_ID_BYTES, bindings, checked
from ._symmetric import SymmetricBuffer, allocate_symmetric

if TYPE_CHECKING:
    from ..runtime import Context
    from ._symmetric import _Memory

__all__ = ["Communicator", "REDUCTIONS", "allocate_symmetric_all", "close_all", "group", "nccl_type"]

# ncclDataType_t (nccl.h) by mircuda dtype name. Types NCCL lacks move as bytes (ncclUint8) in the
# collectives that only copy; the reductions refuse them.
_NCCL_TYPES: dict[str, int] = {
    "i8": 0, "u8": 1, "i32": 2, "u32": 3, "i64": 4, "u64": 5, "f16": 6, "f32": 7, "f64": 8, "bf16": 9,
    "e4m3": 10,  # ncclFloat8e4m3 (NCCL >= 2.24; reductions need compute capability >= 9.0)
}
_UINT8 = 1
_FAST_REDUCE: dict[type, int] = {
    getattr(dtypes, name): code for name, code in _NCCL_TYPES.items() if name != "e4m3"}
"""ncclDataType_t by scalar type for the fast paths (FP8 takes the checked path: its device check)."""
_FP8_REDUCTION_CC = (9, 0)

REDUCTIONS: dict[str, int] = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
"""``op`` names of the reductions and their ``ncclRedOp_t`` (nccl.h). ``avg`` divides the sum by the
number of ranks."""


def nccl_type(info: DTypeInfo, reduce: bool) -> tuple[int, int]:
    """``(ncclDataType_t, elements per mircuda element)`` for buffers of ``info``: NCCL's own type, or
    bytes (``ncclUint8``, ``itemsize`` per element) where NCCL has none and nothing is reduced (FP8 too
    then: the same bytes, and no FP8 type check on devices before sm_90).

    Raises:
        ContractError: a reduction over a type NCCL cannot reduce (named ``dtype``).
    """
    code = _NCCL_TYPES.get(info.name)
    if code is not None and (reduce or info.name != "e4m3"):
        return code, 1
    if reduce:
        names = ", ".join(_NCCL_TYPES)
        raise ContractError("dtype", f"a type NCCL reduces ({names})", info.name,
                            "only all_gather, broadcast and send/recv move other types (as bytes)")
    return _UINT8, info.itemsize


# ---------------------------------------------------------------------------------------------
# Groups. Inside `with group():` the calls are checked at once and enqueued together at the end,
# between ncclGroupStart and ncclGroupEnd, as NCCL itself does (a group's operations start at
# ncclGroupEnd). Deferring them here means that an error raised inside the block (a refused
# argument, anything else) leaves nothing enqueued: the pending calls are dropped.

_tls = threading.local()


class _Group:
    """What :func:`group` returns; its state is the calling thread's (``_tls.pending``: the deferred
    calls as ``(name, binding, args)``; ``_tls.marks``: where each open block's calls begin)."""

    __slots__ = ()

    def __enter__(self) -> None:
        marks = getattr(_tls, "marks", None)
        if not marks:
            _tls.pending = []
            _tls.marks = marks = []
        marks.append(len(_tls.pending))

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        marks = _tls.marks
        start = marks.pop()
        if exc_type is not None:
            del _tls.pending[start:]  # this block's calls go with its error
        if marks:
            return  # an inner block: the outermost one issues
        calls = _tls.pending
        _tls.pending = None
        if not calls:
            return
        checked("ncclGroupStart", bindings.group_start)
        try:
            for name, fn, args in calls:
                checked(name, fn, *args)
        finally:
            checked("ncclGroupEnd", bindings.group_end)


_GROUP = _Group()


def group() -> _Group:
    """Batch NCCL calls (``ncclGroupStart`` / ``ncclGroupEnd``) in a ``with`` block: required when one
    thread drives the ranks of several devices (a communicator set from :meth:`Communicator.init_all`),
    and how send/recv pairs and several collectives are fused.

    Each call inside the block is checked when it is made and enqueued at the end of the outermost
    block, in order, inside one NCCL group. When a block raises, its calls are dropped (nothing of an
    outermost block that raises is enqueued). Groups nest. Usable inside ``Stream.capture``: the
    operations become graph nodes of each capturing stream.

    Raises (at the end of the block):
        NcclError: ``ncclGroupEnd`` (or a call in the group) failed.
    """
    return _GROUP


def _issue(name: str, fn: Callable[..., Any], *args: Any) -> None:
    pending = getattr(_tls, "pending", None)
    if pending is None:
        checked(name, fn, *args)
    else:
        pending.append((name, fn, args))


class Communicator:
    """One rank of an NCCL communicator, bound to a mircuda context (its device).

    Make one per process with ``Communicator(rank, size, unique_id, context)`` (every rank passes
    the same ``size`` and the 128-byte :func:`unique_id` rank 0 made; NCCL's
    ``ncclCommInitRank``), or one per device of this process with :meth:`init_all`
    (``ncclCommInitAll``).

    Every operation takes an explicit :class:`Stream` of the communicator's context and mircuda
    :class:`DeviceBuffer` s of its device; arguments are checked (stream, buffers, dtypes, counts,
    ranks) before anything is enqueued, and refusals are :class:`ContractError` s naming the
    argument and the NCCL call. Operations are asynchronous, like kernels: order other streams
    after them with events. They may be captured into CUDA graphs (``Stream.capture``), NCCL's
    documented limits apply: every rank captures the same sequence and replays it in the same
    order; the buffers stay fixed.

    Args:
        rank: this process's rank in ``[0, size)``. size: the number of ranks (>= 1).
        unique_id: the 128 bytes of :func:`unique_id`, the same on every rank.
        context: the context (device) this rank runs on; made current for NCCL's initialization.

    Raises:
        ContractError: a bad rank, size, unique id or context.
        NcclError: ``ncclCommInitRank`` failed (it waits until all ``size`` ranks have called it).
    """

    _context: Context
    _comm: Any  # nccl.bindings.nccl.Comm
    _rank: int
    _size: int
    _closed: bool
    _finalizer: weakref.finalize[..., Communicator]
    _symmetric: dict[int, _Memory]  # live symmetric windows, released before the communicator goes

    def __init__(self, rank: int, size: int, unique_id: bytes, context: Context) -> None:
        from ..runtime import Context

        if type(size) is not int or size < 1:
            raise ContractError("size", "a positive int (ranks)", repr(size))
        if type(rank) is not int or not 0 <= rank < size:
            raise ContractError("rank", f"an int in [0, {size - 1}]", repr(rank))
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != UNIQUE_ID_BYTES:
            received = f"{len(unique_id)} bytes" if isinstance(unique_id, (bytes, bytearray)) else repr(unique_id)[:80]
            raise ContractError("unique_id", f"the {UNIQUE_ID_BYTES} bytes of mircuda.nccl.unique_id()", received)
        if not isinstance(context, Context):
            raise ContractError("context", "a mircuda Context", type(context).__name__)
        context._check_open()
        _cuda.make_current(context.handle, force=True)  # NCCL takes the runtime's current device
        uid = bindings.UniqueId.from_buffer(bytes(unique_id))
        comm = checked("ncclCommInitRank", bindings.comm_init_rank, size, uid, rank)
        self._setup(context, comm, rank, size)

    def _setup(self, context: Context, comm: Any, rank: int, size: int) -> None:
        self._context = context
        self._comm = comm
        self._rank = rank
        self._size = size
        self._closed = False
        self._symmetric = {}
        # A communicator dropped without close() is aborted (ncclCommAbort: local, never waits for
        # the other ranks as ncclCommDestroy may).
        self._finalizer = weakref.finalize(self, _abort, comm, context)
        self._finalizer.atexit = False

    @classmethod
    def init_all(cls, contexts: Sequence[Context]) -> list[Communicator]:
        """One communicator per context, rank ``i`` on ``contexts[i]``, in this process
        (``ncclCommInitAll``). Drive them from one thread inside :func:`group` (NCCL's rule for one
        thread and several devices: without a group a call may wait for the other ranks forever),
        or each from its own thread. Close them with :func:`close_all`.

        Raises:
            ContractError: ``contexts`` is empty, holds something else than open Contexts, or two
                contexts of one device.
            NcclError: ``ncclCommInitAll`` failed.
        """
        from ..runtime import Context

        if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence) or not contexts:
            raise ContractError("contexts", "a non-empty sequence of Contexts, one per device", repr(contexts)[:80])
        ordinals: list[int] = []
        for i, context in enumerate(contexts):
            if not isinstance(context, Context):
                raise ContractError(f"contexts[{i}]", "a mircuda Context", type(context).__name__)
            context._check_open()
            if context.device.ordinal in ordinals:
                raise ContractError(f"contexts[{i}]", "a context of a device not listed before",
                                    f"a second context of {context.device!r}")
            ordinals.append(context.device.ordinal)
        comms = checked("ncclCommInitAll", bindings.comm_init_all, len(ordinals), ordinals)
        out = []
        for rank, (context, comm) in enumerate(zip(contexts, comms)):
            self = object.__new__(cls)
            self._setup(context, comm, rank, len(ordinals))
            out.append(self)
        return out

    # -- identity ---------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._size

    @property
    def context(self) -> Context:
        return self._context

    @property
    def handle(self) -> int:
        """The ``ncclComm_t`` as an int (0 after close)."""
        return 0 if self._closed else int(self._comm.handle)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- checks -----------------------------------------------------------------------------
    def _begin(self, call: str, stream: Stream) -> None:
        if self._closed:
            raise ClosedResourceError(f"{call}: the communicator was closed")
        if not isinstance(stream, Stream):
            raise ContractError("stream", "a mircuda Stream", type(stream).__name__, f"the call: {call}")
        stream._check_usable("stream", self._context)

    def _buffer(self, call: str, argument: str, value: object, dtype: DTypeInfo | None, count: int,
                shape: str) -> DeviceBuffer[Any]:
        try:
            buf = check_device_buffer(argument, value, self._context, dtype, count, shape)
        except ContractError as exc:
            raise ContractError(exc.argument, exc.expected, exc.received, f"the call: {call}") from None
        if buf._context._device is not self._context._device:
            # NCCL reads and writes buffers of the communicator's device only, peer access or not.
            raise ContractError(argument, f"a buffer of {self._context.device!r} (the communicator's device)",
                                f"a buffer of {buf._context.device!r}", f"the call: {call}")
        return buf

    def _count(self, call: str, value: object, default: int) -> int:
        if value is None:
            return default
        if type(value) is not int or value < 0:
            raise ContractError("count", "a non-negative int (elements) or None", repr(value), f"the call: {call}")
        return value

    def _peer(self, call: str, argument: str, value: object) -> int:
        if type(value) is not int or not 0 <= value < self._size:
            raise ContractError(argument, f"a rank in [0, {self._size - 1}]", repr(value), f"the call: {call}")
        return value

    def _reduction(self, call: str, op: object, info: DTypeInfo) -> tuple[int, int]:
        if op not in REDUCTIONS:
            raise ContractError("op", f"one of {', '.join(REDUCTIONS)}", repr(op), f"the call: {call}")
        try:
            code, _ = nccl_type(info, reduce=True)
        except ContractError as exc:
            raise ContractError("send", f"a buffer of {exc.expected}", f"a DeviceBuffer[{info.name}]",
                                f"the call: {call}") from None
        if info.name == "e4m3" and self._context.device_info().compute_capability < _FP8_REDUCTION_CC:
            raise ContractError("send", "a type this device reduces (FP8 reductions need compute capability >= 9.0)",
                                f"DeviceBuffer[e4m3] on {self._context.device_info().arch}", f"the call: {call}")
        return code, REDUCTIONS[str(op)]

    # -- collectives --------------------------------------------------------------------------
    def all_reduce(self, stream: Stream, send: DeviceBuffer[Any], recv: DeviceBuffer[Any], *,
                   count: int | None = None, op: str = "sum") -> None:
        """``recv[i] = op over ranks of send[i]`` for ``i < count`` (``ncclAllReduce``); ``send`` and
        ``recv`` may be the same buffer (in place).

        Args:
            count: elements per rank (default ``len(send)``); both buffers hold at least ``count``.
            op: ``"sum"``, ``"prod"``, ``"max"``, ``"min"`` or ``"avg"``.

        Raises:
            ContractError: a bad stream, buffer (type, dtype, device, length), count or op, naming
                the argument and ``ncclAllReduce``; a type NCCL cannot reduce.
            NcclError: NCCL refused the call.
        """
        # The common call first, tested by identity (one device's own buffers and stream, the whole
        # buffer summed); anything else takes the checks below, which name what is wrong.
        ctx = self._context
        if (count is None and op == "sum" and stream.__class__ is Stream and stream._context is ctx
                and stream._handle and type(send) is DeviceBuffer and type(recv) is DeviceBuffer
                and send._context is ctx and recv._context is ctx and not send._freed and not recv._freed
                and send._scalar is recv._scalar and recv._count >= send._count and not self._closed):
            dtype = _FAST_REDUCE.get(send._scalar)
            if dtype is not None:
                _issue("ncclAllReduce", bindings.all_reduce, send._ptr, recv._ptr, send._count, dtype, 0, self._comm,
                       stream._handle)
                return
        call = "ncclAllReduce"
        self._begin(call, stream)
        s = self._buffer(call, "send", send, None, 0, "")
        n = self._count(call, count, len(s))
        self._buffer(call, "send", send, s._info, n, f"count = {n}")
        r = self._buffer(call, "recv", recv, s._info, n, f"count = {n}")
        dtype, reduce_op = self._reduction(call, op, s._info)
        comm, sp, rp, h = self._comm, s._ptr, r._ptr, stream._handle
        _issue(call, bindings.all_reduce, sp, rp, n, dtype, reduce_op, comm, h)

    def all_gather(self, stream: Stream, send: DeviceBuffer[Any], recv: DeviceBuffer[Any], *,
                   count: int | None = None) -> None:
        """``recv[r * count:(r + 1) * count] = send[:count]`` of rank ``r``, for every rank
        (``ncclAllGather``): ``recv`` is rank-major, at least ``size * count`` elements; ``send`` and
        ``recv`` are distinct buffers.

        Args:
            count: elements each rank sends (default ``len(send)``).

        Raises:
            ContractError: naming the argument and ``ncclAllGather`` (``recv`` shorter than
                ``size * count``, dtypes differ, another device...). NcclError: NCCL refused.
        """
        ctx = self._context
        if (count is None and stream.__class__ is Stream and stream._context is ctx and stream._handle
                and type(send) is DeviceBuffer and type(recv) is DeviceBuffer and send is not recv
                and send._context is ctx and recv._context is ctx and not send._freed and not recv._freed
                and send._scalar is recv._scalar and recv._count >= self._size * send._count and not self._closed):
            dtype = _FAST_REDUCE.get(send._scalar)
            if dtype is not None:
                _issue("ncclAllGather", bindings.all_gather, send._ptr, recv._ptr, send._count, dtype, self._comm,
                       stream._handle)
                return
        call = "ncclAllGather"
        self._begin(call, stream)
        s = self._buffer(call, "send", send, None, 0, "")
        n = self._count(call, count, len(s))
        self._buffer(call, "send", send, s._info, n, f"count = {n}")
        r = self._buffer(call, "recv", recv, s._info, n * self._size, f"size * count = {self._size} * {n}")
        if r is s and self._size > 1:  # NCCL's in-place form is send == recv + rank * count, not recv itself
            raise ContractError("recv", "a buffer other than send", "send itself", f"the call: {call}")
        dtype, per = nccl_type(s._info, reduce=False)
        comm, sp, rp, h = self._comm, s._ptr, r._ptr, stream._handle
        _issue(call, bindings.all_gather, sp, rp, n * per, dtype, comm, h)

    def reduce_scatter(self, stream: Stream, send: DeviceBuffer[Any], recv: DeviceBuffer[Any], *,
                       count: int | None = None, op: str = "sum") -> None:
        """``recv[:count] = op over ranks of send[rank * count:(rank + 1) * count]``
        (``ncclReduceScatter``): ``send`` holds ``size * count`` elements, rank-major.

        Args:
            count: elements each rank receives (default ``len(recv)``).
            op: ``"sum"``, ``"prod"``, ``"max"``, ``"min"`` or ``"avg"``.

        Raises:
            ContractError: naming the argument and ``ncclReduceScatter``. NcclError: NCCL refused.
        """
        call = "ncclReduceScatter"
        self._begin(call, stream)
        r = self._buffer(call, "recv", recv, None, 0, "")
        n = self._count(call, count, len(r))
        self._buffer(call, "recv", recv, r._info, n, f"count = {n}")
        s = self._buffer(call, "send", send, r._info, n * self._size, f"size * count = {self._size} * {n}")
        if r is s and self._size > 1:  # NCCL's in-place form is recv == send + rank * count
            raise ContractError("recv", "a buffer other than send", "send itself", f"the call: {call}")
        dtype, reduce_op = self._reduction(call, op, r._info)
        comm, sp, rp, h = self._comm, s._ptr, r._ptr, stream._handle
        _issue(call, bindings.reduce_scatter, sp, rp, n, dtype, reduce_op, comm, h)

    def broadcast(self, stream: Stream, send: DeviceBuffer[Any] | None, recv: DeviceBuffer[Any], root: int, *,
                  count: int | None = None) -> None:
        """``recv[:count] = send[:count]`` of rank ``root`` on every rank (``ncclBroadcast``).
        ``send`` is read on the root only: other ranks may pass ``None``.

        Args:
            count: elements (default ``len(recv)``).

        Raises:
            ContractError: naming the argument and ``ncclBroadcast`` (``send`` missing on the root, a
                root outside the ranks...). NcclError: NCCL refused.
        """
        call = "ncclBroadcast"
        self._begin(call, stream)
        root = self._peer(call, "root", root)
        r = self._buffer(call, "recv", recv, None, 0, "")
        n = self._count(call, count, len(r))
        self._buffer(call, "recv", recv, r._info, n, f"count = {n}")
        if send is None and root == self._rank:
            raise ContractError("send", f"a DeviceBuffer on the root (rank {root})", "None", f"the call: {call}")
        sp = r._ptr if send is None else self._buffer(call, "send", send, r._info, n, f"count = {n}")._ptr
        dtype, per = nccl_type(r._info, reduce=False)
        comm, rp, h = self._comm, r._ptr, stream._handle
        _issue(call, bindings.broadcast, sp, rp, n * per, dtype, root, comm, h)

    def send(self, stream: Stream, buffer: DeviceBuffer[Any], peer: int, *, count: int | None = None) -> None:
        """Send ``buffer[:count]`` to rank ``peer`` (``ncclSend``); the peer posts the matching
        :meth:`recv`. Pair sends and receives inside :func:`group` (or they may wait on each other).

        Raises:
            ContractError: naming the argument and ``ncclSend``. NcclError: NCCL refused.
        """
        call = "ncclSend"
        self._begin(call, stream)
        peer = self._peer(call, "peer", peer)
        b = self._buffer(call, "buffer", buffer, None, 0, "")
        n = self._count(call, count, len(b))
        self._buffer(call, "buffer", buffer, b._info, n, f"count = {n}")
        dtype, per = nccl_type(b._info, reduce=False)
        comm, bp, h = self._comm, b._ptr, stream._handle
        _issue(call, bindings.send, bp, n * per, dtype, peer, comm, h)

    def recv(self, stream: Stream, buffer: DeviceBuffer[Any], peer: int, *, count: int | None = None) -> None:
        """Receive ``count`` elements (default ``len(buffer)``) from rank ``peer`` into ``buffer``
        (``ncclRecv``).

        Raises:
            ContractError: naming the argument and ``ncclRecv``. NcclError: NCCL refused.
        """
        call = "ncclRecv"
        self._begin(call, stream)
        peer = self._peer(call, "peer", peer)
        b = self._buffer(call, "buffer", buffer, None, 0, "")
        n = self._count(call, count, len(b))
        self._buffer(call, "buffer", buffer, b._info, n, f"count = {n}")
        dtype, per = nccl_type(b._info, reduce=False)
        comm, bp, h = self._comm, b._ptr, stream._handle
        _issue(call, bindings.recv, bp, n * per, dtype, peer, comm, h)

    # -- symmetric memory ---------------------------------------------------------------------
    def allocate_symmetric(self, dtype: Any, stream: Stream, count: int) -> SymmetricBuffer:
        """``count`` elements of ``dtype`` (contents undefined) from ``ncclMemAlloc`` on this rank's
        device, registered as a symmetric window of this communicator (``ncclCommWindowRegister``
        with ``NCCL_WIN_COLL_SYMMETRIC``, NCCL >= 2.27): a :class:`~mircuda.nccl.SymmetricBuffer`
        that kernels and plans use like any DeviceBuffer and that lets NCCL run its symmetric
        (NVLink load/store) kernels when every buffer of a collective is such a window on every rank.
        See :mod:`mircuda.nccl._symmetric` for NVLink multicast (off) and lifetimes.

        Registration is collective: every rank allocates, in the same order and with the same
        ``count`` and dtype. Ranks of one process (:meth:`init_all`) must allocate inside one
        :func:`group` (the registrations are issued at its end, where NCCL fills the windows; the
        buffer's memory exists at once) or use :func:`allocate_symmetric_all`. Outside a group the
        call waits for the other ranks. The memory is ready at once (``ncclMemAlloc`` is not
        stream-ordered); ``stream`` is the buffer's stream (for exports, like a borrowed buffer's).

        Raises:
            ContractError: a bad dtype, ``count`` (a positive int) or ``stream`` (another context's,
                closed). ClosedResourceError: the communicator was closed.
            NcclError: ``ncclMemAlloc`` or ``ncclCommWindowRegister`` failed (inside a group: at its
                end; the buffer then is not a window, collectives on it still work).
        """
        return allocate_symmetric(self, dtype, stream, count, _issue)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Finish and destroy this rank (``ncclCommFinalize``, then ``ncclCommDestroy``). Collective:
        every rank closes its communicator; ranks of one process (:meth:`init_all`) close together
        with :func:`close_all`. Idempotent. A communicator dropped without ``close`` is aborted
        (``ncclCommAbort``).

        Raises:
            NcclError: NCCL failed to finalize or destroy it (it is unusable either way).
        """
        close_all([self])

    def abort(self) -> None:
        """Abort this rank at once (``ncclCommAbort``): local, in-flight operations are stopped; the
        other ranks' operations with it will fail. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()
        # NCCL's abort dropped the windows with the communicator: only the memory is left to free.
        try:
            _release_symmetric([self], deregister=False)
        except Exception:
            pass  # an abort never raises: the memory goes with the context at worst

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"rank {self._rank} of {self._size}"
        return f"Communicator({state}, {self._context!r})"


def close_all(communicators: Sequence[Communicator]) -> None:
    """Close several communicators of this process together: their ``ncclCommFinalize`` calls in one
    NCCL group (so that one thread can finish ranks that wait for each other), then
    ``ncclCommDestroy`` on each. Closed ones are skipped. Their
    symmetric buffers (:meth:`Communicator.allocate_symmetric`) still alive are released first
    (window deregistered, then ``ncclMemFree``: a window must go before its communicator) and read as
    freed afterwards.

    Raises:
        ContractError: something else than Communicators.
        NcclError: NCCL failed (the communicators are unusable either way).
    """
    comms = list(communicators)
    for i, c in enumerate(comms):
        if not isinstance(c, Communicator):
            raise ContractError(f"communicators[{i}]", "a Communicator", type(c).__name__)
    live = [c for c in comms if not c._closed]
    if not live:
        return
    first: BaseException | None = None
    try:
        _release_symmetric(live, deregister=True)  # windows go before their communicators
    except BaseException as exc:  # close all the same, then report it
        first = exc
    for c in live:
        c._closed = True
        c._finalizer.detach()
    try:
        checked("ncclGroupStart", bindings.group_start)
        try:
            for c in live:
                _cuda.make_current(c._context.handle, force=True)
                checked("ncclCommFinalize", bindings.comm_finalize, c._comm)
        finally:
            checked("ncclGroupEnd", bindings.group_end)
    finally:
        for c in live:
            try:
                checked("ncclCommDestroy", bindings.comm_destroy, c._comm)
            except BaseException as exc:  # destroy the others all the same
                first = first or exc
        if first is not None:
            raise first


def allocate_symmetric_all(communicators: Sequence[Communicator], dtype: Any, streams: Sequence[Stream],
                           count: int) -> list[SymmetricBuffer]:
    """One :meth:`Communicator.allocate_symmetric` per communicator of this process (all of
    :meth:`Communicator.init_all`), registered together in one :func:`group`, as NCCL requires when
    one thread registers for several ranks. ``streams[i]`` is a stream of ``communicators[i]``'s
    context.

    Raises:
        ContractError: sequences of different lengths or the wrong types, and as
            ``allocate_symmetric``. NcclError: NCCL failed (every buffer made is released then).
    """
    comms = list(communicators)
    if not comms or isinstance(streams, (str, bytes)) or not isinstance(streams, Sequence) or len(streams) != len(comms):
        raise ContractError("streams", f"{len(comms)} Streams, one per communicator", repr(streams)[:80])
    for i, c in enumerate(comms):
        if not isinstance(c, Communicator):
            raise ContractError(f"communicators[{i}]", "a Communicator", type(c).__name__)
    made: list[SymmetricBuffer] = []
    try:
        with group():
            for c, s in zip(comms, streams):
                made.append(c.allocate_symmetric(dtype, s, count))
    except BaseException:
        for b in made:
            owner = b._owner
            if owner is not None:
                try:
                    owner.release()  # type: ignore[attr-defined]
                except Exception:
                    pass  # the first error is the one to report
        raise
    return made


def _release_symmetric(communicators: Sequence[Communicator], deregister: bool) -> None:
    first: BaseException | None = None
    for c in communicators:
        for memory in list(c._symmetric.values()):
            try:
                memory.release(deregister=deregister)
            except BaseException as exc:  # release the others all the same
                first = first or exc
    if first is not None:
        raise first


@_cuda.finalizer
def _abort(comm: Any, context: Context) -> None:
    if not context._closed:
        bindings.comm_abort(comm)
        _cuda.forget_current()
