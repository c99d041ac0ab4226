"""The typed launch path without a device: a stand-in driver launch entry records what each launch
hands the driver. Each thread packs into its own parameter block (two threads, a barrier between
packing and the call, so both blocks are written before either is read); a refused launch never
reaches the entry, and a refused graph launch never reaches cuGraphLaunch."""

from __future__ import annotations

import ctypes
import struct
import threading
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from hotpath_stand_in import keep_bindings
from mircuda import _cuda
from mircuda.launch import _abi, _kernel
from mircuda.runtime import Stream

Scale = mc.cuda_export("scale", out=mc.Out[mc.DeviceBuffer[mc.f32]], value=mc.f32, n=mc.u32)
CONFIG = mc.LaunchConfig(4, 128)
SLOT_SIZES = (8, 4, 4)


class FakeContext:
    """Stands in for a Context: the launch path compares identities and reads ``handle``. Closed, so
    finalizers do nothing."""

    _closed = True
    _handle = handle = 0xC0


def fake_buffer(ctx: FakeContext, count: int, ptr: int) -> mc.DeviceBuffer:
    return mc.DeviceBuffer._adopt(ctx, None, mc.dtypes.dtype_info(mc.f32), count, ptr)  # type: ignore[arg-type]


def fake_stream(ctx: FakeContext, handle: int) -> Stream:
    stream = object.__new__(Stream)
    stream._context, stream._cu, stream._handle, stream._priority = ctx, None, handle, 0
    stream._finalizer = None
    return stream


def read_block(params: int) -> bytes:
    """The packed parameters behind a ``void**`` as the driver reads them."""
    pointers = (ctypes.c_void_p * len(SLOT_SIZES)).from_address(params)
    return b"".join(ctypes.string_at(p, size) for p, size in zip(pointers, SLOT_SIZES))


LAUNCH_C = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)


@pytest.fixture(params=["function-writes", "bound-python", "bound-c"])
def kernel(monkeypatch, request) -> Any:
    """A TypedKernel of ``Scale`` bound to a made-up function handle (no driver call at bind time).

    Three ways to the entry point the test sets as ``_cuda.launch_kernel``: the launch function writes the
    block itself (an ABI without ``emit_values``, as Numba's), or it hands the values to a bound launcher,
    Python's or the C extension's (which then calls the test's entry through a C trampoline)."""
    attrs = _kernel.FunctionAttributes(32, 0, 0, 1024, 90)
    monkeypatch.setattr(_kernel, "_read_attributes", lambda f: attrs)
    values = None if request.param == "function-writes" else _abi.emit_c_values
    monkeypatch.setitem(_abi.LAUNCH_ABIS, "c", _abi.LaunchAbi("c", _abi.c_slots, _abi.emit_c_writes,
                                                              lambda contract, f: None, values))
    if request.param == "bound-c":
        hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")
        if not hasattr(hotpath, "bind_launch"):
            pytest.skip("the C extension predates bind_launch (rebuild: python setup.py build_ext --inplace)")
        real = keep_bindings(monkeypatch)
        trampoline = LAUNCH_C(lambda f, gx, gy, gz, bx, by, bz, smem, stream, params, extra:
                              _cuda.launch_kernel(f or 0, gx, gy, gz, bx, by, bz, smem, stream or 0, params or 0))
        hotpath.set_entry_points(ctypes.cast(trampoline, ctypes.c_void_p).value, 0, 0)
        monkeypatch.setattr(_cuda, "bound_hotpath", hotpath)
        monkeypatch.setattr(_abi, "_launcher_for", lambda config: hotpath.launch_kernel)
    ctx = FakeContext()
    k = _kernel.TypedKernel(SimpleNamespace(context=ctx), Scale, 0xF00D)  # type: ignore[arg-type]
    k._checked[CONFIG] = (*CONFIG.grid, *CONFIG.block, 0)  # the geometry check needs a device: done
    yield k
    _kernel._BY_FUNCTION.pop(0xF00D, None)
    if request.param == "bound-c":  # the driver's own entry points where this process bound them
        hotpath.set_entry_points(real.get("cuLaunchKernel", 0), real.get("cuGraphLaunch", 0),
                                 real.get("cuEventRecord", 0))


def test_each_thread_launches_its_own_packed_arguments(kernel, monkeypatch) -> None:
    ctx = kernel._context
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[int, bytes] = {}

    def entry(f, gx, gy, gz, bx, by, bz, smem, stream, params):  # type: ignore[no-untyped-def]
        barrier.wait()  # both threads have packed their arguments before either block is read
        seen[stream] = read_block(params)
        return 0

    monkeypatch.setattr(_cuda, "launch_kernel", entry)
    jobs = {0x51: (fake_buffer(ctx, 512, 0x1000), 1.5, 512), 0x52: (fake_buffer(ctx, 64, 0x2000), -2.0, 64)}
    errors: list[BaseException] = []

    def launch(stream_handle: int) -> None:
        try:
            kernel.launch(fake_stream(ctx, stream_handle), CONFIG, *jobs[stream_handle])
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    other = threading.Thread(target=launch, args=(0x52,))
    other.start()
    launch(0x51)  # the thread that bound the kernel (its owner) and another thread, at the same time
    other.join()
    assert not errors, errors
    for handle, (buf, value, n) in jobs.items():
        assert seen[handle] == struct.pack("<QfI", buf.handle, value, n), f"stream {handle:#x}"


def test_two_threads_that_do_not_own_the_kernel_get_two_blocks(kernel, monkeypatch) -> None:
    ctx = kernel._context
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[int, bytes] = {}

    def entry(f, gx, gy, gz, bx, by, bz, smem, stream, params):  # type: ignore[no-untyped-def]
        barrier.wait()
        seen[stream] = read_block(params)
        return 0

    monkeypatch.setattr(_cuda, "launch_kernel", entry)
    args = {0x61: (fake_buffer(ctx, 8, 0x3000), 0.25, 8), 0x62: (fake_buffer(ctx, 9, 0x4000), 4.0, 9)}
    threads = [threading.Thread(target=kernel.launch, args=(fake_stream(ctx, h), CONFIG, *a)) for h, a in args.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for handle, (buf, value, n) in args.items():
        assert seen[handle] == struct.pack("<QfI", buf.handle, value, n), f"stream {handle:#x}"


def refused_launches(ctx: FakeContext) -> list[tuple[tuple[Any, ...], type[BaseException]]]:
    other_ctx = FakeContext()
    good = fake_buffer(ctx, 16, 0x1000)
    freed = fake_buffer(ctx, 16, 0x5000)
    freed._freed, freed._ptr = True, 0  # as DeviceBuffer.free leaves it
    stream = fake_stream(ctx, 0x71)
    closed = fake_stream(ctx, 0)
    f64 = mc.DeviceBuffer._adopt(ctx, None, mc.dtypes.dtype_info(mc.f64), 16, 0x6000)  # type: ignore[arg-type]
    return [
        ((stream, CONFIG, f64, 1.0, 16), mc.ContractError),                  # wrong dtype
        ((stream, CONFIG, fake_buffer(other_ctx, 16, 0x7000), 1.0, 16), mc.ContractError),  # other context
        ((stream, CONFIG, freed, 1.0, 16), mc.UseAfterFree),
        ((stream, CONFIG, good, "1.0", 16), mc.ContractError),               # not a number
        ((stream, CONFIG, good, 1.0, -1), mc.ContractError),                 # out of u32's range
        ((stream, CONFIG, good, 1.0), mc.ContractError),                     # missing argument
        ((stream, CONFIG, good, 1.0, 16, 3), mc.ContractError),              # one too many
        ((closed, CONFIG, good, 1.0, 16), mc.ClosedResourceError),
        ((fake_stream(other_ctx, 0x72), CONFIG, good, 1.0, 16), mc.ContractError),
        ((stream, "config", good, 1.0, 16), mc.LaunchConfigError),
    ]


@pytest.mark.parametrize("thread", ["owner", "other"])
def test_a_refused_launch_never_reaches_the_driver(kernel, monkeypatch, thread) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_cuda, "launch_kernel", lambda *args: calls.append(args) or 0)
    ctx = kernel._context
    outcomes: list[str] = []

    def run() -> None:
        for args, error in refused_launches(ctx):
            try:
                kernel.launch(*args)
            except error:
                outcomes.append("refused")
            else:
                outcomes.append(f"accepted {args[2:]}")
        kernel.launch(fake_stream(ctx, 0x71), CONFIG, fake_buffer(ctx, 16, 0x1000), 1.0, 16)

    if thread == "owner":
        run()
    else:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    assert outcomes == ["refused"] * len(refused_launches(ctx))
    assert len(calls) == 1 and calls[0][-2] == 0x71  # only the last, valid launch


def test_a_refused_graph_launch_never_reaches_the_driver(monkeypatch) -> None:
    from mircuda.graph._capture import CaptureRecord

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_cuda, "graph_launch", lambda *args: calls.append(args) or 0)
    ctx = FakeContext()
    stream, other = fake_stream(ctx, 0x81), fake_stream(ctx, 0x82)
    native = SimpleNamespace(kernels=[])
    graph = mc.Graph._create(stream, None, 0xA, 0xB, CaptureRecord(stream, 7, nodes={}), native)  # type: ignore[arg-type]
    with pytest.raises(mc.GraphStreamError):
        graph.launch(other)
    with pytest.raises(mc.GraphStreamError):
        graph.launch(None)  # type: ignore[arg-type]
    stream._handle = 0  # as Stream.close leaves it
    with pytest.raises(mc.ClosedResourceError):
        graph.launch(stream)
    assert calls == []
    stream._handle = 0x81
    graph.launch(stream)
    assert calls == [(0xB, 0x81)]
