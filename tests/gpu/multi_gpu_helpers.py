"""Helpers of the several-GPU tests: two contexts, or a skip that says why."""

from __future__ import annotations

import pytest

import mircuda as mc


def two_contexts(driver: mc.Driver) -> tuple[mc.Context, mc.Context]:
    """Contexts of devices 0 and 1; skips the test (with the count) on a host with fewer devices."""
    devices = driver.devices()
    if len(devices) < 2:
        pytest.skip(f"needs 2 CUDA devices; this host has {len(devices)}")
    return driver.create_context(devices[0]), driver.create_context(devices[1])


def require_peer_path(gpu0: mc.Context, gpu1: mc.Context) -> None:
    """Skip unless each device can access the other's memory (cuDeviceCanAccessPeer both ways)."""
    if not (gpu0.can_access_peer(gpu1) and gpu1.can_access_peer(gpu0)):
        pytest.skip("the two devices have no peer-to-peer path (cuDeviceCanAccessPeer reports 0)")
