"""Numba-CUDA kernels beside CUDA C: one world of streams, pools, launches (``import mircuda.numba_ext``).

- :func:`numba_kernel` turns a Python kernel plus a Numba signature into a module source for
  :class:`mircuda.Compiler`: compiled by numba-cuda for the context's exact target, cached and
  loaded like CUDA C, bound with a ``cuda_export`` contract checked against the signature, and
  launched through mircuda's typed launch path in Numba's kernel ABI (Numba's dispatcher is not
  involved). :class:`ArrayView` gives N-d parameters their shape and strides.
- :func:`declare_device` declares ``extern "C" __device__`` functions of CUDA C sources for Numba
  kernels; :mod:`mircuda.numba_ext.helpers` holds mircuda's own (bf16/fp16 conversions, E4M3 and
  E2M1 decoding, warp reductions).
- :func:`numba_stream`, :func:`as_numba_array`, :func:`as_device_buffer` share streams and memory with
  Numba's own API (and any ``__cuda_array_interface__`` producer) without host synchronization;
  :func:`use_memory_pool` makes Numba allocate from a mircuda pool.
- :func:`c_function`, :func:`driver_function`, :class:`LaunchRecord` and :func:`record_launcher`
  let ``@numba.njit`` host loops launch kernels (and call other C entry points) at the driver's cost.

Importing this package imports numba and numba-cuda; ``import mircuda`` alone does not.
"""

from __future__ import annotations

from ._abi import NUMBA_TYPES, numba_type_of
from ._cuda_c import CudaLinkSource, declare_device
from ._emm import PoolMemoryManager, use_memory_pool
from ._interop import BorrowedDeviceBuffer, as_device_buffer, as_numba_array, numba_stream
from ._njit import DRIVER_PROTOTYPES, LaunchRecord, c_function, check, driver_function, record_launcher
from ._source import NumbaKernelSource, numba_kernel
from ._view import ArrayView

__all__ = [
    "ArrayView", "BorrowedDeviceBuffer", "CudaLinkSource", "DRIVER_PROTOTYPES", "LaunchRecord", "NUMBA_TYPES",
    "NumbaKernelSource", "PoolMemoryManager", "as_device_buffer", "as_numba_array", "c_function", "check",
    "declare_device", "driver_function", "numba_kernel", "numba_stream", "numba_type_of", "record_launcher",
    "use_memory_pool",
]


def __getattr__(name: str) -> object:
    if name == "helpers":  # declares the helpers with numba-cuda on first use
        import importlib

        return importlib.import_module(".helpers", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
