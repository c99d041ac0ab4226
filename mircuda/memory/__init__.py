"""Memory: stream-ordered pools, typed device buffers, pinned host buffers."""

from ._buffer import DeviceBuffer, PinnedBuffer
from ._pool import MemoryPool

__all__ = ["DeviceBuffer", "MemoryPool", "PinnedBuffer"]
