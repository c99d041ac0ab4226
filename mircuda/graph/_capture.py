"""Stream capture: begin, run the caller's sequence, end, check, instantiate, upload.

A capture runs in thread-local mode (``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``): the capturing thread
may not make potentially unsafe calls (synchronizations, ``cuMemAlloc``...), other threads may. Any
failure ends the capture, destroys the partial graph, leaves the stream out of capture mode (usable)
and raises :class:`CaptureError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _cuda
from ..errors import CaptureError, ContractError, CudaError
from ._nodes import KERNEL, inspect_graph, kernel_function, node_type

if TYPE_CHECKING:
    from ..launch import LaunchConfig, TypedKernel
    from ..memory import DeviceBuffer
    from ..runtime import Stream
    from ._graph import Graph, KernelNode

__all__ = ["capture", "launch_captured", "capture_error"]

R = TypeVar("R")

# CUstreamCaptureStatus (cuda.h)
_NONE, _ACTIVE, _INVALIDATED = 0, 1, 2


@dataclass
class CaptureRecord:
    """What mircuda learns during one capture sequence (keyed by the driver's capture id)."""

    stream: Stream
    capture_id: int
    nodes: dict[int, KernelNode] = field(default_factory=dict)
    """Nodes created by ``TypedKernel.launch_captured``, by node handle."""
    buffers: list[DeviceBuffer[Any]] = field(default_factory=list)
    """Buffer arguments of those launches: the graph holds them."""


_records: dict[int, CaptureRecord] = {}
_records_lock = threading.Lock()


def capture_error(message: str, result_name: str | None) -> CaptureError:
    """A CaptureError whose ``result_name`` is the driver's error name (None when the driver had none)."""
    err = CaptureError(message)
    err.result_name = result_name  # type: ignore[attr-defined]
    return err


def _capture_info(stream: Stream) -> tuple[int, int, Any, list[Any]]:
    """``(status, capture id, CUgraph, frontier nodes)`` of ``stream`` (``cuStreamGetCaptureInfo``).

    cuda-bindings 13.x returns ``(status, id, graph, dependencies, edge data, count)``; only the
    first four positions are used (they are the same in 12.x).
    """
    out = _cuda.call("cuStreamGetCaptureInfo", stream._cu)
    status, cid, graph, deps = int(out[0]), int(out[1]), out[2], out[3]
    if len(out) > 4 and isinstance(out[-1], int):
        deps = list(deps or [])[: out[-1]]
    return status, cid, graph, list(deps or [])


def _end_and_discard(stream: Stream) -> int:
    """End the capture on ``stream`` and destroy whatever graph it produced; return EndCapture's code."""
    code, graph = _cuda.call_status("cuStreamEndCapture", stream._cu)
    _destroy_graph(graph)
    return code


def _destroy_graph(graph: Any) -> None:
    try:
        if graph is not None and int(graph):
            _cuda.call_status("cuGraphDestroy", graph)
    except Exception:
        pass


def _disown(resources: Any, addresses: set[int]) -> None:
    """Mark buffers naming memory of a discarded graph as freed, so nothing (not even their finalizer)
    ever frees or uses that address: it may belong to another graph later."""
    from ._resources import reachable_buffers

    for buf in reachable_buffers(resources):
        if buf._ptr in addresses:
            if buf._finalizer is not None:
                buf._finalizer.detach()
            buf._freed = True
            buf._ptr = 0


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def capture(stream: Stream, resources: R, fn: Callable[[R], object]) -> Graph[R]:
    """Implementation of :meth:`Stream.capture` (documented there)."""
    from ..runtime import Stream
    from ._graph import Graph

    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", _describe(stream))
    if not callable(fn):
        raise ContractError("fn", "a callable taking the resources, fn(resources)", _describe(fn))
    stream._own()
    # Launches into a capture need the context current in this thread (a launch that the driver
    # refuses would invalidate the capture), and other libraries may have changed it behind the
    # per-thread cache: set it for real.
    _cuda.make_current(stream._context._handle, force=True)
    drv = _cuda.driver()
    if int(_cuda.call("cuStreamIsCapturing", stream._cu)) != _NONE:
        raise capture_error(f"{stream!r} is already capturing: captures do not nest on one stream", None)
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    _cuda.capture_started()  # finalizers wait until the capture is over (see _cuda.finalizer)
    try:
        _cuda.call("cuStreamBeginCapture", stream._cu, mode)
    except CudaError as exc:
        _cuda.capture_ended()
        raise capture_error(f"cuStreamBeginCapture failed with {exc.name}", exc.name) from exc

    record: CaptureRecord | None = None
    ended = False
    try:
        _, cid, _, _ = _capture_info(stream)
        record = CaptureRecord(stream, cid)
        with _records_lock:
            _records[cid] = record
        try:
            fn(resources)
        except BaseException as exc:
            ended = True
            end_code = _end_and_discard(stream)
            if not isinstance(exc, Exception):
                raise
            name = getattr(exc, "result_name", None) if isinstance(exc, CaptureError) else None
            if isinstance(exc, CudaError):
                name = exc.name
            elif name is None and end_code:
                name = _cuda.result_name(end_code)
            raise capture_error(f"the capture was discarded: fn raised {type(exc).__name__}: {exc}", name) from exc
        ended = True
        code, graph_cu = _cuda.call_status("cuStreamEndCapture", stream._cu)
    except BaseException:
        if not ended:
            _end_and_discard(stream)
        raise
    finally:
        if record is not None:
            with _records_lock:
                _records.pop(record.capture_id, None)
        _cuda.capture_ended()

    if code:
        _destroy_graph(graph_cu)
        name = _cuda.result_name(code)
        raise capture_error(
            f"cuStreamEndCapture failed with {name}: the capture was invalidated (a synchronizing call, a "
            "pageable copy, a stream forked into the capture and not joined back...) and was discarded", name)
    try:
        native = inspect_graph(graph_cu)
        unfreed, foreign = native.unpaired()
        if unfreed:
            _disown(resources, set(unfreed))
            raise capture_error(
                f"the capture allocated {len(unfreed)} buffer(s) (first at {hex(unfreed[0])}) that it did not free: "
                "a graph that owns an allocation can be launched only once; free every buffer allocated inside "
                "the capture before fn returns (those reachable from the resources are now marked freed)", None)
        if foreign:
            raise capture_error(
                f"the capture freed {len(foreign)} buffer(s) (first at {hex(foreign[0])}) allocated outside it: "
                "the graph could be launched only once; free such buffers outside the capture "
                "(the freed buffer objects are now unusable and their memory is not released)", None)
        exec_cu = _cuda.call("cuGraphInstantiate", graph_cu, 0)
    except CudaError as exc:
        _destroy_graph(graph_cu)
        raise capture_error(f"{exc.call} failed with {exc.name}; the capture was discarded", exc.name) from exc
    except BaseException:
        _destroy_graph(graph_cu)
        raise
    try:
        _cuda.call("cuGraphUpload", exec_cu, stream._cu)
    except CudaError as exc:
        _cuda.call_status("cuGraphExecDestroy", exec_cu)
        _destroy_graph(graph_cu)
        raise capture_error(f"cuGraphUpload failed with {exc.name}; the capture was discarded", exc.name) from exc
    assert record is not None
    return Graph._create(stream, resources, graph_cu, exec_cu, record, native)


def launch_captured(kernel: TypedKernel, stream: Stream, config: LaunchConfig, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> KernelNode:
    """Implementation of :meth:`TypedKernel.launch_captured` (documented there)."""
    from ..runtime import Stream
    from ._graph import KernelNode
    from ._resources import reachable_buffers

    if not isinstance(stream, Stream):
        raise ContractError("stream", "a mircuda Stream", _describe(stream))
    stream._check_usable("stream", kernel._context)
    status, cid, _, _ = _capture_info(stream)
    if status != _ACTIVE:
        state = "was invalidated" if status == _INVALIDATED else "is not capturing"
        raise capture_error(f"launch_captured needs a stream inside Stream.capture's fn; {stream!r} {state}", None)
    record = _records.get(cid)
    if record is None:
        raise capture_error(f"{stream!r} is capturing, but not through mircuda's Stream.capture", None)
    _cuda.make_current(kernel._context._handle, force=True)  # a refused launch would invalidate the capture
    kernel.launch(stream, config, *args, **kwargs)
    _, _, _, frontier = _capture_info(stream)
    matches = [n for n in frontier if node_type(n) == KERNEL and kernel_function(n) == kernel._handle]
    if len(matches) != 1:
        raise capture_error(
            f"launch_captured: {len(matches)} nodes of kernel {kernel.contract.symbol!r} are on the capture "
            f"frontier of {stream!r} ({len(frontier)} nodes in all), so the node this launch created is not "
            "known; mircuda never guesses", None)
    node = KernelNode(handle=int(matches[0]), function=kernel._handle, kernel=kernel, config=config,
                      capture_id=cid)
    record.nodes[node.handle] = node
    # Buffers inside struct arguments (dicts, tuples) too: reachable_buffers follows them.
    record.buffers.extend(reachable_buffers((args, kwargs)))
    return node
