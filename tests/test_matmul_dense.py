"""DenseMatmulPlan's choices without a GPU: kernel selection per architecture and shape, split-K
slices, the NVRTC kernels for decode (the dense vector kernel at M = 1, the batched GEMV above),
available_kernels, spec validation, and the Numba-callable executors (driven through
stand-in C functions)."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul._dense import MISALIGNED, matmul_executor
from mircuda.matmul._gemv import gemv_kernels
from mircuda.matmul._library import CutlassLibrary, KernelInfo
from mircuda.matmul._select import (
    BATCHED_GEMV_MAX_M,
    BATCHED_GEMV_RULE_MAX_M,
    select_kernel,
    split_k_slices,
    tensor_core_aligned,
)
from mircuda.matmul._vector import INVALID_VALUE, kernel_executor, vector_kernels

H200 = ((9, 0), 132)
RTX5090 = ((12, 0), 170)
GB10 = ((12, 1), 48)


def table() -> list[KernelInfo]:
    """The kernel table the library's CMakeLists.txt builds (names as the library spells them)."""
    rows = [("sm90_coop_128x256x64_c2x1", "sm90_cooperative", (128, 256, 64), False, (90,)),
            ("sm90_pingpong_64x128x64", "sm90_pingpong", (64, 128, 64), False, (90,)),
            ("sm90_swap_128x32x128_splitk", "sm90_swapped", (128, 32, 128), True, (90,)),
            ("sm80_tensorop_32x128x64_4stage", "sm80_tensorop", (32, 128, 64), False, (90, 120)),
            ("sm80_tensorop_64x64x64_5stage", "sm80_tensorop", (64, 64, 64), False, (90, 120)),
            ("sm80_tensorop_128x128x32_4stage", "sm80_tensorop", (128, 128, 32), False, (90, 120)),
            ("simt_128x128x8_2stage", "simt", (128, 128, 8), False, (90, 120))]
    out = []
    for prefix, family, tile, split, archs in rows:
        for i, o in (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32")):
            out.append(KernelInfo(len(out), f"{prefix}_{i}_{o}", family, i, o, tile, (1, 1), 0,
                                  2 if family == "simt" else 16, split, archs))
    return out


def pick(m, n, k, device=H200, input="bf16", output="bf16", forced=None, gemv=False):
    """The selection among the library's table (and the NVRTC kernels' entries, as the plan offers them)."""
    cc, sms = device
    kernels = [*vector_kernels(), *gemv_kernels(), *table()] if gemv else table()
    return select_kernel(kernels, mc.DenseMatmulSpec(m, n, k), input, output, cc, sms, forced)


AMPERE = ((8, 6), 84)


@pytest.mark.parametrize("device", [H200, RTX5090, GB10, AMPERE], ids=["sm90", "sm120", "sm121", "sm86"])
@pytest.mark.parametrize("m, n, k", [(2, 4096, 4096), (16, 14336, 4096), (7, 4100, 4095), (3, 7, 9)])
def test_decode_runs_the_batched_gemv_on_every_device(device, m, n, k) -> None:
    s = pick(m, n, k, device, output="f32", gemv=True)
    assert s.kernel.family == "batched_gemv" and s.kernel.origin == "nvrtc" and s.splits == 1
    assert s.kernel.name == "batched_gemv_bf16_f32" and f"M = {m} <= 16" in s.reason
    assert ("16-byte loads" in s.reason) == (k % 8 == 0)


@pytest.mark.parametrize("device", [H200, RTX5090, GB10, AMPERE], ids=["sm90", "sm120", "sm121", "sm86"])
@pytest.mark.parametrize("n, k", [(4096, 4096), (7, 9)])
def test_m_1_runs_the_dense_vector_kernel_on_every_device(device, n, k) -> None:
    s = pick(1, n, k, device, input="f16", output="f32", gemv=True)
    assert s.kernel.family == "dense_vector" and s.kernel.origin == "nvrtc" and s.splits == 1
    assert s.kernel.name == "dense_vector_f16_f32" and "M = 1" in s.reason
    assert ("16-byte loads" in s.reason) == (k % 8 == 0)


def test_the_dense_vector_kernel_is_forced_only_for_m_1_and_the_batched_gemv_may_be() -> None:
    assert pick(1, 64, 64, forced="batched_gemv_bf16_bf16", gemv=True).kernel.family == "batched_gemv"
    assert pick(1, 64, 64, forced="dense_vector_bf16_bf16", gemv=True).kernel.family == "dense_vector"
    for m in (2, 16, 17):
        with pytest.raises(mc.ContractError, match="takes M = 1") as info:
            pick(m, 64, 64, forced="dense_vector_bf16_bf16", gemv=True)
        assert info.value.argument == "kernel" and info.value.received == "'dense_vector_bf16_bf16'"
        assert f"M = {m}" in info.value.expected


def stand_in_library() -> CutlassLibrary:
    lib = object.__new__(CutlassLibrary)  # a loaded library's kernel table, without the .so
    lib.kernels = tuple(table())
    return lib


def test_available_kernels_lists_the_nvrtc_kernels_then_the_librarys() -> None:
    names = mc.matmul.available_kernels(mc.f16, mc.f32, library=stand_in_library())
    assert names[:2] == ["dense_vector_f16_f32", "batched_gemv_f16_f32"]
    assert "sm90_swap_128x32x128_splitk_f16_f32" in names and all(n.endswith("_f16_f32") for n in names)


@pytest.mark.parametrize("kwargs, argument", [({"library": "libmircuda_cutlass.so"}, "library"),
                                              ({"library": table()}, "library"), ({"input": mc.f32}, "input")])
def test_available_kernels_checks_its_arguments(kwargs, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.matmul.available_kernels(**kwargs)
    assert info.value.argument == argument
    assert kwargs.get("library") is None or "CutlassLibrary" in info.value.expected


def test_from_m_17_the_cutlass_kernels_run_and_forcing_one_is_allowed_for_decode() -> None:
    # the rules' decode range; the measured table may take the batched GEMV further (test_matmul_tuned.py)
    assert BATCHED_GEMV_RULE_MAX_M == 16
    assert pick(17, 4096, 4096, gemv=True).kernel.family == "sm90_swapped"
    assert pick(17, 4096, 4096, RTX5090, gemv=True).kernel.family == "sm80_tensorop"
    forced = pick(4, 4096, 4096, forced="sm90_swap_128x32x128_splitk_bf16_bf16", gemv=True)
    assert forced.kernel.family == "sm90_swapped" and forced.splits == 4


@pytest.mark.parametrize("name", ["batched_gemv_bf16_bf16", "batched_gemv_rows32_bf16_bf16"])
def test_the_batched_gemv_is_forced_only_for_m_up_to_32(name) -> None:
    assert BATCHED_GEMV_MAX_M == 32
    assert pick(16, 64, 64, forced="batched_gemv_f16_f16", input="f16", output="f16", gemv=True).kernel.origin == "nvrtc"
    forced = pick(32, 64, 64, forced=name, gemv=True)
    assert forced.kernel.name == name and forced.reason == "forced by the caller"
    with pytest.raises(mc.ContractError, match="M <= 32") as info:
        pick(33, 64, 64, forced=name, gemv=True)
    assert info.value.argument == "kernel"
    with pytest.raises(mc.ContractError, match="kernel"):
        pick(4, 64, 64, forced="batched_gemv_f16_f16", gemv=True)  # other types


@pytest.mark.parametrize("m, kernel, expected", [
    (33, "batched_gemv_bf16_bf16", "takes M <= 32"), (40, "batched_gemv_rows32_bf16_bf16", "takes M <= 32"),
    (2, "dense_vector_bf16_bf16", "takes M = 1"), (4, "batched_gemv_f16_f16", "bf16->bf16 kernels")])
def test_a_refused_nvrtc_kernel_is_said_even_without_the_cutlass_library(monkeypatch, m, kernel, expected) -> None:
    # building the library would not make these run: the refusal of kernel= is the caller's to read
    from types import SimpleNamespace

    from mircuda.matmul import _dense
    from mircuda.matmul._build import CutlassNotFound

    def missing():
        raise CutlassNotFound("no library here")

    monkeypatch.setattr(_dense, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_dense, "plan_compiler", lambda compiler, context: None)
    monkeypatch.setattr(_dense, "load_library", missing)
    context = SimpleNamespace(device_info=lambda: SimpleNamespace(compute_capability=(9, 0), multiprocessor_count=132))
    with pytest.raises(mc.ContractError) as e:
        mc.DenseMatmulPlan(context, None, mc.DenseMatmulSpec(m, 4096, 4096), kernel=kernel)  # type: ignore[arg-type]
    assert e.value.argument == "kernel" and expected in e.value.expected and e.value.received == repr(kernel)
    with pytest.raises(CutlassNotFound):  # a CUTLASS kernel's name without the library: the library is missing
        mc.DenseMatmulPlan(context, None, mc.DenseMatmulSpec(m, 4096, 4096),  # type: ignore[arg-type]
                           kernel="sm90_swap_128x32x128_splitk_bf16_bf16")


@pytest.mark.parametrize("m, n, k, kernel, row_tiles, why", [
    (24, 6144, 4096, "batched_gemv_rows32_bf16_bf16", 2, "forced by the caller"),
    (24, 4096, 14336, None, 1, "measured fastest on NVIDIA H200"),  # the packaged table's M = 24 entry there
    (20, 6144, 4096, None, 1, "measured fastest on NVIDIA H200"),   # between measured M: M = 16's entry
    (8, 6144, 4096, "batched_gemv_rows32_bf16_bf16", 2, "forced by the caller")])
@pytest.mark.parametrize("static", [False, True])
def test_describe_names_the_batched_gemv_as_kernel_takes_it(monkeypatch, m, n, k, kernel, row_tiles, why,
                                                           static) -> None:
    # the kernel's symbol (batched_gemv_bf16_bf16_v16) is one for both row tilings; describe() also gives the
    # table name, which kernel= and available_kernels use; static_weights reaches the kernel's engine as given
    from types import SimpleNamespace

    from mircuda.matmul import _dense
    from mircuda.matmul._build import CutlassNotFound

    built, promised = [], []

    class StandIn:
        alignment = 16

        def __init__(self, context, spec, input, output, compiler, row_tiles, static_weights=False):
            built.append(row_tiles)
            promised.append(static_weights)

        def operands(self):
            return ()

        def describe(self):
            return "kernel batched_gemv_bf16_bf16_v16 (NVRTC)"

    def missing():
        raise CutlassNotFound("no library here")

    monkeypatch.setattr(_dense, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_dense, "plan_compiler", lambda compiler, context: None)
    monkeypatch.setattr(_dense, "load_library", missing)
    monkeypatch.setattr(_dense, "BatchedGemv", StandIn)
    info = SimpleNamespace(compute_capability=(9, 0), multiprocessor_count=132, arch="sm_90")
    context = SimpleNamespace(device_info=lambda: info)
    plan = mc.DenseMatmulPlan(context, None, mc.DenseMatmulSpec(m, n, k), kernel=kernel,  # type: ignore[arg-type]
                              static_weights=static)
    name = kernel or "batched_gemv_bf16_bf16"
    assert plan.kernel_name == name and built == [row_tiles] and promised == [static]
    text = str(plan.describe())
    assert f"sm_90: {name}: kernel batched_gemv_bf16_bf16_v16 (NVRTC). Why: {why}" in text, text


def test_the_batched_gemv_needs_cc_8_and_no_library() -> None:
    assert pick(2, 64, 64, ((8, 0), 108), gemv=True).kernel.family == "batched_gemv"
    assert pick(1, 64, 64, ((8, 0), 108), gemv=True).kernel.family == "dense_vector"
    for kernels in (gemv_kernels(), vector_kernels()):
        with pytest.raises(mc.UnsupportedPlatform):
            select_kernel(kernels, mc.DenseMatmulSpec(1, 64, 64), "bf16", "bf16", (7, 5), 40)
    assert {k.name for k in gemv_kernels()} == {f"batched_gemv_{r}{i}_{o}" for i, o in
                                                 (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32"))
                                                 for r in ("", "rows32_")}


@pytest.mark.parametrize("m, family", [(1, "sm90_swapped"), (16, "sm90_swapped"), (64, "sm90_swapped"),
                                       (65, "sm90_pingpong"), (512, "sm90_pingpong"), (1024, "sm90_cooperative"),
                                       (8192, "sm90_cooperative")])
def test_hopper_picks_by_m(m, family) -> None:
    s = pick(m, 4096, 4096)
    assert s.kernel.family == family and s.kernel.name.endswith("_bf16_bf16") and s.reason


@pytest.mark.parametrize("m, n, device, tile", [
    (1, 32768, RTX5090, (32, 128, 64)),   # N gives each SM a 32x128 tile
    (1, 4096, RTX5090, (64, 64, 64)),     # too few: 64x64 tiles double them
    (16, 4096, GB10, (64, 64, 64)),
    (8, 14336, GB10, (32, 128, 64)),
    (2048, 4096, RTX5090, (128, 128, 32)),
    (128, 4096, RTX5090, (64, 64, 64)),   # 32 tiles of 128x128 for 170 SMs
])
def test_sm120_picks_the_tile(m, n, device, tile) -> None:
    s = pick(m, n, 4096, device)
    assert s.kernel.family == "sm80_tensorop" and s.kernel.tile == tile and 120 in s.kernel.archs


@pytest.mark.parametrize("n, k, output", [(4096, 4095, "bf16"), (4100, 4096, "bf16"), (4098, 4096, "f32"),
                                          (7, 9, "f32")])
def test_shapes_without_16_byte_rows_fall_back_to_simt(n, k, output) -> None:
    s = pick(16, n, k, output=output)
    assert s.kernel.family == "simt" and "16 bytes" in s.reason
    assert not tensor_core_aligned(mc.DenseMatmulSpec(16, n, k), "bf16", output)


def test_f32_output_needs_only_four_columns_per_16_bytes() -> None:
    assert tensor_core_aligned(mc.DenseMatmulSpec(1, 4100, 4096), "bf16", "f32")
    assert pick(1, 4100, 4096, output="f32").kernel.family == "sm90_swapped"


def test_dtypes_select_matching_kernels() -> None:
    s = pick(2048, 4096, 4096, input="f16", output="f32")
    assert (s.kernel.input, s.kernel.output) == ("f16", "f32")


def test_split_k_fills_the_sms() -> None:
    kernel = next(k for k in table() if k.family == "sm90_swapped")
    assert split_k_slices(mc.DenseMatmulSpec(1, 4096, 4096), kernel, 132) == 4     # 32 tiles x 4 <= 132
    assert split_k_slices(mc.DenseMatmulSpec(1, 14336, 4096), kernel, 132) == 1    # 112 tiles already
    assert split_k_slices(mc.DenseMatmulSpec(64, 4096, 4096), kernel, 132) == 2    # 2 token tiles
    assert split_k_slices(mc.DenseMatmulSpec(1, 128, 512), kernel, 132) == 2       # >= two K tiles per slice
    assert split_k_slices(mc.DenseMatmulSpec(1, 128, 1 << 20), kernel, 132) == 16  # at most 16
    assert "4 K slice" in pick(1, 4096, 4096).reason


def test_a_forced_kernel_is_checked() -> None:
    s = pick(1, 4096, 4096, forced="sm80_tensorop_64x64x64_5stage_bf16_bf16")
    assert s.kernel.tile == (64, 64, 64) and s.reason == "forced by the caller"
    with pytest.raises(mc.ContractError, match="kernel"):
        pick(1, 4096, 4096, forced="sm90_coop_128x256x64_c2x1_f16_f16")  # other types
    with pytest.raises(mc.ContractError, match="kernel"):
        pick(1, 4096, 4096, RTX5090, forced="sm90_coop_128x256x64_c2x1_bf16_bf16")  # not for SM120


def test_devices_without_code_are_refused() -> None:
    with pytest.raises(mc.UnsupportedPlatform, match="8.0"):
        pick(16, 4096, 4096, ((8, 0), 108))
    with pytest.raises(mc.UnsupportedPlatform, match="10.0"):
        pick(16, 4096, 4096, ((10, 0), 148))


@pytest.mark.parametrize("m, n, k, argument", [(0, 1, 1, "m"), (1, -2, 1, "n"), (1, 1, 1.5, "k"), (1, 1, None, "k")])
def test_matmul_specs_are_checked(m, n, k, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.DenseMatmulSpec(m, n, k)
    assert info.value.argument == argument
    assert mc.DenseMatmulSpec(2, 3, 4).flops == 48


def test_the_matmul_executor_calls_the_entry_point_from_njit() -> None:
    import numba  # a required dependency: imported here only to keep it off this module's import time

    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64, ctypes.c_float, ctypes.c_float)
    entry = proto(lambda *args: seen.append(args) or 0)
    execute = matmul_executor(ctypes.cast(entry, ctypes.c_void_p).value, 0xABC0, 16, stream=0x77, c_alignment=16)

    @numba.njit
    def loop(count, stream, a, b, c):
        status = 0
        for i in range(count):
            status |= execute(stream, a, b + 256 * i, c, 2.0, 0.5)
        return status

    assert loop(3, np.uint64(0x77), 0x1000, np.uint64(0x2000), np.int64(0x3000)) == 0
    assert seen == [(0xABC0, 0x77, 0x1000, 0x2000 + 256 * i, 0x3000, 2.0, 0.5) for i in range(3)]
    assert loop(1, 0x77, 0x1008, 0x2000, 0x3000) == MISALIGNED and len(seen) == 3


@pytest.mark.parametrize("swap, order", [(True, ("out", "q", "p")), (False, ("out", "p", "q"))])
def test_the_kernel_executor_packs_the_kernel_parameters_like_c(swap, order) -> None:
    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    blocks: list[bytes] = []

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_uint64 * 7).from_address(params)
        blocks.append(b"".join(ctypes.string_at(p, 8 if i < 3 else 4) for i, p in enumerate(pointers)))
        seen.append((f, gx, gy, gz, bx, by, bz, smem, stream, extra))
        return 0

    entry = proto(fake_launch)
    execute = kernel_executor(0xF00, 512, 128, 4096, 4104, 16, swap, launch_function=entry, stream=0x55,
                              out_alignment=2)
    values = {"p": 0x1000, "q": 0x2000, "out": 0x3000}
    assert execute(np.uint64(0x55), 0x1000, np.uint64(0x2000), 0x3000, 1.5, -0.25) == 0
    assert seen == [(0xF00, 512, 1, 1, 128, 1, 1, 0, 0x55, 0)]
    assert blocks[0] == struct.pack("<QQQffii", *(values[o] for o in order), 1.5, -0.25, 4096, 4104)
    assert execute(0x55, 0x1008, 0x2000, 0x3000, 1.0, 0.0) == INVALID_VALUE and len(seen) == 1
    assert execute(0x55, 0x1000, 0x2000, 0x3001, 1.0, 0.0) == INVALID_VALUE and len(seen) == 1
