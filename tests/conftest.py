"""Shared pytest configuration: tests under tests/gpu/ are marked ``gpu`` and skip without a device."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).parent / "gpu"


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    import mircuda as mc

    try:
        driver = mc.Driver.initialize()
    except mc.MircudaError as exc:
        return f"no usable CUDA driver: {exc}"
    if not driver.devices():
        return "the CUDA driver reports no device"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if GPU_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_unavailable_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
