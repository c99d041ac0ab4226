"""Blocking host <-> device transfers staged through a temporary pinned buffer (``Stream.upload`` /
``Stream.download``): the convenience path for tests, notebooks and set-up code. The explicit API
(``copy_to_device`` / ``copy_to_host``) keeps taking pinned memory only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import dtype_info
from ..errors import ContractError, UseAfterFree
from ._buffer import DeviceBuffer
from ._pool import MemoryPool

if TYPE_CHECKING:
    from ..runtime import Stream

__all__ = ["upload", "download"]


def upload(stream: Stream, pool: MemoryPool, array: Any) -> DeviceBuffer[Any]:
    """See :meth:`Stream.upload`."""
    if not isinstance(pool, MemoryPool):
        raise ContractError("pool", "a MemoryPool", type(pool).__name__)
    if pool.context is not stream.context:
        raise ContractError("pool", f"a pool of {stream.context!r}", f"a pool of {pool.context!r}")
    host = np.asarray(array)
    info = dtype_info(host.dtype)
    flat = np.ascontiguousarray(host).reshape(-1)
    buffer = pool.allocate(info.scalar_type, stream, flat.size)
    if not flat.size:
        return buffer
    try:
        with stream.context.allocate_pinned(info.scalar_type, flat.size) as pinned:
            pinned.write_prefix(flat)
            stream.copy_to_device(pinned, buffer)
            pinned.wait()  # the staging buffer is freed on exit: the copy must be done
    except BaseException:
        buffer.free(stream)
        raise
    return buffer


def download(stream: Stream, buffer: DeviceBuffer[Any]) -> np.ndarray[Any, Any]:
    """See :meth:`Stream.download`."""
    if not isinstance(buffer, DeviceBuffer):
        raise ContractError("buffer", "a DeviceBuffer", type(buffer).__name__)
    if buffer.freed:
        raise UseAfterFree(f"argument 'buffer': {buffer!r} was freed")
    if buffer.context is not stream.context:
        raise ContractError("buffer", f"a buffer of {stream.context!r}", f"a buffer of {buffer.context!r}")
    if not len(buffer):
        return np.empty(0, dtype=buffer.dtype)
    with stream.context.allocate_pinned(buffer.scalar_type, len(buffer)) as pinned:
        stream.copy_to_host(buffer, pinned)
        return pinned.to_numpy()
