"""Runtime: devices, contexts, streams, events and profiler ranges on a real device."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload


def test_device_info_describes_the_device(context: mc.Context) -> None:
    info = context.device_info()
    assert info.name
    major, minor = info.compute_capability
    assert major >= 7 and info.arch == f"sm_{major}{minor}"
    assert info.multiprocessor_count > 0
    assert info.warp_size == 32
    assert info.max_threads_per_block >= 1024
    assert info.total_memory_bytes > 2**30
    assert info.l2_cache_bytes > 0
    assert info.max_shared_memory_per_block_optin_bytes >= info.max_shared_memory_per_block_bytes
    assert info.max_grid_dims[0] >= 2**31 - 1
    assert isinstance(info.integrated, bool) and isinstance(info.memory_pools_supported, bool)
    with pytest.raises(Exception):  # noqa: B017  (the frozen-instance error)
        info.name = "x"  # type: ignore[misc]  # frozen


def test_driver_is_a_process_singleton(driver: mc.Driver) -> None:
    assert mc.Driver.initialize() is driver
    assert driver.device(0) is driver.devices()[0]
    for bad in (-1, len(driver.devices()), "0"):
        with pytest.raises(mc.ContractError, match="device"):
            driver.device(bad)  # type: ignore[arg-type]
    assert driver.version >= (12, 0)
    with pytest.raises(mc.ContractError, match="device"):
        driver.create_context("gpu0")  # type: ignore[arg-type]


def test_streams_are_non_blocking_and_take_a_priority(context: mc.Context) -> None:
    least, greatest = context.stream_priority_range()
    with context.create_stream(priority=greatest) as s:
        assert s.priority == greatest and s.handle != 0
        s.synchronize()
        assert s.query()
    assert s.handle == 0
    with pytest.raises(mc.ContractError, match="priority"):
        context.create_stream(priority=least + 100)
    with pytest.raises(mc.ClosedResourceError):
        s.synchronize()


def test_events_time_device_work_and_order_streams(context, pool, compiler, rng) -> None:
    src = mc.cuda_kernel(r'''
    extern "C" __global__ void spin_add(float* y, float v, unsigned n, int rounds) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { float acc = y[i]; for (int r = 0; r < rounds; ++r) acc = acc * 0.5f + v; y[i] = acc; }
    }''')
    K = mc.cuda_export("spin_add", y=mc.DeviceBuffer[mc.f32], v=mc.f32, n=mc.u32, rounds=mc.i32)
    k = compiler.compile(src).kernel(K)
    producer, consumer = context.create_stream(), context.create_stream()
    n = 1 << 20
    y = pool.allocate_zeroed(mc.f32, producer, n)
    start, end = context.create_event(timing=True), context.create_event(timing=True)
    ready = context.create_event()
    start.record(producer)
    k.launch(producer, mc.LaunchConfig.for_elements(n), y, 2.0, n, 4000)
    end.record(producer)
    ready.record(producer)
    consumer.wait_event(ready)
    out = context.allocate_pinned(mc.f32, n)
    consumer.copy_to_host(y, out)  # ordered after the kernel through the event only
    values = out.to_numpy()
    assert np.allclose(values, 4.0, rtol=1e-6)  # x -> x/2 + 2 converges to 4
    end.synchronize()
    assert end.query()
    assert mc.Event.elapsed_ms(start, end) > 0
    with pytest.raises(mc.ContractError, match="timing"):
        mc.Event.elapsed_ms(start, ready)
    y.free(consumer)
    consumer.synchronize()


def test_a_context_works_from_any_thread(context, pool, compiler) -> None:
    src = mc.cuda_kernel(r'extern "C" __global__ void iota(int* o, int base) { o[threadIdx.x] = base + threadIdx.x; }')
    K = mc.cuda_export("iota", o=mc.Out[mc.DeviceBuffer[mc.i32]], base=mc.i32)
    k = compiler.compile(src).kernel(K)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            s = context.create_stream()
            buf = pool.allocate(mc.i32, s, 64)
            for _ in range(50):
                k.launch(s, mc.LaunchConfig(1, 64), buf, 1000 * t)
            results[t] = download(context, s, buf)
            buf.free(s)
            s.synchronize()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for t in range(4):
        np.testing.assert_array_equal(results[t], 1000 * t + np.arange(64))


def test_profiler_range_stops_explicitly_and_by_finalizer(context) -> None:
    with context.start_profiler_range() as r:
        assert r.active
    assert not r.active
    r.stop()  # idempotent
    forgotten = context.start_profiler_range()
    del forgotten
    gc.collect()  # the finalizer stops it without raising


def test_closing_a_context_closes_its_streams(driver, context, pool) -> None:
    other = driver.create_context(driver.devices()[0])
    s = other.create_stream()
    buf = other.default_memory_pool().allocate(mc.f32, s, 16)
    s.synchronize()
    other.close()
    other.close()  # idempotent
    assert other.closed and s.handle == 0
    with pytest.raises(mc.ClosedResourceError):
        other.create_stream()
    with pytest.raises(mc.ClosedResourceError):
        s.synchronize()
    del buf
    gc.collect()  # the buffer's finalizer sees the closed context and does nothing
    # The session context (same primary context, its own retain) is unaffected.
    with context.create_stream() as fine:
        data = np.arange(8, dtype=np.float32)
        np.testing.assert_array_equal(download(context, fine, upload(context, fine, pool, data)), data)
