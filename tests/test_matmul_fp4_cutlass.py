"""The SM120 block-scaled NVFP4 kernels of the CUTLASS library and the NVRTC FP4 kernels' family target,
without a GPU: the C ABI codes and entry points, the FP4 families' CMake configuration (sm_120f only),
the tiled scale shapes, the refusals and the schedule choice, BlockScaledFp4Plan's selection reasons, the
table of a built library (kinds kept apart at the C entry points), the SASS of the block-scaled MMA
(``OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X``) in a built library or in one translation unit compiled here,
and the hardware E2M1 decode (``cvt.rn.f16x2.e2m1x2`` / ``F2FP.F16.E2M1.UNPACK_B``) of the NVRTC kernel
compiled offline for sm_120f but not for sm_90."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from cmake_project import configure, needs_build_tools
from mircuda.matmul import _build, _fp4_cutlass, _fp4_sass, _library, _sass
from mircuda.matmul._fp4 import _cutlass_fp4_choice, fp4_target, has_e2m1_cvt

HEADER = _build.project_dir() / "include" / "mircuda_cutlass.h"
FP4_NAMES = {"sm120_nvfp4_coop_128x128x128_e2m1_bf16": "sm120_nvfp4_cooperative",
             "sm120_nvfp4_pingpong_128x128x128_e2m1_bf16": "sm120_nvfp4_pingpong"}


def _kernel(**changes) -> _library.KernelInfo:  # type: ignore[no-untyped-def]
    base = _library.KernelInfo(3, "sm120_nvfp4_coop_128x128x128_e2m1_bf16", "sm120_nvfp4_cooperative", "e2m1",
                               "bf16", (128, 128, 128), (1, 1), 0, 16, False, (120,), "cutlass", "block_scaled",
                               (1, 8, 32), "ue4m3", (1, 1, 16), ("tiled", "tiled"))
    return dataclasses.replace(base, **changes)


def test_the_header_defines_the_block_scaled_codes_and_entry_points() -> None:
    text = HEADER.read_text()
    assert "#define MIRCUDA_CUTLASS_ABI_VERSION 3" in text and _library.ABI_VERSION == 3  # 3: grouped NVFP4 kernels
    assert "#define MIRCUDA_CUTLASS_E2M1 5" in text and _library.DTYPES[5] == "e2m1"
    assert "#define MIRCUDA_CUTLASS_UE4M3 6" in text and _library.DTYPES[6] == "ue4m3"
    assert "#define MIRCUDA_CUTLASS_KIND_BLOCK_SCALED 2" in text and _library.KINDS[2] == "block_scaled"
    assert "#define MIRCUDA_CUTLASS_SF_TILED 3" in text and _library.SCALE_MAJORS[3] == "tiled"
    for code in (8, 9):
        assert f"#define MIRCUDA_CUTLASS_{_library.FAMILIES[code].upper()} {code}" in text
    for fn in _library.BLOCK_SCALED_SYMBOLS:
        assert f"int {fn}(" in text


def test_the_fp4_family_group_parses() -> None:
    assert _build.FAMILY_GROUPS["FP4"] == ("SM120_NVFP4_COOP", "SM120_NVFP4_PINGPONG")
    assert _build.parse_families("fp4, sm120_nvfp4_coop") == ("FP4", "SM120_NVFP4_COOP")
    assert set(_build.FAMILY_GROUPS["FP4"]) <= set(_build.FAMILIES)


def test_the_tiled_scale_shapes_of_a_block_scaled_kernel() -> None:
    # rows padded to 128, K/16 to 4 (the 512-byte atoms): the byte counts of scale_bytes(..., "tiled")
    from mircuda.matmul._fp4_reference import scale_bytes

    k = _kernel()
    assert k.scale_shapes(300, 1032, 1040) == ((384, 68), (1152, 68))
    assert k.scale_shapes(1, 8, 32) == ((128, 4), (128, 4))
    (ra, ca), (rb, cb) = k.scale_shapes(300, 1032, 1040)
    assert ra * ca == scale_bytes(300, 1040, "tiled") and rb * cb == scale_bytes(1032, 1040, "tiled")


def test_the_table_multiples_name_the_dimension() -> None:
    k = _kernel()
    assert k.refusal(17, 1032, 1056) == ""
    assert k.refusal(17, 1030, 1040) == "N = 1030 is not a multiple of 8; K = 1040 is not a multiple of 32"


@pytest.mark.parametrize("cc, activation, layout, shape, words", [
    ((9, 0), "fp4", "tiled", (300, 1024, 1024), "does not load"),
    ((12, 0), "bf16", "tiled", (300, 1024, 1024), "activation='bf16'"),
    ((12, 0), "fp4", "linear", (300, 1024, 1024), "tiled scale layout"),
    ((12, 0), "fp4", "tiled", (300, 1024, 1040), "K = 1040 is not a multiple of 32"),
    ((12, 1), "fp4", "tiled", (300, 1028, 1024), "N = 1028 is not a multiple of 8"),
])
def test_the_cutlass_path_refuses_by_name(cc, activation, layout, shape, words) -> None:
    why = _fp4_cutlass.cutlass_fp4_refusal(_kernel(), cc, *shape, activation, layout)
    assert words in why


def test_the_cutlass_path_takes_cc_12_0_and_12_1() -> None:
    for cc in ((12, 0), (12, 1)):
        assert _fp4_cutlass.cutlass_fp4_refusal(_kernel(), cc, 17, 1032, 1056, "fp4", "tiled") == ""


def test_the_schedule_follows_the_tiles_per_sm() -> None:
    coop, ping = _kernel(), _kernel(name="sm120_nvfp4_pingpong_128x128x128_e2m1_bf16", family="sm120_nvfp4_pingpong")
    # 170 SMs (RTX 5090): 2 x 170 = 340 tiles of 128 x 128 switch to ping-pong
    assert _fp4_cutlass.choose_fp4_kernel((coop, ping), 170, 2048, 4096)[0] is ping  # 16 x 32 = 512 tiles
    chosen, why = _fp4_cutlass.choose_fp4_kernel((coop, ping), 170, 128 * 17, 128 * 20)  # 340 tiles
    assert chosen is ping and "340 output tiles" in why and "ping-pong" in why
    chosen, why = _fp4_cutlass.choose_fp4_kernel((coop, ping), 170, 128 * 13, 128 * 26)  # 338 tiles
    assert chosen is coop and "cooperative" in why
    chosen, why = _fp4_cutlass.choose_fp4_kernel((coop,), 20, 8192, 8192)
    assert chosen is coop and "has only" in why


def test_the_plan_names_why_the_cutlass_path_is_not_taken() -> None:
    old = SimpleNamespace(block_scaled_kernels=(), path=Path("/x/libmircuda_cutlass.so"))
    kernel, why = _cutlass_fp4_choice(old, None, (12, 0), 170, 300, 1024, 1024, "fp4", "tiled")  # type: ignore[arg-type]
    assert kernel is None and "no block-scaled NVFP4 kernels" in why and "build-cutlass" in why
    lib = SimpleNamespace(block_scaled_kernels=(_kernel(),), path=Path("/x/libmircuda_cutlass.so"))
    kernel, why = _cutlass_fp4_choice(lib, None, (12, 0), 170, 300, 1024, 1024, "fp4", "linear")  # type: ignore[arg-type]
    assert kernel is None and "scale_layout='linear'" in why
    kernel, why = _cutlass_fp4_choice(lib, None, (12, 0), 170, 300, 1024, 1024, "fp4", "tiled")  # type: ignore[arg-type]
    assert kernel is lib.block_scaled_kernels[0] and "FP4 tensor cores" in why and "cooperative" in why
    with pytest.raises(mc.ContractError) as info:
        _cutlass_fp4_choice(lib, "sm120_nvfp4_nope", (12, 0), 170, 300, 1024, 1024, "fp4", "tiled")  # type: ignore[arg-type]
    assert info.value.argument == "kernel" and "sm120_nvfp4_coop_128x128x128_e2m1_bf16" in str(info.value)
    with pytest.raises(mc.ContractError) as info:
        _cutlass_fp4_choice(lib, _kernel().name, (9, 0), 170, 300, 1024, 1024, "fp4", "tiled")  # type: ignore[arg-type]
    assert info.value.argument == "kernel" and "does not load" in str(info.value)


def test_create_block_scaled_plan_refuses_before_calling_the_library() -> None:
    lib = object.__new__(_library.CutlassLibrary)  # no loaded .so: a call into it would fail
    lib.has_block_scaled = True
    with pytest.raises(mc.ContractError) as info:
        lib.create_block_scaled_plan(_kernel(kind="blockwise_scaled"), 64, 256, 256)
    assert info.value.argument == "kernel"
    with pytest.raises(mc.ContractError) as info:
        lib.create_block_scaled_plan(_kernel(), 64, 256, 272)
    assert info.value.argument == "shape" and "K = 272 is not a multiple of 32" in str(info.value)
    lib.has_block_scaled = False  # a library without the entry points
    with pytest.raises(mc.ContractError) as info:
        lib.create_block_scaled_plan(_kernel(), 64, 256, 256)
    assert info.value.argument == "kernel"


def test_the_cutlass_operands_are_16_byte_aligned_with_tiled_scales() -> None:
    ops = _fp4_cutlass.cutlass_fp4_operands(_kernel(), 300, 1032, 1056)
    assert [o.name for o in ops] == ["a", "a_scales", "b", "b_scales", "d"]
    assert all(o.alignment == 16 for o in ops)
    assert [o.count for o in ops] == [300 * 528, 384 * 68, 1032 * 528, 1152 * 68, 300 * 1032]


def test_the_fp4_family_configures_alone_for_120f(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("90a", "120f"), ("FP4",))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = tmp_path / "build" / "gen"
    names = {p.name for p in gen.glob("*.cu")}
    assert names == {"sm120_nvfp4_coop_e2m1_bf16.cu", "sm120_nvfp4_pingpong_e2m1_bf16.cu"}
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    for name in names:
        text = (gen / name).read_text()
        family = name.removesuffix("_e2m1_bf16.cu").upper()
        assert f"#define MIRCUDA_{family} 1" in text and '#include "block_scaled_instance.cuh"' in text
        assert "#define MIRCUDA_ARCH_LIST 120" in text
    assert "arch=compute_120f,code=sm_120f" in ninja and "code=sm_120 " not in ninja


def test_an_fp4_family_without_120f_is_refused(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("90a",), ("SM120_NVFP4_PINGPONG",))
    assert out.returncode != 0 and "SM120_NVFP4_PINGPONG is compiled for 120f" in out.stdout + out.stderr


def _built_library() -> Path | None:
    """``MIRCUDA_CUTLASS_LIBRARY``, else ``.fp4lib/libmircuda_cutlass.so`` of the repository (``python -m
    mircuda build-cutlass --arch 120f --families FP4``, copied there)."""
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    if env and Path(env).is_file():
        return Path(env)
    local = Path(__file__).resolve().parents[1] / ".fp4lib" / "libmircuda_cutlass.so"
    return local if local.is_file() else None


def _fp4_library() -> _library.CutlassLibrary:
    path = _built_library()
    if path is None:
        pytest.skip("no built libmircuda_cutlass.so (python -m mircuda build-cutlass --arch 120f --families FP4)")
    lib = _library.CutlassLibrary(path)
    if not lib.block_scaled_kernels:
        pytest.skip(f"{path} was built without the FP4 families")
    return lib


def test_a_built_library_lists_the_nvfp4_kernels_with_their_metadata() -> None:
    lib = _fp4_library()
    assert lib.has_block_scaled and lib.block_scaled_execute_address
    assert {k.name: k.family for k in lib.block_scaled_kernels} == FP4_NAMES
    for k in lib.block_scaled_kernels:
        assert (k.input, k.output, k.kind, k.origin) == ("e2m1", "bf16", "block_scaled", "cutlass")
        assert (k.scale_type, k.scale_block, k.scale_major) == ("ue4m3", (1, 1, 16), ("tiled", "tiled"))
        assert k.tile == (128, 128, 128) and k.cluster == (1, 1) and k.multiples == (1, 8, 32)
        assert k.archs == (120,) and k.runs_on((12, 0)) and k.runs_on((12, 1)) and not k.runs_on((9, 0))
    assert all(k.kind == "dense" for k in lib.kernels) and all(k.kind == "blockwise_scaled" for k in lib.scaled_kernels)


def test_the_c_entry_points_keep_the_kinds_apart_without_a_gpu() -> None:
    # The kind check comes before the device query, so it answers on a machine without a GPU.
    lib = _fp4_library()
    c = lib._lib
    out = ctypes.c_void_p()
    index = lib.block_scaled_kernels[0].index
    assert c.mircuda_cutlass_plan_create(index, 64, 256, 256, 1, ctypes.byref(out)) == 1 and not out.value
    assert c.mircuda_cutlass_scaled_plan_create(index, 64, 256, 256, ctypes.byref(out)) == 1 and not out.value
    for other in (*lib.kernels, *lib.scaled_kernels)[:2]:
        assert c.mircuda_cutlass_block_scaled_plan_create(other.index, 64, 256, 256, ctypes.byref(out)) == 1
    assert c.mircuda_cutlass_block_scaled_plan_create(10_000, 64, 256, 256, ctypes.byref(out)) == 1
    assert c.mircuda_cutlass_block_scaled_plan_execute(None, None, None, None, None, None, None, None, 1.0) == 1


def test_the_nvfp4_kernels_issue_the_block_scaled_mma() -> None:
    path = _built_library()
    if path is None or _sass.find_cuobjdump() is None:
        pytest.skip("needs a built libmircuda_cutlass.so and cuobjdump (with nvdisasm)")
    lib = _fp4_library()
    report = _fp4_sass.block_scaled_fp4_sass_check(path)
    assert report.ok, report
    assert len(report.functions) == len(lib.block_scaled_kernels)
    for f in report.functions:
        assert f.opcodes == ["OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"] and f.mma_count > 0


@pytest.mark.slow
def test_one_translation_unit_compiled_here_issues_the_block_scaled_mma(tmp_path) -> None:
    """The cooperative kernel's TU compiled device-only (``nvcc -cubin``, sm_120f): about a minute on two
    cores; skips without nvcc, the CUTLASS headers or cuobjdump."""
    try:
        nvcc = _build._find_nvcc()
        include, util, _ = _build._cutlass_headers()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    tool = _sass.find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump (with nvdisasm) is not on PATH")
    src = _build.project_dir()
    tu = tmp_path / "coop.cu"
    tu.write_text('#define MIRCUDA_SM120_NVFP4_COOP 1\n#define MIRCUDA_ARCH_LIST 120\n#include "block_scaled_instance.cuh"\n')
    cubin = tmp_path / "coop.cubin"
    out = subprocess.run([str(nvcc), "-cubin", "-o", str(cubin), "-std=c++17", "--expt-relaxed-constexpr", "-O3",
                          "-DNDEBUG", "--generate-code=arch=compute_120f,code=sm_120f", f"-I{src / 'include'}",
                          f"-I{src / 'src'}", f"-I{include}", f"-I{util}", str(tu)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    functions = [(n, b) for n, b in _sass.sass_functions(sass) if _fp4_sass.is_block_scaled_fp4_function(n)]
    assert len(functions) == 1
    body = functions[0][1]
    assert _fp4_sass.omma_opcodes(body) == ["OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"]
    assert "UTMALDG" in body and "HMMA" not in body


def test_the_sass_helpers_name_the_block_scaled_opcode() -> None:
    text = ("\n\tFunction : _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10"
            "collective13CollectiveMmaINS1_42MainloopSm120TmaWarpSpecializedBlockScaledILi4ELi3ENS_12float_e2m1_tE\n"
            "  /*0010*/ OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X R4, R8, R12, R4, R2, R3, URZ ;\n"
            "\tFunction : _ZN7cutlass7Kernel2INS_4gemm6kernel13GemmUniversalINS_6half_tE\n  HMMA.16816.F32 R0 ;\n")
    (one, body1), (two, _) = _sass.sass_functions(text)
    assert _fp4_sass.is_block_scaled_fp4_function(one) and not _fp4_sass.is_block_scaled_fp4_function(two)
    assert _fp4_sass.omma_opcodes(body1) == ["OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"]


def test_the_sass_check_reports_a_missing_cuobjdump(monkeypatch) -> None:
    monkeypatch.setattr(_sass, "find_cuobjdump", lambda: None)
    report = _fp4_sass.block_scaled_fp4_sass_check(Path("unused.so"))
    assert not report.ok and "cuobjdump not found" in report.error


# -- the NVRTC kernels' target -------------------------------------------------------------------------


def test_the_fp4_target_is_the_sm12x_family_one() -> None:
    assert fp4_target((12, 0)) == "sm_120f" and fp4_target((12, 1)) == "sm_121f"
    assert fp4_target((9, 0)) is None and fp4_target((8, 9)) is None and fp4_target((10, 0)) is None
    assert has_e2m1_cvt("sm_120f") and has_e2m1_cvt("sm_121f") and has_e2m1_cvt("sm_120a")
    assert not has_e2m1_cvt("sm_120") and not has_e2m1_cvt("sm_90") and not has_e2m1_cvt("sm_90a")


@pytest.mark.parametrize("arch, plain", [("sm_120f", "sm_120"), ("sm_120f", "sm_121"), ("sm_121f", "sm_121"),
                                         ("sm_120a", "sm_120"), ("sm_90a", "sm_90")])
def test_a_compiler_takes_the_variants_that_load_on_its_device(arch, plain) -> None:
    from mircuda.compile._compiler import _device_variant

    assert _device_variant(arch, plain) == arch


@pytest.mark.parametrize("arch, plain", [("sm_121f", "sm_120"), ("sm_120a", "sm_121"), ("sm_100f", "sm_120"),
                                         ("sm_90a", "sm_120"), ("sm_80", "sm_90"), ("sm_120", "sm_90"),
                                         ("sm_12f", "sm_120"), ("bogus", "sm_90")])
def test_a_compiler_refuses_targets_its_device_does_not_load(arch, plain) -> None:
    from mircuda.compile._compiler import _device_variant

    with pytest.raises(mc.ContractError) as info:
        _device_variant(arch, plain)
    assert info.value.argument == "arch"


@pytest.mark.parametrize("arch", ["sm_120f", "sm_121f", "sm_120a", "sm_90", "sm_120"])
def test_the_vector_kernel_decodes_with_cvt_exactly_on_the_family_targets(arch) -> None:
    report = _fp4_sass.nvrtc_decode_check(arch)
    assert report.error == ""
    assert report.expected == has_e2m1_cvt(arch) == (arch != "sm_90" and arch != "sm_120")
    assert report.ptx_cvt == report.expected
    if report.sass_cvt is not None:  # cuobjdump found: the SASS opcode too
        assert report.sass_cvt == report.expected
    assert report.ok


def test_the_block_scaled_executor_writes_alpha_first_then_calls_the_library() -> None:
    pytest.importorskip("numba")
    import struct

    u64 = ctypes.c_uint64
    launch_proto = ctypes.CFUNCTYPE(ctypes.c_int, u64, *[ctypes.c_uint] * 7, u64, u64, u64)
    library_proto = ctypes.CFUNCTYPE(ctypes.c_int, u64, u64, u64, u64, u64, u64, u64, u64, ctypes.c_float)
    events: list[tuple[Any, ...]] = []

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # type: ignore[no-untyped-def]
        pointers = (ctypes.c_uint64 * 4).from_address(params)
        raw = b"".join(ctypes.string_at(p, 8 if i < 3 else 4) for i, p in enumerate(pointers))
        events.append(("launch", f, (gx, bx), stream, raw))
        return 0

    def fake_library(plan, stream, a, b, sfa, sfb, d, alpha_device, alpha):  # type: ignore[no-untyped-def]
        events.append(("gemm", plan, stream, a, b, sfa, sfb, d, alpha_device, alpha))
        return 0

    launch, library = launch_proto(fake_launch), library_proto(fake_library)
    address = ctypes.cast(library, ctypes.c_void_p).value or 0
    execute = _fp4_cutlass.block_scaled_executor(address, 0x9A, 0xF0, 0xA1F0, stream=0x55, launch_function=launch)
    assert execute(0x55, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 0.5) == 0
    assert events == [("gemm", 0x9A, 0x55, 0x1000, 0x2000, 0x1100, 0x2100, 0x3000, 0, 0.5)]  # host alpha
    events.clear()
    assert execute(0x55, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0x4000, 0, 0.5) == 0
    assert events[0] == ("launch", 0xF0, (1, 1), 0x55, struct.pack("<QQQf", 0xA1F0, 0x4000, 0, 0.5))
    assert events[1] == ("gemm", 0x9A, 0x55, 0x1000, 0x2000, 0x1100, 0x2100, 0x3000, 0xA1F0, 0.5)  # device alpha
    events.clear()
    assert execute(0x56, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == _fp4_cutlass.INVALID_ARGUMENT
    assert execute(0x55, 0x1008, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == _fp4_cutlass.MISALIGNED
    assert execute(0x55, 0x1000, 0x1104, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == _fp4_cutlass.MISALIGNED
    assert execute(0x55, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0x4002, 0, 1.0) == _fp4_cutlass.MISALIGNED
    assert events == []


def test_cutlass_check_runs_every_nvfp4_path_of_the_device_on_shapes_it_takes() -> None:
    from mircuda.cli._cutlass_check import _fp4_cases

    lib = SimpleNamespace(block_scaled_kernels=(_kernel(), _kernel(name="sm120_nvfp4_pingpong_128x128x128_e2m1_bf16",
                                                                    family="sm120_nvfp4_pingpong")))
    h200, rtx = _fp4_cases(lib, (9, 0)), _fp4_cases(lib, (12, 0))
    assert {c[0] for c in h200} == {"fp4_gemv", "decode+dense"}
    assert {c[0] for c in rtx} == {"fp4_gemv", "decode+dense", *FP4_NAMES}
    for label, kernel, activation, layout, (m, n, k) in rtx:
        assert k % 16 == 0
        if kernel is None:
            assert (m <= 16) == (label == "fp4_gemv")
        else:
            assert _fp4_cutlass.cutlass_fp4_refusal(_kernel(), (12, 0), m, n, k, activation, layout) == ""
    nvrtc = [c for c in h200 if c[1] is None]
    assert any(c[4][2] % 64 for c in nvrtc) and {c[2] for c in nvrtc} == {"fp4", "bf16"}
    assert {c[3] for c in nvrtc} == {"linear", "tiled"}
    assert any(c[4][0] % 128 and c[4][1] % 128 and c[4][2] % 128 for c in rtx if c[1] is not None)  # partial tiles
    assert _fp4_cases(SimpleNamespace(), (12, 0)) == _fp4_cases(SimpleNamespace(block_scaled_kernels=()), (12, 0))


def test_cutlass_check_reports_the_fp4_sass(monkeypatch, capsys) -> None:
    from mircuda.cli import _cutlass_check

    monkeypatch.setattr(_sass, "find_cuobjdump", lambda: None)
    failures: list[str] = []
    out = _cutlass_check._fp4_sass(SimpleNamespace(block_scaled_kernels=(), path="x.so"), failures)
    text = capsys.readouterr().out
    assert out["library"] is None and "no block-scaled NVFP4 kernels" in text
    assert [r["arch"] for r in out["nvrtc"]] == ["sm_120f", "sm_90"] and failures == []
    assert [r["ptx_cvt"] for r in out["nvrtc"]] == [True, False]
    out = _cutlass_check._fp4_sass(SimpleNamespace(block_scaled_kernels=(_kernel(),), path="x.so"), failures)
    assert failures == ["NVFP4 SASS check of sm_120f"] and "cuobjdump not found" in capsys.readouterr().out


def test_cutlass_check_holds_the_folded_portable_path_to_its_documented_rounding() -> None:
    # epilogue="folded" rounds one operand to BF16 after folding the scales in (relative 2^-8 per element), so its
    # error grows with sum |a b|, not with FP32 accumulation alone: held to 3e-5 like the exact paths it failed on
    # the H200 at 5.4-8.8x the bound (2026-12-03, the same before this session's changes); the GPU tests' bound.
    from mircuda.cli._cutlass_check import FP4_ACCUMULATION, FP4_CUTLASS_ACCUMULATION, fp4_bound_terms

    u = 2.0**-8
    assert fp4_bound_terms("decode+dense", "folded") == (2 * u, FP4_ACCUMULATION * (1 + u) + u)
    assert fp4_bound_terms("decode+dense", "exact") == (2 * u, FP4_ACCUMULATION)
    assert fp4_bound_terms("gemv", None) == (2 * u, FP4_ACCUMULATION)
    assert fp4_bound_terms("cutlass", None) == (2 * u, FP4_CUTLASS_ACCUMULATION)
    # a wrong result (an error of the order of the magnitude) still fails the folded bound
    assert fp4_bound_terms("decode+dense", "folded")[1] < 2.0**-7
