"""Without a device: Stream.capture uploads the instantiated graph (``cuGraphUpload`` on the capture
stream, so the first replay does not pay for it) and a failed upload discards everything; and
``Graph.launch`` reaches ``cuGraphLaunch`` through the C extension's ``graph_launch`` once the hot
path is bound (the entry points are stand-ins that record their arguments)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from hotpath_stand_in import StandInDriver, keep_bindings
from mircuda import _cuda
from mircuda.errors import CudaError
from mircuda.graph import _capture
from mircuda.graph._capture import CaptureRecord
from mircuda.graph._nodes import NativeNodes
from mircuda.runtime import Stream

STREAM_CU = "CUstream#1"


class FakeContext:
    """Stands in for a Context: capture reads ``_handle`` and makes it current. Closed, so finalizers
    do nothing."""

    _closed = True
    _handle = handle = 0xC0

    def _make_current(self) -> None:
        pass


def fake_stream(handle: int = 0x81) -> Stream:
    stream = object.__new__(Stream)
    stream._context, stream._cu, stream._handle, stream._priority = FakeContext(), STREAM_CU, handle, 0  # type: ignore[assignment]
    stream._finalizer = None
    return stream


class FakeExec:
    """A CUgraphExec as cuda.bindings returns it: ``int()`` gives the handle."""

    def __int__(self) -> int:
        return 0xE0


class FakeGraph:
    """A CUgraph as cuda.bindings returns it."""

    def __int__(self) -> int:
        return 0x6A


GRAPH = FakeGraph()


@pytest.fixture()
def driver(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Stand-ins for every driver call a capture makes; returns the calls in order."""
    calls: list[tuple[Any, ...]] = []
    outputs = {"cuStreamIsCapturing": 0, "cuStreamGetCaptureInfo": (1, 7, GRAPH, []),
               "cuGraphInstantiate": FakeExec()}

    def call(name: str, *args: Any) -> Any:
        calls.append((name, *args))
        return outputs.get(name)

    def call_status(name: str, *args: Any) -> tuple[int, Any]:
        calls.append((name, *args))
        return 0, GRAPH if name == "cuStreamEndCapture" else None

    modes = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
    monkeypatch.setattr(_cuda, "call", call)
    monkeypatch.setattr(_cuda, "call_status", call_status)
    monkeypatch.setattr(_cuda, "make_current", lambda handle, force=False: None)
    monkeypatch.setattr(_cuda, "driver", lambda: SimpleNamespace(CUstreamCaptureMode=modes))
    monkeypatch.setattr(_capture, "inspect_graph", lambda graph: NativeNodes())
    return calls


def test_capture_instantiates_then_uploads_on_the_capture_stream(driver) -> None:
    stream = fake_stream()
    graph = _capture.capture(stream, None, lambda resources: None)
    names = [c[0] for c in driver]
    assert names == ["cuStreamIsCapturing", "cuStreamBeginCapture", "cuStreamGetCaptureInfo", "cuStreamEndCapture",
                     "cuGraphInstantiate", "cuGraphUpload"]
    assert driver[-2] == ("cuGraphInstantiate", GRAPH, 0)
    assert len(driver[-1]) == 3 and isinstance(driver[-1][1], FakeExec) and driver[-1][2] == STREAM_CU
    assert graph._exec_handle == 0xE0


def test_a_failed_upload_discards_the_graph(driver, monkeypatch) -> None:
    real_call = _cuda.call

    def refuse_upload(name: str, *args: Any) -> Any:
        if name == "cuGraphUpload":
            driver.append((name, *args))
            raise CudaError(2, "CUDA_ERROR_OUT_OF_MEMORY", "cuGraphUpload")
        return real_call(name, *args)

    monkeypatch.setattr(_cuda, "call", refuse_upload)
    with pytest.raises(mc.CaptureError, match="cuGraphUpload failed with CUDA_ERROR_OUT_OF_MEMORY") as info:
        _capture.capture(fake_stream(), None, lambda resources: None)
    assert info.value.result_name == "CUDA_ERROR_OUT_OF_MEMORY"  # type: ignore[attr-defined]
    assert [c[0] for c in driver[-3:]] == ["cuGraphUpload", "cuGraphExecDestroy", "cuGraphDestroy"]
    assert isinstance(driver[-2][1], FakeExec) and driver[-1][1] == GRAPH


def test_graph_launch_goes_through_the_c_extension(monkeypatch) -> None:
    hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")
    seen: list[tuple[int, int]] = []
    two = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    keep = [two(lambda a, b: seen.append((a, b)) or 0), two(lambda a, b: 0)]
    launch = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 11)(lambda *a: 0)
    address = {"cuGraphLaunch": ctypes.cast(keep[0], ctypes.c_void_p).value,
               "cuEventRecord": ctypes.cast(keep[1], ctypes.c_void_p).value,
               "cuLaunchKernel": ctypes.cast(launch, ctypes.c_void_p).value}

    real = keep_bindings(monkeypatch)  # before the stand-ins replace them (GPU tests may follow in this process)
    try:
        _cuda._bind_hot_path(StandInDriver(address, 13000))
        assert _cuda.hot_path_kind == "c-extension" and _cuda.graph_launch is hotpath.graph_launch
        stream = fake_stream(0x81)
        graph = mc.Graph._create(stream, None, 0xA, 0xB, CaptureRecord(stream, 7, nodes={}),  # type: ignore[arg-type]
                                 NativeNodes())
        assert graph._graph_launch is hotpath.graph_launch
        graph.launch(stream)
        graph.launch(stream)
        assert seen == [(0xB, 0x81), (0xB, 0x81)]
    finally:  # the driver's own entry points where this process bound them (none without a device)
        hotpath.set_entry_points(real.get("cuLaunchKernel", 0), real.get("cuGraphLaunch", 0),
                                 real.get("cuEventRecord", 0))
        if hasattr(hotpath, "set_launch_ex"):  # an extension built before it had one
            hotpath.set_launch_ex(real.get("cuLaunchKernelEx", 0))
