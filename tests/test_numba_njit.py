"""C functions called from @numba.njit host code, and the launch-record launcher -- without a device.

A ctypes callback with ``cuLaunchKernel``'s prototype stands in for the driver: the compiled loop
calls it exactly as it would call the driver's entry point.
"""

from __future__ import annotations

import ctypes

import pytest

import mircuda as mc
from mircuda import _cuda

import mircuda.numba_ext as mn  # numba is required: a broken numba_ext must fail, not skip
import numba


class FakeLaunch:
    """Records each call; returns ``code`` for every call after the first ``fail_after``."""

    def __init__(self, fail_after: int = 1 << 30, code: int = 0) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.fail_after = fail_after
        self.code = code
        restype, argtypes = mn.DRIVER_PROTOTYPES["cuLaunchKernel"]
        self.function = ctypes.CFUNCTYPE(restype, *argtypes)(self)

    def __call__(self, *args: int) -> int:
        self.calls.append(args)
        return self.code if len(self.calls) > self.fail_after else 0


RECORD = (0x7F00_0000_1000, 4, 2, 1, 128, 1, 1, 1024, 0x5555_0000, 0x7F00_DEAD_0000)


def compiled_loop(launch):  # type: ignore[no-untyped-def]
    """An @njit loop launching ``values`` ``n`` times and stopping at the first error, as a user writes it."""
    @numba.njit
    def run(values, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            err = launch(values)
            if err:
                return err
        return 0
    return run


def test_a_compiled_loop_calls_the_launch_function_with_the_record() -> None:
    fake = FakeLaunch()
    run = compiled_loop(mn.record_launcher(fake.function))
    assert run(RECORD, 5) == 0
    assert fake.calls == [RECORD + (0,)] * 5  # kernelParams from the record, extra = NULL


def test_the_loop_sees_the_first_error_and_check_raises_it() -> None:
    fake = FakeLaunch(fail_after=2, code=700)
    run = compiled_loop(mn.record_launcher(fake.function))
    code = run(RECORD, 10)
    assert code == 700 and len(fake.calls) == 3
    with pytest.raises(mc.CudaError) as info:
        mn.check(code)
    assert info.value.code == 700
    mn.check(0)


def test_any_c_function_is_callable_from_njit() -> None:
    libc = ctypes.CDLL(None)
    labs = mn.c_function(ctypes.cast(libc.labs, ctypes.c_void_p).value, ctypes.c_long, ctypes.c_long)

    @numba.njit
    def total(n):  # type: ignore[no-untyped-def]
        s = 0
        for i in range(n):
            s += labs(-i)
        return s

    assert total(10) == 45


@pytest.mark.parametrize("args, argument", [
    ((0, ctypes.c_int), "address"), ((1.5, ctypes.c_int), "address"), ((0x1000, int), "restype"),
    ((0x1000, ctypes.c_int, list), "argtypes[0]"),
])
def test_c_function_checks_its_arguments(args, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        mn.c_function(*args)
    assert info.value.argument == argument


def test_driver_functions_need_an_initialized_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cuda, "entry_points", {})
    with pytest.raises(mc.UnsupportedPlatform, match="Driver.initialize"):
        mn.driver_function("cuLaunchKernel")
    with pytest.raises(mc.ContractError):
        mn.driver_function("cuMemcpy")
