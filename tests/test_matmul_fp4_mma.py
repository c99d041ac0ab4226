"""The tensor-core NVFP4 decode kernel (``cuda_src/fp4_mma_gemv.cu``, ``fp4_mma_bf16``) without a GPU: it
compiles with NVRTC for sm_80, sm_90 and sm_120f for every M, both scale layouts and both load widths;
its PTX issues ``mma.sync.aligned.m16n8k16`` FP16 -> FP32 and streams the weights past L1 after
``griddepcontrol.wait``; its SASS (when cuobjdump is found) holds ``HMMA.16816.F32`` and no local
memory; and a numpy emulation of the kernel's lane -> column mapping, its FP16 decode-and-scale and the
PTX ISA's m16n8k16 fragment layouts reproduces the float64 product of the dequantized operands (odd N,
K a multiple of 16 but not of 32 or 64, M past 8, tiled and linear scales), reading nothing out of
bounds. The plan's choice of kernel is checked by the GPU tests (``tests/gpu/test_matmul_fp4_gpu.py``)."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul._fp4 import (FP4_KERNELS, FP4_MMA_SYMBOL, FP4_SYMBOL, fp4_gemv_options, fp4_mma_options,
                                  fp4_mma_source, fp4_operands, fp4_vector_source, mma_step_columns)
from mircuda.matmul._fp4 import DECODES
from mircuda.matmul._fp4_reference import dequantize, quantize, ue4m3_decode
from mircuda.matmul._moe_kernels import grouped_options, grouped_source
from tests.test_matmul_fp4_decode import DECODE_LOG2, decode_word

MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def ptx(arch: str, m: int, layout: str = "linear", wide: bool = True) -> str:
    options = fp4_mma_options(m, layout, wide)
    text = mc.compile_program(fp4_mma_source(), arch, mc.CompileOptions(defines=dict(options.defines),
                                                                           output="ptx")).image.decode()
    # The module's one entry, to the end (cuda_fp16.h's inline asm puts braces at line starts).
    return text[text.index(f".entry {FP4_MMA_SYMBOL}"):]


def test_the_plan_names_both_nvrtc_kernels() -> None:
    assert FP4_KERNELS == (FP4_SYMBOL, FP4_MMA_SYMBOL) == ("fp4_matvec_bf16", "fp4_mma_bf16")


# -- compilation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("m", [1, 2, 3, 8, 9, 16])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_the_kernel_compiles_for_every_m_layout_width_and_target(arch, m, layout, wide) -> None:
    prog = mc.compile_program(fp4_mma_source(), arch, fp4_mma_options(m, layout, wide))
    assert prog.image[:4] == b"\x7fELF" and FP4_MMA_SYMBOL.encode() in prog.image


@pytest.mark.parametrize("arch", ["compute_80", "compute_90", "compute_120f"])
@pytest.mark.parametrize("m, wide", [(2, True), (9, True), (16, False), (8, False)])
def test_the_products_run_on_fp16_mma_and_the_weights_stream_past_l1(arch, m, wide) -> None:
    body = ptx(arch, m, wide=wide)
    n8 = -(-m // 8)
    # The loop over the 2-step register ring (the default MIRCUDA_FP4_STAGES) is unrolled: one consume per
    # ring slot, E / 4 mmas per n8 tile each (E = 32 or 16 columns per lane).
    assert body.count(MMA_PTX) == 2 * (8 if wide else 4) * n8
    # Weights past L1, whole 128-byte lines into L2 (the measured default: MIRCUDA_FP4_L2_128B).
    load = "ld.global.nc.L1::no_allocate.L2::128B." + ("v4.u32" if wide else "v2.u32")
    assert body.count(load) == 2 * 3  # rows g and g + 8; the first step, then one load per ring slot
    assert "mul.rn.f16x2" in body or "mul.f16x2" in body  # the UE4M3 scale applied in FP16


def test_on_hopper_and_later_the_kernel_waits_for_the_previous_grid_before_reading_its_operands() -> None:
    body = ptx("compute_90", 16)
    wait = body.index("griddepcontrol.wait")
    assert all(body.find(op) > wait for op in ("ld.global", "st.global"))
    assert body.index("griddepcontrol.launch_dependents") > body.rindex("ld.global.nc.L1::no_allocate")


def test_without_m_the_kernel_refuses_to_compile_by_name() -> None:
    with pytest.raises(mc.CompileError, match="MIRCUDA_FP4_M"):
        mc.compile_program(fp4_mma_source(), "sm_90", mc.CompileOptions(defines={}))
    with pytest.raises(mc.CompileError, match="1..16"):
        mc.compile_program(fp4_mma_source(), "sm_90", mc.CompileOptions(defines={"MIRCUDA_FP4_M": 17}))


def test_the_source_inlines_the_shared_headers() -> None:
    text = fp4_mma_source().text
    assert '#include "fp4_common.cuh"' not in text and text.count("namespace fp4 {") == 1


# -- SASS ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("m, wide", [(2, True), (16, True), (16, False)])
def test_the_sass_holds_hmma_and_no_local_memory(tmp_path, arch, m, wide) -> None:
    from tests.test_matmul_fp8_mma import cuobjdump

    tool, env = cuobjdump()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(mc.compile_program(fp4_mma_source(), arch, fp4_mma_options(m, "linear", wide)).image)
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    sass = out.stdout
    assert "HMMA.16816.F32" in sass, f"no HMMA.16816.F32 in the {arch} SASS"
    assert not re.search(r"\b(?:STL|LDL)\b", sass), "the kernel spills to local memory"
    assert "HMUL2" in sass
    # The streamed weight loads: past L1 (.NA), 128-byte lines into L2 (LTC128B), 16 or 8 bytes per lane.
    assert f"LDG.E.NA.LTC128B.{128 if wide else 64}.CONSTANT" in sass


def test_the_l2_line_hint_is_the_tensor_core_kernels_alone() -> None:
    """fp4_mma_bf16 asks L2 for whole lines (measured faster); the CUDA-core and grouped kernels, where the hint
    measured no difference, keep plain streamed loads; -D MIRCUDA_FP4_L2_128B=0 turns it off for an A/B."""
    assert "ld.global.nc.L1::no_allocate.L2::128B.v4.u32" in ptx("compute_90", 4)
    off = fp4_mma_options(4, "linear", True)
    text = mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(
        defines={**dict(off.defines), "MIRCUDA_FP4_L2_128B": 0}, output="ptx")).image.decode()
    assert "L2::128B" not in text and "ld.global.nc.L1::no_allocate.v4.u32" in text
    vector = mc.compile_program(fp4_vector_source(), "compute_90", mc.CompileOptions(
        defines=dict(fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a", "int32").defines), output="ptx"))
    grouped = mc.compile_program(grouped_source(), "compute_90", mc.CompileOptions(defines=dict(grouped_options(
        n=768, k=2048, groups=8, bank_size=8, capacity=64, rows_per_tile=16, fixed_rows=0, tiled=True, sets=1).defines),
        output="ptx"))
    for other in (vector.image.decode(), grouped.image.decode()):
        assert "L2::128B" not in other and "ld.global.nc.L1::no_allocate.v4.u32" in other


def test_k_a_multiple_of_the_warp_step_drops_the_load_predicate() -> None:
    """fp4_mma_options(k=...) defines MIRCUDA_FP4_FULL_STEPS when K is a multiple of the warp step (128 columns with
    16-byte loads, 64 with 8-byte ones): every lane's columns are then inside K and the loads are unpredicated."""
    assert mma_step_columns(True) == 128 and mma_step_columns(False) == 64
    full = dict(fp4_mma_options(4, "linear", True, k=4096).defines)
    assert full["MIRCUDA_FP4_FULL_STEPS"] == "1"
    for wide, k in [(True, 4160), (True, 96), (False, 1040), (True, None)]:
        assert "MIRCUDA_FP4_FULL_STEPS" not in dict(fp4_mma_options(4, "linear", wide, k=k).defines), (wide, k)
    body = ptx("compute_90", 4)
    text = mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(
        defines=dict(full), output="ptx")).image.decode()
    unpredicated = text[text.index(f".entry {FP4_MMA_SYMBOL}"):]
    # the same loads, fewer branches around them
    assert unpredicated.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") == body.count(
        "ld.global.nc.L1::no_allocate.L2::128B.v4.u32")
    assert unpredicated.count("bra") < body.count("bra")


def test_split_k_makes_the_kernel_a_cluster_whose_ranks_meet_in_rank_0s_shared_memory() -> None:
    """fp4_mma_options(split_k=S) defines MIRCUDA_FP4_SPLIT_K: the entry gets a compile-time cluster shape (S, 1, 1), so
    a plain launch takes it; ranks 1.. store into rank 0's shared memory (mapa, st.shared::cluster) between cluster
    barriers. Without a split none of it is compiled."""
    assert "MIRCUDA_FP4_SPLIT_K" not in dict(fp4_mma_options(4, "linear", True).defines)
    for split in (2, 3, 4):
        defines = dict(fp4_mma_options(4, "linear", True, k=4096, split_k=split).defines)
        assert defines["MIRCUDA_FP4_SPLIT_K"] == str(split)
        text = mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(
            defines=defines, output="ptx")).image.decode()
        body = text[text.index(f".entry {FP4_MMA_SYMBOL}"):]
        assert re.search(rf"\.reqnctapercluster\s+{split},\s*1,\s*1", text), split
        assert "mapa.shared::cluster.u32" in body and "st.shared::cluster.f32" in body
        assert body.count("barrier.cluster.arrive") == 2 and body.count("barrier.cluster.wait") == 2
    plain = ptx("compute_90", 4)
    assert "cluster" not in plain


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
def test_a_split_kernel_compiles_for_hopper_and_blackwell_and_refuses_ampere_by_name(arch) -> None:
    prog = mc.compile_program(fp4_mma_source(), arch, fp4_mma_options(16, "tiled", True, k=4096, split_k=3))
    assert FP4_MMA_SYMBOL.encode() in prog.image
    with pytest.raises(mc.CompileError, match="MIRCUDA_FP4_SPLIT_K > 1 needs compute capability >= 9.0"):
        mc.compile_program(fp4_mma_source(), "sm_80", fp4_mma_options(4, "linear", True, split_k=2))
    with pytest.raises(mc.CompileError, match="MIRCUDA_FP4_SPLIT_K must be in 1..4"):
        mc.compile_program(fp4_mma_source(), arch, mc.CompileOptions(defines={"MIRCUDA_FP4_M": 4,
                                                                               "MIRCUDA_FP4_SPLIT_K": 5}))


@pytest.mark.parametrize("layout", ["linear", "tiled"])
def test_with_16_byte_loads_a_rows_two_scales_are_one_16_bit_load(layout) -> None:
    """MIRCUDA_FP4_SCALE_PAIRS (the default): a lane's two 16-K groups have adjacent scale bytes in both layouts,
    read by one ld.global.nc.u16 per weight and activation row; -D MIRCUDA_FP4_SCALE_PAIRS=0 keeps byte loads; 8-byte
    code loads (one group per lane) read bytes either way."""
    pairs = ptx("compute_90", 4, layout)
    # rows g, g + 8 and activation row g, in each of the 3 load sites of the 2-stage ring (the prologue, 2 slots)
    assert pairs.count("ld.global.nc.u16") == 3 * 3 and "ld.global.nc.u8" not in pairs
    off = mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(
        defines={**dict(fp4_mma_options(4, layout, True).defines), "MIRCUDA_FP4_SCALE_PAIRS": 0},
        output="ptx")).image.decode()
    assert "ld.global.nc.u16" not in off and off.count("ld.global.nc.u8") == 3 * 3 * 2
    narrow = ptx("compute_90", 4, layout, wide=False)
    assert "ld.global.nc.u16" not in narrow and "ld.global.nc.u8" in narrow


def test_scale_pairs_skip_the_fp16_multiply_by_256_where_the_decoder_leaves_room() -> None:
    """With the e4m3 decoder (2^-6) the scale enters as FP16 s x 2^-8 (no HMUL2 by 0x5C00 = 256); with the bytes
    decoder (2^-14) it would leave FP16's range, so the multiply stays."""
    def text(decode: str) -> str:
        options = fp4_mma_options(4, "linear", True, decode)
        return mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(
            defines=dict(options.defines), output="ptx")).image.decode()
    by_256 = str(0x5C005C00)  # the FP16 pair (256, 256), as NVVM writes the constant
    assert by_256 not in text("e4m3")
    assert by_256 in text("bytes")


@pytest.mark.parametrize("decode", DECODES)
def test_every_decoder_shifts_its_scales_exactly_where_the_products_stay_exact(decode) -> None:
    """For each decoder (2^-L: bytes and pairs 14, e4m3 6, table 0) the kernel keeps the HMUL2 by 256 unless
    q s 2^-(L + 8) is exact in FP16 for every E2M1 q and finite UE4M3 s (bytes 1..0x7e); 8-byte code loads (no
    pairs) keep it for every decoder. The emulation checks each product of the shifted decoders too."""
    q = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    s = ue4m3_decode(np.arange(1, 0x7F, dtype=np.uint8)).astype(np.float64)
    shifted = np.outer(q, s) * 2.0 ** -(DECODE_LOG2[decode] + 8)
    exact = bool(np.array_equal(shifted.astype(np.float16).astype(np.float64), shifted))
    by_256 = str(0x5C005C00)
    for wide in (True, False):
        options = fp4_mma_options(4, "linear", wide, decode)
        text = mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(
            defines=dict(options.defines), output="ptx")).image.decode()
        assert (by_256 not in text) == (wide and exact) == shifted_scales(decode, wide), (decode, wide)


def test_every_shifted_scale_times_every_e2m1_value_is_exact_in_fp16() -> None:
    """The exactness behind shifted scales: q x s x 2^-(6 + 8) for every E2M1 value q and every finite UE4M3 s (bytes
    1..0x7e) is an FP16 value (a multiple of 2^-24, FP16's subnormal step, below 65504), so the HMUL2 of the
    e4m3-decoded code (q x 2^-6) by the shifted scale (s x 2^-8) rounds nothing."""
    q = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    s = ue4m3_decode(np.arange(1, 0x7F, dtype=np.uint8)).astype(np.float64)
    exact = np.outer(q, s) * 2.0 ** -14
    assert np.array_equal(exact.astype(np.float16).astype(np.float64), exact)
    # and the bound is tight: one more factor 2^-8 (the scale shifted without the decoder's room) would round
    assert not np.array_equal((exact * 2.0 ** -8).astype(np.float16).astype(np.float64), exact * 2.0 ** -8)


def test_the_mma_kernels_operands_ask_2_byte_aligned_activation_scales_with_16_byte_loads() -> None:
    names = ("a", "a_scales", "b", "b_scales", "d")
    for kernel, k, want in [(FP4_MMA_SYMBOL, 4096, 2), (FP4_MMA_SYMBOL, 1040, 1), (FP4_SYMBOL, 4096, 1)]:
        ops = {o.name: o for o in fp4_operands(names, 4, 64, k, "fp4", "linear", k % 32 == 0, False, kernel)}
        assert ops["a_scales"].alignment == want, (kernel, k)
        assert ops["b_scales"].alignment == (2 if k % 32 == 0 else 1)
        if want == 2:
            assert FP4_MMA_SYMBOL in ops["a_scales"].reason


# -- numpy emulation of the kernel ---------------------------------------------------------------
def decode_pair(byte: int) -> tuple[np.float16, np.float16]:
    """fp4_common.cuh's software decode of one byte: (low nibble, high nibble) as FP16 bits, x 2^-14."""
    lo = ((byte & 0x8) << 12) | ((byte & 0x7) << 9)
    hi = ((byte & 0x80) << 8) | ((byte & 0x70) << 5)
    return np.array([lo, hi], np.uint16).view(np.float16)


def tiled_offset(row: int, kb: int, katoms: int) -> int:
    atom = (row >> 7) * katoms + (kb >> 2)
    return atom * 512 + (row & 31) * 16 + ((row >> 5) & 3) * 4 + (kb & 3)


def scale_byte(scales: np.ndarray, row: int, kb: int, k: int, layout: str, rows: int) -> int:
    kblocks = k // 16
    at = row * kblocks + kb if layout == "linear" else tiled_offset(row, kb, (kblocks + 3) // 4)
    assert 0 <= kb < kblocks and 0 <= row < rows and 0 <= at < scales.size, "out-of-bounds scale read"
    return int(scales.reshape(-1)[at])


def pair_scale_byte(scales: np.ndarray, row: int, kb: int, q: int, k: int, layout: str, rows: int) -> int:
    """MIRCUDA_FP4_SCALE_PAIRS (16-byte code loads): byte ``q`` of the 16-bit little-endian word the kernel loads at
    the address of scale (row, kb), kb even; asserts the word is 2-byte aligned (given an aligned base) and inside
    the operand. Whether byte 1 is scale (row, kb + 1) is left to the comparison with the float64 product."""
    kblocks = k // 16
    at = row * kblocks + kb if layout == "linear" else tiled_offset(row, kb, (kblocks + 3) // 4)
    assert kb % 2 == 0 and at % 2 == 0 and 0 <= row < rows and at >= 0 and at + 1 < scales.size, "a bad 16-bit read"
    flat = scales.reshape(-1)
    return (int(flat[at]) | int(flat[at + 1]) << 8) >> (8 * q) & 0xFF


def decoded_slot(codes: np.ndarray, slot: int, decode: str) -> np.ndarray:
    """Half2 slot 4 w + i of a lane's code bytes as the kernel's decoder gives it (FP16, value x 2^-L)."""
    if decode == "bytes":
        return decode_pair(int(codes[slot]))
    word = int(np.frombuffer(codes[4 * (slot // 4): 4 * (slot // 4) + 4].tobytes(), "<u4")[0])
    pair = decode_word(decode, np.array([word], np.uint32))[0, slot % 4]
    return np.array([pair & 0xFFFF, pair >> 16], np.uint16).view(np.float16)


def shifted_scales(decode: str, wide: bool) -> bool:
    """Whether fp4_mma_bf16 (MIRCUDA_FP4_SCALE_PAIRS, the default) takes the scales as FP16 s x 2^-8: scale pairs
    (16-byte code loads) and a decoder factor 2^-L with L <= 6."""
    return wide and DECODE_LOG2[decode] <= 6


def scaled(codes: np.ndarray, slot: int, scale: int, decode: str = "bytes", shift: int = 0) -> np.ndarray:
    """operands(): the decoded pair of half2 slot ``slot`` times its UE4M3 scale (x 2^-shift) in FP16; asserts
    the product is exact."""
    s16 = np.float16(ue4m3_decode(np.array([scale], np.uint8))[0] * 2.0 ** -shift)
    assert float(s16) == float(ue4m3_decode(np.array([scale], np.uint8))[0]) * 2.0 ** -shift
    pair = decoded_slot(codes, slot, decode)
    out = (pair * s16).astype(np.float16)
    assert all(float(out[i]) == float(pair[i]) * float(s16) for i in range(2)), "inexact FP16 scaling"
    return out


def emulate(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray, m: int, n: int, k: int, layout: str,
            warps: int, alpha: float, decode: str = "bytes") -> np.ndarray:
    """fp4_mma_bf16's arithmetic (before the BF16 rounding), lane by lane, with exact (float64) mma sums; with
    16-byte code loads each row's two scales of a step come from one 16-bit word (pair_scale_byte), as the kernel
    reads them."""
    wide = k % 32 == 0
    e = 32 if wide else 16
    chunk = 4 * e
    n8 = -(-m // 8)
    steps = -(-k // chunk)
    shift = 8 if shifted_scales(decode, wide) else 0
    out = np.full((m, n), np.nan)
    for blk in range(-(-n // 16)):
        row0 = 16 * blk
        acc = np.zeros((n8, 16, 8))  # [n8 tile, weight row, activation column]; summed over the warps
        for warp in range(warps):
            for step in range(warp, steps, warps):
                for j in range(n8):
                    # per mma jm: A [16 rows, 16 k], B [16 k, 8 cols]
                    for jm in range(e // 4):
                        amat = np.zeros((16, 16))
                        bmat = np.zeros((16, 8))
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            col = step * chunk + e * t
                            if col >= k:
                                continue  # zeros
                            kb = col // 16 + jm // 4
                            for r in range(2):
                                row = min(row0 + g + 8 * r, n - 1)
                                codes = b[row, col // 2: col // 2 + e // 2]
                                assert codes.size == e // 2
                                s = (pair_scale_byte(sb, row, col // 16, jm // 4, k, layout, n) if wide else
                                     scale_byte(sb, row, kb, k, layout, n))
                                amat[g + 8 * r, 2 * t: 2 * t + 2] = scaled(codes, 2 * jm, s, decode, shift)
                                amat[g + 8 * r, 2 * t + 8: 2 * t + 10] = scaled(codes, 2 * jm + 1, s, decode, shift)
                            mrow = g + 8 * j
                            if mrow < m:
                                codes = a[mrow, col // 2: col // 2 + e // 2]
                                s = (pair_scale_byte(sa, mrow, col // 16, jm // 4, k, layout, m) if wide else
                                     scale_byte(sa, mrow, kb, k, layout, m))
                                bmat[2 * t: 2 * t + 2, g] = scaled(codes, 2 * jm, s, decode, shift)
                                bmat[2 * t + 8: 2 * t + 10, g] = scaled(codes, 2 * jm + 1, s, decode, shift)
                        acc[j] += amat @ bmat
        # the C fragment: lane (g, t) holds (row g (+8), col 2t (+1)); warp 0 stores
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for j in range(n8):
                for el in range(4):
                    mm = 8 * j + 2 * t + (el & 1)
                    row = row0 + g + 8 * (el >> 1)
                    if mm < m and row < n:
                        unbias = 2.0 ** (2 * (DECODE_LOG2[decode] + shift))
                        out[mm, row] = alpha * unbias * acc[j, g + 8 * (el >> 1), 2 * t + (el & 1)]
    return out


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("m, n, k, warps", [(3, 19, 48, 1), (9, 21, 160, 2), (2, 17, 80, 4), (16, 33, 96, 1)])
def test_the_emulated_kernel_matches_the_float64_product_of_the_dequantized_operands(m, n, k, warps, layout,
                                                                                     decode) -> None:
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    xa = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.01, 100, (m, 1)).astype(np.float32)
    xb = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(1e-4, 10, (n, 1)).astype(np.float32)
    xb[0, :16] = 0  # an all-zero block
    a, sa, _ = quantize(xa, layout=layout)
    b, sb, _ = quantize(xb, layout=layout)
    ref = dequantize(a, sa, m, k, layout) @ dequantize(b, sb, n, k, layout).T
    got = emulate(a, sa, b, sb, m, n, k, layout, warps, 0.75, decode)
    assert not np.isnan(got).any()  # every output written once
    np.testing.assert_allclose(got, 0.75 * ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


# -- the plans on a fake sm_90 device: what they ask of the operands -----------------------------------
@pytest.fixture
def fake_plans(monkeypatch: pytest.MonkeyPatch):
    """``make(cls, spec, **knobs)``: a BlockScaledFp4VectorPlan or BlockScaledFp4Plan on a fake sm_90 device (132
    SMs) whose compiler compiles nothing (the plans' own checks and operand tables run unchanged)."""
    from types import SimpleNamespace

    from mircuda.matmul import _fp4

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64), arch="sm_90", name="fake",
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    context, stream = SimpleNamespace(device_info=lambda: info), SimpleNamespace(handle=7)

    def compile(source, options):
        kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None, handle=100)
        return SimpleNamespace(kernel=lambda contract: kernel)

    for name, value in [("plan_stream", lambda stream, context: None), ("_device_checks", lambda context, name: None),
                        ("fp4_compiler", lambda given, context: SimpleNamespace(arch="sm_90", compile=compile)),
                        ("plan_compiler", lambda given, context: None),
                        ("blocks_per_sm", lambda context, kernel, warps: 28 // warps)]:
        monkeypatch.setattr(_fp4, name, value)
    return lambda cls, spec, **knobs: cls(context, stream, spec, **knobs)


@pytest.mark.parametrize("k, want", [(4096, 2), (4160, 2), (1040, 1)])
def test_the_vector_plan_running_the_mma_kernel_asks_2_byte_aligned_x_scales(fake_plans, k, want) -> None:
    """BlockScaledFp4VectorPlan(kernel="fp4_mma_bf16") runs the tensor-core kernel at M = 1, which reads x_scales in
    16-bit pairs when K % 32 == 0: the plan asked 1-byte alignment (it did not hand its kernel to fp4_operands), so
    an odd x_scales address reached the GPU (misaligned address: the context lost) instead of a ContractError."""
    plan = fake_plans(mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, k), kernel=FP4_MMA_SYMBOL)
    ops = {o.name: o for o in plan.operands}
    assert (ops["x_scales"].alignment, ops["w_scales"].alignment) == (want, want), k
    if want == 2:
        assert FP4_MMA_SYMBOL in ops["x_scales"].reason
    assert all(FP4_MMA_SYMBOL in o.reason or o.reason == "byte loads" for o in plan.operands)
    # the CUDA-core kernel's word decoders read the activation scales byte by byte
    vector = fake_plans(mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, k), kernel=FP4_SYMBOL, decode="e4m3")
    assert {o.name: o.alignment for o in vector.operands}["x_scales"] == 1


def test_both_plans_take_any_warp_count_up_to_8_for_the_mma_kernel(fake_plans) -> None:
    """MMA_WARPS reached BlockScaledFp4Plan, but BlockScaledFp4VectorPlan kept its own 1, 2, 4, 8 check for both
    kernels: warps=3 with kernel="fp4_mma_bf16" was refused there. The CUDA-core kernel still refuses 3."""
    for warps in (3, 5, 6, 7):
        vector = fake_plans(mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, 4096), kernel=FP4_MMA_SYMBOL,
                            warps=warps)
        matrix = fake_plans(mc.BlockScaledFp4Plan, mc.DenseMatmulSpec(4, 64, 4096), kernel=FP4_MMA_SYMBOL, warps=warps)
        assert vector.warps == matrix._gemv.warps == warps
        for cls, spec in ((mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, 4096)),
                          (mc.BlockScaledFp4Plan, mc.DenseMatmulSpec(4, 64, 4096))):
            with pytest.raises(mc.ContractError, match="1, 2, 4 or 8") as info:
                fake_plans(cls, spec, kernel=FP4_SYMBOL, warps=warps)
            assert info.value.argument == "warps"
    with pytest.raises(mc.ContractError, match="1 to 8") as info:
        fake_plans(mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, 4096), kernel=FP4_MMA_SYMBOL, warps=9)
    assert info.value.argument == "warps"
    with pytest.raises(mc.ContractError, match="1, 2, 4 or 8") as info:
        fake_plans(mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, 4096), warps=3)  # the default kernel
    assert info.value.argument == "warps"


def test_split_k_multiplies_the_grid_and_counts_in_the_warp_rule(fake_plans) -> None:
    """split_k=S launches S blocks per 32-row block (a cluster each); with warps not given, the one-wave rule sees S
    times the blocks, each with K / S: on the fake device (132 SMs, 28 // warps resident blocks) 4096 rows are 128
    row blocks; 8 warps alone and with S = 2 (256 blocks of 3 per SM, 2048 warps <= 16 per SM); with S = 4 each block
    has K = 1024, too short for 8 warps of two 128-column steps each: 4."""
    spec = mc.DenseMatmulSpec(4, 4096, 4096)
    for split, warps in ((None, 8), (1, 8), (2, 8), (4, 4)):
        plan = fake_plans(mc.BlockScaledFp4Plan, spec, kernel=FP4_MMA_SYMBOL, split_k=split)
        gemv = plan._gemv
        assert (gemv.split_k, gemv.warps, gemv.config.grid[0]) == (split or 1, warps, 128 * (split or 1)), split
    plan = fake_plans(mc.BlockScaledFp4Plan, spec, kernel=FP4_MMA_SYMBOL, split_k=np.int64(3), warps=2)
    assert (plan._gemv.split_k, plan._gemv.warps, plan._gemv.config.grid[0]) == (3, 2, 384)
    vector = fake_plans(mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(4096, 4096), kernel=FP4_MMA_SYMBOL, split_k=2)
    assert vector._engine.config.grid[0] == 256


@pytest.mark.parametrize("n, k, rows, arch, resident, want", [
    (6144, 4096, 32, 90, 3, True),     # 192 row blocks > 132 SMs; 384 blocks of 4 warps <= 132 x 3
    (5120, 4096, 32, 90, 3, True),     # 160
    (6144, 4096, 32, 120, 3, True),    # SM120 has clusters too
    (4096, 4096, 32, 90, 3, False),    # 128 row blocks: one per SM already
    (8192, 4096, 32, 90, 3, False),    # 512 split blocks > 396: two waves
    (14336, 4096, 32, 90, 3, False),
    (6144, 4096, 32, 90, 2, False),    # M = 16's registers: two 4-warp blocks per SM, 384 > 264
    (6144, 4096, 16, 90, 3, False),    # 16-row blocks were not measured
    (6144, 4096, 32, 80, 3, False),    # no clusters below cc 9.0
    (6144, 1024, 32, 90, 3, False),    # K / 2 = 512 columns: one 128-column step per warp
])
def test_the_default_split_is_two_blocks_where_row_blocks_overfill_the_sms_within_one_wave(n, k, rows, arch, resident,
                                                                                          want) -> None:
    from mircuda.matmul._fp4 import default_split_k

    assert default_split_k(n, k, rows, arch, 132, lambda w: {4: resident}[w], 128) is want


def test_the_plan_splits_by_default_where_the_rule_says_and_never_against_a_given_knob(fake_plans) -> None:
    """On the fake device (132 SMs, 28 // warps resident blocks: 7 of 4 warps) 6144 rows are 192 row blocks: the
    default becomes clusters of two 4-warp blocks (384 blocks), quoted with its measurement; warps, split_k,
    16-row blocks or the CUDA-core kernel given keep one block per row block."""
    from mircuda.matmul._fp4 import SPLIT_K_DEFAULT_MEASURED

    spec = mc.DenseMatmulSpec(8, 6144, 4096)
    gemv = fake_plans(mc.BlockScaledFp4Plan, spec, kernel=FP4_MMA_SYMBOL)._gemv
    assert (gemv.split_k, gemv.warps, gemv.config.grid[0], gemv.default_split) == (2, 4, 384, True)
    assert dict(gemv.options.defines)["MIRCUDA_FP4_SPLIT_K"] == "2"
    assert SPLIT_K_DEFAULT_MEASURED in gemv.describe() and "in clusters of 2 blocks per row block" in gemv.describe()
    for knobs in ({"warps": 4}, {"split_k": 1}, {"rows": 16}):
        other = fake_plans(mc.BlockScaledFp4Plan, spec, kernel=FP4_MMA_SYMBOL, **knobs)._gemv
        assert (other.split_k, other.default_split) == (1, False), knobs
        assert "MIRCUDA_FP4_SPLIT_K" not in dict(other.options.defines) and "clusters" not in other.describe()
    given = fake_plans(mc.BlockScaledFp4Plan, spec, kernel=FP4_MMA_SYMBOL, split_k=2)._gemv
    assert given.split_k == 2 and not given.default_split and SPLIT_K_DEFAULT_MEASURED not in given.describe()


def test_the_split_set_still_times_the_unsplit_kernel_where_the_default_now_splits(fake_plans) -> None:
    """fp4_mma_split.json compared each split with the plan's default "before the default split existed"; once
    default_split_k made clusters of two 4-warp blocks the default at 6144x4096 M = 4 / 8 (one of the script's
    shapes), --variants split timed the rule's split as "default" beside the same split as s2w4, and no variant ran the
    unsplit kernel the rule was measured against. ``s1`` (split_k=1, warps by the one-wave rule) is that kernel."""
    from tests.benchmark_script import load_benchmark

    split = load_benchmark("fp4_mma_ab").VARIANTS["split"]
    spec = mc.DenseMatmulSpec(8, 6144, 4096)
    default = fake_plans(mc.BlockScaledFp4Plan, spec, **split["default"][0])._gemv
    assert (default.split_k, default.warps, default.default_split) == (2, 4, True)
    assert {name for name, (knobs, _) in split.items()
            if (knobs.get("split_k"), knobs.get("warps")) == (default.split_k, default.warps)} == {"s2w4"}
    unsplit = fake_plans(mc.BlockScaledFp4Plan, spec, **split["s1"][0])._gemv
    assert (unsplit.split_k, unsplit.default_split, unsplit.config.grid[0]) == (1, False, 192)
    assert "MIRCUDA_FP4_SPLIT_K" not in dict(unsplit.options.defines)


@pytest.mark.parametrize("split_k, knobs, match", [
    (0, {"kernel": FP4_MMA_SYMBOL}, r"None or one of \(1, 2, 3, 4\)"),
    (5, {"kernel": FP4_MMA_SYMBOL}, r"None or one of \(1, 2, 3, 4\)"),
    (2.0, {"kernel": FP4_MMA_SYMBOL}, r"None or one of \(1, 2, 3, 4\)"),
    (True, {"kernel": FP4_MMA_SYMBOL}, r"None or one of \(1, 2, 3, 4\)"),
    (2, {"kernel": FP4_SYMBOL}, "the knob tunes kernel 'fp4_mma_bf16'; this plan runs 'fp4_matvec_bf16': "
                                "kernel='fp4_mma_bf16' with NVFP4 activations takes it"),
    (1, {"kernel": FP4_SYMBOL}, "the knob tunes kernel 'fp4_mma_bf16'"),
], ids=str)
def test_a_bad_split_k_is_refused_by_name(fake_plans, split_k, knobs, match) -> None:
    for cls, spec in ((mc.BlockScaledFp4Plan, mc.DenseMatmulSpec(4, 64, 4096)),
                      (mc.BlockScaledFp4VectorPlan, mc.DenseVectorSpec(64, 4096))):
        with pytest.raises(mc.ContractError, match=match) as info:
            fake_plans(cls, spec, split_k=split_k, **knobs)
        assert info.value.argument == "split_k"


def test_split_k_is_refused_where_the_plan_runs_no_nvrtc_kernel_and_below_hopper() -> None:
    from mircuda.matmul._fp4 import check_split_k

    with pytest.raises(mc.ContractError, match="thread block clusters need cc >= 9.0") as info:
        check_split_k(2, FP4_MMA_SYMBOL, "sm_80")
    assert info.value.argument == "split_k"
    assert check_split_k(1, FP4_MMA_SYMBOL, "sm_80") == 1 and check_split_k(None, FP4_SYMBOL, "sm_90") is None
    assert check_split_k(np.int32(4), FP4_MMA_SYMBOL, "sm_120f") == 4


def test_split_k_at_m_above_16_is_refused_as_an_nvrtc_knob(fake_plans) -> None:
    with pytest.raises(mc.ContractError, match="tunes the NVRTC kernels") as info:
        fake_plans(mc.BlockScaledFp4Plan, mc.DenseMatmulSpec(32, 64, 4096), split_k=2)
    assert info.value.argument == "split_k"


@pytest.mark.parametrize("m", [1, 2])
def test_a_warp_count_only_the_mma_kernel_takes_says_how_to_ask_for_it(fake_plans, m) -> None:
    """BlockScaledFp4Plan at M = 1 and 2 (sm_90, K % 32 == 0) runs fp4_matvec_bf16 by default, so warps=3 was refused
    with "1, 2, 4 or 8 (..., kernel fp4_matvec_bf16)" and no word that the plan's other kernel takes it (rows=16 names
    the other kernel's rows). Now the refusal says kernel='fp4_mma_bf16' takes 1 to 8, and that kernel runs it."""
    spec = mc.DenseMatmulSpec(m, 64, 4096)
    for warps in (3, 5, 6, 7):
        with pytest.raises(mc.ContractError, match="1, 2, 4 or 8") as info:
            fake_plans(mc.BlockScaledFp4Plan, spec, warps=warps)
        assert info.value.argument == "warps"
        assert f"kernel={FP4_MMA_SYMBOL!r} takes 1 to 8" in info.value.expected, info.value.expected
        assert fake_plans(mc.BlockScaledFp4Plan, spec, warps=warps, kernel=FP4_MMA_SYMBOL)._gemv.warps == warps
    for bad in (9, 0, True):  # no kernel takes them: no hint
        with pytest.raises(mc.ContractError) as info:
            fake_plans(mc.BlockScaledFp4Plan, spec, warps=bad)
        assert info.value.argument == "warps" and FP4_MMA_SYMBOL not in info.value.expected


def test_the_operand_reasons_name_the_kernel_that_loads_them() -> None:
    """fp4_operands(kernel=...) named fp4_matvec_bf16 in the reasons of a, b and d whatever kernel ran, so a refusal
    for an fp4_mma_bf16 plan blamed the other kernel's loads."""
    names = ("a", "a_scales", "b", "b_scales", "d")
    for kernel in FP4_KERNELS:
        for k in (4096, 1040):
            ops = fp4_operands(names, 4, 64, k, "fp4", "linear", k % 32 == 0, False, kernel)
            other = FP4_SYMBOL if kernel == FP4_MMA_SYMBOL else FP4_MMA_SYMBOL
            for o in ops:
                assert other not in o.reason, (kernel, k, o)
                assert kernel in o.reason or o.reason == "byte loads", (kernel, k, o)


@pytest.mark.parametrize("layout", ["linear", "tiled"])
def test_a_rows_two_scales_of_a_step_are_adjacent_for_every_k(layout) -> None:
    """The premise of MIRCUDA_FP4_SCALE_PAIRS, on the reference layouts (what quantize writes), for every K % 32 == 0
    up to 4096 and rows across two 128-row atoms: a lane's K-blocks kb (even: 32 t + 128 step columns) and kb + 1
    are adjacent bytes at an even offset, so one 16-bit load of a 2-byte aligned operand reads both. The emulation
    above reads them that way; this covers the K it does not."""
    from mircuda.matmul._fp4_reference import tiled_offsets

    rows = 257
    for k in range(32, 4097, 32):
        kblocks = k // 16
        off = (tiled_offsets(rows, kblocks) if layout == "tiled" else
               np.arange(rows)[:, None] * kblocks + np.arange(kblocks)[None, :])
        even = off[:, 0::2]
        assert (even % 2 == 0).all() and (off[:, 1::2] == even + 1).all(), k
