"""Two devices of one host: peer access (contexts and pools), peer copies, a stream waiting on another
device's event, and the typed launch / graph capture taking a peer buffer only once access was granted.
Skipped (with the reason) on a host with fewer than 2 devices."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

import mircuda as mc
from mircuda.timing import spin_kernel
from multi_gpu_helpers import require_peer_path, two_contexts

SOURCE = mc.cuda_kernel(r'''
extern "C" __global__ void scale_into(float* y, const float* x, float s, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s * x[i];
}''', "scale_into.cu")
ScaleInto = mc.cuda_export("scale_into", y=mc.Out[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]],
                           s=mc.f32, n=mc.u32)
N = 1 << 16


@dataclass
class Pair:
    gpu0: mc.Context
    gpu1: mc.Context
    s0: mc.Stream
    s1: mc.Stream
    pool0: mc.MemoryPool
    pool1: mc.MemoryPool
    scale1: mc.TypedKernel  # compiled for device 1


@pytest.fixture(scope="module")
def pair(driver: mc.Driver) -> Iterator[Pair]:
    gpu0, gpu1 = two_contexts(driver)
    s0, s1 = gpu0.create_stream(), gpu1.create_stream()
    kernel = mc.Compiler(gpu1).compile(SOURCE).kernel(ScaleInto)
    yield Pair(gpu0, gpu1, s0, s1, gpu0.default_memory_pool(), gpu1.default_memory_pool(), kernel)
    s0.synchronize()
    s1.synchronize()
    gpu0.close()
    gpu1.close()


def test_each_device_has_its_own_context_stream_and_pool(pair: Pair) -> None:
    assert pair.gpu0.device.ordinal == 0 and pair.gpu1.device.ordinal == 1
    assert pair.gpu0.handle != pair.gpu1.handle
    assert pair.pool0.handle != pair.pool1.handle
    a = pair.pool0.allocate(mc.f32, pair.s0, 16)
    with pytest.raises(mc.ContractError, match="argument 'stream'"):
        pair.pool1.allocate(mc.f32, pair.s0, 16)  # a stream of device 0 for device 1's pool
    a.free(pair.s0)


def test_peer_access_is_enabled_once_and_refused_for_the_own_device(pair: Pair) -> None:
    require_peer_path(pair.gpu0, pair.gpu1)
    pair.gpu1.enable_peer_access(pair.gpu0)
    pair.gpu1.enable_peer_access(pair.gpu0)  # idempotent
    assert pair.gpu1.peer_access_enabled(pair.gpu0)
    with pytest.raises(mc.ContractError, match="argument 'other'"):
        pair.gpu1.enable_peer_access(pair.gpu1)


def test_a_kernel_reads_another_devices_pool_buffer_only_after_set_access(pair: Pair, rng) -> None:
    require_peer_path(pair.gpu0, pair.gpu1)
    host = rng.standard_normal(N).astype(np.float32)
    x0 = pair.s0.upload(pair.pool0, host)  # on device 0 (blocks: the data is there)
    y1 = pair.pool1.allocate(mc.f32, pair.s1, N)
    config = mc.LaunchConfig.for_elements(N, 256)
    pair.pool0.set_access(pair.gpu1, read_write=False)
    assert not pair.pool0.access_granted(pair.gpu1)
    with pytest.raises(mc.ContractError, match="argument 'x'.*pool.set_access") as info:
        pair.scale1.launch(pair.s1, config, y1, x0, 2.0, N)
    assert info.value.argument == "x"
    pair.pool0.set_access(pair.gpu1)
    pair.pool0.set_access(pair.gpu1)  # idempotent
    assert pair.pool0.access_granted(pair.gpu1)
    pair.scale1.launch(pair.s1, config, y1, x0, 2.0, N)  # device 1 reads device 0's memory over the link
    np.testing.assert_array_equal(pair.s1.download(y1), 2 * host)
    # The grant covers later allocations of the pool too.
    x0b = pair.s0.upload(pair.pool0, host[::-1].copy())
    pair.scale1.launch(pair.s1, config, y1, x0b, -1.0, N)
    np.testing.assert_array_equal(pair.s1.download(y1), -host[::-1])


def test_graph_capture_refuses_an_unrelated_buffer_and_takes_a_granted_one(pair: Pair, rng) -> None:
    require_peer_path(pair.gpu0, pair.gpu1)
    host = rng.standard_normal(N).astype(np.float32)
    x0 = pair.s0.upload(pair.pool0, host)
    y1 = pair.pool1.allocate(mc.f32, pair.s1, N)
    config = mc.LaunchConfig.for_elements(N, 256)
    pair.pool0.set_access(pair.gpu1, read_write=False)
    with pytest.raises(mc.CaptureError, match="'x'") as info:
        pair.s1.capture(x0, lambda x: pair.scale1.launch(pair.s1, config, y1, x, 3.0, N))
    assert isinstance(info.value.__cause__, mc.ContractError)
    pair.pool0.set_access(pair.gpu1)
    graph = pair.s1.capture((x0, y1), lambda r: pair.scale1.launch(pair.s1, config, r[1], r[0], 3.0, N))
    graph.launch(pair.s1)
    np.testing.assert_array_equal(pair.s1.download(y1), 3 * host)
    graph.close()


@pytest.mark.parametrize("nbytes", [1 << 20, 64 << 20])
def test_copy_peer_moves_bytes_both_ways(pair: Pair, rng, nbytes: int) -> None:
    host = rng.integers(0, 256, nbytes, dtype=np.uint8)
    src = pair.s0.upload(pair.pool0, host)
    dst = pair.pool1.allocate(mc.u8, pair.s1, nbytes)
    pair.s1.memset(dst, 0)
    done = pair.gpu0.create_event()
    done.record(pair.s0)
    pair.s1.wait_event(done)  # device 1's stream waits for device 0's upload
    pair.s1.copy_peer(src, dst)
    np.testing.assert_array_equal(pair.s1.download(dst), host)
    back = pair.pool0.allocate(mc.u8, pair.s0, nbytes // 2)
    arrived = pair.gpu1.create_event()
    arrived.record(pair.s1)
    pair.s0.wait_event(arrived)
    pair.s0.copy_peer(dst, back, nbytes // 2, src_offset=nbytes // 4)  # on the source's device this time
    np.testing.assert_array_equal(pair.s0.download(back), host[nbytes // 4: nbytes // 4 + nbytes // 2])


@pytest.mark.parametrize(("nbytes", "src_offset", "dst_offset"),
                         [(1, 0, 0), (15, 3, 0), (17, 1, 1), (4097, 16, 32), ((1 << 20) + 7, 5, 5),
                          ((1 << 20) + 3, 7, 2), ((64 << 20) + 13, 0, 0), ((16 << 20) + 1, 9, 26)])
def test_copy_peer_sm_engine_is_exact_for_odd_sizes_and_offsets_push_and_pull(
        pair: Pair, rng, nbytes: int, src_offset: int, dst_offset: int) -> None:
    """engine="sm": push (a stream of src's device writes device 1's memory) and pull (a stream of dst's
    device reads device 0's), bytes exact, the bytes around the destination range untouched; offsets that
    agree modulo 16 take the 16-byte path, the others the byte path."""
    require_peer_path(pair.gpu0, pair.gpu1)
    pair.pool1.set_access(pair.gpu0)
    pair.pool0.set_access(pair.gpu1)
    host = rng.integers(0, 256, nbytes + src_offset, dtype=np.uint8)
    src = pair.s0.upload(pair.pool0, host)
    want = host[src_offset:]
    for stream in (pair.s0, pair.s1):  # push, then pull
        dst = pair.s1.upload(pair.pool1, np.full(nbytes + dst_offset + 19, 0xA5, np.uint8))
        stream.wait_event(_recorded(pair.gpu1, pair.s1))
        stream.copy_peer(src, dst, nbytes, src_offset=src_offset, dst_offset=dst_offset, engine="sm")
        pair.s1.wait_event(_recorded(stream.context, stream))
        got = pair.s1.download(dst)
        np.testing.assert_array_equal(got[dst_offset:dst_offset + nbytes], want)
        assert np.all(got[:dst_offset] == 0xA5) and np.all(got[dst_offset + nbytes:] == 0xA5)


def test_copy_peer_sm_engine_copies_bf16_elements_in_a_graph(pair: Pair, rng) -> None:
    require_peer_path(pair.gpu0, pair.gpu1)
    pair.pool1.set_access(pair.gpu0)
    count = 12345
    host = rng.standard_normal(count).astype(np.float32).astype(mc.bf16)
    src = pair.s0.upload(pair.pool0, host)
    dst = pair.s1.upload(pair.pool1, np.zeros(count, mc.bf16))
    pair.s0.wait_event(_recorded(pair.gpu1, pair.s1))
    pair.s0.copy_peer(src, dst, 0, engine="sm")  # nothing copied; compiled, if not yet, outside the capture
    pair.s0.copy_peer(src, dst, 1, engine="sm")
    graph = pair.s0.capture((src, dst), lambda r: pair.s0.copy_peer(r[0], r[1], count - 3, src_offset=3, engine="sm"))
    graph.launch(pair.s0)
    pair.s1.wait_event(_recorded(pair.gpu0, pair.s0))
    got = pair.s1.download(dst)
    assert got.view(np.uint16)[:count - 3].tobytes() == host.view(np.uint16)[3:].tobytes()
    assert not got.view(np.uint16)[count - 3:].any()
    graph.close()


def _recorded(context: mc.Context, stream: mc.Stream) -> mc.Event:
    event = context.create_event()
    event.record(stream)
    return event


def test_a_stream_waits_on_another_devices_event(pair: Pair, rng) -> None:
    """Device 0 spins, then writes; device 1 copies after waiting on device 0's event: the copy sees
    the write (without the wait it would read the old values while device 0 spins)."""
    spin = spin_kernel(mc.Compiler(pair.gpu0))
    fill = mc.Compiler(pair.gpu0).compile(SOURCE).kernel(ScaleInto)
    host = rng.standard_normal(N).astype(np.float32)
    x0 = pair.s0.upload(pair.pool0, host)
    y0 = pair.s0.upload(pair.pool0, np.zeros(N, np.float32))
    y1 = pair.s1.upload(pair.pool1, np.full(N, np.nan, np.float32))
    ready = pair.gpu0.create_event()
    spin.launch(pair.s0, mc.LaunchConfig(1, 32), 50_000_000)  # 50 ms
    fill.launch(pair.s0, mc.LaunchConfig.for_elements(N, 256), y0, x0, 5.0, N)
    ready.record(pair.s0)
    pair.s1.wait_event(ready)
    pair.s1.copy_peer(y0, y1)
    np.testing.assert_array_equal(pair.s1.download(y1), 5 * host)
