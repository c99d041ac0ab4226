"""Dynamic shared memory above the default limit, without a device: stand-ins for the driver's
attribute calls record what the launch path asks. The opt-in is decided by static + dynamic against
the device's opt-in maximum, belongs to the CUfunction (one record for every binding and thread),
only ever rises, and a configuration over the limit is refused by name before the launch entry."""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from mircuda import _cuda
from mircuda.launch import _abi, _kernel
from mircuda.runtime import DeviceInfo, Stream

OPT_IN = 232448  # the H200's CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN (227 KiB)
STATIC = 8 << 10
DEFAULT_DYNAMIC = (48 << 10) - STATIC  # the driver's default MAX_DYNAMIC_SHARED_SIZE_BYTES
H200_LIKE = DeviceInfo(name="test", ordinal=0, compute_capability=(9, 0), multiprocessor_count=132, integrated=False,
                       memory_pools_supported=True, total_memory_bytes=141 << 30, l2_cache_bytes=60 << 20,
                       max_shared_memory_per_block_bytes=48 << 10, max_shared_memory_per_block_optin_bytes=OPT_IN,
                       warp_size=32, max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                       max_grid_dims=(2**31 - 1, 65535, 65535), clock_rate_khz=1980000, memory_bus_width_bits=6144)
Tile = mc.cuda_export("tile", out=mc.Out[mc.DeviceBuffer[mc.f32]], n=mc.u32)
TileScaled = mc.cuda_export("tile", out=mc.Out[mc.DeviceBuffer[mc.f32]], n=mc.u32, alpha=mc.f32)


class FakeContext:
    """Stands in for a Context: identities, ``handle``, the device's limits. Closed: no finalizers."""

    _closed = True
    _handle = handle = 0xC1

    def device_info(self) -> DeviceInfo:
        return H200_LIKE

    def _make_current(self) -> None:
        pass


class FakeDriver:
    """Records cuFuncGetAttribute/cuFuncSetAttribute on the function's MAX_DYNAMIC_SHARED_SIZE_BYTES."""

    CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC")

    def __init__(self) -> None:
        self.value = DEFAULT_DYNAMIC
        self.calls: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def call(self, name: str, *args: Any) -> Any:
        with self.lock:
            if name == "cuFuncGetAttribute":
                assert args == ("MAX_DYNAMIC", FUNCTION)
                self.calls.append((name, None))
                return self.value
            assert name == "cuFuncSetAttribute" and args[:2] == (FUNCTION, "MAX_DYNAMIC"), (name, args)
            assert args[2] + STATIC <= OPT_IN, "the driver would refuse this"
            self.calls.append((name, args[2]))
            self.value = args[2]
            return None


FUNCTION = 0xF11E


@pytest.fixture()
def driver(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(_cuda, "driver", lambda: fake)
    monkeypatch.setattr(_cuda, "call", fake.call)
    monkeypatch.setattr(_kernel, "_read_attributes", lambda f: _kernel.FunctionAttributes(32, STATIC, 0, 1024, 90))
    monkeypatch.setitem(_abi.LAUNCH_ABIS, "c", _abi.LaunchAbi("c", _abi.c_slots, _abi.emit_c_writes,
                                                              lambda contract, f: None))
    yield fake
    _kernel._BY_FUNCTION.pop(FUNCTION, None)


@pytest.fixture()
def module() -> SimpleNamespace:
    return SimpleNamespace(context=FakeContext())


def bind(module: SimpleNamespace, contract: mc.KernelContract = Tile) -> _kernel.TypedKernel:
    return _kernel.TypedKernel(module, contract, FUNCTION)  # type: ignore[arg-type]


def fake_stream(ctx: FakeContext, handle: int) -> Stream:
    stream = object.__new__(Stream)
    stream._context, stream._cu, stream._handle, stream._priority = ctx, None, handle, 0
    stream._finalizer = None
    return stream


def test_static_plus_dynamic_above_48_kib_opts_the_function_in(driver, module) -> None:
    kernel = bind(module)
    assert driver.calls == []  # binding asks nothing
    assert kernel._config_dims(mc.LaunchConfig(1, 256, 4 << 10)) == (1, 1, 1, 256, 1, 1, 4 << 10)
    assert driver.calls == [("cuFuncGetAttribute", None)]  # 12 KiB in all: within the default
    for dynamic in (44 << 10, 48 << 10):  # 52 and 56 KiB in all: over 48 KiB, far inside 227 KiB
        dims = kernel._config_dims(mc.LaunchConfig(1, 256, dynamic))
        assert dims[-1] == dynamic
    assert driver.calls == [("cuFuncGetAttribute", None), ("cuFuncSetAttribute", 44 << 10),
                            ("cuFuncSetAttribute", 48 << 10)]
    assert driver.value == 48 << 10


def test_a_small_request_first_reads_the_default_and_asks_nothing_more(driver, module) -> None:
    kernel = bind(module)
    kernel._config_dims(mc.LaunchConfig(1, 32, 1024))
    assert driver.calls == [("cuFuncGetAttribute", None)]  # 1 KiB + 8 KiB static: the default suffices
    kernel._config_dims(mc.LaunchConfig(1, 32, DEFAULT_DYNAMIC))
    assert driver.calls == [("cuFuncGetAttribute", None)]
    kernel._config_dims(mc.LaunchConfig(1, 32, DEFAULT_DYNAMIC + 1))  # 48 KiB + 1 byte in all
    assert driver.calls[-1] == ("cuFuncSetAttribute", DEFAULT_DYNAMIC + 1)


def test_two_bindings_of_one_function_share_the_opt_in_and_it_only_rises(driver, module) -> None:
    a, b = bind(module, Tile), bind(module, TileScaled)
    a._config_dims(mc.LaunchConfig(1, 64, 100 << 10))
    assert driver.value == 100 << 10
    calls = len(driver.calls)
    b._config_dims(mc.LaunchConfig(1, 64, 100 << 10))  # b's first use: already granted to the function
    b._config_dims(mc.LaunchConfig(1, 64, 50 << 10))   # smaller: never lowers what a relies on
    assert len(driver.calls) == calls and driver.value == 100 << 10
    b._config_dims(mc.LaunchConfig(1, 64, 120 << 10))
    a._config_dims(mc.LaunchConfig(1, 64, 110 << 10))
    assert driver.calls[calls:] == [("cuFuncSetAttribute", 120 << 10)] and driver.value == 120 << 10


def test_another_module_gets_its_own_record(driver, module) -> None:
    bind(module)._config_dims(mc.LaunchConfig(1, 64, 100 << 10))
    other = SimpleNamespace(context=module.context)  # another module whose function has the same handle
    driver.value = DEFAULT_DYNAMIC  # as a freshly loaded function has
    bind(other)._config_dims(mc.LaunchConfig(1, 64, 60 << 10))
    assert driver.calls[-2:] == [("cuFuncGetAttribute", None), ("cuFuncSetAttribute", 60 << 10)]


def test_threads_raise_the_shared_record_to_the_largest_request(driver, module) -> None:
    kernels = [bind(module, Tile), bind(module, TileScaled)]
    sizes = [(40 + 8 * i) << 10 for i in range(16)]
    barrier = threading.Barrier(len(sizes), timeout=30)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            kernels[i % 2]._config_dims(mc.LaunchConfig(1, 64, sizes[i]))
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert driver.value == max(sizes)
    assert [c for c in driver.calls if c[0] == "cuFuncGetAttribute"] == [("cuFuncGetAttribute", None)]
    sets = [v for name, v in driver.calls if name == "cuFuncSetAttribute"]
    assert sets == sorted(sets) and len(set(sets)) == len(sets)  # monotonic: never lowered, never repeated


@pytest.mark.parametrize("dynamic", [OPT_IN - STATIC + 1, OPT_IN, OPT_IN + 1])
def test_over_the_limit_is_refused_by_name_before_the_launch(driver, module, monkeypatch, dynamic) -> None:
    launches: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_cuda, "launch_kernel", lambda *args: launches.append(args) or 0)
    kernel = bind(module)
    ctx = module.context
    out = mc.DeviceBuffer._adopt(ctx, None, mc.dtypes.dtype_info(mc.f32), 16, 0x1000)  # type: ignore[arg-type]
    with pytest.raises(mc.LaunchConfigError, match=rf"shared_mem_bytes: expected at most "
                                                    rf"({OPT_IN - STATIC}|{OPT_IN}) bytes.*received {dynamic}"):
        kernel.launch(fake_stream(ctx, 0x91), mc.LaunchConfig(1, 64, dynamic), out, 16)
    assert launches == [] and driver.calls == []
    kernel.launch(fake_stream(ctx, 0x91), mc.LaunchConfig(1, 64, OPT_IN - STATIC), out, 16)  # the limit itself
    assert len(launches) == 1 and launches[0][7] == OPT_IN - STATIC
    assert driver.calls[-1] == ("cuFuncSetAttribute", OPT_IN - STATIC)


def test_the_message_names_the_static_part(driver, module) -> None:
    kernel = bind(module)
    with pytest.raises(mc.LaunchConfigError) as info:
        kernel._config_dims(mc.LaunchConfig(1, 64, OPT_IN - STATIC + 1))
    assert str(info.value) == (f"shared_mem_bytes: expected at most {OPT_IN - STATIC} bytes of dynamic shared memory "
                               f"(the device's opt-in maximum {OPT_IN} bytes per block less kernel 'tile''s "
                               f"{STATIC} static bytes), received {OPT_IN - STATIC + 1}")


def test_a_device_with_a_smaller_opt_in_limit_is_held_to_it(driver, module, monkeypatch) -> None:
    small = dataclasses.replace(H200_LIKE, max_shared_memory_per_block_optin_bytes=99 << 10)
    monkeypatch.setattr(FakeContext, "device_info", lambda self: small)
    kernel = bind(module)
    kernel._config_dims(mc.LaunchConfig(1, 64, 91 << 10))
    with pytest.raises(mc.LaunchConfigError, match=rf"at most {91 << 10} bytes"):
        kernel._config_dims(mc.LaunchConfig(1, 64, (91 << 10) + 1))
