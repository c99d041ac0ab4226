"""A stand-in for what ``mircuda._cuda._bind_hot_path`` asks the driver, for tests that bind the hot path to
stand-in entry points (ctypes callbacks) without a GPU."""

from __future__ import annotations

from typing import Any

import pytest

from mircuda import _cuda


class StandInDriver:
    """Answers the calls ``_bind_hot_path`` makes: the driver version, and each entry point's address
    from ``address`` (by name; 0x1 for any other, never called)."""

    class CUdriverProcAddress_flags:
        CU_GET_PROC_ADDRESS_DEFAULT = 0

    def __init__(self, address: dict[str, int], version: int) -> None:
        self._address, self._version = address, version

    def cuDriverGetVersion(self) -> tuple[int, int]:
        return 0, self._version

    def cuGetProcAddress(self, name: bytes, version: int, flags: int) -> tuple[int, int]:
        return 0, self._address.get(name.decode(), 0x1)


def keep_bindings(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Make the test's rebinding undone at its end: the module's entry functions are restored by
    ``monkeypatch``; returns the process's real entry points (for tests that restore them earlier, so
    that GPU tests later in the process find them)."""
    for name in ("launch_kernel", "launch_kernel_programmatic", "launch_kernel_attributes", "graph_launch",
                 "event_record", "hot_path_kind", "bound_hotpath"):
        monkeypatch.setattr(_cuda, name, getattr(_cuda, name))
    real = dict(_cuda.entry_points)
    monkeypatch.setattr(_cuda, "entry_points", {})
    return real
