"""Helpers for the GPU tests: moving test data through pinned memory."""

from __future__ import annotations

import os

import numpy as np

import mircuda as mc


def upload(context: mc.Context, stream: mc.Stream, pool: mc.MemoryPool, array: np.ndarray) -> mc.DeviceBuffer:
    """Copy a host array into a new device buffer through pinned memory (``Stream.upload``; blocks)."""
    return stream.upload(pool, array)


def download(context: mc.Context, stream: mc.Stream, buf: mc.DeviceBuffer) -> np.ndarray:
    """Copy a device buffer back to a numpy array (``Stream.download``; blocks)."""
    return stream.download(buf)


def patience_s(seconds: float) -> float:
    """A guard's wait (against a hang, never a measurement), scaled by ``MIRCUDA_TEST_PATIENCE``
    (default 1): tools that slow the process down, such as compute-sanitizer, raise it so that a guard
    fails only on a real hang, not because the process runs slowly."""
    return seconds * float(os.environ.get("MIRCUDA_TEST_PATIENCE", "1"))
