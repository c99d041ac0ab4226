"""Element types and kernel contracts: declared once, checked without a device."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info


def test_dtypes_are_numpy_scalar_types() -> None:
    assert mc.f32 is np.float32 and mc.bf16 is ml_dtypes.bfloat16 and mc.e4m3 is ml_dtypes.float8_e4m3fn
    assert dtype_info(mc.bf16).c_name == "__nv_bfloat16" and dtype_info(mc.bf16).itemsize == 2
    assert dtype_info("float32") is dtype_info(mc.f32) is dtype_info(np.dtype(np.float32))
    assert dtype_info(bool).name == "bool"
    assert dtype_info(mc.e2m1).bits == 4 and dtype_info(mc.e2m1).itemsize == 1
    with pytest.raises(mc.ContractError, match="dtype"):
        dtype_info(np.complex64)


def test_cuda_export_declares_parameters_in_order() -> None:
    K = mc.cuda_export("k", out=mc.Out[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.bf16]],
                       y=mc.DeviceBuffer[mc.u8], scale=mc.f32, n=mc.i64, flag=bool)
    assert K.symbol == "k" and K.names == ("out", "x", "y", "scale", "n", "flag")
    kinds = [(p.kind, p.info.name, p.access) for p in K.params]
    assert kinds == [("buffer", "f32", "out"), ("buffer", "bf16", "in"), ("buffer", "u8", "inout"),
                     ("scalar", "f32", None), ("scalar", "i64", None), ("scalar", "bool", None)]
    assert mc.cuda_export("k", out=mc.Out[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.bf16]],
                          y=mc.DeviceBuffer[mc.u8], scale=mc.f32, n=mc.i64, flag=bool) == K
    assert "out DeviceBuffer[f32]" in repr(K)


@pytest.mark.parametrize("params, match", [
    ({"x": float}, "'x'"),
    ({"x": "float"}, "'x'"),
    ({"x": mc.DeviceBuffer}, "'x'"),
    ({"x": mc.DeviceBuffer["f32"]}, r"argument 'x'.*DeviceBuffer\[mc.f32\]"),  # a name, as for scalars
    ({"x": mc.DeviceBuffer["float32"]}, r"argument 'x'.*not its name: DeviceBuffer\[mc.f32\]$"),  # numpy's name
    ({"x": mc.DeviceBuffer["bool"]}, r"argument 'x'.*not its name: DeviceBuffer\[mc.bool_\]$"),  # the exported name
    ({"x": mc.DeviceBuffer["f33"]}, r"argument 'x'.*'f33' names no supported type: one of mc.bool_, mc.i8,"),
    ({"x": mc.DeviceBuffer[42]}, r"argument 'x': expected DeviceBuffer\[T\] with T one of"),
    ({"y": mc.DeviceBuffer[np.complex64]}, r"argument 'y': expected DeviceBuffer\[T\] with T one of"),
    ({"stream": mc.f32}, "stream"),
    ({"_hidden": mc.f32}, "_hidden"),
])
def test_cuda_export_refuses_what_it_cannot_pack(params, match) -> None:
    with pytest.raises(mc.ContractError, match=match):
        mc.cuda_export("k", **params)


@pytest.mark.parametrize("name", ["", " ", "f 32", "1"])
def test_a_device_buffer_subscript_that_is_no_name_is_refused_where_it_is_written(name) -> None:
    # typing would fail on these with IndexError or SyntaxError from inside its forward references
    with pytest.raises(mc.ContractError, match=r"argument 'DeviceBuffer\[T\]': expected an element type object "
                                               r"such as mc.f32, received '.*'\. a parameter type is a type object"):
        mc.DeviceBuffer[name]


def test_access_markers_take_only_buffers() -> None:
    with pytest.raises(mc.ContractError):
        mc.Out[mc.f32]
    with pytest.raises(mc.ContractError, match=r"argument 'In\[\.\.\.\]'.*not its name: DeviceBuffer\[mc.bf16\]"):
        mc.In[mc.DeviceBuffer["bf16"]]
    with pytest.raises(mc.ContractError, match="symbol"):
        mc.cuda_export("")
