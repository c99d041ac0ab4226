"""Occupancy queries of one loaded kernel (``cuOccupancy*``): how many blocks or clusters fit on the
device at once, and which block size reaches the most resident warps.

The driver computes every figure from the function's compiled resources (registers, static shared
memory), the requested dynamic shared memory and the device's limits; these functions validate the
arguments, call it and return its answer unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _cuda
from ..errors import LaunchConfigError
from ._config import _dim3, _is_int

if TYPE_CHECKING:
    from ..runtime import Context

__all__ = ["SuggestedBlockSize", "max_active_blocks_per_sm", "max_active_clusters", "suggested_block_size"]


class SuggestedBlockSize(NamedTuple):
    """The answer of ``cuOccupancyMaxPotentialBlockSize``.

    Attributes:
        min_grid_size: the fewest blocks that reach full occupancy on every SM.
        block_size: threads per block that maximize resident warps per SM.
    """

    min_grid_size: int
    block_size: int


def _threads(block: Any) -> int:
    x, y, z = _dim3("block", block)
    return x * y * z


def _bytes(name: str, value: Any) -> int:
    if not _is_int(value) or int(value) < 0:
        raise LaunchConfigError(f"{name}: expected a non-negative int (bytes), received {value!r}")
    return int(value)


def max_active_blocks_per_sm(context: Context, function: Any, max_threads: int, block: Any,
                             shared_mem_bytes: Any = 0) -> int:
    """``cuOccupancyMaxActiveBlocksPerMultiprocessor``: resident blocks of ``block`` threads (an int
    or a dim3 tuple) with ``shared_mem_bytes`` of dynamic shared memory per SM.

    Raises:
        LaunchConfigError: ``block`` is not positive dims within the function's ``max_threads``, or
            ``shared_mem_bytes`` is not a non-negative int.
    """
    threads = _threads(block)
    if threads > max_threads:
        raise LaunchConfigError(f"block: {threads} threads exceed the function's limit of {max_threads} per block")
    smem = _bytes("shared_mem_bytes", shared_mem_bytes)
    context._make_current()
    return int(_cuda.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", function, threads, smem))


def suggested_block_size(context: Context, function: Any, shared_mem_bytes: Any = 0,
                         block_limit: Any = 0) -> SuggestedBlockSize:
    """``cuOccupancyMaxPotentialBlockSize`` with a constant dynamic shared memory size per block.

    Args:
        shared_mem_bytes: dynamic shared memory per block, bytes (the same for every block size).
        block_limit: the largest block size to consider; 0 means the function's limit.

    Raises:
        LaunchConfigError: a negative or non-int argument.
    """
    smem = _bytes("shared_mem_bytes", shared_mem_bytes)
    limit = _bytes("block_limit", block_limit)
    context._make_current()
    grid, block = _cuda.call("cuOccupancyMaxPotentialBlockSize", function, None, smem, limit)
    return SuggestedBlockSize(int(grid), int(block))


def max_active_clusters(context: Context, function: Any, cluster: Any, block: Any, shared_mem_bytes: Any = 0) -> int:
    """``cuOccupancyMaxActiveClusters``: how many clusters of ``cluster`` blocks (dim3) of ``block``
    threads with ``shared_mem_bytes`` of dynamic shared memory can be resident at once on the
    device (compute capability >= 9.0).

    Raises:
        LaunchConfigError: bad dimensions or bytes, or a device older than compute capability 9.0.
        CudaError: the driver refused the configuration (e.g. a cluster larger than the portable
            size of 8 blocks for a function that did not opt into non-portable sizes).
    """
    cx, cy, cz = _dim3("cluster", cluster)
    bx, by, bz = _dim3("block", block)
    smem = _bytes("shared_mem_bytes", shared_mem_bytes)
    info = context.device_info()
    if tuple(info.compute_capability) < (9, 0):
        cc = ".".join(map(str, info.compute_capability))
        raise LaunchConfigError(f"cluster: thread block clusters need compute capability >= 9.0, the device has {cc}")
    drv = _cuda.driver()
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cx, cy, cz
    config = drv.CUlaunchConfig()
    # The grid only has to be a multiple of the cluster: the query does not depend on its size.
    config.gridDimX, config.gridDimY, config.gridDimZ = cx, cy, cz
    config.blockDimX, config.blockDimY, config.blockDimZ = bx, by, bz
    config.sharedMemBytes = smem
    config.attrs = [attr]
    config.numAttrs = 1
    context._make_current()
    return int(_cuda.call("cuOccupancyMaxActiveClusters", function, config))
