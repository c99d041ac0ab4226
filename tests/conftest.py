"""Shared pytest configuration: tests under tests/gpu/ are marked ``gpu`` and skip without a device."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_probe import gpu_unavailable_reason

GPU_DIR = Path(__file__).parent / "gpu"


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
