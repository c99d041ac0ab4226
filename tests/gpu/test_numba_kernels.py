"""Numba kernels as mircuda exports on the device: launches, N-d views, device functions, shared and
local memory, atomics, fp16/bf16, CUDA C helpers, mixing with CUDA C kernels, compiled host loops."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload

import mircuda.numba_ext as mn  # numba is required: a broken numba_ext must fail, not skip
import numba
from numba import cuda
from numba.cuda import bf16

from mircuda.numba_ext import helpers as nh


def saxpy(y, x, a):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < y.size:
        y[i] = a * x[i] + y[i]


SAXPY = mn.numba_kernel(saxpy, "void(float32[:], float32[:], float32)")
Saxpy = mc.cuda_export("saxpy", y=mc.InOut[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]], a=mc.f32)


@pytest.mark.parametrize("n", [1, 1000, (1 << 20) + 3])
def test_a_numba_kernel_launches_through_the_typed_path(context, stream, pool, compiler, rng, n) -> None:
    k = compiler.compile(SAXPY).kernel(Saxpy)
    x_h = rng.standard_normal(n).astype(np.float32)
    y_h = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(-2, 2))
    x, y = upload(context, stream, pool, x_h), upload(context, stream, pool, y_h)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 256), y, x, a)
    got = download(context, stream, y).astype(np.float64)
    want = np.float32(a) * x_h.astype(np.float64) + y_h.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@dataclass
class SaxpyBuffers:
    y: mc.DeviceBuffer
    x: mc.DeviceBuffer


def test_a_numba_kernel_is_captured_into_a_graph_and_its_node_updated(context, stream, pool, compiler, rng) -> None:
    k = compiler.compile(SAXPY).kernel(Saxpy)
    n = 4096
    x_h = rng.standard_normal(n).astype(np.float32)
    y_h = rng.standard_normal(n).astype(np.float32)
    buffers = SaxpyBuffers(upload(context, stream, pool, y_h), upload(context, stream, pool, x_h))
    cfg = mc.LaunchConfig.for_elements(n, 256)
    nodes = []
    graph = stream.capture(buffers, lambda r: nodes.append(k.launch_captured(stream, cfg, r.y, r.x, 2.0)))
    try:
        graph.launch(stream)                                       # y = 2 x + y
        graph.update_kernel(nodes[0], lambda r: (r.y, r.x, -1.0))  # the same contract checks the update
        graph.launch(stream)                                       # y = -x + y
        want = y_h.astype(np.float64) + x_h
        np.testing.assert_allclose(download(context, stream, buffers.y), want, rtol=1e-5, atol=1e-5)
    finally:
        graph.close()


def test_the_module_cache_answers_the_same_kernel(compiler) -> None:
    first = compiler.compile(mn.numba_kernel(saxpy, "void(float32[:], float32[:], float32)"))
    hits = compiler.cache_stats().memory_hits
    assert compiler.compile(mn.numba_kernel(saxpy, "void(float32[:], float32[:], float32)")) is first
    assert compiler.cache_stats().memory_hits == hits + 1


def test_a_contract_that_contradicts_the_signature_fails_at_bind_time(compiler) -> None:
    module = compiler.compile(SAXPY)
    with pytest.raises(mc.ContractError, match="float32") as info:
        module.kernel(mc.cuda_export("saxpy", y=mc.DeviceBuffer[mc.f64], x=mc.In[mc.DeviceBuffer[mc.f32]], a=mc.f32))
    assert info.value.argument == "y"
    with pytest.raises(mc.ContractError, match="3 parameters"):
        module.kernel(mc.cuda_export("saxpy", y=mc.DeviceBuffer[mc.f32], x=mc.In[mc.DeviceBuffer[mc.f32]]))


@cuda.jit(device=True)
def _square(v):  # type: ignore[no-untyped-def]
    return v * v


def sum_of_squares(total, x):  # type: ignore[no-untyped-def]
    tile = cuda.shared.array(256, dtype=np.float32)
    scratch = cuda.local.array(2, dtype=np.float32)
    i = cuda.grid(1)
    scratch[0] = 0.0
    if i < x.size:
        scratch[0] = _square(x[i])
    tile[cuda.threadIdx.x] = scratch[0]
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if cuda.threadIdx.x < stride:
            tile[cuda.threadIdx.x] += tile[cuda.threadIdx.x + stride]
        cuda.syncthreads()
        stride //= 2
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(total, 0, tile[0])


def test_device_functions_shared_and_local_memory_and_atomics(context, stream, pool, compiler, rng) -> None:
    k = compiler.compile(mn.numba_kernel(sum_of_squares, "void(float32[:], float32[:])")).kernel(
        mc.cuda_export("sum_of_squares", total=mc.InOut[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]]))
    n = 100_000
    x_h = rng.standard_normal(n).astype(np.float32)
    x = upload(context, stream, pool, x_h)
    total = pool.allocate_zeroed(mc.f32, stream, 1)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 256), total, x)
    want = float(np.sum(x_h.astype(np.float64) ** 2))
    assert abs(float(download(context, stream, total)[0]) - want) / want < 1e-5


def half_math(out_h, out_b, x_h, x_b):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out_h.size:
        out_h[i] = x_h[i] * x_h[i]  # numba-cuda's float16 arithmetic
        out_b[i] = nh.f32_to_bf16(nh.bf16_to_f32(x_b[i]) * np.float32(3.0))


@pytest.mark.parametrize("lto", [False, True])
def test_fp16_and_bf16_arrays(context, stream, pool, compiler, rng, lto) -> None:
    source = mn.numba_kernel(half_math, "void(float16[:], bfloat16[:], float16[:], bfloat16[:])", lto=lto)
    k = compiler.compile(source).kernel(mc.cuda_export(
        "half_math", out_h=mc.Out[mc.DeviceBuffer[mc.f16]], out_b=mc.Out[mc.DeviceBuffer[mc.bf16]],
        x_h=mc.In[mc.DeviceBuffer[mc.f16]], x_b=mc.In[mc.DeviceBuffer[mc.bf16]]))
    n = 4099
    xh = rng.uniform(-100, 100, n).astype(np.float16)
    xb = rng.uniform(-1e30, 1e30, n).astype(np.float32).astype(ml_dtypes.bfloat16)
    out_h, out_b = pool.allocate(mc.f16, stream, n), pool.allocate(mc.bf16, stream, n)
    stream.memset(out_h, 0xFF)
    stream.memset(out_b, 0xFF)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 128), out_h, out_b, upload(context, stream, pool, xh),
             upload(context, stream, pool, xb))
    np.testing.assert_array_equal(download(context, stream, out_h), xh * xh)  # one rounding of an exact product
    want_b = (xb.astype(np.float32) * np.float32(3.0)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(download(context, stream, out_b).view(np.uint16), want_b.view(np.uint16))


def bf16_square(out, x):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = bf16.hmul(x[i], x[i])  # numba-cuda's own bfloat16 arithmetic


def test_numbas_own_bf16_arithmetic(context, stream, pool, compiler, rng) -> None:
    k = compiler.compile(mn.numba_kernel(bf16_square, "void(bfloat16[:], bfloat16[:])")).kernel(mc.cuda_export(
        "bf16_square", out=mc.Out[mc.DeviceBuffer[mc.bf16]], x=mc.In[mc.DeviceBuffer[mc.bf16]]))
    n = 1000
    x_h = rng.uniform(-1e10, 1e10, n).astype(np.float32).astype(ml_dtypes.bfloat16)
    out = pool.allocate(mc.bf16, stream, n)
    stream.memset(out, 0xFF)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 128), out, upload(context, stream, pool, x_h))
    want = (x_h.astype(np.float32) * x_h.astype(np.float32)).astype(ml_dtypes.bfloat16)  # one rounding
    np.testing.assert_array_equal(download(context, stream, out).view(np.uint16), want.view(np.uint16))


def decode(f_bf16, f_f16, f_e4m3, f_e2m1, pair_x, pair_y, bits_bf16, bits_f16, q):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < bits_bf16.size:
        f_bf16[i] = nh.bf16_to_f32(bits_bf16[i])
        f_f16[i] = nh.f16_to_f32(bits_f16[i])
    if i < q.size:
        f_e4m3[i] = nh.e4m3_to_f32(q[i])
        f_e2m1[i] = nh.e2m1_to_f32(q[i])
        p = nh.e2m1x2_to_f32x2(q[i])
        pair_x[i] = p.x
        pair_y[i] = p.y


DECODE_SIG = ("void(float32[:], float32[:], float32[:], float32[:], float32[:], float32[:], bfloat16[:], float16[:], "
              "uint8[:])")


@pytest.mark.parametrize("lto", [False, True])
def test_the_helpers_decode_every_bit_pattern_exactly(context, stream, pool, compiler, lto) -> None:
    f32 = mc.Out[mc.DeviceBuffer[mc.f32]]
    k = compiler.compile(mn.numba_kernel(decode, DECODE_SIG, lto=lto)).kernel(mc.cuda_export(
        "decode", f_bf16=f32, f_f16=f32, f_e4m3=f32, f_e2m1=f32, pair_x=f32, pair_y=f32,
        bits_bf16=mc.In[mc.DeviceBuffer[mc.bf16]], bits_f16=mc.In[mc.DeviceBuffer[mc.f16]],
        q=mc.In[mc.DeviceBuffer[mc.u8]]))
    patterns = np.arange(1 << 16, dtype=np.uint16)
    q_h = np.arange(256, dtype=np.uint8)
    outs = [pool.allocate(mc.f32, stream, n) for n in (1 << 16, 1 << 16, 256, 256, 256, 256)]
    for o in outs:
        stream.memset(o, 0xFF)
    k.launch(stream, mc.LaunchConfig.for_elements(1 << 16, 256), *outs,
             upload(context, stream, pool, patterns.view(ml_dtypes.bfloat16)),
             upload(context, stream, pool, patterns.view(np.float16)), upload(context, stream, pool, q_h))
    got = [download(context, stream, o) for o in outs]
    fp4 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    want = [patterns.view(ml_dtypes.bfloat16).astype(np.float32), patterns.view(np.float16).astype(np.float32),
            q_h.view(ml_dtypes.float8_e4m3fn).astype(np.float32), fp4[q_h & 15], fp4[q_h & 15], fp4[q_h >> 4]]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # NaN where NaN, values bit-for-bit otherwise


def encode(out_bf16, out_f16, x):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < x.size:
        out_bf16[i] = nh.f32_to_bf16(x[i])
        out_f16[i] = nh.f32_to_f16(x[i])


def test_the_helpers_round_to_nearest_even(context, stream, pool, compiler, rng) -> None:
    k = compiler.compile(mn.numba_kernel(encode, "void(bfloat16[:], float16[:], float32[:])")).kernel(
        mc.cuda_export("encode", out_bf16=mc.Out[mc.DeviceBuffer[mc.bf16]], out_f16=mc.Out[mc.DeviceBuffer[mc.f16]],
                       x=mc.In[mc.DeviceBuffer[mc.f32]]))
    specials = np.array([0.0, -0.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 65504.0, 65520.0, 1e-8, np.inf, -np.inf,
                         3.4e38, np.nan], dtype=np.float32)
    x_h = np.concatenate([specials, (rng.standard_normal(100_000) * 10.0 ** rng.integers(-6, 6, 100_000))
                          .astype(np.float32)])
    n = len(x_h)
    out_b, out_h = pool.allocate(mc.bf16, stream, n), pool.allocate(mc.f16, stream, n)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 256), out_b, out_h, upload(context, stream, pool, x_h))
    got_b, got_h = download(context, stream, out_b), download(context, stream, out_h)
    with np.errstate(over="ignore"):
        want_b, want_h = x_h.astype(ml_dtypes.bfloat16), x_h.astype(np.float16)
    nan = np.isnan(x_h)
    assert np.isnan(got_b.astype(np.float32)[nan]).all() and np.isnan(got_h[nan]).all()
    np.testing.assert_array_equal(got_b.view(np.uint16)[~nan], want_b.view(np.uint16)[~nan])
    np.testing.assert_array_equal(got_h.view(np.uint16)[~nan], want_h.view(np.uint16)[~nan])


def warp_reduce(sums, maxima, x):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    sums[i] = nh.warp_sum_f32(x[i])  # every lane of every warp is active: n is a multiple of the block
    maxima[i] = nh.warp_max_f32(x[i])


def test_the_warp_reductions(context, stream, pool, compiler, rng) -> None:
    k = compiler.compile(mn.numba_kernel(warp_reduce, "void(float32[:], float32[:], float32[:])")).kernel(
        mc.cuda_export("warp_reduce", sums=mc.Out[mc.DeviceBuffer[mc.f32]], maxima=mc.Out[mc.DeviceBuffer[mc.f32]],
                       x=mc.In[mc.DeviceBuffer[mc.f32]]))
    n = 256 * 64
    x_h = rng.standard_normal(n).astype(np.float32)
    sums, maxima = pool.allocate(mc.f32, stream, n), pool.allocate(mc.f32, stream, n)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 256), sums, maxima, upload(context, stream, pool, x_h))
    lanes = x_h.astype(np.float64).reshape(-1, 32)
    np.testing.assert_allclose(download(context, stream, sums).reshape(-1, 32),
                               np.repeat(lanes.sum(axis=1, keepdims=True), 32, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(download(context, stream, maxima).reshape(-1, 32),
                                  np.repeat(lanes.max(axis=1, keepdims=True), 32, axis=1).astype(np.float32))


axpy_scaled = mn.declare_device("axpy_scaled", "float32(float32, float32, float32)", "../data/numba_user_device.cu")


def user_axpy(out, a, x, y):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = axpy_scaled(a, x[i], y[i])


def test_a_users_cuda_c_device_function_with_compile_options(context, stream, pool, compiler, rng) -> None:
    source = mn.numba_kernel(user_axpy, "void(float32[:], float32, float32[:], float32[:])")
    k = compiler.compile(source, mc.CompileOptions(defines={"AXPY_SCALE": "2.0f"})).kernel(mc.cuda_export(
        "user_axpy", out=mc.Out[mc.DeviceBuffer[mc.f32]], a=mc.f32, x=mc.In[mc.DeviceBuffer[mc.f32]],
        y=mc.In[mc.DeviceBuffer[mc.f32]]))
    n = 5000
    x_h, y_h = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = pool.allocate(mc.f32, stream, n)
    stream.memset(out, 0xFF)
    k.launch(stream, mc.LaunchConfig.for_elements(n, 256), out, 1.5, upload(context, stream, pool, x_h),
             upload(context, stream, pool, y_h))
    want = 2.0 * (1.5 * x_h.astype(np.float64) + y_h)
    np.testing.assert_allclose(download(context, stream, out), want, rtol=1e-5, atol=1e-5)


def add_transposed(out, a, b):  # type: ignore[no-untyped-def]
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a[i, j] + b[j, i]


def test_nd_views_pass_shape_and_strides(context, stream, pool, compiler, rng) -> None:
    k = compiler.compile(mn.numba_kernel(
        add_transposed, "void(float32[:, ::1], float32[:, :], float32[:, :])")).kernel(mc.cuda_export(
            "add_transposed", out=mc.Out[mc.DeviceBuffer[mc.f32]], a=mc.In[mc.DeviceBuffer[mc.f32]],
            b=mc.In[mc.DeviceBuffer[mc.f32]]))
    m, n, ld, offset = 37, 53, 60, 7
    a_h = rng.standard_normal(offset + m * ld).astype(np.float32)  # an m x n block, rows ld apart
    b_h = rng.standard_normal(n * m).astype(np.float32)            # an n x m matrix in Fortran order
    out = pool.allocate(mc.f32, stream, m * n)
    stream.memset(out, 0xFF)
    a_view = mn.ArrayView(upload(context, stream, pool, a_h), (m, n), strides=(ld, 1), offset=offset)
    b_view = mn.ArrayView(upload(context, stream, pool, b_h), (n, m), strides=(1, n))
    k.launch(stream, mc.LaunchConfig(((m + 15) // 16, (n + 15) // 16), (16, 16)), mn.ArrayView(out, (m, n)),
             a_view, b_view)
    a_ref = np.lib.stride_tricks.as_strided(a_h[offset:], (m, n), (ld * 4, 4))
    b_ref = b_h.reshape(m, n).T  # Fortran order of (n, m) == C order of (m, n), transposed
    np.testing.assert_array_equal(download(context, stream, out).reshape(m, n), a_ref + b_ref.T)


FILL_IOTA = mc.cuda_kernel(r'''
extern "C" __global__ void iota(float* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)i;
}
extern "C" __global__ void add_one(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}''', "mixing.cu")


def square_into(out, x):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * x[i]


def test_cuda_c_and_numba_kernels_feed_each_other_on_one_stream(context, stream, pool, compiler) -> None:
    c_module = compiler.compile(FILL_IOTA)
    iota = c_module.kernel(mc.cuda_export("iota", out=mc.Out[mc.DeviceBuffer[mc.f32]], n=mc.u32))
    add_one = c_module.kernel(mc.cuda_export("add_one", x=mc.InOut[mc.DeviceBuffer[mc.f32]], n=mc.u32))
    square = compiler.compile(mn.numba_kernel(square_into, "void(float32[:], float32[:])")).kernel(
        mc.cuda_export("square_into", out=mc.Out[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]]))
    n = 3000
    cfg = mc.LaunchConfig.for_elements(n, 128)
    a, b = pool.allocate(mc.f32, stream, n), pool.allocate(mc.f32, stream, n)
    stream.memset(b, 0xFF)
    iota.launch(stream, cfg, a, n)        # CUDA C produces ...
    square.launch(stream, cfg, b, a)      # ... Numba consumes and produces ...
    add_one.launch(stream, cfg, b, n)     # ... CUDA C consumes; no host synchronization in between
    i = np.arange(n, dtype=np.float64)
    np.testing.assert_array_equal(download(context, stream, b), (i * i + 1).astype(np.float32))


def accumulate(out, value):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] += value


def test_an_njit_loop_launches_a_record_and_changes_an_argument_between_launches(context, stream, pool,
                                                                               compiler) -> None:
    k = compiler.compile(mn.numba_kernel(accumulate, "void(float32[:], float32)")).kernel(
        mc.cuda_export("accumulate", out=mc.InOut[mc.DeviceBuffer[mc.f32]], value=mc.f32))
    n = 1000
    out = pool.allocate_zeroed(mc.f32, stream, n)
    record = mn.LaunchRecord(k, stream, mc.LaunchConfig.for_elements(n, 256), out, 0.0)
    launch = mn.record_launcher()
    value = record.argument("value")

    @numba.njit
    def run(values, value, count):  # type: ignore[no-untyped-def]
        for i in range(count):
            value[0] = i
            err = launch(values)
            if err:
                return err
        return 0

    mn.check(run(record.values, value, 100))
    np.testing.assert_array_equal(download(context, stream, out), np.full(n, sum(range(100)), np.float32))


def test_a_launch_record_serves_cuda_c_kernels_too(context, stream, pool, compiler) -> None:
    iota = compiler.compile(FILL_IOTA).kernel(mc.cuda_export("iota", out=mc.Out[mc.DeviceBuffer[mc.f32]], n=mc.u32))
    n = 777
    out = pool.allocate(mc.f32, stream, n)
    stream.memset(out, 0xFF)
    record = mn.LaunchRecord(iota, stream, mc.LaunchConfig.for_elements(n, 128), out, n)
    assert record.labels == ("out", "n")
    launch = mn.record_launcher()
    mn.check(launch(record.values))  # an njit function, called from Python here
    np.testing.assert_array_equal(download(context, stream, out), np.arange(n, dtype=np.float32))
