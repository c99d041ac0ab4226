"""Numba kernels as module sources, compiled without a GPU: targets, entries, digests, CUDA C links."""

from __future__ import annotations

import re

import numpy as np
import pytest

from numba import cuda

import mircuda as mc
import mircuda.numba_ext as mn  # numba is required: a broken numba_ext must fail, not skip
from cubin import arch_sm, cubin_sm
from mircuda.numba_ext import helpers

CUBIN = mc.CompileOptions()
PTX = mc.CompileOptions(output="ptx")


def scale(out, x, factor):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * factor


SCALE_SIG = "void(float32[:], float32[:], float32)"


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_120", "sm_120f"])
def test_a_kernel_compiles_to_cubin_for_an_exact_target_without_a_gpu(arch: str) -> None:
    program = mn.numba_kernel(scale, SCALE_SIG).build(arch, CUBIN)
    assert program.arch == arch and program.output == "cubin"
    assert program.image[:4] == b"\x7fELF" and cubin_sm(program.image) == arch_sm(arch)
    ((name, entry),) = program.symbols
    assert name == "scale"  # contracts name the kernel by its Python name ...
    assert entry.encode() + b"\0" in program.image  # ... the image by Numba's mangled entry
    assert program.abi == "numba:array(float32, 1d, A), array(float32, 1d, A), float32"


def test_a_dispatcher_or_a_tuple_of_types_names_the_same_kernel() -> None:
    from numba.cuda import types as nt

    plain = mn.numba_kernel(scale, SCALE_SIG)
    assert mn.numba_kernel(cuda.jit(scale), SCALE_SIG).digest == plain.digest
    assert mn.numba_kernel(scale, (nt.float32[:], nt.float32[:], nt.float32)).digest == plain.digest


def test_the_entry_is_read_from_the_ptx() -> None:
    program = mn.numba_kernel(scale, SCALE_SIG).build("sm_90", PTX)
    ptx = program.image.rstrip(b"\0").decode()
    assert re.search(r"^\.target sm_90$", ptx, re.M)
    ((_, entry),) = program.symbols
    assert re.findall(r"\.entry\s+(\S+)\s*\(", ptx) == [entry]
    assert "scale" in entry and entry != "scale"  # mangled, with Numba's per-function unique id


def _make_scaler(factor: float):  # type: ignore[no-untyped-def]
    def scaled(out, x):  # type: ignore[no-untyped-def]
        i = cuda.grid(1)
        out[i] = x[i] * factor
    return scaled


def test_the_digest_follows_what_numba_freezes() -> None:
    sig = "void(float32[:], float32[:])"
    same = [mn.numba_kernel(_make_scaler(2.0), sig).digest for _ in range(2)]
    assert same[0] == same[1]  # equal code and closure: a cache hit
    assert mn.numba_kernel(_make_scaler(3.0), sig).digest != same[0]  # a closure value changed
    assert mn.numba_kernel(_make_scaler(2.0), "void(float64[:], float64[:])").digest != same[0]
    assert mn.numba_kernel(_make_scaler(2.0), sig, fastmath=True).digest != same[0]


GAIN = 2.0


@cuda.jit(device=True)
def _twice(x):  # type: ignore[no-untyped-def]
    return x * GAIN


def _uses_global(out, x):  # type: ignore[no-untyped-def]
    out[0] = _twice(x[0])


def test_the_digest_covers_globals_read_through_device_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    sig = "void(float32[:], float32[:])"
    before = mn.numba_kernel(_uses_global, sig).digest
    monkeypatch.setitem(globals(), "GAIN", 3.0)
    assert mn.numba_kernel(_uses_global, sig).digest != before


def _with_shared_local_atomics(total, x):  # type: ignore[no-untyped-def]
    tile = cuda.shared.array(128, dtype=np.float32)
    scratch = cuda.local.array(2, dtype=np.float32)
    i = cuda.grid(1)
    scratch[0] = _twice(x[i]) if i < x.size else 0.0
    tile[cuda.threadIdx.x] = scratch[0]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        s = 0.0
        for k in range(cuda.blockDim.x):
            s += tile[k]
        cuda.atomic.add(total, 0, s)


def test_device_functions_shared_local_memory_and_atomics_compile_without_a_gpu() -> None:
    ptx = mn.numba_kernel(_with_shared_local_atomics, "void(float32[:], float32[:])").build("sm_90", PTX).image.decode()
    assert ".shared" in ptx
    assert re.search(r"(atom|red)\.global\.add\.f32", ptx)


def _half_types(out_bf16, out_f16, x_bf16, x_f16):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    out_bf16[i] = helpers.f32_to_bf16(helpers.bf16_to_f32(x_bf16[i]) * 2.0)
    out_f16[i] = x_f16[i] * x_f16[i]


def test_bf16_and_fp16_arrays_compile() -> None:
    sig = "void(bfloat16[:], float16[:], bfloat16[:], float16[:])"
    for lto in (False, True):
        program = mn.numba_kernel(_half_types, sig, lto=lto).build("sm_90", CUBIN)
        assert program.image[:4] == b"\x7fELF" and cubin_sm(program.image) == 90


def _every_helper(out, bf, hf, q8, q4):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    pair = helpers.e2m1x2_to_f32x2(q4[i])
    v = (helpers.bf16_to_f32(bf[i]) + helpers.f16_to_f32(hf[i]) + helpers.e4m3_to_f32(q8[i])
         + helpers.e2m1_to_f32(q4[i]) + pair.x + pair.y)
    v = helpers.warp_sum_f32(v) + helpers.warp_max_f32(v)
    out[i] = helpers.bf16_to_f32(helpers.f32_to_bf16(v)) + helpers.f16_to_f32(helpers.f32_to_f16(v))


@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
@pytest.mark.parametrize("lto", [False, True])
def test_mircuda_helpers_link_into_a_kernel(arch: str, lto: bool) -> None:
    sig = "void(float32[:], bfloat16[:], float16[:], uint8[:], uint8[:])"
    program = mn.numba_kernel(_every_helper, sig, lto=lto).build(arch, CUBIN)
    assert program.image[:4] == b"\x7fELF" and cubin_sm(program.image) == arch_sm(arch)


def test_a_declaration_that_does_not_match_the_c_function_is_refused() -> None:
    wrong = mn.declare_device("mircuda_e2m1x2_to_f32x2", "float32(uint8)", helpers.SOURCE)  # returns a pair

    def decode(out, q):  # type: ignore[no-untyped-def]
        out[0] = wrong(q[0])

    with pytest.raises(mc.ContractError, match="signature matching the C definition") as info:
        mn.numba_kernel(decode, "void(float32[:], uint8[:])").build("sm_90", CUBIN)
    assert info.value.argument == "mircuda_e2m1x2_to_f32x2"


axpy = mn.declare_device("axpy_scaled", "float32(float32, float32, float32)", "data/numba_user_device.cu")


def _user_axpy(out, a, x, y):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    out[i] = axpy(a, x[i], y[i])


def test_user_cuda_c_is_read_relative_to_the_calling_file_and_compiled_with_the_options() -> None:
    source = mn.numba_kernel(_user_axpy, "void(float32[:], float32, float32[:], float32[:])")
    assert source.build("sm_90", CUBIN).image[:4] == b"\x7fELF"  # found its #include beside it
    with pytest.raises(mc.CompileError, match="numba_user_device.cu"):
        source.build("sm_90", mc.CompileOptions(defines={"AXPY_SCALE": "not_a_number"}))


def test_reading_a_missing_cuda_c_file_names_it() -> None:
    with pytest.raises(mc.ContractError, match="no_such_file.cu"):
        mn.declare_device("f", "float32(float32)", "no_such_file.cu")


def test_the_digest_covers_linked_cuda_c() -> None:
    def one(out):  # type: ignore[no-untyped-def]
        out[0] = f(1.0)

    digests = []
    for body in ("return x;", "return 2.0f * x;"):
        source = mc.cuda_kernel(f'extern "C" __device__ float f(float x) {{ {body} }}')
        f = mn.declare_device("f", "float32(float32)", source)
        digests.append(mn.numba_kernel(one, "void(float32[:])").digest)
    assert digests[0] != digests[1]


def test_ptx_output_is_only_for_kernels_that_link_nothing() -> None:
    with pytest.raises(mc.ContractError, match="output='cubin'"):
        mn.numba_kernel(_user_axpy, "void(float32[:], float32, float32[:], float32[:])").build("sm_90", PTX)


@pytest.mark.parametrize("signature, argument", [
    ("float32(float32[:])", "signature"),          # kernels return nothing
    ("void(complex64[:])", "signature[0]"),        # no mircuda type binds to it
    ("void(UniTuple(float32, 2))", "signature[0]"),
    ("void(float32[:], nonsense)", "signature"),
])
def test_signatures_mircuda_cannot_launch_are_refused(signature: str, argument: str) -> None:
    with pytest.raises(mc.ContractError) as info:
        mn.numba_kernel(scale, signature)
    assert info.value.argument == argument


@pytest.mark.parametrize("options, argument", [
    ({"debug": True}, "debug"), ({"fastmath": 1}, "fastmath"), ({"max_registers": 8}, "max_registers"),
    ({"launch_bounds": (0,)}, "launch_bounds"),
])
def test_bad_options_are_refused(options: dict, argument: str) -> None:
    with pytest.raises(mc.ContractError) as info:
        mn.numba_kernel(scale, SCALE_SIG, **options)
    assert info.value.argument == argument


def test_arch_must_be_an_sm_target() -> None:
    with pytest.raises(mc.ContractError) as info:
        mn.numba_kernel(scale, SCALE_SIG).build("compute_90", CUBIN)
    assert info.value.argument == "arch"


def test_a_typing_error_is_a_compile_error_with_numbas_message() -> None:
    def broken(out):  # type: ignore[no-untyped-def]
        out[0] = undefined_name  # noqa: F821

    with pytest.raises(mc.CompileError, match="undefined_name"):
        mn.numba_kernel(broken, "void(float32[:])").build("sm_90", CUBIN)


def test_a_kernel_that_needs_a_cooperative_launch_is_refused() -> None:
    def grid_sync(out):  # type: ignore[no-untyped-def]
        out[cuda.grid(1)] = 1.0
        cuda.cg.this_grid().sync()

    with pytest.raises(mc.UnsupportedPlatform, match="cooperative"):
        mn.numba_kernel(grid_sync, "void(float32[:])").build("sm_90", CUBIN)


# Faults a fresh user found, each a test with the right value.

def _twice_kernel(declared):  # type: ignore[no-untyped-def]
    def k(out):  # type: ignore[no-untyped-def]
        out[0] = declared(out[0])
    return mn.numba_kernel(k, "void(float32[:])")


def test_c_types_are_checked_exactly_not_only_their_width(tmp_path) -> None:
    (tmp_path / "dev.cu").write_text('extern "C" __device__ float twice(float x) { return 2.0f * x; }\n')
    src = mc.cuda_kernel((tmp_path / "dev.cu").read_text(), str(tmp_path / "dev.cu"))
    _twice_kernel(mn.declare_device("twice", "float32(float32)", src)).build("sm_90", CUBIN)
    with pytest.raises(mc.ContractError, match="result type is not the C type of Numba's int32"):
        _twice_kernel(mn.declare_device("twice", "int32(float32)", src)).build("sm_90", CUBIN)


def test_lto_builds_check_declarations_too() -> None:
    src = mc.cuda_kernel('extern "C" __device__ float twice(float x) { return 2.0f * x; }', "twice_lto.cu")
    bad = mn.declare_device("twice", "float32(float64)", src)

    def k(out):  # type: ignore[no-untyped-def]
        out[0] = bad(1.0)

    with pytest.raises(mc.ContractError, match="parameter 1"):
        mn.numba_kernel(k, "void(float32[:])", lto=True).build("sm_90", CUBIN)


def test_a_kernel_cannot_be_declared_as_a_device_function() -> None:
    g = mn.declare_device("g", "void(float32)", mc.cuda_kernel('extern "C" __global__ void g(float x) {}', "g.cu"))

    def k(out):  # type: ignore[no-untyped-def]
        g(out[0])

    with pytest.raises(mc.ContractError, match="__global__"):
        mn.numba_kernel(k, "void(float32[:])").build("sm_90", CUBIN)


def test_headers_of_declared_sources_are_part_of_the_key(tmp_path) -> None:
    (tmp_path / "val.h").write_text("#define VAL 2.0f\n")
    (tmp_path / "dev.cu").write_text('#include "val.h"\nextern "C" __device__ float twice(float x) { return VAL * x; }\n')
    path = str(tmp_path / "dev.cu")
    first = _twice_kernel(mn.declare_device("twice", "float32(float32)", path)).digest
    (tmp_path / "val.h").write_text("#define VAL 3.0f  \n")
    second = _twice_kernel(mn.declare_device("twice", "float32(float32)", path)).digest
    assert first != second
