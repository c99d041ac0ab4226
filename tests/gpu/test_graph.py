"""CUDA graphs: capture, replay, failure modes, typed kernel-node updates, resource lifetime."""

from __future__ import annotations

import gc
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from numba import cuda

import mircuda as mc
import mircuda.numba_ext as mn
from helpers import download, upload

SOURCE = mc.cuda_kernel(r'''
extern "C" __global__ void axpby(float* y, const float* x, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b * y[i];
}
extern "C" __global__ void scale(float* out, const float* in, float s, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s * in[i];
}
extern "C" __global__ void add(float* out, const float* a, const float* b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}''', "graph_kernels.cu")
F32 = mc.DeviceBuffer[mc.f32]
Axpby = mc.cuda_export("axpby", y=mc.InOut[F32], x=mc.In[F32], a=mc.f32, b=mc.f32, n=mc.u32)
Scale = mc.cuda_export("scale", out=mc.Out[F32], input=mc.In[F32], s=mc.f32, n=mc.u32)
Add = mc.cuda_export("add", out=mc.Out[F32], a=mc.In[F32], b=mc.In[F32], n=mc.u32)
N = 3000
CONFIG = mc.LaunchConfig.for_elements(N, 256)


@dataclass
class Kernels:
    axpby: mc.TypedKernel
    scale: mc.TypedKernel
    add: mc.TypedKernel


@pytest.fixture(scope="module")
def kernels(compiler) -> Kernels:
    module = compiler.compile(SOURCE)
    return Kernels(module.kernel(Axpby), module.kernel(Scale), module.kernel(Add))


@dataclass
class Buffers:
    x: mc.DeviceBuffer
    y: mc.DeviceBuffer
    out: mc.DeviceBuffer
    extra: dict[str, Any] = field(default_factory=dict)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def poisoned(stream: mc.Stream, pool: mc.MemoryPool, n: int = N) -> mc.DeviceBuffer:
    buf = pool.allocate(mc.f32, stream, n)
    stream.memset(buf, 0xFF)  # NaN
    return buf


def assert_stream_usable(context, stream, pool, kernels, rng) -> None:
    """A stream that left capture mode runs work again: a launch and a copy give the right numbers."""
    x_h = rng.standard_normal(N).astype(np.float32)
    x = upload(context, stream, pool, x_h)
    out = poisoned(stream, pool)
    kernels.scale.launch(stream, CONFIG, out, x, 3.0, N)
    stream.synchronize()
    assert rel_err(download(context, stream, out), 3.0 * x_h.astype(np.float64)) < 1e-6


# -- capture and replay ---------------------------------------------------------------------------------

def test_capture_then_replay_matches_numpy(context, stream, pool, kernels, rng) -> None:
    x_h, y_h = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    a, b, s = (float(np.float32(v)) for v in rng.uniform(0.5, 1.5, 3))
    res = Buffers(upload(context, stream, pool, x_h), upload(context, stream, pool, y_h), poisoned(stream, pool))

    def sequence(r: Buffers) -> None:
        kernels.axpby.launch(stream, CONFIG, r.y, r.x, a, b, N)
        kernels.scale.launch(stream, CONFIG, r.out, r.y, s, N)

    graph = stream.capture(res, sequence)
    assert isinstance(graph, mc.Graph) and not graph.closed and graph.stream is stream
    # Capturing ran nothing.
    np.testing.assert_array_equal(download(context, stream, res.y), y_h)
    assert np.isnan(download(context, stream, res.out)).all()
    y = y_h.astype(np.float64)
    for _ in range(3):
        graph.launch(stream)
        y = a * x_h.astype(np.float64) + b * y
    stream.synchronize()
    assert rel_err(download(context, stream, res.y), y) < 1e-5
    assert rel_err(download(context, stream, res.out), s * y) < 1e-5
    assert sorted(n.contract.symbol for n in graph.kernel_nodes()) == ["axpby", "scale"]
    graph.close()
    assert graph.closed
    graph.close()  # idempotent


def test_graph_launches_only_on_its_capture_stream(context, stream, pool, kernels) -> None:
    res = Buffers(pool.allocate_zeroed(mc.f32, stream, N), pool.allocate_zeroed(mc.f32, stream, N),
                  pool.allocate(mc.f32, stream, N))
    graph = stream.capture(res, lambda r: kernels.scale.launch(stream, CONFIG, r.out, r.x, 1.0, N))
    other = context.create_stream()
    with pytest.raises(mc.GraphStreamError, match="capture stream"):
        graph.launch(other)
    with pytest.raises(mc.GraphStreamError):
        graph.launch(None)
    graph.launch(stream)
    graph.close()
    with pytest.raises(mc.ClosedResourceError):
        graph.launch(stream)
    with pytest.raises(mc.ClosedResourceError):
        graph.kernel_nodes()
    other.close()


def test_a_buffer_held_by_a_live_graph_refuses_free(context, stream, pool, kernels) -> None:
    res = Buffers(pool.allocate_zeroed(mc.f32, stream, N), pool.allocate_zeroed(mc.f32, stream, N),
                  pool.allocate(mc.f32, stream, N), extra={"nested": [(pool.allocate(mc.f32, stream, 4),)]})
    graph = stream.capture(res, lambda r: kernels.scale.launch(stream, CONFIG, r.out, r.x, 1.0, N))
    nested = res.extra["nested"][0][0]
    for buf in (res.x, res.y, res.out, nested):
        with pytest.raises(mc.ContractError, match="live graph"):
            buf.free(stream)
    twice = stream.capture(res, lambda r: kernels.scale.launch(stream, CONFIG, r.out, r.y, 1.0, N))
    graph.close()
    with pytest.raises(mc.ContractError, match="live graph"):
        res.x.free(stream)  # still held by the second graph
    twice.close()
    for buf in (res.x, res.y, res.out, nested):
        buf.free(stream)


# -- failure modes: each leaves the stream usable -----------------------------------------------------

def test_an_exception_in_fn_discards_the_capture(context, stream, pool, kernels, rng) -> None:
    res = Buffers(pool.allocate_zeroed(mc.f32, stream, N), pool.allocate_zeroed(mc.f32, stream, N),
                  pool.allocate(mc.f32, stream, N))

    def fails(r: Buffers) -> None:
        kernels.scale.launch(stream, CONFIG, r.out, r.x, 1.0, N)
        raise ValueError("no such layer")

    with pytest.raises(mc.CaptureError, match="no such layer") as info:
        stream.capture(res, fails)
    assert isinstance(info.value.__cause__, ValueError) and info.value.result_name is None
    res.x.free(stream)  # no graph holds it
    assert_stream_usable(context, stream, pool, kernels, rng)


def test_a_contract_error_in_fn_discards_the_capture(context, stream, pool, kernels, rng) -> None:
    wrong, out = pool.allocate(mc.f64, stream, N), poisoned(stream, pool)
    with pytest.raises(mc.CaptureError, match="'input'") as info:
        stream.capture(wrong, lambda w: kernels.scale.launch(stream, CONFIG, out, w, 1.0, N))
    assert isinstance(info.value.__cause__, mc.ContractError)
    assert_stream_usable(context, stream, pool, kernels, rng)


@pytest.mark.parametrize("call", ["stream.synchronize", "context.synchronize"])
def test_a_synchronizing_call_invalidates_the_capture(context, stream, pool, kernels, rng, call) -> None:
    x = pool.allocate_zeroed(mc.f32, stream, N)

    def syncs(buf: mc.DeviceBuffer) -> None:
        kernels.scale.launch(stream, CONFIG, buf, buf, 2.0, N)
        if call == "stream.synchronize":
            stream.synchronize()
        else:
            context.synchronize()

    with pytest.raises(mc.CaptureError) as info:
        stream.capture(x, syncs)
    assert info.value.result_name.startswith("CUDA_ERROR_STREAM_CAPTURE"), info.value.result_name
    assert isinstance(info.value.__cause__, mc.CudaError)
    assert_stream_usable(context, stream, pool, kernels, rng)


def test_another_threads_driver_calls_during_a_capture_neither_fail_nor_join_it(context, stream, pool, kernels,
                                                                               rng) -> None:
    """Captures run in thread-local mode: while this thread captures, another thread allocates pinned
    memory, allocates and frees from the pool, copies and synchronizes its own stream (calls that
    global mode forbids in every thread while a capture is open). They succeed, run at once, and none
    of them becomes part of the graph."""
    x_h = rng.standard_normal(N).astype(np.float32)
    other_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool))
    seen: dict[str, Any] = {}

    def other_thread() -> None:
        try:
            s = context.create_stream()
            buf = upload(context, s, pool, other_h)          # pinned staging, pool allocation, copy, wait
            kernels.scale.launch(s, CONFIG, buf, buf, 2.0, N)
            seen["values"] = download(context, s, buf)       # synchronizes its own stream
            context.allocate_pinned(mc.f32, 16).close()
            buf.free(s)
            s.synchronize()
            s.close()
        except BaseException as exc:
            seen["error"] = exc

    def sequence(r: Buffers) -> None:
        kernels.scale.launch(stream, CONFIG, r.y, r.x, 3.0, N)
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        kernels.scale.launch(stream, CONFIG, r.out, r.y, 0.5, N)

    graph = stream.capture(res, sequence)
    assert "error" not in seen, seen.get("error")
    np.testing.assert_array_equal(seen["values"], 2.0 * other_h)  # ran at once, outside the graph
    assert sorted(n.contract.symbol for n in graph.kernel_nodes()) == ["scale", "scale"]
    assert np.isnan(download(context, stream, res.out)).all()  # capturing ran nothing here
    graph.launch(stream)
    assert rel_err(download(context, stream, res.out), 1.5 * x_h.astype(np.float64)) < 1e-6
    graph.close()


def test_an_invalidation_fn_swallowed_is_reported_by_end_capture(context, stream, pool, kernels, rng) -> None:
    def swallows(_: None) -> None:
        try:
            stream.synchronize()
        except mc.CudaError:
            pass

    with pytest.raises(mc.CaptureError, match="cuStreamEndCapture") as info:
        stream.capture(None, swallows)
    assert info.value.result_name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert_stream_usable(context, stream, pool, kernels, rng)


def test_a_pageable_copy_invalidates_the_capture(context, stream, pool, kernels, rng) -> None:
    dst = pool.allocate(mc.f32, stream, N)
    pageable = np.ones(N, dtype=np.float32)
    # mircuda's own copies refuse pageable memory before the driver:
    with pytest.raises(mc.CaptureError) as info:
        stream.capture(dst, lambda d: stream.copy_to_device(pageable, d))
    assert isinstance(info.value.__cause__, mc.ContractError)
    # (The r580 driver itself captures a raw pageable cuMemcpyHtoDAsync without complaint, so this
    # pre-check is what keeps a replay from reading host memory that may have moved.)
    assert_stream_usable(context, stream, pool, kernels, rng)


def test_a_fork_not_joined_back_fails_and_both_streams_stay_usable(context, stream, pool, kernels, rng) -> None:
    side = context.create_stream()
    fork = context.create_event()
    x = pool.allocate_zeroed(mc.f32, stream, N)

    def unjoined(buf: mc.DeviceBuffer) -> None:
        fork.record(stream)
        side.wait_event(fork)
        kernels.scale.launch(side, CONFIG, buf, buf, 2.0, N)

    with pytest.raises(mc.CaptureError) as info:
        stream.capture(x, unjoined)
    assert info.value.result_name == "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"
    assert_stream_usable(context, stream, pool, kernels, rng)
    assert_stream_usable(context, side, pool, kernels, rng)
    side.close()


def test_captures_do_not_nest_on_one_stream(context, stream, pool, kernels, rng) -> None:
    with pytest.raises(mc.CaptureError, match="already capturing") as info:
        stream.capture(None, lambda _: stream.capture(None, lambda _: None))
    assert isinstance(info.value.__cause__, mc.CaptureError)
    assert_stream_usable(context, stream, pool, kernels, rng)


def test_an_allocation_not_freed_inside_the_capture_is_refused(context, stream, pool, kernels, rng) -> None:
    kept: list[mc.DeviceBuffer] = []
    with pytest.raises(mc.CaptureError, match="did not free"):
        stream.capture(kept, lambda k: k.append(pool.allocate(mc.f32, stream, N)))
    # The buffer object named memory of the discarded graph: it is marked freed, never freed again.
    assert kept[0].freed
    assert_stream_usable(context, stream, pool, kernels, rng)


def test_freeing_an_outside_buffer_inside_the_capture_is_refused(context, stream, pool, kernels, rng) -> None:
    outside = pool.allocate(mc.f32, stream, N)
    # The driver refuses a stream-ordered free of memory the graph did not allocate.
    with pytest.raises(mc.CaptureError, match="cuMemFreeAsync.*CUDA_ERROR_INVALID_VALUE"):
        stream.capture(None, lambda _: outside.free(stream))
    assert not outside.freed  # nothing half-done: the buffer is still owned and usable
    assert_stream_usable(context, stream, pool, kernels, rng)
    outside.free(stream)


def test_bad_arguments_to_capture(stream) -> None:
    with pytest.raises(mc.ContractError, match="'fn'"):
        stream.capture(None, "not callable")
    closed = stream.context.create_stream()
    closed.close()
    with pytest.raises(mc.ClosedResourceError):
        closed.capture(None, lambda _: None)


# -- kernel nodes and typed updates -------------------------------------------------------------------

def test_launch_captured_finds_each_of_three_launches_on_two_branches(context, stream, pool, kernels, rng) -> None:
    """One kernel launched 3x: twice on the capture stream, once on a forked stream joined back. Each
    node is found exactly; updating one node changes only that node's output."""
    side = context.create_stream()
    fork, join = context.create_event(), context.create_event()
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool),
                  extra={"o2": poisoned(stream, pool)})
    nodes: dict[str, mc.KernelNode] = {}

    def branches(r: Buffers) -> None:
        nodes["first"] = kernels.scale.launch_captured(stream, CONFIG, r.y, r.x, 2.0, N)
        fork.record(stream)
        side.wait_event(fork)
        nodes["side"] = kernels.scale.launch_captured(side, CONFIG, r.extra["o2"], r.x, 3.0, N)
        nodes["third"] = kernels.scale.launch_captured(stream, CONFIG, r.out, r.x, 5.0, N)
        join.record(side)
        stream.wait_event(join)

    graph = stream.capture(res, branches)
    assert len({n.handle for n in nodes.values()}) == 3
    listed = graph.kernel_nodes()
    assert len(listed) == 3 and set(listed) == set(nodes.values())
    assert all(n.contract == Scale and n.kernel is kernels.scale for n in listed)

    def outputs() -> list[np.ndarray]:
        stream.synchronize()
        return [download(context, stream, b) for b in (res.y, res.extra["o2"], res.out)]

    def replay() -> None:  # poison first: a node the replay skipped cannot show its old result
        for b in (res.y, res.extra["o2"], res.out):
            stream.memset(b, 0xFF)
        graph.launch(stream)

    xd = x_h.astype(np.float64)
    replay()
    for got, s in zip(outputs(), (2.0, 3.0, 5.0)):
        assert rel_err(got, s * xd) < 1e-6
    for name, s in (("first", 7.0), ("side", 11.0), ("third", 13.0)):
        graph.update_kernel(nodes[name], lambda r, name=name, s=s: (
            {"first": r.y, "side": r.extra["o2"], "third": r.out}[name], r.x, s, N))
    replay()
    for got, s in zip(outputs(), (7.0, 11.0, 13.0)):
        assert rel_err(got, s * xd) < 1e-6
    graph.update_kernel(nodes["side"], lambda r: (r.extra["o2"], r.x, -1.0, N))
    replay()
    for got, s in zip(outputs(), (7.0, -1.0, 13.0)):
        assert rel_err(got, s * xd) < 1e-6
    graph.close()
    side.close()


def test_update_kernel_with_new_buffers_scalars_and_config(context, stream, pool, kernels, rng) -> None:
    x_h, y_h = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    x2_h, y2_h = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), upload(context, stream, pool, y_h), poisoned(stream, pool),
                  extra={"x2": upload(context, stream, pool, x2_h), "y2": upload(context, stream, pool, y2_h)})
    nodes: list[mc.KernelNode] = []
    graph = stream.capture(res, lambda r: nodes.append(kernels.axpby.launch_captured(stream, CONFIG, r.y, r.x,
                                                                                       2.0, 0.0, N)))
    (node,) = nodes
    assert node.config == CONFIG and node.contract == Axpby

    # New buffers and scalars, and a config covering only the first m elements.
    m = 1024  # a multiple of the block size: the grid covers exactly m elements
    graph.update_kernel(node, lambda r: ((r.extra["y2"], r.extra["x2"], 0.5, 1.5, m), mc.LaunchConfig.for_elements(m, 128)))
    graph.launch(stream)
    stream.synchronize()
    want = y2_h.astype(np.float64).copy()
    want[:m] = 0.5 * x2_h[:m] + 1.5 * y2_h[:m].astype(np.float64)
    assert rel_err(download(context, stream, res.extra["y2"]), want) < 1e-6
    np.testing.assert_array_equal(download(context, stream, res.y), y_h)  # the old target is untouched

    # Keyword arguments; the config stays the last one set (m elements).
    graph.update_kernel(node, lambda r: {"y": r.extra["y2"], "x": r.extra["x2"], "a": 1.0, "b": 0.0, "n": N})
    graph.launch(stream)
    stream.synchronize()
    got = download(context, stream, res.extra["y2"])
    np.testing.assert_array_equal(got[:m], x2_h[:m])
    assert rel_err(got[m:], want[m:]) < 1e-6


def test_updates_are_checked_like_launches_and_change_nothing_when_refused(context, stream, pool, kernels,
                                                                           rng) -> None:
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool),
                  extra={"f64": pool.allocate(mc.f64, stream, N)})
    nodes: list[mc.KernelNode] = []
    graph = stream.capture(res, lambda r: nodes.append(kernels.scale.launch_captured(stream, CONFIG, r.y, r.x,
                                                                                       2.0, N)))
    (node,) = nodes
    with pytest.raises(mc.ContractError, match="'input'"):
        graph.update_kernel(node, lambda r: (r.y, r.extra["f64"], 4.0, N))
    with pytest.raises(mc.ContractError, match="'n'"):
        graph.update_kernel(node, lambda r: (r.y, r.x, 4.0, -1))
    with pytest.raises(mc.LaunchConfigError):
        graph.update_kernel(node, lambda r: ((r.y, r.x, 4.0, N), mc.LaunchConfig(1, 4096)))
    with pytest.raises(mc.ContractError, match="prepare"):
        graph.update_kernel(node, lambda r: 42)
    with pytest.raises(KeyError):
        graph.update_kernel(node, lambda r: r.extra["missing"])
    graph.launch(stream)
    stream.synchronize()
    assert rel_err(download(context, stream, res.y), 2.0 * x_h.astype(np.float64)) < 1e-6

    class NotReady(Exception):
        pass

    with pytest.raises(NotReady) as info:
        graph.try_update_kernel(node, lambda r: r.extra["missing"], lambda exc: NotReady(f"page not ready: {exc}"))
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(mc.ContractError, match="convert"):
        graph.try_update_kernel(node, lambda r: r.extra["missing"], lambda exc: "not an exception")
    graph.try_update_kernel(node, lambda r: (r.out, r.x, 6.0, N), lambda exc: NotReady(str(exc)))
    graph.launch(stream)
    stream.synchronize()
    assert rel_err(download(context, stream, res.out), 6.0 * x_h.astype(np.float64)) < 1e-6

    # A node of another graph, and a value that is no node.
    other_nodes: list[mc.KernelNode] = []
    other = stream.capture(res, lambda r: other_nodes.append(kernels.scale.launch_captured(stream, CONFIG, r.y, r.x,
                                                                                           1.0, N)))
    with pytest.raises(mc.ContractError, match="another capture"):
        graph.update_kernel(other_nodes[0], lambda r: (r.y, r.x, 1.0, N))
    with pytest.raises(mc.ContractError, match="KernelNode"):
        graph.update_kernel("node", lambda r: (r.y, r.x, 1.0, N))
    other.close()
    graph.close()
    with pytest.raises(mc.ClosedResourceError):
        graph.update_kernel(node, lambda r: (r.y, r.x, 1.0, N))


def test_a_buffer_handed_to_an_update_is_held_by_the_graph(context, stream, pool, kernels, rng) -> None:
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool))
    nodes: list[mc.KernelNode] = []
    graph = stream.capture(res, lambda r: nodes.append(kernels.scale.launch_captured(stream, CONFIG, r.y, r.x,
                                                                                       2.0, N)))
    fresh = poisoned(stream, pool)
    graph.update_kernel(nodes[0], lambda r: (fresh, r.x, 4.0, N))  # noqa: F821  (called at once, before the del below)
    with pytest.raises(mc.ContractError, match="live graph"):
        fresh.free(stream)
    ref = weakref.ref(fresh)
    del fresh
    gc.collect()
    assert ref() is not None  # the graph keeps it alive
    graph.launch(stream)
    stream.synchronize()
    assert rel_err(download(context, stream, ref()), 4.0 * x_h.astype(np.float64)) < 1e-6
    graph.close()
    gc.collect()
    assert ref() is None


def test_kernel_nodes_know_the_contract_of_plain_launches(context, stream, pool, kernels, rng) -> None:
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool))

    def plain(r: Buffers) -> None:
        stream.memset(r.out, 0)
        kernels.scale.launch(stream, CONFIG, r.y, r.x, 2.0, N)
        kernels.add.launch(stream, CONFIG, r.out, r.y, r.x, N)

    graph = stream.capture(res, plain)
    listed = graph.kernel_nodes()
    assert sorted(n.contract.symbol for n in listed) == ["add", "scale"]
    scale_node = next(n for n in listed if n.contract == Scale)
    assert scale_node.config == CONFIG and scale_node.function == kernels.scale.handle
    graph.update_kernel(scale_node, lambda r: (r.y, r.x, -3.0, N))
    graph.launch(stream)
    stream.synchronize()
    assert rel_err(download(context, stream, res.out), -2.0 * x_h.astype(np.float64)) < 1e-6
    graph.close()


def test_launch_captured_outside_a_capture_enqueues_nothing(context, stream, pool, kernels) -> None:
    out = poisoned(stream, pool)
    x = pool.allocate_zeroed(mc.f32, stream, N)
    with pytest.raises(mc.CaptureError, match="not capturing"):
        kernels.scale.launch_captured(stream, CONFIG, out, x, 1.0, N)
    assert np.isnan(download(context, stream, out)).all()


# -- resources and lifetime -----------------------------------------------------------------------------

@dataclass
class Owned:
    x: mc.DeviceBuffer
    y: mc.DeviceBuffer
    host: mc.PinnedBuffer
    kernel: Any = None


def _graph_whose_resources_only_it_references(context, stream, pool, rng) -> tuple[mc.Graph, np.ndarray, list]:
    """Everything (buffers, pinned memory, even the module) is created here and only the graph keeps it."""
    kernel = mc.Compiler(context).compile(SOURCE).kernel(Scale)  # a compiler (and module cache) of its own
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Owned(upload(context, stream, pool, x_h), poisoned(stream, pool), context.allocate_pinned(mc.f32, N))

    def sequence(r: Owned) -> None:
        kernel.launch(stream, CONFIG, r.y, r.x, 4.0, N)
        stream.copy_to_host(r.y, r.host)

    graph = stream.capture(res, sequence)
    refs = [weakref.ref(o) for o in (res.x, res.y, res.host, kernel, kernel.module)]
    return graph, x_h, refs


def test_the_graph_keeps_its_resources_alive_when_every_user_reference_is_dropped(context, stream, pool,
                                                                                  rng) -> None:
    graph, x_h, refs = _graph_whose_resources_only_it_references(context, stream, pool, rng)
    gc.collect()
    assert all(r() is not None for r in refs)
    graph.launch(stream)
    stream.synchronize()
    got = graph.with_resources_mut(lambda r: r.host.to_numpy())
    assert rel_err(got, 4.0 * x_h.astype(np.float64)) < 1e-6
    graph.close()
    stream.synchronize()
    gc.collect()
    assert all(r() is None for r in refs[:3])  # the buffers went with the graph


def test_into_resources_returns_them_for_a_new_graph(context, stream, pool, kernels, rng) -> None:
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool))
    graph = stream.capture(res, lambda r: kernels.scale.launch(stream, CONFIG, r.y, r.x, 2.0, N))
    graph.launch(stream)
    back = graph.into_resources()  # no synchronization: the replay may still run
    assert back is res and graph.closed
    with pytest.raises(mc.ClosedResourceError):
        graph.launch(stream)
    with pytest.raises(mc.ClosedResourceError):
        graph.into_resources()
    replacement = stream.capture(back, lambda r: kernels.scale.launch(stream, CONFIG, r.out, r.y, 3.0, N))
    replacement.launch(stream)
    stream.synchronize()
    assert rel_err(download(context, stream, res.out), 6.0 * x_h.astype(np.float64)) < 1e-6
    res = replacement.into_resources()
    for buf in (res.x, res.y, res.out):
        buf.free(stream)  # no graph holds them any more


def test_with_resources_mut_lends_them_between_replays(context, stream, pool, kernels, rng) -> None:
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool))
    graph = stream.capture(res, lambda r: kernels.scale.launch(stream, CONFIG, r.y, r.x, 2.0, N))
    graph.launch(stream)
    x2_h = rng.standard_normal(N).astype(np.float32)
    staging = context.allocate_pinned(mc.f32, N)
    staging.write_prefix(x2_h)

    def prefill(r: Buffers) -> str:
        # Enqueued on the capture stream: after the replay above, before the next one.
        stream.copy_to_device(staging, r.x)
        r.extra["page"] = pool.allocate_zeroed(mc.f32, stream, 16)
        return "written"

    assert graph.with_resources_mut(prefill) == "written"
    with pytest.raises(mc.ContractError, match="live graph"):
        res.extra["page"].free(stream)  # a buffer put into the resources is held from then on
    graph.launch(stream)
    stream.synchronize()
    assert rel_err(download(context, stream, res.y), 2.0 * x2_h.astype(np.float64)) < 1e-6
    graph.close()
    res.extra["page"].free(stream)


# -- everything in one graph ------------------------------------------------------------------------------

def test_pool_allocation_and_free_inside_the_capture(context, stream, pool, kernels, rng) -> None:
    res = Buffers(pool.allocate(mc.f32, stream, N), poisoned(stream, pool), poisoned(stream, pool))
    temps: list[mc.DeviceBuffer] = []

    def with_temporary(r: Buffers) -> None:
        tmp = pool.allocate(mc.f32, stream, N)  # a graph allocation node
        temps.append(tmp)
        kernels.scale.launch(stream, CONFIG, tmp, r.x, 3.0, N)
        kernels.add.launch(stream, CONFIG, r.out, tmp, r.x, N)
        tmp.free(stream)  # a graph free node

    graph = stream.capture(res, with_temporary)
    assert temps[0].freed
    staging = context.allocate_pinned(mc.f32, N)
    for _ in range(3):  # the allocation is made and freed by every replay
        x_h = rng.standard_normal(N).astype(np.float32)
        staging.write_prefix(x_h)
        stream.copy_to_device(staging, res.x)
        graph.launch(stream)
        stream.synchronize()
        assert rel_err(download(context, stream, res.out), 4.0 * x_h.astype(np.float64)) < 1e-6
    graph.close()


def test_events_memsets_and_device_range_copies_inside_the_capture(context, stream, pool, kernels, rng) -> None:
    """A fork/join through events orders a side branch; memsets and D2D range copies are nodes too."""
    side = context.create_stream()
    fork, join = context.create_event(), context.create_event()
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool),
                  extra={"t": poisoned(stream, pool), "u": poisoned(stream, pool)})
    lo, m, dst = 100, 1500, 700

    def sequence(r: Buffers) -> None:
        t, u = r.extra["t"], r.extra["u"]
        kernels.scale.launch(stream, CONFIG, t, r.x, 2.0, N)          # t = 2x
        fork.record(stream)
        side.wait_event(fork)
        kernels.scale.launch(side, CONFIG, u, t, 3.0, N)              # u = 6x (needs t: the fork orders it)
        join.record(side)
        kernels.scale.launch(stream, CONFIG, r.y, t, 0.5, N)          # y = x
        stream.wait_event(join)
        kernels.add.launch(stream, CONFIG, r.out, u, r.y, N)          # out = 7x (needs u: the join orders it)
        stream.memset(r.y, 0)                                         # y = 0 ...
        stream.copy_device_range(r.out, lo, r.y, dst, m)              # ... but y[dst:dst+m] = out[lo:lo+m]

    graph = stream.capture(res, sequence)
    for _ in range(2):
        graph.launch(stream)
        stream.synchronize()
        out = 7.0 * x_h.astype(np.float64)
        assert rel_err(download(context, stream, res.out), out) < 1e-6
        y = np.zeros(N)
        y[dst:dst + m] = out[lo:lo + m]
        got = download(context, stream, res.y)
        assert not got[:dst].any() and not got[dst + m:].any()
        assert rel_err(got[dst:dst + m], y[dst:dst + m]) < 1e-6
        x_h = rng.standard_normal(N).astype(np.float32)
        graph.with_resources_mut(lambda r: stream.copy_device_range(upload(context, stream, pool, x_h), 0, r.x, 0, N))  # noqa: B023  (called at once)
    graph.close()
    side.close()


def test_pinned_copies_inside_the_capture_are_replayed(context, stream, pool, kernels, rng) -> None:
    @dataclass
    class Staged:
        host_in: mc.PinnedBuffer
        host_out: mc.PinnedBuffer
        dev: mc.DeviceBuffer
        out: mc.DeviceBuffer

    res = Staged(context.allocate_pinned(mc.f32, N), context.allocate_pinned(mc.f32, N), poisoned(stream, pool),
                 poisoned(stream, pool))

    def round_trip(r: Staged) -> None:
        stream.copy_to_device(r.host_in, r.dev)
        kernels.scale.launch(stream, CONFIG, r.out, r.dev, -2.0, N)
        stream.copy_to_host(r.out, r.host_out)

    graph = stream.capture(res, round_trip)
    for _ in range(3):
        x_h = rng.standard_normal(N).astype(np.float32)
        res.host_in.write_prefix(x_h)  # the captured copies left nothing for wait() to track
        res.host_out.write_prefix(np.full(N, np.nan, dtype=np.float32))
        graph.launch(stream)
        stream.synchronize()  # the replay is what the caller waits on
        assert rel_err(res.host_out.to_numpy(), -2.0 * x_h.astype(np.float64)) < 1e-6
    graph.close()
    # Outside a capture the copies are tracked again: to_numpy() waits for this one by itself.
    stream.copy_to_host(res.dev, res.host_out)
    np.testing.assert_array_equal(res.host_out.to_numpy(), x_h)


def _numba_square_plus(out, x, c):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * x[i] + c


def test_numba_export_and_cuda_c_kernel_in_one_graph(context, stream, pool, kernels, compiler, rng) -> None:
    """A CUDA C kernel feeds a Numba kernel inside one graph; both nodes are updated through their
    contracts (the Numba one in Numba's kernel ABI) without recapture."""
    Square = mc.cuda_export("_numba_square_plus", out=mc.Out[F32], x=mc.In[F32], c=mc.f32)
    square = compiler.compile(mn.numba_kernel(_numba_square_plus, "void(float32[:], float32[:], float32)")).kernel(Square)
    x_h = rng.standard_normal(N).astype(np.float32)
    res = Buffers(upload(context, stream, pool, x_h), poisoned(stream, pool), poisoned(stream, pool))
    nodes: dict[str, mc.KernelNode] = {}

    def sequence(r: Buffers) -> None:
        nodes["c"] = kernels.scale.launch_captured(stream, CONFIG, r.y, r.x, 2.0, N)      # y = 2x  (CUDA C)
        nodes["numba"] = square.launch_captured(stream, CONFIG, r.out, r.y, 1.0)         # out = y*y + 1 (Numba)

    graph = stream.capture(res, sequence)
    xd = x_h.astype(np.float64)
    graph.launch(stream)
    assert rel_err(download(context, stream, res.out), (2 * xd) ** 2 + 1) < 1e-6
    assert {n.contract for n in graph.kernel_nodes()} == {Scale, Square}
    graph.update_kernel(nodes["c"], lambda r: (r.y, r.x, -3.0, N))
    graph.update_kernel(nodes["numba"], lambda r: (r.out, r.y, 0.5))
    stream.memset(res.out, 0xFF)  # poison again: the replay must rewrite every element
    graph.launch(stream)
    assert rel_err(download(context, stream, res.out), (-3 * xd) ** 2 + 0.5) < 1e-6
    with pytest.raises(mc.ContractError, match="'c'"):
        graph.update_kernel(nodes["numba"], lambda r: (r.out, r.y, "one"))
    graph.close()


@dataclass
class MatmulStep:
    plan: Any
    a: mc.DeviceBuffer
    b: mc.DeviceBuffer
    c: mc.DeviceBuffer
    out: mc.DeviceBuffer


def _matmul_then_kernel_in_one_graph(context, stream, pool, kernels, rng, m, n, k, kernel=None) -> None:
    """Capture ``C = A B^T`` (a DenseMatmulPlan running a CUTLASS kernel) and ``out = s * C`` (a CUDA C
    kernel) in one graph, replay it three times with a new A each time, and check every replay against
    float64. The plan is among the graph's resources: its workspace is held with the buffers."""
    from matmul_helpers import assert_close, poison, random

    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), output=mc.f32, kernel=kernel)
    assert plan.kernel.origin == "cutlass", plan.describe()
    b_h = random(rng, mc.bf16, n, k)
    res = MatmulStep(plan, upload(context, stream, pool, random(rng, mc.bf16, m, k).ravel()),
                     upload(context, stream, pool, b_h.ravel()), upload(context, stream, pool, poison(mc.f32, m * n)),
                     poisoned(stream, pool, m * n))
    s = 0.5
    config = mc.LaunchConfig.for_elements(m * n, 256)

    def step(r: MatmulStep) -> None:
        r.plan.execute(stream, r.a, r.b, r.c, 1.0, 0.0)
        kernels.scale.launch(stream, config, r.out, r.c, s, m * n)

    graph = stream.capture(res, step)
    assert np.isnan(download(context, stream, res.out)).all()  # capturing ran nothing
    symbols = [n.contract.symbol if n.contract is not None else None for n in graph.kernel_nodes()]
    assert symbols.count("scale") == 1 and None in symbols  # CUTLASS's launch is a node of unknown contract
    staging = context.allocate_pinned(mc.bf16, m * k)
    b64 = b_h.astype(np.float64)
    for _ in range(3):
        a_h = random(rng, mc.bf16, m, k)
        staging.write_prefix(a_h.ravel())
        stream.copy_to_device(staging, res.a)
        stream.memset(res.out, 0xFF)
        graph.launch(stream)
        got = download(context, stream, res.out).reshape(m, n)
        a64 = a_h.astype(np.float64)
        assert_close(got, s * (a64 @ b64.T), s * (np.abs(a64) @ np.abs(b64).T), "f32")
    graph.close()
    staging.close()
    for buf in (res.a, res.b, res.c, res.out):
        buf.free(stream)
    plan.close()


@pytest.mark.cutlass
def test_cutlass_plan_execute_in_a_graph(context, stream, pool, kernels, rng) -> None:
    # M = 256: a CUTLASS kernel without split-K (on an H200 the ping-pong kernel; no workspace).
    _matmul_then_kernel_in_one_graph(context, stream, pool, kernels, rng, 256, 264, 520)


@pytest.mark.cutlass
def test_cutlass_split_k_plan_in_a_graph(context, stream, pool, kernels, rng) -> None:
    # Split-K: CUTLASS zeroes the reduction flags of its workspace on the stream at every execute
    # (a memset node in the graph) before the kernel; the workspace stays the plan's.
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("the split-K kernel is SM90's")
    plan_kernel = "sm90_swap_128x32x128_splitk_bf16_f32"
    probe = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(4, 4096, 1024), output=mc.f32, kernel=plan_kernel)
    assert probe.splits > 1 and probe.workspace_bytes > 0, probe.describe()
    probe.close()
    _matmul_then_kernel_in_one_graph(context, stream, pool, kernels, rng, 4, 4096, 1024, kernel=plan_kernel)
