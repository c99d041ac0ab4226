"""Numba's kernel ABI as mircuda packs it, byte by byte, and the contract checked against a Numba
signature -- without a device.

The layout under test is numba-cuda 0.30.4's (numba/cuda/datamodel/cuda_models.py ``ArrayModel`` and
dispatcher.py ``_Kernel._prepare_args``): an array is meminfo, parent, nitems, itemsize, data,
shape[ndim], strides[ndim] (bytes), each 8 bytes; scalars are C values, bool one byte, float16 and
bfloat16 their 16-bit patterns.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import mircuda as mc
from test_packing_and_config import ctx, fake_buffer  # noqa: F401  (the same fakes)

import mircuda.numba_ext as mn  # numba is required: a broken numba_ext must fail, not skip
from numba.cuda import types as nt

from mircuda.numba_ext import _abi


def array_values(nitems: int, itemsize: int, data: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> bytes:
    return struct.pack(f"<5q{2 * len(shape)}q", 0, 0, nitems, itemsize, data, *shape, *strides)


SIG = (nt.float32[:], nt.Array(nt.float64, 2, "C"), nt.float32, nt.boolean, nt.float16, nt.bfloat16, nt.int64)
K = mc.cuda_export("k", out=mc.Out[mc.DeviceBuffer[mc.f32]], m=mc.In[mc.DeviceBuffer[mc.f64]], s=mc.f32,
                   flag=bool, h=mc.f16, b=mc.bf16, n=mc.i64)


@pytest.fixture()
def packer(ctx) -> mc.ArgumentPacker:
    return mc.ArgumentPacker(K, ctx, abi=_abi.register_signature(SIG))


def test_arrays_and_scalars_pack_in_numbas_layout(ctx, packer) -> None:
    out = fake_buffer(ctx, mc.f32, 10, 0x7F00_0000_1000)
    m = fake_buffer(ctx, mc.f64, 12, 0x7F00_0000_2000)
    got = packer.pack(out, mn.ArrayView(m, (3, 4)), 2.5, True, 1.5, -2.0, -7)
    want = (array_values(10, 4, 0x7F00_0000_1000, (10,), (4,))
            + array_values(12, 8, 0x7F00_0000_2000, (3, 4), (32, 8))
            + struct.pack("<f?xHHxxxxxxq", 2.5, True, 0x3E00, 0xC000, -7))
    assert got == want
    assert [s.label for s in packer.block.slots][:7] == [
        "out.meminfo", "out.parent", "out.nitems", "out.itemsize", "out.data", "out.shape[0]", "out.strides[0]"]


def test_a_strided_view_passes_its_offset_shape_and_byte_strides(ctx) -> None:
    sig = (nt.Array(nt.float32, 2, "A"),)
    packer = mc.ArgumentPacker(mc.cuda_export("k", a=mc.DeviceBuffer[mc.f32]), ctx, abi=_abi.register_signature(sig))
    buf = fake_buffer(ctx, mc.f32, 100, 0x1000)
    view = mn.ArrayView(buf, (3, 4), strides=(10, 2), offset=5)  # every other column of rows 10 apart
    assert packer.pack(view) == array_values(12, 4, 0x1000 + 5 * 4, (3, 4), (40, 8))


def test_a_view_then_a_buffer_restores_the_contiguous_stride(ctx) -> None:
    packer = mc.ArgumentPacker(mc.cuda_export("k", a=mc.DeviceBuffer[mc.f32]), ctx,
                               abi=_abi.register_signature((nt.float32[:],)))
    buf = fake_buffer(ctx, mc.f32, 16, 0x1000)
    assert packer.pack(mn.ArrayView(buf, (8,), strides=(2,))) == array_values(8, 4, 0x1000, (8,), (8,))
    assert packer.pack(buf) == array_values(16, 4, 0x1000, (16,), (4,))


def test_fp8_buffers_bind_to_uint8_parameters(ctx) -> None:
    sig = (nt.uint8[:], nt.uint8)
    contract = mc.cuda_export("k", q=mc.In[mc.DeviceBuffer[mc.e4m3]], zero=mc.e4m3)
    packer = mc.ArgumentPacker(contract, ctx, abi=_abi.register_signature(sig))
    assert packer.pack(fake_buffer(ctx, mc.e4m3, 3, 0x40), 1.0) == array_values(3, 1, 0x40, (3,), (1,)) + b"\x38"


def test_the_generic_numba_abi_treats_buffers_as_1d_arrays(ctx) -> None:
    packer = mc.ArgumentPacker(mc.cuda_export("k", a=mc.DeviceBuffer[mc.i32], n=mc.u32), ctx, abi="numba")
    want = array_values(5, 4, 0x80, (5,), (4,)) + struct.pack("<I", 9)
    assert packer.pack(fake_buffer(ctx, mc.i32, 5, 0x80), 9) == want


@pytest.mark.parametrize("contract, match", [
    (mc.cuda_export("k", out=mc.DeviceBuffer[mc.f32]), r"7 parameters"),
    (mc.cuda_export("k", out=mc.DeviceBuffer[mc.f64], m=mc.In[mc.DeviceBuffer[mc.f64]], s=mc.f32, flag=bool,
                    h=mc.f16, b=mc.bf16, n=mc.i64), r"DeviceBuffer\[f32\] \(the Numba parameter is array\(float32"),
    (mc.cuda_export("k", out=mc.DeviceBuffer[mc.f32], m=mc.In[mc.DeviceBuffer[mc.f64]], s=mc.f64, flag=bool,
                    h=mc.f16, b=mc.bf16, n=mc.i64), r"expected f32 \(the Numba parameter is float32\), received f64"),
    (mc.cuda_export("k", out=mc.f32, m=mc.In[mc.DeviceBuffer[mc.f64]], s=mc.f32, flag=bool,
                    h=mc.f16, b=mc.bf16, n=mc.i64), r"expected DeviceBuffer\[f32\]"),
    (mc.cuda_export("k", out=mc.DeviceBuffer[mc.f32], m=mc.In[mc.DeviceBuffer[mc.f64]], s=mc.DeviceBuffer[mc.f32],
                    flag=bool, h=mc.f16, b=mc.bf16, n=mc.i64), r"a scalar type binding to float32: f32"),
])
def test_a_contract_that_does_not_match_the_signature_is_refused(contract, match) -> None:
    with pytest.raises(mc.ContractError, match=match):
        _abi.check_contract(_abi.signature_specs(SIG), contract)


def test_a_read_only_numba_array_takes_an_in_buffer_only() -> None:
    specs = _abi.signature_specs((nt.Array(nt.float32, 1, "C", readonly=True),))
    _abi.check_contract(specs, mc.cuda_export("k", x=mc.In[mc.DeviceBuffer[mc.f32]]))
    with pytest.raises(mc.ContractError, match="read-only") as info:
        _abi.check_contract(specs, mc.cuda_export("k", x=mc.Out[mc.DeviceBuffer[mc.f32]]))
    assert info.value.argument == "x"


def test_bad_arguments_name_the_parameter_before_anything_is_written(ctx, packer) -> None:
    out = fake_buffer(ctx, mc.f32, 10, 0x1000)
    m = fake_buffer(ctx, mc.f64, 12, 0x2000)
    good = dict(out=out, m=mn.ArrayView(m, (3, 4)), s=1.0, flag=False, h=0.0, b=0.0, n=0)
    cases = [
        (dict(m=m), "m", "ArrayView"),                                         # 1-d buffer for a 2-d parameter
        (dict(m=mn.ArrayView(m, (12,))), "m", "1-d ArrayView"),                 # wrong rank
        (dict(m=mn.ArrayView(m, (3, 4), strides=(1, 3))), "m", "C-contiguous"),  # the parameter is C order
        (dict(out=fake_buffer(ctx, mc.f64, 4, 0x3000)), "out", "f64"),
        (dict(out=np.zeros(10, np.float32)), "out", "host arrays"),
        (dict(n=2**63), "n", "i64"),
    ]
    for change, argument, match in cases:
        with pytest.raises(mc.ContractError, match=match) as info:
            packer.pack(**{**good, **change})
        assert info.value.argument == argument
    args = dict(good)
    del args["m"]
    with pytest.raises(mc.ContractError, match="missing"):
        packer.pack(**args)


def test_a_freed_buffer_is_refused(ctx, packer) -> None:
    out = fake_buffer(ctx, mc.f32, 10, 0x1000)
    m = fake_buffer(ctx, mc.f64, 12, 0x2000)
    view = mn.ArrayView(m, (3, 4))
    m._freed = True  # what free(stream) leaves behind, without a driver
    with pytest.raises(mc.UseAfterFree):
        packer.pack(out, view, 1.0, False, 0.0, 0.0, 0)


def test_views_stay_inside_their_buffer(ctx) -> None:
    buf = fake_buffer(ctx, mc.f32, 12, 0x1000)
    assert mn.ArrayView(buf, (3, 4)).c_contiguous
    assert mn.ArrayView(buf, (3, 4), strides=(1, 3)).f_contiguous
    assert mn.ArrayView(buf, (2, 2), strides=(4, 1), offset=6).byte_strides == (16, 4)
    for kwargs in (dict(shape=(4, 4)), dict(shape=(3, 4), offset=1), dict(shape=(2, 2), strides=(20, 1)),
                   dict(shape=(3, -4)), dict(shape=(3, 4), strides=(4,)), dict(shape=())):
        with pytest.raises(mc.ContractError):
            mn.ArrayView(buf, **kwargs)


def test_a_view_exports_the_cuda_array_interface(ctx) -> None:
    class Stream:
        _handle = 0x55

    buf = fake_buffer(ctx, mc.f32, 12, 0x1000)
    buf._stream = Stream()
    cai = mn.ArrayView(buf, (2, 2), strides=(4, 1), offset=2).__cuda_array_interface__
    assert cai["shape"] == (2, 2) and cai["strides"] == (16, 4) and cai["data"] == (0x1008, False)
    assert cai["typestr"] == "<f4" and cai["stream"] == 0x55
