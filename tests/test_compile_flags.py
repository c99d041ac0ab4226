"""Compile flags users expect, in CompileOptions and ``python -m mircuda compile`` (no GPU needed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.compile import _fatbin

KERNEL = r'''
template <typename T> __global__ void fill(T* p, T v) { p[threadIdx.x] = v; }
extern "C" __global__ void k(float* o, float x) { int unused; o[0] = __expf(x) / x; }
'''
FATBIN_MAGIC = b"\x50\xed\x55\xba"  # 0xBA55ED50, little-endian: the fatbin container header


def nvfatbin_available() -> bool:
    try:
        _fatbin.nvfatbin_module()
    except mc.UnsupportedPlatform:
        return False
    return True


def compile_(source: str = KERNEL, **options) -> mc.CompiledProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.CompileWarning)
        return mc.compile_program(mc.cuda_kernel(source, "k.cu"), "sm_90", mc.CompileOptions(**options))


def test_each_flag_is_in_the_command_line_and_the_key() -> None:
    base = mc.CompileOptions()
    variants = [mc.CompileOptions(fast_math=True), mc.CompileOptions(line_info=True),
                mc.CompileOptions(device_debug=True), mc.CompileOptions(max_registers=32),
                mc.CompileOptions(diag_suppress=(177,)), mc.CompileOptions(ptxas_verbose=True),
                mc.CompileOptions(relocatable_device_code=True)]
    flags = ["--use_fast_math", "--generate-line-info", "--device-debug", "--maxrregcount=32", "--diag-suppress=177",
             "--ptxas-options=-v", "--relocatable-device-code=true"]
    for options, flag in zip(variants, flags):
        assert flag in options.flags("sm_90") and flag not in base.flags("sm_90")
    keys = {o.key for o in [base, *variants]}
    assert len(keys) == len(variants) + 1
    compiler = mc.OfflineCompiler("sm_90")
    source = mc.cuda_kernel(KERNEL, "k.cu")
    assert len({compiler.cache_key(source, o) for o in [base, *variants]}) == len(variants) + 1


def test_diag_suppress_is_normalized_and_checked() -> None:
    assert mc.CompileOptions(diag_suppress=[550, 177, 550]).diag_suppress == (177, 550)
    assert mc.CompileOptions(diag_suppress=[550, 177]).key == mc.CompileOptions(diag_suppress=(177, 550)).key
    for bad in ("177", (0,), (True,), (1.5,), 177):
        with pytest.raises(mc.ContractError) as info:
            mc.CompileOptions(diag_suppress=bad)
        assert info.value.argument == "diag_suppress"
    with pytest.raises(mc.ContractError) as info:
        mc.CompileOptions(device_debug="yes")
    assert info.value.argument == "device_debug"


def test_the_flags_change_what_nvrtc_builds() -> None:
    with pytest.warns(mc.CompileWarning, match="#177"):
        mc.compile_program(mc.cuda_kernel(KERNEL, "k.cu"), "sm_90")
    with warnings.catch_warnings():
        warnings.simplefilter("error", mc.CompileWarning)
        mc.compile_program(mc.cuda_kernel(KERNEL, "k.cu"), "sm_90", mc.CompileOptions(diag_suppress=(177,)))
    plain = mc.compile_program(mc.cuda_kernel(KERNEL, "k.cu"), "compute_90",
                               mc.CompileOptions(output="ptx", diag_suppress=(177,))).image
    fast = mc.compile_program(mc.cuda_kernel(KERNEL, "k.cu"), "compute_90",
                              mc.CompileOptions(output="ptx", diag_suppress=(177,), fast_math=True)).image
    assert b"div.rn.f32" in plain and b"div.rn.f32" not in fast      # fast math: approximate division
    lined = mc.compile_program(mc.cuda_kernel(KERNEL, "k.cu"), "compute_90",
                               mc.CompileOptions(output="ptx", diag_suppress=(177,), line_info=True)).image
    assert b".loc" in lined and b".loc" not in plain
    debug = compile_(device_debug=True, diag_suppress=(177,)).image
    assert b".debug_info" in debug and b".debug_info" not in compile_(diag_suppress=(177,)).image


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # The child imports the mircuda under test (this checkout), whatever the working directory.
    root = str(Path(mc.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "mircuda", "compile", *args], capture_output=True, cwd=cwd, env=env)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "k.cu").write_text(KERNEL)
    return tmp_path


def test_cli_flags_reach_nvrtc_and_the_report_is_printed_parsed(project) -> None:
    out = run("k.cu", "--arch", "sm_90", "--use_fast_math", "-lineinfo", "--maxrregcount", "32",
              "--diag-suppress", "177", "--ptxas-options=-v", "--name-expression", "fill<float>", "-o", "k.cubin",
              cwd=project)
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode()
    assert "fill<float> = _Z4fillIfEvPT_S0_" in text
    assert re.search(r"sm_90 k: \d+ registers, 0 bytes smem, \d+ bytes stack frame", text)
    assert re.search(r"sm_90 fill<float>: \d+ registers", text)
    assert "ptxas info" not in text and out.stderr == b""        # the report is parsed, not passed through
    source = mc.cuda_kernel_file(project / "k.cu", name_expressions=["fill<float>"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.CompileWarning)
        same = mc.compile_program(source, "sm_90", mc.CompileOptions(
            fast_math=True, line_info=True, max_registers=32, diag_suppress=(177,), ptxas_verbose=True))
    assert (project / "k.cubin").read_bytes() == same.image


def test_cli_device_debug_gives_debug_information(project) -> None:
    out = run("k.cu", "--arch", "sm_90", "-G", "--diag-suppress", "177", "-o", "k.cubin", cwd=project)
    assert out.returncode == 0, out.stderr.decode()
    assert b".debug_info" in (project / "k.cubin").read_bytes()


def test_cli_writes_to_standard_output(project) -> None:
    out = run("k.cu", "--arch", "sm_90", "--diag-suppress", "177", "-o", "-", cwd=project)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.startswith(b"\x7fELF") and b"standard output" in out.stderr
    assert out.stdout == compile_(diag_suppress=(177,)).image
    ptx = run("k.cu", "--arch", "compute_90", "--ptx", "--diag-suppress", "177", "-o", "-", cwd=project)
    assert ptx.returncode == 0 and b".target sm_90" in ptx.stdout and not ptx.stdout.endswith(b"\0")


def test_cli_version(project) -> None:
    out = run("--version", cwd=project)
    assert out.returncode == 0
    major, minor = mc.nvrtc_version()
    assert out.stdout.decode().startswith(f"mircuda {mc.__version__}, NVRTC {major}.{minor} ")


@pytest.mark.parametrize("args, argument", [
    (("--ptxas-options=-O3",), "--ptxas-options"),
    (("--maxrregcount", "300"), "--maxrregcount"),  # the flag, not the Python name
    (("--name-expression", "nope<int>"), "nope<int>"),
])
def test_cli_refuses_bad_flags_naming_them(project, args, argument) -> None:
    out = run("k.cu", "--arch", "sm_90", *args, "-o", "k.cubin", cwd=project)
    assert out.returncode == 2 and argument in out.stderr.decode() and b"Traceback" not in out.stderr
    assert not (project / "k.cubin").exists()


def test_cli_diag_suppress_needs_numbers(project) -> None:
    out = run("k.cu", "--arch", "sm_90", "--diag-suppress", "unused", "-o", "k.cubin", cwd=project)
    assert out.returncode == 2 and b"diagnostic numbers" in out.stderr


@pytest.mark.skipif(nvfatbin_available(), reason="nvFatbin is installed: the refusal cannot be seen")
def test_several_archs_without_nvfatbin_are_refused_before_compiling(project) -> None:
    out = run("k.cu", "--arch", "sm_90", "--arch", "sm_120", "-o", "k.fatbin", cwd=project)
    assert out.returncode == 2 and b"pip install nvidia-nvfatbin" in out.stderr and b"Traceback" not in out.stderr
    assert not (project / "k.fatbin").exists()


def test_the_refusal_names_the_install_when_the_library_is_missing(monkeypatch) -> None:
    import cuda.bindings.nvfatbin as nvfatbin

    def missing() -> None:
        raise OSError("libnvfatbin.so.13: cannot open shared object file")

    monkeypatch.setattr(nvfatbin, "version", missing)
    with pytest.raises(mc.UnsupportedPlatform, match="pip install nvidia-nvfatbin"):
        _fatbin.nvfatbin_module()
    with pytest.raises(mc.ContractError) as info:  # one target is no fatbin
        _fatbin.build_fatbin([compile_()], "k.cu")
    assert info.value.argument == "arch"


@pytest.mark.skipif(not nvfatbin_available(), reason="nvFatbin (pip install nvidia-nvfatbin) is not installed")
def test_several_archs_make_one_fatbin(project) -> None:
    out = run("k.cu", "--arch", "sm_90", "--arch", "sm_120", "--arch", "sm_90", "-o", "k.fatbin", cwd=project)
    assert out.returncode == 0, out.stderr.decode()
    image = (project / "k.fatbin").read_bytes()
    assert image[:4] == FATBIN_MAGIC and b"fatbin (CUBIN sm_90, CUBIN sm_120)" in out.stdout
    source = mc.cuda_kernel_file(project / "k.cu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mc.CompileWarning)
        cubins = [mc.compile_program(source, arch).image for arch in ("sm_90", "sm_120")]
    assert all(cubin in image for cubin in cubins)  # each CUBIN is inside, byte for byte (uncompressed)


def test_numpy_integers_are_taken_as_the_ints_they_hold() -> None:
    # a register count or a define read from a numpy array: the same options, flags and cache key as the ints
    import numpy as np

    given = mc.CompileOptions(max_registers=np.int64(32), defines={"N": np.int32(7)}, diag_suppress=(np.int16(177),))
    plain = mc.CompileOptions(max_registers=32, defines={"N": 7}, diag_suppress=(177,))
    assert given == plain and given.key == plain.key and given.flags("sm_90") == plain.flags("sm_90")
    assert type(given.max_registers) is int and given.diag_suppress == (177,)
    for bad in (np.int64(8), np.float64(32.0), True):
        with pytest.raises(mc.ContractError) as info:
            mc.CompileOptions(max_registers=bad)
        assert info.value.argument == "max_registers"
    with pytest.raises(mc.ContractError) as info:
        mc.CompileOptions(defines={"N": np.float32(1.5)})
    assert info.value.argument == "defines['N']"


@pytest.mark.parametrize("field", [{"std": ["c++17", "c++20"]}, {"output": ["cubin", "ptx"]},
                                   {"extra_flags": [["--ftz=true", "x"]]}])
def test_an_array_where_a_string_belongs_is_refused_by_name(field) -> None:
    # numpy's `in` on an array of several strings raises its own ValueError ("truth value ... ambiguous")
    import numpy as np

    (name, value), = field.items()
    given = [np.array(v) for v in value] if name == "extra_flags" else np.array(value)
    with pytest.raises(mc.ContractError) as info:
        mc.CompileOptions(**{name: given})
    assert info.value.argument == name
