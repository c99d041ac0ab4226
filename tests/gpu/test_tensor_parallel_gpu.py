"""Tensor-parallel linear layers over two devices of one process, checked against one device's
DenseMatmulPlan and float64: column-parallel (with and without the all-gather), row-parallel (partial
products all-reduced), a column -> row chain (an MLP's up and down projections), and one CUDA graph
per device. Skips (with the reason) on a host with fewer than 2 devices or without nccl4py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from multi_gpu_helpers import two_contexts

try:
    import mircuda.nccl as nccl
except ImportError as exc:  # NcclNotFound: nccl4py (the [nccl] extra) is not installed
    pytest.skip(str(exc), allow_module_level=True)
from mircuda.parallel import (ColumnParallelLinear, RowParallelLinear,
                              column_parallel_shards, row_parallel_shards)

BOUND = 1e-2  # relative Frobenius error of a bf16 result against float64 (bf16 keeps 8 significant bits)


@dataclass
class Ranks:
    contexts: list[mc.Context]
    streams: list[mc.Stream]
    pools: list[mc.MemoryPool]
    comms: list[Any]

    def upload(self, arrays: list[np.ndarray]) -> list[mc.DeviceBuffer]:
        return [s.upload(p, np.ascontiguousarray(a)) for s, p, a in zip(self.streams, self.pools, arrays)]

    def empty(self, count: int) -> list[mc.DeviceBuffer]:
        return self.upload([np.full(count, np.nan, mc.bf16)] * len(self.streams))

    def download(self, buffers: list[mc.DeviceBuffer]) -> list[np.ndarray]:
        return [s.download(b).astype(np.float64) for s, b in zip(self.streams, buffers)]


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


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def operands(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    x = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(mc.bf16)
    w = rng.standard_normal((n, k)).astype(mc.bf16)
    return x, w


def one_gpu(ranks: Ranks, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Y = X W^T by one DenseMatmulPlan on device 0."""
    m, k = x.shape
    n = w.shape[0]
    s, pool = ranks.streams[0], ranks.pools[0]
    with mc.DenseMatmulPlan(ranks.contexts[0], s, mc.DenseMatmulSpec(m, n, k)) as plan:
        xb, wb = s.upload(pool, x), s.upload(pool, w)
        yb = s.upload(pool, np.full(m * n, np.nan, mc.bf16))
        plan.execute(s, xb, wb, yb)
        return s.download(yb).astype(np.float64).reshape(m, n)


@pytest.mark.parametrize("m", [1, 16])
def test_column_parallel_equals_one_device(ranks: Ranks, rng, m: int) -> None:
    n, k = 2048, 1024
    x, w = operands(rng, m, n, k)
    want64 = x.astype(np.float64) @ w.astype(np.float64).T
    single = one_gpu(ranks, x, w)
    assert rel(single, want64) < BOUND
    with ColumnParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k), gather=True) as layer:
        assert layer.size == 2 and [p.spec.n for p in layer.plans] == [n // 2] * 2
        xs = ranks.upload([x, x])
        ws = ranks.upload(column_parallel_shards(w, 2))
        ys = ranks.empty(m * n // 2)
        gathered = ranks.empty(m * n)
        layer.execute(xs, ws, ys, gathered)
        parts = [y.reshape(m, n // 2) for y in ranks.download(ys)]
        y = np.concatenate(parts, axis=1)
        assert rel(y, want64) < BOUND
        assert rel(y, single) < BOUND
        for g in ranks.download(gathered):  # rank-major [2, M, N/2]
            np.testing.assert_array_equal(g.reshape(2, m, n // 2), np.stack(parts))


@pytest.mark.parametrize("m", [1, 16])
def test_row_parallel_equals_one_device(ranks: Ranks, rng, m: int) -> None:
    n, k = 1024, 2048
    x, w = operands(rng, m, n, k)
    want64 = x.astype(np.float64) @ w.astype(np.float64).T
    single = one_gpu(ranks, x, w)
    with RowParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k)) as layer:
        xs = ranks.upload(row_parallel_shards(x, 2))
        ws = ranks.upload(row_parallel_shards(w, 2))
        ys = ranks.empty(m * n)
        layer.execute(xs, ws, ys)
        got = [y.reshape(m, n) for y in ranks.download(ys)]
    np.testing.assert_array_equal(got[0], got[1])  # the all-reduce left one Y on both devices
    assert rel(got[0], want64) < BOUND
    assert rel(got[0], single) < BOUND


@pytest.mark.parametrize("m", [1, 16])
def test_row_parallel_symmetric_equals_one_device_eager_and_in_graphs(ranks: Ranks, rng, m: int) -> None:
    n, k = 1024, 2048
    x, w = operands(rng, m, n, k)
    want64 = x.astype(np.float64) @ w.astype(np.float64).T
    single = one_gpu(ranks, x, w)
    xs = ranks.upload(row_parallel_shards(x, 2))
    ws = ranks.upload(row_parallel_shards(w, 2))
    with RowParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k)) as plain:
        ys = ranks.empty(m * n)
        plain.execute(xs, ws, ys)
        reference = [y.reshape(m, n) for y in ranks.download(ys)]
    layer = RowParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k), symmetric=True)
    try:
        outs = layer.outputs
        assert layer.symmetric and all(isinstance(o, nccl.SymmetricBuffer) and len(o) == m * n for o in outs)
        layer.execute(xs, ws)
        got = [y.reshape(m, n) for y in ranks.download(outs)]
        np.testing.assert_array_equal(got[0], got[1])
        # The same partial sums as the pool-buffer layer, added by another NCCL kernel: equal up to
        # the last bf16 rounding (2**-8 relative) of each sum.
        np.testing.assert_allclose(got[0], reference[0], rtol=2**-7, atol=0)
        assert rel(got[0], want64) < BOUND
        assert rel(got[0], single) < BOUND
        graphs = layer.capture(xs, ws)  # once eagerly, then one graph per device
        for s, o in zip(ranks.streams, outs):
            s.memset(o, 0xFF)  # NaN: only the replays write Y
        for _ in range(2):
            for r in range(2):
                graphs[r].launch(ranks.streams[r])
        replayed = [y.reshape(m, n) for y in ranks.download(outs)]
        np.testing.assert_array_equal(replayed[0], replayed[1])
        np.testing.assert_allclose(replayed[0], reference[0], rtol=2**-7, atol=0)
        for g in graphs:
            g.close()
        with pytest.raises(mc.ContractError, match=r"argument 'y\[0\]'.*outputs"):
            layer.execute(xs, ws, ys)
    finally:
        for s in ranks.streams:
            s.synchronize()
        layer.close()
    assert all(o.freed for o in outs) and layer.outputs == []


def test_a_column_then_row_chain_in_one_graph_per_device(ranks: Ranks, rng) -> None:
    """An MLP's up (column-parallel) and down (row-parallel) projections: the column outputs are the
    row layer's input shards, no communication between them; captured once per device, replayed."""
    m, hidden, inner = 1, 1024, 4096
    x, w_up = operands(rng, m, inner, hidden)
    _, w_down = operands(rng, m, hidden, inner)
    w_down = (w_down.astype(np.float32) / np.sqrt(inner)).astype(mc.bf16)
    h64 = x.astype(np.float64) @ w_up.astype(np.float64).T
    want = h64.astype(mc.bf16).astype(np.float64) @ w_down.astype(np.float64).T
    up = ColumnParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, inner, hidden))
    down = RowParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, hidden, inner))
    xs = ranks.upload([x, x])
    w_ups = ranks.upload(column_parallel_shards(w_up, 2))
    w_downs = ranks.upload(row_parallel_shards(w_down, 2))
    hs = ranks.empty(m * inner // 2)
    ys = ranks.empty(m * hidden)
    up_graphs = up.capture(xs, w_ups, hs)
    down_graphs = down.capture(hs, w_downs, ys)
    for s, y in zip(ranks.streams, ys):
        s.memset(y, 0xFF)  # NaN: only the replays below write Y
    for _ in range(2):
        for r in range(2):
            up_graphs[r].launch(ranks.streams[r])
            down_graphs[r].launch(ranks.streams[r])
    got = [y.reshape(m, hidden) for y in ranks.download(ys)]
    np.testing.assert_array_equal(got[0], got[1])
    assert rel(got[0], want) < BOUND
    for g in up_graphs + down_graphs:
        g.close()
    up.close()
    down.close()


def test_a_bad_operand_of_one_rank_leaves_nothing_enqueued(ranks: Ranks, rng) -> None:
    m, n, k = 1, 512, 256
    x, w = operands(rng, m, n, k)
    with RowParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k)) as layer:
        xs = ranks.upload(row_parallel_shards(x, 2))
        ws = ranks.upload(row_parallel_shards(w, 2))
        ys = ranks.empty(m * n)
        short = ranks.streams[1].upload(ranks.pools[1], np.zeros(m * n - 1, mc.bf16))
        with pytest.raises(mc.ContractError, match=r"argument 'y\[1\]'.*at least 512"):
            layer.execute(xs, ws, [ys[0], short])
        wrong = ranks.streams[1].upload(ranks.pools[1], np.zeros(m * k // 2, np.float32))
        with pytest.raises(mc.ContractError, match=r"argument 'x\[1\]'.*bf16.*f32"):
            layer.execute([xs[0], wrong], ws, ys)
        assert all(np.isnan(y).all() for y in ranks.download(ys))


@pytest.mark.cutlass
def test_column_and_row_parallel_at_m_256_with_cutlass(ranks: Ranks, rng) -> None:
    m, n, k = 256, 2048, 1024
    x, w = operands(rng, m, n, k)
    want64 = x.astype(np.float64) @ w.astype(np.float64).T
    with ColumnParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k)) as col:
        ys = ranks.empty(m * n // 2)
        col.execute(ranks.upload([x, x]), ranks.upload(column_parallel_shards(w, 2)), ys)
        y = np.concatenate([p.reshape(m, n // 2) for p in ranks.download(ys)], axis=1)
    assert rel(y, want64) < BOUND
    with RowParallelLinear(ranks.comms, ranks.streams, mc.DenseMatmulSpec(m, n, k)) as row:
        ys = ranks.empty(m * n)
        row.execute(ranks.upload(row_parallel_shards(x, 2)), ranks.upload(row_parallel_shards(w, 2)), ys)
        got = ranks.download(ys)
    assert rel(got[0].reshape(m, n), want64) < BOUND
