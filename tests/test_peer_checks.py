"""Several devices without a device: which buffers of another context a kernel, a plan or a copy takes
(pool buffers after MemoryPool.set_access, borrowed buffers after Context.enable_peer_access), and the
refusals of the peer methods that come before any driver call."""

from __future__ import annotations

from typing import Any

import pytest

import mircuda as mc
from mircuda import _cuda
from mircuda.dtypes import dtype_info
from mircuda.memory import _pool, check_device_buffer, peer_accessible


def fake_context(ordinal: int, handle: int) -> mc.Context:
    """A Context stand-in of device ``ordinal`` (open; no driver behind it)."""
    ctx = object.__new__(mc.Context)
    ctx._device = mc.Device(ordinal, ordinal)
    ctx._handle = handle
    ctx._cu = handle
    ctx._closed = False
    ctx._peers = set()
    ctx._pool = mc.MemoryPool._wrap(ctx, 0x9000 + ordinal)
    ctx._streams = set()  # type: ignore[assignment]
    return ctx


def fake_buffer(ctx: mc.Context, cls: Any = mc.DeviceBuffer, count: int = 8) -> mc.DeviceBuffer:
    buf = cls._adopt(ctx, None, dtype_info(mc.f32), count, 0x1000)
    if buf._finalizer is not None:
        buf._finalizer.detach()  # nothing to free: no driver
    return buf


def fake_stream(ctx: mc.Context, handle: int = 0x50) -> mc.Stream:
    stream = object.__new__(mc.Stream)
    stream._context, stream._handle, stream._cu = ctx, handle, handle
    return stream


@pytest.fixture(autouse=True)
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # Making a context current is the only driver call before the refusals tested here.
    monkeypatch.setattr(_cuda, "make_current", lambda handle, force=False: None)
    monkeypatch.setattr(_pool, "_ACCESS", {})  # the stand-in pools' grants stay within each test


def test_a_pool_buffer_of_another_device_is_refused_by_name_until_its_pool_grants_access() -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    buf = fake_buffer(gpu0)
    packer = mc.ArgumentPacker(mc.cuda_export("k", x=mc.DeviceBuffer[mc.f32]), gpu1)
    with pytest.raises(mc.ContractError, match=r"argument 'x'.*pool.set_access\(context\)") as info:
        packer.pack(buf)
    assert info.value.argument == "x"
    assert not peer_accessible(buf, gpu1)
    gpu0._pool._access.add(1)  # what a successful set_access(gpu1) records
    assert peer_accessible(buf, gpu1)
    assert check_device_buffer("x", buf, gpu1, dtype_info(mc.f32), 8) is buf
    assert len(packer.pack(buf)) == 8  # one device address
    # Another device's grant does not open it to a third device.
    gpu2 = fake_context(2, 0x300)
    with pytest.raises(mc.ContractError, match="argument 'x'"):
        check_device_buffer("x", buf, gpu2)
    # enable_peer_access does not open pool memory (the driver would fault): only the pool's grant does.
    gpu0._pool._access.clear()
    gpu1._peers.add(gpu0.handle)
    with pytest.raises(mc.ContractError, match="argument 'x'"):
        check_device_buffer("x", buf, gpu1)


def test_a_borrowed_buffer_of_another_device_needs_enable_peer_access() -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    borrowed = fake_buffer(gpu0, mc.BorrowedDeviceBuffer)
    borrowed._owner, borrowed._readonly = None, False
    with pytest.raises(mc.ContractError, match="argument 'a'.*enable_peer_access"):
        check_device_buffer("a", borrowed, gpu1)
    gpu1._peers.add(gpu0.handle)
    assert check_device_buffer("a", borrowed, gpu1) is borrowed
    # The grant is one-way: gpu0 has not enabled access to gpu1.
    other = fake_buffer(gpu1, mc.BorrowedDeviceBuffer)
    other._owner, other._readonly = None, False
    with pytest.raises(mc.ContractError, match="argument 'a'"):
        check_device_buffer("a", other, gpu0)


def test_a_closed_owner_or_a_freed_buffer_is_refused_even_after_a_grant() -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    buf = fake_buffer(gpu0)
    gpu0._pool._access.add(1)
    gpu0._closed = True
    with pytest.raises(mc.ContractError, match="argument 'x'.*closed|argument 'x'"):
        check_device_buffer("x", buf, gpu1)
    gpu0._closed = False
    buf._freed, buf._ptr = True, 0
    with pytest.raises(mc.UseAfterFree):
        check_device_buffer("x", buf, gpu1)


def test_a_context_of_the_same_device_is_still_refused_without_a_hint() -> None:
    a, b = fake_context(0, 0x100), fake_context(0, 0x100)
    b._device = a._device
    with pytest.raises(mc.ContractError) as info:
        check_device_buffer("x", fake_buffer(a), b)
    assert "set_access" not in str(info.value)


def test_enable_peer_access_refuses_before_the_driver() -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    with pytest.raises(mc.ContractError, match="argument 'other'.*a mircuda Context.*received int"):
        gpu0.enable_peer_access(0x200)  # type: ignore[arg-type]
    same = fake_context(0, 0x100)
    same._device = gpu0._device
    with pytest.raises(mc.ContractError, match="argument 'other': expected a context of another device"):
        gpu0.enable_peer_access(same)
    gpu1._closed = True
    with pytest.raises(mc.ClosedResourceError, match="'other'"):
        gpu0.enable_peer_access(gpu1)
    with pytest.raises(mc.ClosedResourceError):
        gpu0.can_access_peer(gpu1)
    assert gpu0.can_access_peer(same)  # its own device: no driver call
    gpu1._closed = False
    gpu0._peers.add(gpu1.handle)
    gpu0.enable_peer_access(gpu1)  # already enabled: idempotent, no driver call
    assert gpu0.peer_access_enabled(gpu1) and not gpu1.peer_access_enabled(gpu0)


def test_pool_set_access_refuses_before_the_driver() -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    pool = gpu0._pool
    assert pool is not None
    with pytest.raises(mc.ContractError, match="argument 'context'.*received str"):
        pool.set_access("gpu1")  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="argument 'read_write'.*a bool.*received 1"):
        pool.set_access(gpu1, 1)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="argument 'context'.*another device.*always has access"):
        pool.set_access(gpu0)
    assert pool.access_granted(gpu0)  # its own device: no driver call
    gpu1._closed = True
    with pytest.raises(mc.ClosedResourceError):
        pool.set_access(gpu1)


def test_copy_peer_refuses_bad_operands_and_a_stream_of_neither_context() -> None:
    gpu0, gpu1, gpu2 = fake_context(0, 0x100), fake_context(1, 0x200), fake_context(2, 0x300)
    src, dst = fake_buffer(gpu0), fake_buffer(gpu1, count=4)
    with pytest.raises(mc.ContractError, match="argument 'stream': expected a stream of the context of src"):
        fake_stream(gpu2).copy_peer(src, dst, 2)
    with pytest.raises(mc.ContractError, match="argument 'count'.*len\\(dst\\) = 4"):
        fake_stream(gpu0).copy_peer(src, dst)
    with pytest.raises(mc.ContractError, match="argument 'dst'.*a DeviceBuffer.*received str"):
        fake_stream(gpu0).copy_peer(src, "dst")  # type: ignore[arg-type]
    f16 = mc.DeviceBuffer._adopt(gpu1, None, dtype_info(mc.f16), 8, 0x2000)  # type: ignore[arg-type]
    f16._finalizer.detach()  # type: ignore[union-attr]
    with pytest.raises(mc.ContractError, match="argument 'dst'.*dtype float32.*float16"):
        fake_stream(gpu1).copy_peer(src, f16)
    gpu1._closed = True
    with pytest.raises(mc.ClosedResourceError):
        fake_stream(gpu0).copy_peer(src, dst, 2)


def test_copy_peer_engine_is_copy_or_sm_and_sm_needs_the_other_buffer_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    src, dst = fake_buffer(gpu0), fake_buffer(gpu1)
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_cuda, "call", lambda *a: calls.append(a))
    from mircuda.compile import _peer_copy

    monkeypatch.setattr(_peer_copy, "sm_copy", lambda *a: calls.append(("sm_copy",) + a))
    for bad in ("SM", "nvlink", None, 1):
        with pytest.raises(mc.ContractError, match=r"argument 'engine': expected 'copy'.*or 'sm'") as info:
            fake_stream(gpu0).copy_peer(src, dst, engine=bad)  # type: ignore[arg-type]
        assert info.value.received == repr(bad)
    # Push from device 0: dst (device 1's pool) must be opened to device 0; pull: src to device 1.
    with pytest.raises(mc.ContractError, match=r"argument 'dst'.*pool.set_access\(context\)"):
        fake_stream(gpu0).copy_peer(src, dst, engine="sm")
    with pytest.raises(mc.ContractError, match=r"argument 'src'.*pool.set_access\(context\)"):
        fake_stream(gpu1).copy_peer(src, dst, engine="sm")
    assert calls == []  # nothing enqueued by a refusal
    fake_stream(gpu0).copy_peer(src, dst, engine="copy")  # the copy engines need no grant
    assert calls[-1][0] == "cuMemcpyPeerAsync"
    gpu1._pool._access.add(0)  # what gpu1's pool.set_access(gpu0) records
    stream = fake_stream(gpu0)
    stream.copy_peer(src, dst, 3, src_offset=1, dst_offset=4, engine="sm")
    assert calls[-1] == ("sm_copy", stream, 0x1000 + 4 * 4, 0x1000 + 1 * 4, 3 * 4)  # addresses, bytes
    n = len(calls)
    stream.copy_peer(src, dst, 0, engine="sm")  # nothing to copy: nothing enqueued
    assert len(calls) == n


def test_wait_event_takes_only_events() -> None:
    gpu0 = fake_context(0, 0x100)
    with pytest.raises(mc.ContractError, match="argument 'event'.*an Event"):
        fake_stream(gpu0).wait_event(object())  # type: ignore[arg-type]
