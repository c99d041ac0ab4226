"""The E2M1 word decoders of ``cuda_src/fp4_common.cuh`` (``MIRCUDA_FP4_DECODE``: bytes, pairs, e4m3, table)
without a GPU: a numpy emulation of each bit formula decodes every nibble value at every position of a
32-bit word (all 2^16 low halves, each beside several high halves) to the exact E2M1 value times
2^-kDecodeLog2 in the variant's element order; the formulas emulated are the ones in the header; the FP16
block sums of ``fp4_matvec_bf16`` (HFMA2) never round for any decoder scale; both decode kernels compile
with NVRTC for sm_80 (e4m3: refused by name), sm_90 and sm_120f with every decoder; on sm_90 the SASS of
the FP16 path has no per-weight conversion. The GPU checks of the same decoders (an NVRTC probe kernel and
the plans against float64) are in ``tests/gpu/test_matmul_fp4_gpu.py``."""

from __future__ import annotations

import re
import subprocess
from importlib import resources

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul._fp4 import (BLOCK_SUMS, DECODES, FP4_MMA_SYMBOL, FP4_SYMBOL, check_gemv_knobs, default_decode,
                                 fp4_gemv_options, fp4_mma_options, fp4_mma_source, fp4_vector_source)
from mircuda.matmul._fp4_reference import E2M1_VALUES

DECODE_LOG2 = {"bytes": 14, "pairs": 14, "e4m3": 6, "table": 0}
"""fp4::kDecodeLog2 of each decoder: decoded = value * 2^-L."""


def word_element(decode: str, i: int, hi: int) -> int:
    """fp4::word_element: the element (0..7) of a word in half i's low (hi = 0) or high half."""
    if decode == "pairs":
        return i + 4 * hi
    if decode == "e4m3":
        return 4 * (i & 1) + (i >> 1) + 2 * hi
    return 2 * i + hi


def e2m1_half_bits(code: np.ndarray) -> np.ndarray:
    """The table's entry for one code: fp4::e2m1_to_half_bits."""
    mag = code & 7
    high = np.where(mag == 0, 0, np.where(mag == 1, 0x38, 0x3C + 2 * (mag.astype(np.int64) - 2)))
    return (((code & 8) << 12) | (high << 8)).astype(np.uint32)


def table() -> np.ndarray:
    """fp4::decode_table as decode_table_fill writes it: word b * 32 + l = half2 of byte b, copy l."""
    i = np.arange(256 * 32, dtype=np.uint32)
    b = i >> 5
    return e2m1_half_bits(b & 15) | (e2m1_half_bits(b >> 4) << 16)


def e4m3_to_half(v: np.ndarray) -> np.ndarray:
    """cvt.rn.f16x2.e4m3x2 of both 16-bit halves of v: (low half2, high half2) as uint32 FP16 pairs."""
    as_f16 = (v.astype("<u4").view(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float16).view(np.uint16)
              .astype(np.uint32).reshape(-1, 4))
    return as_f16[:, 0] | (as_f16[:, 1] << 16), as_f16[:, 2] | (as_f16[:, 3] << 16)


def decode_word(decode: str, w: np.ndarray, lane: int = 0) -> np.ndarray:
    """fp4::decode_word in numpy: [len(w), 4] uint32 FP16 pairs."""
    w = w.astype(np.uint32)
    out = np.empty((w.size, 4), np.uint32)
    if decode == "bytes":  # e2m1x2_to_half2_scaled of each byte
        for i in range(4):
            b = w >> np.uint32(8 * i)
            out[:, i] = ((b & 8) << 12) | ((b & 7) << 9) | ((b & 0x80) << 24) | ((b & 0x70) << 21)
    elif decode == "pairs":
        out[:, 0] = ((w << 9) & 0x0E000E00) | ((w << 12) & 0x80008000)
        out[:, 1] = ((w << 5) & 0x0E000E00) | ((w << 8) & 0x80008000)
        out[:, 2] = ((w << 1) & 0x0E000E00) | ((w << 4) & 0x80008000)
        out[:, 3] = ((w >> 3) & 0x0E000E00) | (w & 0x80008000)
    elif decode == "e4m3":
        even = ((w << 2) & 0x1C1C1C1C) | ((w << 4) & 0x80808080)
        odd = ((w >> 2) & 0x1C1C1C1C) | (w & 0x80808080)
        out[:, 0], out[:, 1] = e4m3_to_half(even)
        out[:, 2], out[:, 3] = e4m3_to_half(odd)
    else:
        tab = table()
        lane4 = np.uint32(lane << 2)
        for j, offset in enumerate([(w << 7) & 0x7F80, (w >> 1) & 0x7F80, (w >> 9) & 0x7F80, (w >> 17) & 0x7F80]):
            out[:, j] = tab[(offset | lane4) >> 2]
    return out.astype(np.uint32)


def half_values(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) halves of uint32 FP16 pairs as float64."""
    lo = (pairs & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64)
    hi = (pairs >> 16).astype(np.uint16).view(np.float16).astype(np.float64)
    return lo, hi


def all_words() -> np.ndarray:
    """Every 16-bit pattern in the low half beside three different high halves, and the swap: each nibble
    value at each of the 8 positions next to every value of its neighbours in the same half."""
    lo = np.arange(1 << 16, dtype=np.uint32)
    highs = [lo, lo ^ 0xFFFF, (lo * 40503) & 0xFFFF]
    return np.concatenate([lo | (h << 16) for h in highs] + [h | (lo << 16) for h in highs]).astype(np.uint32)


def nibbles(w: np.ndarray) -> np.ndarray:
    return np.stack([(w >> np.uint32(4 * j)) & 15 for j in range(8)], axis=1)


# -- the bit formulas ----------------------------------------------------------------------------------
@pytest.mark.parametrize("decode", DECODES)
def test_word_element_is_a_permutation_of_the_eight_elements(decode) -> None:
    got = sorted(word_element(decode, i, hi) for i in range(4) for hi in range(2))
    assert got == list(range(8))


@pytest.mark.parametrize("decode", DECODES)
def test_every_decoder_gives_every_e2m1_value_exactly_in_its_order(decode) -> None:
    words = all_words()
    codes = nibbles(words)
    lanes = [0, 1, 17, 31] if decode == "table" else [0]
    for lane in lanes:
        out = decode_word(decode, words, lane)
        for i in range(4):
            lo, hi = half_values(out[:, i])
            for half, value in ((0, lo), (1, hi)):
                want = E2M1_VALUES[codes[:, word_element(decode, i, half)]].astype(np.float64)
                got = value * 2.0 ** DECODE_LOG2[decode]
                assert np.array_equal(got, want), (decode, lane, i, half)
                # the sign survives on zero too (negative zero: code 8)
                assert np.array_equal(np.signbit(got), np.signbit(want))


def test_all_256_bytes_decode_to_the_reference_pair_with_every_decoder() -> None:
    bytes_ = np.arange(256, dtype=np.uint32)
    want_lo, want_hi = E2M1_VALUES[bytes_ & 15], E2M1_VALUES[bytes_ >> 4]
    for decode in DECODES:
        # byte b as elements 0, 1 of a word (natural order), everything else zero
        out = decode_word(decode, bytes_)
        values = np.zeros((256, 8))
        for i in range(4):
            lo, hi = half_values(out[:, i])
            values[:, word_element(decode, i, 0)] = lo
            values[:, word_element(decode, i, 1)] = hi
        values *= 2.0 ** DECODE_LOG2[decode]
        assert np.array_equal(values[:, 0], want_lo) and np.array_equal(values[:, 1], want_hi), decode
        assert not values[:, 2:].any(), decode


def test_the_table_is_32_bank_replicated_and_lane_l_reads_its_copy() -> None:
    tab = table()
    assert tab.size * 4 == 32 * 1024
    rows = tab.reshape(256, 32)
    assert (rows == rows[:, :1]).all()  # every copy the same
    w = np.array([0x12345678, 0xFEDCBA98], np.uint32)
    for lane in range(32):
        for shift, j in ((-7, 0), (1, 1), (9, 2), (17, 3)):
            offset = ((w << -shift) if shift < 0 else (w >> shift)) & 0x7F80 | (lane << 2)
            byte = (w >> (8 * j)) & 0xFF
            assert (offset >> 2 == byte * 32 + lane).all() and ((offset >> 2) % 32 == lane).all()  # bank = lane


def test_the_emulated_formulas_are_the_header_s() -> None:
    text = resources.files("mircuda").joinpath("cuda_src/fp4_common.cuh").read_text()
    squeezed = re.sub(r"\s+", "", text)
    for line in ["h[0]=((w<<9)&0x0E000E00u)|((w<<12)&0x80008000u);",
                 "h[1]=((w<<5)&0x0E000E00u)|((w<<8)&0x80008000u);",
                 "h[2]=((w<<1)&0x0E000E00u)|((w<<4)&0x80008000u);",
                 "h[3]=((w>>3)&0x0E000E00u)|(w&0x80008000u);",
                 "unsignedeven=((w<<2)&0x1C1C1C1Cu)|((w<<4)&0x80808080u);",
                 "unsignedodd=((w>>2)&0x1C1C1C1Cu)|(w&0x80808080u);",
                 "(((w<<7)&0x7F80u)|lane4)", "(((w>>1)&0x7F80u)|lane4)", "(((w>>9)&0x7F80u)|lane4)",
                 "(((w>>17)&0x7F80u)|lane4)",
                 "return((b&0x8u)<<12)|((b&0x7u)<<9)|((b&0x80u)<<24)|((b&0x70u)<<21);",
                 "constexprintkDecodeLog2=MIRCUDA_FP4_DECODE==MIRCUDA_FP4_DECODE_E4M3?6:MIRCUDA_FP4_DECODE=="
                 "MIRCUDA_FP4_DECODE_TABLE?0:14;",
                 "returnMIRCUDA_FP4_DECODE==MIRCUDA_FP4_DECODE_PAIRS?i+4*hi:MIRCUDA_FP4_DECODE=="
                 "MIRCUDA_FP4_DECODE_E4M3?4*(i&1)+(i>>1)+2*hi:2*i+hi;",
                 "constunsignedhigh=mag==0u?0u:mag==1u?0x38u:0x3Cu+2u*(mag-2u);"]:
        assert line in squeezed, line


# -- FP16 block sums (fp4_vector.cu, MIRCUDA_FP4_HALF_SUM=1) ------------------------------------------------
def hfma_block(wq: np.ndarray, xq: np.ndarray, log2: int, act_log2: int = 0) -> tuple[float, bool]:
    """One 16-element block as the kernel sums it: weights value * 2^-L, activations value * 2^-A (A =
    ``act_log2``: fp4_vector.cu's kActLog2), 8 HFMA2 per half (one rounding to FP16 each); returns the FP32 sum
    of both halves and whether any FP16 value (an operand or an HFMA2 result) rounded."""
    rounded = False
    halves = []
    for h in range(2):
        acc = np.float16(0)
        for j in range(8):
            e = 2 * j + h
            w, x = wq[e] * 2.0 ** -log2, xq[e] * 2.0 ** -act_log2
            rounded |= float(np.float16(w)) != w or float(np.float16(x)) != x
            exact = float(np.float16(w)) * float(np.float16(x)) + float(acc)
            acc = np.float16(exact)
            rounded |= float(acc) != exact
        halves.append(float(acc))
    return float(np.float32(halves[0]) + np.float32(halves[1])), rounded


def kernel_act_log2(log2: int) -> int:
    """fp4_vector.cu's ``kActLog2`` for a decoder's L (the source line is checked below): L where the block
    sums' unit 2^-(2L+2) is no finer than FP16's subnormal step 2^-24, else 0 (the activations multiplied back)."""
    return log2 if 2 * log2 + 2 <= 24 else 0


def test_the_activations_factor_is_the_kernel_s() -> None:
    text = re.sub(r"\s+", "", resources.files("mircuda").joinpath("cuda_src/fp4_vector.cu").read_text())
    assert "constexprintkActLog2=2*fp4::kDecodeLog2+2<=24?fp4::kDecodeLog2:0;" in text
    assert {d: kernel_act_log2(L) for d, L in DECODE_LOG2.items()} == {"bytes": 0, "pairs": 0, "e4m3": 6, "table": 0}


SATURATED_AND_EDGE_BLOCKS = [(np.full(16, 6.0), np.full(16, 6.0)), (np.full(16, -6.0), np.full(16, 6.0)),
                             (np.full(16, 0.5), np.full(16, 0.5)), (np.tile([6.0, 0.5], 8), np.tile([6.0, -0.5], 8)),
                             (np.full(16, 6.0), np.tile([6.0, 0.5, 0.5, 0.5], 4))]
"""All +-6 (each half sums 8 * 36: 1152 units of 2^-(L+A+2), the proof's bound reached), the smallest
products (0.25: one unit), and mixed ones."""


@pytest.mark.parametrize("log2", sorted(set(DECODE_LOG2.values())))
def test_the_fp16_block_sums_never_round(log2) -> None:
    """With the activations at the kernel's 2^-kActLog2 (2^-6 for the e4m3 decoder since the HMUL2 was dropped):
    no operand or HFMA2 result rounds, and the sum times 2^(L + A) is the exact dot product."""
    act = kernel_act_log2(log2)
    rng = np.random.default_rng(log2)
    grid = E2M1_VALUES.astype(np.float64)
    blocks = SATURATED_AND_EDGE_BLOCKS + [(rng.choice(grid, 16), rng.choice(grid, 16)) for _ in range(3000)]
    for wq, xq in blocks:
        got, rounded = hfma_block(wq, xq, log2, act)
        assert not rounded
        assert got * 2.0 ** (log2 + act) == float(np.dot(wq, xq))


def test_keeping_the_bytes_decoders_2_to_the_minus_14_on_the_activations_would_round() -> None:
    """Why kActLog2 is 0 for L = 14: products of 2^-28 units fall below FP16's subnormal step 2^-24 (0.5 * 0.5
    * 2^-28 is not an FP16 value), so the HMUL2 that undoes 2^-14 is needed there."""
    _, rounded = hfma_block(np.full(16, 0.5), np.full(16, 0.5), 14, 14)
    assert rounded


# -- compilation ---------------------------------------------------------------------------------------
ARCHS = ["sm_80", "sm_90", "sm_120f"]


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("arch", ARCHS)
def test_both_kernels_compile_with_every_decoder(arch, decode) -> None:
    if decode == "e4m3" and arch == "sm_80":
        with pytest.raises(mc.CompileError, match="8.9"):
            mc.compile_program(fp4_vector_source(), arch, fp4_gemv_options(1, 8, "linear", True, "fp4", decode, "fp16"))
        return
    for m, rows, layout, wide, act, block_sum, stages in [
            (1, 8, "linear", True, "fp4", "fp16", 2), (3, 4, "tiled", False, "fp4", "fp16", 3),
            (1, 8, "tiled", True, "fp4", "fp32", 4), (2, 4, "linear", False, "bf16", "fp32", 2)]:
        prog = mc.compile_program(fp4_vector_source(), arch,
                                  fp4_gemv_options(m, rows, layout, wide, act, decode, block_sum, stages))
        assert FP4_SYMBOL.encode() in prog.image
    for m, layout, wide, rows, stages in [(1, "linear", True, 16, 2), (9, "tiled", False, 32, 3),
                                          (16, "linear", True, 32, 4), (4, "tiled", True, 16, 4)]:
        prog = mc.compile_program(fp4_mma_source(), arch, fp4_mma_options(m, layout, wide, decode, rows, stages))
        assert FP4_MMA_SYMBOL.encode() in prog.image


def test_an_unknown_decoder_number_is_refused_by_the_kernel() -> None:
    options = mc.CompileOptions(defines={"MIRCUDA_FP4_M": 1, "MIRCUDA_FP4_DECODE": 4})
    with pytest.raises(mc.CompileError, match="MIRCUDA_FP4_DECODE"):
        mc.compile_program(fp4_vector_source(), "sm_90", options)


def sass(source, options, arch: str = "sm_90") -> str:
    from tests.test_matmul_fp8_mma import cuobjdump

    tool, env = cuobjdump()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(mc.compile_program(source, arch, options).image)
        out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    return out.stdout


def opcodes(text: str) -> list[str]:
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", text)


@pytest.mark.parametrize("decode", DECODES)
def test_the_fp16_path_converts_once_per_block_not_per_weight(decode) -> None:
    """M = 1, 8 rows, 16-byte loads: a step is 8 rows x 32 weights per lane (two 16-element blocks per row)."""
    half = opcodes(sass(fp4_vector_source(), fp4_gemv_options(1, 8, "linear", True, "fp4", decode, "fp16")))
    full = opcodes(sass(fp4_vector_source(), fp4_gemv_options(1, 8, "linear", True, "fp4", decode, "fp32")))
    assert not any(op.startswith(("F2F.", "LDL", "STL")) for op in half + full)
    assert sum(op.startswith("HFMA2") for op in half) >= 8 * 8 * 2  # 8 per row and 16-element block
    # FP16 -> FP32 conversions (HADD2.F32): a few per row and 16-element block in the FP16 path (the block
    # sum and its scale: 3 for 8 HFMA2), two per weight pair in the FP32 path (16 per block).
    converts = sum(op == "HADD2.F32" for op in half)
    assert converts * 4 < sum(op == "HADD2.F32" for op in full)
    assert converts < sum(op.startswith("HFMA2") for op in half) // 2
    if decode == "e4m3":
        assert "F2FP.F16.E4M3.UNPACK_B" in half
    if decode == "table":
        assert sum(op.startswith("LDS") for op in half) >= 8 * 2 * 4  # one per byte of codes


@pytest.mark.parametrize("decode", DECODES)
@pytest.mark.parametrize("m, rows, stages", [(8, 16, 2), (16, 32, 4), (1, 16, 4)])
def test_the_mma_kernel_keeps_hmma_and_no_local_memory_with_every_decoder(decode, m, rows, stages) -> None:
    ops = opcodes(sass(fp4_mma_source(), fp4_mma_options(m, "linear", True, decode, rows, stages)))
    assert "HMMA.16816.F32" in ops and not any(op.startswith(("LDL", "STL")) for op in ops)
    # the UE4M3 scales reach FP16 by bit operations and an HMUL2, never a conversion instruction
    assert not any(op.startswith(("F2F.", "F2FP.F16.F32")) for op in ops)


# -- knobs ---------------------------------------------------------------------------------------------
def test_the_default_decoder_follows_the_target() -> None:
    assert default_decode("sm_120f") == default_decode("sm_100a") == "bytes"  # cvt.rn.f16x2.e2m1x2
    assert default_decode("sm_90") == default_decode("sm_89") == default_decode("sm_120") == "e4m3"
    assert default_decode("sm_80") == default_decode("sm_86") == "pairs"


@pytest.mark.parametrize("kwargs, argument", [
    ({"decode": "nibbles"}, "decode"), ({"decode": 1}, "decode"), ({"rows": 16}, "rows"), ({"rows": 8.0}, "rows"),
    ({"block_sum": "bf16"}, "block_sum"), ({"activation": "bf16", "block_sum": "fp16"}, "block_sum"),
    ({"symbol": FP4_MMA_SYMBOL, "rows": 8}, "rows"), ({"rows": 32}, "rows"), ({"symbol": FP4_MMA_SYMBOL, "block_sum": "fp32"}, "block_sum"),
    ({"warps": 3}, "warps"), ({"arch": "sm_80", "decode": "e4m3"}, "decode"), ({"stages": 1}, "stages"),
    ({"stages": 5}, "stages"), ({"stages": 2.0}, "stages"),
])
def test_bad_knobs_are_refused_by_name(kwargs, argument) -> None:
    args = {"arch": "sm_90", "symbol": FP4_SYMBOL, "activation": "fp4", "decode": None, "rows": None,
            "block_sum": None, "warps": None, "stages": None, **kwargs}
    with pytest.raises(mc.ContractError) as info:
        check_gemv_knobs(args["arch"], args["symbol"], args["activation"], args["decode"], args["rows"],
                         args["block_sum"], args["warps"], args["stages"])
    assert info.value.argument == argument


def test_the_mma_kernel_takes_any_warp_count_up_to_8_and_the_vector_kernel_powers_of_two() -> None:
    """fp4_mma_bf16's warps take K steps w, w + warps, ... and meet in shared memory (MMA_WARPS); fp4_matvec_bf16
    keeps 1, 2, 4, 8."""
    from mircuda.matmul._fp4 import MMA_WARPS
    assert tuple(range(1, 9)) == MMA_WARPS
    for warps in (3, 5, 6, 7):
        check_gemv_knobs("sm_90", FP4_MMA_SYMBOL, "fp4", None, None, None, warps)
        with pytest.raises(mc.ContractError, match="1, 2, 4 or 8") as info:
            check_gemv_knobs("sm_90", FP4_SYMBOL, "fp4", None, None, None, warps)
        assert info.value.argument == "warps"
    for bad in (0, 9, 2.0):
        with pytest.raises(mc.ContractError, match="1 to 8") as info:
            check_gemv_knobs("sm_90", FP4_MMA_SYMBOL, "fp4", None, None, None, bad)
        assert info.value.argument == "warps"


def test_good_knobs_pass_and_the_decoder_defaults() -> None:
    assert check_gemv_knobs("sm_90", FP4_SYMBOL, "fp4", None, None, None, None) == ("e4m3", None, None)
    for block_sum in BLOCK_SUMS:
        assert check_gemv_knobs("sm_80", FP4_SYMBOL, "fp4", "table", 4, block_sum, 8) == ("table", 4, block_sum)
    assert check_gemv_knobs("sm_90", FP4_MMA_SYMBOL, "fp4", "pairs", None, None, 2) == ("pairs", None, None)
    assert check_gemv_knobs("sm_90", FP4_MMA_SYMBOL, "fp4", None, 32, None, None) == ("e4m3", 32, None)
