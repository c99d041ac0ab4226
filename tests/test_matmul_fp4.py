"""NVFP4 without a GPU: the numpy references (E2M1/UE4M3 codecs against ml_dtypes, the tiled scale layout
against CUTLASS's atom, ModelOpt's quantization recipe), the device arithmetic simulated bit for bit, the
kernels compiled offline (software decode on sm_80/sm_90/sm_120, cvt.rn.f16x2.e2m1x2 on sm_120f/sm_100f),
the plans' operand checks with stand-ins, and the njit executors' parameter blocks."""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.matmul import _fp4_reference as ref
from mircuda.matmul._fp4 import (FP4_SYMBOL, BlockScaledFp4VectorPlan, Fp4Gemv, fp4_executor, fp4_gemv_options,
                                 fp4_operands, fp4_vector_source, has_e2m1_cvt)
from mircuda.matmul._fp4_layout import check_fp4_k, check_layout, fp4_layout_source, fp4_quantize_source, layout_options
from mircuda.matmul._vector import INVALID_HANDLE, INVALID_VALUE

from test_matmul_plan_checks import FakeContext, Spy, fake_buffer, fake_stream


# -- E2M1 / UE4M3 codecs ------------------------------------------------------------------------------
def test_e2m1_encoding_matches_ml_dtypes_round_to_nearest_even_with_ties_and_signed_zero() -> None:
    grid = np.linspace(-6, 6, 48001, dtype=np.float32)  # step 2**-12: every tie (0.25, 0.75, ..., 5) is on it
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    values = np.concatenate([grid, ties, -ties, np.array([-0.0, 0.0, -0.1], np.float32)])
    want = values.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    assert (ref.e2m1_encode(values) == want).all()
    assert list(ref.e2m1_encode(ties)) == [0, 2, 2, 4, 4, 6, 6]  # ties go to the even code
    assert ref.e2m1_encode(np.array([-0.1], np.float32))[0] == 0x8


def test_e2m1_saturates_above_six() -> None:
    assert list(ref.e2m1_encode(np.array([6.5, 100.0, -1e30], np.float32))) == [7, 7, 15]


def test_every_code_decodes_to_its_ml_dtypes_value() -> None:
    codes = np.arange(16, dtype=np.uint8)
    assert (ref.e2m1_decode(codes) == codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)).all()


def test_packing_puts_element_2i_in_the_low_nibble() -> None:
    codes = np.array([[1, 2, 3, 4]], np.uint8)
    assert list(ref.pack_e2m1(codes)[0]) == [0x21, 0x43]
    rng = np.random.default_rng(1)
    c = rng.integers(0, 16, (5, 32), dtype=np.uint8)
    assert (ref.unpack_e2m1(ref.pack_e2m1(c)) == c).all()


def software_decode(byte: np.ndarray) -> np.ndarray:
    """fp4_common.cuh's e2m1x2_to_half2_scaled without cvt, in numpy: the half2 bits of a byte."""
    b = byte.astype(np.uint32)
    return ((b & 0x8) << 12) | ((b & 0x7) << 9) | ((b & 0x80) << 24) | ((b & 0x70) << 21)


def test_the_kernels_software_e2m1_decode_is_exact_times_two_to_the_minus_14() -> None:
    bytes_ = np.arange(256, dtype=np.uint8)
    halves = software_decode(bytes_).view(np.float16).reshape(256, 2).astype(np.float64) * 2.0**14
    assert (halves[:, 0] == ref.e2m1_decode(bytes_ & 0xF)).all()
    assert (halves[:, 1] == ref.e2m1_decode(bytes_ >> 4)).all()
    assert (np.signbit(halves[:, 1]) == (bytes_ >= 0x80)).all()


def test_the_kernels_ue4m3_decode_reads_the_bits_as_fp16_exactly() -> None:
    codes = np.arange(0x7F, dtype=np.uint16)  # every finite UE4M3 (0x7f is E4M3's NaN)
    via_half = ((codes & 0x7F) << 7).view(np.float16).astype(np.float64) * 256.0
    assert (via_half == codes.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)).all()
    assert (ref.ue4m3_decode(codes.astype(np.uint8)) == via_half).all()


def test_ue4m3_encoding_is_round_to_nearest_even_and_satfinite() -> None:
    v = np.array([0.0, 1.0, 448.0, 460.0, 1e6, 2.0**-9, 2.0**-11, 1.0625, 1.1875], np.float32)
    codes = ref.ue4m3_encode(v)
    assert list(ref.ue4m3_decode(codes)) == [0.0, 1.0, 448.0, 448.0, 448.0, 2.0**-9, 0.0, 1.0, 1.25]


# -- scale layouts ------------------------------------------------------------------------------------
def cute_atom_offsets(rows: int, kblocks: int) -> dict[tuple[int, int], int]:
    """The tiled layout spelled as CuTe evaluates it: SfKMajorAtom's coordinate ((r0, r1), (k0, j)) with
    strides ((16, 4), (0, 1)) inside the atom, atoms tiled over (rows, K) with the K mode first
    (Step<_2,_1,_3>), each atom 128 x 4 = 512 bytes."""
    katoms = -(-kblocks // 4)
    out = {}
    for r in range(rows):
        for kb in range(kblocks):
            r0, r1 = r % 32, (r // 32) % 4
            inner = r0 * 16 + r1 * 4 + (kb % 4) * 1
            atom = (r // 128) * katoms + kb // 4
            out[(r, kb)] = atom * 512 + inner
    return out


@pytest.mark.parametrize("rows, kblocks", [(1, 1), (130, 5), (256, 8), (37, 3)])
def test_tiled_offsets_follow_the_cutlass_atom(rows, kblocks) -> None:
    got = ref.tiled_offsets(rows, kblocks)
    want = cute_atom_offsets(rows, kblocks)
    assert all(got[r, kb] == off for (r, kb), off in want.items())
    assert len(np.unique(got)) == rows * kblocks  # one byte per scale
    assert got.max() < ref.scale_bytes(rows, kblocks * 16, "tiled")


def test_tiled_offsets_of_known_positions() -> None:
    off = ref.tiled_offsets(300, 9)  # 3 row tiles, 3 K atoms
    assert (off[0, 0], off[0, 1], off[0, 3], off[1, 0], off[32, 0], off[96, 0], off[31, 3]) == (0, 1, 3, 16, 4, 12, 499)
    assert off[0, 4] == 512 and off[128, 0] == 3 * 512 and off[129, 5] == 4 * 512 + 16 + 1


@pytest.mark.parametrize("rows, k", [(1, 16), (130, 80), (128, 64), (300, 144)])
def test_converters_round_trip_and_zero_the_padding(rows, k) -> None:
    rng = np.random.default_rng(rows + k)
    lin = rng.integers(1, 0x7F, (rows, k // 16), dtype=np.uint8)
    tiled = ref.scales_to_tiled(lin)
    assert tiled.size == ref.scale_bytes(rows, k, "tiled") == ref.scale_shape(rows, k, "tiled")[0] * \
        ref.scale_shape(rows, k, "tiled")[1]
    assert (ref.scales_to_linear(tiled, rows, k // 16) == lin).all()
    mask = np.ones(tiled.size, bool)
    mask[ref.tiled_offsets(rows, k // 16)] = False
    assert (tiled[mask] == 0).all() and (tiled[~mask] != 0).all()


# -- the quantizer's reference ------------------------------------------------------------------------
def modelopt_loop(x: np.ndarray, g: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """ModelOpt's recipe one block at a time with float32 scalars: an independent spelling."""
    rows, k = x.shape
    codes = np.zeros((rows, k), np.uint8)
    scales = np.zeros((rows, k // 16), np.uint8)
    six_g = np.float32(np.float32(6.0) * g)
    for r in range(rows):
        for b in range(k // 16):
            block = x[r, 16 * b:16 * b + 16].astype(np.float32)
            s = np.float32(np.max(np.abs(block)) / six_g)
            if s == 0:
                s = np.float32(1.0)
            code = np.array([min(s, np.float32(448))], np.float32).astype(ml_dtypes.float8_e4m3fn)
            scales[r, b] = code.view(np.uint8)[0]
            sf = np.float32(code.astype(np.float32)[0])
            if sf == 0:
                continue
            denom = np.float32(sf * g)
            for i in range(16):
                v = np.float32(block[i] / denom)
                codes[r, 16 * b + i] = np.array([np.clip(v, -6, 6)], np.float32).astype(
                    ml_dtypes.float4_e2m1fn).view(np.uint8)[0] & 0xF
    return ref.pack_e2m1(codes), scales


def bf16_data(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    x = (rng.standard_normal((rows, k)) * np.exp(rng.uniform(-3, 3, (rows, 1)))).astype(ml_dtypes.bfloat16)
    x[0, :16] = 0  # an all-zero block
    return x


@pytest.mark.parametrize("rows, k", [(3, 48), (17, 16), (5, 80)])
def test_the_quantizer_reference_is_modelopts_recipe(rows, k) -> None:
    x = bf16_data(np.random.default_rng(k), rows, k)
    packed, scales, g = ref.quantize(x)
    assert g == np.float32(np.float32(np.abs(x.astype(np.float32)).max()) / np.float32(2688))
    want_packed, want_scales = modelopt_loop(x, g)
    assert (packed == want_packed).all() and (scales == want_scales).all()
    assert scales[0, 0] == 0x38 and (packed[0, :8] == 0).all()  # the all-zero block: scale 1.0, zero codes


def test_a_given_global_scale_is_used_and_the_tiled_layout_holds_the_same_scales() -> None:
    x = bf16_data(np.random.default_rng(5), 130, 96)
    p1, s1, g1 = ref.quantize(x, global_value=0.01)
    assert g1 == np.float32(0.01)
    p2, s2, _ = ref.quantize(x, global_value=0.01, layout="tiled")
    assert (p1 == p2).all() and (s2 == ref.scales_to_tiled(s1)).all()


def test_dequantized_values_are_within_the_block_error_bound() -> None:
    x = bf16_data(np.random.default_rng(7), 64, 256)
    packed, scales, g = ref.quantize(x)
    x64 = x.astype(np.float64)
    err = np.abs(ref.dequantize(packed, scales, 64, 256) * np.float64(g) - x64).reshape(64, 16, 16)
    amax = np.abs(x64).reshape(64, 16, 16).max(axis=2, keepdims=True)
    # E2M1 steps are at most 2 (between 4 and 6) on a grid where the block max maps near 6; the UE4M3
    # scale is rounded by at most 2**-4 relative.
    assert (err <= amax * (1.0 / 6.0) * (1 + 2.0**-4) + 1e-30).all()


def test_zero_tensor_quantizes_to_zeros_with_global_one() -> None:
    packed, scales, g = ref.quantize(np.zeros((2, 32), np.float32))
    assert g == 1.0 and (packed == 0).all() and (scales == 0x38).all()


# -- kernels compiled offline --------------------------------------------------------------------------
VARIANTS = [(1, 8, "linear", True, "fp4"), (1, 8, "tiled", False, "bf16"), (16, 4, "tiled", True, "fp4"),
            (3, 4, "linear", False, "fp4")]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_the_fp4_kernel_compiles_for_every_target(arch, variant) -> None:
    prog = mc.compile_program(fp4_vector_source(), arch, fp4_gemv_options(*variant))
    assert prog.image[:4] == b"\x7fELF" and FP4_SYMBOL.encode() in prog.image


def ptx(arch: str, variant: tuple[Any, ...] = VARIANTS[0]) -> str:
    options = mc.CompileOptions(defines=dict(fp4_gemv_options(*variant).defines), output="ptx")
    return mc.compile_program(fp4_vector_source(), arch, options).image.decode()


@pytest.mark.parametrize("arch, cvt", [("compute_80", False), ("compute_90", False), ("compute_120", False),
                                       ("compute_120f", True), ("compute_120a", True), ("compute_100f", True)])
def test_e2m1_pairs_decode_with_cvt_only_on_family_specific_blackwell_targets(arch, cvt) -> None:
    text = ptx(arch)
    assert ("cvt.rn.f16x2.e2m1x2" in text) is cvt
    assert has_e2m1_cvt(arch.replace("compute", "sm")) is cvt


def test_the_vector_kernel_streams_16_byte_weight_loads_past_l1_after_the_grid_dependency() -> None:
    text = ptx("compute_90")
    body = text[text.index(f".entry {FP4_SYMBOL}"):]
    assert body.count("ld.global.nc.L1::no_allocate.v4.u32") >= 8  # eight rows, 16 bytes each
    wait = body.index("griddepcontrol.wait")
    assert all(body.find(op) > wait for op in ("ld.global", "st.global"))
    narrow = ptx("compute_90", (1, 8, "linear", False, "fp4"))
    assert narrow.count("ld.global.nc.L1::no_allocate.v2.u32") >= 8
    assert "griddepcontrol" not in ptx("compute_80")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
def test_the_quantizer_and_layout_kernels_compile(arch, layout) -> None:
    for source, symbols in ((fp4_quantize_source(), ("fp4_amax_reset", "fp4_amax_bf16", "fp4_quantize_bf16")),
                            (fp4_layout_source(), ("fp4_scales_linear_to_tiled", "fp4_scales_tiled_to_linear",
                                                   "fp4_decode_bf16", "fp4_scale_output"))):
        image = mc.compile_program(source, arch, layout_options(layout)).image
        assert all(s.encode() in image for s in symbols)


# -- argument checks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["Linear", None, 1, "swizzled"])
def test_layouts_are_checked(value) -> None:
    with pytest.raises(mc.ContractError) as info:
        check_layout("scale_layout", value)
    assert info.value.argument == "scale_layout"


@pytest.mark.parametrize("k", [8, 24, 4100])
def test_k_must_be_a_multiple_of_16(k) -> None:
    with pytest.raises(mc.ContractError, match="multiple of 16"):
        check_fp4_k(k, "spec.k")
    check_fp4_k(k + 16 - k % 16)


def test_warps_are_checked_before_anything_is_compiled() -> None:
    with pytest.raises(mc.ContractError) as info:
        Fp4Gemv(None, 1, 64, 64, "fp4", "linear", None, warps=3)  # type: ignore[arg-type]
    assert info.value.argument == "warps"


class Fp4Stand:
    """A BlockScaledFp4VectorPlan stand-in around a spy engine, with valid operands."""

    def __init__(self, activation: str = "fp4", layout: str = "tiled", n: int = 64, k: int = 80) -> None:
        self.ctx = FakeContext()
        self.stream = fake_stream(self.ctx, 0x5000)
        self.spy = Spy()
        plan: Any = object.__new__(BlockScaledFp4VectorPlan)
        plan._spec = mc.DenseVectorSpec(n, k)
        plan._activation, plan._layout = activation, layout
        plan._engine = self.spy
        plan._names = ("x", "x_scales", "w", "w_scales", "y")
        plan._operands = fp4_operands(plan._names, 1, n, k, activation, layout, k % 32 == 0)
        plan._context, plan._stream, plan._in, plan._out = self.ctx, self.stream, dtype_info(mc.u8), dtype_info(mc.bf16)
        self.plan = plan
        self.buffers: dict[str, Any] = {op.name: fake_buffer(self.ctx, op.info.scalar_type, op.count, 0x10_0000 * (j + 1))
                                        for j, op in enumerate(plan.operands) if op.count}
        self.buffers.setdefault("x_scales", None)
        self.globals = {"global_x": fake_buffer(self.ctx, mc.f32, 1, 0x90_0000),
                        "global_w": fake_buffer(self.ctx, mc.f32, 1, 0x91_0000)}

    def run(self, **overrides: Any) -> None:
        args = [overrides.get(name, self.buffers[name]) for name in self.plan._names]
        kw = {name: overrides.get(name, buf) for name, buf in self.globals.items()}
        self.plan.execute(overrides.get("stream", self.stream), *args, alpha=overrides.get("alpha", 1.0), **kw)


def test_valid_operands_launch_once_with_the_scale_and_global_addresses() -> None:
    stand = Fp4Stand()
    stand.run()
    assert len(stand.spy.calls) == 1
    call = stand.spy.calls[0]
    assert call[2] == stand.buffers["x_scales"].handle and call[6:8] == (0x90_0000, 0x91_0000) and call[8] == 1.0


def test_bf16_activations_take_no_scales() -> None:
    stand = Fp4Stand(activation="bf16")
    stand.run()
    assert stand.spy.calls[0][2] == 0
    with pytest.raises(mc.ContractError) as info:
        stand.run(x_scales=fake_buffer(stand.ctx, mc.e4m3, 4096, 0x70_0000))
    assert info.value.argument == "x_scales" and len(stand.spy.calls) == 1


@pytest.mark.parametrize("argument, make, expected", [
    ("w", lambda c: fake_buffer(c, mc.u8, 64 * 40 - 1, 0x20_0000), "at least 2560"),        # packed K/2 per row
    ("w", lambda c: fake_buffer(c, mc.u8, 64 * 40, 0x20_0004), "aligned to 8"),            # K % 32 != 0: 8-byte loads
    ("w_scales", lambda c: fake_buffer(c, mc.e4m3, 64 * 5, 0x40_0000), "at least 1024"),   # tiled padding missing
    ("w_scales", lambda c: fake_buffer(c, mc.u8, 1024, 0x40_0000), "DeviceBuffer[e4m3]"),
    ("x", lambda c: fake_buffer(c, mc.bf16, 80, 0x10_0000), "DeviceBuffer[u8]"),
    ("x_scales", lambda c: None, "DeviceBuffer[e4m3]"),
    ("y", lambda c: fake_buffer(c, mc.bf16, 64, 0x50_0001), "aligned to 2"),
    ("global_x", lambda c: fake_buffer(c, mc.f16, 2, 0x90_0000), "DeviceBuffer[f32]"),
    ("global_w", lambda c: fake_buffer(c, mc.f32, 1, 0x91_0002), "aligned to 4"),
    ("alpha", lambda c: "2", "real number"),
])
def test_every_operand_is_checked_before_anything_is_enqueued(argument, make, expected) -> None:
    stand = Fp4Stand()
    with pytest.raises(mc.ContractError) as info:
        stand.run(**{argument: make(stand.ctx)})
    assert info.value.argument == argument and expected in str(info.value)
    assert stand.spy.calls == []


def test_another_stream_is_refused() -> None:
    stand = Fp4Stand()
    with pytest.raises(mc.ContractError) as info:
        stand.run(stream=fake_stream(stand.ctx, 0x6000))
    assert info.value.argument == "stream" and stand.spy.calls == []


def test_wide_loads_need_16_byte_aligned_weights() -> None:
    stand = Fp4Stand(layout="linear", k=128)
    with pytest.raises(mc.ContractError, match="aligned to 16"):
        stand.run(w=fake_buffer(stand.ctx, mc.u8, 64 * 64, 0x20_0008))
    with pytest.raises(mc.ContractError, match="aligned to 2") as info:  # two scales per 16-bit load
        stand.run(w_scales=fake_buffer(stand.ctx, mc.e4m3, 64 * 8, 0x40_0001))
    assert info.value.argument == "w_scales" and stand.spy.calls == []
    stand.run()
    assert len(stand.spy.calls) == 1


def test_the_executor_packs_the_kernel_parameters_like_c_and_refuses_before_launching() -> None:
    pytest.importorskip("numba")
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    blocks: list[bytes] = []
    seen: list[tuple[int, ...]] = []
    sizes = [8] * 7 + [4, 4, 4]

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_uint64 * 10).from_address(params)
        blocks.append(b"".join(ctypes.string_at(p, sizes[i]) for i, p in enumerate(pointers)))
        seen.append((f, gx, bx, stream))
        return 0

    entry = proto(fake_launch)
    execute = fp4_executor(0xF00, 8, 128, 64, 96, (8, 1, 16, 1, 2), launch_function=entry, stream=0x55)
    assert execute(0x55, 0x1000, 0x1101, 0x2000, 0x3001, 0x4002, 0x5004, 0, 1.5) == 0
    assert seen == [(0xF00, 8, 128, 0x55)]
    assert blocks[0] == struct.pack("<QQQQQQQfii", 0x4002, 0x2000, 0x3001, 0x1000, 0x1101, 0x5004, 0, 1.5, 64, 96)
    assert execute(0x56, 0x1000, 0, 0x2000, 0, 0x4000, 0, 0, 1.0) == INVALID_HANDLE
    assert execute(0x55, 0x1004, 0, 0x2000, 0, 0x4000, 0, 0, 1.0) == INVALID_VALUE
    assert execute(0x55, 0x1000, 0, 0x2008, 0, 0x4000, 0, 0, 1.0) == INVALID_VALUE
    assert execute(0x55, 0x1000, 0, 0x2000, 0, 0x4001, 0, 0, 1.0) == INVALID_VALUE
    assert execute(0x55, 0x1000, 0, 0x2000, 0, 0x4000, 0x5002, 0, 1.0) == INVALID_VALUE
    assert len(seen) == 1


def test_the_portable_executor_decodes_multiplies_and_scales_in_order() -> None:
    numba = pytest.importorskip("numba")
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import BlockScaledFp4Plan, portable_executor

    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    launches: list[tuple[int, int, bytes]] = []
    layouts = {0xD0: [8, 8, 8, 4, 4], 0x5C: [8, 8, 8, 8, 4, 8]}

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        sizes = layouts[f]
        pointers = (ctypes.c_uint64 * len(sizes)).from_address(params)
        launches.append((f, gx, b"".join(ctypes.string_at(p, sizes[i]) for i, p in enumerate(pointers))))
        return 0

    @numba.njit
    def dense(stream, a, b, c, alpha, beta):
        return 0 if a == 0xA16 and b == 0xB16 and c == 0xC32 and alpha == 1.0 and beta == 0.0 else 77

    m, n, k = 32, 64, 80
    plan: Any = object.__new__(BlockScaledFp4Plan)
    plan._stream = fake_stream(FakeContext(), 0x55)
    plan._spec = mc.DenseMatmulSpec(m, n, k)
    plan._dense = SimpleNamespace(numba_execute=dense)
    plan._decode, plan._scale = SimpleNamespace(handle=0xD0), SimpleNamespace(handle=0x5C)
    plan._decode_b = mc.LaunchConfig.for_elements(n * k // 8, 256)
    plan._decode_a = mc.LaunchConfig.for_elements(m * k // 8, 256)
    plan._scale_config = mc.LaunchConfig((8,), (256,))
    plan._b16, plan._a16, plan._c32 = (SimpleNamespace(handle=h) for h in (0xB16, 0xA16, 0xC32))
    entry = proto(fake_launch)
    execute = portable_executor(plan, (4, 1, 4, 1, 2), launch_function=entry)
    assert execute(0x55, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0x4000, 0x4004, 0.5) == 0
    assert [(f, g) for f, g, _ in launches] == [(0xD0, 3), (0xD0, 2), (0x5C, 8)]
    assert launches[0][2] == struct.pack("<QQQii", 0xB16, 0x2000, 0x2100, n, k)
    assert launches[1][2] == struct.pack("<QQQii", 0xA16, 0x1000, 0x1100, m, k)
    assert launches[2][2] == struct.pack("<QQQQfq", 0x3000, 0xC32, 0x4000, 0x4004, 0.5, m * n)  # alpha at 32, count at 40
    assert execute(0x56, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == INVALID_HANDLE
    assert execute(0x55, 0x1002, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == INVALID_VALUE
    assert len(launches) == 3
