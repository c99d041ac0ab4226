"""Executable graphs that own their resources, and typed kernel-node updates."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _cuda
from ..errors import ClosedResourceError, ContractError, GraphStreamError, LaunchConfigError
from ..launch import ArgumentPacker, LaunchConfig
from ._resources import hold, reachable_buffers, release

if TYPE_CHECKING:
    from ..launch import KernelContract, TypedKernel
    from ..runtime import Context, Stream
    from ._capture import CaptureRecord
    from ._nodes import NativeNodes

__all__ = ["Graph", "KernelNode"]

R = TypeVar("R")


@dataclass(frozen=True)
class KernelNode:
    """One kernel node of a captured graph. Obtain from :meth:`TypedKernel.launch_captured` (while
    capturing) or :meth:`Graph.kernel_nodes`; pass to :meth:`Graph.update_kernel`.

    Two KernelNode values are equal when they name the same node of the same capture.

    Attributes:
        handle: the ``CUgraphNode``, as an int (meaningful while its graph is open).
        function: the ``CUfunction`` the node launches, as an int.
        kernel: the :class:`TypedKernel` (and so the contract) mircuda launched it through; ``None``
            when unknown (a kernel another library launched, or a function bound to several contracts
            and launched with ``launch`` rather than ``launch_captured``).
        config: the launch configuration it was captured with. For a node not made by
            ``launch_captured`` it is read from the node's kernel parameters, which carry no launch
            attributes: ``programmatic_stream_serialization`` is then False whatever the launch used.
        capture_id: the driver's id of the capture sequence (unique in the process).
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

    handle: int
    function: int
    kernel: TypedKernel | None = field(compare=False, repr=False)
    config: LaunchConfig = field(compare=False)
    capture_id: int

    @property
    def contract(self) -> KernelContract | None:
        """The node's argument contract, or None where mircuda does not know it."""
        return self.kernel.contract if self.kernel is not None else None

    def __repr__(self) -> str:
        name = self.kernel.contract.symbol if self.kernel is not None else f"function {hex(self.function)}"
        return f"KernelNode({name}, node={hex(self.handle)}, {self.config})"


class Graph(Generic[R]):
    """An instantiated CUDA graph captured from a stream, owning its resource object ``R``.

    Create with :meth:`Stream.capture`. While the graph is open:

    - it keeps the resource object alive, and every :class:`DeviceBuffer` reachable from it (by the
      rule documented on :meth:`Stream.capture`), every buffer argument of a
      :meth:`TypedKernel.launch_captured` and every buffer a node update hands it is *held*: its
      ``free()`` raises :class:`ContractError`, and it stays alive even where the caller drops it;
    - it keeps the typed kernels (and so the modules) of its kernel nodes loaded.

    ``close()`` (or the end of a ``with`` block, or the finalizer) destroys the native graph and
    releases the holds; ``into_resources()`` does the same and hands the resource object back.
    Neither synchronizes: replays already enqueued complete (the driver frees an executable graph in
    flight when it finishes); buffers freed afterwards on the capture stream are freed after them.

    Kernels launched by other libraries inside the capture, and what they reference, are the
    caller's to keep alive: put them in the resource object.
    """

    __slots__ = ("_stream", "_context", "_ctx_handle", "_exec_handle", "_graph_launch", "_graph_cu", "_exec_cu",
                 "_capture_id", "_resources", "_held", "_keep", "_nodes", "_by_handle", "_configs", "_flag_known",
                 "_packers", "_params", "_lock", "_finalizer", "__weakref__")
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _stream: Stream
    _context: Context
    _ctx_handle: int
    _exec_handle: int  # 0 once closed
    _graph_launch: Callable[[int, int], int]  # _cuda.graph_launch: (CUgraphExec, CUstream) -> CUresult
    _graph_cu: Any  # CUgraph
    _exec_cu: Any  # CUgraphExec
    _capture_id: int
    _resources: R
    _held: dict[int, Any]  # buffers held, by address
    _keep: list[Any]  # typed kernels (and so modules) of the nodes
    _nodes: tuple[KernelNode, ...]
    _by_handle: dict[int, KernelNode]
    _configs: dict[int, LaunchConfig]
    # Nodes whose programmatic_stream_serialization is known: those of launch_captured. Any other
    # node's config is read from its kernel parameters, which carry no launch attributes.
    _flag_known: set[int]
    _packers: dict[TypedKernel, ArgumentPacker]
    _params: dict[int, Any]  # CUDA_KERNEL_NODE_PARAMS by node handle
    _lock: threading.Lock
    _finalizer: weakref.finalize[..., Graph[Any]]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("capture graphs with Stream.capture(resources, fn)")

    @classmethod
    def _create(cls, stream: Stream, resources: R, graph_cu: Any, exec_cu: Any, record: CaptureRecord,
                native: NativeNodes) -> Graph[R]:
        from ..launch import kernels_for_function

        self = object.__new__(cls)
        self._stream = stream
        self._context = stream.context
        self._ctx_handle = stream.context.handle
        self._graph_cu = graph_cu
        self._exec_cu = exec_cu
        self._exec_handle = int(exec_cu)
        self._graph_launch = _cuda.graph_launch
        self._capture_id = record.capture_id
        self._resources = resources
        self._held = {}
        self._keep = []
        self._configs = {}
        self._flag_known = set()
        self._packers = {}
        self._params = {}
        self._lock = threading.Lock()
        nodes: list[KernelNode] = []
        for node_cu, params in native.kernels:
            handle, function = int(node_cu), int(params.func)
            node = record.nodes.get(handle)
            if node is not None:
                self._flag_known.add(handle)
            else:
                known = kernels_for_function(function)
                self._keep.extend(known)
                node = KernelNode(handle=handle, function=function, kernel=known[0] if len(known) == 1 else None,
                                  config=_config_of(params), capture_id=record.capture_id)
            nodes.append(node)
            if node.kernel is not None:
                self._keep.append(node.kernel)
            self._configs[handle] = node.config
        self._nodes = tuple(nodes)
        self._by_handle = {n.handle: n for n in nodes}
        hold(reachable_buffers(resources), self._held)
        hold(record.buffers, self._held)
        self._finalizer = weakref.finalize(self, _destroy, exec_cu, graph_cu, self._held, self._keep, self._context)
        self._finalizer.atexit = False
        return self

    # -- the hot path -----------------------------------------------------------------------
    def launch(self, stream: Stream) -> None:
        """Enqueue one replay of the graph on ``stream`` (``cuGraphLaunch``). Asynchronous: nothing
        synchronizes; the replay is ordered after earlier work on the stream.

        Raises:
            GraphStreamError: ``stream`` is not the stream the graph was captured on.
            ClosedResourceError: the graph or the stream was closed.
            CudaError: the driver refused the launch.
        """
        if stream is not self._stream or not self._exec_handle or not stream._handle:
            self._refuse(stream)
        # No per-launch cuCtxSetCurrent: cuGraphLaunch uses the stream's context whatever context is
        # current (seen on driver 580); on CUDA_ERROR_INVALID_CONTEXT the context is made current
        # and the launch tried once more (a refused launch enqueued nothing).
        r = self._graph_launch(self._exec_handle, stream._handle)
        if r:
            if r == 201:
                _cuda.make_current(self._ctx_handle)
                r = self._graph_launch(self._exec_handle, stream._handle)
            if r:
                _cuda.raise_result(r, "cuGraphLaunch")

    def _refuse(self, stream: Any) -> None:
        if not self._exec_handle:
            raise ClosedResourceError("the graph was closed")
        if stream is not self._stream:
            from ..runtime import Stream

            received = repr(stream) if isinstance(stream, Stream) else _describe(stream)
            raise GraphStreamError(
                f"argument 'stream': expected the capture stream {self._stream!r}, received {received}; "
                "a graph launches only on the stream it was captured on")
        raise ClosedResourceError("argument 'stream': the stream was closed")

    # -- introspection ----------------------------------------------------------------------
    @property
    def stream(self) -> Stream:
        """The stream the graph was captured on (the only one it launches on)."""
        return self._stream

    @property
    def context(self) -> Context:
        return self._context

    @property
    def handle(self) -> int:
        """The ``CUgraphExec`` as an int (0 once closed)."""
        return self._exec_handle

    @property
    def closed(self) -> bool:
        return not self._exec_handle

    def kernel_nodes(self) -> list[KernelNode]:
        """The graph's kernel nodes, in the driver's order (``cuGraphGetNodes``).

        A node from :meth:`TypedKernel.launch_captured` is returned as that same value; each other
        node knows its function, and its kernel where mircuda bound exactly one contract to it.

        Raises:
            ClosedResourceError: the graph was closed.
        """
        self._check_open()
        return list(self._nodes)

    # -- node updates -----------------------------------------------------------------------
    def update_kernel(self, node: KernelNode, prepare: Callable[[R], Any]) -> None:
        """Set new arguments (and optionally a new launch configuration) of one kernel node for the
        replays enqueued from now on (``cuGraphExecKernelNodeSetParams``). No recapture, no
        synchronization; replays already enqueued keep their arguments.

        ``prepare(resources)`` returns the arguments for the node's contract: a tuple (or list) of
        positional arguments, a dict of keyword arguments, or ``(arguments, LaunchConfig)``. Without a
        config the node keeps its current one. The arguments are checked exactly as a launch checks
        them, and every buffer among them is held by the graph from then on.

        Raises:
            ContractError: ``node`` is not a kernel node of this graph, its contract is unknown, or an
                argument does not satisfy the contract (nothing is changed then).
            UseAfterFree: a buffer argument was freed.
            LaunchConfigError: the config exceeds the device's or the function's limits, or its
                ``programmatic_stream_serialization`` differs from that of a ``launch_captured`` node (an
                update cannot change it; any other node keeps what it was captured with).
            ClosedResourceError: the graph was closed.
            CudaError: the driver refused the update.
            Exception: whatever ``prepare`` raises, unchanged.
        """
        kernel = self._kernel_of(node)
        _require_callable("prepare", prepare)
        self._apply(node, kernel, prepare(self._resources))

    def try_update_kernel(self, node: KernelNode, prepare: Callable[[R], Any],
                          convert: Callable[[Exception], BaseException]) -> None:
        """:meth:`update_kernel` for a ``prepare`` that can fail: an exception ``prepare`` raises is
        passed to ``convert`` and the exception ``convert`` returns is raised (chained to the
        original). The node is unchanged then. Checks of the result raise as in update_kernel.

        Raises:
            ContractError: also when ``convert`` returns something that is not an exception.
        """
        kernel = self._kernel_of(node)
        _require_callable("prepare", prepare)
        _require_callable("convert", convert)
        try:
            prepared = prepare(self._resources)
        except Exception as exc:
            err = convert(exc)
            if not isinstance(err, BaseException):
                raise ContractError("convert", "a function returning the exception to raise",
                                    f"it returned {_describe(err)}") from exc
            raise err from exc
        self._apply(node, kernel, prepared)

    def _kernel_of(self, node: KernelNode) -> TypedKernel:
        self._check_open()
        if not isinstance(node, KernelNode):
            raise ContractError("node", "a KernelNode", _describe(node))
        known = self._by_handle.get(node.handle)
        if node.capture_id != self._capture_id or known is None:
            raise ContractError("node", "a kernel node of this graph", f"{node!r} of another capture")
        if known.kernel is None:  # the graph's own record decides, not the value passed in
            raise ContractError("node", "a kernel node whose contract mircuda knows",
                                f"{node!r}, whose contract is unknown",
                                "launch the kernel with TypedKernel.launch_captured inside the capture")
        return known.kernel

    def _apply(self, node: KernelNode, kernel: TypedKernel, prepared: Any) -> None:
        args, kwargs, config = _split_prepared(prepared)
        with self._lock:
            self._check_open()
            captured = self._configs[node.handle]
            if config is None:
                config = captured
            elif (isinstance(config, LaunchConfig) and node.handle in self._flag_known
                  and config.programmatic_stream_serialization != captured.programmatic_stream_serialization):
                # Kernel node parameters carry no launch attributes: the node keeps the captured one.
                raise LaunchConfigError(
                    f"config: programmatic_stream_serialization={captured.programmatic_stream_serialization} as "
                    f"captured (a node update cannot change it), received {config.programmatic_stream_serialization}")
            elif (isinstance(config, LaunchConfig) and node.handle in self._flag_known
                  and (config.cooperative, config.cluster) != (captured.cooperative, captured.cluster)):
                raise LaunchConfigError(
                    f"config: cooperative={captured.cooperative}, cluster={captured.cluster} as captured (a node "
                    f"update cannot change them), received cooperative={config.cooperative}, "
                    f"cluster={config.cluster}")
            dims = kernel._config_dims(config)
            packer = self._packers.get(kernel)
            if packer is None:
                packer = ArgumentPacker(kernel.contract, kernel._context, abi=kernel._abi.name)
                self._packers[kernel] = packer
            packer.pack(*args, **kwargs)
            params = self._params.get(node.handle)
            if params is None:
                params = _cuda.driver().CUDA_KERNEL_NODE_PARAMS()
                params.func = kernel._cu
                params.kernelParams = packer.block.params_address
                self._params[node.handle] = params
            (params.gridDimX, params.gridDimY, params.gridDimZ, params.blockDimX, params.blockDimY,
             params.blockDimZ, params.sharedMemBytes) = dims
            self._context._make_current()
            _cuda.call("cuGraphExecKernelNodeSetParams", self._exec_cu, _cuda.driver().CUgraphNode(node.handle),
                       params)
            # Buffers inside struct arguments (dicts, tuples) too: reachable_buffers follows them.
            hold(reachable_buffers((args, kwargs)), self._held)
            self._configs[node.handle] = config

    # -- resources and lifetime -------------------------------------------------------------
    def with_resources_mut(self, fn: Callable[[R], Any]) -> Any:
        """Call ``fn(resources)`` and return its result, keeping the graph open (e.g. a prefill pass
        that writes cache pages the graph reads).

        The caller orders that work with the graph's replays: work ``fn`` enqueues on the capture
        stream runs after replays enqueued before it; on another stream, order it with events.
        Buffers ``fn`` puts into the resource object are held from then on; buffers it takes out stay
        held (the graph may still use them) until the graph is destroyed.

        Raises:
            ClosedResourceError: the graph was closed.
        """
        self._check_open()
        _require_callable("fn", fn)
        try:
            return fn(self._resources)
        finally:
            if self._exec_handle:
                hold(reachable_buffers(self._resources), self._held)

    def into_resources(self) -> R:
        """Destroy the native graph (without synchronizing or copying), release every hold and return
        the resource object, e.g. to capture a replacement graph over the same allocations.

        Replays already enqueued still complete; order later frees after them (free on the capture
        stream, or wait on an event recorded after the last replay).

        Raises:
            ClosedResourceError: the graph was already closed or turned into its resources.
        """
        with self._lock:
            self._check_open()
            resources = self._resources
            self._release()
        return resources

    def close(self) -> None:
        """Destroy the native graph and release every hold (no synchronization). Idempotent."""
        with self._lock:
            if self._exec_handle:
                self._release()

    def _release(self) -> None:
        self._exec_handle = 0
        self._resources = None  # type: ignore[assignment]  # drops the reference; reads check the graph is open
        self._packers.clear()
        self._params.clear()
        self._finalizer()

    def _check_open(self) -> None:
        if not self._exec_handle:
            raise ClosedResourceError("the graph was closed")

    def __enter__(self) -> Graph[R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._exec_handle:
            return "Graph(closed)"
        return f"Graph({hex(self._exec_handle)}, {len(self._nodes)} kernel nodes, stream={self._stream!r})"


@_cuda.finalizer
def _destroy(exec_cu: Any, graph_cu: Any, held: dict[int, Any], keep: list[Any], context: Context) -> None:
    try:
        if not context._closed:
            _cuda.make_current(context._handle)
            _cuda.call_status("cuGraphExecDestroy", exec_cu)
            _cuda.call_status("cuGraphDestroy", graph_cu)
    finally:  # the buffers are let go even when the driver calls raise (the wrapper swallows that)
        release(held)
        keep.clear()


def _config_of(params: Any) -> LaunchConfig:
    return LaunchConfig((int(params.gridDimX), int(params.gridDimY), int(params.gridDimZ)),
                        (int(params.blockDimX), int(params.blockDimY), int(params.blockDimZ)),
                        int(params.sharedMemBytes))


def _split_prepared(prepared: Any) -> tuple[tuple[Any, ...], dict[str, Any], LaunchConfig | None]:
    """``(args, kwargs, config)`` from what ``prepare`` returned (see :meth:`Graph.update_kernel`)."""
    config = None
    if (isinstance(prepared, tuple) and len(prepared) == 2 and isinstance(prepared[1], LaunchConfig)
            and isinstance(prepared[0], (tuple, list, dict))):
        prepared, config = prepared
    if isinstance(prepared, dict):
        return (), prepared, config
    if isinstance(prepared, (tuple, list)):
        return tuple(prepared), {}, config
    raise ContractError("prepare", "a function returning a tuple of arguments, a dict of keyword arguments, "
                        "or (arguments, LaunchConfig)", f"it returned {_describe(prepared)}")


def _require_callable(name: str, fn: object) -> None:
    if not callable(fn):
        raise ContractError(name, "a callable", _describe(fn))


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}"[:120]
