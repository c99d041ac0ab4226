"""Numba's own API on mircuda's streams and memory: external streams, CUDA Array Interface both ways
(bf16 and fp8 included), the EMM pool plugin -- with no host synchronization between producer and
consumer."""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload

import mircuda.numba_ext as mn  # numba is required: a broken numba_ext must fail, not skip
from numba import cuda

from mircuda.numba_ext import helpers as nh


@cuda.jit
def nb_scale(out, x, factor):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * factor


@cuda.jit
def nb_widen_bf16(out, x):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = nh.bf16_to_f32(x[i])


@cuda.jit
def nb_decode_e4m3(out, q):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = nh.e4m3_to_f32(q[i])


DOUBLE = mc.cuda_kernel(r'''
extern "C" __global__ void double_it(float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}''', "double_it.cu")


def blocks(n: int, threads: int = 256) -> int:
    return (n + threads - 1) // threads


def test_numba_launches_on_a_mircuda_stream_into_mircuda_buffers(context, stream, pool, rng) -> None:
    n = 10_001
    x_h = rng.standard_normal(n).astype(np.float32)
    x = upload(context, stream, pool, x_h)
    out = pool.allocate(mc.f32, stream, n)
    stream.memset(out, 0xFF)
    ns = mn.numba_stream(stream)
    assert mn.numba_stream(stream) is ns
    nb_scale[blocks(n), 256, ns](mn.as_numba_array(out, stream), mn.as_numba_array(x, stream), np.float32(3.0))
    np.testing.assert_array_equal(download(context, stream, out), x_h * np.float32(3.0))


def test_a_buffer_of_another_stream_is_ordered_on_the_device(context, stream, pool, compiler, rng) -> None:
    double = compiler.compile(DOUBLE).kernel(mc.cuda_export("double_it", x=mc.InOut[mc.DeviceBuffer[mc.f32]], n=mc.u32))
    other = context.create_stream()
    try:
        n = 1 << 22
        x_h = rng.standard_normal(n).astype(np.float32)
        x = upload(context, stream, pool, x_h)
        for _ in range(8):  # keep `stream` busy for a while
            double.launch(stream, mc.LaunchConfig.for_elements(n, 256), x, n)
        out = pool.allocate(mc.f32, other, n)
        nb_scale[blocks(n), 256, mn.numba_stream(other)](mn.as_numba_array(out, other), mn.as_numba_array(x, other),
                                                          np.float32(1.0))
        np.testing.assert_array_equal(download(context, other, out), x_h * np.float32(256.0))
    finally:
        other.synchronize()
        other.close()


def test_bf16_and_fp8_buffers_reach_numba_kernels(context, stream, pool, rng) -> None:
    n = 4096
    xb = rng.standard_normal(n).astype(np.float32).astype(ml_dtypes.bfloat16)
    arr = mn.as_numba_array(upload(context, stream, pool, xb), stream)
    assert arr.dtype == np.dtype(ml_dtypes.bfloat16)
    out = pool.allocate(mc.f32, stream, n)
    ns = mn.numba_stream(stream)
    nb_widen_bf16[blocks(n), 256, ns](mn.as_numba_array(out, stream), arr)
    np.testing.assert_array_equal(download(context, stream, out), xb.astype(np.float32))
    q_h = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    q = mn.as_numba_array(upload(context, stream, pool, q_h), stream)
    assert q.dtype == np.uint8  # Numba has no fp8 type: the bytes
    out8 = pool.allocate(mc.f32, stream, 256)
    nb_decode_e4m3[1, 256, ns](mn.as_numba_array(out8, stream), q)
    np.testing.assert_array_equal(download(context, stream, out8), q_h.astype(np.float32))


@cuda.jit
def nb_copy2d(out, a):  # type: ignore[no-untyped-def]
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


def test_an_nd_view_becomes_a_strided_numba_array(context, stream, pool) -> None:
    data = np.arange(24, dtype=np.float32)
    view = mn.ArrayView(upload(context, stream, pool, data), (3, 4), strides=(8, 2), offset=1)
    arr = mn.as_numba_array(view, stream)
    assert arr.shape == (3, 4) and arr.strides == (32, 8)
    out = pool.allocate(mc.f32, stream, 12)
    stream.memset(out, 0xFF)
    nb_copy2d[(1, 1), (4, 4), mn.numba_stream(stream)](mn.as_numba_array(mn.ArrayView(out, (3, 4)), stream), arr)
    want = np.lib.stride_tricks.as_strided(data[1:], (3, 4), (32, 8))
    np.testing.assert_array_equal(download(context, stream, out).reshape(3, 4), want)


def test_numba_device_arrays_launch_mircuda_kernels(context, stream, pool, compiler, rng) -> None:
    double = compiler.compile(DOUBLE).kernel(mc.cuda_export("double_it", x=mc.InOut[mc.DeviceBuffer[mc.f32]], n=mc.u32))
    n = 5000
    x_h = rng.standard_normal(n).astype(np.float32)
    ns = mn.numba_stream(stream)
    d = cuda.to_device(x_h, stream=ns)
    buf = mn.as_device_buffer(d, context, stream)
    assert isinstance(buf, mc.DeviceBuffer) and buf.dtype == np.float32 and len(buf) == n
    double.launch(stream, mc.LaunchConfig.for_elements(n, 256), buf, n)
    np.testing.assert_array_equal(download(context, stream, buf), x_h * 2)
    buf.free(stream)  # ends the borrow; the memory stays Numba's
    with pytest.raises(mc.UseAfterFree):
        double.launch(stream, mc.LaunchConfig.for_elements(n, 256), buf, n)
    got = d.copy_to_host(stream=ns)
    stream.synchronize()
    np.testing.assert_array_equal(got, x_h * 2)


def test_bf16_and_fp8_numba_arrays_become_typed_buffers(context, stream, rng) -> None:
    ns = mn.numba_stream(stream)
    xb = rng.standard_normal(64).astype(np.float32).astype(ml_dtypes.bfloat16)
    # numba-cuda cannot copy a bf16 host array (no buffer protocol for ml_dtypes): upload the bits,
    # then view them as bf16 on the device.
    d = cuda.to_device(xb.view(np.uint16), stream=ns).view(ml_dtypes.bfloat16)
    assert d.__cuda_array_interface__["typestr"] == "<V2"  # the interface alone cannot say bf16 ...
    buf = mn.as_device_buffer(d, context, stream)         # ... the Numba array's dtype does
    assert buf.scalar_type is mc.bf16
    np.testing.assert_array_equal(download(context, stream, buf).view(np.uint16), xb.view(np.uint16))
    q = cuda.to_device(np.arange(16, dtype=np.uint8), stream=ns)
    assert mn.as_device_buffer(q, context, stream, dtype=mc.e4m3).scalar_type is mc.e4m3


def test_arrays_mircuda_cannot_view_as_a_buffer_are_refused(context, stream) -> None:
    ns = mn.numba_stream(stream)
    d = cuda.to_device(np.zeros(64, np.float32), stream=ns)
    with pytest.raises(mc.ContractError, match="C-contiguous"):
        mn.as_device_buffer(d[::2], context, stream)
    with pytest.raises(mc.ContractError, match="2 bytes"):
        mn.as_device_buffer(d, context, stream, dtype=mc.bf16)

    class RawVoid:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<V2", "data": (d.device_ctypes_pointer.value, False),  # noqa: RUF012  (the protocol attribute)
                                    "version": 3, "strides": None, "stream": None}

    with pytest.raises(mc.ContractError, match="dtype="):
        mn.as_device_buffer(RawVoid(), context, stream)
    with pytest.raises(mc.ContractError):
        mn.as_device_buffer(np.zeros(4, np.float32), context, stream)


def test_numba_allocates_from_the_mircuda_pool_on_the_bound_stream(context, stream, pool, rng) -> None:
    n = 1 << 20
    x_h = rng.standard_normal(n).astype(np.float32)
    with mn.use_memory_pool(pool, stream) as manager:
        with pytest.raises(mc.ContractError, match="close"):
            mn.use_memory_pool(pool, stream)
        ns = manager.numba_stream
        stream.synchronize()
        before = pool.used_bytes
        x = cuda.to_device(x_h, stream=ns)
        out = cuda.device_array(n, dtype=np.float32, stream=ns)
        assert manager.allocations == 2
        stream.synchronize()
        assert pool.used_bytes >= before + 2 * 4 * n
        nb_scale[blocks(n), 256, ns](out, x, np.float32(0.5))
        got = out.copy_to_host(stream=ns)
        stream.synchronize()
        np.testing.assert_array_equal(got, x_h * np.float32(0.5))
        in_use = pool.used_bytes
        # The verdict must not hang on when the collector runs (a tool or a test may hold a reference a
        # while): the arrays' finalizers are taken and run explicitly, once each, as dropping them does.
        finalizers = [a.gpu_data._finalizer for a in (x, out)]
        assert all(f.alive for f in finalizers)
        del x, out
        for f in finalizers:
            f()  # a no-op where the collector already ran it
        assert not any(f.alive for f in finalizers)
        assert manager.pending_frees == 2  # finalizers only queue the frees ...
        manager.flush()                    # ... which are enqueued on the bound stream here
        assert manager.pending_frees == 0
        stream.synchronize()
        assert pool.used_bytes < in_use
    assert "closed" in repr(manager)
