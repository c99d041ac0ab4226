"""NVRTC compilation needs no GPU: targets, options and diagnostics."""

from __future__ import annotations

import pytest

import mircuda as mc
from cubin import arch_sm, cubin_sm
from mircuda.compile import supported_archs

SAXPY = mc.cuda_kernel(r'''
#include <cuda_bf16.h>
extern "C" __global__ void saxpy(__nv_bfloat16* y, const __nv_bfloat16* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(a * __bfloat162float(x[i]) + __bfloat162float(y[i]));
}''', "saxpy.cu")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_120f", "sm_90", "sm_80"])
def test_cubin_for_any_supported_target(arch) -> None:
    prog = mc.compile_program(SAXPY, arch)
    assert prog.image[:4] == b"\x7fELF" and prog.arch == arch and prog.output == "cubin"
    assert cubin_sm(prog.image) == arch_sm(arch)  # read from the CUBIN's ELF header, not echoed
    assert prog.nvrtc_version == mc.nvrtc_version()


def test_ptx_is_nul_terminated_text() -> None:
    prog = mc.compile_program(SAXPY, "compute_120f", mc.CompileOptions(output="ptx"))
    assert prog.image.endswith(b"\0") and b".entry saxpy" in prog.image and b".target sm_120f" in prog.image


def test_compile_errors_carry_the_nvrtc_log() -> None:
    bad = mc.cuda_kernel('extern "C" __global__ void k(float* o) { o[0] = undefined_name; }', "bad.cu")
    with pytest.raises(mc.CompileError) as info:
        mc.compile_program(bad, "sm_90")
    assert "undefined_name" in info.value.log and "bad.cu" in info.value.log
    assert info.value.arch == "sm_90" and info.value.source_name == "bad.cu"


@pytest.mark.parametrize("arch, match", [("sm90", "NVRTC target"), ("sm_999", "targets"), ("compute_90", "PTX only"),
                                          (90, "NVRTC target")])
def test_bad_targets_are_refused(arch, match) -> None:
    with pytest.raises(mc.ContractError, match=match):
        mc.compile_program(SAXPY, arch)


def test_nvrtc_reports_hopper_and_blackwell() -> None:
    assert {90, 120}.issubset(supported_archs())


def test_options_normalize_and_validate() -> None:
    a = mc.CompileOptions(defines={"B": 2, "A": None})
    b = mc.CompileOptions(defines={"A": None, "B": "2"})
    assert a == b and a.key == b.key
    assert a.flags("sm_90") == ["--gpu-architecture=sm_90", "--std=c++17", "-DA", "-DB=2"]
    full = mc.CompileOptions(std="c++20", fast_math=True, line_info=True, max_registers=64,
                             extra_flags=("--restrict",), output="ptx")
    assert full.flags("sm_90")[2:] == ["--use_fast_math", "--generate-line-info", "--maxrregcount=64", "--restrict"]
    assert full.key != mc.CompileOptions().key


@pytest.mark.parametrize("kwargs, field", [
    ({"std": "c++99"}, "std"), ({"defines": {"1X": 1}}, "defines"), ({"defines": {"X": 1.5}}, "X"),
    ({"defines": {"X": "a\nb"}}, "X"), ({"fast_math": 1}, "fast_math"), ({"max_registers": 8}, "max_registers"),
    ({"extra_flags": ("-I/tmp",)}, "extra_flags"), ({"extra_flags": "--restrict"}, "extra_flags"),
    ({"extra_flags": ("--gpu-architecture=sm_80",)}, "extra_flags"), ({"output": "fatbin"}, "output"),
])
def test_bad_options_name_the_field(kwargs, field) -> None:
    with pytest.raises(mc.ContractError, match=field):
        mc.CompileOptions(**kwargs)


def test_defines_reach_the_source() -> None:
    src = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = VALUE; }')
    with pytest.raises(mc.CompileError):
        mc.compile_program(src, "sm_90")
    assert mc.compile_program(src, "sm_90", mc.CompileOptions(defines={"VALUE": 3})).image


def test_sources_have_stable_digests() -> None:
    a = mc.cuda_kernel("x", "a.cu")
    assert a.digest == mc.cuda_kernel("x", "a.cu").digest
    assert a.digest != mc.cuda_kernel("y", "a.cu").digest != mc.cuda_kernel("x", "b.cu").digest
    assert mc.cuda_kernel("x").name.startswith("test_nvrtc.py:")
    with pytest.raises(mc.ContractError):
        mc.cuda_kernel(b"bytes")  # type: ignore[arg-type]
