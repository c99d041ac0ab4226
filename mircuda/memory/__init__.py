"""Memory: stream-ordered pools, typed device buffers, pinned host buffers, N-d views, and foreign
arrays (DLPack both ways, CUDA Array Interface import)."""

from ._buffer import DeviceBuffer, PinnedBuffer
from ._foreign import BorrowedDeviceBuffer, as_array_view, from_cuda_array_interface, from_dlpack
from ._pool import MemoryPool
from ._view import ArrayView

__all__ = ["ArrayView", "BorrowedDeviceBuffer", "DeviceBuffer", "MemoryPool", "PinnedBuffer", "as_array_view",
           "from_cuda_array_interface", "from_dlpack"]
