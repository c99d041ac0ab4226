"""Launch geometry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dtypes import is_integer_value
from ..errors import LaunchConfigError

if TYPE_CHECKING:
    from ..runtime import DeviceInfo

__all__ = ["LaunchConfig"]

Dim3 = tuple[int, int, int]


_is_int = is_integer_value  # int or numpy integer; not bool, numpy.bool_ or numpy.timedelta64


def _dim3(name: str, value: int | tuple[int, ...]) -> Dim3:
    dims = (value,) if _is_int(value) else tuple(value) if isinstance(value, (tuple, list)) else None
    if dims is None or not 1 <= len(dims) <= 3 or not all(_is_int(d) for d in dims):
        raise LaunchConfigError(f"{name}: expected an int or a tuple of 1-3 ints, received {value!r}")
    dims = tuple(int(d) for d in dims)
    if any(d < 1 for d in dims):
        raise LaunchConfigError(f"{name}: expected every dimension >= 1, received {value!r}")
    padded = dims + (1, 1)
    return (padded[0], padded[1], padded[2])


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block dimensions and dynamic shared memory of one launch.

    Attributes:
        grid: blocks per grid (x, y, z); an int means (x, 1, 1).
        block: threads per block (x, y, z).
        shared_mem_bytes: dynamic shared memory per block, in bytes.
        programmatic_stream_serialization: launch with programmatic dependent launch
            (``cuLaunchKernelEx`` with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``;
            compute capability >= 9.0): the kernel may start before the previous kernel on the stream
            has finished, once that kernel's blocks have all executed ``griddepcontrol.launch_dependents``
            (or exited). The kernel must execute ``griddepcontrol.wait`` (CUDA C:
            ``cudaGridDependencySynchronize()``) before it reads anything earlier work on the stream
            writes; without the attribute that instruction returns at once, so such a kernel is correct
            either way. Typed launches honor it; ``@njit`` launch records refuse it; a graph node update
            cannot change it (see :meth:`Graph.update_kernel`).

        cooperative: a cooperative launch (``cuLaunchKernelEx`` with ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE``):
            every block is resident at once, so the kernel may synchronize the whole grid
            (``cooperative_groups::this_grid().sync()``). The grid must fit the kernel's occupancy:
            at most ``max_active_blocks_per_sm(block, shared_mem_bytes)`` blocks per SM times the SMs.
        cluster: thread block cluster dimensions (x, y, z) (``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION``;
            compute capability >= 9.0): blocks of one cluster are co-scheduled on one GPC and share
            distributed shared memory. Each grid dimension must be a multiple of the cluster's; more
            than 8 blocks per cluster needs the function's non-portable cluster size opt-in; None
            launches without clusters.

    Limits of the device (threads per block, block and grid dimensions, opt-in shared memory) are
    checked when the configuration is first used with a kernel; so are the cooperative grid's size
    and the cluster's residency (``cuOccupancyMaxActiveClusters``).

    Raises:
        LaunchConfigError: a dimension is not a positive int (``int`` or ``numpy.integer``; ``bool`` and
            ``numpy.timedelta64`` are not counts), ``shared_mem_bytes`` is not a non-negative int,
            ``programmatic_stream_serialization`` or ``cooperative`` is not a bool, or the grid is not
            made of whole clusters.
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

    grid: Dim3
    block: Dim3
    shared_mem_bytes: int = 0
    programmatic_stream_serialization: bool = False
    cooperative: bool = False
    cluster: Dim3 | int | None = None

    if TYPE_CHECKING:
        # What the constructor accepts; __post_init__ normalizes grid and block to Dim3, the type the
        # fields hold afterwards (the dataclass's own __init__ runs at run time).
        def __init__(self, grid: int | tuple[int, ...], block: int | tuple[int, ...], shared_mem_bytes: int = 0,
                     programmatic_stream_serialization: bool = False) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _dim3("grid", self.grid))
        object.__setattr__(self, "block", _dim3("block", self.block))
        if not _is_int(self.shared_mem_bytes) or self.shared_mem_bytes < 0:
            raise LaunchConfigError(f"shared_mem_bytes: expected a non-negative int, received {self.shared_mem_bytes!r}")
        object.__setattr__(self, "shared_mem_bytes", int(self.shared_mem_bytes))
        if not isinstance(self.programmatic_stream_serialization, bool):
            raise LaunchConfigError("programmatic_stream_serialization: expected a bool, received "
                                    f"{self.programmatic_stream_serialization!r}")
        if not isinstance(self.cooperative, bool):
            raise LaunchConfigError(f"cooperative: expected a bool, received {self.cooperative!r}")
        if self.cluster is not None:
            object.__setattr__(self, "cluster", _dim3("cluster", self.cluster))
            for axis, (g, c) in enumerate(zip(self.grid, self.cluster)):  # type: ignore[arg-type]
                if g % c:
                    raise LaunchConfigError(f"grid[{axis}]: {g} is not a multiple of cluster[{axis}] = {c} "
                                            "(a grid is made of whole clusters)")

    @property
    def launch_attributes(self) -> list[tuple[int, tuple[int, ...]]]:
        """The ``cuLaunchKernelEx`` attributes this configuration asks for, as ``(CUlaunchAttributeID,
        values)``: cooperative (2), cluster dimension (4), programmatic stream serialization (6)."""
        out: list[tuple[int, tuple[int, ...]]] = []
        if self.cooperative:
            out.append((2, (1,)))
        if self.cluster is not None:
            out.append((4, tuple(self.cluster)))  # type: ignore[arg-type]
        if self.programmatic_stream_serialization:
            out.append((6, (1,)))
        return out

    @classmethod
    def for_elements(cls, n: int, block: int = 256, shared_mem_bytes: int = 0) -> LaunchConfig:
        """One thread per element: ``grid = ceil(n / block)`` blocks of ``block`` threads.

        Raises:
            LaunchConfigError: ``n`` or ``block`` is not a positive int.
        """
        if not _is_int(n) or n < 1:
            raise LaunchConfigError(f"n: expected a positive int (elements), received {n!r}")
        if not _is_int(block) or block < 1:
            raise LaunchConfigError(f"block: expected a positive int (threads), received {block!r}")
        n, block = int(n), int(block)
        return cls(((n + block - 1) // block,), (block,), shared_mem_bytes)

    @property
    def threads_per_block(self) -> int:
        b = self.block
        return b[0] * b[1] * b[2]

    def check(self, info: DeviceInfo, max_threads_per_block: int | None = None) -> None:
        """Check against a device's limits (and a function's thread limit, when given).

        Dynamic shared memory is checked here against the opt-in maximum alone; a kernel launch checks
        it with the function's static shared memory added (:class:`TypedKernel`).

        Raises:
            LaunchConfigError: naming the exceeded limit, the limit and the value; or
                ``programmatic_stream_serialization`` or ``cluster`` on a device of compute capability < 9.0.
        """
        if self.programmatic_stream_serialization and not info.supports_programmatic_launch:
            cc = ".".join(map(str, info.compute_capability))
            raise LaunchConfigError("programmatic_stream_serialization: needs compute capability >= 9.0, "
                                    f"the device has {cc}")
        if self.cluster is not None and tuple(info.compute_capability) < (9, 0):
            cc = ".".join(map(str, info.compute_capability))
            raise LaunchConfigError(f"cluster: thread block clusters need compute capability >= 9.0, the device has {cc}")
        limit = info.max_threads_per_block if max_threads_per_block is None else max_threads_per_block
        if self.threads_per_block > limit:
            raise LaunchConfigError(f"block: {self.threads_per_block} threads per block exceed the limit {limit}")
        for axis, (d, m) in enumerate(zip(self.block, info.max_block_dims)):
            if d > m:
                raise LaunchConfigError(f"block[{axis}]: {d} exceeds the device's maximum {m}")
        for axis, (d, m) in enumerate(zip(self.grid, info.max_grid_dims)):
            if d > m:
                raise LaunchConfigError(f"grid[{axis}]: {d} exceeds the device's maximum {m}")
        if self.shared_mem_bytes > info.max_shared_memory_per_block_optin_bytes:
            raise LaunchConfigError(
                f"shared_mem_bytes: expected at most {info.max_shared_memory_per_block_optin_bytes} bytes per block "
                f"(the device's opt-in maximum), received {self.shared_mem_bytes}")
