"""Several GPUs: tensor-parallel linear layers (a DenseMatmulPlan per device plus NCCL collectives) and
one CUDA graph per device. Needs :mod:`mircuda.nccl` (the ``[nccl]`` extra)."""

from ._capture import capture_each
from ._linear import ColumnParallelLinear, RowParallelLinear, column_parallel_shards, row_parallel_shards

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "capture_each", "column_parallel_shards",
           "row_parallel_shards"]
