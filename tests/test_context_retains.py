"""Primary-context retains and the memory of a closed Context, without a device: the driver entry points
stand in as recording no-ops, so what mircuda decides to free (and what it leaves alone) is visible."""

from __future__ import annotations

from typing import Any

import pytest

from mircuda import _cuda
from mircuda.memory._buffer import free_address
from mircuda.runtime import Context, Device, Stream


@pytest.fixture()
def driver_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def call(name: str, *args: Any) -> Any:
        calls.append((name, *args))
        return 0x7000 if name == "cuDevicePrimaryCtxRetain" else None

    def call_status(name: str, *args: Any) -> tuple[int, Any]:
        calls.append((name, *args))
        return 0, None

    monkeypatch.setattr(_cuda, "call", call)
    monkeypatch.setattr(_cuda, "call_status", call_status)
    monkeypatch.setattr(_cuda, "make_current", lambda handle, force=False: None)
    return calls


def closed_stream(context: Context) -> Stream:
    stream = object.__new__(Stream)
    stream._context, stream._handle, stream._cu = context, 0, 0  # closed: a dropped buffer is freed synchronously
    return stream


def frees(calls: list[tuple[Any, ...]]) -> list[int]:
    return [c[1] for c in calls if c[0] == "cuMemFree"]


def test_a_closed_context_frees_its_memory_while_another_context_holds_the_device(driver_calls) -> None:
    device = Device(0, "cu-device-0")
    first, second = Context._retain(None, device), Context._retain(None, device)  # type: ignore[arg-type]
    assert device._retains == 2 and first.handle == second.handle == 0x7000  # one primary context
    second.close()
    assert device._retains == 1
    free_address(0xA000, closed_stream(second), second)
    assert frees(driver_calls) == [0xA000]  # the primary context (and this memory) lives on through `first`
    # cuMemFree does not wait for pool memory's users, and the closed stream's work may still run: the
    # context is synchronized first.
    names = [c[0] for c in driver_calls]
    assert names.index("cuCtxSynchronize") < names.index("cuMemFree")
    first.close()


def test_once_every_context_closed_nothing_of_theirs_is_freed_even_after_a_new_one(driver_calls) -> None:
    # With no retain left the primary context may have been destroyed with its memory; a new one may hand out
    # the same addresses, so a late finalizer of the old generation must not free them.
    device = Device(0, "cu-device-0")
    old = Context._retain(None, device)  # type: ignore[arg-type]
    old.close()
    assert device._retains == 0 and device._generation == 1
    new = Context._retain(None, device)  # type: ignore[arg-type]
    free_address(0xA000, closed_stream(old), old)
    assert frees(driver_calls) == []
    free_address(0xB000, closed_stream(new), new)  # the new context's own memory is freed
    assert frees(driver_calls) == [0xB000]
    new.close()


def test_a_context_dropped_without_close_releases_its_retain(driver_calls) -> None:
    import gc

    device = Device(0, "cu-device-0")
    kept = Context._retain(None, device)  # type: ignore[arg-type]
    dropped = Context._retain(None, device)  # type: ignore[arg-type]
    del dropped
    gc.collect()
    assert device._retains == 1 and device._generation == 0
    assert sum(c[0] == "cuDevicePrimaryCtxRelease" for c in driver_calls) == 1
    kept.close()
    assert device._retains == 0 and device._generation == 1
