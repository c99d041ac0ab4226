"""Interop in the core on the device (issue 17): DLPack both ways with torch and CuPy, CUDA Array
Interface import, strided views, adopted torch streams, staged transfers. Every exchange is checked
for values, strides, zero copies and stream order (a producer kept busy by a spin kernel, so that a
missing device-side wait would let the consumer read stale data)."""

from __future__ import annotations

import gc
import os

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.memory._dlpack import live_exports

SPIN_CYCLES = 50_000_000  # ~25 ms at 2 GHz: long enough for an unordered consumer to overtake the producer

KERNELS = mc.cuda_kernel(r'''
extern "C" __global__ void spin_then_fill(float* x, unsigned n, float value, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = value;
}
extern "C" __global__ void affine(float* x, unsigned n, float scale, float shift) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * scale + shift;
}
extern "C" __global__ void copy_bytes(unsigned char* out, const unsigned char* in, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}''', "interop_kernels.cu")

SpinThenFill = mc.cuda_export("spin_then_fill", x=mc.Out[mc.DeviceBuffer[mc.f32]], n=mc.u32, value=mc.f32,
                              cycles=mc.i64)
Affine = mc.cuda_export("affine", x=mc.InOut[mc.DeviceBuffer[mc.f32]], n=mc.u32, scale=mc.f32, shift=mc.f32)
CopyBytes = mc.cuda_export("copy_bytes", out=mc.Out[mc.DeviceBuffer[mc.u8]], input=mc.In[mc.DeviceBuffer[mc.u8]],
                           n=mc.u32)


@pytest.fixture(scope="module")
def kernels(compiler: mc.Compiler) -> dict[str, mc.TypedKernel]:
    module = compiler.compile(KERNELS)
    return {"spin": module.kernel(SpinThenFill), "affine": module.kernel(Affine), "copy": module.kernel(CopyBytes)}


def grid(n: int) -> mc.LaunchConfig:
    return mc.LaunchConfig.for_elements(max(n, 1), 256)


# -- staged transfers ---------------------------------------------------------------------------
def test_upload_and_download_round_trip(stream, pool, rng) -> None:
    for host in (rng.standard_normal((7, 9)).astype(np.float32),
                 rng.standard_normal(1000).astype(ml_dtypes.bfloat16),
                 np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn), np.zeros(0, np.int32)):
        buf = stream.upload(pool, host)
        assert len(buf) == host.size and buf.dtype == host.dtype
        np.testing.assert_array_equal(stream.download(buf).view(np.uint8), host.reshape(-1).view(np.uint8))
        buf.free(stream)
    with pytest.raises(mc.ContractError, match="'pool'"):
        stream.upload(object(), np.zeros(3, np.float32))
    with pytest.raises(mc.ContractError, match="'buffer'"):
        stream.download(np.zeros(3, np.float32))


def test_mircuda_to_mircuda_dlpack_keeps_e2m1_and_orders_streams(context, stream, pool, kernels) -> None:
    codes = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    fp4 = stream.upload(pool, codes)
    borrowed = mc.from_dlpack(fp4, context, stream)
    assert borrowed.scalar_type is mc.e2m1 and borrowed.handle == fp4.handle
    np.testing.assert_array_equal(stream.download(borrowed).view(np.uint8), np.arange(16, dtype=np.uint8))
    n = 1 << 20
    buf = pool.allocate_zeroed(mc.f32, stream, n)
    kernels["spin"].launch(stream, grid(n), buf, n, 4.0, SPIN_CYCLES)
    other = context.create_stream()
    try:
        seen = mc.from_dlpack(buf, context, other)  # the export makes `other` wait on `stream`
        np.testing.assert_array_equal(other.download(seen), np.full(n, 4.0, np.float32))
    finally:
        other.synchronize()
        other.close()



def test_a_borrow_cannot_end_while_a_live_graph_uses_the_memory(context, stream, pool) -> None:
    # Ending the borrow lets the producer release the memory; the graph's replays would then write freed memory.
    owner = pool.allocate_zeroed(mc.f32, stream, 64)
    borrowed = mc.from_dlpack(owner, context, stream)
    graph = stream.capture(borrowed, lambda b: stream.memset(b, 0x3F))
    with pytest.raises(mc.ContractError, match="held by 1 live graph"):
        borrowed.free(stream)
    graph.launch(stream)
    assert (stream.download(owner).view(np.uint8) == 0x3F).all()
    graph.close()
    borrowed.free(stream)  # no graph holds it now: the borrow ends
    with pytest.raises(mc.UseAfterFree):
        borrowed.free(stream)
    owner.free(stream)

# -- torch ----------------------------------------------------------------------------------------
def test_torch_tensor_through_a_cuda_c_kernel_and_back_without_copies(context, stream, kernels) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    torch.cuda.synchronize()
    buf = mc.from_dlpack(t, context, stream)
    assert isinstance(buf, mc.BorrowedDeviceBuffer) and len(buf) == 12 and buf.scalar_type is mc.f32
    assert buf.handle == t.data_ptr()
    kernels["affine"].launch(stream, grid(12), buf, 12, 2.0, 1.0)
    back = torch.from_dlpack(buf)  # torch's current stream waits on `stream` on the device
    assert back.data_ptr() == t.data_ptr() and back.shape == (12,)
    np.testing.assert_array_equal(back.cpu().numpy(), np.arange(12, dtype=np.float32) * 2 + 1)
    np.testing.assert_array_equal(t.cpu().numpy().reshape(-1), np.arange(12, dtype=np.float32) * 2 + 1)


def test_torch_producer_work_is_ordered_before_the_mircuda_consumer(context, stream, pool, kernels) -> None:
    torch = pytest.importorskip("torch")
    n = 1 << 20
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        t = torch.zeros(n, dtype=torch.float32, device="cuda")
        torch.cuda._sleep(SPIN_CYCLES)
        t.fill_(7.0)
        buf = mc.from_dlpack(t, context, stream)  # torch makes `stream` wait on `producer`
    out = pool.allocate(mc.f32, stream, n)
    stream.copy_device_range(buf, 0, out, 0, n)
    np.testing.assert_array_equal(stream.download(out), np.full(n, 7.0, np.float32))
    out.free(stream)


def test_mircuda_producer_work_is_ordered_before_the_torch_consumer(context, stream, pool, kernels) -> None:
    torch = pytest.importorskip("torch")
    n = 1 << 20
    buf = pool.allocate_zeroed(mc.f32, stream, n)
    kernels["spin"].launch(stream, grid(n), buf, n, 5.0, SPIN_CYCLES)
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        t = torch.from_dlpack(buf)  # mircuda makes `consumer` wait on `stream` on the device
        total = t.sum()
    assert total.item() == 5.0 * n


def test_exported_buffer_lives_until_torch_releases_it(context, stream, pool) -> None:
    torch = pytest.importorskip("torch")
    before = live_exports()
    buf = stream.upload(pool, np.arange(64, dtype=np.float32))
    t = torch.from_dlpack(buf)
    assert live_exports() == before + 1
    del buf
    gc.collect()
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(64, dtype=np.float32))  # still allocated
    del t
    gc.collect()
    assert live_exports() == before


@pytest.mark.parametrize(("mc_type", "torch_name", "bits_view"), [
    (mc.bf16, "bfloat16", "int16"), (mc.e4m3, "float8_e4m3fn", "uint8"), (mc.f16, "float16", "int16"),
])
def test_torch_low_precision_round_trips(context, stream, pool, kernels, rng, mc_type, torch_name, bits_view) -> None:
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, torch_name)
    host = rng.standard_normal(513).astype(np.float32).astype(mc_type)
    t = torch.from_numpy(host.view(np.dtype(bits_view))).cuda().view(tdtype)
    torch.cuda.synchronize()
    try:
        buf = mc.from_dlpack(t, context, stream)
    except (RuntimeError, BufferError) as exc:  # raised by torch's own __dlpack__, never by mircuda
        if mc_type is not mc.e4m3:
            raise
        pytest.xfail(f"this torch ({torch.__version__}) does not export float8 through DLPack: {exc}")
    assert buf.scalar_type is mc_type and buf.handle == t.data_ptr()
    np.testing.assert_array_equal(stream.download(buf).view(np.uint8), host.view(np.uint8))
    own = stream.upload(pool, host)
    back = torch.from_dlpack(own)
    assert back.dtype == tdtype
    np.testing.assert_array_equal(back.view(getattr(torch, bits_view)).cpu().numpy(), host.view(np.dtype(bits_view)))
    nbytes = host.nbytes  # a CUDA C kernel copies the bytes of the borrowed tensor
    out = pool.allocate(mc.u8, stream, nbytes)
    raw = mc.from_dlpack(t.view(torch.uint8), context, stream)
    kernels["copy"].launch(stream, grid(nbytes), out, raw, nbytes)
    np.testing.assert_array_equal(stream.download(out), host.view(np.uint8))


def test_torch_non_contiguous_view_keeps_its_strides(context, stream, kernels) -> None:
    torch = pytest.importorskip("torch")
    base = torch.arange(32, dtype=torch.float32, device="cuda").reshape(4, 8)
    t = base[:, 1::2]  # shape (4, 4), element strides (8, 2), storage offset 1
    torch.cuda.synchronize()
    with pytest.raises(mc.ContractError, match="C-contiguous"):
        mc.from_dlpack(t, context, stream)
    view = mc.as_array_view(t, context, stream)
    assert view.shape == (4, 4) and view.strides == (8, 2) and view.data == t.data_ptr()
    span = len(view.buffer)
    assert span == 1 + 3 * 8 + 3 * 2
    kernels["affine"].launch(stream, grid(span), view.buffer, span, 10.0, 0.0)  # every element of the span
    back = torch.from_dlpack(view)
    assert back.shape == (4, 4) and back.stride() == (8, 2) and back.data_ptr() == t.data_ptr()
    want = np.arange(32, dtype=np.float32).reshape(4, 8)[:, 1::2] * 10
    np.testing.assert_array_equal(back.cpu().numpy(), want)
    np.testing.assert_array_equal(t.cpu().numpy(), want)


def test_host_tensors_and_non_producers_are_refused(context, stream) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(mc.ContractError, match="CUDA device"):
        mc.from_dlpack(torch.zeros(4), context, stream)  # a host tensor
    with pytest.raises(mc.ContractError, match="'obj'"):
        mc.from_dlpack(object(), context, stream)


def test_adopted_torch_stream_orders_against_torch_work(context, kernels) -> None:
    torch = pytest.importorskip("torch")
    n = 1 << 20
    s = torch.cuda.Stream()
    adopted = context.adopt_stream(s)
    assert not adopted.owned and adopted.handle == s.cuda_stream
    assert adopted.__cuda_stream__() == (0, s.cuda_stream)
    with torch.cuda.stream(s):
        t = torch.zeros(n, dtype=torch.float32, device="cuda")
        torch.cuda._sleep(SPIN_CYCLES)
        t.add_(1.0)
        buf = mc.from_dlpack(t, context, adopted)  # same stream: no wait needed, stream order suffices
        kernels["affine"].launch(adopted, grid(n), buf, n, 2.0, 0.0)  # (0 + 1) * 2
        t.add_(3.0)  # torch work after the mircuda launch, on the same stream
    s.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), np.full(n, 5.0, np.float32))
    adopted.close()  # ends mircuda's use only: torch's stream lives on
    with torch.cuda.stream(s):
        t.add_(1.0)
    s.synchronize()
    assert t[0].item() == 6.0
    with pytest.raises(mc.ContractError, match="legacy default|NULL stream"):
        context.adopt_stream(torch.cuda.default_stream())


# -- CuPy -----------------------------------------------------------------------------------------
def test_cupy_round_trips_through_dlpack_and_the_cuda_array_interface(context, stream, pool, kernels, rng) -> None:
    cp = pytest.importorskip("cupy")
    host = rng.standard_normal((5, 6)).astype(np.float32)
    a = cp.asarray(host)
    cp.cuda.get_current_stream().synchronize()
    via_dlpack = mc.from_dlpack(a, context, stream)
    via_cai = mc.from_cuda_array_interface(a, context, stream)
    assert via_dlpack.handle == via_cai.handle == a.data.ptr and len(via_dlpack) == 30
    kernels["affine"].launch(stream, grid(30), via_dlpack, 30, -1.0, 0.5)
    back = cp.from_dlpack(via_cai)
    assert back.data.ptr == a.data.ptr
    np.testing.assert_array_equal(cp.asnumpy(back).reshape(5, 6), host * -1 + 0.5)
    strided = a[:, ::3]  # element strides (6, 3)
    view = mc.as_array_view(strided, context, stream)
    assert view.shape == (5, 2) and view.strides == (6, 3)
    with pytest.raises(mc.ContractError, match="C-contiguous"):
        mc.from_cuda_array_interface(strided, context, stream)
    round_trip = cp.from_dlpack(view)
    assert round_trip.strides == strided.strides
    np.testing.assert_array_equal(cp.asnumpy(round_trip), cp.asnumpy(strided))
    own = stream.upload(pool, np.arange(10, dtype=np.int32))
    np.testing.assert_array_equal(cp.asnumpy(cp.from_dlpack(own)), np.arange(10, dtype=np.int32))


def test_cupy_stream_is_adopted_and_cai_stream_is_followed(context, pool, kernels) -> None:
    cp = pytest.importorskip("cupy")
    n = 1 << 20
    s = cp.cuda.Stream(non_blocking=True)
    adopted = context.adopt_stream(s)
    assert adopted.handle == s.ptr and not adopted.owned
    buf = pool.allocate_zeroed(mc.f32, adopted, n)
    kernels["spin"].launch(adopted, grid(n), buf, n, 3.0, SPIN_CYCLES)
    other = context.create_stream()
    try:
        with s:
            a = cp.from_dlpack(buf)  # CuPy's current stream is `s`: the buffer's own stream
            b = a * 2
            # CuPy writes its current stream (`s`) into the CAI v3 stream field: `other` waits on it
            imported = mc.from_cuda_array_interface(b, context, other)
        np.testing.assert_array_equal(other.download(imported), np.full(n, 6.0, np.float32))
    finally:
        other.synchronize()
        other.close()
        s.synchronize()


# -- JAX ------------------------------------------------------------------------------------------
def _jax_on_the_gpu():  # type: ignore[no-untyped-def]
    # JAX would otherwise reserve 75 % of the device at its first use, starving the rest of the suite.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError as exc:
        pytest.skip(f"jax {jax.__version__} has no GPU backend here: {exc}")
    return jax


def test_jax_imports_a_mircuda_buffer_after_its_producer_finishes(context, stream, pool, kernels) -> None:
    jax = _jax_on_the_gpu()
    n = 1 << 20
    buf = pool.allocate_zeroed(mc.f32, stream, n)
    kernels["spin"].launch(stream, grid(n), buf, n, 9.0, SPIN_CYCLES)
    x = jax.dlpack.from_dlpack(buf)  # JAX passes its stream: that stream waits on `stream` on the device
    assert x.shape == (n,) and str(x.dtype) == "float32"
    assert float(x.sum()) == 9.0 * n


def test_jax_arrays_are_borrowed_read_only_and_keep_their_values(context, stream, pool, kernels, rng) -> None:
    jax = _jax_on_the_gpu()
    import jax.numpy as jnp

    host = rng.standard_normal(4096).astype(ml_dtypes.bfloat16)
    a = jnp.asarray(host) * 2  # computed on JAX's stream: mircuda's `stream` must wait for it
    borrowed = mc.from_dlpack(a, context, stream, readonly=True)
    assert borrowed.scalar_type is mc.bf16 and len(borrowed) == host.size
    expected = (host.astype(np.float32) * 2).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(stream.download(borrowed).view(np.uint16), expected.view(np.uint16))
    f = jnp.arange(1000, dtype=jnp.float32) + 1  # an f32 array through a CUDA C kernel, into our own buffer
    own = pool.allocate(mc.f32, stream, 1000)
    stream.copy_device_range(mc.from_dlpack(f, context, stream, readonly=True), 0, own, 0, 1000)
    kernels["affine"].launch(stream, grid(1000), own, 1000, 3.0, -1.0)
    np.testing.assert_array_equal(stream.download(own), (np.arange(1000, dtype=np.float32) + 1) * 3 - 1)
    back = jax.dlpack.from_dlpack(own)
    np.testing.assert_array_equal(np.asarray(back), (np.arange(1000, dtype=np.float32) + 1) * 3 - 1)


# -- Numba ----------------------------------------------------------------------------------------
def test_numba_strided_array_becomes_a_view(context, stream) -> None:
    pytest.importorskip("numba")
    from numba import cuda

    d = cuda.to_device(np.arange(20, dtype=np.float32))
    cuda.synchronize()
    view = mc.as_array_view(d[2::3], context, stream)
    assert view.shape == (6,) and view.strides == (3,)
    np.testing.assert_array_equal(stream.download(view.buffer)[::3], np.arange(20, dtype=np.float32)[2::3])


def test_staged_transfers_are_refused_inside_a_capture(context, stream, pool) -> None:
    buf = stream.upload(pool, np.ones(8, np.float32))

    def body(res: mc.DeviceBuffer) -> None:
        with pytest.raises(mc.ContractError, match="not capturing"):
            stream.upload(pool, np.ones(8, np.float32))
        with pytest.raises(mc.ContractError, match="not capturing"):
            stream.download(res)
        stream.memset(res, 0)

    graph = stream.capture(buf, body)
    graph.launch(stream)
    np.testing.assert_array_equal(stream.download(buf), np.zeros(8, np.float32))
    graph.close()


def test_read_only_tensors_are_borrowed_only_when_asked_and_keep_their_flag(context, stream, pool) -> None:
    from mircuda.memory._dlpack import FLAG_READ_ONLY, make_capsule, read_capsule

    own = stream.upload(pool, np.arange(8, dtype=np.float32))

    def capsule() -> object:
        return make_capsule(own, own.handle, (2, context.device.ordinal), own._info, (8,), None, versioned=True,
                            readonly=True)

    before = live_exports()
    with pytest.raises(mc.ContractError, match="readonly=True"):
        mc.from_dlpack(capsule(), context, stream)
    gc.collect()
    assert live_exports() == before  # the refused capsule was released
    borrowed = mc.from_dlpack(capsule(), context, stream, readonly=True)
    assert borrowed.readonly and borrowed.handle == own.handle
    np.testing.assert_array_equal(stream.download(borrowed), np.arange(8, dtype=np.float32))
    parsed, consumed = read_capsule(borrowed.__dlpack__(stream=-1, max_version=(1, 1)))
    assert parsed.flags & FLAG_READ_ONLY
    consumed.release()
    with pytest.raises(BufferError, match="read-only"):
        borrowed.__dlpack__(stream=-1, max_version=None)
    borrowed.free(stream)
    del borrowed
    gc.collect()
    assert live_exports() == before
