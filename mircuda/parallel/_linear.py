"""Tensor-parallel linear layers: DenseMatmulPlan per device plus NCCL collectives (Megatron-LM's
column- and row-parallel split, Shoeybi et al. 2019, arXiv:1909.08053, section 3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import bf16
from ..errors import ClosedResourceError, ContractError
from ..matmul import DenseMatmulPlan, DenseMatmulSpec
from ..memory import check_device_buffer, describe_argument
from ._capture import capture_each

if TYPE_CHECKING:
    from ..graph import Graph
    from ..matmul import CutlassLibrary
    from ..memory import DeviceBuffer
    from ..nccl import Communicator, SymmetricBuffer
    from ..runtime import Stream

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "column_parallel_shards", "row_parallel_shards"]

Buffers = Sequence["DeviceBuffer[Any]"]


def _split(array: Any, size: int, axis: int, argument: str) -> list[np.ndarray]:
    a = np.asarray(array)
    if a.ndim != 2:
        raise ContractError(argument, "a 2-d array", f"an array of shape {a.shape}")
    if type(size) is not int or size < 1:
        raise ContractError("size", "a positive int (ranks)", repr(size))
    if a.shape[axis] % size:
        raise ContractError(argument, f"a dimension {axis} divisible by size = {size}", f"shape {a.shape}")
    return [np.ascontiguousarray(part) for part in np.split(a, size, axis=axis)]


def column_parallel_shards(weight: Any, size: int) -> list[np.ndarray]:
    """Rank ``r``'s weight of a :class:`ColumnParallelLinear`: ``weight[r * N/size:(r + 1) * N/size, :]``
    of ``weight`` ``[N, K]`` (the output features split), each C-contiguous ``[N/size, K]``.

    Raises:
        ContractError: ``weight`` is not 2-d, or N is not a multiple of ``size``.
    """
    return _split(weight, size, 0, "weight")


def row_parallel_shards(array: Any, size: int) -> list[np.ndarray]:
    """Rank ``r``'s share of a :class:`RowParallelLinear`'s weight ``[N, K]`` or input ``[M, K]``: the
    columns ``[:, r * K/size:(r + 1) * K/size]`` (the input features split), each C-contiguous.

    Raises:
        ContractError: ``array`` is not 2-d, or K is not a multiple of ``size``.
    """
    return _split(array, size, 1, "array")


class _Parallel:
    """What both layers share: local ranks (communicator, stream, plan), checks, capture."""

    _comms: list[Communicator]
    _streams: list[Stream]
    _plans: list[DenseMatmulPlan[Any, Any]]
    _size: int
    _closed: bool

    def _setup(self, communicators: Sequence[Communicator], streams: Sequence[Stream], spec: DenseMatmulSpec,
               shard: DenseMatmulSpec, input: Any, library: CutlassLibrary | None, kernel: str | None) -> None:
        from ..nccl import Communicator
        from ..runtime import Stream

        if isinstance(communicators, (str, bytes)) or not isinstance(communicators, Sequence) or not communicators:
            raise ContractError("communicators", "a non-empty sequence of Communicators (this process's ranks)",
                                repr(communicators)[:80])
        if isinstance(streams, (str, bytes)) or not isinstance(streams, Sequence) or len(streams) != len(communicators):
            raise ContractError("streams", f"{len(communicators)} Streams, one per communicator", repr(streams)[:80])
        size = None
        for i, (comm, stream) in enumerate(zip(communicators, streams)):
            if not isinstance(comm, Communicator):
                raise ContractError(f"communicators[{i}]", "a mircuda.nccl Communicator", type(comm).__name__)
            if comm.closed:
                raise ClosedResourceError(f"argument 'communicators[{i}]': the communicator was closed")
            if size is not None and comm.size != size:
                raise ContractError(f"communicators[{i}]", f"a communicator of size {size}", f"size {comm.size}")
            size = comm.size
            if not isinstance(stream, Stream) or stream.context is not comm.context:
                raise ContractError(f"streams[{i}]", f"a Stream of {comm.context!r}",
                                    type(stream).__name__ if not isinstance(stream, Stream) else
                                    f"a stream of {stream.context!r}")
        assert size is not None
        self._comms, self._streams, self._size = list(communicators), list(streams), size
        self._spec = spec
        self._plans = []
        try:
            for comm, stream in zip(self._comms, self._streams):
                self._plans.append(DenseMatmulPlan(comm.context, stream, shard, input, kernel=kernel, library=library))
        except BaseException:
            for p in self._plans:
                p.close()
            raise
        self._closed = False

    @property
    def plans(self) -> list[DenseMatmulPlan[Any, Any]]:
        """The per-rank plans (local ranks, in order): ``plans[i].describe()`` says what runs."""
        return list(self._plans)

    @property
    def spec(self) -> DenseMatmulSpec:
        """The whole layer's ``DenseMatmulSpec(m, n, k)`` (one device's result)."""
        return self._spec

    @property
    def size(self) -> int:
        """The number of ranks (all processes)."""
        return self._size

    @property
    def streams(self) -> list[Stream]:
        return list(self._streams)

    def _operands(self, name: str, values: object) -> list[DeviceBuffer[Any]]:
        if self._closed:
            raise ClosedResourceError(f"the {type(self).__name__} was closed")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != len(self._plans):
            raise ContractError(name, f"a sequence of {len(self._plans)} DeviceBuffers (one per local rank)",
                                repr(values)[:80])
        return list(values)

    def _index(self, i: object) -> int:
        if type(i) is not int or not 0 <= i < len(self._plans):
            raise ContractError("i", f"a local rank index in [0, {len(self._plans) - 1}]", repr(i))
        return i

    def _precheck(self, x: Buffers, w: Buffers, y: Buffers) -> None:
        # Every rank's operands before any rank's work: a refusal leaves nothing enqueued.
        for i in range(len(self._plans)):
            self._precheck_rank(i, x, w, y)

    def _precheck_rank(self, i: int, x: Buffers, w: Buffers, y: Buffers) -> None:
        from ..matmul._spec import check_operand

        plan = self._plans[i]
        for name, op, buf in zip(("x", "w", "y"), plan.operands, (x[i], w[i], y[i])):
            try:
                check_operand(op, buf, plan._context)
            except ContractError as exc:  # named as this layer's argument
                raise ContractError(f"{name}[{i}]", exc.expected, exc.received) from None
        device = plan._context.device
        if y[i].context.device is not device:  # NCCL takes only buffers of the rank's own device
            raise ContractError(f"y[{i}]", f"a buffer of {device!r} (rank {i}'s device)",
                                f"a buffer of {y[i].context.device!r}")

    def _enqueue(self, i: int, x: Buffers, w: Buffers, y: Buffers, extra: Any) -> None:
        raise NotImplementedError  # pragma: no cover - each layer defines it

    def _communicate(self, i: int, y: Buffers, extra: Any) -> None:
        raise NotImplementedError  # pragma: no cover

    def _run(self, x: Buffers, w: Buffers, y: Buffers, extra: Any) -> None:
        self._precheck(x, w, y)
        for i in range(len(self._plans)):
            self._enqueue(i, x, w, y, extra)
        from ..nccl import group

        with group():  # one thread drives every local rank: NCCL's group rule
            for i in range(len(self._plans)):
                self._communicate(i, y, extra)

    def _capture(self, x: Buffers, w: Buffers, y: Buffers, extra: Any) -> list[Graph[Any]]:
        self._run(x, w, y, extra)  # once eagerly: NCCL connects the ranks outside the capture
        for s in self._streams:
            s.synchronize()

        def enqueue(i: int, res: Any) -> None:
            xs, ws, ys, ex = res
            self._enqueue(i, xs, ws, ys, ex)
            self._communicate(i, ys, ex)

        return capture_each(self._streams, (list(x), list(w), list(y), extra), enqueue)

    def close(self) -> None:
        """Close the per-rank plans (not the communicators or streams, which the caller owns). Idempotent."""
        self._closed = True
        for p in self._plans:
            p.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ColumnParallelLinear(_Parallel):
    """``Y[M, N] = X[M, K] . W[N, K]^T`` with W's rows (the output features) split over ``size`` ranks:
    rank ``r`` holds ``W_r = W[r * N/size:(r + 1) * N/size, :]`` (:func:`column_parallel_shards`) and
    the whole input X, and computes ``Y_r = X . W_r^T`` ``[M, N/size]`` with a
    :class:`~mircuda.DenseMatmulPlan` on its stream. Without ``gather`` each rank keeps its ``Y_r``
    (what a following :class:`RowParallelLinear` takes as its input shard: no communication); with
    ``gather=True`` an all-gather (``ncclAllGather``) also writes every rank's ``Y_r`` into
    ``gathered`` ``[size, M, N/size]``, rank-major (for M = 1 this is Y itself).

    Args:
        communicators: this process's ranks (one Communicator each: all of :meth:`Communicator.init_all`,
            or the one rank of a process); all of one communicator of ``size`` ranks.
        streams: one Stream per communicator, of its context: each rank's work runs there.
        spec: the whole layer's ``DenseMatmulSpec(m, n, k)``; ``n`` a multiple of ``size``.
        input: ``mc.bf16`` or ``mc.f16`` (X, W, Y). kernel, library: as for DenseMatmulPlan.
        gather: whether :meth:`execute` all-gathers the outputs.

    Raises:
        ContractError: bad communicators, streams (count, context), spec (``n`` not divisible).
        NcclNotFound: nccl4py or the NCCL library is not installed (the ``[nccl]`` extra).
        ClosedResourceError: a communicator was closed. CutlassNotFound and the rest of
            DenseMatmulPlan's errors, for the per-rank ``[M, N/size, K]`` plans.
    """

    def __init__(self, communicators: Sequence[Communicator], streams: Sequence[Stream], spec: DenseMatmulSpec,
                 input: Any = bf16, *, gather: bool = False, kernel: str | None = None,
                 library: CutlassLibrary | None = None) -> None:
        if not isinstance(spec, DenseMatmulSpec):
            raise ContractError("spec", "a DenseMatmulSpec(m, n, k)", repr(spec))
        if type(gather) is not bool:
            raise ContractError("gather", "a bool", repr(gather))
        size = _size_of(communicators)
        if spec.n % size:
            raise ContractError("spec", f"n divisible by the {size} ranks", f"n = {spec.n}")
        self._gather = gather
        self._setup(communicators, streams, spec, DenseMatmulSpec(spec.m, spec.n // size, spec.k), input,
                    library, kernel)

    @property
    def gather(self) -> bool:
        return self._gather

    def execute(self, x: Buffers, w: Buffers, y: Buffers, gathered: Buffers | None = None) -> None:
        """Enqueue every local rank's ``y[i] = x[i] . w[i]^T`` on its stream (and the all-gather into
        ``gathered[i]`` with ``gather=True``, one NCCL group); allocates and synchronizes nothing.

        Args:
            x: per local rank, ``[M, K]``. w: per local rank, its shard ``[N/size, K]``.
            y: per local rank, ``[M, N/size]``. gathered: per local rank, ``[size * M * N/size]``
                (only with ``gather=True``).

        Raises:
            ContractError: a sequence of the wrong length, a bad buffer (named by the plan or NCCL
                call), ``gathered`` missing or given against ``gather``; nothing is enqueued then.
        """
        extra = self._check(x, w, y, gathered)
        self._run(x, w, y, extra)

    def capture(self, x: Buffers, w: Buffers, y: Buffers, gathered: Buffers | None = None) -> list[Graph[Any]]:
        """Run :meth:`execute` once eagerly (NCCL connects its ranks outside the capture; the streams
        are synchronized after it), then capture each local rank's part into one CUDA graph per
        device (:func:`capture_each`); ``graphs[i].launch(streams[i])`` replays rank ``i``. Every
        rank of the communicator (every process) captures, and replays its graphs in the same order.

        Raises:
            as :meth:`execute`; CaptureError: a capture failed.
        """
        extra = self._check(x, w, y, gathered)
        return self._capture(x, w, y, extra)

    def enqueue_rank(self, i: int, x: Buffers, w: Buffers, y: Buffers, gathered: Buffers | None = None) -> None:
        """Enqueue local rank ``i``'s part only (its product, and its all-gather with ``gather=True``) on
        ``streams[i]``, outside any NCCL group: for one thread per rank, e.g. inside
        :func:`capture_each` to put several layers into one graph per device. Operands as
        :meth:`execute`.

        Raises:
            as :meth:`execute`; ContractError: ``i`` is not a local rank index.
        """
        extra = self._check(x, w, y, gathered)
        i = self._index(i)
        self._precheck_rank(i, x, w, y)
        self._enqueue(i, x, w, y, extra)
        self._communicate(i, y, extra)

    def _check(self, x: Buffers, w: Buffers, y: Buffers, gathered: Buffers | None) -> Any:
        x, w, y = self._operands("x", x), self._operands("w", w), self._operands("y", y)
        if self._gather != (gathered is not None):
            raise ContractError("gathered", "a sequence of buffers (gather=True)" if self._gather else
                                "None (the layer was made with gather=False)", repr(gathered)[:80])
        if gathered is None:
            return None
        g = self._operands("gathered", gathered)
        s = self._spec
        for i, plan in enumerate(self._plans):
            out = plan.operands[2]
            check_device_buffer(f"gathered[{i}]", g[i], plan._context, out.info, s.m * s.n,
                                f"[size, M, N/size] = [{self._size}, {s.m}, {s.n // self._size}]")
        return g

    def _enqueue(self, i: int, x: Buffers, w: Buffers, y: Buffers, extra: Any) -> None:
        self._plans[i].execute(self._streams[i], x[i], w[i], y[i])

    def _communicate(self, i: int, y: Buffers, extra: Any) -> None:
        if extra is not None:
            s = self._spec
            self._comms[i].all_gather(self._streams[i], y[i], extra[i], count=s.m * (s.n // self._size))


class RowParallelLinear(_Parallel):
    """``Y[M, N] = X[M, K] . W[N, K]^T`` with W's columns (the input features) split over ``size``
    ranks: rank ``r`` holds ``W_r = W[:, r * K/size:(r + 1) * K/size]`` and the input shard
    ``X_r = X[:, r * K/size:(r + 1) * K/size]`` (:func:`row_parallel_shards` of each; a preceding
    :class:`ColumnParallelLinear`'s outputs are such shards), computes the partial product
    ``X_r . W_r^T`` ``[M, N]`` with a :class:`~mircuda.DenseMatmulPlan`, and all-reduces (sum,
    ``ncclAllReduce`` in place) so that every rank holds Y.

    The partial sums are rounded to the input type before they are added (as in Megatron-LM), so Y
    differs from one device's FP32-accumulated product by about one rounding of each partial sum.

    With ``symmetric=True`` the layer allocates, once, one ``[M, N]`` output per local rank from
    NCCL's symmetric memory (:meth:`Communicator.allocate_symmetric`: ``ncclMemAlloc`` registered as
    an ``NCCL_WIN_COLL_SYMMETRIC`` window; collective, so every rank of every process makes the layer
    with the same spec): the partial product is written there and all-reduced in place, which lets
    NCCL (>= 2.27) run its low-latency symmetric all-reduce over NVLink load/store (no multicast: see
    :mod:`mircuda.nccl._symmetric`). Y is then read from :attr:`outputs`; ``execute`` takes
    ``y=None`` (or ``outputs`` itself) and allocates nothing.

    Args:
        communicators, streams, input, kernel, library: as for :class:`ColumnParallelLinear`.
        spec: the whole layer's ``DenseMatmulSpec(m, n, k)``; ``k`` a multiple of ``size``.
        symmetric: whether to keep the outputs in symmetric NCCL windows (see above).

    Raises:
        as :class:`ColumnParallelLinear` (``k`` not divisible); ContractError: ``symmetric`` not a bool;
        NcclError: the symmetric allocation or window registration failed (nothing is kept then).
    """

    _outputs: list[SymmetricBuffer]
    _symmetric: bool

    def __init__(self, communicators: Sequence[Communicator], streams: Sequence[Stream], spec: DenseMatmulSpec,
                 input: Any = bf16, *, kernel: str | None = None, library: CutlassLibrary | None = None,
                 symmetric: bool = False) -> None:
        if not isinstance(spec, DenseMatmulSpec):
            raise ContractError("spec", "a DenseMatmulSpec(m, n, k)", repr(spec))
        if type(symmetric) is not bool:
            raise ContractError("symmetric", "a bool", repr(symmetric))
        size = _size_of(communicators)
        if spec.k % size:
            raise ContractError("spec", f"k divisible by the {size} ranks", f"k = {spec.k}")
        self._outputs = []
        self._symmetric = symmetric
        self._setup(communicators, streams, spec, DenseMatmulSpec(spec.m, spec.n, spec.k // size), input,
                    library, kernel)
        if symmetric:
            from ..nccl import allocate_symmetric_all

            try:
                self._outputs = allocate_symmetric_all(self._comms, self._plans[0].operands[2].info.scalar_type,
                                                       self._streams, spec.m * spec.n)
            except BaseException:
                for p in self._plans:
                    p.close()
                self._closed = True
                raise

    @property
    def symmetric(self) -> bool:
        """Whether the outputs live in symmetric NCCL windows (``symmetric=True``)."""
        return self._symmetric

    @property
    def outputs(self) -> list[SymmetricBuffer]:
        """With ``symmetric=True``: per local rank, the ``[M, N]`` output (Y after :meth:`execute`), a
        :class:`~mircuda.nccl.SymmetricBuffer` the layer owns; ``[]`` otherwise (and after close)."""
        return list(self._outputs)

    def _y(self, y: Buffers | None) -> list[DeviceBuffer[Any]]:
        if self._closed:
            raise ClosedResourceError(f"the {type(self).__name__} was closed")
        if not self._symmetric:
            if y is None:
                raise ContractError("y", "a sequence of DeviceBuffers (one per local rank)", "None",
                                    "y may be None only for a layer made with symmetric=True")
            return self._operands("y", y)
        if y is None:
            return list(self._outputs)
        ys = self._operands("y", y)
        for i, (given, own) in enumerate(zip(ys, self._outputs)):
            if given is not own:
                raise ContractError(f"y[{i}]", "None or the layer's outputs[i] (symmetric=True: Y is written "
                                    "into the layer's symmetric buffers)", describe_argument(given))
        return ys

    def execute(self, x: Buffers, w: Buffers, y: Buffers | None = None) -> None:
        """Enqueue every local rank's partial product ``y[i] = x[i] . w[i]^T`` and the all-reduce
        (sum, in place in ``y[i]``; one NCCL group); allocates and synchronizes nothing.

        Args:
            x: per local rank, its input shard ``[M, K/size]``. w: per local rank, ``[N, K/size]``.
            y: per local rank, ``[M, N]``: Y on every rank afterwards. With ``symmetric=True``: None
                (or :attr:`outputs`), Y is then in :attr:`outputs`.

        Raises:
            ContractError: a sequence of the wrong length or a bad buffer; ``y`` None without
                ``symmetric=True``, or other buffers than :attr:`outputs` with it; nothing is enqueued then.
        """
        self._run(self._operands("x", x), self._operands("w", w), self._y(y), None)

    def enqueue_rank(self, i: int, x: Buffers, w: Buffers, y: Buffers | None = None) -> None:
        """Enqueue local rank ``i``'s partial product and all-reduce only, on ``streams[i]``, outside any
        NCCL group (as :meth:`ColumnParallelLinear.enqueue_rank`); ``y`` as for :meth:`execute`."""
        x, w, ys = self._operands("x", x), self._operands("w", w), self._y(y)
        i = self._index(i)
        self._precheck_rank(i, x, w, ys)
        self._enqueue(i, x, w, ys, None)
        self._communicate(i, ys, None)

    def capture(self, x: Buffers, w: Buffers, y: Buffers | None = None) -> list[Graph[Any]]:
        """As :meth:`ColumnParallelLinear.capture`: once eagerly, then one graph per local rank; ``y``
        as for :meth:`execute`."""
        return self._capture(self._operands("x", x), self._operands("w", w), self._y(y), None)

    def close(self) -> None:
        """Close the per-rank plans and release the symmetric outputs (``symmetric=True``; those a live
        graph still holds are released when the last such graph goes, or when their communicator is
        closed). Not the communicators or streams, which the caller owns. Idempotent."""
        outputs, self._outputs = self._outputs, []
        try:
            for buf, stream in zip(outputs, self._streams):
                if not buf.freed and not buf._holds:
                    buf.free(stream)
        finally:
            super().close()

    def _enqueue(self, i: int, x: Buffers, w: Buffers, y: Buffers, extra: Any) -> None:
        self._plans[i].execute(self._streams[i], x[i], w[i], y[i])

    def _communicate(self, i: int, y: Buffers, extra: Any) -> None:
        s = self._spec
        self._comms[i].all_reduce(self._streams[i], y[i], y[i], count=s.m * s.n)


def _size_of(communicators: Any) -> int:
    """The ranks' count, checked first by both layers: the one place that imports mircuda.nccl (NcclNotFound,
    naming the ``[nccl]`` extra, without nccl4py or the NCCL library), so that the shard helpers and
    this module import without it."""
    from ..nccl import Communicator

    if isinstance(communicators, Sequence) and communicators and isinstance(communicators[0], Communicator):
        return communicators[0].size
    raise ContractError("communicators", "a non-empty sequence of Communicators (this process's ranks)",
                        repr(communicators)[:80])
