"""Runtime: driver, devices, contexts, streams, events, profiler ranges."""

from ._context import Context
from ._device import Device, DeviceInfo, Driver
from ._event import Event
from ._profiler import ProfilerRange
from ._stream import Stream

__all__ = ["Context", "Device", "DeviceInfo", "Driver", "Event", "ProfilerRange", "Stream"]
