"""NVFP4 without a GPU: the numpy references (E2M1/UE4M3 codecs against ml_dtypes, the tiled scale layout
against CUTLASS's atom, ModelOpt's quantization recipe), the device arithmetic simulated bit for bit, the
kernels compiled offline (software decode on sm_80/sm_90/sm_120, cvt.rn.f16x2.e2m1x2 on sm_120f/sm_100f),
the plans' operand checks with stand-ins, and the njit executors' parameter blocks."""

from __future__ import annotations

import ctypes
import re
import struct
from collections.abc import Callable
from importlib import resources
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.matmul import _fp4_reference as ref
from mircuda.matmul._fp4 import (FP4_SYMBOL, BlockScaledFp4VectorPlan, Fp4Gemv, fp4_executor, fp4_gemv_options,
                                 fp4_operands, fp4_vector_source, has_e2m1_cvt)
from mircuda.matmul._fp4_layout import (TILED_DECODE_MAX_K, check_fp4_k, check_layout, fp4_layout_source,
                                        fp4_quantize_source, layout_options)
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


# -- the portable path's decode kernels (fp4_layout.cu), emulated in numpy -----------------------------
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)
FINITE_SCALES = np.arange(0x7F, dtype=np.uint8)
"""Every finite UE4M3 byte, 0 included (0x7f is E4M3's NaN; the kernels read it as 480)."""


def byte_perm(x: np.ndarray, y: np.ndarray, s: Any) -> np.ndarray:
    """CUDA's ``__byte_perm`` (PRMT, default mode) for selector nibbles below 8: byte n of the result is
    byte ``(s >> 4n) & 7`` of the 8 bytes ``y:x``."""
    s = np.asarray(s, np.uint64)
    assert not (s & 0x8888).any(), "a selector nibble with its sign-mode bit set"
    xy = (np.asarray(y, np.uint64) << np.uint64(32)) | np.asarray(x, np.uint64)
    out = np.zeros(np.broadcast(xy, s).shape, np.uint64)
    for n in range(4):
        sel = (s >> np.uint64(4 * n)) & np.uint64(7)
        out |= ((xy >> (np.uint64(8) * sel)) & np.uint64(0xFF)) << np.uint64(8 * n)
    return out.astype(np.uint32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> BF16 bits, round to nearest even (``cvt.rn.bf16x2.f32``)."""
    return np.asarray(values, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)


def kernel_table(entries: np.ndarray) -> tuple[np.ndarray, ...]:
    """``decode::make_table`` of the BF16 bits ``entries[..., 8]``: (lo0, lo1, hi0, hi1)."""
    p = [entries[..., 2 * j] | (entries[..., 2 * j + 1] << 16) for j in range(4)]
    return (byte_perm(p[0], p[1], 0x6420), byte_perm(p[2], p[3], 0x6420), byte_perm(p[0], p[1], 0x7531),
            byte_perm(p[2], p[3], 0x7531))


def kernel_decode_word(w: np.ndarray, table: tuple[np.ndarray, ...]) -> np.ndarray:
    """``decode::decode_word``: a 32-bit code word and a table -> the eight BF16 bits, elements in order."""
    lo0, lo1, hi0, hi1 = table
    w = np.asarray(w, np.uint32)
    magnitude = w & np.uint32(0x77777777)
    sign_even = (w << np.uint32(4)) & np.uint32(0x80808080)
    sign_odd = w & np.uint32(0x80808080)
    l0, h0 = byte_perm(lo0, lo1, magnitude & 0xFFFF), byte_perm(hi0, hi1, magnitude & 0xFFFF)
    l1, h1 = byte_perm(lo0, lo1, magnitude >> 16), byte_perm(hi0, hi1, magnitude >> 16)
    pairs = [byte_perm(l0, h0, 0x5140) ^ (byte_perm(sign_even, sign_odd, 0x4400) & 0x80008000),
             byte_perm(l0, h0, 0x7362) ^ (byte_perm(sign_even, sign_odd, 0x5511) & 0x80008000),
             byte_perm(l1, h1, 0x5140) ^ (byte_perm(sign_even, sign_odd, 0x6622) & 0x80008000),
             byte_perm(l1, h1, 0x7362) ^ (byte_perm(sign_even, sign_odd, 0x7733) & 0x80008000)]
    return np.stack([half for p in pairs for half in (p & 0xFFFF, p >> 16)], axis=-1)


def product_to_odd(f: np.ndarray, a: np.float32) -> np.ndarray:
    """``decode::product_to_odd``: ``__fmul_rz`` then the last bit set when the residual is non-zero (the
    exact product of two float32 with at most 30 significant bits in all is a float64)."""
    exact = f.astype(np.float64) * np.float64(a)
    r = exact.astype(np.float32)
    r = np.where(np.abs(r.astype(np.float64)) > np.abs(exact), np.nextafter(r, np.float32(0)), r)
    odd = (r.astype(np.float64) != exact) & np.isfinite(r)
    return np.where(odd, (r.view(np.uint32) | 1).view(np.float32), r)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even of float64 values to BF16 (8 significant bits) in one rounding, as bits
    (normal range only)."""
    m, e = np.frexp(x)
    value = np.ldexp(np.rint(m * 256.0), e - 8)
    return bf16_bits(value.astype(np.float32))  # exact: value has 8 significant bits


def code_words() -> tuple[np.ndarray, np.ndarray]:
    """256 code words whose byte j is (b + j) mod 256: every code byte in every position; and their
    eight codes, element 2i in the low nibble of byte i."""
    b = np.arange(256, dtype=np.uint32)
    words = b | ((b + 1) % 256) << 8 | ((b + 2) % 256) << 16 | ((b + 3) % 256) << 24
    codes = np.stack([(words >> (4 * i)) & 0xF for i in range(8)], axis=-1)
    return words, codes


def test_the_exact_decode_gives_q_times_s_in_bf16_for_every_code_and_scale() -> None:
    words, codes = code_words()
    s = ref.ue4m3_decode(FINITE_SCALES)
    entries = bf16_bits(E2M1_MAGNITUDES[None, :] * s[:, None])  # decode::exact_table
    got = kernel_decode_word(words[None, :], tuple(t[:, None] for t in kernel_table(entries)))
    want = bf16_bits(ref.e2m1_decode(codes)[None, :, :].astype(np.float64) * s[:, None, None])
    exact = ref.e2m1_decode(codes)[None].astype(np.float64) * s[:, None, None]
    assert (bf16_bits(exact).astype(np.float64) == want).all()  # q * s is a BF16 value: no rounding
    assert got.shape == (127, 256, 8)
    assert (got == want).all()
    assert (got[:, codes == 8] == 0x8000).all()  # -0 stays negative zero


TWICE_ROUNDED = float(np.uint32(0x3FEC4444).view(np.float32))
"""An alpha_eff (1.8458333) for which the plain FP32 product then BF16 rounds twice, off by one BF16 ulp
for (q, s) = (1.5, 2^-7 * 1.25) (found by search): the test below tells one rounding from two."""


@pytest.mark.parametrize("alpha", [1.0, -1.0, 0.375, 2.0**-40, 3.0e5, -7.123456e-3, 0.1, -123.456789,
                                   TWICE_ROUNDED, -TWICE_ROUNDED])
def test_the_scaled_decode_rounds_q_s_alpha_once_to_bf16_for_every_code_and_scale(alpha) -> None:
    a = np.float32(alpha)
    words, codes = code_words()
    s = ref.ue4m3_decode(FINITE_SCALES)
    f = E2M1_MAGNITUDES[None, :] * s[:, None]  # exact in float32
    entries = bf16_bits(product_to_odd(f, a))  # decode::scaled_table (both halves)
    got = kernel_decode_word(words[None, :], tuple(t[:, None] for t in kernel_table(entries)))
    exact = ref.e2m1_decode(codes)[None].astype(np.float64) * s[:, None, None].astype(np.float64) * np.float64(a)
    assert (got == round_bf16(exact)).all()
    if abs(alpha) == TWICE_ROUNDED:  # the FP32 product rounded to nearest, then to BF16, differs there
        naive = bf16_bits((f * a).astype(np.float32))
        assert (naive != round_bf16(f.astype(np.float64) * np.float64(a))).sum() >= 1


def test_round_to_odd_then_nearest_even_is_one_rounding_on_random_products() -> None:
    rng = np.random.default_rng(7)
    f = (rng.integers(1, 64, 200_000) * 2.0 ** rng.integers(-20, 20, 200_000)).astype(np.float32)  # 6 bits
    a = rng.standard_normal(200_000).astype(np.float32) * np.float32(2.0**10)
    exact = f.astype(np.float64) * a.astype(np.float64)
    got = np.array([bf16_bits(product_to_odd(f[i:i + 1], a[i]))[0] for i in range(0, 200_000, 97)])
    assert (got == round_bf16(exact[::97])).all()


def kernel_run(packed: np.ndarray, scales: np.ndarray, rows: int, k: int, layout: str,
               alpha_eff: float | None = None) -> np.ndarray:
    """``decode::run`` over every flat word: code word w, scale of 16-element block w / 2 at the layout's
    offset (tiled: row = block / (K/16) in 32-bit arithmetic, then ``fp4::tiled_offset``), output uint4 w;
    the BF16 bits ``[rows, K]``."""
    words = np.ascontiguousarray(packed).view(np.uint32).ravel()
    block = np.arange(words.size, dtype=np.uint64) >> np.uint64(1)
    kblocks = k // 16
    if layout == "tiled":
        row = (block.astype(np.uint32) // np.uint32(kblocks)).astype(np.int64)
        kb = block.astype(np.int64) - row * kblocks
        katoms = (kblocks + 3) >> 2
        offset = ((row >> 7) * katoms + (kb >> 2)) * 512 + (row & 31) * 16 + ((row >> 5) & 3) * 4 + (kb & 3)
    else:
        offset = block.astype(np.int64)
    s = ref.ue4m3_decode(scales.ravel()[offset])
    f = E2M1_MAGNITUDES[None, :] * s[:, None]
    entries = bf16_bits(f if alpha_eff is None else product_to_odd(f, np.float32(alpha_eff)))
    return kernel_decode_word(words, kernel_table(entries)).reshape(rows, k)


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("rows, k", [(1, 16), (17, 1040), (130, 96), (257, 4112)], ids=str)
def test_the_decode_kernels_flat_indexing_matches_the_reference_dequantization(rows, k, layout) -> None:
    rng = np.random.default_rng(rows + k)
    x = (rng.standard_normal((rows, k)) * np.exp(rng.uniform(-3, 3, (rows, 1)))).astype(ml_dtypes.bfloat16)
    packed, scales, _ = ref.quantize(x, layout=layout)
    value = ref.dequantize(packed, scales, rows, k, layout)
    got = kernel_run(packed, scales, rows, k, layout)
    assert (got == bf16_bits(value)).all()
    alpha = np.float32(-0.0123456)
    got = kernel_run(packed, scales, rows, k, layout, alpha_eff=float(alpha))
    assert (got == round_bf16(value * np.float64(alpha))).all()


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


# -- the decode kernels' scale offsets, split into a row part and a K-block part (fp4_common.cuh) ------------
def split_offset(name: str, tiled: bool) -> Callable[..., Any]:
    """fp4_common.cuh's ``name`` (scale_row_offset or scale_col_offset): the return expression of the layout,
    evaluated by numpy with the C types of its arguments (pass ``row`` int64, ``kb`` int32 arrays): a
    ``(unsigned)`` cast and a ``u`` literal are uint32, which wraps as the device's 32-bit arithmetic does."""
    text = resources.files("mircuda").joinpath("cuda_src/fp4_common.cuh").read_text()
    body = text[text.index(f" {name}("):]
    found = re.search(r"if constexpr \(Tiled\) return (.+?);\s*else return (.+?);", body, re.S)
    assert found is not None, name
    expr = found.group(1 if tiled else 2)
    expr = re.sub(r"\(unsigned\)\s*(\w+)", r"U(\1)", expr)
    expr = re.sub(r"\b(\d+)u\b", r"U(\1)", expr)
    code = compile(expr, name, "eval")
    return lambda **args: eval(code, {"U": lambda v: np.asarray(v).astype(np.uint32)}, args)


def split_sum(row: np.ndarray, kb: np.ndarray, kblocks: int, tiled: bool) -> np.ndarray:
    """A scale's byte offset as the kernels form it: the row's pointer (row part, 64-bit) plus the step's
    K-block part (unsigned 32-bit, zero-extended by the pointer addition)."""
    katoms = -(-kblocks // 4)
    rows = split_offset("scale_row_offset", tiled)(row=row, kblocks=kblocks, katoms=katoms)
    cols = split_offset("scale_col_offset", tiled)(kb=kb)
    assert cols.dtype == np.uint32  # both layouts' K-block parts are unsigned 32-bit
    return rows.astype(np.int64) + cols.astype(np.int64)


def tiled_offset_at(row: np.ndarray, kb: np.ndarray, kblocks: int) -> np.ndarray:
    """The tiled layout's offset of (row, kb) pointwise, in int64 (the grid's is ref.tiled_offsets)."""
    katoms = -(-kblocks // 4)
    return ((row // 128) * katoms + kb // 4) * 512 + (row % 32) * 16 + (row % 128 // 32) * 4 + kb % 4


@pytest.mark.parametrize("rows, kblocks", [(1, 1), (37, 3), (130, 5), (300, 9), (257, 64), (700, 1023)])
def test_the_split_scale_offsets_sum_to_each_layouts_offset(rows, kblocks) -> None:
    row = np.arange(rows, dtype=np.int64)[:, None]
    kb = np.arange(kblocks, dtype=np.int32)[None, :]
    assert np.array_equal(split_sum(row, kb, kblocks, True), ref.tiled_offsets(rows, kblocks))
    assert np.array_equal(tiled_offset_at(row, kb.astype(np.int64), kblocks), ref.tiled_offsets(rows, kblocks))
    assert np.array_equal(split_sum(row, kb, kblocks, False), row * kblocks + kb)


@pytest.mark.parametrize("k", [TILED_DECODE_MAX_K, TILED_DECODE_MAX_K - 16, 2**20 + 48, 14336, 2**31 - 2**16 - 16])
def test_the_split_scale_offsets_hold_up_to_the_plans_largest_k(k) -> None:
    """Rows up to the largest dimension and the last K-blocks: the tiled sum holds for K <= TILED_DECODE_MAX_K
    (its K-block part below 2^31, as the header says), the linear one for any K the specs allow."""
    kblocks = k // 16
    rng = np.random.default_rng(k)
    row = np.concatenate([np.array([0, 1, 31, 32, 127, 128, 2**31 - 2**16 - 1]),
                          rng.integers(0, 2**31 - 2**16, 200)]).astype(np.int64)[:, None]
    kb = np.unique(np.concatenate([np.arange(min(kblocks, 8)), kblocks - 1 - np.arange(min(kblocks, 8)),
                                   rng.integers(0, kblocks, 200)])).astype(np.int32)[None, :]
    assert np.array_equal(split_sum(row, kb, kblocks, False), row * kblocks + kb)
    if k <= TILED_DECODE_MAX_K:
        assert np.array_equal(split_sum(row, kb, kblocks, True), tiled_offset_at(row, kb.astype(np.int64), kblocks))
        assert int(split_offset("scale_col_offset", True)(kb=kb).max()) + 1 < 2**31  # the 16-bit load's 2nd byte


def test_above_2_to_the_29_the_tiled_column_offset_wraps_which_is_why_the_plans_refuse_it() -> None:
    kblocks = (2**29 + 64) // 16
    row, kb = np.zeros((1, 1), np.int64), np.array([[kblocks - 1]], np.int32)
    assert split_sum(row, kb, kblocks, True)[0, 0] != tiled_offset_at(row, kb.astype(np.int64), kblocks)[0, 0]


class CompileReached(Exception):
    """Raised by a stand-in compiler: the engine's checks let the arguments through to NVRTC."""


@pytest.mark.parametrize("symbol", ["fp4_matvec_bf16", "fp4_mma_bf16"])
def test_the_decode_kernels_refuse_tiled_scales_above_the_32_bit_column_offset_by_spec(symbol) -> None:
    def compile(*args: Any, **kwargs: Any) -> Any:
        raise CompileReached

    compiler: Any = SimpleNamespace(arch="sm_90", compile=compile)
    context: Any = SimpleNamespace()
    for k in (TILED_DECODE_MAX_K + 32, 2**31 - 2**16 - 32):
        with pytest.raises(mc.ContractError) as info:
            Fp4Gemv(context, 2, 64, k, "fp4", "tiled", compiler, symbol=symbol)
        assert info.value.argument == "spec" and info.value.received == f"K = {k}"
        assert f"K <= {TILED_DECODE_MAX_K}" in info.value.expected
        with pytest.raises(CompileReached):  # the linear layout has no such bound
            Fp4Gemv(context, 2, 64, k, "fp4", "linear", compiler, symbol=symbol)
    with pytest.raises(CompileReached):
        Fp4Gemv(context, 2, 64, TILED_DECODE_MAX_K, "fp4", "tiled", compiler, symbol=symbol)


@pytest.mark.parametrize("symbol, m, k, rows, stages, dp4a", [
    ("fp4_matvec_bf16", 1, 256, 4, 2, 1), ("fp4_matvec_bf16", 1, 8192, 8, 2, 1), ("fp4_matvec_bf16", 1, 272, 4, 3, 0),
    ("fp4_matvec_bf16", 2, 256, 4, 2, 1), ("fp4_matvec_bf16", 3, 256, 4, 2, 0), ("fp4_matvec_bf16", 16, 256, 4, 2, 0),
    ("fp4_mma_bf16", 1, 256, 32, 3, 0),
    ("fp4_mma_bf16", 8, 256, 32, 3, 0), ("fp4_mma_bf16", 16, 256, 32, 3, 0)])
def test_the_decode_kernels_defaults_are_the_documented_ones(symbol, m, k, rows, stages, dp4a) -> None:
    """What Fp4Gemv compiles without knobs (the options it hands NVRTC), and what the plans' docstrings say
    (the vector plan's said 8 and 16 rows and 2 stages after the H200 sweeps moved them to 4, 32 and 3; then
    decode='dp4a' became the M = 1 default with K % 32 == 0: 2 stages, 8 rows when K > 4096; then row warps at
    large N; then decode='dp4a' the default at M = 2 too)."""
    seen: list[dict[str, str]] = []

    def compile(source: Any, options: mc.CompileOptions) -> Any:
        seen.append(dict(options.defines))
        raise CompileReached

    compiler: Any = SimpleNamespace(arch="sm_90", compile=compile)
    with pytest.raises(CompileReached):
        Fp4Gemv(SimpleNamespace(), m, 64, k, "fp4", "linear", compiler, symbol=symbol)  # type: ignore[arg-type]
    got = seen[0]
    assert got["MIRCUDA_FP4_STAGES"] == str(stages)
    assert got.get("MIRCUDA_FP4_DP4A", "0") == str(dp4a)
    assert (got["MIRCUDA_FP4_TILES"] == str(rows // 16)) if symbol == "fp4_mma_bf16" else \
        (got["MIRCUDA_FP4_ROWS"] == str(rows))
    vector_doc = " ".join((BlockScaledFp4VectorPlan.__doc__ or "").split())
    assert "for :data:`FP4_SYMBOL` (None: 4; with" in vector_doc and "for :data:`FP4_MMA_SYMBOL` (None: 32" in vector_doc
    assert "(None: 2 with ``decode='dp4a'``, the M = 1 default where it applies; otherwise 3 for both kernels at " \
        "M = 1" in vector_doc and "``decode='dp4a'`` :func:`dp4a_rows`: 8 when K > 4096" in vector_doc
    matrix_doc = " ".join((mc.BlockScaledFp4Plan.__doc__ or "").split())
    assert ("``fp4_mma_bf16`` 32 rows and 3 stages, ``fp4_matvec_bf16`` at M <= :data:`DP4A_DEFAULT_MAX_M` "
            "``decode='dp4a'`` where "
            ":func:`default_vector_decode` takes it (2 stages, rows :func:`dp4a_rows`, ``row_warps`` "
            ":data:`DEFAULT_ROW_WARPS` at M = 1 where the row blocks do not fit in one wave of two-warp blocks splitting K, "
            "large N), else 4 rows and 3 stages at M = 1, else 2") in matrix_doc


def test_the_grouped_vector_variant_refuses_tiled_scales_above_the_32_bit_column_offset_by_spec() -> None:
    from mircuda.matmul._moe_kernels import DecodeTuning, grouped_options

    def options(k: int, tiled: bool, variant: str = "vector") -> mc.CompileOptions:
        return grouped_options(n=64, k=k, groups=2, bank_size=2, capacity=2, rows_per_tile=1, fixed_rows=0,
                               tiled=tiled, sets=1, variant=variant, tuning=DecodeTuning("e4m3", 2, 0, 1))

    with pytest.raises(mc.ContractError) as info:
        options(TILED_DECODE_MAX_K + 32, True)
    assert info.value.argument == "spec" and info.value.received == f"K = {TILED_DECODE_MAX_K + 32}"
    assert dict(options(TILED_DECODE_MAX_K + 32, False).defines)["MIRCUDA_FP4_TILED"] == "0"
    assert dict(options(TILED_DECODE_MAX_K, True).defines)["MIRCUDA_FP4_TILED"] == "1"


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
                                                   "fp4_decode_bf16", "fp4_decode_scaled_bf16", "fp4_scale_output"))):
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


@pytest.mark.parametrize("epilogue, activation", [("exact", "fp4"), ("folded", "fp4"), ("folded", "bf16")])
def test_the_portable_executor_decodes_multiplies_and_scales_in_order(epilogue, activation) -> None:
    numba = pytest.importorskip("numba")
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import BlockScaledFp4Plan, decode_config, portable_executor

    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    launches: list[tuple[int, int, int, bytes]] = []
    layouts = {0xD0: [8, 8, 8, 4, 4], 0xD5: [8, 8, 8, 8, 8, 4, 4, 4], 0x5C: [8, 8, 8, 8, 4, 8]}

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        sizes = layouts[f]
        pointers = (ctypes.c_uint64 * len(sizes)).from_address(params)
        launches.append((f, gx, bx, b"".join(ctypes.string_at(p, sizes[i]) for i, p in enumerate(pointers))))
        return 0

    m, n, k = 32, 64, 80
    folded, fp4 = epilogue == "folded", activation == "fp4"
    want_a = 0xA16 if fp4 else 0x1000
    want_c = 0x3000 if folded else 0xC32

    @numba.njit
    def dense(stream, a, b, c, alpha, beta):
        return 0 if a == want_a and b == 0xB16 and c == want_c and alpha == 1.0 and beta == 0.0 else 77

    plan: Any = object.__new__(BlockScaledFp4Plan)
    plan._stream = fake_stream(FakeContext(), 0x55)
    plan._spec = mc.DenseMatmulSpec(m, n, k)
    plan._dense = SimpleNamespace(numba_execute=dense)
    plan._decode = SimpleNamespace(handle=0xD0)
    plan._scaled = SimpleNamespace(handle=0xD5) if folded else None
    plan._scale = None if folded else SimpleNamespace(handle=0x5C)
    plan._decode_b, plan._decode_a = decode_config(n, k), decode_config(m, k)
    plan._scale_config = mc.LaunchConfig((8,), (256,))
    plan._b16 = SimpleNamespace(handle=0xB16)
    plan._a16 = SimpleNamespace(handle=0xA16) if fp4 else None
    plan._c32 = None if folded else SimpleNamespace(handle=0xC32)
    entry = proto(fake_launch)
    execute = portable_executor(plan, (4, 1, 4, 1, 16 if folded else 2), launch_function=entry)
    assert execute(0x55, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0x4000, 0x4004, 0.5) == 0
    grid_b, grid_a = -(-(n * k // 8) // 1024), -(-(m * k // 8) // 1024)
    assert (plan._decode_b.grid[0], plan._decode_a.grid[0]) == (grid_b, grid_a) == (1, 1)
    decode_b = (0xD0, grid_b, 256, struct.pack("<QQQii", 0xB16, 0x2000, 0x2100, n, k))
    if not folded:
        assert launches == [decode_b, (0xD0, grid_a, 256, struct.pack("<QQQii", 0xA16, 0x1000, 0x1100, m, k)),
                            (0x5C, 8, 256, struct.pack("<QQQQfq", 0x3000, 0xC32, 0x4000, 0x4004, 0.5, m * n))]
    elif fp4:  # B exact, A scaled (alpha at 40, rows at 44, k at 48), then the dense plan writes D
        assert launches == [decode_b, (0xD5, grid_a, 256, struct.pack("<QQQQQfii", 0xA16, 0x1000, 0x1100, 0x4000,
                                                                      0x4004, 0.5, m, k))]
    else:  # B scaled, BF16 A straight to the dense plan
        assert launches == [(0xD5, grid_b, 256, struct.pack("<QQQQQfii", 0xB16, 0x2000, 0x2100, 0x4000, 0x4004, 0.5,
                                                            n, k))]
    count = len(launches)
    assert execute(0x56, 0x1000, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == INVALID_HANDLE
    assert execute(0x55, 0x1002, 0x1100, 0x2000, 0x2100, 0x3000, 0, 0, 1.0) == INVALID_VALUE
    if folded:  # D goes to the dense kernel: its 16-byte alignment
        assert execute(0x55, 0x1000, 0x1100, 0x2000, 0x2100, 0x3008, 0, 0, 1.0) == INVALID_VALUE
    assert len(launches) == count


@pytest.mark.parametrize("value", ["Folded", None, 1, "fused"])
def test_the_epilogue_is_checked(value) -> None:
    from mircuda.matmul._fp4 import check_epilogue

    with pytest.raises(mc.ContractError) as info:
        check_epilogue(value)
    assert info.value.argument == "epilogue"
    assert check_epilogue("folded") == "folded" and check_epilogue("exact") == "exact"


@pytest.mark.parametrize("layout", ["linear", "tiled"])
def test_the_decode_kernels_store_16_bytes_coalesced_and_round_in_fp32_only_when_scaled(layout) -> None:
    options = mc.CompileOptions(defines=dict(layout_options(layout).defines), output="ptx")
    text = mc.compile_program(fp4_layout_source(), "compute_90", options).image.decode()

    def body(name: str) -> str:
        start = text.index(f".entry {name}(")
        return text[start:text.index("\n}", start)]

    for name in ("fp4_decode_bf16", "fp4_decode_scaled_bf16"):
        b = body(name)
        assert b.count("st.global.v4.u32") == 4 and b.count("ld.global.nc.u32") == 4  # four words per thread
        assert b.count("prmt.b32") >= 4 * 16  # the lookups: 16 PRMT per word
        assert ("div.u32" in b or "rem.u32" in b) is (layout == "tiled") and "div.s64" not in b
    exact, scaled = body("fp4_decode_bf16"), body("fp4_decode_scaled_bf16")
    assert "mul.rz.f32" not in exact and "shfl.sync" not in exact
    assert "mul.rz.f32" in scaled and "fma.rn.f32" in scaled and "shfl.sync.bfly.b32" in scaled


# -- the L2 prefetch of fp4_matvec_bf16 (prefetch=True) ------------------------------------------------------
@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("rows, stages", [(4, 3), (8, 2)])
def test_the_prefetch_asks_l2_for_the_ring_prologue_before_waiting_for_the_previous_grid(wide, rows, stages) -> None:
    from mircuda.matmul._fp4 import fp4_gemv_options, fp4_vector_source

    def body(arch: str, prefetch: bool) -> str:
        opts = fp4_gemv_options(1, rows, "tiled", wide, "fp4", "pairs", "fp16", stages, prefetch)
        text = mc.compile_program(fp4_vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                               output="ptx")).image.decode()
        return text[text.index(".entry fp4_matvec_bf16"):]

    on = body("compute_90", True)
    assert "prefetch.global.L2" in on and on.index("prefetch.global.L2") < on.index("griddepcontrol.wait")
    assert on.index("griddepcontrol.wait") < on.index("ld.global.nc")  # every real load after the wait
    assert "prefetch.global.L2" not in body("compute_90", False)
    assert "prefetch.global.L2" not in body("compute_80", True)  # no programmatic dependent launch below 9.0


@pytest.mark.parametrize("name", ["prefetch", "persistent"])
def test_the_flag_knobs_take_none_or_a_bool_and_only_for_the_cuda_core_kernel(name) -> None:
    from mircuda.matmul._fp4 import FP4_MMA_SYMBOL, FP4_SYMBOL, check_flag

    assert check_flag(name, None, FP4_SYMBOL) is False and check_flag(name, True, FP4_SYMBOL) is True
    assert check_flag(name, False, FP4_MMA_SYMBOL) is False
    for bad, symbol in ((1, FP4_SYMBOL), ("on", FP4_SYMBOL), (True, FP4_MMA_SYMBOL)):
        with pytest.raises(mc.ContractError) as info:
            check_flag(name, bad, symbol)
        assert info.value.argument == name


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
@pytest.mark.parametrize("m, rows, stages", [(1, 4, 3), (1, 8, 2), (16, 4, 2)])
def test_the_persistent_kernel_compiles_without_spills_for_every_target(arch, m, rows, stages) -> None:
    from mircuda.matmul._fp4 import fp4_gemv_options, fp4_vector_source

    decode = "pairs" if arch == "sm_80" else "e4m3"
    opts = fp4_gemv_options(m, rows, "tiled", True, "fp4", decode, "fp16", stages, True, True)
    prog = mc.compile_program(fp4_vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                           ptxas_verbose=True))
    usage = prog.resource_usage()[FP4_SYMBOL]
    assert usage.spill_store_bytes == usage.spill_load_bytes == usage.stack_frame_bytes == 0, usage


def test_the_grouped_vector_kernel_compiles_with_the_persistent_grid() -> None:
    from mircuda.matmul._fp4 import fp4_vector_source

    defines = {"MIRCUDA_FP4_PERSISTENT": 1, "MIRCUDA_FP4_GROUPED": 1, "MIRCUDA_MOE_N": 64, "MIRCUDA_MOE_K": 256,
               "MIRCUDA_MOE_G": 2, "MIRCUDA_MOE_E": 2, "MIRCUDA_MOE_CAPACITY": 4, "MIRCUDA_MOE_MT": 1}
    prog = mc.compile_program(fp4_vector_source(), "sm_90", mc.CompileOptions(defines=defines, ptxas_verbose=True))
    usage = prog.resource_usage()["fp4_grouped_bf16"]
    assert usage.spill_store_bytes == usage.stack_frame_bytes == 0, usage


@pytest.mark.parametrize("name", ["x", "x_scales", "w", "w_scales", "global_x", "global_w"])
def test_y_over_an_input_or_a_global_scale_is_refused(name) -> None:
    stand = Fp4Stand()
    src = stand.globals[name] if name.startswith("global") else stand.buffers[name]
    y = stand.buffers["y"]
    with pytest.raises(mc.ContractError) as info:
        stand.run(y=fake_buffer(stand.ctx, mc.bf16, len(y), src.handle))
    assert info.value.argument == "y" and f"overlapping {name} at" in info.value.received
    assert stand.spy.calls == []
