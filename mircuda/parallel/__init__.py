"""Several GPUs: tensor-parallel linear layers (a DenseMatmulPlan per device plus NCCL collectives) and
one CUDA graph per device. The layers need :mod:`mircuda.nccl` (the ``[nccl]`` extra: making one without
it raises :class:`~mircuda.errors.NcclNotFound`); the host-only shard helpers and ``capture_each`` do not."""

from ._capture import capture_each
from ._linear import ColumnParallelLinear, RowParallelLinear, column_parallel_shards, row_parallel_shards

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "capture_each", "column_parallel_shards",
           "row_parallel_shards"]
