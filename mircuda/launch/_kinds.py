"""Launch kinds beyond a plain grid: cooperative launches and thread block clusters, checked against
the kernel's occupancy and the device's limits before the driver sees them, and launched through
``cuLaunchKernelEx`` with the matching attribute list."""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..errors import LaunchConfigError
from ._config import LaunchConfig
from ._occupancy import max_active_blocks_per_sm, max_active_clusters

if TYPE_CHECKING:
    from ._kernel import TypedKernel

__all__ = ["PORTABLE_CLUSTER_SIZE", "attribute_launcher", "check_launch_kind"]

PORTABLE_CLUSTER_SIZE = 8
"""The largest cluster every cc >= 9.0 device runs without the function's non-portable opt-in
(CUDA C++ Programming Guide, "Thread Block Clusters")."""


def check_launch_kind(kernel: TypedKernel, config: LaunchConfig) -> None:
    """Check a cooperative or cluster launch of ``kernel`` (the plain limits are checked already).

    Raises:
        LaunchConfigError: a cooperative grid larger than can be resident at once (the figures are
            named), a cluster of more than 8 blocks for a function without the non-portable opt-in,
            or a cluster that cannot be resident at all.
    """
    context = kernel._context
    if config.cooperative:
        per_sm = max_active_blocks_per_sm(context, kernel._cu, kernel.attributes.max_threads_per_block, config.block,
                                          config.shared_mem_bytes)
        sms = context.device_info().multiprocessor_count
        gx, gy, gz = config.grid
        blocks = gx * gy * gz
        if blocks > per_sm * sms:
            raise LaunchConfigError(
                f"grid: a cooperative launch needs every block resident at once: {blocks} blocks exceed "
                f"{per_sm} per SM x {sms} SMs = {per_sm * sms} for kernel {kernel.contract.symbol!r} with "
                f"{config.threads_per_block} threads and {config.shared_mem_bytes} bytes of dynamic shared memory "
                "per block (kernel.max_active_blocks_per_sm)")
    if config.cluster is not None:
        cx, cy, cz = config.cluster  # type: ignore[misc]
        size = cx * cy * cz
        if size > PORTABLE_CLUSTER_SIZE:
            drv = _cuda.driver()
            allowed = int(_cuda.call("cuFuncGetAttribute",
                                     drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                     kernel._cu))
            if not allowed:
                raise LaunchConfigError(
                    f"cluster: {size} blocks exceed the portable cluster size {PORTABLE_CLUSTER_SIZE}, and kernel "
                    f"{kernel.contract.symbol!r} has not opted into non-portable sizes "
                    "(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")
        resident = max_active_clusters(context, kernel._cu, config.cluster, config.block, config.shared_mem_bytes)
        if resident < 1:
            raise LaunchConfigError(
                f"cluster: no cluster of {config.cluster} blocks of {config.threads_per_block} threads and "
                f"{config.shared_mem_bytes} bytes of dynamic shared memory can be resident on this device "
                f"(cuOccupancyMaxActiveClusters = 0 for kernel {kernel.contract.symbol!r})")


def attribute_launcher(config: LaunchConfig) -> Any:
    """The launch entry point for ``config``'s attributes, taking the ten arguments of
    ``_cuda.launch_kernel``: ``cuLaunchKernelEx`` with the attribute array bound (built once per
    call of this function; the returned callable keeps it alive)."""
    buffer = _cuda.launch_attribute_array(config.launch_attributes)
    launcher = functools.partial(_cuda.launch_kernel_attributes, ctypes.addressof(buffer),
                                 len(config.launch_attributes))
    launcher.attribute_array = buffer  # type: ignore[attr-defined]
    return launcher
