"""Memory: stream-ordered pools, typed device buffers, pinned host buffers, the buffer check."""

from ._buffer import HOST_ARRAY_HINT, DeviceBuffer, PinnedBuffer, check_device_buffer, describe_argument
from ._pool import MemoryPool

__all__ = ["DeviceBuffer", "HOST_ARRAY_HINT", "MemoryPool", "PinnedBuffer", "check_device_buffer", "describe_argument"]
