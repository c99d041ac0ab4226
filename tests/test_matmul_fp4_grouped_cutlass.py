"""The SM120 grouped block-scaled NVFP4 kernels of the CUTLASS library (kind GROUPED_BLOCK_SCALED, ABI 3) and
their Python layer, without a GPU: the C ABI codes, entry points and operand struct, the families' CMake
configuration (sm_120f only), the table of a built library, the C entry points' refusals before any device
call, the SASS of the grouped kernels (``OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X``), the ctypes layer's and
CutlassGroupedFp4's argument checks, the numba executor (against a fake library function) and the kernel
choice. The GPU tests are in ``tests/gpu/test_matmul_fp4_grouped_cutlass_gpu.py``."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from cmake_project import configure, needs_build_tools
from mircuda.matmul import _build, _fp4_grouped_cutlass, _fp4_sass, _library, _sass
from mircuda.matmul._fp4_grouped_cutlass import CutlassGroupedFp4, choose_grouped_kernel, grouped_workspace_rows

HEADER = _build.project_dir() / "include" / "mircuda_cutlass.h"
GROUPED_NAMES = {"sm120_nvfp4_grouped_coop_128x128x128_e2m1_bf16": "sm120_nvfp4_grouped_cooperative",
                 "sm120_nvfp4_grouped_pingpong_128x128x128_e2m1_bf16": "sm120_nvfp4_grouped_pingpong"}
OPCODE = "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"


def _kernel(**changes: Any) -> _library.KernelInfo:
    base = _library.KernelInfo(5, "sm120_nvfp4_grouped_coop_128x128x128_e2m1_bf16", "sm120_nvfp4_grouped_cooperative",
                               "e2m1", "bf16", (128, 128, 128), (1, 1), 0, 16, False, (120,), "cutlass",
                               "grouped_block_scaled", (1, 8, 32), "ue4m3", (1, 1, 16), ("k", "tiled"))
    return dataclasses.replace(base, **changes)


# -- the C ABI ---------------------------------------------------------------------------------------------

def test_the_header_defines_the_grouped_codes_entry_points_and_operand_struct() -> None:
    text = HEADER.read_text()
    assert "#define MIRCUDA_CUTLASS_ABI_VERSION 3" in text and _library.ABI_VERSION == 3
    assert _library.COMPATIBLE_ABI_VERSIONS == (2, 3)
    assert "#define MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED 3" in text
    assert _library.KINDS[3] == "grouped_block_scaled"
    for code in (10, 11):
        assert f"#define MIRCUDA_CUTLASS_{_library.FAMILIES[code].upper()} {code}" in text
    for fn in (*_library.GROUPED_SYMBOLS, *_library.BLOCK_SCALED_SYMBOLS, "mircuda_cutlass_scaled_plan_create",
               "mircuda_cutlass_plan_create"):
        assert f"int {fn}(" in text  # the older entry points stay
    struct = re.search(r"typedef struct \{([^{}]*)\} mircuda_cutlass_grouped_operands;", text)
    assert struct is not None
    fields = re.findall(r"\*\s*(\w+);", struct.group(1))
    assert tuple(fields) == _library.GROUPED_OPERAND_FIELDS
    assert [name for name, _ in _library.GroupedOperands._fields_] == list(fields)
    assert ctypes.sizeof(_library.GroupedOperands) == 6 * ctypes.sizeof(ctypes.c_void_p)
    tables = re.search(r"typedef struct \{([^{}]*)\} mircuda_cutlass_grouped_tables;", text)
    assert tables is not None
    assert tuple(re.findall(r"\*(\w+);", tables.group(1))) == _library.GROUPED_TABLE_FIELDS
    assert [name for name, _ in _library.GroupedTables._fields_] == list(_library.GROUPED_TABLE_FIELDS)


def test_the_grouped_family_group_parses() -> None:
    assert _build.FAMILY_GROUPS["FP4_GROUPED"] == ("SM120_NVFP4_GROUPED_COOP", "SM120_NVFP4_GROUPED_PINGPONG")
    assert set(_build.FAMILY_GROUPS["FP4_GROUPED"]) <= set(_build.FAMILIES)
    assert _build.parse_families("fp4_grouped,fp4") == ("FP4_GROUPED", "FP4")


def test_the_grouped_families_configure_alone_for_120f(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("90a", "120f"), ("FP4_GROUPED",))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = tmp_path / "build" / "gen"
    names = {p.name for p in gen.glob("*.cu")}
    assert names == {"sm120_nvfp4_grouped_coop_e2m1_bf16.cu", "sm120_nvfp4_grouped_pingpong_e2m1_bf16.cu"}
    for name in names:
        text = (gen / name).read_text()
        family = name.removesuffix("_e2m1_bf16.cu").upper()
        assert f"#define MIRCUDA_{family} 1" in text and '#include "grouped_block_scaled_instance.cuh"' in text
        assert "#define MIRCUDA_ARCH_LIST 120" in text
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    assert "arch=compute_120f,code=sm_120f" in ninja and "code=sm_90a" not in ninja.split("grouped_coop")[1][:600]


def test_the_default_build_holds_the_grouped_families_with_120f_only(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path / "both", ("90a", "120f"), ())
    assert out.returncode == 0, out.stdout + out.stderr
    names = {p.name for p in (tmp_path / "both" / "build" / "gen").glob("*nvfp4_grouped*.cu")}
    assert names == {"sm120_nvfp4_grouped_coop_e2m1_bf16.cu", "sm120_nvfp4_grouped_pingpong_e2m1_bf16.cu"}
    out = configure(tmp_path / "hopper", ("90a",), ())
    assert out.returncode == 0, out.stdout + out.stderr
    assert not list((tmp_path / "hopper" / "build" / "gen").glob("*nvfp4_grouped*.cu"))
    out = configure(tmp_path / "refused", ("90a",), ("SM120_NVFP4_GROUPED_COOP",))
    assert out.returncode != 0 and "SM120_NVFP4_GROUPED_COOP is compiled for 120f" in out.stdout + out.stderr


# -- a built library -------------------------------------------------------------------------------------

def _built_library() -> Path | None:
    """``MIRCUDA_CUTLASS_LIBRARY``, else ``.fp4lib/libmircuda_cutlass.so`` of the repository (``python -m
    mircuda build-cutlass --arch 120f --families FP4,FP4_GROUPED``, copied there)."""
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    if env and Path(env).is_file():
        return Path(env)
    local = Path(__file__).resolve().parents[1] / ".fp4lib" / "libmircuda_cutlass.so"
    return local if local.is_file() else None


def _grouped_library() -> _library.CutlassLibrary:
    path = _built_library()
    if path is None:
        pytest.skip("no built libmircuda_cutlass.so (MIRCUDA_CUTLASS_LIBRARY, or python -m mircuda build-cutlass "
                    "--arch 120f --families FP4_GROUPED copied to .fp4lib/)")
    lib = _library.CutlassLibrary(path)
    if not lib.grouped_kernels:
        pytest.skip(f"{path} was built without the grouped NVFP4 families (ABI {lib.abi_version})")
    return lib


def test_a_built_library_lists_the_grouped_kernels_with_their_metadata() -> None:
    lib = _grouped_library()
    assert lib.abi_version == 3 and lib.has_grouped and lib.grouped_execute_address
    assert {k.name: k.family for k in lib.grouped_kernels} == GROUPED_NAMES
    for k in lib.grouped_kernels:
        assert (k.input, k.output, k.kind, k.origin) == ("e2m1", "bf16", "grouped_block_scaled", "cutlass")
        assert (k.scale_type, k.scale_block, k.scale_major) == ("ue4m3", (1, 1, 16), ("k", "tiled"))
        assert k.tile == (128, 128, 128) and k.cluster == (1, 1) and k.multiples == (1, 8, 32)
        assert k.archs == (120,) and k.runs_on((12, 0)) and k.runs_on((12, 1)) and not k.runs_on((9, 0))
    others = (*lib.kernels, *lib.scaled_kernels, *lib.block_scaled_kernels)
    assert all(k.kind != "grouped_block_scaled" for k in others)


def test_the_grouped_c_entry_points_refuse_before_any_device_call() -> None:
    # Kind, sizes, sets and the multiples are checked before the device query: this answers without a GPU.
    lib = _grouped_library()
    c = lib._lib
    out = ctypes.c_void_p()
    g = lib.grouped_kernels[0].index
    ok = (g, 256, 256, 64, 8, 8, 1)
    for bad in ((10_000, *ok[1:]), (-1, *ok[1:]), (g, 0, *ok[2:]), (g, 256, 0, *ok[3:]), (g, 256, 256, 0, *ok[4:]),
                (g, 256, 256, 64, 0, 8, 1), (g, 256, 256, 64, 8, 0, 1), (g, 256, 256, 64, 8, 8, 0),
                (g, 256, 256, 64, 8, 8, 3)):
        assert c.mircuda_cutlass_grouped_plan_create(*bad, ctypes.byref(out)) == 1, bad
        assert not out.value
    assert c.mircuda_cutlass_grouped_plan_create(g, 260, 256, 64, 8, 8, 1, ctypes.byref(out)) == 2  # N % 8
    assert c.mircuda_cutlass_grouped_plan_create(g, 256, 272, 64, 8, 8, 1, ctypes.byref(out)) == 2  # K % 32
    for other in (*lib.kernels, *lib.scaled_kernels, *lib.block_scaled_kernels)[:3]:
        assert c.mircuda_cutlass_grouped_plan_create(other.index, *ok[1:], ctypes.byref(out)) == 1
    # the older entry points refuse a grouped kernel
    assert c.mircuda_cutlass_plan_create(g, 64, 256, 256, 1, ctypes.byref(out)) == 1
    assert c.mircuda_cutlass_scaled_plan_create(g, 64, 256, 256, ctypes.byref(out)) == 1
    if lib.has_block_scaled:
        assert c.mircuda_cutlass_block_scaled_plan_create(g, 64, 256, 256, ctypes.byref(out)) == 1
    ops = (_library.GroupedOperands * 1)()
    assert c.mircuda_cutlass_grouped_plan_execute(None, None, 4, 8, 12, ops, 16) == 1
    assert not out.value


def test_the_grouped_setup_entry_point_refuses_before_any_device_call() -> None:
    lib = _grouped_library()
    c = lib._lib
    ops = (_library.GroupedOperands * 2)()
    for i in range(2):
        for j, name in enumerate(_library.GROUPED_OPERAND_FIELDS):
            setattr(ops[i], name, 0x1000 * (j + 1))
    tables = _library.GroupedTables(*[0x10000 * (j + 1) for j in range(len(_library.GROUPED_TABLE_FIELDS))])
    ok = (None, 256, 256, 64, 8, 8, 1, 0x100, 0x200, 0x300, ops, 0x400, ctypes.byref(tables))
    for position, bad in ((1, 0), (2, -32), (3, 0), (4, 0), (5, 0), (6, 0), (6, 3), (7, None), (8, None), (9, None),
                          (11, None)):
        args = list(ok)
        args[position] = bad
        assert c.mircuda_cutlass_grouped_setup(*args) == 1, (position, bad)
    assert c.mircuda_cutlass_grouped_setup(*ok[:1], 260, *ok[2:]) == 2  # N % 8
    assert c.mircuda_cutlass_grouped_setup(*ok[:2], 272, *ok[3:]) == 2  # K % 32
    for field in _library.GROUPED_TABLE_FIELDS:  # a null table
        broken = _library.GroupedTables.from_buffer_copy(tables)
        setattr(broken, field, None)
        assert c.mircuda_cutlass_grouped_setup(*ok[:12], ctypes.byref(broken)) == 1, field
    misaligned = _library.GroupedTables.from_buffer_copy(tables)
    misaligned.sfa_tiled = 0x10008
    assert c.mircuda_cutlass_grouped_setup(*ok[:12], ctypes.byref(misaligned)) == 1
    ops[0].d = None  # a null operand
    assert c.mircuda_cutlass_grouped_setup(*ok) == 1


def test_the_grouped_kernels_issue_the_block_scaled_mma() -> None:
    lib = _grouped_library()
    if _sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump (with nvdisasm) is not on PATH")
    report = _fp4_sass.grouped_block_scaled_fp4_sass_check(lib.path)
    assert report.ok, report
    assert len(report.functions) == len(lib.grouped_kernels)
    for f in report.functions:
        assert f.opcodes == [OPCODE] and f.mma_count > 0 and f.missing == [] and f.unexpected == []
    if lib.block_scaled_kernels:  # the single and the grouped checks see their own kernels only
        single = _fp4_sass.block_scaled_fp4_sass_check(lib.path)
        assert single.ok and len(single.functions) == len(lib.block_scaled_kernels)
        assert not {f.name for f in single.functions} & {f.name for f in report.functions}


def test_the_sass_helpers_tell_grouped_from_single_kernels() -> None:
    single = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10collective13"
              "CollectiveMmaINS1_42MainloopSm120TmaWarpSpecializedBlockScaledILi4ELi3ENS_12float_e2m1_tE")
    grouped = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS1_17GroupProblemShapeIN4cute5tupleIJiii"
               "EEEEENS1_10collective13CollectiveMmaINS1_47MainloopSm120ArrayTmaWarpSpecializedBlockScaledILi4E"
               "NS_12float_e2m1_tE")
    setup = "_ZN7mircuda7grouped13grouped_setupINS0_6ConfigIN7cutlass4gemm43KernelPtrArrayTmaWarpSpecializedCooperativeEEEEE"
    assert _fp4_sass.is_grouped_block_scaled_fp4_function(grouped)
    assert not _fp4_sass.is_grouped_block_scaled_fp4_function(single)
    assert not _fp4_sass.is_grouped_block_scaled_fp4_function(setup)
    assert not _fp4_sass.is_block_scaled_fp4_function(grouped)


def test_the_grouped_sass_check_reports_a_missing_cuobjdump_or_no_kernels(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(_sass, "find_cuobjdump", lambda: None)
    report = _fp4_sass.grouped_block_scaled_fp4_sass_check(Path("unused.so"))
    assert not report.ok and "cuobjdump not found" in report.error
    text = f"\n\tFunction : _ZN7cutlass6KernelI\n  {OPCODE} R4 ;\n"
    monkeypatch.setattr(_sass, "disassemble", lambda library, arch: (text, ""))  # the checks all disassemble there
    report = _fp4_sass.grouped_block_scaled_fp4_sass_check(tmp_path / "libx.so")
    assert not report.ok and "no grouped block-scaled NVFP4 kernels" in report.error


def test_cutlass_check_reports_the_grouped_sass(monkeypatch, capsys) -> None:
    from mircuda.cli import _cutlass_check

    body = f"  {OPCODE} R4 ;\n  UTMALDG [UR4] ;\n"
    name = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS1_17GroupProblemShapeI"
    text = f"\n\tFunction : {name}MainloopSm120ArrayTmaWarpSpecializedBlockScaled_float_e2m1_tA\n{body}"
    monkeypatch.setattr(_sass, "disassemble", lambda library, arch: (text, ""))  # the checks all disassemble there
    failures: list[str] = []
    lib = SimpleNamespace(path="/x/libmircuda_cutlass.so", grouped_kernels=(_kernel(),))
    out = _cutlass_check._fp4_grouped_sass(lib, failures)
    assert failures == [] and out is not None and len(out["functions"]) == 1
    assert OPCODE in capsys.readouterr().out
    lib = SimpleNamespace(path="/x/libmircuda_cutlass.so", grouped_kernels=(_kernel(), _kernel(index=6)))
    _cutlass_check._fp4_grouped_sass(lib, failures)  # one function for two kernels: one was not found
    assert failures == ["NVFP4 grouped SASS check of sm_120f"]
    failures.clear()
    assert _cutlass_check._fp4_grouped_sass(SimpleNamespace(grouped_kernels=()), failures) is None and not failures


# -- the ctypes layer and the wrapper ----------------------------------------------------------------------

def test_create_grouped_plan_refuses_before_calling_the_library() -> None:
    lib = object.__new__(_library.CutlassLibrary)  # no loaded .so: a call into it would fail
    lib.has_grouped = True
    cases: list[tuple[tuple[Any, ...], str]] = [
        ((_kernel(kind="block_scaled"), 256, 256, 64, 8, 8, 1), "kernel"),
        ((_kernel(), 0, 256, 64, 8, 8, 1), "n"),
        ((_kernel(), 256, True, 64, 8, 8, 1), "k"),
        ((_kernel(), 256, 256, -1, 8, 8, 1), "capacity"),
        ((_kernel(), 256, 256, 64, 2**31, 8, 1), "groups"),
        ((_kernel(), 256, 256, 64, 8, 8.0, 1), "bank_size"),
        ((_kernel(), 256, 256, 64, 8, 8, 3), "sets"),
        ((_kernel(), 260, 256, 64, 8, 8, 1), "shape"),
        ((_kernel(), 256, 272, 64, 8, 8, 2), "shape"),
    ]
    for args, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            lib.create_grouped_plan(*args)
        assert info.value.argument == argument, args
    with pytest.raises(mc.ContractError) as info:
        lib.create_grouped_plan(_kernel(), 256, 272, 64, 8, 8, 1)
    assert "K = 272 is not a multiple of 32" in str(info.value)
    lib.has_grouped = False  # an ABI 2 library
    with pytest.raises(mc.ContractError) as info:
        lib.create_grouped_plan(_kernel(), 256, 256, 64, 8, 8, 1)
    assert info.value.argument == "kernel"


def test_execute_grouped_refuses_bad_operand_sets_before_calling_the_library() -> None:
    lib = object.__new__(_library.CutlassLibrary)
    good = (0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000)
    for operands, argument in (([], "operands"), ("abc", "operands"), ([good[:5]], "operands[0]"),
                               ([good, (*good[:5], -4)], "operands[1]"), ([(*good[:2], 1.5, *good[3:])], "operands[0]")):
        with pytest.raises(mc.ContractError) as info:
            lib.execute_grouped(0x1, 0x2, 0x10, 0x20, 0x30, operands, 0x40)
        assert info.value.argument == argument, operands


def test_grouped_setup_refuses_malformed_tables_before_calling_the_library() -> None:
    lib = object.__new__(_library.CutlassLibrary)
    lib.has_grouped = True
    good = (0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000)
    for tables in ([1] * 9, "x" * 10, [1] * 9 + [-1], [1] * 9 + [2.0]):
        with pytest.raises(mc.ContractError) as info:
            lib.grouped_setup(0, 64, 64, 8, 2, 2, 0x10, 0x20, 0x30, [good], 0x40, tables)
        assert info.value.argument == "tables"
    with pytest.raises(mc.ContractError) as info:
        lib.grouped_setup(0, 64, 64, 8, 2, 2, 0x10, 0x20, 0x30, [good[:4]], 0x40, [1] * 10)
    assert info.value.argument == "operands[0]"


def test_the_grouped_c_layer_reads_the_operand_sets_it_is_given() -> None:
    lib = _grouped_library()
    # A plan handle of another kind answers INVALID_ARGUMENT after the struct array was built and passed.
    with pytest.raises(mc.CutlassError) as info:
        lib.execute_grouped(0, 0, 0x10, 0x20, 0x30, [(0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000)], 0x40)
    assert info.value.status == 1 and "grouped_plan_execute" in str(info.value)


def test_the_scale_shapes_of_a_grouped_kernel_are_linear_for_a_and_tiled_for_the_bank() -> None:
    from mircuda.matmul._fp4_reference import scale_bytes

    sfa, sfb = _kernel().scale_shapes(300, 200, 96)
    assert sfa == (300, 6) and sfb == (256, 8)
    assert sfa[0] * sfa[1] == scale_bytes(300, 96, "linear") and sfb[0] * sfb[1] == scale_bytes(200, 96, "tiled")


def test_the_workspace_rows_cover_every_non_overlapping_routing() -> None:
    assert grouped_workspace_rows(64, 8) == 128 + 128 * 8
    assert grouped_workspace_rows(4096, 8) == 4096 + 128 * 8
    assert grouped_workspace_rows(3, 100) == 128 + 3 * 128  # at most 3 non-empty groups
    rng = np.random.default_rng(7)
    for _ in range(200):
        capacity, groups = int(rng.integers(1, 3000)), int(rng.integers(1, 70))
        cuts = np.sort(rng.integers(0, capacity + 1, groups - 1))
        counts = np.diff(np.concatenate(([0], cuts, [rng.integers(cuts[-1] if groups > 1 else 0, capacity + 1)])))
        padded = int(sum(-(-int(c) // 128) * 128 for c in counts))
        assert padded <= grouped_workspace_rows(capacity, groups)


def test_the_grouped_schedule_follows_the_tiles_per_sm() -> None:
    coop, ping = _kernel(), _kernel(index=6, family="sm120_nvfp4_grouped_pingpong",
                                    name="sm120_nvfp4_grouped_pingpong_128x128x128_e2m1_bf16")
    chosen, why = choose_grouped_kernel((coop, ping), 48, 64, 4096)
    assert chosen is coop and "cooperative" in why and "32 output tiles" in why
    chosen, why = choose_grouped_kernel((coop, ping), 48, 4096, 4096)
    assert chosen is ping and "ping-pong" in why
    chosen, why = choose_grouped_kernel((coop,), 48, 4096, 4096)
    assert chosen is coop and "has only" in why


def _unchecked_plan(sets: int) -> CutlassGroupedFp4:
    plan = object.__new__(CutlassGroupedFp4)  # the checks only: no library, no device
    plan.handle, plan.sets, plan.stream, plan.kernel = 0x99, sets, object(), _kernel()
    return plan


def test_the_wrapper_checks_every_argument_by_name() -> None:
    plan = _unchecked_plan(2)
    good = (0x1000, 0x2001, 0x3000, 0x4000, 0x5000, 0x6004)  # sfa may be byte-aligned, alpha 4-byte
    ok = {"row_counts": 0x100, "offsets": 0x200, "matrix_indices": 0x300, "operands": [good, good],
          "error_flag": 0x400}
    assert plan._check(plan.stream, **ok) == [good, good]
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (object(), {}, "stream"),
        (plan.stream, {"row_counts": 0}, "row_counts"),
        (plan.stream, {"offsets": 0x202}, "offsets"),
        (plan.stream, {"matrix_indices": 3.0}, "matrix_indices"),
        (plan.stream, {"error_flag": -4}, "error_flag"),
        (plan.stream, {"operands": [good]}, "operands"),
        (plan.stream, {"operands": "ab"}, "operands"),
        (plan.stream, {"operands": [good, good[:5]]}, "operands[1]"),
        (plan.stream, {"operands": [(0x1008, *good[1:]), good]}, "operands[0].a"),
        (plan.stream, {"operands": [good, (*good[:2], 0x3004, *good[3:])]}, "operands[1].b_bank"),
        (plan.stream, {"operands": [(*good[:3], 0x4001, *good[4:]), good]}, "operands[0].sfb_bank_tiled"),
        (plan.stream, {"operands": [(*good[:4], 0x5002, good[5]), good]}, "operands[0].d"),
        (plan.stream, {"operands": [good, (*good[:5], 0x6002)]}, "operands[1].alpha_per_matrix"),
        (plan.stream, {"operands": [good, (*good[:1], 0, *good[2:])]}, "operands[1].sfa_linear"),
    ]
    for stream, change, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            plan._check(stream, **{**ok, **change})
        assert info.value.argument == argument, change
    plan.handle = 0
    with pytest.raises(mc.ClosedResourceError):
        plan._check(plan.stream, **ok)


def test_the_grouped_executor_builds_the_operand_array_and_calls_the_library() -> None:
    pytest.importorskip("numba")
    u64 = ctypes.c_uint64
    proto = ctypes.CFUNCTYPE(ctypes.c_int, u64, u64, u64, u64, u64, u64, u64)
    calls: list[tuple[Any, ...]] = []
    sets_seen: list[int] = []

    def fake(plan, stream, rc, off, mi, operands, flag):  # type: ignore[no-untyped-def]
        values = tuple((ctypes.c_uint64 * (6 * sets_seen[-1])).from_address(operands))
        calls.append((plan, stream, rc, off, mi, values, flag))
        return 0

    library = proto(fake)
    address = ctypes.cast(library, ctypes.c_void_p).value or 0
    one = (0x1000, 0x2001, 0x3000, 0x4000, 0x5000, 0x6004)
    two = (0x7000, 0x8000, 0x9000, 0xA000, 0xB000, 0xC000)
    sets_seen.append(1)
    execute = _fp4_grouped_cutlass.grouped_executor(address, 0x9A, 1, stream=0x55)
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, *one) == 0
    assert calls == [(0x9A, 0x55, 0x100, 0x200, 0x300, one, 0x400)]
    calls.clear()
    assert execute(0x56, 0x100, 0x200, 0x300, 0x400, *one) == _fp4_grouped_cutlass.INVALID_ARGUMENT
    assert execute(0x55, 0, 0x200, 0x300, 0x400, *one) == _fp4_grouped_cutlass.INVALID_ARGUMENT
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, 0, *one[1:]) == _fp4_grouped_cutlass.INVALID_ARGUMENT
    assert execute(0x55, 0x102, 0x200, 0x300, 0x400, *one) == _fp4_grouped_cutlass.MISALIGNED
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, 0x1008, *one[1:]) == _fp4_grouped_cutlass.MISALIGNED
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, *one[:5], 0x6002) == _fp4_grouped_cutlass.MISALIGNED
    assert calls == []
    sets_seen.append(2)
    paired = _fp4_grouped_cutlass.grouped_executor(address, 0x9B, 2, stream=0x55)
    assert paired(0x55, 0x100, 0x200, 0x300, 0x400, *one, *two) == 0
    assert calls == [(0x9B, 0x55, 0x100, 0x200, 0x300, one + two, 0x400)]
    calls.clear()
    assert paired(0x55, 0x100, 0x200, 0x300, 0x400, *one, *two[:3], 0xA008, *two[4:]) == _fp4_grouped_cutlass.MISALIGNED
    assert calls == []
    with pytest.raises(mc.ContractError) as info:
        _fp4_grouped_cutlass.grouped_executor(address, 0x9B, 3, stream=0x55)
    assert info.value.argument == "sets"


def test_an_abi_2_library_loads_without_grouped_kernels(tmp_path) -> None:
    # A minimal ABI 2 library (the ABI 2 entry points only) built with the host compiler.
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    names = ("plan_create", "plan_workspace_bytes", "plan_set_workspace", "plan_execute", "plan_destroy",
             "scaled_plan_create", "scaled_plan_execute")
    source = ("int mircuda_cutlass_abi_version(void) { return %d; }\n"
              "int mircuda_cutlass_cutlass_version(void) { return 40200; }\n"
              "int mircuda_cutlass_kernel_count(void) { return 0; }\n"
              "int mircuda_cutlass_kernel_info_get(int i, void *o) { return 1; }\n"
              "int mircuda_cutlass_last_cuda_error(void) { return 0; }\n"
              + "".join(f"int mircuda_cutlass_{n}(void) {{ return 1; }}\n" for n in names))
    libs = {}
    for abi in (2, 3, 4):
        (tmp_path / f"abi{abi}.c").write_text(source % abi)
        so = tmp_path / f"abi{abi}" / "libmircuda_cutlass.so"
        so.parent.mkdir()
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(tmp_path / f"abi{abi}.c")], check=True)
        libs[abi] = so
    old = _library.CutlassLibrary(libs[2])
    assert old.abi_version == 2 and not old.has_grouped and old.grouped_kernels == () and not old.grouped_execute_address
    three = _library.CutlassLibrary(libs[3])  # ABI 3 without the grouped symbols: none either
    assert three.abi_version == 3 and not three.has_grouped
    with pytest.raises(mc.CutlassNotFound, match="speaks ABI 4"):
        _library.CutlassLibrary(libs[4])
