"""DLPack capsules and foreign streams without a device: encode, decode, deleters, refusals."""

from __future__ import annotations

import ctypes
import gc
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.memory import _dlpack
from mircuda.memory._dlpack import (FLAG_READ_ONLY, FLAG_SUBBYTE_PADDED, DLManagedTensor, DLManagedTensorVersioned,
                                    live_exports, make_capsule, read_capsule)
from mircuda.runtime._foreign import adopt_stream, foreign_stream_handle

_get_name = ctypes.pythonapi["PyCapsule_GetName"]
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_ptr = ctypes.pythonapi["PyCapsule_GetPointer"]
_get_ptr.restype = ctypes.c_void_p
_get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]


class FakeContext:
    """Stands in for a Context: closed, so the buffer finalizers do nothing; device ordinal 3."""

    _closed = True
    _handle = 1
    device = SimpleNamespace(ordinal=3)


def buffer(dtype: Any = mc.f32, count: int = 6, ptr: int = 0x7F00_0000_1000) -> mc.DeviceBuffer[Any]:
    return mc.DeviceBuffer._adopt(FakeContext(), None, dtype_info(dtype), count, ptr)  # type: ignore[arg-type]


def name(capsule: Any) -> bytes:
    return _get_name(capsule)


def versioned_struct(capsule: Any) -> DLManagedTensorVersioned:
    return DLManagedTensorVersioned.from_address(_get_ptr(capsule, b"dltensor_versioned"))


# -- export: what the capsule holds --------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "code", "bits"), [
    (mc.f32, 2, 32), (mc.f16, 2, 16), (mc.f64, 2, 64), (mc.i8, 0, 8), (mc.i64, 0, 64), (mc.u8, 1, 8),
    (mc.u32, 1, 32), (mc.bool_, 6, 8), (mc.bf16, 4, 16), (mc.e4m3, 10, 8), (mc.e2m1, 17, 4),
])
def test_versioned_capsule_encodes_device_dtype_shape_and_flags(dtype: Any, code: int, bits: int) -> None:
    buf = buffer(dtype)
    capsule = buf.__dlpack__(stream=-1, max_version=(1, 1))
    assert name(capsule) == b"dltensor_versioned"
    m = versioned_struct(capsule)
    assert (m.version.major, m.version.minor) == (1, 1)
    t = m.dl_tensor
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (code, bits, 1)
    assert (t.device.device_type, t.device.device_id) == (2, 3)  # kDLCUDA, the context's device
    assert t.data == 0x7F00_0000_1000 and t.byte_offset == 0
    assert t.ndim == 1 and t.shape[0] == 6 and t.strides[0] == 1  # explicit compact strides
    assert m.flags == (FLAG_SUBBYTE_PADDED if bits == 4 else 0)
    assert buf.__dlpack_device__() == (2, 3)


def test_legacy_capsule_when_the_consumer_predates_versioning() -> None:
    buf = buffer(mc.bf16)
    for max_version in (None, (0, 8)):
        capsule = buf.__dlpack__(stream=-1, max_version=max_version)
        assert name(capsule) == b"dltensor"
        t = DLManagedTensor.from_address(_get_ptr(capsule, b"dltensor")).dl_tensor
        assert (t.dtype.code, t.dtype.bits, t.shape[0]) == (4, 16, 6)


def test_legacy_capsule_refuses_what_it_cannot_flag() -> None:
    with pytest.raises(BufferError, match="e2m1"):
        buffer(mc.e2m1).__dlpack__(stream=-1, max_version=None)
    before = live_exports()
    with pytest.raises(BufferError, match="read-only"):
        make_capsule(object(), 0x1000, (2, 0), dtype_info(mc.f32), (4,), None, versioned=False, readonly=True)
    assert live_exports() == before  # nothing stays exported


def test_read_only_flag_round_trips() -> None:
    capsule = make_capsule(object(), 0x1000, (2, 0), dtype_info(mc.f32), (4,), None, versioned=True, readonly=True)
    assert versioned_struct(capsule).flags == FLAG_READ_ONLY
    parsed, consumed = read_capsule(capsule)
    assert parsed.readonly and parsed.version == (1, 1)
    consumed.release()


def test_array_view_exports_shape_strides_and_offset() -> None:
    buf = buffer(mc.f32, count=24)
    view = mc.ArrayView(buf, (3, 4), (8, 2), offset=1)  # a non-contiguous view
    capsule = view.__dlpack__(stream=-1, max_version=(1, 0))
    parsed, consumed = read_capsule(capsule)
    assert parsed.shape == (3, 4) and parsed.strides == (8, 2)
    assert parsed.data == buf.handle + 4  # element 1 of the buffer
    assert parsed.info.name == "f32" and parsed.device == (2, 3)
    consumed.release()


# -- export: refusals ---------------------------------------------------------------------------
def test_export_refuses_stream_zero_copy_and_another_device() -> None:
    buf = buffer()
    before = live_exports()
    with pytest.raises(mc.ContractError, match="'stream'.*forbids 0"):
        buf.__dlpack__(stream=0, max_version=(1, 0))
    with pytest.raises(mc.ContractError, match="'stream'"):
        buf.__dlpack__(stream="s", max_version=(1, 0))  # type: ignore[arg-type]
    with pytest.raises(BufferError, match="copy=True"):
        buf.__dlpack__(stream=-1, copy=True)
    with pytest.raises(BufferError, match=r"\(2, 0\)"):
        buf.__dlpack__(stream=-1, dl_device=(2, 0))
    with pytest.raises(BufferError):
        buf.__dlpack__(stream=-1, dl_device=(1, 0))  # the host
    with pytest.raises(mc.ContractError, match="max_version"):
        buf.__dlpack__(stream=-1, max_version=1)  # type: ignore[arg-type]
    assert live_exports() == before
    buf._freed = True
    with pytest.raises(mc.UseAfterFree):
        buf.__dlpack__(stream=-1)


# -- lifetimes: deleters run exactly once ---------------------------------------------------------
def test_unconsumed_capsule_releases_the_buffer_once() -> None:
    buf = buffer()
    before = live_exports()
    capsule = buf.__dlpack__(stream=-1, max_version=(1, 0))
    assert live_exports() == before + 1
    del capsule
    gc.collect()
    assert live_exports() == before


def test_consumed_capsule_is_released_by_the_consumer_not_the_capsule() -> None:
    buf = buffer()
    before = live_exports()
    capsule = buf.__dlpack__(stream=-1, max_version=(1, 0))
    _parsed, consumed = read_capsule(capsule)
    assert name(capsule) == b"used_dltensor_versioned"
    del capsule
    gc.collect()
    assert live_exports() == before + 1  # the consumer owns it now: the capsule did not release it
    consumed.release()
    assert live_exports() == before
    consumed.release()  # idempotent
    assert live_exports() == before


def test_export_keeps_the_buffer_alive_until_the_deleter() -> None:
    import weakref

    buf = buffer()
    ref = weakref.ref(buf)
    capsule = buf.__dlpack__(stream=-1, max_version=(1, 0))
    _, consumed = read_capsule(capsule)
    del buf, capsule
    gc.collect()
    assert ref() is not None
    del consumed
    gc.collect()
    assert ref() is None


def _foreign_capsule(calls: list[int], *, versioned: bool = True, code: int = 2, bits: int = 32,
                     lanes: int = 1, strides: tuple[int, int] | None = None, flags: int = 0,
                     device: tuple[int, int] = (2, 0)) -> tuple[Any, Any]:
    """A capsule as another producer makes it, with a deleter that counts its calls."""
    deleter = _dlpack._Deleter(lambda address: calls.append(address))
    shape = (ctypes.c_int64 * 2)(2, 3)
    stride_arr = None if strides is None else (ctypes.c_int64 * 2)(*strides)
    tensor = _dlpack.DLTensor(0x5000, _dlpack.DLDevice(*device), 2, _dlpack.DLDataType(code, bits, lanes),
                              ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                              None if stride_arr is None else ctypes.cast(stride_arr, ctypes.POINTER(ctypes.c_int64)), 8)
    deleter_address = ctypes.cast(deleter, ctypes.c_void_p).value
    if versioned:
        managed: Any = DLManagedTensorVersioned(_dlpack.DLPackVersion(1, 0), None, deleter_address, flags, tensor)
        cname = _dlpack._NAME_VERSIONED
    else:
        managed = DLManagedTensor(tensor, None, deleter_address)
        cname = _dlpack._NAME_LEGACY
    capsule = _dlpack._capsule_new(ctypes.addressof(managed), ctypes.addressof(cname), _dlpack._DESTRUCTOR_ADDRESS)
    return capsule, (deleter, shape, managed, stride_arr)


@pytest.mark.parametrize("versioned", [True, False])
def test_consumer_calls_a_foreign_deleter_exactly_once(versioned: bool) -> None:
    calls: list[int] = []
    capsule, keep = _foreign_capsule(calls, versioned=versioned)
    parsed, consumed = read_capsule(capsule)
    assert parsed.shape == (2, 3) and parsed.strides == (3, 1)  # NULL strides filled in C order
    assert parsed.data == 0x5000 + 8  # byte_offset added
    assert parsed.version == ((1, 0) if versioned else (0, 0))
    del capsule
    gc.collect()
    assert calls == []
    consumed.release()
    consumed.release()
    del consumed
    gc.collect()
    assert calls == [ctypes.addressof(keep[2])]


def test_dropped_foreign_capsule_calls_its_deleter_once() -> None:
    calls: list[int] = []
    capsule, keep = _foreign_capsule(calls)
    del capsule
    gc.collect()
    assert calls == [ctypes.addressof(keep[2])]


# -- import into a (stand-in) context --------------------------------------------------------------
@pytest.fixture()
def target(monkeypatch: pytest.MonkeyPatch) -> tuple[mc.Context, mc.Stream]:
    """A Context and Stream made without a driver (the import path only compares them)."""
    from mircuda import _cuda

    monkeypatch.setattr(_cuda, "make_current", lambda handle, force=False: None)
    context = object.__new__(mc.Context)
    context._closed, context._handle, context._device = False, 1, SimpleNamespace(ordinal=0)
    stream = object.__new__(mc.Stream)
    stream._context, stream._handle, stream._cu, stream._owner = context, 0x99, None, None
    return context, stream


def test_from_dlpack_borrows_and_releases_the_producer_once(target: Any) -> None:
    context, stream = target
    calls: list[int] = []
    capsule, keep = _foreign_capsule(calls)
    buf = mc.from_dlpack(capsule, context, stream)
    assert isinstance(buf, mc.BorrowedDeviceBuffer) and not buf.readonly
    assert (buf.handle, len(buf), buf.scalar_type, buf.stream) == (0x5008, 6, mc.f32, stream)
    assert calls == []
    buf.free(stream)  # ends the borrow: the producer's deleter runs (once)
    gc.collect()
    assert calls == [ctypes.addressof(keep[2])]
    with pytest.raises(mc.UseAfterFree):
        buf.handle  # noqa: B018


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(strides=(1, 2)), "C-contiguous"), (dict(flags=FLAG_READ_ONLY), "readonly=True"),
    (dict(device=(2, 1)), "CUDA device 0"), (dict(device=(1, 0)), "CUDA device 0"),
    (dict(strides=(3, -1)), "non-negative strides"),
])
def test_refused_imports_release_the_producer_at_once(target: Any, kwargs: dict[str, Any], match: str) -> None:
    context, stream = target
    calls: list[int] = []
    capsule, keep = _foreign_capsule(calls, **kwargs)
    with pytest.raises(mc.ContractError, match=match) as info:
        mc.from_dlpack(capsule, context, stream)
    assert calls == [ctypes.addressof(keep[2])]  # even while the traceback is alive
    del info


def test_strided_import_is_a_view_of_the_span(target: Any) -> None:
    context, stream = target
    calls: list[int] = []
    capsule, _keep = _foreign_capsule(calls, strides=(1, 2))  # shape (2, 3), Fortran order
    view = mc.as_array_view(capsule, context, stream)
    assert (view.shape, view.strides, view.data, len(view.buffer)) == ((2, 3), (1, 2), 0x5008, 6)
    assert view.f_contiguous and not view.c_contiguous
    other_calls: list[int] = []
    other, other_keep = _foreign_capsule(other_calls)
    with pytest.raises(mc.ContractError, match="'dtype'"):
        mc.as_array_view(other, context, stream, dtype=mc.f32)
    del other
    gc.collect()
    assert other_calls == [ctypes.addressof(other_keep[2])]  # refused before it was consumed: the capsule released it
    del view
    gc.collect()
    assert len(calls) == 1


def test_import_checks_its_context_and_stream(target: Any) -> None:
    context, stream = target
    with pytest.raises(mc.ContractError, match="'context'"):
        mc.from_dlpack(buffer(), object(), stream)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="'stream'"):
        mc.from_dlpack(buffer(), context, object())  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match="__cuda_array_interface__"):
        mc.from_cuda_array_interface(np.zeros(3), context, stream)


# -- import: refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize(("code", "bits", "lanes", "match"), [
    (5, 64, 1, "kDLComplex with 64 bits"), (12, 8, 1, "kDLFloat8_e5m2"), (2, 32, 4, "lanes 4"),
    (2, 24, 1, "kDLFloat with 24 bits"),
])
def test_unsupported_element_types_are_refused_by_name(code: int, bits: int, lanes: int, match: str) -> None:
    calls: list[int] = []
    capsule, _keep = _foreign_capsule(calls, code=code, bits=bits, lanes=lanes)
    with pytest.raises(mc.ContractError, match=match):
        read_capsule(capsule)
    assert name(capsule) == b"dltensor_versioned"  # not consumed: the capsule still owns it
    del capsule
    gc.collect()
    assert len(calls) == 1


def test_reading_a_used_capsule_or_another_object_is_refused() -> None:
    capsule = buffer().__dlpack__(stream=-1, max_version=(1, 0))
    _, consumed = read_capsule(capsule)
    with pytest.raises(mc.ContractError, match="unconsumed DLPack capsule"):
        read_capsule(capsule)
    with pytest.raises(mc.ContractError, match="unconsumed DLPack capsule"):
        read_capsule(np.zeros(3))
    consumed.release()


def test_dtype_codes_decode_to_mircuda_types() -> None:
    assert _dlpack.dtype_from_dl(4, 16, 1).name == "bf16"
    assert _dlpack.dtype_from_dl(10, 8, 1).name == "e4m3"
    assert _dlpack.dtype_from_dl(17, 4, 1).name == "e2m1"
    assert _dlpack.dtype_from_dl(6, 8, 1).name == "bool"
    for info in mc.dtypes.SUPPORTED.values():
        assert _dlpack.dtype_from_dl(*_dlpack.dl_dtype(info), 1) == info


# -- streams ------------------------------------------------------------------------------------
def test_foreign_stream_handles() -> None:
    class CoreStream:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 0xABC)

    assert foreign_stream_handle(0x123) == 0x123
    assert foreign_stream_handle(CoreStream()) == 0xABC
    assert foreign_stream_handle(SimpleNamespace(cuda_stream=0x456)) == 0x456  # torch.cuda.Stream
    assert foreign_stream_handle(SimpleNamespace(ptr=0x789)) == 0x789  # cupy.cuda.Stream
    for bad in (True, "s", None, -5, 2**64, SimpleNamespace(__cuda_stream__=lambda: "x")):
        with pytest.raises(mc.ContractError, match="'stream'"):
            foreign_stream_handle(bad)


@pytest.mark.parametrize(("handle", "what"), [(0, "NULL stream"), (1, "legacy default"), (2, "per-thread default")])
def test_adopting_a_default_stream_is_refused_by_name(handle: int, what: str) -> None:
    with pytest.raises(mc.ContractError, match=what):
        adopt_stream(FakeContext(), handle)  # type: ignore[arg-type]
    with pytest.raises(mc.ContractError, match=what):
        adopt_stream(FakeContext(), SimpleNamespace(cuda_stream=handle))  # type: ignore[arg-type]


def test_stream_protocol() -> None:
    stream = object.__new__(mc.Stream)
    stream._handle = 0x1234
    stream._owner = None
    assert stream.__cuda_stream__() == (0, 0x1234)
    assert foreign_stream_handle(stream) == 0x1234
    assert stream.owned
    stream._handle = 0
    with pytest.raises(mc.ClosedResourceError):
        stream.__cuda_stream__()


def test_core_interop_imports_no_numba() -> None:
    import subprocess
    import sys

    code = ("import sys, mircuda as mc; mc.from_dlpack; mc.from_cuda_array_interface; mc.as_array_view; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'numba_cuda')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_numba_ext_reuses_the_core() -> None:
    pytest.importorskip("numba")
    from mircuda import numba_ext

    assert numba_ext.ArrayView is mc.ArrayView
    assert numba_ext.BorrowedDeviceBuffer is mc.BorrowedDeviceBuffer


# -- notebook displays ----------------------------------------------------------------------------
def test_rich_reprs_are_tables_of_every_field() -> None:
    import dataclasses

    from mircuda._repr import Description

    info = mc.DeviceInfo(name="NVIDIA H200 <test>", ordinal=0, compute_capability=(9, 0), multiprocessor_count=132,
                         integrated=False, memory_pools_supported=True, total_memory_bytes=150_000_000_000,
                         l2_cache_bytes=62_914_560, max_shared_memory_per_block_bytes=49152,
                         max_shared_memory_per_block_optin_bytes=232448, warp_size=32, max_threads_per_block=1024,
                         max_block_dims=(1024, 1024, 64), max_grid_dims=(2147483647, 65535, 65535),
                         clock_rate_khz=1980000, memory_bus_width_bits=6144)
    html = info._repr_html_()
    for f in dataclasses.fields(info):
        assert f"<td style='text-align:left'>{f.name}</td>" in html
    assert "NVIDIA H200 &lt;test&gt;" in html  # escaped
    assert "sm_90" in html and "139.7 GiB" in html and "60.0 MiB" in html
    stats = mc.CompileCacheStats(memory_hits=3, persistent_hits=1, compilations=2, persistent_failures=0)
    assert "<b>CompileCacheStats</b>" in stats._repr_html_() and "<code>3</code>" in stats._repr_html_()
    attrs = mc.FunctionAttributes(registers=40, static_shared_bytes=2048, local_bytes=0, max_threads_per_block=1024,
                                  binary_version=90)
    assert "registers" in attrs._repr_html_() and "2,048 (2.0 KiB)" in attrs._repr_html_()
    text = Description("DenseVectorPlan bf16 -> bf16, N=8 on sm_90: kernel k (NVRTC)")
    assert text == "DenseVectorPlan bf16 -> bf16, N=8 on sm_90: kernel k (NVRTC)" and isinstance(text, str)
    assert text._repr_markdown_() == "**DenseVectorPlan bf16 -> bf16, N=8 on sm_90**: kernel k (NVRTC)"
