"""Graphs without a device: which buffers a graph holds, what a node update accepts, API misuse."""

from __future__ import annotations

import collections
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

import mircuda as mc
from gpu_probe import gpu_unavailable_reason
from mircuda import _cuda
from mircuda.dtypes import dtype_info
from mircuda.graph import reachable_buffers
from mircuda.graph._capture import capture
from mircuda.graph._graph import _split_prepared
from mircuda.graph._resources import hold, release


class FakeContext:
    """Stands in for a Context: buffers only compare it by identity. Closed, so finalizers do nothing."""

    _closed = True
    _handle = 1


def buffer(count: int = 4, ptr: int = 0x1000) -> mc.DeviceBuffer:
    return mc.DeviceBuffer._adopt(FakeContext(), None, dtype_info(mc.f32), count, ptr)  # type: ignore[arg-type]


@dataclass
class Pages:
    keys: mc.DeviceBuffer
    values: mc.DeviceBuffer


@dataclass
class Resources:
    weights: list[mc.DeviceBuffer]
    cache: dict[str, Pages]
    scratch: tuple[Any, ...] = ()
    plan: Any = None
    more: collections.deque[Any] = field(default_factory=collections.deque)


class Plan:
    """A plain object: its attributes are visited."""

    def __init__(self, workspace: mc.DeviceBuffer) -> None:
        self.workspace = workspace
        self.owner = self  # cycles are fine


class SlottedPlan:
    __slots__ = ("workspace", "unset")

    def __init__(self, workspace: mc.DeviceBuffer) -> None:
        self.workspace = workspace


def test_every_buffer_reachable_by_the_documented_rule_is_found_once() -> None:
    w0, w1, k, v, s, ws, slotted, queued = (buffer(ptr=0x1000 * (i + 1)) for i in range(8))
    res = Resources(weights=[w0, w1, w0], cache={"layer0": Pages(k, v)}, scratch=(s, {frozenset([1]): [s]}),
                    plan=[Plan(ws), SlottedPlan(slotted)], more=collections.deque([queued]))
    assert reachable_buffers(res) == [w0, w1, k, v, s, ws, slotted, queued]
    assert reachable_buffers(w0) == [w0]  # the resource object may be one buffer
    assert reachable_buffers(None) == []


def test_buffers_behind_functions_arrays_and_freed_buffers_are_not_held() -> None:
    hidden, freed = buffer(ptr=0x1000), buffer(ptr=0x2000)
    freed._freed = True
    import numpy as np

    res = {"closure": lambda: hidden, "array": np.array([hidden], dtype=object), "freed": freed}
    assert reachable_buffers(res) == []


def test_holds_count_graphs_and_are_released_once() -> None:
    a, b = buffer(ptr=0x1000), buffer(ptr=0x2000)
    first: dict[int, mc.DeviceBuffer] = {}
    second: dict[int, mc.DeviceBuffer] = {}
    hold([a, b, a], first)
    hold([a], second)
    assert (a._holds, b._holds) == (2, 1)
    hold([a], first)  # a graph holds a buffer once however often it meets it
    assert a._holds == 2
    release(first)
    assert (a._holds, b._holds) == (1, 0) and first == {}
    release(first)
    assert a._holds == 1
    release(second)
    assert a._holds == 0


def test_what_prepare_may_return() -> None:
    b = buffer()
    cfg = mc.LaunchConfig(2, 64)
    assert _split_prepared((b, 1.0, 3)) == ((b, 1.0, 3), {}, None)
    assert _split_prepared([b, 1.0]) == ((b, 1.0), {}, None)
    assert _split_prepared({"out": b, "n": 3}) == ((), {"out": b, "n": 3}, None)
    assert _split_prepared(((b, 2.0), cfg)) == ((b, 2.0), {}, cfg)
    assert _split_prepared(({"out": b}, cfg)) == ((), {"out": b}, cfg)
    # A buffer and a config are two arguments, not (arguments, config): the contract check refuses them.
    assert _split_prepared((b, cfg)) == ((b, cfg), {}, None)
    for bad in (None, 3, b, "args"):
        with pytest.raises(mc.ContractError, match="prepare"):
            _split_prepared(bad)


def test_kernel_nodes_compare_by_node_and_capture() -> None:
    cfg = mc.LaunchConfig(1, 32)
    a = mc.KernelNode(handle=0x10, function=0x20, kernel=None, config=cfg, capture_id=1)
    same = mc.KernelNode(handle=0x10, function=0x20, kernel=None, config=mc.LaunchConfig(2, 32), capture_id=1)
    other_capture = mc.KernelNode(handle=0x10, function=0x20, kernel=None, config=cfg, capture_id=2)
    assert a == same and hash(a) == hash(same) and a != other_capture
    assert a.contract is None and "0x20" in repr(a)
    with pytest.raises(AttributeError):
        a.handle = 0  # type: ignore[misc]


def test_graphs_are_made_by_capture_only() -> None:
    with pytest.raises(TypeError, match="Stream.capture"):
        mc.Graph()


def test_capture_checks_its_arguments_before_the_driver() -> None:
    with pytest.raises(mc.ContractError, match="'stream'"):
        capture("not a stream", None, lambda r: None)  # type: ignore[arg-type]


def test_no_capture_in_progress_means_no_driver_query() -> None:
    # Pinned copies ask whether their stream is capturing; with no mircuda capture open the answer
    # needs no driver call (the argument is not even looked at).
    assert _cuda.is_capturing(object()) is False


def test_argument_packer_takes_a_registered_abi() -> None:
    contract = mc.cuda_export("k", out=mc.DeviceBuffer[mc.f32], n=mc.u32)
    ctx = FakeContext()
    b = mc.DeviceBuffer._adopt(ctx, None, dtype_info(mc.f32), 4, 0x1234)  # type: ignore[arg-type]
    assert mc.ArgumentPacker(contract, ctx, abi="c").pack(b, 5) == mc.ArgumentPacker(contract, ctx).pack(b, 5)
    with pytest.raises(mc.ContractError, match="abi"):
        mc.ArgumentPacker(contract, ctx, abi="fortran")


def test_cli_lists_graph_profile() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "graph-profile", "--help"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "--sizes" in out.stdout and "--json" in out.stdout


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_cli_graph_profile_without_a_gpu_fails_cleanly() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "graph-profile"], capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


def test_finalizers_wait_while_a_capture_is_open() -> None:
    """A finalizer that fires inside a capture's fn (GC can run anywhere) must not make a driver call
    that would invalidate the capture: it runs when the capture is over."""
    from mircuda import _cuda

    ran: list[int] = []

    @_cuda.finalizer
    def fin(x: int) -> None:
        ran.append(x)

    _cuda.capture_started()
    fin(1)
    assert ran == []
    _cuda.capture_started()  # two captures at once (two threads): wait for both
    _cuda.capture_ended()
    assert ran == []
    _cuda.capture_ended()
    assert ran == [1]
    fin(2)
    assert ran == [1, 2]

    @_cuda.finalizer
    def failing() -> None:
        raise RuntimeError("never escapes")

    failing()


class Reached(Exception):
    """Raised by StandInKernel where a node update would go on to the driver."""


class StandInKernel:
    """A TypedKernel as far as a node update needs one before the driver: its config check."""

    def _config_dims(self, config: mc.LaunchConfig) -> tuple[int, ...]:
        raise Reached(config)


def _params(function: int) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(func=function, gridDimX=1, gridDimY=1, gridDimZ=1, blockDimX=64, blockDimY=1,
                           blockDimZ=1, sharedMemBytes=0)


def test_a_node_update_keeps_the_programmatic_flag_it_knows_and_does_not_invent_one(monkeypatch) -> None:
    """Kernel node parameters carry no launch attributes. A node of launch_captured knows its
    programmatic_stream_serialization and refuses another; a node captured by a plain launch (for
    example a DenseVectorPlan's on an H200, which launches with the flag) does not know it, so an
    update with the flag must not be refused as though the node had been captured without it."""
    from types import SimpleNamespace

    from mircuda.graph._capture import CaptureRecord
    from mircuda.launch import _kernel

    kernel = StandInKernel()
    pdl = mc.LaunchConfig(1, 64, programmatic_stream_serialization=True)
    plain = mc.LaunchConfig(1, 64)
    monkeypatch.setitem(_kernel._BY_FUNCTION, 0xF1, {kernel})
    stream = SimpleNamespace(context=FakeContext(), _capture_id=None)
    stream.context.handle = 1
    captured = mc.KernelNode(handle=0x20, function=0xF2, kernel=kernel, config=pdl, capture_id=7)  # type: ignore[arg-type]
    record = CaptureRecord(stream, 7, nodes={0x20: captured})  # type: ignore[arg-type]
    native = SimpleNamespace(kernels=[(0x10, _params(0xF1)), (0x20, _params(0xF2))])
    graph = mc.Graph._create(stream, None, 0xA, 0xB, record, native)  # type: ignore[arg-type]
    by_launch = next(n for n in graph.kernel_nodes() if n.handle == 0x10)
    assert by_launch.kernel is kernel and not by_launch.config.programmatic_stream_serialization

    with pytest.raises(mc.LaunchConfigError, match="programmatic_stream_serialization=True as captured"):
        graph.update_kernel(captured, lambda r: ((), plain))
    for node in (captured, by_launch):
        with pytest.raises(Reached) as reached:
            graph.update_kernel(node, lambda r: ((), pdl))
        assert reached.value.args[0] is pdl
    with pytest.raises(Reached):
        graph.update_kernel(by_launch, lambda r: ((), plain))
