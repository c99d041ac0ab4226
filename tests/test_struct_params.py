"""By-value vector and struct parameters: layouts against ctypes and the CUDA compiler itself (NVRTC
static_asserts on offsetof/sizeof/alignof), packing and refusals; no GPU needed."""

from __future__ import annotations

import ctypes
import re
import struct as pystruct

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.launch import ArgumentPacker, StructType
from mircuda.launch._struct import VECTOR_TYPES

Params = mc.struct("Params", [("n", mc.u32), ("scale", mc.f32), ("ptr", mc.DeviceBuffer[mc.f32])])
Mixed = mc.struct("Mixed", [("flag", mc.bool_), ("d", mc.f64), ("h", mc.f16), ("c", (mc.i8, 3)), ("q", mc.i64),
                            ("b", mc.bf16)])
Nested = mc.struct("Nested", [("tag", mc.u8), ("v", mc.float4), ("pair", mc.int2), ("k", mc.u16),
                              ("h2", mc.half2), ("m", Mixed)])


class CParams(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("scale", ctypes.c_float), ("ptr", ctypes.c_void_p)]


class CMixed(ctypes.Structure):
    _fields_ = [("flag", ctypes.c_bool), ("d", ctypes.c_double), ("h", ctypes.c_uint16), ("c", ctypes.c_int8 * 3),
                ("q", ctypes.c_int64), ("b", ctypes.c_uint16)]


@pytest.mark.parametrize("ours, theirs", [(Params, CParams), (Mixed, CMixed)])
def test_natural_layouts_equal_ctypes(ours: StructType, theirs: type) -> None:
    assert ours.size == ctypes.sizeof(theirs) and ours.alignment == ctypes.alignment(theirs)
    for f in ours.fields:
        assert f.offset == getattr(theirs, f.name).offset, f.name
    assert ours.dtype.itemsize == ours.size


def layout_queries(t: StructType, c_name: str) -> list[tuple[str, str, int]]:
    """(label, a C expression, mircuda's value) for the size, alignment and each field offset of ``t``."""
    out = [(f"sizeof {c_name}", f"sizeof({c_name})", t.size), (f"alignof {c_name}", f"alignof({c_name})", t.alignment)]
    var = f"v_{len(c_name)}_{abs(hash(c_name))}"
    out += [(f"{c_name}.{f.name}", f"[] {{ {c_name} {var}; return (char*)&{var}.{f.name} - (char*)&{var}; }}()",
             f.offset) for f in t.fields]
    return out


def cuda_values(declarations: list[str], expressions: list[str]) -> list[int]:
    """The values the CUDA compiler gives ``expressions``: a kernel stores each into ``o[i]``, NVRTC
    folds them to constants, and they are read back from the PTX (``mov.u32 %r, V`` then
    ``st.global.u32 [%rd+4i], %r``)."""
    body = " ".join(f"o[{i}] = (unsigned)({e});" for i, e in enumerate(expressions))
    source = "\n".join([*declarations, f'extern "C" __global__ void probe(unsigned* o) {{ {body} }}'])
    ptx = mc.compile_program(mc.cuda_kernel(source, "layouts.cu"), "compute_90",
                             mc.CompileOptions(output="ptx")).image.decode()
    registers = dict(re.findall(r"mov\.u32\s+(%r\d+), (\d+);", ptx))
    stores = re.findall(r"st\.global\.u32\s+\[%rd\d+(?:\+(\d+))?\], (%r\d+);", ptx)
    values = {int(offset or 0) // 4: int(registers[reg]) for offset, reg in stores}
    assert sorted(values) == list(range(len(expressions))), ptx
    return [values[i] for i in range(len(expressions))]


HEADERS = ["#include <cuda_fp16.h>", "#include <cuda_bf16.h>", "#include <cuda/std/cstdint>",
           "using cuda::std::int8_t; using cuda::std::uint8_t; using cuda::std::int16_t; using cuda::std::uint16_t;",
           "using cuda::std::int32_t; using cuda::std::uint32_t; using cuda::std::int64_t; using cuda::std::uint64_t;"]


def test_every_layout_is_the_cuda_compilers() -> None:
    queries = [q for t in VECTOR_TYPES.values() for q in layout_queries(t, t.c_name)]
    # User structs: the C declarations mircuda writes for them (vector fields are CUDA's own types).
    for t in (Params, Mixed, Nested):
        queries += layout_queries(t, t.name)
    declarations = HEADERS + [Mixed.c_declaration(), Params.c_declaration(), Nested.c_declaration()]
    got = cuda_values(declarations, [e for _, e, _ in queries])
    assert {label: v for (label, _, _), v in zip(queries, got)} == {label: v for label, _, v in queries}


def test_the_layout_probe_can_fail() -> None:
    """The probe reads what the compiler decided: a naturally aligned layout of ``{char; float4}`` is not it."""
    (offset,) = cuda_values(["struct S { char c; float4 v; };"], ["[] { S s; return (char*)&s.v - (char*)&s; }()"])
    natural = mc.struct("S", [("c", mc.i8), ("v", mc.struct("f4", [(n, mc.f32) for n in "xyzw"]))])
    assert offset == 16 == mc.struct("S", [("c", mc.i8), ("v", mc.float4)]).fields[1].offset
    assert natural.fields[1].offset == 4 != offset


def test_the_vector_types_are_cudas() -> None:
    assert (mc.float4.size, mc.float4.alignment) == (16, 16)
    assert (mc.float3.size, mc.float3.alignment) == (12, 4)
    assert (mc.float2.alignment, mc.int4.alignment, mc.double2.alignment, mc.char4.alignment) == (8, 16, 16, 4)
    assert (mc.half2.c_name, mc.half2.size, mc.half2.alignment) == ("__half2", 4, 4)
    assert (mc.bfloat162.c_name, mc.bfloat162.size, mc.bfloat162.alignment) == ("__nv_bfloat162", 4, 4)
    assert [f.name for f in mc.int4.fields] == ["x", "y", "z", "w"]


def test_the_parameter_block_aligns_each_struct() -> None:
    contract = mc.cuda_export("k", tag=mc.u8, v=mc.float4, h=mc.half2, n=mc.u32)
    packer = ArgumentPacker(contract, context=None)
    assert [(s.offset, s.size) for s in packer.block.slots] == [(0, 1), (16, 16), (32, 4), (36, 4)]
    packed = packer.pack(7, (1.0, -2.5, 3.0, 0.1), [np.float16(1.5), -2], 9)
    assert packed[0] == 7 and packed[1:16] == bytes(15)
    assert packed[16:32] == np.array([1.0, -2.5, 3.0, 0.1], np.float32).tobytes()
    assert packed[32:36] == np.array([1.5, -2], np.float16).tobytes()
    assert packed[36:40] == pystruct.pack("<I", 9)


def test_struct_values_pack_as_ctypes_and_numpy_lay_them_out() -> None:
    contract = mc.cuda_export("k", m=Mixed)
    packer = ArgumentPacker(contract, context=None)
    value = {"flag": True, "d": 1.0 / 3.0, "h": 0.1, "c": [-1, 2, -128], "q": -(2**62), "b": -1.5}
    packed = packer.pack(value)
    ref = CMixed(True, 1.0 / 3.0, int(np.float16(0.1).view(np.uint16)), (ctypes.c_int8 * 3)(-1, 2, -128), -(2**62),
                 int(np.array(-1.5, ml_dtypes.bfloat16).view(np.uint16)))
    assert packed == bytes(ref)
    record = np.zeros((), Mixed.dtype)
    for k, v in value.items():
        record[k] = v
    assert packer.pack(record) == packed == packer.pack(record[()])       # a 0-d array or its np.void
    assert packer.pack(tuple(value.values())) == packed                    # field order
    assert packer.pack(m=value) == packed


def test_nested_structs_pack_by_their_offsets() -> None:
    packer = ArgumentPacker(mc.cuda_export("k", n=Nested), context=None)
    mixed = {"flag": False, "d": 2.0, "h": 1.0, "c": (1, 2, 3), "q": 5, "b": 2.0}
    packed = packer.pack({"tag": 1, "v": np.arange(4, dtype=np.float32), "pair": (-1, 1), "k": 65535,
                          "h2": (0.5, 0.25), "m": mixed})
    record = np.frombuffer(packed, Nested.dtype)[0]
    assert len(packed) == Nested.size and record["tag"] == 1 and record["k"] == 65535
    assert list(record["v"].tolist()) == [0.0, 1.0, 2.0, 3.0] and list(record["pair"].tolist()) == [-1, 1]
    assert record["m"]["d"] == 2.0 and list(record["m"]["c"]) == [1, 2, 3]


@pytest.mark.parametrize("value, argument", [
    ({"n": 1, "scale": 2.0}, "p.ptr"),                  # a field missing
    ({"n": 1, "scale": 2.0, "ptr": None, "x": 1}, "p.x"),
    ((1, 2.0), "p"),                                     # too few values
    ({"n": -1, "scale": 2.0, "ptr": None}, "p.n"),       # out of u32's range
    ({"n": 1.5, "scale": 2.0, "ptr": None}, "p.n"),      # a float for an integer
    ({"n": 1, "scale": 1e39, "ptr": None}, "p.scale"),   # beyond f32
    ({"n": 1, "scale": 2.0, "ptr": 1234}, "p.ptr"),      # a raw address, not a DeviceBuffer
    (3, "p"),
])
def test_bad_struct_values_name_the_field(value, argument) -> None:
    packer = ArgumentPacker(mc.cuda_export("k", p=Params), context=None)
    with pytest.raises(mc.ContractError) as info:
        packer.pack(value)
    assert info.value.argument == argument


def test_vector_values_are_checked_per_component() -> None:
    packer = ArgumentPacker(mc.cuda_export("k", v=mc.int2), context=None)
    assert packer.pack((1, -1)) == pystruct.pack("<ii", 1, -1)
    assert packer.pack({"x": 3, "y": 4}) == pystruct.pack("<ii", 3, 4)
    for bad, argument in (((1, 2, 3), "v"), ((1, 2**31), "v.y"), (np.zeros((2, 1), np.int32), "v")):
        with pytest.raises(mc.ContractError) as info:
            packer.pack(bad)
        assert info.value.argument == argument
    with pytest.raises(mc.ContractError) as info:
        packer.pack()
    assert info.value.argument == "v"


def test_a_numpy_dtype_declares_a_struct_only_with_c_layout() -> None:
    aligned = np.dtype([("n", np.uint32), ("d", np.float64), ("h", np.float16)], align=True)
    s = mc.struct("FromNumpy", aligned)
    assert [(f.name, f.offset) for f in s.fields] == [("n", 0), ("d", 8), ("h", 16)] and s.size == 24
    with pytest.raises(mc.ContractError) as info:
        mc.struct("Packed", np.dtype([("n", np.uint32), ("d", np.float64)]))  # numpy packs d at 4
    assert info.value.argument == "Packed.d"
    arrays = mc.struct("Arrays", np.dtype([("a", np.int16, (3,)), ("b", np.int32)], align=True))
    assert [(f.name, f.offset) for f in arrays.fields] == [("a", 0), ("b", 8)]


@pytest.mark.parametrize("name, fields, argument", [
    ("3d", [("n", mc.u32)], "name"),
    ("S", [], "fields"),
    ("S", [("n", mc.u32), ("n", mc.f32)], "fields[1]"),
    ("S", [("class", mc.u32)], "fields[0]"),
    ("S", [("n", int)], "S.n"),
    ("S", [("n", "f32")], "S.n"),
    ("S", [("a", (mc.f32, 0))], "S.a"),
    ("S", [("n", object)], "S.n"),
    # C++ keywords, which NVRTC would refuse only when the declaration is compiled
    ("S", [("int", mc.u32)], "fields[0]"),
    ("S", [("float", mc.f32)], "fields[0]"),
    ("S", [("n", mc.u32), ("template", mc.u32)], "fields[1]"),
    ("struct", [("n", mc.u32)], "name"),
    ("unsigned", [("n", mc.u32)], "name"),
    # names C++ reserves for the implementation
    ("__S", [("n", mc.u32)], "name"),
    ("S", [("_Count", mc.u32)], "fields[0]"),
    # names every CUDA translation unit already defines
    ("float4", [("x", mc.f32)], "name"),
    ("dim3", [("x", mc.u32)], "name"),
    ("S", [("NULL", mc.u32)], "fields[0]"),
    ("S", [("threadIdx", mc.u32)], "fields[0]"),
    ("uint2", [("x", mc.u32)], "name"),
    # sizes numpy's structured dtypes (C ints) and CUDA's parameter block (32764 bytes) cannot hold
    ("S", [("a", (mc.f32, 2**40))], "S.a"),
    ("S", [("a", (mc.f64, 5000))], "fields"),
])
def test_bad_struct_declarations_are_refused(name, fields, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.struct(name, fields)
    assert info.value.argument == argument


@pytest.mark.parametrize("alignment", [2**40, 2**70, 8192, 3, 0, np.float64(16)])
def test_an_alignment_is_a_power_of_two_up_to_4096(alignment) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.struct("S", [("a", mc.f32)], alignment=alignment)
    assert info.value.argument == "alignment"


def test_numpy_integers_are_counts_and_alignments() -> None:
    s = mc.struct("S", [("a", (mc.f32, np.int64(4)))], alignment=np.int32(32))
    assert (s.size, s.alignment, s.fields[0].type.count) == (32, 32, 4)
    assert type(s.fields[0].type.count) is int


def test_names_that_are_c_identifiers_but_python_or_cxx_neither_are_kept() -> None:
    s = mc.struct("Box_2", [("_n", mc.u32), ("count_", mc.f32), ("integer", mc.u32), ("float5", mc.f32)])
    assert [f.name for f in s.fields] == ["_n", "count_", "integer", "float5"] and s.name == "Box_2"
    assert mc.float4.name == "float4"  # CUDA's own types keep their names


def test_a_struct_parameter_describes_itself_and_refuses_the_numba_abi() -> None:
    contract = mc.cuda_export("k", p=Params)
    assert contract.params[0].kind == "struct" and "struct Params (16 bytes)" in repr(contract)
    from mircuda.numba_ext._abi import _refuse_structs

    with pytest.raises(mc.ContractError) as info:
        _refuse_structs(contract)
    assert info.value.argument == "p"
