"""Memory: stream-ordered pools, typed device buffers, pinned host buffers, the buffer check, N-d views,
and foreign arrays (DLPack both ways, CUDA Array Interface import)."""

from ._buffer import (HOST_ARRAY_HINT, DeviceBuffer, PinnedBuffer, check_device_buffer, describe_argument,
                      peer_accessible)
from ._foreign import BorrowedDeviceBuffer, as_array_view, from_cuda_array_interface, from_dlpack
from ._pool import MemoryPool
from ._view import ArrayView

__all__ = ["ArrayView", "BorrowedDeviceBuffer", "DeviceBuffer", "HOST_ARRAY_HINT", "MemoryPool", "PinnedBuffer",
           "as_array_view", "check_device_buffer", "describe_argument", "from_cuda_array_interface", "from_dlpack",
           "peer_accessible"]
