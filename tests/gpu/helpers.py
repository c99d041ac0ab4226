"""Helpers for the GPU tests: moving test data through pinned memory."""

from __future__ import annotations

import numpy as np

import mircuda as mc


def upload(context: mc.Context, stream: mc.Stream, pool: mc.MemoryPool, array: np.ndarray) -> mc.DeviceBuffer:
    """Copy a host array into a new device buffer through pinned memory (test helper)."""
    buf = pool.allocate(array.dtype, stream, len(array))
    staging = context.allocate_pinned(array.dtype, len(array))
    staging.write_prefix(array)
    stream.copy_to_device(staging, buf)
    staging.wait()
    return buf


def download(context: mc.Context, stream: mc.Stream, buf: mc.DeviceBuffer) -> np.ndarray:
    """Copy a device buffer back to a numpy array (synchronizes; test helper)."""
    staging = context.allocate_pinned(buf.dtype, len(buf))
    stream.copy_to_host(buf, staging)
    return staging.to_numpy()
