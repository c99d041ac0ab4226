"""Memory: pool allocations, typed buffers, pinned staging and transfers."""

from __future__ import annotations

import copy
import gc

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload


@pytest.mark.parametrize("dtype", [mc.f32, mc.f16, mc.bf16, mc.e4m3, mc.e2m1, mc.u8, mc.i64, mc.f64])
def test_buffers_round_trip_every_dtype(context, stream, pool, rng, dtype) -> None:
    n = 1000
    host = rng.uniform(-4, 4, n).astype(np.float32).astype(dtype)
    buf = upload(context, stream, pool, host)
    assert len(buf) == n and buf.dtype == np.dtype(dtype) and buf.nbytes == n * np.dtype(dtype).itemsize
    assert buf.scalar_type is dtype and buf.handle != 0
    np.testing.assert_array_equal(download(context, stream, buf).view(np.uint8), host.view(np.uint8))
    buf.free(stream)


def test_zero_count_allocations_are_valid_buffers(context, stream, pool) -> None:
    empty = pool.allocate(mc.f32, stream, 0)
    assert len(empty) == 0 and empty.nbytes == 0 and empty.handle == 0
    pinned = context.allocate_pinned(mc.f32, 0)
    stream.copy_to_device(pinned, empty)
    stream.copy_to_host(empty, pinned)
    assert pinned.to_numpy().shape == (0,)
    empty.free(stream)
    with pytest.raises(mc.UseAfterFree):
        empty.free(stream)


def test_allocate_zeroed_zeroes_every_byte(context, stream, pool) -> None:
    buf = pool.allocate(mc.u8, stream, 4096)
    stream.memset(buf, 0xAB)
    buf.free(stream)
    z = pool.allocate_zeroed(mc.u8, stream, 4096)  # likely reuses the 0xAB bytes
    assert not download(context, stream, z).any()
    z.free(stream)


def test_memset_range(context, stream, pool) -> None:
    buf = pool.allocate_zeroed(mc.u16, stream, 10)
    stream.memset(buf, 0xFF, offset=2, count=3)
    np.testing.assert_array_equal(download(context, stream, buf), [0, 0, 0xFFFF, 0xFFFF, 0xFFFF, 0, 0, 0, 0, 0])
    with pytest.raises(mc.ContractError, match="byte"):
        stream.memset(buf, 256)
    with pytest.raises(mc.ContractError, match="count"):
        stream.memset(buf, 1, offset=8, count=3)


def test_use_after_free_is_refused_everywhere(context, stream, pool) -> None:
    buf = pool.allocate(mc.f32, stream, 8)
    buf.free(stream)
    assert buf.freed
    for action in (lambda: buf.handle, lambda: buf.__cuda_array_interface__, lambda: buf.free(stream),
                   lambda: stream.copy_to_host(buf, context.allocate_pinned(mc.f32, 8)),
                   lambda: stream.copy_device_range(buf, 0, pool.allocate(mc.f32, stream, 8), 0, 8)):
        with pytest.raises(mc.UseAfterFree):
            action()


def test_forgotten_buffers_are_freed_by_their_finalizer(context, stream, pool) -> None:
    stream.synchronize()
    before = pool.used_bytes
    buf = pool.allocate(mc.u8, stream, 64 << 20)
    assert pool.used_bytes >= before + (64 << 20)
    del buf
    gc.collect()
    stream.synchronize()
    assert pool.used_bytes <= before


def test_buffers_are_uniquely_owned(stream, pool) -> None:
    buf = pool.allocate(mc.f32, stream, 4)
    with pytest.raises(TypeError):
        copy.copy(buf)
    with pytest.raises(TypeError):
        mc.DeviceBuffer()
    buf.free(stream)


def test_release_threshold_is_exposed(pool) -> None:
    old = pool.release_threshold
    pool.release_threshold = 1 << 30
    assert pool.release_threshold == 1 << 30
    pool.release_threshold = old
    with pytest.raises(mc.ContractError, match="release_threshold"):
        pool.release_threshold = -1


def test_cuda_array_interface_v3(stream, pool) -> None:
    buf = pool.allocate(mc.bf16, stream, 12)
    cai = buf.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (12,) and cai["strides"] is None
    assert cai["data"] == (buf.handle, False)
    assert cai["stream"] == stream.handle
    assert np.dtype(cai["typestr"]).itemsize == 2
    buf.free(stream)


def test_pinned_buffer_checks_what_it_is_given(context) -> None:
    p = context.allocate_pinned(mc.f32, 4)
    with pytest.raises(mc.ContractError, match="dtype float32"):
        p.write_prefix(np.zeros(4, dtype=np.float64))
    with pytest.raises(mc.ContractError, match="at most 4"):
        p.write_prefix(np.zeros(5, dtype=np.float32))
    with pytest.raises(mc.ContractError, match="1-D"):
        p.write_prefix(np.zeros((2, 2), dtype=np.float32))
    p.write_prefix(np.array([1, 2], dtype=np.float32))
    assert p.to_numpy(2).tolist() == [1.0, 2.0]
    with pytest.raises(mc.ContractError, match="count"):
        p.to_numpy(5)
    p.close()
    with pytest.raises(mc.ClosedResourceError):
        p.to_numpy()


def test_transfers_refuse_pageable_memory_and_say_how_to_stage(stream, pool) -> None:
    buf = pool.allocate(mc.f32, stream, 4)
    with pytest.raises(mc.ContractError, match="allocate_pinned") as info:
        stream.copy_to_device(np.zeros(4, dtype=np.float32), buf)  # type: ignore[arg-type]
    assert info.value.argument == "src"
    with pytest.raises(mc.ContractError, match="allocate_pinned"):
        stream.copy_to_host(buf, np.zeros(4, dtype=np.float32))  # type: ignore[arg-type]
    buf.free(stream)


def test_transfer_ranges_are_checked(context, stream, pool, rng) -> None:
    data = rng.standard_normal(16).astype(np.float32)
    src = upload(context, stream, pool, data)
    dst = pool.allocate(mc.f32, stream, 8)
    stream.copy_device_range(src, 4, dst, 2, 6)
    stream.copy_device_range(src, 0, dst, 0, 2)
    got = download(context, stream, dst)
    np.testing.assert_array_equal(got, np.concatenate([data[0:2], data[4:10]]))
    with pytest.raises(mc.ContractError, match="count"):
        stream.copy_device_range(src, 10, dst, 0, 7)
    with pytest.raises(mc.ContractError, match="count"):
        stream.copy_device_range(src, 0, dst, 4, 5)
    with pytest.raises(mc.ContractError, match="dtype"):
        stream.copy_device_range(src, 0, pool.allocate(mc.i32, stream, 8), 0, 4)
    with pytest.raises(mc.ContractError, match="overlapping"):
        stream.copy_device_range(src, 0, src, 2, 4)
    with pytest.raises(mc.ContractError, match="src_offset"):
        stream.copy_device_range(src, -1, dst, 0, 1)
    pinned = context.allocate_pinned(mc.f32, 4)
    with pytest.raises(mc.ContractError, match="count"):
        stream.copy_to_host(src, pinned)  # 16 elements do not fit in 4
    stream.copy_to_host(src, pinned, 4, src_offset=12)
    np.testing.assert_array_equal(pinned.to_numpy(), data[12:])


def test_write_prefix_waits_for_the_upload_in_flight(context, stream, pool, rng) -> None:
    # Stage two different arrays through one pinned buffer back to back: the second write must not
    # overwrite the staging memory before the first upload has read it.
    n = 1 << 22
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    staging = context.allocate_pinned(mc.f32, n)
    da, db = pool.allocate(mc.f32, stream, n), pool.allocate(mc.f32, stream, n)
    staging.write_prefix(a)
    stream.copy_to_device(staging, da)
    staging.write_prefix(b)
    stream.copy_to_device(staging, db)
    np.testing.assert_array_equal(download(context, stream, da), a)
    np.testing.assert_array_equal(download(context, stream, db), b)


def test_buffers_of_another_context_are_refused(driver, context, stream, pool) -> None:
    with driver.create_context(driver.devices()[0]) as other:
        s2 = other.create_stream()
        foreign = other.default_memory_pool().allocate(mc.f32, s2, 4)
        with pytest.raises(mc.ContractError, match="stream"):
            pool.allocate(mc.f32, s2, 4)
        with pytest.raises(mc.ContractError, match="buffer of"):
            stream.copy_device_range(foreign, 0, pool.allocate(mc.f32, stream, 4), 0, 4)
        foreign.free(s2)
        s2.synchronize()


def test_bf16_values_survive_as_ml_dtypes(context, stream, pool) -> None:
    host = np.array([1.5, -2.25, 3.0e38, 1e-3], dtype=ml_dtypes.bfloat16)
    buf = upload(context, stream, pool, host)
    np.testing.assert_array_equal(download(context, stream, buf), host)


def test_raw_bytes_come_from_the_pool_and_go_back_to_it(driver, context, stream, pool) -> None:
    # MemoryPool.allocate_bytes / free_bytes: what Numba's memory manager plugin allocates through.
    stream.synchronize()
    before = pool.used_bytes
    address = pool.allocate_bytes(stream, 64 << 20)
    assert address != 0 and pool.used_bytes >= before + (64 << 20)
    pool.free_bytes(stream, address)
    stream.synchronize()
    assert pool.used_bytes <= before
    assert pool.allocate_bytes(stream, 0) == 0
    with driver.create_context(driver.devices()[0]) as other, pytest.raises(mc.ContractError, match="stream"):
        pool.allocate_bytes(other.create_stream(), 64)


def test_a_numpy_integer_count_sizes_the_buffer_in_python_ints(context, stream, pool) -> None:
    # np.uint8(200) * 8 wraps to 64 in uint8: the byte count must be 1600, as for the int 200.
    buf = pool.allocate(mc.f64, stream, np.uint8(200))
    assert len(buf) == 200 and buf.nbytes == 1600 and type(len(buf)) is int
    data = np.arange(200, dtype=np.float64)
    staged = context.allocate_pinned(mc.f64, np.uint8(200))
    assert len(staged) == 200 and staged.nbytes == 1600 and staged.to_numpy().shape == (200,)
    staged.write_prefix(data)
    stream.copy_to_device(staged, buf)
    np.testing.assert_array_equal(download(context, stream, buf), data)
    wide = pool.allocate(mc.f32, stream, np.int32(1 << 20))  # np.int32(2**20) * 4 fits; the product is an int
    assert wide.nbytes == 4 << 20 and wide.handle != 0
    for b in (buf, wide):
        b.free(stream)
    staged.close()


def test_a_byte_count_beyond_size_t_is_a_contract_error(context, stream, pool) -> None:
    # The driver takes size_t: 2**64 bytes or more is refused by name, not an OverflowError from the bindings.
    with pytest.raises(mc.ContractError, match=r"count.*at most 2305843009213693951 elements of f64"):
        pool.allocate(mc.f64, stream, 2**61)
    with pytest.raises(mc.ContractError, match="count"):
        context.allocate_pinned(mc.f64, 2**62)
    with pytest.raises(mc.ContractError, match="nbytes"):
        pool.allocate_bytes(stream, 2**64)
    with pytest.raises(mc.ContractError, match="release_threshold"):
        pool.release_threshold = 2**64
    with pytest.raises(mc.ContractError, match="keep_bytes"):
        pool.trim_to(2**64)
    with pytest.raises(mc.ContractError, match="stream"):
        context.adopt_stream(2**64)


def test_memset_refuses_an_offset_past_the_end(stream, pool) -> None:
    buf = pool.allocate(mc.f32, stream, 16)
    with pytest.raises(mc.ContractError, match=r"offset.*at most 16"):
        stream.memset(buf, 0, offset=21)
    stream.memset(buf, 0, offset=16)  # the end itself: nothing to set
    buf.free(stream)


SPIN = mc.cuda_kernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}''')
Spin = mc.cuda_export("spin", cycles=mc.i64)
SPIN_CYCLES = 50_000_000  # ~25 ms at 2 GHz; the verdicts below hold whatever it takes


def test_a_pinned_buffer_waits_for_its_copies_on_every_stream(context, pool) -> None:
    # One staging buffer read by a copy on a busy stream and then by a copy on an idle one: write_prefix and
    # to_numpy must wait for both copies (one event per stream), not only for the last one enqueued.
    spin = mc.Compiler(context).compile(SPIN).kernel(Spin)
    busy, idle = context.create_stream(), context.create_stream()
    staged = context.allocate_pinned(mc.f32, 4)
    staged.write_prefix(np.ones(4, np.float32))
    da, db = pool.allocate(mc.f32, busy, 4), pool.allocate(mc.f32, idle, 4)
    spin.launch(busy, mc.LaunchConfig((1,), (1,)), SPIN_CYCLES)
    busy.copy_to_device(staged, da)
    idle.copy_to_device(staged, db)
    staged.write_prefix(np.full(4, 2.0, np.float32))
    assert busy.query() and idle.query()  # both copies had read the buffer before it was overwritten
    spin.launch(busy, mc.LaunchConfig((1,), (1,)), SPIN_CYCLES)
    busy.copy_to_host(da, staged)
    idle.copy_to_host(db, staged)
    staged.to_numpy()
    assert busy.query() and idle.query()
    np.testing.assert_array_equal(staged.to_numpy(), np.ones(4, np.float32))  # both copies wrote ones
    da.free(busy)
    db.free(idle)
    staged.close()
    busy.close()
    idle.close()


def test_a_closed_context_returns_its_memory_while_another_context_holds_the_device(driver, context, monkeypatch) -> None:
    # Two Contexts of one device share its primary context: closing one must not strand its allocations while
    # the other keeps the primary context (and so the memory) alive. The driver's own accounting cannot show
    # it: after a synchronous cuMemFree of a pool allocation, CU_MEMPOOL_ATTR_USED_MEM_CURRENT kept counting the
    # bytes though the pool reused the address (H200, driver 580, 2026-12-04), so the test watches the call.
    from mircuda import _cuda

    real, calls = _cuda.call, []

    def recording(name, *args):
        result = real(name, *args)  # raises on a refusal: only calls the driver accepted are recorded
        calls.append((name, int(args[0]) if name == "cuMemFree" else None))
        return result

    second = driver.create_context(driver.devices()[0])
    s2 = second.create_stream()
    stranded = second.default_memory_pool().allocate(mc.u8, s2, 64 << 20)
    address = stranded.handle
    spin = mc.Compiler(second).compile(SPIN).kernel(Spin)
    spin.launch(s2, mc.LaunchConfig((1,), (1,)), SPIN_CYCLES)  # still running when the context closes
    second.close()  # destroys s2 without waiting for it
    monkeypatch.setattr(_cuda, "call", recording)
    del stranded  # its finalizer: the context synchronized (s2's work done), then the memory freed
    gc.collect()
    monkeypatch.undo()
    assert ("cuMemFree", address) in calls  # (gc.collect may finalize other dropped buffers too)
    assert calls.index(("cuCtxSynchronize", None)) < calls.index(("cuMemFree", address))
    context.synchronize()  # and the context that stayed open is unharmed
