"""Relocatable device code linked by nvJitLink (mc.cuda_link), offline: the linked CUBIN's ELF holds
the kernel and the device function another unit defines, unresolved externs are a LinkError naming
them, the compilers cache the link, and the compile CLI links with -rdc. No GPU needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mircuda as mc
from cubin import arch_sm, cubin_sm, elf_sections, elf_symbols
from mircuda.compile import _link

ROOT = Path(__file__).resolve().parents[1]
FUNC, DEFINED = 2, True  # STT_FUNC

LIB = mc.cuda_kernel(r'''
extern "C" __device__ int scale_of(int i) { return 3 * i + 1; }
extern "C" __device__ int bias = 7;
''', "lib.cu")
APP = mc.cuda_kernel(r'''
extern "C" __device__ int scale_of(int i);
extern "C" __device__ int bias;
extern "C" __global__ void apply(int* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = scale_of(p[i]) + bias;
}''', "app.cu")
MISSING = mc.cuda_kernel(r'''
extern "C" __device__ int never_defined(int i);
extern "C" __global__ void broken(int* p) { p[threadIdx.x] = never_defined(p[threadIdx.x]); }
''', "broken.cu")
TEMPLATE = mc.cuda_kernel(r'''
extern "C" __device__ int scale_of(int i);
template <typename T> __global__ void apply_t(T* p) { p[threadIdx.x] = T(scale_of(int(p[threadIdx.x]))); }
''', "template.cu", name_expressions=["apply_t<int>"])


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
def test_two_units_link_into_one_cubin_holding_the_kernel_and_the_extern_function(arch) -> None:
    unit = mc.compile_program(APP, arch, mc.CompileOptions(relocatable_device_code=True))
    assert elf_symbols(unit.image)["scale_of"] == (FUNC, False)   # the unit alone leaves it undefined
    program = mc.link_program(mc.cuda_link([LIB, APP], "lib+app"), arch)
    assert (program.arch, program.output, program.symbols) == (arch, "cubin", ())
    assert cubin_sm(program.image) == arch_sm(arch)
    symbols = elf_symbols(program.image)
    assert symbols["apply"] == symbols["scale_of"] == (FUNC, DEFINED)
    assert symbols["bias"][1] == DEFINED
    assert {".text.apply", ".text.scale_of"} <= set(elf_sections(program.image))


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
def test_link_time_optimization_inlines_the_other_units_function(arch) -> None:
    options = mc.CompileOptions(ptxas_verbose=True)
    separate = mc.link_program(mc.cuda_link([LIB, APP], "n"), arch, options)
    optimized = mc.link_program(mc.cuda_link([LIB, APP], "n", lto=True), arch, options)
    assert cubin_sm(optimized.image) == arch_sm(arch)
    symbols = elf_symbols(optimized.image)
    assert symbols["apply"] == (FUNC, DEFINED) and symbols["bias"][1] == DEFINED
    assert "scale_of" not in symbols and ".text.scale_of" not in elf_sections(optimized.image)  # inlined
    # ptxas ran inside nvJitLink: its report is in the program's log
    assert optimized.resource_usage()["apply"].registers < separate.resource_usage()["apply"].registers


def test_the_lto_link_takes_the_math_flags_and_the_report_flag() -> None:
    flags = _link._linker_options("sm_90", mc.CompileOptions(fast_math=True, extra_flags=("--fmad=false",),
                                                              max_registers=32, ptxas_verbose=True), True)
    assert flags == ["-arch=sm_90", "-maxrregcount=32", "-lto", "-ftz=1", "-prec-div=0", "-prec-sqrt=0", "-fma=1",
                     "-fma=0", "-Xptxas=-v"]
    assert _link._linker_options("sm_90", mc.CompileOptions(fast_math=True, ptxas_verbose=True), False) == [
        "-arch=sm_90"]


def test_lto_with_an_nvjitlink_older_than_nvrtc_is_refused_before_compiling(monkeypatch) -> None:
    monkeypatch.setattr(_link, "nvjitlink_version", lambda: (12, 9))
    with pytest.raises(mc.UnsupportedPlatform, match="older nvJitLink 12.9"):
        mc.link_program(mc.cuda_link([LIB, APP], lto=True), "sm_90")
    assert mc.link_program(mc.cuda_link([LIB, APP]), "sm_90").image[:4] == b"\x7fELF"  # CUBINs still link


def test_an_unresolved_extern_is_a_link_error_naming_it() -> None:
    with pytest.raises(mc.LinkError) as info:
        mc.link_program(mc.cuda_link([LIB, MISSING], "lib+broken"), "sm_90")
    error = info.value
    assert isinstance(error, mc.CompileError)
    assert error.unresolved == ("never_defined",)
    assert "undefined: 'never_defined'" in str(error) and "never_defined" in error.log
    assert "broken.cu" in error.log and error.arch == "sm_90" and error.source_name == "lib+broken"


def test_the_error_log_parser_reads_each_undefined_symbol_once() -> None:
    log = ("error   : Undefined reference to 'a' in 'x.cu'\nerror   : Undefined reference to 'b' in 'y.cu'\n"
           "error   : Undefined reference to 'a' in 'y.cu'\nERROR 9: complete")
    assert _link.unresolved_symbols(log) == ("a", "b")
    assert _link.unresolved_symbols("") == ()


def test_a_unit_nvrtc_rejects_is_a_compile_error_naming_the_unit() -> None:
    bad = mc.cuda_kernel('extern "C" __global__ void k() { undeclared_name; }', "bad_unit.cu")
    with pytest.raises(mc.CompileError) as info:
        mc.link_program(mc.cuda_link([LIB, bad]), "sm_90")
    assert not isinstance(info.value, mc.LinkError) and info.value.source_name == "bad_unit.cu"


def test_the_link_is_cached_in_memory_and_on_disk(tmp_path) -> None:
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    first = mc.OfflineCompiler("sm_90", config)
    linked = mc.cuda_link([LIB, APP], "lib+app")
    program = first.compile(linked)
    assert first.compile(mc.cuda_link([LIB, APP], "lib+app")) is program
    assert first.cache_stats().compilations == 1 and first.cache_stats().memory_hits == 1
    again = mc.OfflineCompiler("sm_90", config)
    assert again.compile(linked) == program
    assert again.cache_stats().persistent_hits == 1 and again.cache_stats().compilations == 0
    assert len(list(tmp_path.glob("*.mcm"))) == 1


def test_the_key_covers_every_unit_their_order_the_options_and_the_linker_version(monkeypatch) -> None:
    compiler = mc.OfflineCompiler("sm_90")
    key = compiler.cache_key(mc.cuda_link([LIB, APP], "n"))
    edited = mc.cuda_kernel(LIB.text.replace("3 * i", "5 * i"), LIB.name)
    others = [compiler.cache_key(mc.cuda_link([edited, APP], "n")),
              compiler.cache_key(mc.cuda_link([APP, LIB], "n")),
              compiler.cache_key(mc.cuda_link([LIB, APP], "n"), mc.CompileOptions(fast_math=True)),
              compiler.cache_key(LIB), compiler.cache_key(APP),
              compiler.cache_key(mc.cuda_link([LIB, APP], "n", lto=True)),
              mc.OfflineCompiler("sm_120f").cache_key(mc.cuda_link([LIB, APP], "n"))]
    assert len({key, *others}) == len(others) + 1
    from mircuda.compile import _compiler

    monkeypatch.setattr(_compiler, "nvjitlink_version", lambda: (99, 0))
    assert compiler.cache_key(mc.cuda_link([LIB, APP], "n")) != key


def test_a_header_of_one_unit_is_in_the_key(tmp_path) -> None:
    header = tmp_path / "factor.h"
    header.write_text("#define FACTOR 3\n")
    lib = mc.cuda_kernel('#include "factor.h"\nextern "C" __device__ int scale_of(int i) { return FACTOR * i; }\n',
                         str(tmp_path / "lib.cu"))
    compiler = mc.OfflineCompiler("sm_90", mc.CompilerConfig(cache_directory=str(tmp_path / "cache")))
    before = compiler.cache_key(mc.cuda_link([lib, APP], "n"))
    header.write_text("#define FACTOR 4\n")
    assert compiler.cache_key(mc.cuda_link([lib, APP], "n")) != before


def test_name_expressions_of_a_unit_are_kept_and_survive_the_cache(tmp_path) -> None:
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    linked = mc.cuda_link([LIB, TEMPLATE], "lib+template")
    program = mc.OfflineCompiler("sm_90", config).compile(linked)
    (expression, lowered), = program.symbols
    assert expression == "apply_t<int>" and elf_symbols(program.image)[lowered] == (FUNC, DEFINED)
    again = mc.OfflineCompiler("sm_90", config)
    assert again.compile(linked).symbols == program.symbols and again.cache_stats().persistent_hits == 1


def test_a_relocatable_program_links_for_its_own_target_only() -> None:
    lib = mc.compile_program(LIB, "sm_90", mc.CompileOptions(relocatable_device_code=True))
    program = mc.link_program(mc.cuda_link([lib, APP]), "sm_90")
    assert elf_symbols(program.image)["apply"] == (FUNC, DEFINED)
    with pytest.raises(mc.ContractError) as info:
        mc.link_program(mc.cuda_link([lib, APP]), "sm_120f")
    assert info.value.argument == "sources[0]" and "sm_90" in str(info.value)


def test_the_ptxas_report_of_each_unit_covers_the_linked_kernels() -> None:
    program = mc.link_program(mc.cuda_link([LIB, APP]), "sm_90", mc.CompileOptions(ptxas_verbose=True))
    usage = program.resource_usage()
    assert list(usage) == ["apply"] and usage["apply"].registers > 0


@pytest.mark.parametrize("make, argument", [
    (lambda: mc.cuda_link([]), "sources"),
    (lambda: mc.cuda_link(LIB), "sources"),  # type: ignore[arg-type]
    (lambda: mc.cuda_link([LIB, "x.cu"]), "sources[1]"),  # type: ignore[list-item]
    (lambda: mc.cuda_link([LIB, APP, LIB]), "sources[2]"),
    (lambda: mc.cuda_link([TEMPLATE, mc.cuda_kernel(TEMPLATE.text, "other.cu", name_expressions=["apply_t<int>"])]),
     "sources[1]"),
    (lambda: mc.cuda_link([LIB], name=""), "name"),
    (lambda: mc.cuda_link([LIB], lto=1), "lto"),
    (lambda: mc.link_program(mc.cuda_link([LIB, APP]), "sm_90", mc.CompileOptions(output="ptx")), "output"),
    (lambda: mc.link_program(mc.cuda_link([LIB, APP]), "compute_90"), "arch"),
    (lambda: mc.link_program(LIB, "sm_90"), "source"),  # type: ignore[arg-type]
])
def test_bad_links_are_refused_by_name(make, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        make()
    assert info.value.argument == argument


def test_without_nvjitlink_the_link_says_how_to_install_it(monkeypatch) -> None:
    from cuda.bindings import nvjitlink

    def missing() -> None:
        raise RuntimeError("Failure finding \"libnvJitLink.so.13\"")

    monkeypatch.setattr(nvjitlink, "version", missing)
    with pytest.raises(mc.UnsupportedPlatform, match="pip install nvidia-nvjitlink"):
        mc.link_program(mc.cuda_link([LIB, APP]), "sm_90")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mircuda", "compile", *args], cwd=cwd, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_cli_links_several_files_with_rdc(tmp_path) -> None:
    (tmp_path / "lib.cu").write_text(LIB.text)
    (tmp_path / "app.cu").write_text(APP.text)
    (tmp_path / "broken.cu").write_text(MISSING.text)
    done = _cli("-rdc", "lib.cu", "app.cu", "--arch", "sm_90", "-o", "out.cubin", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "linked by nvJitLink" in done.stdout
    image = (tmp_path / "out.cubin").read_bytes()
    assert cubin_sm(image) == 90 and elf_symbols(image)["apply"] == elf_symbols(image)["scale_of"] == (FUNC, DEFINED)
    failed = _cli("-rdc", "lib.cu", "broken.cu", "--arch", "sm_90", "-o", "bad.cubin", cwd=tmp_path)
    assert failed.returncode == 2 and "LinkError" in failed.stderr and "'never_defined'" in failed.stderr
    assert not (tmp_path / "bad.cubin").exists()
    plain = _cli("lib.cu", "app.cu", "--arch", "sm_90", "-o", "x.cubin", cwd=tmp_path)
    assert plain.returncode == 2 and "FILE: expected one file, or several with -rdc" in plain.stderr
    ptx = _cli("-rdc", "lib.cu", "app.cu", "--arch", "compute_90", "--ptx", "-o", "x.ptx", cwd=tmp_path)
    assert ptx.returncode == 2 and "-rdc: expected CUBIN output" in ptx.stderr
    lto = _cli("-rdc", "-dlto", "lib.cu", "app.cu", "--arch", "sm_120f", "-o", "lto.cubin", cwd=tmp_path)
    assert lto.returncode == 0 and "linked by nvJitLink, LTO" in lto.stdout, lto.stderr
    image = (tmp_path / "lto.cubin").read_bytes()
    assert cubin_sm(image) == 120 and "apply" in elf_symbols(image) and "scale_of" not in elf_symbols(image)
    alone = _cli("-dlto", "lib.cu", "--arch", "sm_90", "-o", "y.cubin", cwd=tmp_path)
    assert alone.returncode == 2 and "-dlto: expected -rdc as well" in alone.stderr
