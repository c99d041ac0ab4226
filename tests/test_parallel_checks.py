"""mircuda.parallel without a device: the shard helpers and the refusals that come before any plan is
made (communicators, streams, spec divisibility) or any capture begins."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import mircuda as mc

try:
    import mircuda.nccl
except ImportError as exc:  # NcclNotFound: nccl4py (the [nccl] extra) is not installed
    pytest.skip(str(exc), allow_module_level=True)
import mircuda.nccl as nccl
from mircuda.parallel import (ColumnParallelLinear, RowParallelLinear, capture_each,
                              column_parallel_shards, row_parallel_shards)


def test_shards_split_output_rows_or_input_columns_and_rebuild_the_product(rng) -> None:
    w = rng.standard_normal((12, 8))
    x = rng.standard_normal((3, 8))
    cols = column_parallel_shards(w, 3)
    assert [c.shape for c in cols] == [(4, 8)] * 3 and all(c.flags.c_contiguous for c in cols)
    np.testing.assert_array_equal(np.concatenate([x @ c.T for c in cols], axis=1), x @ w.T)
    w_parts, x_parts = row_parallel_shards(w, 2), row_parallel_shards(x, 2)
    assert [p.shape for p in w_parts] == [(12, 4)] * 2 and all(p.flags.c_contiguous for p in w_parts)
    np.testing.assert_allclose(sum(xp @ wp.T for xp, wp in zip(x_parts, w_parts)), x @ w.T, rtol=1e-12)
    with pytest.raises(mc.ContractError, match="argument 'weight'.*divisible by size = 5"):
        column_parallel_shards(w, 5)
    with pytest.raises(mc.ContractError, match="argument 'array'.*a 2-d array"):
        row_parallel_shards(np.zeros(8), 2)
    with pytest.raises(mc.ContractError, match="argument 'size'"):
        row_parallel_shards(w, 0)


def fake_comm(size: int = 2) -> nccl.Communicator:
    comm = object.__new__(nccl.Communicator)
    ctx = object.__new__(mc.Context)
    ctx._closed, ctx._handle, ctx._device = False, 0x100, mc.Device(0, 0)
    comm._setup(ctx, SimpleNamespace(handle=1), 0, size)
    comm._finalizer.detach()
    return comm


def test_layers_refuse_bad_ranks_and_specs_before_making_plans() -> None:
    comm = fake_comm(2)
    with pytest.raises(mc.ContractError, match="argument 'spec'.*n divisible by the 2 ranks.*n = 7"):
        ColumnParallelLinear([comm], [None], mc.DenseMatmulSpec(1, 7, 8))  # type: ignore[list-item]
    with pytest.raises(mc.ContractError, match="argument 'spec'.*k divisible by the 2 ranks.*k = 9"):
        RowParallelLinear([comm], [None], mc.DenseMatmulSpec(1, 8, 9))  # type: ignore[list-item]
    with pytest.raises(mc.ContractError, match="argument 'spec'.*DenseMatmulSpec"):
        RowParallelLinear([comm], [None], (1, 8, 8))  # type: ignore[arg-type, list-item]
    with pytest.raises(mc.ContractError, match="argument 'communicators'"):
        ColumnParallelLinear([], [], mc.DenseMatmulSpec(1, 8, 8))
    with pytest.raises(mc.ContractError, match="argument 'streams'.*1 Streams"):
        ColumnParallelLinear([comm], [], mc.DenseMatmulSpec(1, 8, 8))
    with pytest.raises(mc.ContractError, match=r"argument 'streams\[0\]'.*a Stream of"):
        ColumnParallelLinear([comm], ["s"], mc.DenseMatmulSpec(1, 8, 8))  # type: ignore[list-item]
    with pytest.raises(mc.ContractError, match="argument 'gather'.*a bool"):
        ColumnParallelLinear([comm], [None], mc.DenseMatmulSpec(1, 8, 8), gather=1)  # type: ignore[arg-type, list-item]
    comm._closed = True
    with pytest.raises(mc.ClosedResourceError, match=r"communicators\[0\]"):
        ColumnParallelLinear([comm], [None], mc.DenseMatmulSpec(1, 8, 8))  # type: ignore[list-item]


def test_capture_each_refuses_bad_streams_before_capturing() -> None:
    with pytest.raises(mc.ContractError, match="argument 'streams'"):
        capture_each([], None, lambda i, r: None)
    with pytest.raises(mc.ContractError, match=r"argument 'streams\[0\]'.*a mircuda Stream"):
        capture_each([0], None, lambda i, r: None)  # type: ignore[list-item]
    s = object.__new__(mc.Stream)
    s._handle = 0x50
    with pytest.raises(mc.ContractError, match=r"argument 'streams\[1\]'.*a stream not listed before"):
        capture_each([s, s], None, lambda i, r: None)
    with pytest.raises(mc.ContractError, match="argument 'enqueue'"):
        capture_each([s], None, None)  # type: ignore[arg-type]


def test_row_parallel_symmetric_option_and_its_y_checks() -> None:
    comm = fake_comm(2)
    with pytest.raises(mc.ContractError, match="argument 'symmetric'.*a bool.*received 1"):
        RowParallelLinear([comm], [None], mc.DenseMatmulSpec(1, 8, 8), symmetric=1)  # type: ignore[arg-type, list-item]
    layer = object.__new__(RowParallelLinear)  # the y resolution alone: no plans are needed for it
    own, other = object(), object()
    layer._plans, layer._closed, layer._symmetric, layer._outputs = [None], False, True, [own]  # type: ignore[list-item]
    assert layer._y(None) == [own] and layer._y([own]) == [own]
    with pytest.raises(mc.ContractError, match=r"argument 'y\[0\]'.*None or the layer's outputs\[i\].*received object"):
        layer._y([other])  # type: ignore[list-item]
    with pytest.raises(mc.ContractError, match="argument 'y'.*a sequence of 1 DeviceBuffers"):
        layer._y([own, own])  # type: ignore[list-item]
    layer._symmetric, layer._outputs = False, []
    with pytest.raises(mc.ContractError, match="argument 'y'.*received None.*only for a layer made with symmetric=True"):
        layer._y(None)
    assert layer._y([other]) == [other]  # type: ignore[list-item]
    layer._closed = True
    with pytest.raises(mc.ClosedResourceError, match="RowParallelLinear was closed"):
        layer._y(None)
    assert RowParallelLinear.symmetric.fget(layer) is False  # type: ignore[attr-defined]
