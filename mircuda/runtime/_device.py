"""Driver initialization, devices and their static properties."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _cuda, _repr
from ..errors import ContractError

if TYPE_CHECKING:
    from ._context import Context

__all__ = ["Driver", "Device", "DeviceInfo"]


@dataclass(frozen=True)
class DeviceInfo:
    """Static properties of one device, read once from ``cuDeviceGetAttribute``.

    Sizes are in bytes; dimensions in threads (block) or blocks (grid).
    """

    name: str
    ordinal: int
    compute_capability: tuple[int, int]
    multiprocessor_count: int
    integrated: bool
    memory_pools_supported: bool
    total_memory_bytes: int
    l2_cache_bytes: int
    max_shared_memory_per_block_bytes: int
    max_shared_memory_per_block_optin_bytes: int
    warp_size: int
    max_threads_per_block: int
    max_block_dims: tuple[int, int, int]
    max_grid_dims: tuple[int, int, int]
    clock_rate_khz: int
    memory_bus_width_bits: int

    @property
    def arch(self) -> str:
        """The NVRTC target for this exact device, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    _repr_html_ = _repr.dataclass_html  # a table in notebooks

    def _repr_extra_(self) -> list[tuple[str, object]]:
        return [("arch", self.arch), ("supports_programmatic_launch", self.supports_programmatic_launch)]

    @property
    def supports_programmatic_launch(self) -> bool:
        """Whether kernels can launch with programmatic dependent launch (``griddepcontrol``,
        compute capability >= 9.0; PTX ISA 7.8): see ``LaunchConfig.programmatic_stream_serialization``."""
        return tuple(self.compute_capability) >= (9, 0)


_ATTRIBUTES = {
    "cc_major": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
    "cc_minor": "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
    "sms": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
    "integrated": "CU_DEVICE_ATTRIBUTE_INTEGRATED",
    "pools": "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED",
    "l2": "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE",
    "smem": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
    "smem_optin": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "warp": "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
    "threads": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "bx": "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X",
    "by": "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y",
    "bz": "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z",
    "gx": "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X",
    "gy": "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y",
    "gz": "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z",
    "clock": "CU_DEVICE_ATTRIBUTE_CLOCK_RATE",
    "bus": "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH",
}


class Device:
    """One CUDA device, by ordinal. Obtain from :meth:`Driver.devices`."""
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

    def __init__(self, ordinal: int, cu_device: Any) -> None:
        self._ordinal = ordinal
        self._cu = cu_device
        self._info: DeviceInfo | None = None
        # Open mircuda Contexts of this device (primary-context retains), and how many times that count fell
        # to 0 (the primary context may have been destroyed then, and its memory with it): a closed Context's
        # memory may still be freed while the count is above 0 in the generation the Context was made in.
        self._retains = 0
        self._generation = 0
        self._lock = threading.RLock()  # retain + count, count + release, and a closed context's check + free

    @property
    def ordinal(self) -> int:
        return self._ordinal

    @property
    def handle(self) -> int:
        """The ``CUdevice`` as an int."""
        return int(self._cu)

    def info(self) -> DeviceInfo:
        """Static properties (cached after the first call)."""
        if self._info is None:
            drv = _cuda.driver()
            attr = drv.CUdevice_attribute
            v = {k: int(_cuda.call("cuDeviceGetAttribute", getattr(attr, n), self._cu))
                 for k, n in _ATTRIBUTES.items()}
            raw_name = _cuda.call("cuDeviceGetName", 256, self._cu)
            name = raw_name.split(b"\0", 1)[0].decode(errors="replace")
            total = int(_cuda.call("cuDeviceTotalMem", self._cu))
            self._info = DeviceInfo(
                name=name,
                ordinal=self._ordinal,
                compute_capability=(v["cc_major"], v["cc_minor"]),
                multiprocessor_count=v["sms"],
                integrated=bool(v["integrated"]),
                memory_pools_supported=bool(v["pools"]),
                total_memory_bytes=total,
                l2_cache_bytes=v["l2"],
                max_shared_memory_per_block_bytes=v["smem"],
                max_shared_memory_per_block_optin_bytes=v["smem_optin"],
                warp_size=v["warp"],
                max_threads_per_block=v["threads"],
                max_block_dims=(v["bx"], v["by"], v["bz"]),
                max_grid_dims=(v["gx"], v["gy"], v["gz"]),
                clock_rate_khz=v["clock"],
                memory_bus_width_bits=v["bus"],
            )
        return self._info

    def __repr__(self) -> str:
        return f"Device({self._ordinal})"


class Driver:
    """The initialized CUDA driver of this process.

    ``Driver.initialize()`` calls ``cuInit(0)`` once and returns the process-wide driver object.

    Raises:
        UnsupportedPlatform: no CUDA driver library on this machine.
        CudaError: the driver failed to initialize (e.g. ``CUDA_ERROR_NO_DEVICE``).
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

    _instance: Driver | None = None
    _lock = threading.Lock()

    def __init__(self, _token: object) -> None:
        if _token is not _TOKEN:
            raise TypeError("use Driver.initialize()")
        count = int(_cuda.call("cuDeviceGetCount"))
        self._devices = [Device(i, _cuda.call("cuDeviceGet", i)) for i in range(count)]
        self._version = int(_cuda.call("cuDriverGetVersion"))

    @classmethod
    def initialize(cls) -> Driver:
        """Initialize the CUDA driver (``cuInit(0)``) once per process and return the driver object.

        Raises:
            UnsupportedPlatform: no CUDA driver library on this machine.
            CudaError: the driver failed to initialize, with its error name
                (e.g. ``CUDA_ERROR_NO_DEVICE``).
        """
        with cls._lock:
            if cls._instance is None:
                _cuda.driver()
                cls._instance = cls(_TOKEN)
            return cls._instance

    @property
    def version(self) -> tuple[int, int]:
        """The CUDA version the driver implements, e.g. ``(13, 0)``."""
        return self._version // 1000, (self._version % 1000) // 10

    def devices(self) -> list[Device]:
        """All visible devices, by ordinal."""
        return list(self._devices)

    def device(self, ordinal: int) -> Device:
        """The device with this ordinal.

        Raises:
            ContractError: ``ordinal`` is not in ``[0, len(devices()) - 1]`` (negative ordinals are
                refused, not counted from the end).
        """
        if type(ordinal) is not int or not 0 <= ordinal < len(self._devices):
            raise ContractError("device", f"a device ordinal in [0, {len(self._devices) - 1}]", repr(ordinal))
        return self._devices[ordinal]

    def create_context(self, device: Device) -> Context:
        """Retain ``device``'s primary context (``cuDevicePrimaryCtxRetain``).

        The returned :class:`Context` releases its retain on ``close()`` or at the end of a ``with``.

        Raises:
            ContractError: ``device`` is not one of this driver's devices.
        """
        from ._context import Context

        if not isinstance(device, Device) or device not in self._devices:
            raise ContractError("device", "a Device from Driver.devices()", repr(device))
        return Context._retain(self, device)


_TOKEN = object()
