"""The CUTLASS library without a GPU: its C ABI header, its CMake configuration, the architecture
list (and the refusal of targets that build printf stubs), the build cache key, the error that gives
the build command, and the kernel table of a built library when one is present."""

from __future__ import annotations

import ctypes
import glob
import importlib.resources
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mircuda as mc
from cmake_project import configure, needs_build_tools
from mircuda.matmul import _build, _library

HEADER = _build.project_dir() / "include" / "mircuda_cutlass.h"
CC = shutil.which("cc") or shutil.which("gcc")


def test_the_header_is_plain_c_and_cxx(tmp_path) -> None:
    if CC is None:
        pytest.skip("no C compiler")
    src = tmp_path / "use.c"
    src.write_text('#include "mircuda_cutlass.h"\nint main(void) { mircuda_cutlass_plan *p = 0; (void)p; '
                   "return MIRCUDA_CUTLASS_ABI_VERSION; }\n")
    for lang, std in (("c", "-std=c99"), ("c++", "-std=c++11")):
        out = subprocess.run([CC, "-x", lang, std, "-Wall", "-Werror", "-pedantic", "-fsyntax-only",
                              f"-I{HEADER.parent}", str(src)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def _c_layout(tmp_path: Path) -> dict[str, int]:
    src = tmp_path / "layout.c"
    fields = [f for f, _ in _library._Info._fields_]
    body = "".join(f'printf("{f} %zu\\n", offsetof(mircuda_cutlass_kernel_info, {f}));' for f in fields)
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "mircuda_cutlass.h"\nint main(void) {'
                   f'{body} printf("size %zu\\n", sizeof(mircuda_cutlass_kernel_info));'
                   ' printf("abi %d\\n", MIRCUDA_CUTLASS_ABI_VERSION); return 0; }\n')
    exe = tmp_path / "layout"
    subprocess.run([CC, "-std=c99", f"-I{HEADER.parent}", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}


def test_python_reads_the_kernel_info_struct_as_c_lays_it_out(tmp_path) -> None:
    if CC is None:
        pytest.skip("no C compiler")
    layout = _c_layout(tmp_path)
    for name, _ in _library._Info._fields_:
        assert getattr(_library._Info, name).offset == layout[name], name
    assert ctypes.sizeof(_library._Info) == layout["size"]
    assert layout["abi"] == _library.ABI_VERSION


def test_python_knows_the_header_codes() -> None:
    text = HEADER.read_text()
    for code, name in _library.STATUS.items():
        assert f"#define MIRCUDA_CUTLASS_{name} {code}" in text
    for code, name in _library.DTYPES.items():
        assert f"#define MIRCUDA_CUTLASS_{name.upper()} {code}" in text
    assert "#define MIRCUDA_CUTLASS_SM90_SWAPPED 3" in text and "#define MIRCUDA_CUTLASS_SIMT 0" in text


@pytest.mark.parametrize("text, archs", [("90a,120f", ("90a", "120f")), ("sm_120f", ("120f",)),
                                         (" 90a ; sm_90a ", ("90a",)), ("SM_90A 120F", ("90a", "120f"))])
def test_arch_lists_parse(text, archs) -> None:
    assert _build.parse_archs(text) == archs


@pytest.mark.parametrize("text, fix", [("90", "90a"), ("sm_90", "90a"), ("sm_120", "120f"), ("121", "120f")])
def test_targets_that_build_printf_stubs_are_refused(text, fix) -> None:
    with pytest.raises(mc.ContractError) as info:
        _build.parse_archs(f"120f,{text}")
    assert "printf stub" in str(info.value) and f"use {fix}" in str(info.value)


@pytest.mark.parametrize("text", ["", "sm_80", "100a", "120a", "90a,sm_75"])
def test_other_targets_are_refused(text) -> None:
    with pytest.raises(mc.ContractError, match="arch"):
        _build.parse_archs(text)


def test_the_environment_overrides_the_arch_list(monkeypatch) -> None:
    monkeypatch.delenv("MIRCUDA_CUDA_ARCH", raising=False)
    assert _build.default_archs() == ("90a", "120f")
    monkeypatch.setenv("MIRCUDA_CUDA_ARCH", "sm_120f")
    assert _build.default_archs() == ("120f",)
    monkeypatch.setenv("MIRCUDA_CUDA_ARCH", "sm_90")
    with pytest.raises(mc.ContractError, match="printf stub"):
        _build.default_archs()


def test_the_cache_key_covers_sources_versions_and_archs() -> None:
    base = _build.cache_key("d", "4.2.0", "13.0.88", ("90a", "120f"))
    variants = [_build.cache_key("e", "4.2.0", "13.0.88", ("90a", "120f")),
                _build.cache_key("d", "4.3.0", "13.0.88", ("90a", "120f")),
                _build.cache_key("d", "4.2.0", "13.1.0", ("90a", "120f")),
                _build.cache_key("d", "4.2.0", "13.0.88", ("90a",)),
                _build.cache_key("d", "4.2.0", "13.0.88", ("90a", "120f"), ("SIMT",))]
    assert len({base, *variants}) == 6 and base == _build.cache_key("d", "4.2.0", "13.0.88", ("90a", "120f"))
    assert len(_build.source_digest()) == 64


def _project_files(project: Path) -> list[str]:
    return sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())


def test_the_cmake_project_is_package_data_found_with_importlib_resources() -> None:
    project = _build.project_dir()
    assert project == importlib.resources.files("mircuda").joinpath("cutlass_build")
    files = _project_files(project)
    assert {"CMakeLists.txt", "include/mircuda_cutlass.h", "src/registry.cu"} <= set(files)
    # Every file of the project matches a package-data glob of pyproject.toml, so a wheel carries it.
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    globs = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["mircuda"]
    package = importlib.resources.files("mircuda")
    shipped = {os.path.relpath(f, "cutlass_build") for g in globs for f in glob.glob(g, root_dir=package)
               if f.startswith("cutlass_build/")}
    assert sorted(shipped) == files


def test_the_source_digest_covers_every_packaged_file(tmp_path) -> None:
    copy = tmp_path / "project"
    shutil.copytree(_build.project_dir(), copy)
    base = _build.source_digest()
    assert _build.source_digest(copy) == base and len(base) == 64
    digests = {base}
    for name in _project_files(copy):
        path = copy / name
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        digests.add(_build.source_digest(copy))
        path.write_bytes(original)
    assert len(digests) == len(_project_files(copy)) + 1
    assert _build.source_digest(copy) == base
    (copy / "src" / "registry.cu").rename(copy / "src" / "registry2.cu")
    assert _build.source_digest(copy) not in digests


def test_an_installation_without_the_project_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(_build.importlib.resources, "files", lambda package: tmp_path)
    with pytest.raises(mc.CutlassNotFound, match="CMakeLists.txt is missing") as info:
        _build.project_dir()
    assert "MIRCUDA_CUTLASS_LIBRARY" in str(info.value)


def test_cutlass_errors_live_in_mircuda_errors_and_keep_their_old_homes() -> None:
    assert mc.CutlassError is mc.errors.CutlassError is _library.CutlassError
    assert mc.CutlassNotFound is mc.errors.CutlassNotFound is _build.CutlassNotFound
    assert issubclass(mc.CutlassError, mc.MircudaError) and issubclass(mc.CutlassNotFound, mc.MircudaError)
    exc = _library.status_error(4, "mircuda_cutlass_plan_execute", "kernel k", 700)
    assert (exc.status, exc.name, exc.call, exc.cuda_error) == (4, "CUDA_ERROR", "mircuda_cutlass_plan_execute", 700)
    assert str(exc) == "mircuda_cutlass_plan_execute failed with CUDA_ERROR (cudaError_t 700): kernel k"


def _fake_cmake(tmp_path: Path, configure_ok: bool) -> _build.Toolchain:
    """A toolchain whose cmake configures (or not) and always fails to build, with a message."""
    cmake = tmp_path / "cmake"
    cmake.write_text("#!/bin/sh\nif [ \"$1\" = --build ]; then echo 'registry.cu(1): error: boom'; exit 1; fi\n"
                     + ("exit 0\n" if configure_ok else "echo 'CMake Error: no CUDA compiler' >&2; exit 1\n"))
    cmake.chmod(0o755)
    return _build.Toolchain(tmp_path, tmp_path, "4.2.0", Path("/bin/true"), "13.0", cmake, Path("/bin/true"))


@pytest.mark.parametrize("configure_ok, call, output", [(False, "cmake configure", "CMake Error: no CUDA compiler"),
                                                        (True, "cmake --build", "error: boom")])
def test_build_failures_raise_cutlass_error_with_the_output(monkeypatch, tmp_path, configure_ok, call,
                                                            output) -> None:
    monkeypatch.setattr(_build, "find_toolchain", lambda: _fake_cmake(tmp_path, configure_ok))
    with pytest.raises(mc.CutlassError) as info:
        _build.build(("120f",), root=tmp_path / "cache", progress=False)
    assert info.value.call == call and info.value.status is None and info.value.name == "BUILD_FAILED"
    assert output in info.value.log and output in str(info.value)
    assert not list((tmp_path / "cache").glob(f"*/{_build.LIBRARY_NAME}"))


def test_a_missing_library_error_gives_the_build_command(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("MIRCUDA_CUTLASS_LIBRARY", raising=False)
    monkeypatch.setenv("MIRCUDA_CACHE_DIR", str(tmp_path))
    with pytest.raises(mc.CutlassNotFound) as info:
        _build.find_library()
    assert "python -m mircuda build-cutlass" in str(info.value) or "pip install" in str(info.value)
    monkeypatch.setenv("MIRCUDA_CUTLASS_LIBRARY", str(tmp_path / "nowhere.so"))
    with pytest.raises(mc.CutlassNotFound, match="MIRCUDA_CUTLASS_LIBRARY"):
        _build.find_library()


def test_cmake_configures_one_translation_unit_per_kernel(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("90a", "120f"))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = sorted(p.name for p in (tmp_path / "build" / "gen").glob("*.cu")
                 if "_fp8_" not in p.name and "_nvfp4_" not in p.name and "_grouped_" not in p.name)
    families = {"sm90_coop", "sm90_pingpong", "sm90_swap", "sm90_swap64", "sm90_swap128", "sm90_coop128_streamk",
                "sm90_pingpong128", "sm90_coop192", "sm90_coop192_streamk", "sm90_coop144", "sm90_coop144_streamk",
                "sm90_swap96", "sm90_swap64x96", "sm90_coop176", "sm90_swap192", "sm90_swap64x32",
                "sm90_swap64x48", "sm90_swap64x64", "sm90_pingpong64x96", "sm90_pingpong128x96", "sm90_pingpong128x112", "sm90_swap64x32_c4x1",
                "sm90_pingpong128x144", "sm90_pingpong128x176",
                "sm80_decode", "sm80_wide", "sm80_bulk", "simt"}
    assert len(gen) == len(families) * 4
    assert {g.rsplit("_", 2)[0] for g in gen} == families
    # one TU per blockwise FP8 family (E4M3 -> BF16 only): tests/test_matmul_fp8_cutlass.py
    fp8 = {p.name for p in (tmp_path / "build" / "gen").glob("*_fp8_*.cu")}
    assert fp8 == {"sm90_fp8_coop_e4m3_bf16.cu", "sm90_fp8_pingpong_e4m3_bf16.cu", "sm120_fp8_e4m3_bf16.cu"}
    # one TU per block-scaled NVFP4 family (sm_120f only): tests/test_matmul_fp4_cutlass.py
    fp4 = {p.name for p in (tmp_path / "build" / "gen").glob("*_nvfp4_*.cu")}
    assert fp4 == {"sm120_nvfp4_coop_e2m1_bf16.cu", "sm120_nvfp4_pingpong_e2m1_bf16.cu",
                   # grouped (device-routed) NVFP4: tests/test_matmul_fp4_grouped_cutlass.py
                   "sm120_nvfp4_grouped_coop_e2m1_bf16.cu", "sm120_nvfp4_grouped_pingpong_e2m1_bf16.cu"}
    # one TU per grouped BF16 family (sm_90a only): tests/test_moe_grouped_dense.py
    dense = {p.name for p in (tmp_path / "build" / "gen").glob("sm90_grouped_*.cu")}
    assert dense == {"sm90_grouped_coop_bf16_bf16.cu", "sm90_grouped_pingpong_bf16_bf16.cu"}
    ninja = (tmp_path / "build" / "build.ninja").read_text()
    assert "arch=compute_90a,code=sm_90a" in ninja and "arch=compute_120f,code=sm_120f" in ninja
    assert "code=sm_90 " not in ninja and "code=sm_120 " not in ninja
    tu = (tmp_path / "build" / "gen" / "sm90_swap_bf16_f32.cu").read_text()
    assert "MIRCUDA_OUT float" in tu and "MIRCUDA_ARCH_LIST 90" in tu


def test_cmake_builds_only_the_sm120_kernels_for_120f(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("120f",))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = {p.name.rsplit("_", 2)[0] for p in (tmp_path / "build" / "gen").glob("*.cu")}
    assert gen == {"sm80_decode", "sm80_wide", "sm80_bulk", "simt", "sm120_fp8", "sm120_nvfp4_coop",
                   "sm120_nvfp4_pingpong", "sm120_nvfp4_grouped_coop", "sm120_nvfp4_grouped_pingpong"}


def test_cmake_refuses_stub_targets_too(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path, ("90a",), raw_archs="90;120f")
    assert out.returncode != 0 and "printf stub" in out.stdout + out.stderr


@pytest.mark.cutlass
def test_a_built_library_lists_every_family_and_type() -> None:
    # Found as the plans find it (MIRCUDA_CUTLASS_LIBRARY or the build cache); conftest.py skips this
    # test without one, or fails it under MIRCUDA_REQUIRE_CUTLASS=1.
    path = _build.find_library()
    lib = _library.CutlassLibrary(path)
    assert lib.cutlass_version == "4.2.0"
    names = [k.name for k in lib.kernels]
    assert names == sorted(names) and len(set(names)) == len(names)
    pairs = {("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32")}
    by_family: dict[str, set[tuple[str, str]]] = {}
    for k in lib.kernels:
        by_family.setdefault(k.family, set()).add((k.input, k.output))
        assert k.name.endswith(f"_{k.input}_{k.output}")
        if k.family.startswith("sm90"):
            assert k.archs == (90,) and k.alignment_bytes == 16
        if k.family == "simt":
            assert k.alignment_bytes == 2
    assert all(v == pairs for v in by_family.values())
    assert {"simt", "sm80_tensorop"} <= set(by_family)
    assert lib.execute_address


def test_sass_functions_are_classified_by_operator_class_and_input() -> None:
    from mircuda.cli._cutlass_check import classify_function

    tensorop = ("_ZN7cutlass7Kernel2INS_4gemm6kernel20DefaultGemmUniversalINS_10bfloat16_tENS_6layout8RowMajorE"
                "ELi8ES4_NS5_11ColumnMajorELS7_0ELi8EfS6_fNS_4arch15OpClassTensorOpENS")
    assert classify_function(tensorop) == ("tensorop", "bf16")
    simt = "_ZN7cutlass7Kernel2INS_4gemm6kernel13GemmUniversalINS_6half_tES5_fNS_4arch11OpClassSimtE"
    assert classify_function(simt) == ("simt", "f16")
    assert classify_function("_Z6kernelv") is None


@pytest.mark.cutlass
def test_the_sass_check_reads_a_built_library() -> None:
    from mircuda.cli._cutlass_check import sass_check
    from mircuda.matmul._sass import find_cuobjdump

    path = _build.find_library()
    if find_cuobjdump() is None:
        pytest.skip("needs cuobjdump (the CUDA toolkit or the nvidia-cuda-cuobjdump wheel)")
    report = sass_check(path)
    if report.error and report.error.startswith("no CUTLASS kernels in the sm_120f code"):
        pytest.skip(f"the library holds no sm_120f code (built with build-cutlass --arch 90a): {report.error}")
    assert report.ok, report
    assert sum(f.kind == "tensorop" for f in report.functions) == 12
    assert sum(f.kind == "simt" for f in report.functions) == 4


class _SetPdl:
    """A stand-in for the library's ``mircuda_cutlass_plan_set_pdl``: answers ``status``, records its calls."""

    def __init__(self, status: int) -> None:
        self.status, self.calls = status, []

    def mircuda_cutlass_plan_set_pdl(self, plan: int, enable: int) -> int:
        self.calls.append((plan, enable))
        return self.status

    def mircuda_cutlass_last_cuda_error(self) -> int:
        return 0


def _stand_in_library(status: int, has_pdl: bool = True) -> tuple[_library.CutlassLibrary, _SetPdl]:
    lib = object.__new__(_library.CutlassLibrary)
    raw = _SetPdl(status)
    lib._lib, lib.has_pdl = raw, has_pdl
    return lib, raw


def test_set_pdl_says_whether_the_kernel_now_launches_programmatically() -> None:
    lib, raw = _stand_in_library(_library.NOT_IMPLEMENTABLE)
    assert lib.set_pdl(7, True) is False  # a kernel built without grid dependency control
    lib, raw = _stand_in_library(0)
    assert lib.set_pdl(7, True) is True and lib.set_pdl(7, False) is False
    assert raw.calls == [(7, 1), (7, 0)]
    lib, raw = _stand_in_library(0, has_pdl=False)  # a library from before the entry point
    assert lib.set_pdl(7, True) is False and raw.calls == []
    lib, _ = _stand_in_library(1)  # INVALID_ARGUMENT: a plan of another kind
    with pytest.raises(mc.CutlassError, match="plan_set_pdl"):
        lib.set_pdl(7, True)


@pytest.mark.parametrize("plan, on, argument", [(1.5, True, "plan"), ("7", True, "plan"), (True, True, "plan"),
                                                (0, True, "plan"), (-1, False, "plan"), (1 << 64, True, "plan"),
                                                ((1 << 64) + 7, False, "plan"), (7, "no", "on"),
                                                (7, 1, "on"), (7, None, "on")])
def test_set_pdl_refuses_what_is_not_a_plan_handle_or_a_bool_before_calling(plan, on, argument) -> None:
    lib, raw = _stand_in_library(0)
    with pytest.raises(mc.ContractError) as info:
        lib.set_pdl(plan, on)
    assert info.value.argument == argument and raw.calls == []


@pytest.mark.cutlass
def test_the_sm90_dense_and_blockwise_kernels_wait_for_the_previous_grid() -> None:
    # DenseMatmulPlan and BlockwiseFp8Plan launch the SM90 kernels (dense with the persistent and, since 2026-12-03,
    # the stream-K scheduler, mircuda's StreamKGdcScheduler; the blockwise FP8 cooperative and ping-pong ones, whose
    # mainloop is mircuda's AuxWaitsMainloop) with programmatic dependent launch, so each must hold
    # griddepcontrol.wait (SASS ACQBULK: its producer warps wait before they load) and launch_dependents (PREEXIT);
    # so must the cooperative FP8 plan's SFA copy, launched so before its GEMM, and the stream-K kernels' flag zeroing
    # (zero_stream_k_flags). The experimental blockwise families
    # (a build with FP8_EXP) are built without them and never launched so.
    from mircuda.matmul._sass import disassemble, find_cuobjdump, sass_functions

    path = _build.find_library()
    if find_cuobjdump() is None:
        pytest.skip("needs cuobjdump (the CUDA toolkit or the nvidia-cuda-cuobjdump wheel)")
    sass, error = disassemble(path, "sm_90a")
    if error:
        pytest.skip(f"no sm_90a code to read: {error}")
    functions = sass_functions(sass)
    scheduled = [(n, b) for n, b in functions if "PersistentScheduler" in n or "StreamKScheduler" in n]
    blockwise = [(n, b) for n, b in scheduled if "Blockwise" in n]
    waiting = [(n, b) for n, b in scheduled if "Blockwise" not in n]
    waiting += [(n, b) for n, b in blockwise if "AuxWaitsMainloop" in n]
    plain = [(n, b) for n, b in blockwise if "AuxWaitsMainloop" not in n]
    assert any("StreamKSchedulerGdc" in n for n, _ in waiting)
    assert any("Cooperative" in n for n, _ in waiting if "Blockwise" in n)
    assert any("Pingpong" in n for n, _ in waiting if "Blockwise" in n)
    assert [n[:120] for n, b in waiting if "ACQBULK" not in b or "PREEXIT" not in b] == []
    assert [n[:120] for n, b in plain if "ACQBULK" in b] == []
    # each TU has its own copy of the (static) SFA copy kernel; the cooperative plan's waits and triggers
    assert any("ACQBULK" in b and "PREEXIT" in b for n, b in functions if "sfa_to_m_major" in n)
    # so has each stream-K TU of the kernel that zeroes its flags before the GEMM, in place of a memset: it waits for
    # the grid before (which may still read them) and lets the GEMM launch
    zeroing = [(n, b) for n, b in functions if "zero_stream_k_flags" in n]
    assert zeroing, "no zero_stream_k_flags kernel: the stream-K GEMMs would follow a memset no launch overlaps"
    assert [n[:120] for n, b in zeroing if "ACQBULK" not in b or "PREEXIT" not in b] == []


def _pytest(node: str, **env: str) -> subprocess.CompletedProcess[str]:
    tests = Path(__file__).resolve().parent
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           f"{tests / 'test_matmul_cutlass.py'}::{node}"], capture_output=True, text=True,
                          env=full, cwd=tests.parent)


def test_a_missing_library_skips_cutlass_tests_and_fails_them_when_required(tmp_path) -> None:
    node = "test_a_built_library_lists_every_family_and_type"
    missing = {"MIRCUDA_CUTLASS_LIBRARY": str(tmp_path / "nowhere.so")}
    skipped = _pytest(node, **missing, MIRCUDA_REQUIRE_CUTLASS="0")
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    required = _pytest(node, **missing, MIRCUDA_REQUIRE_CUTLASS="1")
    assert required.returncode == 1 and "MIRCUDA_REQUIRE_CUTLASS=1 but no CUTLASS library" in required.stdout, (
        required.stdout)


def test_an_sm90_dense_family_without_90a_is_refused(tmp_path) -> None:
    # before, --arch 120f with SM90_COOP192 configured and compiled sm_90a code the build had not asked for
    needs_build_tools()
    out = configure(tmp_path, ("120f",), ("SM90_COOP192",))
    assert out.returncode != 0 and "SM90_COOP192 is compiled for 90a" in out.stdout + out.stderr


STAGES_PROGRAM = r"""
#include <cstdio>
#include "sm90.cuh"
using namespace cute;
using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Pingpong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingpongEpi = cutlass::epilogue::TmaWarpSpecialized;
template <class Out, class Tile, class Cluster, bool IsCoop, class Scheduler, bool Swapped>
void show(const char* family, const char* out) {
  using C = mircuda::sm90::Config<cutlass::bfloat16_t, Out, Tile, Cluster, std::conditional_t<IsCoop, Coop, Pingpong>,
                                  std::conditional_t<IsCoop, CoopEpi, PingpongEpi>, Scheduler, Swapped>;
  std::printf("%s %s %d %d\n", family, out, C::kBuilderStages, int(C::kNarrowEpilogue));
}
template <class Tile, class Cluster, bool IsCoop, class Scheduler, bool Swapped>
void both(const char* family) {
  show<cutlass::bfloat16_t, Tile, Cluster, IsCoop, Scheduler, Swapped>(family, "bf16");
  show<float, Tile, Cluster, IsCoop, Scheduler, Swapped>(family, "f32");
}
int main() {
  using SK = cutlass::gemm::StreamKScheduler;
  using PS = cutlass::gemm::PersistentScheduler;
  both<Shape<_128, _64, _128>, Shape<_1, _1, _1>, true, SK, true>("swap_128x64x128");
  both<Shape<_128, _32, _128>, Shape<_1, _1, _1>, true, SK, true>("swap_128x32x128");
  both<Shape<_128, _128, _64>, Shape<_1, _1, _1>, true, SK, true>("swap_128x128x64");
  both<Shape<_128, _192, _64>, Shape<_4, _1, _1>, true, SK, true>("swap_128x192x64_c4x1");
  both<Shape<_128, _128, _64>, Shape<_1, _1, _1>, true, SK, false>("coop_128x128x64_streamk");
  both<Shape<_128, _256, _64>, Shape<_2, _1, _1>, true, PS, false>("coop_128x256x64_c2x1");
  both<Shape<_128, _192, _64>, Shape<_1, _1, _1>, true, PS, false>("coop_128x192x64");
  both<Shape<_128, _144, _64>, Shape<_1, _1, _1>, true, PS, false>("coop_128x144x64");
  both<Shape<_64, _128, _64>, Shape<_1, _1, _1>, false, PS, false>("pingpong_64x128x64");
  both<Shape<_64, _64, _64>, Shape<_2, _1, _1>, false, PS, true>("swap_pingpong_64x64x64_c2x1");
}
"""


def test_the_sm90_epilogue_tile_gives_the_mainloop_its_stage_back(tmp_path) -> None:
    """``sm90::Config`` narrows CUTLASS's automatic epilogue tile to 16 columns for a cooperative kernel left with 4
    mainloop stages or fewer, where that frees the shared memory of one more (the collective builder's
    StageCountAutoCarveout), e.g. the swapped 128x64x128 split-K kernel's FP32 output: 3 stages with the automatic
    tile, 4 as with BF16. Host code only, compiled here (about 30 s on two cores); skips without nvcc or the CUTLASS
    headers."""
    try:
        nvcc = _build._find_nvcc()
        include, util, _ = _build._cutlass_headers()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    src = tmp_path / "stages.cu"
    src.write_text(STAGES_PROGRAM)
    exe = tmp_path / "stages"
    built = subprocess.run([str(nvcc), "-O0", "-std=c++17", "--expt-relaxed-constexpr", "-arch=sm_90a",
                            f"-I{_build.project_dir() / 'include'}", f"-I{_build.project_dir() / 'src'}",
                            f"-I{include}", f"-I{util}", "-o", str(exe), str(src)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    stages = {(f, o): (int(s), n == "1") for f, o, s, n in (line.split() for line in lines if line)}
    # (family, output): (mainloop stages, narrow epilogue tile); the comments give the automatic tile's stages where
    # the narrow one was taken, and why it was not where it would add a stage
    assert stages == {
        ("swap_128x64x128", "bf16"): (4, False), ("swap_128x64x128", "f32"): (4, True),  # 3
        ("swap_128x32x128", "bf16"): (5, False), ("swap_128x32x128", "f32"): (5, True),  # 4
        ("swap_128x128x64", "bf16"): (6, False), ("swap_128x128x64", "f32"): (5, False),  # 6 narrow: has 5 already
        ("swap_128x192x64_c4x1", "bf16"): (5, True), ("swap_128x192x64_c4x1", "f32"): (4, False),  # 4
        ("coop_128x128x64_streamk", "bf16"): (6, False), ("coop_128x128x64_streamk", "f32"): (5, False),  # as swapped
        ("coop_128x256x64_c2x1", "bf16"): (4, False), ("coop_128x256x64_c2x1", "f32"): (4, True),  # 3
        ("coop_128x192x64", "bf16"): (5, True), ("coop_128x192x64", "f32"): (4, False),  # 4
        ("coop_128x144x64", "bf16"): (6, False), ("coop_128x144x64", "f32"): (5, False),
        ("pingpong_64x128x64", "bf16"): (8, False), ("pingpong_64x128x64", "f32"): (8, False),  # 9 narrow: ping-pong
        ("swap_pingpong_64x64x64_c2x1", "bf16"): (13, False), ("swap_pingpong_64x64x64_c2x1", "f32"): (12, False),
    }
