"""mircuda.nccl on real devices: a one-device communicator (any GPU host), then two devices of one
process (init_all) and of two processes (unique id): values of every collective checked, groups,
send/recv, and NCCL inside CUDA graphs. The two-device tests skip (with the reason) on a host with
fewer devices; the module skips where nccl4py is not installed."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from helpers import patience_s
from multi_gpu_helpers import two_contexts

try:
    import mircuda.nccl as nccl
except ImportError as exc:  # NcclNotFound: nccl4py (the [nccl] extra) is not installed
    pytest.skip(str(exc), allow_module_level=True)


def test_a_one_device_communicator_runs_every_collective(context: mc.Context, stream: mc.Stream,
                                                         pool: mc.MemoryPool, rng) -> None:
    host = rng.standard_normal(4096).astype(np.float32)
    with nccl.Communicator(0, 1, nccl.unique_id(), context) as comm:
        assert comm.rank == 0 and comm.size == 1 and comm.handle != 0
        x = stream.upload(pool, host)
        y = stream.upload(pool, np.full(4096, np.nan, np.float32))
        comm.all_reduce(stream, x, y)
        np.testing.assert_array_equal(stream.download(y), host)
        g = stream.upload(pool, np.full(4096, np.nan, np.float32))
        comm.all_gather(stream, x, g)
        np.testing.assert_array_equal(stream.download(g), host)
        comm.broadcast(stream, x, y, 0, count=100)
        np.testing.assert_array_equal(stream.download(y)[:100], host[:100])
    assert comm.closed and comm.handle == 0
    [only] = nccl.Communicator.init_all([context])
    try:
        z = stream.upload(pool, host.astype(mc.bf16))
        only.all_reduce(stream, z, z, op="max")
        np.testing.assert_array_equal(stream.download(z), host.astype(mc.bf16))
    finally:
        nccl.close_all([only])


def test_a_one_device_all_reduce_in_a_graph(context: mc.Context, stream: mc.Stream, pool: mc.MemoryPool,
                                            rng) -> None:
    host = rng.integers(-8, 8, 2048).astype(np.float32)
    comm = nccl.Communicator(0, 1, nccl.unique_id(), context)
    try:
        x = stream.upload(pool, host)
        y = stream.upload(pool, np.full(2048, np.nan, np.float32))
        comm.all_reduce(stream, x, y)  # NCCL's first call, eager, before the capture
        stream.memset(y, 0xFF)  # NaN
        graph = stream.capture((x, y), lambda r: comm.all_reduce(stream, r[0], r[1]))
        assert np.isnan(stream.download(y)).all()  # capturing ran nothing
        graph.launch(stream)
        np.testing.assert_array_equal(stream.download(y), host)
        graph.close()
    finally:
        comm.close()


# -- two devices, one process -------------------------------------------------------------------

@dataclass
class Ranks:
    contexts: list[mc.Context]
    streams: list[mc.Stream]
    pools: list[mc.MemoryPool]
    comms: list[Any]

    def upload(self, arrays: list[np.ndarray]) -> list[mc.DeviceBuffer]:
        return [s.upload(p, a) for s, p, a in zip(self.streams, self.pools, arrays)]

    def download(self, buffers: list[mc.DeviceBuffer]) -> list[np.ndarray]:
        return [s.download(b) for s, b in zip(self.streams, buffers)]


@pytest.fixture(scope="module")
def ranks(driver: mc.Driver) -> Iterator[Ranks]:
    contexts = list(two_contexts(driver))
    streams = [c.create_stream() for c in contexts]
    comms = nccl.Communicator.init_all(contexts)
    yield Ranks(contexts, streams, [c.default_memory_pool() for c in contexts], comms)
    for s in streams:
        s.synchronize()
    nccl.close_all(comms)
    for c in contexts:
        c.close()


def _values(rng: np.random.Generator, dtype: Any, n: int) -> list[np.ndarray]:
    # Small integers: every partial sum is exact in each type (e4m3 too: |sum| <= 16).
    return [rng.integers(-8, 9, n).astype(np.float32).astype(dtype) for _ in range(2)]


@pytest.mark.parametrize("dtype, op", [(t, op) for t in (mc.bf16, mc.f16, mc.f32) for op in ("sum", "max", "min")]
                         + [(mc.e4m3, "sum")], ids=lambda v: getattr(v, "__name__", v))
def test_all_reduce_between_two_devices(ranks: Ranks, rng, dtype: Any, op: str) -> None:
    n = 3 * 1024 + 5
    inputs = _values(rng, dtype, n)
    send = ranks.upload(inputs)
    recv = ranks.upload([np.zeros(n, dtype)] * 2)
    with nccl.group():
        for r in range(2):
            ranks.comms[r].all_reduce(ranks.streams[r], send[r], recv[r], op=op)
    wide = [a.astype(np.float64) for a in inputs]
    want = {"sum": wide[0] + wide[1], "max": np.maximum(*wide), "min": np.minimum(*wide)}[op]
    for got in ranks.download(recv):
        np.testing.assert_array_equal(got.astype(np.float64), want)


def test_all_gather_reduce_scatter_and_broadcast_between_two_devices(ranks: Ranks, rng) -> None:
    n = 4096
    inputs = _values(rng, mc.bf16, n)
    send = ranks.upload(inputs)
    gathered = ranks.upload([np.zeros(2 * n, mc.bf16)] * 2)
    with nccl.group():
        for r in range(2):
            ranks.comms[r].all_gather(ranks.streams[r], send[r], gathered[r])
    for got in ranks.download(gathered):
        np.testing.assert_array_equal(got, np.concatenate(inputs))  # rank-major
    full = _values(rng, mc.f32, 2 * n)
    big = ranks.upload(full)
    part = ranks.upload([np.zeros(n, np.float32)] * 2)
    with nccl.group():
        for r in range(2):
            ranks.comms[r].reduce_scatter(ranks.streams[r], big[r], part[r])
    total = full[0] + full[1]
    for r, got in enumerate(ranks.download(part)):
        np.testing.assert_array_equal(got, total[r * n:(r + 1) * n])
    b = ranks.upload([np.arange(n, dtype=np.int32), np.full(n, -1, np.int32)])
    with nccl.group():
        ranks.comms[0].broadcast(ranks.streams[0], b[0], b[0], 0)
        ranks.comms[1].broadcast(ranks.streams[1], None, b[1], 0)
    for got in ranks.download(b):
        np.testing.assert_array_equal(got, np.arange(n, dtype=np.int32))


def test_send_recv_swap_in_a_group_and_bytes_for_types_nccl_lacks(ranks: Ranks, rng) -> None:
    n = 1000
    inputs = [rng.integers(-30000, 30000, n).astype(np.int16) for _ in range(2)]  # i16: sent as bytes
    send = ranks.upload(inputs)
    recv = ranks.upload([np.zeros(n, np.int16)] * 2)
    with nccl.group():
        for r in range(2):
            ranks.comms[r].send(ranks.streams[r], send[r], 1 - r)
            ranks.comms[r].recv(ranks.streams[r], recv[r], 1 - r)
    got = ranks.download(recv)
    np.testing.assert_array_equal(got[0], inputs[1])
    np.testing.assert_array_equal(got[1], inputs[0])


def test_all_reduce_in_one_graph_per_device(ranks: Ranks, rng) -> None:
    from mircuda.parallel import capture_each

    n = 8192  # 16 KiB of bf16: the tensor-parallel decode case
    inputs = _values(rng, mc.bf16, n)
    send = ranks.upload(inputs)
    recv = ranks.upload([np.zeros(n, mc.bf16)] * 2)
    with nccl.group():  # eager first: NCCL connects the ranks outside the capture
        for r in range(2):
            ranks.comms[r].all_reduce(ranks.streams[r], send[r], recv[r])
    for s, b in zip(ranks.streams, recv):
        s.memset(b, 0)
    graphs = capture_each(ranks.streams, (send, recv),
                          lambda r, res: ranks.comms[r].all_reduce(ranks.streams[r], res[0][r], res[1][r]))
    assert all(np.all(g == 0) for g in ranks.download(recv))  # capturing ran nothing
    want = inputs[0].astype(np.float64) + inputs[1].astype(np.float64)
    for _ in range(3):
        for r in range(2):
            graphs[r].launch(ranks.streams[r])
    for got in ranks.download(recv):
        np.testing.assert_array_equal(got.astype(np.float64), want)
    for g in graphs:
        g.close()


def _fill(ranks: Ranks, buffers: list[Any], arrays: list[np.ndarray]) -> None:
    """Write host arrays into existing buffers (upload to the pool, then a device copy)."""
    for s, p, b, a in zip(ranks.streams, ranks.pools, buffers, arrays):
        tmp = s.upload(p, a)
        s.copy_device_range(tmp, 0, b, 0, len(a))
        tmp.free(s)


@pytest.mark.parametrize("n", [4096, 32 * 1024 + 3])  # 8 KiB of bf16 (the decode case), and an odd 64 KiB
def test_symmetric_all_reduce_between_two_devices_exact_eager_and_in_graphs(ranks: Ranks, rng, n: int) -> None:
    from mircuda.parallel import capture_each

    send = nccl.allocate_symmetric_all(ranks.comms, mc.bf16, ranks.streams, n)
    recv = nccl.allocate_symmetric_all(ranks.comms, mc.bf16, ranks.streams, n)
    try:
        assert all(isinstance(b, nccl.SymmetricBuffer) and len(b) == n for b in send + recv)
        assert [b.communicator for b in send] == ranks.comms and [b.context for b in send] == ranks.contexts
        inputs = _values(rng, mc.bf16, n)
        want = inputs[0].astype(np.float64) + inputs[1].astype(np.float64)
        _fill(ranks, send, inputs)
        with nccl.group():  # out of place, both buffers windows
            for r in range(2):
                ranks.comms[r].all_reduce(ranks.streams[r], send[r], recv[r])
        for got in ranks.download(recv):
            np.testing.assert_array_equal(got.astype(np.float64), want)
        with nccl.group():  # in place
            for r in range(2):
                ranks.comms[r].all_reduce(ranks.streams[r], send[r], send[r])
        for got in ranks.download(send):
            np.testing.assert_array_equal(got.astype(np.float64), want)
        _fill(ranks, send, inputs)
        for s, b in zip(ranks.streams, recv):
            s.memset(b, 0)
        graphs = capture_each(ranks.streams, (send, recv),
                              lambda r, res: ranks.comms[r].all_reduce(ranks.streams[r], res[0][r], res[1][r]))
        assert all(np.all(g == 0) for g in ranks.download(recv))  # capturing ran nothing
        for _ in range(3):
            for r in range(2):
                graphs[r].launch(ranks.streams[r])
        for got in ranks.download(recv):
            np.testing.assert_array_equal(got.astype(np.float64), want)
        for g in graphs:
            g.close()
        # NCCL registered every window (H200s over NVLink: direct P2P, one node, cuMem on).
        assert all(b.registered for b in send + recv)
    finally:
        for bufs in (send, recv):
            for s, b in zip(ranks.streams, bufs):
                if not b.freed:
                    b.free(s)
    assert all(b.freed for b in send + recv)
    with pytest.raises(mc.UseAfterFree):
        ranks.comms[0].all_reduce(ranks.streams[0], send[0], send[0])


# -- two devices, two processes -----------------------------------------------------------------

def test_two_processes_join_through_a_unique_id(driver: mc.Driver) -> None:
    from nccl_workers import all_reduce_rank

    if len(driver.devices()) < 2:
        pytest.skip(f"needs 2 CUDA devices; this host has {len(driver.devices())}")
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    uid = nccl.unique_id()
    procs = [spawn.Process(target=all_reduce_rank, args=(r, 2, uid, queue)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = {}
        for _ in range(2):
            item = queue.get(timeout=patience_s(180))
            results[item[0]] = item[1:]
    finally:
        for p in procs:
            p.join(timeout=patience_s(30))
            if p.is_alive():
                p.kill()
    want = 3 + 2 * np.arange(1024, dtype=np.float32)
    for rank in range(2):
        assert len(results[rank]) == 2, results[rank]
        reduced, broadcast = results[rank]
        np.testing.assert_array_equal(reduced, want)
        np.testing.assert_array_equal(broadcast, np.full(16, 7, np.int32))
