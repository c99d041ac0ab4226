"""Argument packing (the exact bytes handed to the driver) and launch geometry, without a device."""

from __future__ import annotations

import ctypes
import struct

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.launch._pack import ArgumentBlock
from mircuda.runtime import DeviceInfo


class FakeContext:
    """Stands in for a Context: packing only compares identities. Closed, so finalizers do nothing."""

    _closed = True
    _handle = 1


@pytest.fixture()
def ctx() -> FakeContext:
    return FakeContext()


def fake_buffer(ctx: FakeContext, dtype: type, count: int, ptr: int) -> mc.DeviceBuffer:
    return mc.DeviceBuffer._adopt(ctx, None, dtype_info(dtype), count, ptr)  # type: ignore[arg-type]


K = mc.cuda_export("k", out=mc.Out[mc.DeviceBuffer[mc.f32]], value=mc.f32, n=mc.u32, offset=mc.i64,
                   h=mc.f16, b=mc.bf16, flag=bool)


def test_packed_bytes_follow_the_c_abi(ctx) -> None:
    packer = mc.ArgumentPacker(K, ctx)
    buf = fake_buffer(ctx, mc.f32, 16, 0x7F00_1234_5600)
    got = packer.pack(buf, 2.5, 7, -3, 1.5, -2.0, True)
    want = struct.pack("<QfIqHH?", 0x7F00_1234_5600, 2.5, 7, -3, 0x3E00, 0xC000, True)
    assert got == want
    assert [s.offset for s in packer.block.slots] == [0, 8, 12, 16, 24, 26, 28]


def test_keyword_arguments_and_numpy_scalars_pack_the_same(ctx) -> None:
    packer = mc.ArgumentPacker(K, ctx)
    buf = fake_buffer(ctx, mc.f32, 1, 0x1000)
    a = packer.pack(buf, 2.5, 7, -3, 1.5, -2.0, True)
    b = packer.pack(flag=np.bool_(True), b=ml_dtypes.bfloat16(-2.0), h=np.float16(1.5), offset=np.int8(-3),
                    n=np.uint64(7), value=np.float32(2.5), out=buf)
    assert a == b


def test_bf16_rounds_to_nearest_even(ctx) -> None:
    packer = mc.ArgumentPacker(mc.cuda_export("k", b=mc.bf16), ctx)
    x = 1.0 + 2**-8  # halfway between two bf16 values: rounds to even (1.0)
    assert packer.pack(x) == struct.pack("<H", 0x3F80)
    assert packer.pack(1.0 + 3 * 2**-8) == struct.pack("<H", 0x3F82)


@pytest.mark.parametrize("name, value, match", [
    ("n", 1.5, "an integer"),          # a Python float into an integer slot
    ("n", True, "an integer"),         # bools are not numbers here
    ("n", -1, r"\[0, 4294967295\]"),
    ("offset", 2**63, "i64"),
    ("value", "1.0", "real number"),
    ("value", None, "real number"),
    ("h", 1e6, "f16"),
    ("flag", 1, "a bool"),
])
def test_bad_scalars_name_the_parameter(ctx, name, value, match) -> None:
    packer = mc.ArgumentPacker(K, ctx)
    args = dict(out=fake_buffer(ctx, mc.f32, 1, 0x1000), value=1.0, n=1, offset=0, h=0.0, b=0.0, flag=False)
    args[name] = value
    with pytest.raises(mc.ContractError, match=match) as info:
        packer.pack(**args)
    assert info.value.argument == name


def test_bad_buffers_name_the_parameter(ctx) -> None:
    packer = mc.ArgumentPacker(mc.cuda_export("k", x=mc.DeviceBuffer[mc.f32]), ctx)
    with pytest.raises(mc.ContractError, match=r"DeviceBuffer\[f32\].*DeviceBuffer\[f16\]"):
        packer.pack(fake_buffer(ctx, mc.f16, 1, 0x1000))
    with pytest.raises(mc.ContractError, match="host arrays"):
        packer.pack(np.zeros(3, np.float32))
    with pytest.raises(mc.ContractError, match="buffer of"):
        packer.pack(fake_buffer(FakeContext(), mc.f32, 1, 0x1000))
    with pytest.raises(mc.ContractError, match="missing"):
        packer.pack()
    freed = fake_buffer(ctx, mc.f32, 1, 0x1000)
    freed._freed, freed._ptr = True, 0
    with pytest.raises(mc.UseAfterFree):
        packer.pack(freed)
    assert packer.pack(fake_buffer(ctx, mc.f32, 0, 0)) == bytes(8)  # an empty buffer packs a null pointer


def test_argument_block_aligns_each_value_to_its_size() -> None:
    block = ArgumentBlock([("a", ctypes.c_uint8), ("b", ctypes.c_double), ("c", ctypes.c_uint16),
                           ("d", ctypes.c_uint32)])
    assert [s.offset for s in block.slots] == [0, 8, 16, 20] and block.size == 24
    base = ctypes.addressof(block.storage)
    assert [block.pointers[i] - base for i in range(4)] == [0, 8, 16, 20]


def test_launch_config_normalizes_dimensions() -> None:
    c = mc.LaunchConfig(4, (32, 2))
    assert c.grid == (4, 1, 1) and c.block == (32, 2, 1) and c.threads_per_block == 64
    assert mc.LaunchConfig.for_elements(1000, 256).grid == (4, 1, 1)
    assert mc.LaunchConfig.for_elements(1024, 256).grid == (4, 1, 1)
    assert mc.LaunchConfig.for_elements(1, 256).grid == (1, 1, 1)
    assert mc.LaunchConfig(1, 1) == mc.LaunchConfig((1,), (1, 1, 1))


@pytest.mark.parametrize("make, match", [
    (lambda: mc.LaunchConfig(0, 32), "grid"),
    (lambda: mc.LaunchConfig(1, (32, 0)), "block"),
    (lambda: mc.LaunchConfig(1, (1, 1, 1, 1)), "block"),
    (lambda: mc.LaunchConfig(1.5, 32), "grid"),
    (lambda: mc.LaunchConfig(1, 32, -1), "shared_mem_bytes"),
    (lambda: mc.LaunchConfig(1, 32, programmatic_stream_serialization=1), "programmatic_stream_serialization"),
    (lambda: mc.LaunchConfig(1, 32, programmatic_stream_serialization=None), "programmatic_stream_serialization"),
    (lambda: mc.LaunchConfig(1, 32, programmatic_stream_serialization=np.True_), "programmatic_stream_serialization"),
    (lambda: mc.LaunchConfig(1, 32, programmatic_stream_serialization="yes"), "programmatic_stream_serialization"),
    (lambda: mc.LaunchConfig.for_elements(0), "n"),
    (lambda: mc.LaunchConfig.for_elements(10, 0), "block"),
])
def test_launch_config_refuses_malformed_geometry(make, match) -> None:
    with pytest.raises(mc.LaunchConfigError, match=match):
        make()


H200_LIKE = DeviceInfo(name="test", ordinal=0, compute_capability=(9, 0), multiprocessor_count=132, integrated=False,
                       memory_pools_supported=True, total_memory_bytes=141 << 30, l2_cache_bytes=60 << 20,
                       max_shared_memory_per_block_bytes=48 << 10, max_shared_memory_per_block_optin_bytes=232448,
                       warp_size=32, max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                       max_grid_dims=(2**31 - 1, 65535, 65535), clock_rate_khz=1980000, memory_bus_width_bits=6144)


def test_launch_config_limits_come_from_the_device() -> None:
    mc.LaunchConfig((2**31 - 1, 65535), (1024,), 232448).check(H200_LIKE)
    for cfg, match in [(mc.LaunchConfig(1, 1025), "threads per block"), (mc.LaunchConfig(1, (1, 1, 65)), r"block\[2\]"),
                       (mc.LaunchConfig(2**31, 32), r"grid\[0\]"), (mc.LaunchConfig(1, 32, 232449), "opt-in")]:
        with pytest.raises(mc.LaunchConfigError, match=match):
            cfg.check(H200_LIKE)
    with pytest.raises(mc.LaunchConfigError, match="limit 256"):
        mc.LaunchConfig(1, 512).check(H200_LIKE, max_threads_per_block=256)
    assert H200_LIKE.arch == "sm_90"


def test_programmatic_dependent_launch_needs_hopper_or_later() -> None:
    import dataclasses

    pdl = mc.LaunchConfig(132, 256, programmatic_stream_serialization=True)
    pdl.check(H200_LIKE)
    assert pdl != mc.LaunchConfig(132, 256)  # a different configuration: checked and cached apart
    ampere = dataclasses.replace(H200_LIKE, compute_capability=(8, 6))
    assert H200_LIKE.supports_programmatic_launch and not ampere.supports_programmatic_launch
    mc.LaunchConfig(132, 256).check(ampere)
    with pytest.raises(mc.LaunchConfigError, match=r"programmatic_stream_serialization: needs compute capability >= 9.0, the device has 8.6"):
        pdl.check(ampere)


def test_a_typed_launch_takes_the_entry_point_of_each_config_and_names_it_when_refused(monkeypatch) -> None:
    """The generated launch calls cuLaunchKernel, or cuLaunchKernelEx with programmatic stream
    serialization, per config (switching back and forth), and a refused launch names the one it called."""
    from mircuda import _cuda
    from mircuda.launch._kernel import LAUNCH_ABIS, TypedKernel
    from mircuda.runtime import Stream

    calls: list[tuple[str, tuple]] = []
    results = {"plain": 0, "programmatic": 0}

    def entry(name: str):  # type: ignore[no-untyped-def]
        def call(*args):  # type: ignore[no-untyped-def]
            calls.append((name, args[1:8]))
            return results[name]
        return call

    monkeypatch.setattr(_cuda, "launch_kernel", entry("plain"))
    monkeypatch.setattr(_cuda, "launch_kernel_programmatic", entry("programmatic"))
    monkeypatch.setattr(_cuda, "result_name", lambda code: "CUDA_ERROR_NOT_SUPPORTED")
    context = FakeContext()
    context.handle = 1
    kernel = object.__new__(TypedKernel)
    kernel._contract = mc.cuda_export("k", n=mc.i32)
    kernel._abi, kernel._handle, kernel._context = LAUNCH_ABIS["c"], 0x40, context
    kernel._config_dims = lambda c: (*c.grid, *c.block, c.shared_mem_bytes)  # the device checks: not here
    launch = kernel._generate(owner=__import__("threading").get_ident())
    stream = object.__new__(Stream)
    stream._context, stream._handle = context, 0x50

    plain = mc.LaunchConfig(2, 64)
    pdl = mc.LaunchConfig(2, 64, programmatic_stream_serialization=True)
    for config in (plain, pdl, plain, mc.LaunchConfig(2, 64, programmatic_stream_serialization=True)):
        launch(stream, config, 3)
    assert calls == [(name, (2, 1, 1, 64, 1, 1, 0)) for name in ("plain", "programmatic", "plain", "programmatic")]
    results.update(plain=801, programmatic=801)
    for config, call in ((pdl, "cuLaunchKernelEx"), (plain, "cuLaunchKernel")):
        with pytest.raises(mc.CudaError) as refused:
            launch(stream, config, 3)
        assert refused.value.call == call and "CUDA_ERROR_NOT_SUPPORTED" in str(refused.value)
