"""Bound launchers (``mircuda._cuda.bind_launch``) without a device: the C extension's and the Python
one (no extension, or a stand-in entry point) write the same bytes as the argument packer, refuse a
malformed or out-of-range value before writing or launching anything, answer another thread and
another config without touching the block, and follow the config through the generated launch."""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from typing import Any

import pytest

import mircuda
import mircuda as mc
from hotpath_stand_in import StandInDriver, keep_bindings
from mircuda import _cuda
from mircuda.launch import ArgumentPacker, _abi
from mircuda.launch._kernel import TypedKernel
from mircuda.memory import DeviceBuffer
from mircuda.runtime import Stream

u, vp = ctypes.c_uint, ctypes.c_void_p
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp, vp)
LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_cuda._LaunchConfig), vp, vp, vp)

Pair = mc.struct("Pair", [("a", mc.i32), ("b", mc.f64)])
MIXED = mc.cuda_export("mixed", y=mc.Out[mc.DeviceBuffer[mc.f32]], alpha=mc.f32, n=mc.i32, flag=bool, h=mc.f16,
                       small=mc.u8, big=mc.i64, d=mc.f64, pair=Pair, x=mc.In[mc.DeviceBuffer[mc.f32]])
EMPTY = mc.cuda_export("empty")


class FakeContext:
    """Stands in for a Context (compared by identity); closed, so finalizers do nothing."""

    _closed = True
    _handle = handle = 1


def fake_buffer(ctx: Any, ptr: int) -> DeviceBuffer:
    return DeviceBuffer._adopt(ctx, None, mc.dtypes.dtype_info(mc.f32), 64, ptr)  # type: ignore[arg-type]


def fake_stream(ctx: Any, handle: int) -> Stream:
    stream = object.__new__(Stream)
    stream._context, stream._cu, stream._handle, stream._priority = ctx, None, handle, 0  # type: ignore[assignment]
    stream._finalizer = None
    return stream


def config_dims(config: Any) -> tuple[int, ...]:
    if not isinstance(config, mc.LaunchConfig):  # as TypedKernel._config_dims refuses it
        raise mc.LaunchConfigError(f"config: expected a LaunchConfig, received {type(config).__name__}")
    return (*config.grid, *config.block, config.shared_mem_bytes)


def stand_in_kernel(contract: mc.KernelContract, ctx: Any) -> TypedKernel:
    # What Module.kernel builds, minus the driver (as tests/test_launch_abi.py does).
    kernel = object.__new__(TypedKernel)
    kernel._contract, kernel._abi, kernel._handle, kernel._context = contract, _abi.LAUNCH_ABIS["c"], 0x40, ctx
    kernel._config_dims = config_dims  # type: ignore[method-assign]
    kernel._owner = threading.get_ident()
    kernel._thread_launchers = {}
    kernel._lock = threading.Lock()
    kernel.launch = kernel._generate(kernel._owner)  # type: ignore[method-assign]
    return kernel


@pytest.fixture(params=["c", "python", "ctypes"])
def driver(request, monkeypatch) -> dict[str, Any]:
    """Stand-in ``cuLaunchKernel``/``cuLaunchKernelEx`` that record what they receive, the block's bytes
    included (read through the ``void**`` as the driver reads them), reached through the C extension's
    bound launcher ("c"), the Python one calling a Python entry ("python"), or the Python one calling
    the ctypes entry points of a process without the extension ("ctypes")."""
    seen: dict[str, Any] = {"calls": [], "result": 0}
    sizes: list[int] = []

    def block(params: int | None) -> bytes:
        if not sizes:
            return b""
        pointers = (ctypes.c_void_p * len(sizes)).from_address(params or 0)
        return b"".join(ctypes.string_at(p, n) for p, n in zip(pointers, sizes))

    def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, *extra):  # type: ignore[no-untyped-def]
        seen["calls"].append(("cuLaunchKernel", f, (gx, gy, gz, bx, by, bz, smem), stream, block(params)))
        return seen["result"]

    def launch_ex(config, f, params, extra):  # type: ignore[no-untyped-def]
        c = config.contents
        attrs = ctypes.string_at(ctypes.cast(c.attrs, vp).value or 0, 72 * c.num_attrs) if c.num_attrs else b""
        seen["calls"].append(("cuLaunchKernelEx", f, tuple(c.dims), c.stream, block(params), attrs))
        return seen["result"]

    keep_bindings(monkeypatch)
    seen["sizes"] = sizes
    if request.param == "c":
        hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")
        if not hasattr(hotpath, "bind_launch"):
            pytest.skip("the C extension predates bind_launch (rebuild: python setup.py build_ext --inplace)")
        keep = (LAUNCH(launch), LAUNCH_EX(launch_ex))
        real = dict(_cuda.entry_points)
        hotpath.set_entry_points(ctypes.cast(keep[0], vp).value, 0, 0)
        hotpath.set_launch_ex(ctypes.cast(keep[1], vp).value)
        monkeypatch.setattr(_cuda, "bound_hotpath", hotpath)
        monkeypatch.setattr(_cuda, "launch_kernel", hotpath.launch_kernel)
        monkeypatch.setattr(_cuda, "launch_kernel_programmatic", hotpath.launch_kernel_programmatic)
        monkeypatch.setattr(_cuda, "launch_kernel_attributes", hotpath.launch_kernel_attrs)
        seen["kind"] = "c"
        yield seen
        hotpath.set_entry_points(real.get("cuLaunchKernel", 0), real.get("cuGraphLaunch", 0),
                                 real.get("cuEventRecord", 0))
        hotpath.set_launch_ex(real.get("cuLaunchKernelEx", 0))
        return
    if request.param == "ctypes":
        keep = (LAUNCH(launch), LAUNCH_EX(launch_ex))
        monkeypatch.delattr(mircuda, "_hotpath", raising=False)  # and the import fails: the ctypes path
        monkeypatch.setitem(sys.modules, "mircuda._hotpath", None)
        _cuda._bind_hot_path(StandInDriver({"cuLaunchKernel": ctypes.cast(keep[0], vp).value,
                                            "cuLaunchKernelEx": ctypes.cast(keep[1], vp).value}, 12080))
        assert _cuda.hot_path_kind == "ctypes" and _cuda.bound_hotpath is None
        seen["kind"], seen["keep"] = "python", keep
        yield seen
        return
    monkeypatch.setattr(_cuda, "bound_hotpath", None)
    monkeypatch.setattr(_cuda, "launch_kernel", lambda *a: launch(*a))
    monkeypatch.setattr(_cuda, "launch_kernel_programmatic", _cuda._programmatic_ctypes(
        ctypes.cast(keep_ex := LAUNCH_EX(launch_ex), vp).value))
    monkeypatch.setattr(_cuda, "launch_kernel_attributes", _cuda._attributes_ctypes(ctypes.cast(keep_ex, vp).value))
    seen["kind"] = "python"
    seen["keep"] = keep_ex
    yield seen


def mixed_args(ctx: Any) -> tuple[Any, ...]:
    return (fake_buffer(ctx, 0x1000), 1.5, -7, True, 0.5, 200, -(2**40), 2.25, {"a": 3, "b": -1.0},
            fake_buffer(ctx, 0x2000))


def test_the_launcher_is_the_extensions_or_pythons(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(MIXED, ctx)
    kernel.launch(fake_stream(ctx, 0x50), mc.LaunchConfig(2, 64), *mixed_args(ctx))
    launcher = kernel.launch.__globals__["_L"]
    assert (type(launcher).__name__ == "builtin_function_or_method") == (driver["kind"] == "c")


def test_slot_bytes_are_the_packers_bytes(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(MIXED, ctx)
    driver["sizes"][:] = [s.size for s in kernel.launch.__mircuda_block__.slots]
    args = mixed_args(ctx)
    kernel.launch(fake_stream(ctx, 0x50), mc.LaunchConfig((3, 2), 64, shared_mem_bytes=128), *args)
    expected = ArgumentPacker(MIXED, ctx).pack(*args)  # the Python stores, as graph node updates pack
    assert kernel.packed_arguments() == expected
    ((name, f, dims, stream, block),) = driver["calls"]
    assert (name, f, dims, stream) == ("cuLaunchKernel", 0x40, (3, 2, 1, 64, 1, 1, 128), 0x50)
    assert block == b"".join(expected[s.offset:s.offset + s.size] for s in kernel.launch.__mircuda_block__.slots)
    # A second launch with other values writes every slot again.
    other = (fake_buffer(ctx, 0x3000), -0.0, 2**31 - 1, False, -2.0, 0, 2**63 - 1, -1e300, (-(2**31), 0.125),
             fake_buffer(ctx, 0x4000))
    kernel.launch(fake_stream(ctx, 0x50), mc.LaunchConfig((3, 2), 64, shared_mem_bytes=128), *other)
    assert kernel.packed_arguments() == ArgumentPacker(MIXED, ctx).pack(*other)


BAD_VALUES = [  # (slot index of MIXED, value, exception): what the generated checks never hand on, given directly
    (0, -1, OverflowError),          # a negative address
    (0, 2**64, OverflowError),       # beyond 64 bits: never truncated
    (0, 1.5, TypeError),             # not an integer
    (0, None, TypeError),
    (2, 2**31, OverflowError),       # i32
    (2, -(2**31) - 1, OverflowError),
    (4, 2**16, OverflowError),       # f16's slot: its 16 bits
    (5, 256, OverflowError),         # u8
    (5, -1, OverflowError),
    (1, 1e39, OverflowError),        # f32: a finite value that rounds to infinity
    (1, "1.0", TypeError),
    (8, b"\x00" * 15, ValueError),   # the struct's 16 bytes
    (8, bytearray(16), (TypeError, ValueError)),
]


@pytest.mark.parametrize("index, value, error", BAD_VALUES)
def test_a_malformed_value_writes_and_launches_nothing(driver, index, value, error) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(MIXED, ctx)
    config = mc.LaunchConfig(1, 32)
    stream = fake_stream(ctx, 0x50)
    kernel.launch(stream, config, *mixed_args(ctx))
    before = kernel.packed_arguments()
    launcher = kernel.launch.__globals__["_L"]
    # Valid values, each unlike the launched one: any slot written before the refusal would show.
    values = [0x9000, -3.0, 5, False, 0x3C00, 7, 9, 0.5, struct.pack("<i4xd", 1, 2.0), 0xA000]
    assert all(launcher_value(a) != b for a, b in zip(mixed_args(ctx), values))
    values[index] = value
    with pytest.raises(error):
        launcher(config, stream._handle, *values)
    assert kernel.packed_arguments() == before
    assert len(driver["calls"]) == 1


def launcher_value(v: Any) -> Any:
    """The value the generated launch hands the bound launcher for a MIXED argument."""
    if isinstance(v, DeviceBuffer):
        return v._ptr
    if isinstance(v, dict):
        return struct.pack("<i4xd", v["a"], v["b"])
    if v == 0.5:  # h (f16): its bits
        return 0x3800
    return v


def test_a_malformed_buffer_address_raises_before_the_driver(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(MIXED, ctx)
    args = list(mixed_args(ctx))
    args[9]._ptr = -5  # passes the identity test (non-zero): the launcher refuses it
    with pytest.raises(OverflowError):
        kernel.launch(fake_stream(ctx, 0x50), mc.LaunchConfig(1, 32), *args)
    assert driver["calls"] == []
    assert kernel.packed_arguments() == bytes(len(kernel.packed_arguments()))


def test_another_thread_or_config_is_answered_without_writing(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(MIXED, ctx)
    config = mc.LaunchConfig(1, 32)
    kernel.launch(fake_stream(ctx, 0x50), config, *mixed_args(ctx))
    before = kernel.packed_arguments()
    launcher = kernel.launch.__globals__["_L"]
    values = [0x9000, -3.0, 5, False, 0x3C00, 7, 9, 0.5, struct.pack("<i4xd", 1, 2.0), 0xA000]
    answers: list[int] = []
    t = threading.Thread(target=lambda: answers.append(launcher(config, 0x50, *values)))
    t.start()
    t.join()
    assert answers == [_cuda.BOUND_OTHER_THREAD]
    assert launcher(mc.LaunchConfig(1, 32), 0x50, *values) == _cuda.BOUND_NEW_CONFIG  # equal, not the same object
    assert kernel.packed_arguments() == before and len(driver["calls"]) == 1
    with pytest.raises(TypeError, match="argument"):  # a count the launcher was not bound for
        launcher(config, 0x50, *values[:-1])


def test_a_config_change_rebinds_and_an_equal_config_reuses_its_launcher(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(EMPTY, ctx)
    stream = fake_stream(ctx, 0x50)
    first, second = mc.LaunchConfig(4, 128), mc.LaunchConfig((2, 3), (32, 2), shared_mem_bytes=64)
    kernel.launch(stream, first)
    launcher = kernel.launch.__globals__["_L"]
    kernel.launch(stream, second)
    assert kernel.launch.__globals__["_L"] is not launcher
    equal = mc.LaunchConfig(4, 128)
    kernel.launch(stream, equal)
    assert kernel.launch.__globals__["_L"] is launcher  # rebound to the equal object, not made again
    kernel.launch(stream, equal)
    kernel.launch(stream, first)
    dims = [c[2] for c in driver["calls"]]
    assert dims == [(4, 1, 1, 128, 1, 1, 0), (2, 3, 1, 32, 2, 1, 64)] + [(4, 1, 1, 128, 1, 1, 0)] * 3


def test_a_refused_config_launches_nothing_and_the_last_one_still_works(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(EMPTY, ctx)
    stream = fake_stream(ctx, 0x50)
    config = mc.LaunchConfig(1, 32)
    kernel.launch(stream, config)
    with pytest.raises(mc.LaunchConfigError):
        kernel.launch(stream, "config")
    kernel.launch(stream, config)
    assert len(driver["calls"]) == 2


def test_programmatic_and_attribute_configs_reach_cuLaunchKernelEx(driver) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(EMPTY, ctx)
    stream = fake_stream(ctx, 0x50)
    kernel.launch(stream, mc.LaunchConfig(2, 64, programmatic_stream_serialization=True))
    cluster = mc.LaunchConfig(4, 64, cluster=2)
    kernel.launch(stream, cluster)
    (name, f, dims, s, _, attrs), (name2, _, dims2, _, _, attrs2) = driver["calls"]
    assert (name, f, dims, s) == ("cuLaunchKernelEx", 0x40, (2, 1, 1, 64, 1, 1, 0), 0x50)
    assert attrs == struct.pack("<I4xI", 6, 1) + bytes(64 - 4)  # programmatic stream serialization allowed
    assert (name2, dims2) == ("cuLaunchKernelEx", (4, 1, 1, 64, 1, 1, 0))
    assert attrs2 == bytes(_cuda.launch_attribute_array(cluster.launch_attributes))


def test_invalid_context_makes_the_context_current_and_tries_once_more(driver, monkeypatch) -> None:
    ctx = FakeContext()
    kernel = stand_in_kernel(EMPTY, ctx)
    made_current: list[int] = []
    monkeypatch.setitem(kernel.launch.__globals__, "_mk", lambda handle: made_current.append(handle))
    monkeypatch.setattr(_cuda, "result_name", lambda code: f"CUresult({code})")  # no driver to name it
    driver["result"] = 201
    with pytest.raises(mc.CudaError, match="CUresult.201"):
        kernel.launch(fake_stream(ctx, 0x50), mc.LaunchConfig(1, 32))
    assert made_current == [1] and len(driver["calls"]) == 2


def test_binding_refuses_what_it_cannot_launch(driver) -> None:
    block = mc.launch.ArgumentBlock([("n", ctypes.c_int32)])
    slots = _abi.value_slots(block)
    assert slots == ((0, _cuda.VALUE_INT, 4),)
    entry = _cuda.launch_kernel
    with pytest.raises(OverflowError, match="gx"):
        _cuda.bind_launch(entry, None, 0x40, (2**32, 1, 1, 1, 1, 1, 0), block.storage, block.params_address, 1, slots)
    with pytest.raises(ValueError, match="at most"):
        _cuda.bind_launch(entry, None, 0x40, (1,) * 7, block.storage, block.params_address, 1,
                          slots * (_cuda.BOUND_MAX_VALUES + 1))


def test_the_extension_and_python_agree_on_the_answers() -> None:
    hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")
    if not hasattr(hotpath, "bind_launch"):
        pytest.skip("the C extension predates bind_launch")
    assert (hotpath.BOUND_OTHER_THREAD, hotpath.BOUND_NEW_CONFIG, hotpath.BOUND_MAX_VALUES) == (
        _cuda.BOUND_OTHER_THREAD, _cuda.BOUND_NEW_CONFIG, _cuda.BOUND_MAX_VALUES)
    with pytest.raises(TypeError, match="bind_launch"):
        hotpath.rebind_config(len, None)
    with pytest.raises(ValueError, match="slot 0"):
        hotpath.bind_launch(0, 0x40, (1,) * 7, 0, 0x1000, 1, None, 0, 0, ((0, 9, 4),), None)
    with pytest.raises(ValueError, match="storage"):
        hotpath.bind_launch(0, 0x40, (1,) * 7, 0, 0, 1, None, 0, 0, ((0, 1, 4),), None)


def test_a_contract_past_the_value_limit_writes_its_own_block(monkeypatch) -> None:
    monkeypatch.setattr(_cuda, "BOUND_MAX_VALUES", 1)
    kernel = stand_in_kernel(mc.cuda_export("two", a=mc.i32, b=mc.i32), FakeContext())
    source = kernel.launch_source()
    # the checked value (a itself on the fast path) goes into the block's slot
    assert "        _a0 = a" in source and "_s0.value = _a0" in source and "if _ident() != _owner:" in source
    assert "    _r = _L(config, stream._handle)" in source.splitlines()


def test_an_unset_entry_point_is_refused_before_anything_is_written(monkeypatch) -> None:
    hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")
    if not hasattr(hotpath, "bind_launch"):
        pytest.skip("the C extension predates bind_launch")
    real = dict(_cuda.entry_points)
    block = mc.launch.ArgumentBlock([("n", ctypes.c_int32)])
    launcher = hotpath.bind_launch(0, 0x40, (1,) * 7, block.params_address, ctypes.addressof(block.storage),
                                   threading.get_ident(), None, 0, 0, _abi.value_slots(block), block)
    hotpath.set_entry_points(0, 0, 0)
    try:
        with pytest.raises(RuntimeError, match="cuLaunchKernel entry point not set"):
            launcher(None, 0x50, 7)
        assert block.packed_bytes() == bytes(4)
    finally:
        hotpath.set_entry_points(real.get("cuLaunchKernel", 0), real.get("cuGraphLaunch", 0),
                                 real.get("cuEventRecord", 0))


def test_a_launcher_kept_after_its_kernel_keeps_the_block_its_void_pointers_point_into(driver) -> None:
    """The bound launcher passes the block's ``void**`` to the driver: held alone (its kernel and launch
    function gone), it must still hold that array and the storage it points into, so that a call hands
    the driver its own values, never freed memory."""
    import gc
    import weakref

    ctx = FakeContext()
    kernel = stand_in_kernel(mc.cuda_export("three", n=mc.i32, m=mc.i32, o=mc.i64), ctx)
    driver["sizes"][:] = [4, 4, 8]
    config = mc.LaunchConfig(1, 32)
    kernel.launch(fake_stream(ctx, 0x50), config, 1, 2, 3)
    launcher = kernel.launch.__globals__["_L"]
    block = weakref.ref(kernel.launch.__mircuda_block__)
    del kernel
    gc.collect()
    assert block() is not None
    assert launcher(config, 0x50, 7, 8, 9) == 0
    assert driver["calls"][-1][4] == struct.pack("<iiq", 7, 8, 9)


def test_a_kernel_launched_with_ever_new_configs_holds_a_bounded_number_of_them(driver) -> None:
    """A kernel launched with a new shape each time (a grid sized by the data) keeps the launchers of the
    last few hundred configs; the checked dimensions it caches per config are bounded alike (they held
    every config ever launched, the memory growing without end)."""
    import gc
    import types
    import weakref

    from mircuda.launch._kernel import FunctionAttributes

    ctx = FakeContext()
    ctx.device_info = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        supports_programmatic_launch=True, compute_capability=(9, 0), max_threads_per_block=1024,
        max_block_dims=(1024, 1024, 64), max_grid_dims=(2**31 - 1, 65535, 65535),
        max_shared_memory_per_block_optin_bytes=232448)
    kernel = stand_in_kernel(EMPTY, ctx)
    kernel._checked, kernel._attributes = {}, FunctionAttributes(32, 0, 0, 1024, 90)
    del kernel._config_dims  # TypedKernel's own check, not the stand-in
    kernel.launch = kernel._generate(kernel._owner)  # type: ignore[method-assign]
    stream = fake_stream(ctx, 0x50)
    configs = []
    for i in range(1000):
        config = mc.LaunchConfig(i + 1, 32)
        configs.append(weakref.ref(config))
        kernel.launch(stream, config)
        del config
    gc.collect()
    assert sum(c() is not None for c in configs) <= 2 * _abi._BOUND_CONFIGS
    assert [c[2][0] for c in driver["calls"]] == list(range(1, 1001))


def test_an_abi_writing_its_own_block_writes_nothing_for_a_refused_config(driver) -> None:
    """A launch ABI without ``emit_values`` (Numba's) writes the slots in the launch function itself: the
    config is bound before those writes, so a refused config leaves the block as the last launch wrote
    it (it was written, then refused, with nothing launched)."""
    ctx = FakeContext()
    kernel = stand_in_kernel(mc.cuda_export("two", n=mc.i32, x=mc.f64), ctx)
    kernel._abi = _abi.LaunchAbi("c-writes", _abi.c_slots, _abi.emit_c_writes, _abi.verify_c_parameters)
    kernel.launch = kernel._generate(kernel._owner)  # type: ignore[method-assign]
    assert "        _a0 = n" in kernel.launch_source() and "_s0.value = _a0" in kernel.launch_source()
    stream = fake_stream(ctx, 0x50)
    kernel.launch(stream, mc.LaunchConfig(1, 32), 1, 2.0)
    before = kernel.packed_arguments()
    with pytest.raises(mc.LaunchConfigError):
        kernel.launch(stream, "config", 5, 6.0)
    assert kernel.packed_arguments() == before and len(driver["calls"]) == 1
    kernel.launch(stream, mc.LaunchConfig(2, 32), 5, 6.0)  # a new config still binds, after the writes
    assert kernel.packed_arguments() == struct.pack("<i4xd", 5, 6.0)
    assert [c[2][0] for c in driver["calls"]] == [1, 2]


@pytest.mark.parametrize("name", ["r", "n"])
def test_a_parameter_named_like_a_local_reaches_the_kernel_from_another_thread(driver, name) -> None:
    """Parameter names never start with '_'; the generated function's own locals must not either: a
    parameter named ``r`` (the launcher's result) was handed to another thread's launch as -1, the
    launcher's other-thread answer, instead of its value."""
    ctx = FakeContext()
    kernel = stand_in_kernel(mc.cuda_export("two", **{name: mc.i32, "m": mc.i32}), ctx)
    driver["sizes"][:] = [4, 4]
    stream = fake_stream(ctx, 0x50)
    kernel.launch(stream, mc.LaunchConfig(1, 32), 5, 6)
    t = threading.Thread(target=kernel.launch, args=(stream, mc.LaunchConfig(1, 32), 7, 8))
    t.start()
    t.join()
    assert [c[4] for c in driver["calls"]] == [struct.pack("<ii", 5, 6), struct.pack("<ii", 7, 8)]


def test_a_launch_made_while_an_argument_converts_does_not_mix_with_the_outer_launch(driver) -> None:
    """An argument's conversion may run Python code (a float subclass's ``__float__``) that launches the
    same kernel on the same thread: the outer launch writes all its values after every conversion, so
    each launch reaches the driver with its own values and grid (before the bound launcher, the outer
    launch went out with the inner one's grid and first argument)."""
    ctx = FakeContext()
    kernel = stand_in_kernel(mc.cuda_export("three", n=mc.i32, a=mc.f64, m=mc.i32), ctx)
    driver["sizes"][:] = [4, 8, 4]
    stream = fake_stream(ctx, 0x50)

    class Reentrant(float):
        def __float__(self) -> float:
            kernel.launch(stream, mc.LaunchConfig(2, 32), 100, 200.0, 300)
            return 1.5

    kernel.launch(stream, mc.LaunchConfig(1, 32), 1, Reentrant(9.0), 3)
    assert [(c[2][0], c[4]) for c in driver["calls"]] == [(2, struct.pack("<idi", 100, 200.0, 300)),
                                                          (1, struct.pack("<idi", 1, 1.5, 3))]
