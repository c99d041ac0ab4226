"""Relocatable device code linked by nvJitLink (mc.cuda_link), offline: the linked CUBIN's ELF holds
the kernel and the device function another unit defines, unresolved externs are a LinkError naming
them, the compilers cache the link, and the compile CLI links with -rdc. No GPU needed."""

from __future__ import annotations

import re
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
    assert str(error).startswith("unresolved symbol 'never_defined' (nvJitLink failed with ERROR_INTERNAL")
    assert error.message.startswith("unresolved symbol 'never_defined'") and "\n" not in error.message
    assert error.duplicates == () and "never_defined" in error.log
    assert "broken.cu" in error.log and error.arch == "sm_90" and error.source_name == "lib+broken"


def test_the_error_log_parser_reads_each_undefined_symbol_once() -> None:
    log = ("error   : Undefined reference to 'a' in 'x.cu'\nerror   : Undefined reference to 'b' in 'y.cu'\n"
           "error   : Undefined reference to 'a' in 'y.cu'\nERROR 9: complete")
    assert _link.unresolved_symbols(log) == ("a", "b")
    assert _link.unresolved_symbols("") == ()
    lto = "ptxas fatal   : Unresolved extern function 'f'\nptxas fatal   : Unresolved extern variable 'v'\n"
    assert _link.unresolved_symbols(lto) == ("f", "v")  # ptxas' lines, forwarded by nvJitLink with LTO
    twice = ("error   : Multiple definition of 'g' in 'b.cu', first defined in 'a.cu'\n"
             "a2.cu: link error: error: Linking globals named 'h': symbol multiply defined!\n")
    assert _link.duplicate_symbols(twice) == ("g", "h") and _link.unresolved_symbols(twice) == ()


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


TWICE = mc.cuda_kernel('extern "C" __device__ int scale_of(int i) { return i; }', "lib2.cu")


@pytest.mark.parametrize("lto", [False, True])
def test_a_symbol_two_units_define_is_a_link_error_naming_it(lto, capfd) -> None:
    # nvJitLink 13.x links two CUBINs defining scale_of, returns success and prints its error to fd 2.
    with pytest.raises(mc.LinkError) as info:
        mc.link_program(mc.cuda_link([LIB, TWICE, APP], "twice", lto=lto), "sm_90")
    assert info.value.duplicates == ("scale_of",) and info.value.unresolved == ()
    assert info.value.message.startswith("symbol 'scale_of' defined more than once")
    if not lto:  # refused before nvJitLink runs, from the CUBINs' symbol tables
        assert "'scale_of' in 'lib.cu', 'lib2.cu'" in info.value.message
    assert capfd.readouterr().err == ""


def test_the_compilers_refuse_a_symbol_defined_twice_too(tmp_path) -> None:
    compiler = mc.OfflineCompiler("sm_90", mc.CompilerConfig(cache_directory=str(tmp_path)))
    with pytest.raises(mc.LinkError) as info:
        compiler.compile(mc.cuda_link([LIB, TWICE, APP]))
    assert info.value.duplicates == ("scale_of",)


def test_an_unresolved_extern_with_lto_is_named_too() -> None:
    with pytest.raises(mc.LinkError) as info:
        mc.link_program(mc.cuda_link([LIB, MISSING], "lib+broken", lto=True), "sm_90")
    assert info.value.unresolved == ("never_defined",)
    assert info.value.message.startswith("unresolved symbol 'never_defined' (nvJitLink failed with ")


def test_global_definitions_leave_out_weak_and_undefined_symbols_and_non_elf_images() -> None:
    from mircuda.compile._elf_symbols import global_definitions

    unit = mc.cuda_kernel('template <class T> __device__ T f(T x) { return x; }\n'
                          '__device__ int g(int x) { return f(x); }\n__device__ int v = 3;\n'
                          'extern __device__ int u;\n__global__ void k(int* p) { *p = g(*p) + v + u; }', "w.cu")
    program = mc.compile_program(unit, "sm_90", mc.CompileOptions(relocatable_device_code=True))
    assert sorted(global_definitions(program.image)) == ["_Z1gi", "_Z1kPi", "v"]  # not f<int> (weak), not u
    assert global_definitions(b"//PTX\n.version 8.0\n") == () and global_definitions(program.image[:80]) == ()


@pytest.mark.parametrize("call", [
    lambda: mc.compile_program(LIB, "sm_90", include_paths=["/nonexistent"]),
    lambda: mc.link_program(mc.cuda_link([LIB, APP]), "sm_90", include_paths=["/nonexistent"]),
])
def test_an_include_path_that_is_not_a_directory_is_refused_as_by_the_compilers(call) -> None:
    with pytest.raises(mc.ContractError) as info:
        call()
    assert info.value.argument == "include_paths[0]" and "an existing directory" in str(info.value)


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
    assert failed.stderr.count("\n") == 1, failed.stderr  # one line; the log only with MIRCUDA_DEBUG=1
    assert re.match(r"error: LinkError: FILE \S*lib\.cu \+ \S*broken\.cu: unresolved symbol 'never_defined'", failed.stderr)
    (tmp_path / "lib2.cu").write_text(TWICE.text)
    twice = _cli("-rdc", "lib.cu", "lib2.cu", "app.cu", "--arch", "sm_90", "-o", "twice.cubin", cwd=tmp_path)
    assert twice.returncode == 2 and twice.stderr.count("\n") == 1, twice.stderr
    assert re.match(r"error: LinkError: FILE \S*lib\.cu \+ \S*lib2\.cu \+ \S*app\.cu: symbol 'scale_of' defined "
                    r"more than once", twice.stderr)
    assert not (tmp_path / "twice.cubin").exists()
    both = _cli("-dlto", "lib.cu", "app.cu", "--arch", "sm_90", "-o", "y.cubin", cwd=tmp_path)
    assert both.returncode == 2 and "-dlto: expected -rdc as well" in both.stderr
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


def test_mircuda_debug_shows_nvjitlinks_log_of_a_failed_link(tmp_path) -> None:
    (tmp_path / "lib.cu").write_text(LIB.text)
    (tmp_path / "broken.cu").write_text(MISSING.text)
    out = subprocess.run([sys.executable, "-m", "mircuda", "compile", "-rdc", "lib.cu", "broken.cu", "--arch", "sm_90",
                          "-o", "bad.cubin"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MIRCUDA_DEBUG": "1"})
    assert out.returncode == 2 and "Traceback" in out.stderr
    assert re.search(r"Undefined reference to 'never_defined' in '\S*broken\.cu'", out.stderr)
    assert re.match(r"error: LinkError: FILE \S*lib\.cu \+ \S*broken\.cu: unresolved", out.stderr.rstrip().splitlines()[-1])
    assert "MIRCUDA_DEBUG=1 prints" not in out.stderr
