"""Every fault a fresh user found, as a test with the right value: bad input fails loudly, by name."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import mircuda as mc
from cubin import cubin_sm
from gpu_probe import gpu_unavailable_reason
from mircuda.dtypes import dtype_info


class FakeContext:
    _closed = True
    _handle = 1


def packer(**params):
    return mc.ArgumentPacker(mc.cuda_export("k", **params), FakeContext())


@pytest.mark.parametrize("spec", [None, float, int, complex, "float"])
def test_types_without_a_width_are_not_element_types(spec) -> None:
    with pytest.raises(mc.ContractError):
        mc.cuda_export("k", x=mc.DeviceBuffer[spec])
    with pytest.raises(mc.ContractError):
        mc.cuda_export("k", x=spec)


def test_dtype_names_and_big_endian() -> None:
    assert dtype_info("f32").name == "f32" and dtype_info("bf16").name == "bf16"
    with pytest.raises(mc.ContractError, match="big-endian"):
        dtype_info(">f4")


@pytest.mark.parametrize("dtype, value, bits", [
    (mc.bf16, 1 + 2**-8 + 2**-30, 0x3F81),   # just above the tie: rounds up (no double rounding)
    (mc.bf16, 1 + 2**-8, 0x3F80),            # the tie: to even
    (mc.bf16, float("nan"), 0x7FC0),
    (mc.bf16, float("-inf"), 0xFF80),
    (mc.e4m3, 1 + 2**-4 + 2**-40, 0x39),
    (mc.e4m3, 448.0, 0x7E),
    (mc.e4m3, -0.0, 0x80),
    (mc.e2m1, 0.25, 0x0),                    # tie between 0 and 0.5: to even
    (mc.e2m1, 5.0, 0x6),                     # tie between 4 and 6: to even (6)
    (mc.e2m1, -6.0, 0xF),
])
def test_narrow_floats_round_to_nearest_even_exactly(dtype, value, bits) -> None:
    width = "<H" if dtype is mc.bf16 else "<B"
    assert packer(v=dtype).pack(value) == struct.pack(width, bits)


@pytest.mark.parametrize("dtype, value", [
    (mc.e2m1, float("nan")), (mc.e2m1, 7.0), (mc.e2m1, float("inf")),
    (mc.e4m3, 1000.0), (mc.e4m3, float("inf")),
    (mc.bf16, 1e300), (mc.f32, 1e39), (mc.f16, 1e6),
    (mc.f32, 10**400), (mc.f64, 10**400),
])
def test_values_a_type_cannot_hold_are_refused(dtype, value) -> None:
    with pytest.raises(mc.ContractError, match="'v'"):
        packer(v=dtype).pack(value)


def test_f32_keeps_infinities_and_nan() -> None:
    p = packer(v=mc.f32)
    assert p.pack(float("inf")) == struct.pack("<f", float("inf"))
    assert np.isnan(struct.unpack("<f", p.pack(float("nan")))[0])


def test_wrong_argument_counts_are_contract_errors() -> None:
    p = packer(x=mc.f32, n=mc.i32)
    with pytest.raises(mc.ContractError, match="2 arguments"):
        p.pack(1.0, 2, 3)
    with pytest.raises(mc.ContractError, match="unknown keyword argument 'y'"):
        p.pack(1.0, 2, y=3)
    with pytest.raises(mc.ContractError, match="'n'.*missing"):
        p.pack(1.0)


@pytest.mark.parametrize("name", ["1x", "a b", "for", "é"])
def test_parameter_names_must_be_identifiers(name) -> None:
    with pytest.raises(mc.ContractError):
        mc.cuda_export("k", **{name: mc.f32})


@pytest.mark.parametrize("symbol", ["", "a b", "k\0x", "1k", 3])
def test_symbols_must_be_c_identifiers(symbol) -> None:
    with pytest.raises(mc.ContractError, match="symbol"):
        mc.cuda_export(symbol)


def test_nested_access_markers_are_refused() -> None:
    with pytest.raises(mc.ContractError):
        mc.In[mc.Out[mc.DeviceBuffer[mc.f32]]]
    assert repr(mc.cuda_export("k")) == "cuda_export('k')"


def test_sources_with_nul_or_unencodable_text_are_refused() -> None:
    with pytest.raises(mc.ContractError, match="NUL"):
        mc.cuda_kernel('extern "C" __global__ void k() {}\0 junk')
    with pytest.raises(mc.ContractError, match="UTF-8"):
        mc.cuda_kernel("// \udc80")
    with pytest.raises(mc.ContractError, match="name"):
        mc.cuda_kernel("", "")


@pytest.mark.parametrize("paths", ["/tmp", (None,), ("/tmp\0x",), b"/tmp"])
def test_include_paths_are_directories_never_flags(paths) -> None:
    with pytest.raises(mc.ContractError, match="include_paths"):
        mc.compile_program(mc.cuda_kernel('extern "C" __global__ void k() {}'), "sm_90", None, paths)


def test_an_include_path_cannot_smuggle_a_flag(tmp_path, monkeypatch) -> None:
    # Each path becomes --include-path=<path>: a "flag" is only a strange directory name (which must
    # exist: compile_program refuses a missing include root, as CompilerConfig does).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "--gpu-architecture=sm_80").mkdir()
    prog = mc.compile_program(mc.cuda_kernel('extern "C" __global__ void k() {}'), "sm_90", None,
                              ("--gpu-architecture=sm_80",))
    assert prog.arch == "sm_90" and cubin_sm(prog.image) == 90  # what NVRTC built, not the echo


@pytest.mark.parametrize("arch", ["sm_90\n", "sm_80a", "sm_90f", "sm_090", "sm_\u0669\u0660"])
def test_malformed_or_impossible_targets_are_contract_errors(arch) -> None:
    with pytest.raises(mc.ContractError, match="arch"):
        mc.compile_program(mc.cuda_kernel('extern "C" __global__ void k() {}'), arch)


@pytest.mark.parametrize("defines", [None, {"X\n": 1}, 3])
def test_bad_defines_are_contract_errors(defines) -> None:
    with pytest.raises(mc.ContractError, match="defines"):
        mc.CompileOptions(defines=defines)


def test_nvrtc_warnings_are_surfaced() -> None:
    src = mc.cuda_kernel('extern "C" __global__ void k(int* o) { int unused; o[0] = 1; }', "warn.cu")
    with pytest.warns(mc.CompileWarning, match="warn.cu"):
        prog = mc.compile_program(src, "sm_90", mc.CompileOptions(extra_flags=("--ftz=true", "--ftz=false")))
    assert prog.log


def test_cccl_headers_are_on_the_include_path() -> None:
    src = mc.cuda_kernel('#include <cuda/std/cstdint>\n'
                         'extern "C" __global__ void k(cuda::std::int64_t* o) { o[0] = 1; }')
    assert mc.compile_program(src, "sm_90").image


def test_numpy_integers_work_wherever_ints_do() -> None:
    c = mc.LaunchConfig(np.int64(4), (np.int32(32),), np.uint32(0))
    assert c.grid == (4, 1, 1) and type(c.grid[0]) is int
    assert mc.LaunchConfig.for_elements(np.int64(1000), np.int64(256)).grid == (4, 1, 1)
    with pytest.raises(mc.LaunchConfigError):
        mc.LaunchConfig(True, 32)


@pytest.mark.parametrize("cls", [mc.Stream, mc.MemoryPool, mc.Event, mc.ProfilerRange, mc.DeviceBuffer,
                                 mc.PinnedBuffer, mc.Context])
def test_resources_are_only_made_by_their_factories(cls) -> None:
    with pytest.raises(TypeError, match="(use|create|allocate|obtain|start)"):
        cls()


def test_argument_packer_takes_a_contract() -> None:
    with pytest.raises(mc.ContractError, match="contract"):
        mc.ArgumentPacker("k", FakeContext())  # type: ignore[arg-type]


def test_numpy_dtypes_that_equal_python_types_are_still_dtypes() -> None:
    # numpy says dtype('float64') == float; the width is explicit here, so it is accepted.
    assert dtype_info(np.dtype(np.float64)).name == "f64" and dtype_info(np.dtype(np.int64)).name == "i64"


# Faults a second fresh user found (compiler files and CLI, numba_ext, matmul specs and commands).

def test_kernel_file_paths_without_nul_or_line_breaks(tmp_path) -> None:
    for bad in ("k\0.cu", "a\nb.cu", ""):
        with pytest.raises(mc.ContractError):
            mc.cuda_kernel_file(bad, relative_to=str(tmp_path))


def test_compile_cli_checks_its_output_path(tmp_path) -> None:
    import subprocess
    import sys

    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* o) { o[0] = 1.0f; }\n')
    for out in ("/nonexistent/x.cubin", str(tmp_path), str(src)):
        done = subprocess.run([sys.executable, "-m", "mircuda", "compile", str(src), "--arch", "sm_90", "-o", out],
                              capture_output=True, text=True)
        assert done.returncode == 2 and "error: ContractError: -o: expected" in done.stderr and "Traceback" not in done.stderr
    assert src.read_text().startswith("extern")  # never overwritten


def test_numba_kernel_refuses_jit_options_it_would_drop() -> None:
    from numba import cuda

    import mircuda.numba_ext as mn

    @cuda.jit(fastmath=True)
    def k(o):  # type: ignore[no-untyped-def]
        o[0] = 1

    with pytest.raises(mc.ContractError, match="fastmath"):
        mn.numba_kernel(k, "void(float32[:])")


@pytest.mark.parametrize("arch", ["sm_35", "sm_86f", "sm_999", "compute_90"])
def test_numba_builds_validate_the_target_like_nvrtc(arch) -> None:
    import mircuda.numba_ext as mn

    def k(o):  # type: ignore[no-untyped-def]
        o[0] = 1

    with pytest.raises(mc.ContractError, match="arch"):
        mn.numba_kernel(k, "void(float32[:])").build(arch, mc.CompileOptions())


def test_matmul_specs_take_numpy_ints_and_bound_k() -> None:
    assert mc.DenseMatmulSpec(np.int64(4), np.int32(64), np.uint16(64)).m == 4
    assert mc.DenseVectorSpec(np.int64(64), np.int64(64)).k == 64
    with pytest.raises(mc.ContractError, match="k"):
        mc.DenseVectorSpec(64, 2**31 - 100)
    with pytest.raises(mc.ContractError):
        mc.DenseMatmulSpec(True, 1, 1)


@pytest.mark.parametrize("argv, match", [(["build-cutlass", "--jobs", "-3"], "--jobs"),
                                         (["build-cutlass", "--arch", ""], "--arch"),
                                         # an empty list is not "every family" (a 40-minute build by accident)
                                         (["build-cutlass", "--families", ""], "--families"),
                                         (["build-cutlass", "--families", ","], "--families"),
                                         # groups with no member for the arch: a library without kernels
                                         (["build-cutlass", "--families", "FP4", "--arch", "90a"], "90a"),
                                         (["build-cutlass", "--families", "FP8_EXP", "--arch", "120f"], "120f")])
def test_build_cutlass_checks_its_arguments(argv, match) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mircuda", *argv], capture_output=True, text=True)
    assert done.returncode == 2 and match in done.stderr, done.stderr[-300:]


def test_a_family_selection_must_build_a_kernel_for_its_archs() -> None:
    from mircuda.matmul._build import check_families_build, family_archs

    assert family_archs("SM90_FP8_EXP_SWAP128") == ("90a",) and family_archs("SM120_FP8") == ("120f",)
    assert family_archs("SIMT") is None
    check_families_build(("FP8",), ("120f",))  # the FP8 group has an SM120 member
    check_families_build(("FP4", "SIMT"), ("90a",))  # SIMT builds for every arch
    check_families_build((), ("90a",))  # no selection: every family of the archs
    with pytest.raises(mc.ContractError) as info:
        check_families_build(("FP4", "FP4_GROUPED"), ("90a",))
    assert info.value.argument == "families" and "FP4, FP4_GROUPED" in str(info.value)


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_cutlass_check_without_a_gpu_says_so_before_any_build() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mircuda", "cutlass-check"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "UnsupportedPlatform" in done.stderr and "building" not in done.stdout
