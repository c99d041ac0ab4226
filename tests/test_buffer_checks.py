"""One check for "a live DeviceBuffer[T] of this context with at least n elements" (kernel arguments,
plan operands, stream copies), MemoryPool's raw byte interface, and the marker that keeps a graph's
resource walk out of mircuda's runtime handles -- all without a device."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.graph import reachable_buffers
from mircuda.matmul._spec import Operand, check_operand
from mircuda.memory import check_device_buffer


class FakeContext:
    """Stands in for a Context: the checks compare it by identity. Closed, so finalizers and frees do nothing."""

    _closed = True
    _handle = 1
    handle = 1

    def _make_current(self) -> None:
        pass

    def _memory_alive(self) -> bool:
        return False  # closed, and no other Context holds its device


def fake_buffer(ctx: FakeContext, dtype: type = mc.f32, count: int = 8, ptr: int = 0x1000) -> mc.DeviceBuffer:
    return mc.DeviceBuffer._adopt(ctx, None, dtype_info(dtype), count, ptr)  # type: ignore[arg-type]


def fake_stream(ctx: FakeContext, handle: int = 0x50) -> mc.Stream:
    stream = object.__new__(mc.Stream)
    stream._context, stream._handle, stream._cu = ctx, handle, handle
    return stream


def _freed(ctx: FakeContext) -> mc.DeviceBuffer:
    buf = fake_buffer(ctx)
    buf._freed, buf._ptr = True, 0
    return buf


BAD = {
    "another dtype": (lambda ctx: fake_buffer(ctx, mc.f16), mc.ContractError,
                      r"expected a DeviceBuffer\[f32\], received a DeviceBuffer\[f16\]"),
    "another context": (lambda ctx: fake_buffer(FakeContext()), mc.ContractError, "expected a buffer of"),
    "freed": (_freed, mc.UseAfterFree, "was freed"),
    "a host array": (lambda ctx: np.zeros(8, np.float32), mc.ContractError,
                     "host arrays must be copied.*allocate_pinned"),
    "not a buffer": (lambda ctx: "buffer", mc.ContractError, r"expected a DeviceBuffer\[f32\].*received str"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_launch_plans_and_copies_refuse_a_bad_buffer_alike(case: str) -> None:
    ctx = FakeContext()
    make, error, message = BAD[case]
    packer = mc.ArgumentPacker(mc.cuda_export("k", x=mc.DeviceBuffer[mc.f32]), ctx)
    stream = fake_stream(ctx)
    good = fake_buffer(ctx)
    refusals = {
        "launch": lambda v: packer.pack(v),
        "plan": lambda v: check_operand(Operand("x", dtype_info(mc.f32), 8, "[K] = [8]", 4, "f32 loads"), v, ctx),  # type: ignore[arg-type]
        "copy": lambda v: stream.copy_device_range(v, 0, good, 0, 1),
        "memset": lambda v: stream.memset(v, 0),
        "check": lambda v: check_device_buffer("x", v, ctx, dtype_info(mc.f32)),  # type: ignore[arg-type]
    }
    for where, refuse in refusals.items():
        if where in ("copy", "memset") and case in ("another dtype", "not a buffer"):
            continue  # copies take any dtype (src and dst must agree); "not a buffer" names no dtype there
        with pytest.raises(error, match=message) as info:
            refuse(make(ctx))
        if isinstance(info.value, mc.ContractError):
            assert info.value.argument == ("src" if where == "copy" else "buffer" if where == "memset" else "x"), where


def test_the_check_counts_elements_and_returns_the_buffer() -> None:
    ctx = FakeContext()
    buf = fake_buffer(ctx, count=8)
    assert check_device_buffer("x", buf, ctx, dtype_info(mc.f32), 8) is buf  # type: ignore[arg-type]
    assert check_device_buffer("x", buf, ctx) is buf  # type: ignore[arg-type]  # any dtype
    with pytest.raises(mc.ContractError, match=r"expected at least 9 elements \(\[K\] = \[9\]\), received 8 elements"):
        check_device_buffer("x", buf, ctx, dtype_info(mc.f32), 9, "[K] = [9]")  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match=r"expected a DeviceBuffer\[f32\] of \[K\] = \[9\]"):
        check_operand(Operand("x", dtype_info(mc.f32), 9, "[K] = [9]", 4, "f32 loads"), None, ctx)  # type: ignore[arg-type]
    assert check_operand(Operand("x", dtype_info(mc.f32), 8, "[K] = [8]", 4, "f32 loads"), buf, ctx) == 0x1000  # type: ignore[arg-type]


def test_pool_raw_bytes_are_checked_before_the_driver() -> None:
    ctx = FakeContext()
    pool = mc.MemoryPool._wrap(ctx, 0)  # type: ignore[arg-type]
    stream = fake_stream(ctx)
    for nbytes in (-1, 1.5, True, None, 2**64):  # 2**64: beyond the driver's size_t
        with pytest.raises(mc.ContractError, match="nbytes"):
            pool.allocate_bytes(stream, nbytes)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="stream"):
        pool.allocate_bytes("stream", 64)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="stream"):
        pool.allocate_bytes(fake_stream(FakeContext()), 64)
    with pytest.raises(mc.ClosedResourceError):
        pool.allocate_bytes(fake_stream(ctx, handle=0), 64)
    for address in (-1, 1.5, "0x1000", None):
        with pytest.raises(mc.ContractError, match="address"):
            pool.free_bytes(stream, address)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="stream"):
        pool.free_bytes(fake_stream(FakeContext()), 0x1000)
    pool.free_bytes(stream, 0)  # address 0 (a zero-byte allocation) is nothing to free
    pool.free_bytes(stream, 0x1000)  # the context is closed: its memory went with it, no driver call


def test_sizes_beyond_the_drivers_size_t_are_refused_by_name_before_the_driver() -> None:
    ctx = FakeContext()
    pool = mc.MemoryPool._wrap(ctx, 0)  # type: ignore[arg-type]
    stream = fake_stream(ctx)
    with pytest.raises(mc.ContractError, match=r"'count'.*at most 2305843009213693951 elements of f64"):
        pool.allocate(mc.f64, stream, 2**61)  # 2**64 bytes
    with pytest.raises(mc.ContractError, match=r"'count'.*at most 4611686018427387903 elements of f32"):
        pool.allocate(mc.f32, stream, np.uint64(2**62))  # a numpy count, sized as a Python int
    with pytest.raises(mc.ContractError, match="release_threshold"):
        pool.release_threshold = 2**64
    with pytest.raises(mc.ContractError, match="keep_bytes"):
        pool.trim_to(2**64)


def test_the_runtime_handles_carry_the_marker_the_graph_walk_stops_at() -> None:
    from mircuda.graph._resources import OPAQUE_MARKER

    handles = (mc.Driver, mc.Device, mc.Context, mc.Stream, mc.Event, mc.ProfilerRange, mc.MemoryPool,
               mc.PinnedBuffer, mc.Compiler, mc.Module, mc.TypedKernel, mc.KernelContract, mc.LaunchConfig,
               mc.Graph, mc.KernelNode)
    assert all(getattr(cls, OPAQUE_MARKER) is True for cls in handles)
    assert not hasattr(mc.DeviceBuffer, OPAQUE_MARKER)  # a buffer is what the walk looks for


def test_the_graph_walk_stops_at_the_marker_and_only_there() -> None:
    ctx = FakeContext()

    class Handle:
        _graph_opaque = True

        def __init__(self, buffer: mc.DeviceBuffer) -> None:
            self.buffer = buffer

    class Plain:
        def __init__(self, buffer: mc.DeviceBuffer) -> None:
            self.buffer = buffer

    class Truthy:
        _graph_opaque = "yes"  # only True marks a handle

        def __init__(self, buffer: mc.DeviceBuffer) -> None:
            self.buffer = buffer

    inside, plain, truthy = fake_buffer(ctx, ptr=0x1000), fake_buffer(ctx, ptr=0x2000), fake_buffer(ctx, ptr=0x3000)
    assert reachable_buffers([Handle(inside), Plain(plain), Truthy(truthy)]) == [plain, truthy]
    stream = fake_stream(ctx)
    assert reachable_buffers({"stream": stream, "launch": mc.LaunchConfig(1, 32)}) == []
