"""Compile and launch: NVRTC modules, typed contracts, launch configuration, numerics."""

from __future__ import annotations

import struct
import threading
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload

AXPBY = mc.cuda_kernel(r'''
extern "C" __global__ void axpby(float* y, const float* x, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b * y[i];
}''', "axpby.cu")
Axpby = mc.cuda_export("axpby", y=mc.InOut[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]],
                       a=mc.f32, b=mc.f32, n=mc.u32)


@pytest.fixture(scope="module")
def axpby(compiler):
    return compiler.compile(AXPBY).kernel(Axpby)


def test_the_design_example_fills_a_buffer(context, stream, pool, compiler) -> None:
    source = mc.cuda_kernel(r'''
    extern "C" __global__ void fill(float* output, float value) { output[threadIdx.x] = value; }''')
    Fill = mc.cuda_export("fill", output=mc.Out[mc.DeviceBuffer[mc.f32]], value=mc.f32)
    fill = compiler.compile(source, mc.CompileOptions()).kernel(Fill)
    out = pool.allocate(mc.f32, stream, 256)
    stream.memset(out, 0xFF)  # poison: NaN
    fill.launch(stream, mc.LaunchConfig.for_elements(256, 256), out, 2.0)
    host = context.allocate_pinned(mc.f32, 256)
    stream.copy_to_host(out, host)
    np.testing.assert_array_equal(host.to_numpy(), np.full(256, 2.0, dtype=np.float32))


@pytest.mark.parametrize("n", [1, 255, 256, 1 << 20, (1 << 20) + 3])
def test_axpby_matches_numpy(context, stream, pool, axpby, rng, n) -> None:
    x_h = rng.standard_normal(n).astype(np.float32)
    y_h = rng.standard_normal(n).astype(np.float32)
    a, b = float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))
    x, y = upload(context, stream, pool, x_h), upload(context, stream, pool, y_h)
    axpby.launch(stream, mc.LaunchConfig.for_elements(n, 256), y, x, a, b, n)
    got = download(context, stream, y).astype(np.float64)
    want = np.float32(a) * x_h.astype(np.float64) + np.float32(b) * y_h.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
    # Keyword arguments bind by parameter name.
    axpby.launch(stream, mc.LaunchConfig.for_elements(n, 256), n=n, b=0.0, a=1.0, x=x, y=y)
    np.testing.assert_array_equal(download(context, stream, y), x_h)


SCALARS = mc.cuda_kernel(r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scalars(unsigned char* out, bool b, signed char i8, short i16, int i32, long long i64,
                                   unsigned char u8, unsigned short u16, unsigned u32, unsigned long long u64,
                                   __half f16, __nv_bfloat16 bf16, float f32, double f64) {
    unsigned char* p = out;
    #define PUT(v) { memcpy(p, &v, sizeof(v)); p += sizeof(v); }
    PUT(b) PUT(i8) PUT(i16) PUT(i32) PUT(i64) PUT(u8) PUT(u16) PUT(u32) PUT(u64) PUT(f16) PUT(bf16) PUT(f32) PUT(f64)
}''', "scalars.cu")
Scalars = mc.cuda_export("scalars", out=mc.Out[mc.DeviceBuffer[mc.u8]], b=bool, i8=mc.i8, i16=mc.i16, i32=mc.i32,
                         i64=mc.i64, u8=mc.u8, u16=mc.u16, u32=mc.u32, u64=mc.u64, f16=mc.f16, bf16=mc.bf16,
                         f32=mc.f32, f64=mc.f64)


def test_every_scalar_type_reaches_the_kernel_bit_exact(context, stream, pool, compiler) -> None:
    k = compiler.compile(SCALARS).kernel(Scalars)
    out = pool.allocate(mc.u8, stream, 64)
    stream.memset(out, 0xEE)
    values = (True, -128, -30000, -2_000_000_000, -(2**62), 255, 65535, 4_000_000_000, 2**64 - 1, 1.5, -2.75,
              3.25, 1e300)
    k.launch(stream, mc.LaunchConfig(1, 1), out, *values)
    got = download(context, stream, out).tobytes()
    bf = np.array([-2.75], dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0]
    want = struct.pack("<?bhiqBHIQeHfd", True, -128, -30000, -2_000_000_000, -(2**62), 255, 65535, 4_000_000_000,
                       2**64 - 1, 1.5, int(bf), 3.25, 1e300)
    assert got[: len(want)] == want
    # numpy scalars are accepted where their kind fits.
    k.launch(stream, mc.LaunchConfig(1, 1), out, np.bool_(False), np.int8(1), np.int16(2), np.int32(3),
             np.int64(4), np.uint8(5), np.uint16(6), np.uint32(7), np.uint64(8), np.float16(0.5),
             ml_dtypes.bfloat16(0.25), np.float32(0.125), np.float64(0.0625))
    got = download(context, stream, out).tobytes()
    want = struct.pack("<?bhiqBHIQeHfd", False, 1, 2, 3, 4, 5, 6, 7, 8, 0.5, 0x3E80, 0.125, 0.0625)
    assert got[: len(want)] == want


def filled(stream: mc.Stream, pool: mc.MemoryPool, byte: int, n: int = 4) -> mc.DeviceBuffer:
    """A float32 buffer whose every byte is ``byte`` (0x3F: 0.747..., 0x40: 3.004...): any axpby launch
    with these operands changes y, so a refused launch that enqueued anything would show."""
    buf = pool.allocate(mc.f32, stream, n)
    stream.memset(buf, byte)
    return buf


def assert_unchanged(context: mc.Context, stream: mc.Stream, buf: mc.DeviceBuffer, byte: int) -> None:
    """``buf`` still holds only ``byte`` (synchronizes the stream first: a refused call enqueued nothing)."""
    stream.synchronize()
    got = download(context, stream, buf).view(np.uint8)
    assert (got == byte).all(), f"{buf!r} was written: {download(context, stream, buf)}"


@pytest.mark.parametrize("position, value, match", [
    (1, "2", "'x'"),                       # not a buffer
    (2, 1 + 2j, "'a'"),                    # not a real number
    (4, 1.5, "'n'"),                       # a float into an integer slot
    (4, True, "'n'"),                      # a bool into an integer slot
    (4, -1, "'n'"),                        # out of the u32 range
    (4, 2**32, "'n'"),
])
def test_bad_arguments_name_the_parameter(context, stream, pool, axpby, position, value, match) -> None:
    y, x = filled(stream, pool, 0x3F), filled(stream, pool, 0x40)
    args = [y, x, 1.0, 1.0, 4]
    args[position] = value
    with pytest.raises(mc.ContractError, match=match):
        axpby.launch(stream, mc.LaunchConfig(1, 4), *args)
    assert_unchanged(context, stream, y, 0x3F)


def test_buffer_problems_are_caught_before_the_launch(driver, context, stream, pool, axpby) -> None:
    # After each refusal y is unchanged: nothing was enqueued (on any stream: the context synchronizes).
    y, x = filled(stream, pool, 0x3F), filled(stream, pool, 0x40)
    cfg = mc.LaunchConfig(1, 4)

    def unchanged() -> None:
        context.synchronize()
        assert_unchanged(context, stream, y, 0x3F)

    with pytest.raises(mc.ContractError, match=r"DeviceBuffer\[f32\].*DeviceBuffer\[f64\]"):
        axpby.launch(stream, cfg, y, pool.allocate(mc.f64, stream, 4), 1.0, 1.0, 4)
    unchanged()
    with pytest.raises(mc.ContractError, match="host arrays"):
        axpby.launch(stream, cfg, y, np.zeros(4, np.float32), 1.0, 1.0, 4)
    unchanged()
    with pytest.raises(mc.ContractError, match="missing"):
        axpby.launch(stream, cfg, y, x, 1.0, 1.0)
    unchanged()
    x.free(stream)
    with pytest.raises(mc.UseAfterFree):
        axpby.launch(stream, cfg, y, x, 1.0, 1.0, 4)
    unchanged()
    with driver.create_context(driver.devices()[0]) as other:
        s2 = other.create_stream()
        with pytest.raises(mc.ContractError, match="stream"):
            axpby.launch(s2, cfg, y, y, 1.0, 1.0, 4)
        s2.synchronize()
        unchanged()
        foreign = other.default_memory_pool().allocate(mc.f32, s2, 4)
        with pytest.raises(mc.ContractError, match="'x'"):
            axpby.launch(stream, cfg, y, foreign, 1.0, 1.0, 4)
        unchanged()
        foreign.free(s2)
        s2.synchronize()
    closed = context.create_stream()
    closed.close()
    with pytest.raises(mc.ClosedResourceError):
        axpby.launch(closed, cfg, y, y, 1.0, 1.0, 4)
    with pytest.raises(mc.ContractError, match="stream"):
        axpby.launch(None, cfg, y, y, 1.0, 1.0, 4)
    unchanged()


def test_launch_config_is_checked_against_the_device(context, stream, pool, axpby) -> None:
    y = filled(stream, pool, 0x3F)  # y = y + y if anything ran
    info = context.device_info()
    with pytest.raises(mc.LaunchConfigError, match="threads per block"):
        axpby.launch(stream, mc.LaunchConfig(1, 2048), y, y, 1.0, 1.0, 4)
    with pytest.raises(mc.LaunchConfigError, match=r"grid\[1\]"):
        axpby.launch(stream, mc.LaunchConfig((1, info.max_grid_dims[1] + 1), 32), y, y, 1.0, 1.0, 4)
    with pytest.raises(mc.LaunchConfigError, match="shared_mem_bytes"):
        axpby.launch(stream, mc.LaunchConfig(1, 32, info.max_shared_memory_per_block_optin_bytes + 1),
                     y, y, 1.0, 1.0, 4)
    with pytest.raises(mc.LaunchConfigError, match="LaunchConfig"):
        axpby.launch(stream, (1, 32), y, y, 1.0, 1.0, 4)
    assert_unchanged(context, stream, y, 0x3F)


def test_large_dynamic_shared_memory_is_opted_into(context, stream, pool, compiler, rng) -> None:
    src = mc.cuda_kernel(r'''
    extern "C" __global__ void reverse(float* data, unsigned n) {
        extern __shared__ float tile[];
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) tile[i] = data[i];
        __syncthreads();
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) data[i] = tile[n - 1 - i];
    }''')
    k = compiler.compile(src).kernel(mc.cuda_export("reverse", data=mc.DeviceBuffer[mc.f32], n=mc.u32))
    n = 20000  # 80 000 bytes: above the 48 KiB default
    h = rng.standard_normal(n).astype(np.float32)
    d = upload(context, stream, pool, h)
    k.launch(stream, mc.LaunchConfig(1, 256, n * 4), d, n)
    np.testing.assert_array_equal(download(context, stream, d), h[::-1])


def test_contracts_are_checked_against_the_compiled_kernel(compiler) -> None:
    module = compiler.compile(AXPBY)
    with pytest.raises(mc.ContractError, match="5 parameters"):
        module.kernel(mc.cuda_export("axpby", y=mc.DeviceBuffer[mc.f32], x=mc.DeviceBuffer[mc.f32]))
    with pytest.raises(mc.ContractError, match="'a'.*4 bytes"):
        module.kernel(mc.cuda_export("axpby", y=mc.DeviceBuffer[mc.f32], x=mc.DeviceBuffer[mc.f32], a=mc.f64,
                                     b=mc.f32, n=mc.u32))
    with pytest.raises(mc.ContractError, match="extern"):
        module.kernel(mc.cuda_export("no_such_kernel"))
    assert module.kernel(Axpby) is module.kernel(Axpby)
    attrs = module.kernel(Axpby).attributes
    assert attrs.registers > 0 and attrs.max_threads_per_block >= 256


def test_compile_cache_and_errors(context, compiler) -> None:
    src = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = VALUE; }')
    before = compiler.cache_stats()
    m1 = compiler.compile(src, mc.CompileOptions(defines={"VALUE": 7}))
    m2 = compiler.compile(src, mc.CompileOptions(defines={"VALUE": 7}))
    m3 = compiler.compile(src, mc.CompileOptions(defines={"VALUE": 8}))
    assert m1 is m2 and m1 is not m3
    after = compiler.cache_stats()
    assert after.compilations - before.compilations == 2 and after.memory_hits - before.memory_hits == 1
    with pytest.raises(mc.CompileError, match="VALUE") as info:
        compiler.compile(src)
    assert "undefined" in info.value.log and info.value.arch == compiler.arch


def test_the_compiler_builds_for_the_devices_sm(context, compiler) -> None:
    from cubin import cubin_sm

    major, minor = context.device_info().compute_capability
    program = compiler.compile(AXPBY).program
    assert program.output == "cubin" and cubin_sm(program.image) == 10 * major + minor  # from the ELF header


def test_ptx_output_loads_or_explains_why_not(driver, compiler) -> None:
    src = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = 1; }')
    if mc.nvrtc_version() > driver.version:
        with pytest.raises(mc.UnsupportedPlatform, match="nvidia-cuda-nvrtc"):
            compiler.compile(src, mc.CompileOptions(output="ptx"))
    else:
        m = compiler.compile(src, mc.CompileOptions(output="ptx"))
        assert m.program.image.endswith(b"\0")
        m.kernel(mc.cuda_export("k", o=mc.Out[mc.DeviceBuffer[mc.i32]]))


def test_concurrent_launches_of_one_kernel_never_mix_arguments(context, pool, axpby) -> None:
    # Each thread launches the same kernel on its own stream and buffers, accumulating (b = 1) its own
    # sequence of scalars into its own distinct y: a launch that took another thread's buffer, scalar
    # or length would leave a different sum, and no later launch overwrites it. All values are small
    # integers, so the float32 sums are exact.
    errors: list[BaseException] = []
    outs: dict[int, np.ndarray] = {}
    n, launches = 1024, 300
    base = np.arange(n) % 7

    def scalar(t: int, i: int) -> float:
        return float(t + 1 + 8 * (i % 4))

    def worker(t: int) -> None:
        try:
            s = context.create_stream()
            x = upload(context, s, pool, (t + 1 + base).astype(np.float32))
            y = upload(context, s, pool, (1000 * (t + 1) + np.arange(n)).astype(np.float32))
            for i in range(launches):
                axpby.launch(s, mc.LaunchConfig.for_elements(n), y, x, scalar(t, i), 1.0, n)
            outs[t] = download(context, s, y)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert sorted(outs) == list(range(6))
    for t, arr in outs.items():
        total = sum(scalar(t, i) for i in range(launches))
        want = 1000 * (t + 1) + np.arange(n) + total * (t + 1 + base)
        np.testing.assert_array_equal(arr, want.astype(np.float32), err_msg=f"thread {t}")


# -- programmatic dependent launch (compute capability >= 9.0) ------------------------------------------
PDL_SOURCE = mc.cuda_kernel(r'''
__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Lets dependents start at once, spins, then writes `value` and the time it finished.
extern "C" __global__ void slow_fill(unsigned* out, unsigned long long* finished, unsigned value, unsigned long long ns) {
    asm volatile("griddepcontrol.launch_dependents;");
    const unsigned long long start = now_ns();
    while (now_ns() - start < ns) {}
    out[threadIdx.x] = value;
    __syncthreads();
    if (threadIdx.x == 0) *finished = now_ns();
}
// Notes when it started, waits for the previous grid, then reads what it wrote.
extern "C" __global__ void add_one_after(unsigned* dst, const unsigned* src, unsigned long long* started) {
    if (threadIdx.x == 0) *started = now_ns();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    dst[threadIdx.x] = src[threadIdx.x] + 1;
}''', "pdl.cu")
SlowFill = mc.cuda_export("slow_fill", out=mc.Out[mc.DeviceBuffer[mc.u32]], finished=mc.Out[mc.DeviceBuffer[mc.u64]],
                          value=mc.u32, ns=mc.u64)
AddOneAfter = mc.cuda_export("add_one_after", dst=mc.Out[mc.DeviceBuffer[mc.u32]], src=mc.In[mc.DeviceBuffer[mc.u32]],
                             started=mc.Out[mc.DeviceBuffer[mc.u64]])


@pytest.fixture(scope="module")
def pdl_kernels(context, compiler):
    if context.device_info().compute_capability < (9, 0):
        pytest.skip("programmatic dependent launch needs compute capability >= 9.0")
    module = compiler.compile(PDL_SOURCE, mc.CompileOptions())
    return module.kernel(SlowFill), module.kernel(AddOneAfter)


@pytest.mark.parametrize("programmatic", [False, True])
def test_a_programmatic_launch_starts_early_and_still_reads_the_previous_result(context, stream, pool, pdl_kernels,
                                                                                 programmatic, record_property) -> None:
    """What is guaranteed is asserted: the dependent reads its predecessor's finished result, and without
    the attribute it starts only after the predecessor finished (stream order). That the programmatic one
    starts early is allowed, not promised (a serializing tool such as compute-sanitizer, or a busy device,
    starts it late): it is recorded as an observation (``record_property``), never the verdict."""
    slow_fill, add_one_after = pdl_kernels
    src, dst = pool.allocate(mc.u32, stream, 64), pool.allocate(mc.u32, stream, 64)
    finished, started = pool.allocate(mc.u64, stream, 1), pool.allocate(mc.u64, stream, 1)
    early: list[bool] = []
    for value in (7, 1000):
        stream.memset(src, 0xFF)  # poisoned each round: reading before the predecessor wrote would show
        stream.memset(dst, 0xFF)
        slow_fill.launch(stream, mc.LaunchConfig(1, 64), src, finished, value, 2_000_000)  # spins 2 ms
        add_one_after.launch(stream, mc.LaunchConfig(1, 64, programmatic_stream_serialization=programmatic),
                             dst, src, started)
        np.testing.assert_array_equal(download(context, stream, dst), np.full(64, value + 1, np.uint32))
        began, done = int(download(context, stream, started)[0]), int(download(context, stream, finished)[0])
        if not programmatic:
            assert began >= done  # stream order: guaranteed whatever the speed
        early.append(began < done)
    record_property("started_before_the_predecessor_finished", early)


def test_programmatic_launches_replay_in_a_graph(context, stream, pool, pdl_kernels) -> None:
    slow_fill, add_one_after = pdl_kernels
    src, dst = pool.allocate(mc.u32, stream, 64), pool.allocate(mc.u32, stream, 64)
    finished, started = pool.allocate(mc.u64, stream, 1), pool.allocate(mc.u64, stream, 1)
    stream.memset(dst, 0xFF)
    pdl = mc.LaunchConfig(1, 64, programmatic_stream_serialization=True)

    def sequence(r: Any) -> None:
        slow_fill.launch(stream, mc.LaunchConfig(1, 64), r[0], r[2], 41, 100_000)
        add_one_after.launch_captured(stream, pdl, r[1], r[0], r[3])

    graph = stream.capture((src, dst, finished, started), sequence)
    np.testing.assert_array_equal(download(context, stream, dst), np.full(64, 0xFFFFFFFF, np.uint32))  # nothing ran
    graph.launch(stream)
    np.testing.assert_array_equal(download(context, stream, dst), np.full(64, 42, np.uint32))
    node = next(n for n in graph.kernel_nodes() if n.kernel is add_one_after)
    fill = next(n for n in graph.kernel_nodes() if n.kernel is slow_fill)
    assert node.config.programmatic_stream_serialization
    with pytest.raises(mc.LaunchConfigError, match="programmatic_stream_serialization=True as captured"):
        graph.update_kernel(node, lambda r: ((r[1], r[0], r[3]), mc.LaunchConfig(1, 64)))
    # Each replay gets new values and poisoned buffers, so a replay that ran nothing (or the old
    # parameters) cannot pass.
    for value in (99, 7):
        graph.update_kernel(fill, lambda r, v=value: ((r[0], r[2], v, 100_000), mc.LaunchConfig(1, 64)))
        graph.update_kernel(node, lambda r: ((r[1], r[0], r[3]), pdl))
        stream.memset(src, 0xFF)
        stream.memset(dst, 0xFF)
        graph.launch(stream)
        np.testing.assert_array_equal(download(context, stream, dst), np.full(64, value + 1, np.uint32))
    graph.close()


def test_the_ctypes_fallback_launches_records_and_replays_on_the_device(context, stream, pool, compiler, rng,
                                                                       monkeypatch) -> None:
    """Without the C extension the hot path is ctypes (cuLaunchKernel, cuLaunchKernelEx, cuGraphLaunch,
    cuEventRecord through cuGetProcAddress's entries): force it, count each call through the fallback,
    and check what the device computed."""
    import sys

    import mircuda
    from mircuda import _cuda

    for attr in ("launch_kernel", "launch_kernel_programmatic", "graph_launch", "event_record", "hot_path_kind",
                 "bound_hotpath"):
        monkeypatch.setattr(_cuda, attr, getattr(_cuda, attr))  # restored after the test
    monkeypatch.setattr(_cuda, "entry_points", dict(_cuda.entry_points))
    monkeypatch.delattr(mircuda, "_hotpath", raising=False)
    monkeypatch.setitem(sys.modules, "mircuda._hotpath", None)  # the import fails: the ctypes path
    _cuda._bind_hot_path(_cuda.driver())
    assert _cuda.hot_path_kind == "ctypes"
    calls: dict[str, int] = {}
    for attr in ("launch_kernel", "launch_kernel_programmatic", "graph_launch", "event_record"):
        fallback = getattr(_cuda, attr)

        def counted(*args: Any, _f: Any = fallback, _n: str = attr) -> int:
            calls[_n] = calls.get(_n, 0) + 1
            return _f(*args)

        monkeypatch.setattr(_cuda, attr, counted)

    kernel = compiler.compile(AXPBY).kernel(Axpby)
    n = 1000
    x_h, y_h = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y = upload(context, stream, pool, x_h), upload(context, stream, pool, y_h)
    want = y_h.astype(np.float64)
    configs = [mc.LaunchConfig.for_elements(n, 128)]  # fresh configs: the launch path picks the entry anew
    if context.device_info().compute_capability >= (9, 0):
        configs.append(mc.LaunchConfig(-(-n // 128), 128, programmatic_stream_serialization=True))
    for i, config in enumerate(configs):
        a = 0.5 + i
        kernel.launch(stream, config, y, x, a, 2.0, n)
        want = a * x_h + 2.0 * want
    event = context.create_event()
    event.record(stream)
    graph = stream.capture((y, x), lambda r: kernel.launch(stream, mc.LaunchConfig.for_elements(n, 256), r[0], r[1],
                                                           -1.0, 0.5, n))
    graph.launch(stream)
    want = -1.0 * x_h + 0.5 * want
    got = download(context, stream, y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert calls["launch_kernel"] >= 2 and calls["event_record"] >= 1 and calls["graph_launch"] == 1
    assert calls.get("launch_kernel_programmatic", 0) == len(configs) - 1
    graph.close()
    for buf in (x, y):
        buf.free(stream)


COUNT_BLOCKS = mc.cuda_kernel(r'''
extern "C" __global__ void count_blocks(unsigned* counts, unsigned slot, unsigned long long tag,
                                        unsigned long long* tags) {
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        atomicAdd(&counts[slot], 1u);
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) tags[slot] = tag;
    }
}''', "count_blocks.cu")
CountBlocks = mc.cuda_export("count_blocks", counts=mc.InOut[mc.DeviceBuffer[mc.u32]], slot=mc.u32, tag=mc.u64,
                             tags=mc.Out[mc.DeviceBuffer[mc.u64]])


def test_more_configs_than_a_kernel_keeps_launch_each_with_its_own_grid_and_values(context, stream, pool,
                                                                                   compiler) -> None:
    """The bound launchers of the last 256 configs are kept: 700 launches over more distinct configs than
    that (plain, 2-d, shared memory, one config object reused, equal new objects for configs seen before
    the reset, and on cc >= 9.0 programmatic, cooperative and cluster launches interleaved) each run
    with their own grid (every block counted once) and their own values (the tag of each launch)."""
    kernel = compiler.compile(COUNT_BLOCKS, mc.CompileOptions()).kernel(CountBlocks)
    n = 700
    counts, tags = pool.allocate(mc.u32, stream, n), pool.allocate(mc.u64, stream, n)
    stream.memset(counts, 0)
    stream.memset(tags, 0)
    hopper = context.device_info().compute_capability >= (9, 0)
    same = mc.LaunchConfig(3, 32)
    blocks = []
    for i in range(n):
        if i % 10 == 0:
            config = same
        elif hopper and i % 20 == 7:
            config = mc.LaunchConfig(4, 32, programmatic_stream_serialization=True, cluster=2)
        elif hopper and i % 20 == 17:
            config = mc.LaunchConfig(4, 32, cooperative=True)
        elif i < 400:
            config = mc.LaunchConfig(i % 300 + 1, 32, shared_mem_bytes=16 * (i % 5))
        else:
            config = mc.LaunchConfig((i % 300 + 1, 2), (8, 4))
        kernel.launch(stream, config, counts, i, 2**63 + i, tags)
        gx, gy, gz = config.grid
        blocks.append(gx * gy * gz)
    np.testing.assert_array_equal(download(context, stream, counts), np.array(blocks, np.uint32))
    np.testing.assert_array_equal(download(context, stream, tags), 2**63 + np.arange(n, dtype=np.uint64))
    for buf in (counts, tags):
        buf.free(stream)


def test_a_kernel_of_a_closed_context_refuses_every_launch(driver, context, stream, pool) -> None:
    """After its context is closed a kernel's launch (bound to a config before, or to a new one, from its
    own thread or another) raises ClosedResourceError for the closed streams and ContractError for
    another context's stream; the process keeps running and nothing reaches the driver."""
    other = driver.create_context(driver.devices()[0])
    s = other.create_stream()
    kernel = mc.Compiler(other).compile(COUNT_BLOCKS, mc.CompileOptions()).kernel(CountBlocks)
    counts, tags = other.default_memory_pool().allocate(mc.u32, s, 4), other.default_memory_pool().allocate(mc.u64, s, 4)
    config = mc.LaunchConfig(1, 32)
    kernel.launch(s, config, counts, 0, 1, tags)
    s.synchronize()
    other.close()
    errors: list[BaseException] = []

    def attempts() -> None:
        for c in (config, mc.LaunchConfig(1, 32), mc.LaunchConfig(2, 64)):
            with pytest.raises(mc.ClosedResourceError):
                kernel.launch(s, c, counts, 0, 1, tags)
            with pytest.raises(mc.ContractError, match="stream"):
                kernel.launch(stream, c, counts, 0, 1, tags)

    def in_thread() -> None:
        try:
            attempts()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    attempts()
    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    assert not errors, errors
