"""The libraries ``graph-profile`` measures, each behind one interface: mircuda (``TypedKernel.launch``,
``Graph.launch``), raw ``cuda.bindings`` ``cuGraphLaunch`` of mircuda's graph, torch (``CUDAGraph``) and
CuPy (stream capture). Each enqueues N ``tick`` kernels directly or as one graph replay on a stream of
its own; :func:`spin_on_handle` puts mircuda's spin kernel on any of those streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BindingsPath", "CuPyPath", "LibraryPath", "MircudaPath", "TorchPath", "spin_on_handle"]


class LibraryPath:
    """One library's way to enqueue N ticks directly and as a graph replay, on one stream of its own."""

    name = ""
    stream_handle = 0

    def sync(self) -> None:
        raise NotImplementedError

    def direct(self, n: int) -> Callable[[], None]:
        raise NotImplementedError

    def graph(self, n: int) -> Callable[[], None]:
        raise NotImplementedError

    def events(self) -> tuple[Callable[[], None], Callable[[], None], Callable[[], float]]:
        """``(record start, record end, elapsed ms)`` on this path's stream."""
        raise NotImplementedError

    def count(self) -> int:
        """The device counter (synchronizes)."""
        raise NotImplementedError


class MircudaPath(LibraryPath):
    name = "mircuda"

    def __init__(self, mc: Any, context: Any, module: Any) -> None:
        self.mc = mc
        self.context = context
        self.stream = context.create_stream()
        self.stream_handle = self.stream.handle
        self.tick = module.kernel(mc.cuda_export("tick", counter=mc.InOut[mc.DeviceBuffer[mc.u32]]))
        self.counter = context.default_memory_pool().allocate_zeroed(mc.u32, self.stream, 1)
        self.config = mc.LaunchConfig(1, 32)
        self.graphs: list[Any] = []
        self.start, self.end = context.create_event(timing=True), context.create_event(timing=True)

    def sync(self) -> None:
        self.stream.synchronize()

    def direct(self, n: int) -> Callable[[], None]:
        launch, stream, config, counter = self.tick.launch, self.stream, self.config, self.counter

        def run() -> None:
            for _ in range(n):
                launch(stream, config, counter)
        return run

    def capture(self, n: int) -> Any:
        def sequence(counter: Any) -> None:
            for _ in range(n):
                self.tick.launch(self.stream, self.config, counter)

        graph = self.stream.capture(self.counter, sequence)
        self.graphs.append(graph)
        return graph

    def graph(self, n: int) -> Callable[[], None]:
        graph = self.capture(n)
        launch, stream = graph.launch, self.stream
        return lambda: launch(stream)

    def events(self) -> tuple[Callable[[], None], Callable[[], None], Callable[[], float]]:
        return (lambda: self.start.record(self.stream), lambda: self.end.record(self.stream),
                lambda: self.mc.Event.elapsed_ms(self.start, self.end))

    def count(self) -> int:
        host = self.context.allocate_pinned(self.mc.u32, 1)
        self.stream.copy_to_host(self.counter, host)
        return int(host.to_numpy()[0])


class BindingsPath(MircudaPath):
    """cuda.bindings' ``cuGraphLaunch`` on mircuda's own graph: the wrapper cost beside Graph.launch."""

    name = "cuda.bindings cuGraphLaunch"

    def graph(self, n: int) -> Callable[[], None]:
        from cuda.bindings import driver as drv

        graph = self.capture(n)
        ge, cs = drv.CUgraphExec(graph.handle), drv.CUstream(self.stream.handle)
        return lambda: drv.cuGraphLaunch(ge, cs)


class TorchPath(LibraryPath):
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.stream = torch.cuda.Stream()
        torch.cuda.set_stream(self.stream)  # replay() and add_() use the current stream
        self.stream_handle = int(self.stream.cuda_stream)
        self.x = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.x.add_(1)  # load the kernel before any capture, then start the count from zero
        self.x.zero_()
        self.stream.synchronize()
        self.graphs: list[Any] = []
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def sync(self) -> None:
        self.stream.synchronize()

    def direct(self, n: int) -> Callable[[], None]:
        x = self.x

        def run() -> None:
            for _ in range(n):
                x.add_(1)
        return run

    def graph(self, n: int) -> Callable[[], None]:
        g = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(g, stream=self.stream):
            for _ in range(n):
                self.x.add_(1)
        self.torch.cuda.set_stream(self.stream)
        self.graphs.append(g)
        return g.replay

    def events(self) -> tuple[Callable[[], None], Callable[[], None], Callable[[], float]]:
        return (lambda: self.start.record(self.stream), lambda: self.end.record(self.stream),
                lambda: float(self.start.elapsed_time(self.end)))

    def count(self) -> int:
        self.stream.synchronize()
        return int(self.x.item())


class CuPyPath(LibraryPath):
    name = "CuPy"

    def __init__(self, source: str) -> None:
        import cupy as cp

        self.cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.stream.use()  # launches without a `with` block go to the current stream
        self.stream_handle = int(self.stream.ptr)
        self.kernel = cp.RawKernel(source, "tick")
        self.counter = cp.zeros(1, dtype=cp.uint32)
        self.kernel((1,), (32,), (self.counter,))  # compile and load before any capture, then reset
        self.counter.fill(0)
        self.stream.synchronize()
        self.graphs: list[Any] = []
        self.start, self.end = cp.cuda.Event(), cp.cuda.Event()

    def sync(self) -> None:
        self.stream.synchronize()

    def direct(self, n: int) -> Callable[[], None]:
        k, counter = self.kernel, self.counter

        def run() -> None:
            for _ in range(n):
                k((1,), (32,), (counter,))
        return run

    def graph(self, n: int) -> Callable[[], None]:
        self.stream.begin_capture()
        for _ in range(n):
            self.kernel((1,), (32,), (self.counter,))
        g = self.stream.end_capture()
        g.upload(self.stream)
        self.graphs.append(g)
        stream = self.stream
        return lambda: g.launch(stream)

    def events(self) -> tuple[Callable[[], None], Callable[[], None], Callable[[], float]]:
        return (lambda: self.start.record(self.stream), lambda: self.end.record(self.stream),
                lambda: float(self.cp.cuda.get_elapsed_time(self.start, self.end)))

    def count(self) -> int:
        self.stream.synchronize()
        return int(self.counter.get()[0])


def spin_on_handle(context: Any, compiler: Any) -> Callable[[int, int], None]:
    """``spin(stream_handle, nanoseconds)``: :mod:`mircuda.timing`'s spin kernel enqueued on any stream of
    ``context``'s device by its raw handle (torch's and CuPy's streams too: all use the primary context);
    ``compiler`` (a Compiler of ``context``) compiles it."""
    import mircuda as mc

    from .. import _cuda
    from ..timing import spin_kernel

    kernel = spin_kernel(compiler)
    packer = mc.ArgumentPacker(kernel.contract, context)

    def spin(stream_handle: int, ns: int) -> None:
        packer.pack(ns)
        context._make_current()
        r = _cuda.launch_kernel(kernel.handle, 1, 1, 1, 32, 1, 1, 0, stream_handle, packer.block.params_address)
        if r:
            _cuda.raise_result(r, "cuLaunchKernel", "mircuda_spin")
    return spin
