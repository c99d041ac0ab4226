"""The blockwise FP8 kernels of the CUTLASS library without a GPU: the ABI-2 codes and kernel-info
fields, the FP8 family's CMake configuration (built alone, per arch), the family names, the scale
shapes and shape constraints of a kernel, the refusals made before the library is called, the table
of a built library (kinds kept apart at the C entry points), and the SASS check of the sm_120f FP8
kernels (QMMA)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import pytest

import mircuda as mc
from cmake_project import configure, needs_build_tools
from mircuda.matmul import _build, _fp8_sass, _library, _sass

HEADER = _build.project_dir() / "include" / "mircuda_cutlass.h"
FP8_NAMES = {"sm90_blockwise_coop_128x128x128_c1x2_e4m3_bf16": "sm90_blockwise_cooperative",
             "sm90_blockwise_pingpong_64x128x128_e4m3_bf16": "sm90_blockwise_pingpong",
             "sm120_blockwise_128x128x128_e4m3_bf16": "sm120_blockwise"}
EXPERIMENTAL_PREFIX = "sm90_blockwise_coop_"
"""The experimental variants' names (``MIRCUDA_FAMILIES=FP8_EXP``, family ``sm90_blockwise_experimental``): the
cooperative kernel's, with what changed (cluster, epilogue, C, scheduler's swizzle ``_sN`` and raster ``_alongm/n``)."""


def device_kernel(k: _library.KernelInfo) -> tuple[str, str]:
    """What tells the kernels' device functions apart: names that differ only in the persistent scheduler's runtime
    arguments (``_sN``, ``_alongm``, ``_alongn``) share one (one translation unit registers them all)."""
    return k.family, re.sub(r"_s\d+|_along[mn]", "", k.name)


def _kernel(**changes) -> _library.KernelInfo:  # type: ignore[no-untyped-def]
    base = _library.KernelInfo(7, "sm90_blockwise_coop_128x128x128_c1x2_e4m3_bf16", "sm90_blockwise_cooperative",
                               "e4m3", "bf16", (128, 128, 128), (1, 2), 0, 16, False, (90,), "cutlass",
                               "blockwise_scaled", (1, 8, 16), "f32", (1, 128, 128), ("k", "k"))
    return dataclasses.replace(base, **changes)


def test_the_header_speaks_abi_3_with_the_fp8_codes() -> None:
    text = HEADER.read_text()  # ABI 3 added the grouped NVFP4 kernels; the FP8 codes are ABI 2's, unchanged
    assert _library.ABI_VERSION == 3 and "#define MIRCUDA_CUTLASS_ABI_VERSION 3" in text
    assert 2 in _library.COMPATIBLE_ABI_VERSIONS
    assert "#define MIRCUDA_CUTLASS_E4M3 4" in text and _library.DTYPES[4] == "e4m3"
    for code, name in _library.FAMILIES.items():
        if code >= 5:
            assert f"#define MIRCUDA_CUTLASS_{name.upper()} {code}" in text
    assert "#define MIRCUDA_CUTLASS_KIND_DENSE 0" in text and "#define MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED 1" in text
    assert {0: "dense", 1: "blockwise_scaled"}.items() <= _library.KINDS.items()  # kind 2: NVFP4 (test_matmul_fp4_cutlass)
    for code, name in {0: "NO_SCALES", 1: "K_MAJOR", 2: "MN_MAJOR"}.items():
        assert f"#define MIRCUDA_CUTLASS_{name} {code}" in text
    assert {0: "", 1: "k", 2: "mn"}.items() <= _library.SCALE_MAJORS.items()
    for fn in ("mircuda_cutlass_scaled_plan_create", "mircuda_cutlass_scaled_plan_execute"):
        assert f"int {fn}(" in text


def test_the_abi_2_fields_follow_the_abi_1_struct() -> None:
    names = [f for f, _ in _library._Info._fields_]
    assert names[: names.index("archs") + 1][-1] == "archs" and names[names.index("archs") + 1] == "kind"
    assert names[-10:] == ["kind", "m_multiple", "n_multiple", "k_multiple", "scale_type", "scale_m", "scale_n",
                           "scale_k", "sfa_major", "sfb_major"]


@pytest.mark.parametrize("text, families", [("FP8", ("FP8",)), ("fp8", ("FP8",)),
                                             ("sm90_fp8_coop, SIMT;simt", ("SM90_FP8_COOP", "SIMT")),
                                             ("SM120_FP8", ("SM120_FP8",)), ("fp8,fp8_exp", ("FP8", "FP8_EXP")),
                                             ("sm90_fp8_exp_noc", ("SM90_FP8_EXP_NOC",))])
def test_family_lists_parse(text, families) -> None:
    assert _build.parse_families(text) == families


@pytest.mark.parametrize("text", ["FP16", "sm90_fp8", "sm90_coop_bf16"])
def test_unknown_families_are_refused_by_name(text) -> None:
    with pytest.raises(mc.ContractError) as info:
        _build.parse_families(text)
    assert info.value.argument == "families" and "SM90_FP8_COOP" in str(info.value)


def test_the_k_major_scale_shapes_of_a_blockwise_kernel() -> None:
    k = _kernel()
    assert k.scale_shapes(300, 1032, 1040) == ((300, 9), (9, 9))
    assert k.scale_shapes(1, 128, 128) == ((1, 1), (1, 1))
    assert _kernel(scale_major=("mn", "mn")).scale_shapes(300, 1032, 1040) == ((9, 300), (9, 9))
    with pytest.raises(mc.ContractError, match="blockwise-scaled"):
        _kernel(kind="dense").scale_shapes(1, 8, 8)


@pytest.mark.parametrize("integer", [np.int16, np.uint16, np.int32, np.uint32, np.int64], ids=lambda t: t.__name__)
def test_numpy_integer_sizes_give_the_scale_shapes_as_python_ints(integer) -> None:
    """A numpy integer M, N, K is taken as the int: ceil(M / 128) * 128 of np.int16(32767) once wrapped to -32768,
    and ceil division by negation wrapped for unsigned types (np.uint16(300) gave 65027 blocks)."""
    shapes = _kernel().scale_shapes(integer(300), integer(1032), integer(1040))
    assert shapes == ((300, 9), (9, 9)) and all(type(v) is int for shape in shapes for v in shape)
    tiled = _kernel(kind="block_scaled", scale_block=(1, 1, 16), scale_major=("tiled", "tiled"))
    m = 32767 if integer is np.int16 else 65535 if integer is np.uint16 else 2**31 - 1
    shapes = tiled.scale_shapes(integer(m), integer(200), integer(96))
    assert shapes == ((-(-m // 128) * 128, 8), (256, 8)) and all(type(v) is int for shape in shapes for v in shape)


@pytest.mark.parametrize("m, n, k, argument", [(0, 8, 8, "m"), (1, 8.0, 8, "n"), (1, 8, True, "k"),
                                                (1, np.bool_(True), 8, "n"), (-3, 8, 8, "m")])
def test_scale_shapes_refuse_sizes_that_are_not_positive_ints(m, n, k, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        _kernel().scale_shapes(m, n, k)
    assert info.value.argument == argument


def test_the_table_constraints_name_the_dimension() -> None:
    sm90, sm120 = _kernel(), _kernel(multiples=(1, 128, 128))
    assert sm90.refusal(17, 136, 272) == "" and sm90.refusal(1, 8, 16) == ""
    assert sm90.refusal(17, 130, 272) == "N = 130 is not a multiple of 8"
    assert sm90.refusal(17, 136, 200) == "K = 200 is not a multiple of 16"
    assert sm120.refusal(5, 256, 384) == ""
    assert sm120.refusal(5, 136, 272) == "N = 136 is not a multiple of 128; K = 272 is not a multiple of 128"


def test_create_scaled_plan_refuses_before_calling_the_library() -> None:
    lib = object.__new__(_library.CutlassLibrary)  # no loaded .so: a call into it would fail
    with pytest.raises(mc.ContractError) as info:
        lib.create_scaled_plan(_kernel(kind="dense"), 64, 256, 256)
    assert info.value.argument == "kernel"
    with pytest.raises(mc.ContractError) as info:
        lib.create_scaled_plan(_kernel(multiples=(1, 128, 128)), 64, 136, 256)
    assert info.value.argument == "shape" and "N = 136 is not a multiple of 128" in str(info.value)


def test_dense_kernel_infos_keep_their_defaults() -> None:
    from mircuda.matmul._vector import vector_kernels

    for k in vector_kernels():
        assert k.kind == "dense" and k.scale_block == (0, 0, 0) and k.scale_major == ("", "")


@pytest.mark.parametrize("archs, tus", [
    (("90a", "120f"), {"sm90_fp8_coop_e4m3_bf16.cu": "90a", "sm90_fp8_pingpong_e4m3_bf16.cu": "90a",
                       "sm120_fp8_e4m3_bf16.cu": "120f"}),
    (("90a",), {"sm90_fp8_coop_e4m3_bf16.cu": "90a", "sm90_fp8_pingpong_e4m3_bf16.cu": "90a"}),
    (("120f",), {"sm120_fp8_e4m3_bf16.cu": "120f"}),
])
def test_the_fp8_family_configures_alone_for_its_archs(tmp_path, archs, tus) -> None:
    needs_build_tools()
    out = configure(tmp_path, archs, ("FP8",))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = tmp_path / "build" / "gen"
    assert {p.name for p in gen.glob("*.cu")} == set(tus)
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    for name, arch in tus.items():
        text = (gen / name).read_text()
        family = name.removesuffix("_e4m3_bf16.cu").upper()
        assert f"#define MIRCUDA_{family} 1" in text and '#include "blockwise_instance.cuh"' in text
        assert f"#define MIRCUDA_ARCH_LIST {arch[:-1]}" in text
        assert f"arch=compute_{arch},code=sm_{arch}" in ninja
    assert "code=sm_90 " not in ninja and "code=sm_120 " not in ninja


def test_the_experimental_fp8_families_are_built_only_when_named(tmp_path) -> None:
    # FP8_EXP: the cooperative kernel's variants and swapped forms, one TU each for 90a; no default build and not the
    # FP8 group holds them
    needs_build_tools()
    assert not set(_build.FAMILY_GROUPS["FP8_EXP"]) & set(_build.FAMILY_GROUPS["FP8"])
    out = configure(tmp_path, ("90a",), ("FP8", "FP8_EXP"))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = tmp_path / "build" / "gen"
    want = {f"{f.lower()}_e4m3_bf16.cu" for f in _build.FAMILY_GROUPS["FP8_EXP"]}
    assert len(want) == 10 and {p.name for p in gen.glob("*.cu")} == want | {"sm90_fp8_coop_e4m3_bf16.cu",
                                                                            "sm90_fp8_pingpong_e4m3_bf16.cu"}
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    for name in want:
        text = (gen / name).read_text()
        assert f"#define MIRCUDA_{name.removesuffix('_e4m3_bf16.cu').upper()} 1" in text
        assert "#define MIRCUDA_ARCH_LIST 90" in text and '#include "blockwise_instance.cuh"' in text
    assert "code=sm_90 " not in ninja
    # and the instance header defines a kernel for each (an unknown family would hit its #error)
    instance = (_build.project_dir() / "src" / "blockwise_instance.cuh").read_text()
    assert all(f"defined(MIRCUDA_{family})" in instance for family in _build.FAMILY_GROUPS["FP8_EXP"])


def test_an_fp8_family_without_its_arch_is_refused(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("90a",), ("SM120_FP8",))
    assert out.returncode != 0 and "SM120_FP8 is compiled for 120f" in out.stdout + out.stderr


def _built_library() -> Path | None:
    """``MIRCUDA_CUTLASS_LIBRARY``, else ``.fp8lib/libmircuda_cutlass.so`` of the repository."""
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    if env and Path(env).is_file():
        return Path(env)
    local = Path(__file__).resolve().parents[1] / ".fp8lib" / "libmircuda_cutlass.so"
    return local if local.is_file() else None


def _fp8_library() -> _library.CutlassLibrary:
    path = _built_library()
    if path is None:
        pytest.skip("no built libmircuda_cutlass.so (python -m mircuda build-cutlass --families FP8)")
    lib = _library.CutlassLibrary(path)
    if not lib.scaled_kernels:
        pytest.skip(f"{path} was built without the FP8 families")
    return lib


def test_a_built_library_lists_the_fp8_kernels_with_their_metadata() -> None:
    lib = _fp8_library()
    assert all(k.kind == "dense" and k.input != "e4m3" for k in lib.kernels)
    for k in lib.scaled_kernels:
        if k.family == "sm90_blockwise_experimental":
            assert k.name.startswith(EXPERIMENTAL_PREFIX) and k.name not in FP8_NAMES and k.stages > 0, k
        else:
            assert FP8_NAMES[k.name] == k.family, k
        assert (k.input, k.output, k.kind, k.origin) == ("e4m3", "bf16", "blockwise_scaled", "cutlass")
        assert (k.scale_type, k.scale_block, k.scale_major) == ("f32", (1, 128, 128), ("k", "k"))
        assert k.alignment_bytes == 16 and not k.split_k and k.tile[2] == 128
        if k.family.startswith("sm90"):
            assert k.archs == (90,) and k.multiples == (1, 8, 16)
            assert k.runs_on((9, 0)) and not k.runs_on((12, 0))
        else:
            assert k.archs == (120,) and k.multiples == (1, 128, 128) and k.cluster == (1, 1)
            assert k.runs_on((12, 0)) and k.runs_on((12, 1)) and not k.runs_on((9, 0))
    assert lib.scaled_execute_address and lib.scaled_execute_address != lib.execute_address


def test_the_c_entry_points_keep_the_kinds_apart_without_a_gpu() -> None:
    # The kind check comes before the device query, so it answers on a machine without a GPU.
    lib = _fp8_library()
    c = lib._lib
    out = ctypes.c_void_p()
    scaled = lib.scaled_kernels[0].index
    assert c.mircuda_cutlass_plan_create(scaled, 64, 256, 256, 1, ctypes.byref(out)) == 1 and not out.value
    if lib.kernels:
        assert c.mircuda_cutlass_scaled_plan_create(lib.kernels[0].index, 64, 256, 256, ctypes.byref(out)) == 1
    assert c.mircuda_cutlass_scaled_plan_create(10_000, 64, 256, 256, ctypes.byref(out)) == 1
    assert c.mircuda_cutlass_scaled_plan_execute(None, None, None, None, None, None, None, None, 1.0, 0.0) == 1


def test_fp8_functions_are_recognized_by_their_mangled_names() -> None:
    sm120 = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10collective13"
             "CollectiveMmaINS1_47MainloopSm120TmaWarpSpecializedBlockwiseScalingILi2ELi2E"
             "NS5_IJNSA_ILi128EEESG_SG_EEENS_12float_e4m3_tENS5_IJNS5_IJlSB_lEE")
    assert _fp8_sass.is_blockwise_fp8_function(sm120)
    sm90 = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10collective13"
            "CollectiveMmaINS1_46MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8ILi5ENS5_IJNS4_1CILi1EEENSA_ILi2EEESB_"
            "EEENS1_47KernelTmaWarpSpecializedCooperativeFP8BlockwiseEEENS5_IJNSA_ILi128EEESF_SF_EEENS_12float_e4m3_tE")
    assert _fp8_sass.is_blockwise_fp8_function(sm90)
    dense = "_ZN7cutlass7Kernel2INS_4gemm6kernel13GemmUniversalINS_6half_tES5_fNS_4arch11OpClassSimtE"
    assert not _fp8_sass.is_blockwise_fp8_function(dense)


@pytest.mark.parametrize("arch, prefix", [("sm_120f", "sm120_"), ("sm_90a", "sm90_")])
def test_the_fp8_kernels_issue_fp8_tensor_core_mmas(arch, prefix) -> None:
    path = _built_library()
    if path is None or _sass.find_cuobjdump() is None:
        pytest.skip("needs a built libmircuda_cutlass.so and cuobjdump (with nvdisasm)")
    lib = _library.CutlassLibrary(path)
    count = len({device_kernel(k) for k in lib.scaled_kernels if k.family.startswith(prefix)})
    if not count:
        pytest.skip(f"{path} holds no {arch} FP8 kernel")
    report = _fp8_sass.blockwise_fp8_sass_check(path, arch)
    assert report.ok, report
    assert len(report.functions) == count and all(f.mma_count > 0 for f in report.functions)
    mma = "QMMA.16832.F32.E4M3.E4M3" if arch == "sm_120f" else "QGMMA.64x"
    assert all(any(op.startswith(mma) for op in f.opcodes) for f in report.functions), report


def test_the_sass_helpers_split_functions_and_name_the_fp8_mma_opcodes() -> None:
    text = ("\n\tFunction : _Z3onev\n  /*0010*/ QMMA.16832.F32.E4M3.E4M3 R4, R8, R12, R4 ;\n"
            "  /*0020*/ QMMA.16832.F32.E4M3.E4M3 R8, R8, R12, R8 ;\n"
            "\tFunction : _Z3twov\n  /*0010*/ QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;\n  HMMA.16816.F32 R0 ;\n")
    (one, body1), (two, body2) = _sass.sass_functions(text)
    assert (one, two) == ("_Z3onev", "_Z3twov")
    assert _fp8_sass.mma_opcodes(body1) == ["QMMA.16832.F32.E4M3.E4M3"]
    assert _fp8_sass.mma_opcodes(body2) == ["QGMMA.64x128x32.F32.E4M3.E4M3"]


def test_the_sass_check_reports_a_missing_cuobjdump(monkeypatch) -> None:
    monkeypatch.setattr(_sass, "find_cuobjdump", lambda: None)
    report = _fp8_sass.blockwise_fp8_sass_check(Path("unused.so"), "sm_90a")
    assert not report.ok and "cuobjdump not found" in report.error


def test_the_sass_check_takes_only_the_library_archs() -> None:
    with pytest.raises(mc.ContractError) as info:
        _fp8_sass.blockwise_fp8_sass_check(Path("unused.so"), "sm_120a")
    assert info.value.argument == "arch"


def test_cutlass_check_runs_fp8_shapes_each_kernel_takes() -> None:
    from mircuda.cli._cutlass_check import _fp8_shapes
    from mircuda.matmul._select import fp8_gemv_entry, fp8_mma_entry
    from test_matmul_fp8_select import TABLE

    for kernel in (*TABLE, fp8_gemv_entry(), fp8_mma_entry()):
        shapes = _fp8_shapes(kernel.family)
        assert shapes and all(not kernel.refusal(*s) for s in shapes), kernel.name
        if kernel.origin == "nvrtc":
            assert all(s[0] <= 16 for s in shapes)
        else:
            assert any(s[0] > 16 for s in shapes)
    # Partial last 128-blocks of N and K where the SM90 kernels take them.
    sm90 = [s for x in TABLE if x.family.startswith("sm90") for s in _fp8_shapes(x.family)]
    assert any(s[1] % 128 for s in sm90) and any(s[2] % 128 for s in sm90)


def test_cutlass_check_checks_the_fp8_sass_of_the_archs_the_library_holds(monkeypatch, capsys) -> None:
    from types import SimpleNamespace

    from mircuda.cli import _cutlass_check
    from test_matmul_fp8_select import TABLE

    failures: list[str] = []
    assert _cutlass_check._fp8_sass(SimpleNamespace(scaled_kernels=(), path="x.so"), failures) == []
    assert failures == [] and "no blockwise FP8 kernels" in capsys.readouterr().out
    monkeypatch.setattr(_sass, "find_cuobjdump", lambda: None)
    out = _cutlass_check._fp8_sass(SimpleNamespace(scaled_kernels=TABLE, path="x.so"), failures)
    assert [o["arch"] for o in out] == ["sm_120f", "sm_90a"]
    assert failures == ["FP8 SASS check of sm_120f", "FP8 SASS check of sm_90a"]
    assert "cuobjdump not found" in capsys.readouterr().out
