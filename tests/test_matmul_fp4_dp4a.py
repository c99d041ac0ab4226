"""The integer path of ``fp4_matvec_bf16`` (``decode='dp4a'``, ``MIRCUDA_FP4_DP4A``) without a GPU: a numpy
emulation of PTX ``prmt.b32`` (default mode) with the header's table turns every E2M1 nibble at every position of
a word into 2|v| or 0 as the comment says, P - N is 2v, and the activations' one-IADD3 conversion gives the
two's-complement bytes without a carry; the kernel compiles for sm_80, sm_90 and sm_120f; its sm_90 SASS main
loop has one IDP4A per four products, no FP16 decode, no local memory, and fewer instructions per weight than
the FP16 path's; the knobs are checked by name; a numpy model of the kernel's indices on the plans' launch
geometry (row warps included) stores every output once and loads and prefetches nothing outside. The GPU checks
are in ``tests/gpu/test_matmul_fp4_dp4a_gpu.py``."""

from __future__ import annotations

import argparse
import re
from importlib import resources
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from mircuda.cli._fp4_profile import Fp4Candidate, sweep_values
from mircuda.matmul._fp4 import (FP4_MMA_SYMBOL, FP4_SYMBOL, VECTOR_DECODES, check_dp4a, check_gemv_knobs,
                                 fp4_gemv_options, fp4_vector_source, gemv_launch)
from mircuda.matmul import _fp4_reference as ref
from mircuda.matmul._fp4_reference import E2M1_VALUES
from tests.test_matmul_fp4_decode import all_words, nibbles, opcodes, sass


def header_table() -> tuple[int, int]:
    text = resources.files("mircuda").joinpath("cuda_src/fp4_vector.cu").read_text()
    lut0 = int(re.search(r"constexpr unsigned kLut0 = (0x[0-9A-Fa-f]+)u;", text).group(1), 16)
    lut1 = int(re.search(r"constexpr unsigned kLut1 = (0x[0-9A-Fa-f]+)u;", text).group(1), 16)
    return lut0, lut1


def prmt(a: int, b: int, c: np.ndarray) -> np.ndarray:
    """PTX ``prmt.b32 d, a, b, c`` (default mode) for each c: byte i of d is byte (c >> 4i) & 7 of {b, a} (a
    bytes 0..3), or, when bit 3 of that selector nibble is set, that byte's bit 7 replicated over the byte."""
    src = np.array([(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)], np.uint32)
    c = c.astype(np.uint32)
    d = np.zeros_like(c)
    for i in range(4):
        nib = (c >> np.uint32(4 * i)) & 15
        byte = src[nib & 7]
        byte = np.where(nib & 8, np.where(byte & 0x80, 0xFF, 0), byte).astype(np.uint32)
        d |= byte << np.uint32(8 * i)
    return d


def bytes_of(words: np.ndarray, signed: bool = False) -> np.ndarray:
    out = np.stack([(words >> np.uint32(8 * i)) & 0xFF for i in range(4)], axis=1).astype(np.int64)
    return np.where(out >= 128, out - 256, out) if signed else out


def test_the_table_holds_twice_the_e2m1_magnitudes() -> None:
    lut0, lut1 = header_table()
    table = [(lut0 >> (8 * i)) & 0xFF for i in range(4)] + [(lut1 >> (8 * i)) & 0xFF for i in range(4)]
    assert table == [int(2 * v) for v in E2M1_VALUES[:8]]
    assert all(t < 0x80 for t in table)  # bit 7 clear: PRMT's sign replication gives 0 for a negative code


def test_p_minus_n_and_the_activation_bytes_are_twice_every_e2m1_value() -> None:
    lut0, lut1 = header_table()
    w = all_words()
    x = w ^ np.uint32(0x88888888)
    p = np.concatenate([bytes_of(prmt(lut0, lut1, w)), bytes_of(prmt(lut0, lut1, w >> np.uint32(16)))], axis=1)
    n = np.concatenate([bytes_of(prmt(lut0, lut1, x)), bytes_of(prmt(lut0, lut1, x >> np.uint32(16)))], axis=1)
    want = 2 * E2M1_VALUES[nibbles(w)].astype(np.float64)  # [words, 8], natural element order
    assert np.array_equal(p - n, want)
    assert np.all((p == 0) | (n == 0))  # one of the two is zero in every byte
    # activation_int8: (0x80808080 + P - N) ^ 0x80808080, one 32-bit add for all four bytes
    for half in range(2):
        pw = prmt(lut0, lut1, w >> np.uint32(16 * half)).astype(np.int64)
        nw = prmt(lut0, lut1, x >> np.uint32(16 * half)).astype(np.int64)
        word = ((0x80808080 + pw - nw) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(0x80808080)
        assert np.array_equal(bytes_of(word, signed=True), want[:, 4 * half: 4 * half + 4])


def test_block_sums_fit_int32_and_fp32_exactly() -> None:
    # 16 products of two doubled E2M1 values, at most 12 * 12 each: the largest block sum is exact in FP32
    largest = 16 * 12 * 12
    assert largest == 2304 and float(np.float32(largest)) == largest and largest < 2 ** 24


def dp4a(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``__dp4a(a, b, c)`` (IDP4A, signed x signed): c plus the sum of the four products of the words' int8 bytes."""
    return c + (bytes_of(a, signed=True) * bytes_of(b, signed=True)).sum(axis=1)


def lean_block(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The int32 ``p - q`` lean_consume forms for one 16-element block of each row of ``w`` and ``x`` ([rows, 2]
    words of eight E2M1 codes: the weights and the activations), as the kernel computes it: the activations by
    activation_int8, the weights' P and N by PRMT, two IDP4A chains."""
    lut0, lut1 = header_table()
    p = np.zeros(len(w), np.int64)
    q = np.zeros(len(w), np.int64)
    for i in range(2):
        ww, xw = w[:, i], x[:, i]
        act = []
        for half in range(2):  # activation_int8: (0x80808080 + P - N) ^ 0x80808080
            pa = prmt(lut0, lut1, xw >> np.uint32(16 * half)).astype(np.int64)
            na = prmt(lut0, lut1, (xw ^ np.uint32(0x88888888)) >> np.uint32(16 * half)).astype(np.int64)
            act.append(((0x80808080 + pa - na) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(0x80808080))
        neg = ww ^ np.uint32(0x88888888)
        for half in range(2):
            p = dp4a(prmt(lut0, lut1, ww >> np.uint32(16 * half)), act[half], p)
            q = dp4a(prmt(lut0, lut1, neg >> np.uint32(16 * half)), act[half], q)
    return p - q


def block_value(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The exact sum of the block's 16 products of E2M1 values (float64)."""
    vw = E2M1_VALUES[nibbles(w.ravel())].astype(np.float64).reshape(len(w), 16)
    vx = E2M1_VALUES[nibbles(x.ravel())].astype(np.float64).reshape(len(x), 16)
    return (vw * vx).sum(axis=1)


def test_the_integer_block_sum_is_four_times_the_exact_e2m1_dot_product_for_every_code_pair() -> None:
    """The exactness argument of fp4_vector.cu's integer path, independently of the header's comment: for every
    pair of E2M1 codes (weight, activation) at every one of the 16 positions of a block, and for random and
    extreme blocks, the int32 ``p - q`` of the kernel's PRMT + IDP4A steps equals 4 x the float64 dot product of
    the decoded values (both operands doubled), |p|, |q| <= 16 x 144 = 2304, so FP32 holds each block sum."""
    codes = np.arange(16, dtype=np.uint32)
    cw, cx = (a.ravel() for a in np.meshgrid(codes, codes, indexing="ij"))  # all 256 pairs
    for pos in range(16):
        w = np.zeros((256, 2), np.uint32)
        x = np.zeros((256, 2), np.uint32)
        w[:, pos // 8] = cw << np.uint32(4 * (pos % 8))
        x[:, pos // 8] = cx << np.uint32(4 * (pos % 8))
        want = 4 * E2M1_VALUES[cw].astype(np.float64) * E2M1_VALUES[cx].astype(np.float64)
        assert np.array_equal(lean_block(w, x), want), pos
    rng = np.random.default_rng(7)
    w = rng.integers(0, 1 << 32, (20000, 2), dtype=np.uint64).astype(np.uint32)
    x = rng.integers(0, 1 << 32, (20000, 2), dtype=np.uint64).astype(np.uint32)
    six, minus_six = np.uint32(0x77777777), np.uint32(0xFFFFFFFF)  # every code +6 / -6
    w = np.concatenate([w, [[six, six], [six, six], [minus_six, minus_six]]]).astype(np.uint32)
    x = np.concatenate([x, [[six, six], [minus_six, minus_six], [minus_six, minus_six]]]).astype(np.uint32)
    got = lean_block(w, x)
    assert np.array_equal(got, 4 * block_value(w, x))
    assert list(got[-3:]) == [2304, -2304, 2304] and np.abs(got).max() == 2304
    assert all(float(np.float32(v)) == v for v in got[-3:])


def test_one_block_times_its_scale_product_is_exact_in_fp32() -> None:
    """``fmaf((float)(p - q), sw * sx, acc)``: every product of two finite UE4M3 scales is exact in FP32 (at most
    4 x 4 significant bits, 2^-18 .. 448^2), and so is a block sum (an integer of at most 12 bits, <= 2304)
    times it (<= 20 bits), so the only rounding per block is the FP32 accumulation."""
    from mircuda.matmul._fp4_reference import ue4m3_decode

    scales = ue4m3_decode(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)  # 0x7F is NaN
    assert np.isfinite(scales).all() and scales.max() == 448
    prod64 = np.multiply.outer(scales, scales)
    prod32 = np.multiply.outer(scales.astype(np.float32), scales.astype(np.float32))
    assert np.array_equal(prod32.astype(np.float64), prod64)
    sums = np.array([1, 3, 2047, 2303, 2304, -2304, -1365], np.float64)  # 2303, 2047: 12 and 11 set bits
    exact = sums[:, None, None] * prod64[None]
    assert np.array_equal(exact.astype(np.float32).astype(np.float64), exact)


ROWS_LINES = (
    "for (int i = 0; i < 4; ++i) activation_int8(words[i], lut, out[2 * i], out[2 * i + 1]);",
    "const unsigned words[4] = {w.x, w.y, w.z, w.w};", "step_int8(s.act[m], lut, a[m]);",
    "xs[m] = ue4m3x2_to_float2(s.araw[m]);", "const float2 ws = ue4m3x2_to_float2(s.sraw[r]);",
    "step_int8(s.codes[r], lut, v);",
    "for (int i = 4 * b; i < 4 * b + 4; ++i) dot = __dp4a((int)v[i], (int)a[m][i], dot);",
    "acc[m][r] = fmaf((float)dot, (b ? ws.y : ws.x) * (b ? xs[m].y : xs[m].x), acc[m][r]);",
)
"""Code of ``lean_consume_rows`` (``cuda_src/fp4_vector.cu``, M > 1) that :func:`lean_rows_step` mirrors."""


def lean_rows_step(w: np.ndarray, sw: np.ndarray, x: np.ndarray, sx: np.ndarray) -> np.ndarray:
    """One step of ``lean_consume_rows`` for one lane: ``w`` [R, 4] and ``x`` [M, 4] words of eight E2M1 codes (the
    lane's 32 weights of each row and 32 activations of each activation row), ``sw`` [R] and ``sx`` [M] their two
    UE4M3 scale bytes (block 0 in the low byte); returns the step's ``acc[m][r]`` in float64, 4 x the true value
    (both int8 operands doubled). Weights and activations alike become signed int8 by activation_int8; one IDP4A
    chain per 16-element block and activation row."""
    from mircuda.matmul._fp4_reference import ue4m3_decode

    lut0, lut1 = header_table()

    def int8_words(words: np.ndarray) -> np.ndarray:  # activation_int8 of each word: [.., 8] words of 4 int8
        out = []
        for i in range(4):
            for half in range(2):
                pa = prmt(lut0, lut1, words[:, i] >> np.uint32(16 * half)).astype(np.int64)
                na = prmt(lut0, lut1, (words[:, i] ^ np.uint32(0x88888888)) >> np.uint32(16 * half)).astype(np.int64)
                out.append(((0x80808080 + pa - na) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(0x80808080))
        return np.stack(out, axis=1)

    a, v = int8_words(x), int8_words(w)  # a[m][8], v[r][8]: element order 0..3, 4..7 of each word
    ws = np.stack([ue4m3_decode((sw & 0xFF).astype(np.uint8)), ue4m3_decode((sw >> 8).astype(np.uint8))], 1)
    xs = np.stack([ue4m3_decode((sx & 0xFF).astype(np.uint8)), ue4m3_decode((sx >> 8).astype(np.uint8))], 1)
    acc = np.zeros((len(x), len(w)))
    for r in range(len(w)):
        for b in range(2):
            for m in range(len(x)):
                dot = np.zeros(1, np.int64)
                for i in range(4 * b, 4 * b + 4):
                    dot = dp4a(v[r: r + 1, i], a[m: m + 1, i], dot)
                acc[m, r] += float(dot[0]) * (float(ws[r, b]) * float(xs[m, b]))
    return acc


def test_the_m_row_step_is_four_times_the_exact_product_of_every_activation_row_and_weight_row() -> None:
    """``lean_consume_rows`` (M > 1: the weights as signed int8 too, one IDP4A per four products and activation row)
    emulated in numpy, the code mirrored character for character (ROWS_LINES): for every pair of E2M1 codes at
    every one of a step's 32 positions, and for random steps of M = 2..4 activation rows and 4 or 8 weight rows with
    random UE4M3 scales, acc[m][r] is 4 x the float64 product of activation row m with weight row r, each block
    scaled by its own two scales (block 0: the low scale byte, words 0 and 1)."""
    text = resources.files("mircuda").joinpath("cuda_src/fp4_vector.cu").read_text()
    assert not [line for line in ROWS_LINES if line not in text], "lean_consume_rows changed: update lean_rows_step"
    from mircuda.matmul._fp4_reference import ue4m3_decode

    def exact(w: np.ndarray, sw: np.ndarray, x: np.ndarray, sx: np.ndarray) -> np.ndarray:
        vw = E2M1_VALUES[nibbles(w.ravel())].astype(np.float64).reshape(len(w), 32)
        vx = E2M1_VALUES[nibbles(x.ravel())].astype(np.float64).reshape(len(x), 32)
        bw = np.stack([ue4m3_decode((sw & 0xFF).astype(np.uint8)), ue4m3_decode((sw >> 8).astype(np.uint8))], 1)
        bx = np.stack([ue4m3_decode((sx & 0xFF).astype(np.uint8)), ue4m3_decode((sx >> 8).astype(np.uint8))], 1)
        vw, vx = vw * np.repeat(bw, 16, axis=1), vx * np.repeat(bx, 16, axis=1)
        return 4 * vx @ vw.T

    one = np.array([0x3838], np.uint32)  # UE4M3 1.0 for both blocks
    codes = np.arange(16, dtype=np.uint32)
    for pos in (0, 3, 7, 8, 15, 16, 23, 31):  # every word, both halves of a word, both blocks
        w = np.zeros((16, 4), np.uint32)
        w[:, pos // 8] = codes << np.uint32(4 * (pos % 8))
        x = w.copy()
        assert np.array_equal(lean_rows_step(w, np.repeat(one, 16), x, np.repeat(one, 16)),
                              exact(w, np.repeat(one, 16), x, np.repeat(one, 16))), pos
    rng = np.random.default_rng(11)
    for m, rows in [(2, 4), (3, 8), (4, 4)]:
        w = rng.integers(0, 1 << 32, (rows, 4), dtype=np.uint64).astype(np.uint32)
        x = rng.integers(0, 1 << 32, (m, 4), dtype=np.uint64).astype(np.uint32)
        sw = rng.integers(0, 0x7F, (rows, 2)).astype(np.uint32)
        sx = rng.integers(0, 0x7F, (m, 2)).astype(np.uint32)
        sw, sx = sw[:, 0] | sw[:, 1] << 8, sx[:, 0] | sx[:, 1] << 8
        got = lean_rows_step(w, sw, x, sx)
        assert got.shape == (m, rows) and np.array_equal(got, exact(w, sw, x, sx)), (m, rows)
        # the scales are per block: swapping a row's two scale bytes changes the step unless both blocks agree
        swapped = (sw >> 8) | ((sw & 0xFF) << 8)
        assert not np.array_equal(lean_rows_step(w, swapped, x, sx), got) or np.array_equal(swapped, sw)


# -- compilation and SASS ------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_the_dp4a_kernel_compiles(arch) -> None:
    for rows, layout, stages, prefetch in [(4, "linear", 2, False), (8, "tiled", 3, False), (4, "tiled", 4, False),
                                           (8, "linear", 2, True)]:
        prog = mc.compile_program(fp4_vector_source(), arch, fp4_gemv_options(1, rows, layout, True, "fp4", "dp4a",
                                                                               "int32", stages, prefetch))
        assert FP4_SYMBOL.encode() in prog.image


def main_loop(text: str) -> list[str]:
    """The opcodes of the kernel's main loop: the body of the last backward branch before the first shuffle
    (the reduction after the loop)."""
    lines = text.splitlines()
    first_shfl = next(i for i, line in enumerate(lines) if "SHFL" in line)
    back = None
    for line in lines[:first_shfl]:
        m = re.search(r"/\*([0-9a-f]{4,})\*/.*\bBRA (0x[0-9a-f]+) ;", line)
        if m and int(m.group(2), 16) < int(m.group(1), 16):
            back = (int(m.group(2), 16), int(m.group(1), 16))
    assert back is not None, "no loop found"
    body = []
    for line in lines:
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s", line)
        if m and back[0] <= int(m.group(1), 16) <= back[1]:
            body.extend(opcodes(line))
    return body


def loop_per_weight(options: mc.CompileOptions, rows: int, steps: int) -> tuple[list[str], float]:
    """The main loop's opcodes and instructions per weight; the loop body runs ``steps`` steps of 32 weights per
    row (the FP16 path's ring: ``stages``; the dp4a ring refills its buffers in place: ``stages - 1``)."""
    body = main_loop(sass(fp4_vector_source(), options))
    return body, len(body) / (rows * 32 * steps)


@pytest.mark.parametrize("rows, stages", [(4, 2), (8, 2), (4, 3)], ids=str)
def test_the_dp4a_main_loop_is_integer_and_leaner_than_the_fp16_path(rows, stages) -> None:
    options = fp4_gemv_options(1, rows, "linear", True, "fp4", "dp4a", "int32", stages)
    text = sass(fp4_vector_source(), options)
    body, per_weight = loop_per_weight(options, rows, stages - 1)
    steps = stages - 1
    # four products per IDP4A, P and N: 2 IDP4A per 4 weights; PRMT: 2 per 4 weights + 4 per 8 activations
    assert sum(op.startswith("IDP.4A") for op in body) == rows * steps * 16
    assert sum(op == "PRMT" for op in body) == steps * (rows * 16 + 16)
    assert not any(op.startswith(("HFMA2", "LDL", "STL")) for op in body)
    assert not re.search(r"\b(LDL|STL)", text)  # no local memory anywhere
    # F2FP only for the scale bytes: one per row and one for the activations per step
    assert sum(op.startswith("F2FP") for op in body) <= steps * (rows + 1)
    _, base_per_weight = loop_per_weight(fp4_gemv_options(1, 4, "linear", True, "fp4", "e4m3", "fp16", 3), 4, 3)
    # measured with NVRTC 13.0 for sm_90 (2026-12-01): 2.56 (R = 4), 2.34 (R = 8) against the FP16 path's 3.29
    assert per_weight < 0.85 * base_per_weight, (per_weight, base_per_weight)
    assert per_weight < 2.7


def test_the_dp4a_kernel_fits_one_wave_of_the_llama_shapes_registers() -> None:
    """R = 4 with two stages in <= 72 registers (28 one-warp blocks per SM: 3584 row blocks of N = 14336 in one
    wave of 132 SMs), R = 8 in <= 128 (16 per SM: 1792 blocks); measured 72 and 128 with NVRTC 13.0."""
    for rows, limit in [(4, 72), (8, 128)]:
        from tests.test_matmul_fp8_mma import cuobjdump
        import subprocess
        import tempfile
        from pathlib import Path

        tool, env = cuobjdump()
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            cubin.write_bytes(mc.compile_program(
                fp4_vector_source(), "sm_90", fp4_gemv_options(1, rows, "linear", True, "fp4", "dp4a", "int32", 2)).image)
            out = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True, env=env, check=False)
        regs = re.search(r"REG:(\d+)", out.stdout)
        if regs is None:
            pytest.skip(f"cuobjdump -res-usage failed: {out.stderr.strip()[:200]}")
        assert int(regs.group(1)) <= limit, (rows, regs.group(1))


# -- knobs ---------------------------------------------------------------------------------------------
def test_dp4a_is_a_decoder_of_the_cuda_core_kernel_only() -> None:
    assert VECTOR_DECODES[-1] == "dp4a"
    assert check_gemv_knobs("sm_90", FP4_SYMBOL, "fp4", "dp4a", 4, None, None, 2) == ("dp4a", 4, None)
    assert check_gemv_knobs("sm_80", FP4_SYMBOL, "fp4", "dp4a", 8, None, 1, 3) == ("dp4a", 8, None)
    for args, argument in [((FP4_MMA_SYMBOL, "fp4", "dp4a", None, None), "decode"),
                           ((FP4_SYMBOL, "bf16", "dp4a", None, None), "decode"),
                           ((FP4_SYMBOL, "fp4", "dp4a", None, "fp16"), "block_sum"),
                           ((FP4_SYMBOL, "fp4", "dp4a", None, "fp32"), "block_sum"),
                           ((FP4_SYMBOL, "fp4", "int8", None, None), "decode")]:
        symbol, activation, decode, rows, block_sum = args
        with pytest.raises(mc.ContractError) as info:
            check_gemv_knobs("sm_90", symbol, activation, decode, rows, block_sum, None)
        assert info.value.argument == argument
    check_dp4a(1, 96, False)
    for m, k, persistent, argument in [(5, 256, False, "decode"), (1, 48, False, "decode"), (1, 1040, False, "decode"),
                                       (1, 256, True, "persistent")]:
        with pytest.raises(mc.ContractError) as info:
            check_dp4a(m, k, persistent)
        assert info.value.argument == argument


def test_the_sweep_takes_dp4a_for_the_vector_kernel() -> None:
    got = sweep_values("vector:decode=dp4a:rows=4:stages=2,vector:decode=dp4a:rows=8:warps=2")
    assert got == (Fp4Candidate("vector", "dp4a", 4, None, None, 2), Fp4Candidate("vector", "dp4a", 8, 2))
    assert got[0].knobs()["decode"] == "dp4a" and got[0].label == "vector:decode=dp4a:rows=4:stages=2"
    with pytest.raises(argparse.ArgumentTypeError, match="decode"):
        sweep_values("mma:decode=dp4a")


def test_the_dp4a_plans_check_the_activation_alignment_of_its_loads() -> None:
    from mircuda.matmul._fp4 import fp4_operands

    names = ("x", "x_scales", "w", "w_scales", "y")
    lean = {o.name: o.alignment for o in fp4_operands(names, 1, 64, 256, "fp4", "linear", True, dp4a=True)}
    fp16 = {o.name: o.alignment for o in fp4_operands(names, 1, 64, 256, "fp4", "linear", True)}
    assert lean["x"] == 16 and lean["x_scales"] == 2  # one 16-byte load of codes, one 16-bit load of two scales
    assert fp16["x"] == 8 and fp16["x_scales"] == 1
    assert lean["w"] == fp16["w"] == 16 and lean["w_scales"] == fp16["w_scales"] == 2


def test_dp4a_is_the_default_up_to_m2_where_it_applies() -> None:
    from mircuda.matmul._fp4 import DP4A_DEFAULT_MAX_M, default_vector_decode

    assert DP4A_DEFAULT_MAX_M == 2
    for arch in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_120"):  # no cvt.rn.f16x2.e2m1x2 on these targets
        for m in (1, 2):
            assert default_vector_decode(arch, m, 4096, "fp4") == "dp4a"
            assert default_vector_decode(arch, m, 32, "fp4") == "dp4a"
    old = {"sm_90": "e4m3", "sm_80": "pairs"}
    for arch, word in old.items():
        assert default_vector_decode(arch, 3, 4096, "fp4") == word  # M > 2: unmeasured at 3, mixed at 4
        assert default_vector_decode(arch, 1, 4096, "bf16") == word  # BF16 activations
        assert default_vector_decode(arch, 1, 4112, "fp4") == word  # K % 32 != 0 (8-byte loads)
        assert default_vector_decode(arch, 1, 4096, "fp4", block_sum="fp32") == word  # a word decoder's knob
        assert default_vector_decode(arch, 1, 4096, "fp4", persistent=True) == word
    # the hardware E2M1 conversion targets keep "bytes" (dp4a against it is not measured)
    assert default_vector_decode("sm_120f", 1, 4096, "fp4") == default_vector_decode("sm_100a", 1, 4096, "fp4") == "bytes"


def test_the_matrix_plan_takes_the_integer_path_at_m2_unless_a_tensor_core_knob_is_given() -> None:
    """:func:`default_gemv_kernel`: fp4_matvec_bf16 at M = 1, with BF16 activations, with decode='dp4a', and at
    M = 2 where its integer path is the default with no knob of fp4_mma_bf16 given; fp4_mma_bf16 elsewhere."""
    from mircuda.matmul._fp4 import DP4A_M2_MEASURED, default_gemv_kernel

    def kernel(m=2, k=4096, activation="fp4", decode=None, rows=None, block_sum=None, persistent=None, arch="sm_90"):
        return default_gemv_kernel(arch, m, k, activation, decode, rows, block_sum, persistent)

    assert kernel() == kernel(rows=4) == kernel(rows=8) == kernel(persistent=False) == kernel(arch="sm_80") == FP4_SYMBOL
    assert kernel(m=1) == kernel(activation="bf16") == kernel(m=16, decode="dp4a") == FP4_SYMBOL
    assert kernel(m=1, decode="e4m3") == kernel(m=1, rows=32) == FP4_SYMBOL  # M = 1: always the vector kernel
    for knobs in ({"m": 3}, {"m": 16}, {"decode": "e4m3"}, {"decode": "bytes"}, {"rows": 16}, {"rows": 32},
                  {"rows": np.array([4])}, {"rows": 4.0}, {"block_sum": "fp32"}, {"persistent": True}, {"k": 4112},
                  {"arch": "sm_120f"}, {"arch": "sm_100a"}):
        assert kernel(**knobs) == FP4_MMA_SYMBOL, knobs  # an odd rows value is then refused by that kernel's check
    assert "M = 2: 4096x4096 6.16 vs 7.07" in DP4A_M2_MEASURED and "2026-12-02" in DP4A_M2_MEASURED


def test_the_dp4a_rows_rule_follows_k() -> None:
    from mircuda.matmul._fp4 import DP4A_DEFAULT_MEASURED, dp4a_rows

    assert [dp4a_rows(k) for k in (32, 2048, 4096, 4128, 14336)] == [4, 4, 4, 8, 8]
    assert "H200, 2026-12-01" in DP4A_DEFAULT_MEASURED and "4096x14336 11.40 (rows 8)" in DP4A_DEFAULT_MEASURED


@pytest.mark.parametrize("n_k", [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)], ids=str)
def test_the_m1_plans_resolve_to_dp4a_with_the_measured_rows_and_two_stages(n_k) -> None:
    from mircuda.matmul._fp4 import GemvKnobs, resolve_gemv_knobs

    _, k = n_k
    got = resolve_gemv_knobs("sm_90", FP4_SYMBOL, 1, k, "fp4", None, None, None, None, None)
    assert got == GemvKnobs("dp4a", 8 if k > 4096 else 4, "int32", 2, True)


def test_given_knobs_override_the_dp4a_default_and_refusals_are_unchanged() -> None:
    from mircuda.matmul._fp4 import GemvKnobs, resolve_gemv_knobs

    def resolve(m=1, k=14336, activation="fp4", decode=None, rows=None, block_sum=None, warps=None, stages=None,
                persistent=False, symbol=FP4_SYMBOL, arch="sm_90"):
        return resolve_gemv_knobs(arch, symbol, m, k, activation, decode, rows, block_sum, warps, stages, persistent)

    assert resolve(decode="e4m3") == GemvKnobs("e4m3", 4, "fp16", 3, False)  # the former default, asked for
    assert resolve(rows=4) == GemvKnobs("dp4a", 4, "int32", 2, True)
    assert resolve(stages=3, warps=2) == GemvKnobs("dp4a", 8, "int32", 3, True)
    assert resolve(decode="dp4a") == GemvKnobs("dp4a", 8, "int32", 2, False)  # asked for: the rows rule too
    assert resolve(block_sum="fp32") == GemvKnobs("e4m3", 4, "fp32", 3, False)
    assert resolve(persistent=True) == GemvKnobs("e4m3", 4, "fp16", 3, False)
    assert resolve(activation="bf16") == GemvKnobs("e4m3", 4, "fp32", 3, False)
    assert resolve(k=4112) == GemvKnobs("e4m3", 4, "fp16", 3, False)
    assert resolve(m=2) == GemvKnobs("dp4a", 8, "int32", 2, True)  # M = 2: the integer path is the default too
    assert resolve(m=3) == GemvKnobs("e4m3", 4, "fp16", 2, False)  # fp4_matvec_bf16 at M = 3 (kernel= asked)
    assert resolve(symbol=FP4_MMA_SYMBOL) == GemvKnobs("e4m3", 32, "fp32", 3, False)
    assert resolve(arch="sm_120f") == GemvKnobs("bytes", 4, "fp16", 3, False)
    assert resolve(arch="sm_80", k=4096) == GemvKnobs("dp4a", 4, "int32", 2, True)
    assert resolve(decode="dp4a", m=4) == GemvKnobs("dp4a", 8, "int32", 2, False)  # M <= DP4A_MAX_M
    for kwargs, argument in [({"decode": "dp4a", "m": 5}, "decode"), ({"decode": "dp4a", "k": 4112}, "decode"),
                             ({"decode": "dp4a", "persistent": True}, "persistent"),
                             ({"decode": "dp4a", "block_sum": "fp16"}, "block_sum"),
                             ({"decode": "dp4a", "activation": "bf16"}, "decode"),
                             ({"decode": "dp4a", "symbol": FP4_MMA_SYMBOL}, "decode"),
                             ({"rows": 16}, "rows"), ({"stages": 5}, "stages"), ({"warps": 3}, "warps"),
                             ({"decode": "nibbles"}, "decode")]:
        with pytest.raises(mc.ContractError) as info:
            resolve(**kwargs)
        assert info.value.argument == argument, kwargs


def test_a_decode_that_is_not_a_string_is_refused_by_name_before_anything_compiles() -> None:
    """``decode == "dp4a"`` on a numpy array is an array (a one-element one passed as True, a longer one raised
    numpy's ValueError): the plans' knob check now takes only a str as 'dp4a', so any other value is the usual
    ContractError naming ``decode``; the message with another activation names that activation."""
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import Fp4Gemv

    def compile(source, options):  # the fake compiler: reaching it is a failure
        raise AssertionError("compiled")

    compiler = SimpleNamespace(arch="sm_90", compile=compile)
    for bad in (np.array(["dp4a"]), np.array(["dp4a", "e4m3"]), ["dp4a"], b"dp4a", 4):
        with pytest.raises(mc.ContractError) as info:
            check_gemv_knobs("sm_90", FP4_SYMBOL, "fp4", bad, None, None, None)
        assert info.value.argument == "decode" and info.value.received == repr(bad)
        with pytest.raises(mc.ContractError) as info:
            Fp4Gemv(SimpleNamespace(), 1, 64, 4096, "fp4", "linear", compiler, decode=bad)  # type: ignore[arg-type]
        assert info.value.argument == "decode"
    assert check_gemv_knobs("sm_90", FP4_SYMBOL, "fp4", np.str_("dp4a"), None, None, None)[0] == "dp4a"


def test_numpy_strings_are_taken_as_plain_str_so_describe_shows_them_plainly(fake_matrix_plan: Any) -> None:
    """decode=np.str_('dp4a') (a str subclass) was kept as given: describe() said "decode=np.str_('dp4a')" (numpy
    2's repr) at M = 1..4; the knob check returns plain strs, for block_sum too."""
    make, _ = fake_matrix_plan
    for m in (1, 2, 4):
        plan = make(m, decode=np.str_("dp4a"))
        assert type(plan._gemv.decode) is str and "decode='dp4a': " in str(plan.describe()), m
        assert "np.str_" not in str(plan.describe())
    got = check_gemv_knobs("sm_90", FP4_SYMBOL, "fp4", np.str_("e4m3"), None, np.str_("fp32"), None)
    assert got == ("e4m3", None, "fp32") and all(type(v) is str for v in (got[0], got[2]))
    word = make(3, kernel="fp4_matvec_bf16", decode=np.str_("pairs"), block_sum=np.str_("fp32"))
    assert "decode='pairs'" in str(word.describe()) and "block_sum='fp32'" in str(word.describe())
    assert type(word._gemv.block_sum) is str
    with pytest.raises(mc.ContractError, match="with activation='bf16'") as info:
        check_gemv_knobs("sm_90", FP4_SYMBOL, "bf16", "dp4a", None, None, None)
    assert info.value.argument == "decode"


def test_describe_says_which_decoder_runs_and_quotes_the_rule_only_when_dp4a_is_the_default() -> None:
    """Fp4Gemv.describe() without a GPU (a fake device and compiler): the default M = 1 and M = 2 kernels name the
    integer path, its defines, the rule (M <= 2) and (in parentheses) the measurements; dp4a asked for names the
    path without claiming to be the default; neither carries the word decoders' cvt.rn.f16x2.e2m1x2 note."""
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import DP4A_DEFAULT_MEASURED, DP4A_M2_MEASURED, Fp4Gemv

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=1024), launch=None, handle=0)
    compiler = SimpleNamespace(arch="sm_90", compile=lambda source, options: SimpleNamespace(kernel=lambda c: kernel))
    context = SimpleNamespace(device_info=lambda: info)

    def describe(m: int = 1, **knobs) -> str:
        return Fp4Gemv(context, m, 14336, 14336, "fp4", "linear", compiler, 1, **knobs).describe()  # type: ignore[arg-type]

    default = describe()
    assert "decode='dp4a'" in default and "-D MIRCUDA_FP4_DP4A=1" in default and "-D MIRCUDA_FP4_ROWS=8" in default
    assert "-D MIRCUDA_FP4_STAGES=2" in default and "-D MIRCUDA_FP4_HALF_SUM=0" in default
    assert f"stages 2 (measured: {DP4A_DEFAULT_MEASURED})," in default
    assert "summed exactly in int32 by IDP4A" in default and "1792 blocks of 8 weight rows" in default
    asked = describe(decode="dp4a", rows=4, stages=3)
    assert "decode='dp4a'" in asked and "the default at M <=" not in asked and DP4A_DEFAULT_MEASURED not in asked
    assert "-D MIRCUDA_FP4_ROWS=4" in asked and "-D MIRCUDA_FP4_STAGES=3" in asked
    assert all("needs a family-specific Blackwell target" not in text for text in (default, asked))
    word = describe(decode="e4m3")
    assert "decode='e4m3'" in word and "-D MIRCUDA_FP4_DP4A=0" in word and "IDP4A" not in word  # every define shown
    assert "the default at M <= 2 where it applies" in default and DP4A_M2_MEASURED not in default  # M = 1
    # M = 2, the default there too: describe() said "the M = 1 default where it applies"; the M = 2 measurement is
    # the plan's reason (quoted once in BlockScaledFp4Plan.describe(): test_the_tensor_core_choice_at_m2_...)
    m2 = describe(2)
    assert "-D MIRCUDA_FP4_M=2" in m2 and "decode='dp4a'" in m2 and "M = 1 default" not in m2
    assert "the default at M <= 2 where it applies" in m2 and DP4A_M2_MEASURED not in m2
    assert f"stages 2 (measured: {DP4A_DEFAULT_MEASURED}; M = 2: quoted in BlockScaledFp4Plan's reason)," in m2
    asked_m3 = describe(3, decode="dp4a")
    assert "-D MIRCUDA_FP4_M=3" in asked_m3 and "where it applies" not in asked_m3 and DP4A_M2_MEASURED not in asked_m3



# -- row warps (MIRCUDA_FP4_ROW_WARPS) ----------------------------------------------------------------------
def test_row_warps_add_their_define_only_above_one() -> None:
    base = dict(fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a", "int32", 2).defines)
    assert "MIRCUDA_FP4_ROW_WARPS" not in base
    assert dict(fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a", "int32", 2, row_warps=1).defines) == base
    four = dict(fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a", "int32", 2, row_warps=4).defines)
    assert four == {**base, "MIRCUDA_FP4_ROW_WARPS": "4"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_row_warps_compile_without_local_memory_or_more_registers(arch) -> None:
    """Each warp is the one-warp block it was: the same registers as row_warps=1 (within 4), no local memory."""
    from tests.test_matmul_fp8_mma import cuobjdump
    import subprocess
    import tempfile
    from pathlib import Path

    tool, env = cuobjdump()

    def resources(options: mc.CompileOptions) -> tuple[int, str]:
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            cubin.write_bytes(mc.compile_program(fp4_vector_source(), arch, options).image)
            out = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True, env=env,
                                 check=False)
        regs = re.search(r"REG:(\d+)", out.stdout)
        if regs is None:
            pytest.skip(f"cuobjdump -res-usage failed: {out.stderr.strip()[:200]}")
        return int(regs.group(1)), out.stdout

    for rows, stages, prefetch in [(4, 2, False), (8, 2, False), (4, 3, True)]:
        one, _ = resources(fp4_gemv_options(1, rows, "tiled", True, "fp4", "dp4a", "int32", stages, prefetch))
        for g in (2, 4, 8):
            regs, text = resources(fp4_gemv_options(1, rows, "tiled", True, "fp4", "dp4a", "int32", stages, prefetch,
                                                    row_warps=g))
            assert regs <= one + 4, (rows, stages, g, regs, one)
            assert "LOCAL:0" in text.replace(" ", "")


def test_row_warps_outside_the_integer_path_fail_to_compile() -> None:
    """The kernel's static_assert: row warps exist only on the integer path of the single plans."""
    with pytest.raises(mc.CompileError, match="MIRCUDA_FP4_ROW_WARPS"):
        mc.compile_program(fp4_vector_source(), "sm_90",
                           fp4_gemv_options(1, 4, "linear", True, "fp4", "e4m3", "fp16", 2, row_warps=2))


def test_row_warps_knob_checks_name_the_argument() -> None:
    from mircuda.matmul._fp4 import ROW_WARPS, check_row_warps, refuse_row_warps

    assert ROW_WARPS == (1, 2, 4, 8)
    assert check_row_warps(None) is None and check_row_warps(8) == 8
    for bad in (0, 3, 16, -2, "2", 2.0, True):
        with pytest.raises(mc.ContractError) as info:
            check_row_warps(bad)
        assert info.value.argument == "row_warps"
    refuse_row_warps(1, "e4m3", 8, FP4_MMA_SYMBOL)  # the default passes everywhere
    refuse_row_warps(4, "dp4a", None, FP4_SYMBOL)
    refuse_row_warps(4, "dp4a", 1, FP4_SYMBOL)
    for args, argument in [((2, "e4m3", None, FP4_SYMBOL), "row_warps"), ((2, "bytes", None, FP4_MMA_SYMBOL), "row_warps"),
                           ((2, "dp4a", 2, FP4_SYMBOL), "warps"), ((8, "dp4a", 8, FP4_SYMBOL), "warps")]:
        with pytest.raises(mc.ContractError) as info:
            refuse_row_warps(*args)
        assert info.value.argument == argument


def test_the_sweep_takes_row_warps_with_dp4a_only() -> None:
    got = sweep_values("vector:decode=dp4a:rowwarps=4,vector:decode=dp4a:rows=8:rowwarps=2:warps=1")
    assert got[0].row_warps == 4 and got[0].knobs()["row_warps"] == 4
    assert got[0].label == "vector:decode=dp4a:rowwarps=4"
    assert got[1].label == "vector:decode=dp4a:rows=8:rowwarps=2"  # warps=1: what row warps run anyway
    # rowwarps=1 is a candidate of its own: the plans may take row warps by default (DEFAULT_ROW_WARPS)
    assert sweep_values("vector:decode=dp4a:rowwarps=1") == (Fp4Candidate("vector", "dp4a", row_warps=1),)
    assert sweep_values("vector:rowwarps=1")[0].row_warps == 1  # the decode left out: the plan's may be dp4a
    # a word decoder or a K split given: rowwarps=1 is what the plan runs anyway, the same candidate as without it
    for text in ("vector:decode=e4m3:rowwarps=1", "vector:decode=dp4a:warps=2:rowwarps=1", "mma:rows=32"):
        assert "rowwarps" not in sweep_values(text)[0].label and sweep_values(text)[0].row_warps is None, text
    for text in ("vector:decode=e4m3,vector:decode=e4m3:rowwarps=1",
                 "vector:decode=dp4a:warps=2,vector:decode=dp4a:warps=2:rowwarps=1"):
        with pytest.raises(argparse.ArgumentTypeError):  # one configuration twice
            sweep_values(text)
    assert "row_warps" not in Fp4Candidate("vector", "dp4a").knobs()
    for text in ("vector:decode=dp4a:persistent=1", "vector:decode=dp4a:rowwarps=2:persistent=1",
                 "vector:decode=e4m3:rowwarps=2", "vector:rowwarps=2", "vector:decode=dp4a:rowwarps=2:warps=2",
                 "mma:rowwarps=2", "vector:decode=dp4a:rowwarps=3",
                 "vector:decode=dp4a:rowwarps=2,vector:decode=dp4a:warps=1:rowwarps=2"):  # one configuration twice
        with pytest.raises(argparse.ArgumentTypeError):
            sweep_values(text)


# -- row warps: a model of fp4_matvec_lean's indices on the plans' launch geometry ----------------------------
LEAN_LINES = (
    "ids.ctaid = ids.ctaid * kRowWarps + (ids.tid >> 5);", "ids.tid &= 31u;", "ids.ntid = 32u;",
    "const int warps = ids.ntid >> 5;", "if (kRowWarps > 1 && row0 >= n) return;",
    "const int steps = k > warp * 32 * 32 ? (k - warp * 32 * 32 + stride - 1) >> (9 + __ffs(warps)) : 0;",
    "const int lane_col = warp * 32 * 32 + lane * 32;", "if (row0 + r + 1 < n) {",
    "const unsigned char* pw = w + row0 * (k / 2) + (lane_col >> 1);", "const unsigned sstep = lean_scale_step<MIRCUDA_FP4_TILED != 0>(stride);",
    "prefetch_prologue(w, sw, n, k, row0, warp, warps, lane);",
    "const int c0 = warp * 32 * kElems + d * warps * 32 * kElems;",
    "for (int m = 0; m < kM; ++m) decode::store_out(y + (long long)(y_row + m) * n + row0 + row, scale * v[m]);",
    "if (ids.tid < kM * kRows) {", "const int m = (int)ids.tid / kRows, r = (int)ids.tid % kRows;",
    "if (row0 + r < n) {", "s.act[m] = __ldg(reinterpret_cast<const uint4*>(p.x + m * p.xrow));",
    "s.araw[m] = fp4::load_scale_pair(p.sx + m * p.sxrow);",
    "lp.xrow = (unsigned)k / 2u;", "lp.sxrow = MIRCUDA_FP4_ACT_TILED ? 16u : (unsigned)kblocks;",
    "lp.x = x + (lane_col >> 1);", "lp.sx = sx + fp4::scale_col_offset<MIRCUDA_FP4_ACT_TILED != 0>(lane_col >> 4);",
    "const unsigned cstep = (unsigned)stride >> 1;", "const unsigned xsstep = lean_scale_step<MIRCUDA_FP4_ACT_TILED != 0>(stride);",
    "p.x += cstep;", "p.sx += xsstep;", "return Tiled ? (unsigned)stride * 8u : (unsigned)stride >> 4;",
)
"""Code of ``cuda_src/fp4_vector.cu`` that :func:`lean_model` mirrors, character for character: a change to it
must change the model too."""


def lean_model(n: int, k: int, rows: int, warps: int, row_warps: int, stages: int, tiled: bool,
               m: int = 1) -> dict[str, Any]:
    """``fp4_matvec_lean`` (``fp4_matvec_bf16`` with ``MIRCUDA_FP4_DP4A``; 16-byte loads) for every thread of the
    launch :func:`~mircuda.matmul._fp4.gemv_launch` gives the plans: the outputs stored, the (row, 32-column chunk)
    pairs each block's rows read, the code and scale bytes its pointer walk loads (keyed by warp and step) and
    the L2 prefetches of ``prefetch_prologue``; with M activation rows the outputs as ``m N + row`` and the
    activations' code and scale bytes each warp loads."""
    blocks, threads = gemv_launch(n, rows, warps, row_warps)
    b, t = (a.ravel() for a in np.meshgrid(np.arange(blocks, dtype=np.int64), np.arange(threads, dtype=np.int64),
                                           indexing="ij"))
    ctaid, tid, ntid = b, t, threads
    if row_warps > 1:  # each warp a one-warp block of its own row block
        ctaid, tid, ntid = ctaid * row_warps + (tid >> 5), tid & 31, 32
    nwarps, warp, lane = ntid >> 5, tid >> 5, tid & 31
    row0 = ctaid * rows
    live = ~((row_warps > 1) & (row0 >= n))  # the spare warps return before any pointer is formed
    ctaid, tid, warp, lane, row0 = ctaid[live], tid[live], warp[live], lane[live], row0[live]
    wid = ctaid * 8 + warp  # one number per warp
    stride, lane_col = nwarps * 1024, warp * 1024 + lane * 32
    steps = np.where(k > warp * 1024, (k - warp * 1024 + stride - 1) >> (9 + nwarps.bit_length()), 0)
    kblocks, katoms = k // 16, -(-(k // 16) // 4)
    rp = [row0]  # the row each of the R row pointers points at: moved on while row0 + r + 1 < n
    for r in range(1, rows):
        rp.append(np.where(row0 + r < n, rp[-1] + 1, rp[-1]))
    row_part = (((row0 >> 7) * katoms) * 512 + (row0 & 31) * 16 + ((row0 >> 5) & 3) * 4) if tiled else row0 * kblocks
    kb0 = lane_col >> 4
    col_part = ((kb0 >> 2) * 512 + (kb0 & 3)) if tiled else kb0
    srow, sstep = (16, stride * 8) if tiled else (kblocks, stride >> 4)
    layout = ref.tiled_offsets(n, kblocks) if tiled else np.arange(n * kblocks, dtype=np.int64).reshape(n, kblocks)
    loads: dict[str, list[np.ndarray]] = {"code": [], "scale": [], "layout": [], "chunk": [], "key": [], "act": [],
                                          "act_scale": [], "act_layout": [], "act_at": [], "act_chunk": []}
    cstep, xsstep = stride >> 1, (stride * 8 if tiled else stride >> 4)  # the single plans: ACT_TILED = TILED
    act_layout = ref.tiled_offsets(m, kblocks) if tiled else np.arange(m * kblocks, dtype=np.int64).reshape(m, kblocks)
    for step in range(int(steps.max(initial=0))):
        col = lane_col + step * stride
        go = (step < steps) & (col < k)
        for r in range(rows):
            row = rp[r][go]
            code = row0[go] * (k // 2) + (lane_col[go] >> 1) + (row - row0[go]) * (k // 2) + step * (stride >> 1)
            loads["code"].append(code)
            loads["scale"].append(row_part[go] + col_part[go] + (row - row0[go]) * srow + step * sstep)
            loads["layout"].append(layout[row, col[go] // 16])
            loads["chunk"].append(np.stack([row0[go] + r, col[go] // 32], 1))
            loads["key"].append(((wid[go] * 64 + step) * n + row) * (k // 2) + code - row * (k // 2))
        for a in range(m):  # lean_load_act: row a at a K / 2 code bytes and a (16 tiled, K / 16 linear) scale bytes
            loads["act"].append(a * (k // 2) + (lane_col[go] >> 1) + step * cstep)
            loads["act_scale"].append(a * (16 if tiled else kblocks) + col_part[go] + step * xsstep)
            loads["act_layout"].append(act_layout[a, col[go] // 16])
            loads["act_at"].append(a * (k // 2) + col[go] // 2)  # A [M, K/2] row-major: where column col lies
            loads["act_chunk"].append(np.stack([ctaid[go], np.full(int(go.sum()), a), col[go] // 32], 1))
    out = {name: np.concatenate(parts) for name, parts in loads.items()}
    # the stores: lean_reduce leaves row l >> log2(32 / R) in lane l, held by lanes l % (32 / R) == 0; with a K
    # split thread tid < R of the block sums the warps' partials of row tid
    if nwarps == 1:
        holder, row = (lane & (32 // rows - 1)) == 0, lane >> ((32 // rows).bit_length() - 1)
        out["stored"] = np.concatenate([a * n + (row0 + row)[holder & (row0 + row < n)] for a in range(m)])
    else:
        a, r = tid // rows, tid % rows
        out["stored"] = (a * n + row0 + r)[(tid < m * rows) & (row0 + r < n)]
    # prefetch_prologue (32 elements per lane): lane -> row (lane / 4) % R, byte (lane % 4) 128 of step d's chunk
    pf_row = np.where(row0 + (lane >> 2) % rows < n, row0 + (lane >> 2) % rows, n - 1)
    ahead, every, line = ((lane >> 4), 2, (lane & 3) * 128) if rows == 4 else (0 * lane, 1, (lane & 3) * 128)
    prefetch = []
    for d in range(stages - 1):
        c0 = warp * 1024 + d * nwarps * 1024
        go = (d >= ahead) & ((d - ahead) % every == 0) & (c0 < k) & (c0 // 2 + line < k // 2)
        prefetch.append(((wid[go] * 64 + d) * n + pf_row[go]) * (k // 2) + c0[go] // 2 + line[go])
    out["prefetch"] = np.concatenate(prefetch) if prefetch else np.zeros(0, np.int64)
    return out


def test_the_lean_model_mirrors_the_kernel_source() -> None:
    text = resources.files("mircuda").joinpath("cuda_src/fp4_vector.cu").read_text()
    missing = [line for line in LEAN_LINES if line not in text]
    assert not missing, f"fp4_matvec_lean changed: update lean_model ({missing})"


@pytest.mark.parametrize("rows", [4, 8])
@pytest.mark.parametrize("row_warps", [1, 2, 4, 8])
@pytest.mark.parametrize("n, k", [(1, 32), (37, 96), (301, 1056), (1001, 2080), (4097, 160), (300, 14336)], ids=str)
def test_row_warps_write_every_output_once_and_read_only_their_rows(n, k, rows, row_warps) -> None:
    """On the launch the plans make (:func:`~mircuda.matmul._fp4.gemv_launch`, the kernel mirrored by
    :func:`lean_model`): every output row is stored exactly once, from one read of each 32-column chunk of its
    row; every code and scale byte loaded lies inside the operands (the last block's spare warps load nothing),
    the scale pointer walk lands on the layout's byte; each L2 prefetch is a byte the warp itself loads in step d
    of that row, d < stages - 1; and the grid has the fewest blocks that do it (fewer than row_warps spare warps)."""
    blocks, threads = gemv_launch(n, rows, 1, row_warps)
    assert threads == 32 * row_warps and (blocks - 1) * row_warps * rows < n <= blocks * row_warps * rows
    for warps in ((1,) if row_warps > 1 else (1, 2, 8)):
        for tiled in (False, True):
            for stages in (2, 4):
                got = lean_model(n, k, rows, warps, row_warps, stages, tiled)
                assert np.array_equal(np.bincount(got["stored"], minlength=n), np.ones(n, np.int64))
                counts = np.zeros((n + rows, k // 32), np.int64)
                np.add.at(counts, (got["chunk"][:, 0], got["chunk"][:, 1]), 1)
                assert (counts[:n] == 1).all()
                assert got["code"].min() >= 0 and got["code"].max() + 16 <= n * k // 2
                assert np.array_equal(got["scale"], got["layout"])
                assert got["scale"].max() + 2 <= ref.scale_bytes(n, k, "tiled" if tiled else "linear")
                assert np.isin(got["prefetch"], got["key"]).all()
                assert len(got["prefetch"]) > 0


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("n, k", [(37, 96), (301, 1056), (4097, 160)], ids=str)
def test_m_activation_rows_write_every_output_once_and_read_inside_the_activations(n, k, m) -> None:
    """M > 1 on the integer path (``lean_consume_rows``): every output of D[M, N] is stored once, with a K split
    too; every activation code and scale byte a warp loads lies inside A [M, K/2] and its scales, each code and
    scale where the layout puts it, and each row block reads every chunk of every activation row exactly once."""
    for rows in (4, 8):
        for warps, row_warps in ((1, 1), (2, 1), (8, 1), (1, 2), (1, 8)):
            for tiled in (False, True):
                got = lean_model(n, k, rows, warps, row_warps, 2, tiled, m)
                assert np.array_equal(np.bincount(got["stored"], minlength=m * n), np.ones(m * n, np.int64))
                assert got["act"].min() >= 0 and got["act"].max() + 16 <= m * k // 2
                assert np.array_equal(got["act_scale"], got["act_layout"])
                assert got["act_scale"].max() + 2 <= ref.scale_bytes(m, k, "tiled" if tiled else "linear")
                # each row block reads every 32-column chunk of every activation row once, where A puts it
                assert np.array_equal(got["act"], got["act_at"])
                counts = np.zeros((-(-n // rows), m, k // 32), np.int64)
                np.add.at(counts, tuple(got["act_chunk"].T), 1)
                assert (counts == 1).all(), (rows, warps, row_warps, tiled)


def test_the_fp4_module_docs_name_only_what_exists() -> None:
    """Every :func:/:data:/:class: of ``mircuda/matmul/_fp4.py`` names something of the module, of
    ``mircuda.matmul`` or, spelt out, of a mircuda module (``check_row_warps`` named a ``default_row_warps``)."""
    import importlib

    from mircuda import matmul
    from mircuda.matmul import _fp4

    text = resources.files("mircuda").joinpath("matmul/_fp4.py").read_text()
    missing = []
    for name in sorted(set(re.findall(r":(?:func|data|class):`~?([A-Za-z_][\w.]*)`", text))):
        if "." not in name:
            found = hasattr(_fp4, name) or hasattr(matmul, name)
        else:
            module, _, attr = name.rpartition(".")
            found = hasattr(importlib.import_module(module), attr)
        if not found:
            missing.append(name)
    assert not missing


def test_row_warps_launch_and_describe_without_a_gpu() -> None:
    """Fp4Gemv with a fake device and compiler: what the GPU tests expect of the launch (ceil(N / (rows G)) blocks
    of 32 G threads, warps 1) and of describe(); with the default decoder where it is dp4a (sm_90) and refused
    by name where it is not (sm_120f, whose default is the cvt decode); every refusal comes before the compiler."""
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import Fp4Gemv

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None, handle=0)
    context = SimpleNamespace(device_info=lambda: info)

    def gemv(n: int, k: int, arch: str = "sm_90", m: int = 1, **knobs: Any) -> Any:
        compiler = SimpleNamespace(arch=arch, compile=lambda source, options: SimpleNamespace(kernel=lambda c: kernel))
        return Fp4Gemv(context, m, n, k, "fp4", "linear", compiler, knobs.pop("warps", None),  # type: ignore[arg-type]
                       knobs.pop("symbol", FP4_SYMBOL), **knobs)

    for n, k in [(301, 96), (1, 32), (4097, 160), (1001, 4128)]:
        for rows in (4, 8):
            for g in (2, 4, 8):
                engine = gemv(n, k, decode="dp4a", rows=rows, row_warps=g)
                blocks = -(-n // (rows * g))
                assert (engine.config.grid, engine.config.block) == ((blocks, 1, 1), (32 * g, 1, 1))
                assert engine.warps == 1 and engine.row_warps == g and engine.rows == rows
                text = engine.describe()
                assert f"-D MIRCUDA_FP4_ROW_WARPS={g}" in text
                assert f"{blocks} blocks of {g} warps, each taking its own block of {rows} weight rows whole" in text
    default = gemv(1001, 4128, row_warps=4)  # sm_90: the default decoder is dp4a, rows 8 for K > 4096
    assert default.decode == "dp4a" and default.rows == 8 and default.config.grid == (32, 1, 1)
    plain = gemv(1001, 4128, warps=1, row_warps=1)
    assert "MIRCUDA_FP4_ROW_WARPS" not in plain.describe() and plain.config.block == (32, 1, 1)

    def refused(**knobs: Any) -> str:
        compiler = SimpleNamespace(arch=knobs.pop("arch", "sm_90"), compile=lambda source, options: pytest.fail("compiled"))
        with pytest.raises(mc.ContractError) as info:
            Fp4Gemv(SimpleNamespace(), knobs.pop("m", 1), 64, knobs.pop("k", 256), knobs.pop("activation", "fp4"),  # type: ignore[arg-type]
                    "linear", compiler, knobs.pop("warps", None), knobs.pop("symbol", FP4_SYMBOL), **knobs)
        return info.value.argument

    assert refused(arch="sm_120f", row_warps=2) == "row_warps"  # the default decoder there is not dp4a
    for knobs, argument in [({"row_warps": 3}, "row_warps"), ({"row_warps": 2.0}, "row_warps"),
                            ({"row_warps": True}, "row_warps"), ({"row_warps": np.int64(2)}, "row_warps"),
                            ({"decode": "e4m3", "row_warps": 2}, "row_warps"), ({"k": 80, "row_warps": 2}, "row_warps"),
                            ({"activation": "bf16", "row_warps": 2}, "row_warps"),
                            ({"decode": "dp4a", "warps": 2, "row_warps": 2}, "warps"),
                            ({"symbol": FP4_MMA_SYMBOL, "row_warps": 2}, "row_warps"),
                            ({"m": 4, "symbol": FP4_MMA_SYMBOL, "row_warps": 2}, "row_warps"),
                            ({"decode": "dp4a", "persistent": True, "row_warps": 2}, "persistent")]:
        assert refused(**knobs) == argument, knobs


@pytest.fixture
def occupancy_gemv(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``(gemv, compiled)``: ``gemv(n, k, **knobs)`` an Fp4Gemv (M = 1 unless ``m=`` is given) on sm_90 over a fake device (132 SMs) and
    compiler, occupancy modelled on the sm_90 integer kernel (72 registers, 28 resident warps per SM); ``compiled`` the
    defines of each module the last call compiled."""
    from types import SimpleNamespace

    from mircuda.matmul import _fp4
    from mircuda.matmul._fp4 import Fp4Gemv

    monkeypatch.setattr(_fp4, "blocks_per_sm", lambda context, kernel, warps: 28 // warps)
    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    context = SimpleNamespace(device_info=lambda: info)
    compiled: list[dict[str, Any]] = []

    def compile(source: Any, options: Any) -> Any:
        compiled.append(dict(options.defines))
        kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None, handle=0)
        return SimpleNamespace(kernel=lambda contract: kernel)

    def gemv(n: int, k: int, **knobs: Any) -> Any:
        compiled.clear()
        compiler = SimpleNamespace(arch="sm_90", compile=compile)
        return Fp4Gemv(context, knobs.pop("m", 1), n, k, "fp4", "linear", compiler,  # type: ignore[arg-type]
                       knobs.pop("warps", None), FP4_SYMBOL, **knobs)

    return gemv, compiled


def test_row_warps_default_where_a_k_split_exceeds_a_wave(occupancy_gemv: Any) -> None:
    """Neither ``row_warps`` nor ``warps`` given on the integer path: where the occupancy rule leaves one warp per
    block (the grid does not fit in one wave with a K split), Fp4Gemv compiles a second module with
    DEFAULT_ROW_WARPS row warps and says so in describe(); elsewhere, or with either knob given, it keeps one row block
    per block."""
    from mircuda.matmul._fp4 import DEFAULT_ROW_WARPS

    gemv, compiled = occupancy_gemv

    tall = gemv(14336, 4096)  # 3584 row blocks of 4: more than 132 x 14 two-warp blocks
    assert DEFAULT_ROW_WARPS == 2
    assert (tall.decode, tall.rows, tall.warps, tall.row_warps, tall.default_row_warps) == ("dp4a", 4, 1, 2, True)
    assert (tall.config.grid, tall.config.block) == ((1792, 1, 1), (64, 1, 1))
    assert [d.get("MIRCUDA_FP4_ROW_WARPS") for d in compiled] == [None, "2"]  # the second module is the one kept
    assert dict(tall.options.defines)["MIRCUDA_FP4_ROW_WARPS"] == "2"
    # 3584 one-warp blocks would fit in one wave (132 x 28): it is the K split that does not
    assert "1792 blocks of 2 warps" in tall.describe() and "one-warp blocks exceed a wave" not in tall.describe()
    assert "the default where the row blocks do not fit in one wave of two-warp blocks splitting K" in tall.describe()
    for n, k, knobs in [(4096, 4096, {}),  # 1024 row blocks: two warps split K in one wave
                        (4096, 14336, {}),  # rows 8: a K split of 4 warps
                        (14336, 4096, {"row_warps": 1}), (14336, 4096, {"warps": 1}),
                        (14336, 4096, {"decode": "e4m3"})]:  # not the integer path
        engine = gemv(n, k, **knobs)
        assert engine.row_warps == 1 and not engine.default_row_warps, (n, k, knobs)
        assert len(compiled) == 1 and "MIRCUDA_FP4_ROW_WARPS" not in compiled[0]
        assert "row_warps" not in engine.describe()
    assert gemv(4096, 4096).warps == 2 and gemv(14336, 4096, row_warps=1).warps == 1


def test_row_warps_default_is_m1_only(occupancy_gemv: Any) -> None:
    """At M = 2 the integer path (the default there too) keeps one row block per block at large N, where M = 1 takes
    two row warps: measured faster (ROW_WARPS_M2_MEASURED); one module is compiled."""
    from mircuda.matmul._fp4 import ROW_WARPS_M2_MEASURED

    gemv, compiled = occupancy_gemv
    two = gemv(14336, 4096, m=2)
    assert (two.decode, two.rows, two.warps, two.row_warps, two.default_row_warps) == ("dp4a", 4, 1, 1, False)
    assert two.config.grid == (3584, 1, 1) and len(compiled) == 1 and "MIRCUDA_FP4_ROW_WARPS" not in compiled[0]
    assert gemv(14336, 4096, m=2, row_warps=2).row_warps == 2  # asked for: still there
    assert gemv(14336, 4096).row_warps == 2  # M = 1
    assert "14336x4096 14.84, 14.79 µs with row_warps=1" in ROW_WARPS_M2_MEASURED


def test_row_warps_default_needs_large_n_not_a_short_k(occupancy_gemv: Any) -> None:
    """The occupancy rule also takes one warp per block where K is too short for a K split (K < 4 x 1024 on the
    integer path), at any N: there the grid may be a few blocks, and halving it would leave SMs idle. The default
    row warps follow the large-N reason only: the row blocks do not fit in one wave of two-warp blocks."""
    gemv, compiled = occupancy_gemv
    for n, k in [(64, 256), (256, 2048), (4096, 2048)]:  # 16, 64, 1024 row blocks: <= 132 x 14
        engine = gemv(n, k)
        assert (engine.warps, engine.row_warps, engine.default_row_warps) == (1, 1, False), (n, k)
        assert engine.config.grid == (-(-n // 4), 1, 1) and len(compiled) == 1
    wide = gemv(14336, 2048)  # 3584 row blocks: more than 132 x 14
    assert (wide.warps, wide.row_warps, wide.default_row_warps, wide.config.grid) == (1, 2, True, (1792, 1, 1))


@pytest.mark.parametrize("n, k, knobs, early", [
    (14336, 4096, {}, True),                     # 58.7 M weights: both modules (row warps 2 is the second) early
    (4096, 14336, {}, True),
    (8192, 4096, {}, True),                      # exactly 2^25
    (8184, 4096, {}, False),                     # just below
    (4096, 4096, {}, False),
    (14336, 4096, {"static_weights": False}, False),
    (14336, 4096, {"pdl_trigger": "late"}, False),  # a given trigger stands
    (14336, 4096, {"m": 2}, False),              # measured at M = 1 only
    (14336, 4096, {"decode": "e4m3"}, False)])   # not the integer path
def test_the_promise_takes_the_early_trigger_on_large_weights_in_every_module(occupancy_gemv: Any, n: int, k: int,
                                                                               knobs: dict[str, Any], early: bool) -> None:
    """static_weights=True on the integer path at M = 1, N x K >= STATIC_EARLY_MIN_WEIGHTS, pdl_trigger not given:
    every module compiled (the default row warps' second one too) triggers early and describe() says why; otherwise
    the trigger is the one given, or the late default (no define)."""
    from mircuda.matmul._fp4 import STATIC_EARLY_MIN_WEIGHTS

    gemv, compiled = occupancy_gemv
    engine = gemv(n, k, **{"static_weights": True, **knobs})
    trigger = "0" if early else {"late": "1"}.get(knobs.get("pdl_trigger", ""))
    assert [d.get("MIRCUDA_PDL_TRIGGER_LATE") for d in compiled] == [trigger] * len(compiled), compiled
    assert dict(engine.options.defines).get("MIRCUDA_PDL_TRIGGER_LATE") == trigger
    assert engine.static_early is early and (engine.pdl_trigger == "early") is early
    text = engine.describe()
    assert ("early trigger" in text) is early and (f">= {STATIC_EARLY_MIN_WEIGHTS}" in text) is early, text
    if (n, k, knobs) == (14336, 4096, {}):
        assert len(compiled) == 2 and engine.row_warps == 2  # the row-warps recompile kept the early trigger


def test_both_plans_run_the_default_row_warps_module_from_numba_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """BlockScaledFp4VectorPlan and BlockScaledFp4Plan at M = 1, N = 14336, K = 4096 on a fake sm_90 device: the
    module kept is the second one (its handle in numba_execute's launch, with 1792 blocks of 64 threads), the plans'
    row_warps / warps are what runs, and the vector plan's repr names the row warps beside warps=1."""
    from types import SimpleNamespace

    from mircuda.matmul import _fp4

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64), arch="sm_90",
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    context, stream = SimpleNamespace(device_info=lambda: info), SimpleNamespace(handle=7)
    handles: list[int] = []

    def compile(source: Any, options: Any) -> Any:
        handles.append(100 + len(handles))
        kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None, handle=handles[-1])
        return SimpleNamespace(kernel=lambda contract: kernel)

    compiler = SimpleNamespace(arch="sm_90", compile=compile)
    for name, value in [("plan_stream", lambda stream, context: None), ("_device_checks", lambda context, name: None),
                        ("fp4_compiler", lambda given, context: compiler), ("plan_compiler", lambda given, context: None),
                        ("blocks_per_sm", lambda context, kernel, warps: 28 // warps),
                        ("fp4_executor", lambda function, grid, block, n, k, alignments, stream: (function, grid, block))]:
        monkeypatch.setattr(_fp4, name, value)
    vector = _fp4.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(14336, 4096))  # type: ignore[arg-type]
    assert (vector.row_warps, vector.warps, vector.launch_config.block) == (2, 1, (64, 1, 1))
    assert vector.kernel.handle == handles[-1] == 101 and vector.numba_execute == (101, 1792, 64)
    assert "row_warps=2" in repr(vector) and "-D MIRCUDA_FP4_ROW_WARPS=2" in str(vector.describe())
    handles.clear()
    matrix = _fp4.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(1, 14336, 4096))  # type: ignore[arg-type]
    assert matrix.numba_execute == (101, 1792, 64) and "-D MIRCUDA_FP4_ROW_WARPS=2" in str(matrix.describe())
    handles.clear()
    plain = _fp4.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(14336, 4096), row_warps=np.int64(1))  # type: ignore[arg-type]
    assert (plain.row_warps, plain.warps, plain.numba_execute) == (1, 1, (100, 3584, 32)) and handles == [100]
    assert "row_warps" not in repr(plain)


# -- BlockScaledFp4Plan at M = 2..5 on a fake device: the integer path's default, refusals, numba ------------------
@pytest.fixture
def fake_matrix_plan(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``(make, compiled)``: ``make(m, n=4096, k=4096, arch="sm_90", **knobs)`` a BlockScaledFp4Plan on a fake
    device (132 SMs, cc 9.0) whose compiler for ``arch`` records each module's defines in ``compiled`` (cleared per
    call) and whose kernels have handle 100 + the module's number; occupancy as ``occupancy_gemv``."""
    from types import SimpleNamespace

    from mircuda.matmul import _fp4

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64), arch="sm_90", name="fake",
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    context, stream = SimpleNamespace(device_info=lambda: info), SimpleNamespace(handle=7)
    compiled: list[dict[str, Any]] = []
    arch = ["sm_90"]

    def compile(source: Any, options: Any) -> Any:
        compiled.append(dict(options.defines))
        kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None,
                                 handle=99 + len(compiled))
        return SimpleNamespace(kernel=lambda contract: kernel)

    for name, value in [("plan_stream", lambda stream, context: None), ("_device_checks", lambda context, name: None),
                        ("fp4_compiler", lambda given, context: SimpleNamespace(arch=arch[0], compile=compile)),
                        ("plan_compiler", lambda given, context: None),
                        ("blocks_per_sm", lambda context, kernel, warps: 28 // warps)]:
        monkeypatch.setattr(_fp4, name, value)

    def make(m: int, n: int = 4096, k: int = 4096, target: str = "sm_90", **knobs: Any) -> Any:
        compiled.clear()
        arch[0] = target
        return _fp4.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), **knobs)  # type: ignore[arg-type]

    return make, compiled


def test_the_matrix_plan_takes_the_promises_early_trigger_at_m1_only(fake_matrix_plan: Any) -> None:
    """BlockScaledFp4Plan's NVRTC path at M = 1 is the vector plan's engine: static_weights=True (a numpy bool too) on
    14336x4096 compiles every module with the early trigger and describe() says why; at M = 2 it keeps the late
    default (STATIC_EARLY_MEASURED is M = 1 only)."""
    from mircuda.matmul._fp4 import STATIC_EARLY_MIN_WEIGHTS

    make, compiled = fake_matrix_plan
    for m, static, early in ((1, True, True), (1, np.True_, True), (2, True, False), (1, np.False_, False)):
        plan = make(m, 14336, 4096, static_weights=static)
        text = str(plan.describe())
        assert {d.get("MIRCUDA_PDL_TRIGGER_LATE") for d in compiled} == {"0" if early else None}, (m, static)
        assert (f">= {STATIC_EARLY_MIN_WEIGHTS}" in text) is early, text
        assert plan._gemv.static_weights is bool(static) and plan._gemv.static_early is early  # the checked bool


def test_the_tensor_core_choice_at_m2_says_why_the_integer_path_did_not_apply(fake_matrix_plan: Any) -> None:
    """At M = 2 fp4_mma_bf16 runs only where the integer path's default does not apply; describe()'s reason said
    just "2 <= M <= 16 with NVFP4 activations", which at M = 2 is no longer the rule: it names the conditions."""
    make, _ = fake_matrix_plan
    needs = ("its integer path, the default up to M = 2, needs K % 32 == 0, a target without cvt.rn.f16x2.e2m1x2, "
             "and no decode, block_sum, persistent=True or rows other than 4 or 8 given")
    for m, knobs in [(2, {"decode": "e4m3"}), (2, {"rows": 32}), (2, {"k": 4112}), (2, {"target": "sm_120f"})]:
        plan = make(m, **knobs)
        assert plan.gemv_kernel == FP4_MMA_SYMBOL and needs in str(plan.describe()), knobs
    assert make(2).gemv_kernel == FP4_SYMBOL and needs not in str(make(2).describe())
    from mircuda.matmul._fp4 import DP4A_M2_MEASURED

    assert str(make(2).describe()).count(DP4A_M2_MEASURED) == 1  # in the reason, not in the kernel's text too
    assert make(3).gemv_kernel == FP4_MMA_SYMBOL and needs not in str(make(3).describe())


def test_the_docs_no_longer_say_the_integer_path_is_m1_only() -> None:
    """Statements the M <= 4 integer path (default at M = 2) made stale, as the commit left them: VECTOR_DECODES
    said "M = 1" and "The M = 1 default", FP4_MMA_SYMBOL "the default for 2 <= M <= 16" unqualified, the README
    "the M = 1 default where it applies" of the row warps, fp4-profile's sweep_values "the integer path of M = 1"."""
    from pathlib import Path

    from mircuda.cli._fp4_profile import sweep_values as sweep

    def flat(text: str) -> str:
        return " ".join(text.split())

    fp4 = flat(resources.files("mircuda").joinpath("matmul/_fp4.py").read_text())
    readme = flat((Path(__file__).resolve().parents[1] / "README.md").read_text())
    for stale in ("(``MIRCUDA_FP4_DP4A``; M = 1,", "any cc >= 8.0. The M = 1 default where it applies",
                  "BlockScaledFp4Plan's default for 2 <= M <= 16 with NVFP4 activations.\"\"\""):
        assert stale not in fp4, stale
    assert "(``MIRCUDA_FP4_DP4A``; M <= ``DP4A_MAX_M``," in fp4 and "but at M <= ``DP4A_DEFAULT_MAX_M`` where" in fp4
    assert '`decode="dp4a"` (the M = 1 default where it applies)' not in readme
    assert '`decode="dp4a"` (the default at M <= 2 where it applies)' in readme
    assert ("### The tensor-core kernel `fp4_mma_bf16` - The default for 3 <= M <= 16 with NVFP4 activations. - Also the "
            "default at M = 2 where the integer path does not apply: a word decoder, `rows=16|32`, `block_sum=` or "
            "`persistent=True` given, K % 32 != 0, or a target with the E2M1 conversion.") in readme
    assert "and no knob of the tensor-core kernel is given" not in flat(mc.BlockScaledFp4Plan.__doc__ or "")
    assert ("and no knob it excludes is given (a word decoder, 16 or 32 rows, ``block_sum``, ``persistent=True``)"
            in flat(mc.BlockScaledFp4Plan.__doc__ or ""))
    assert "integer path of M = 1" not in flat(sweep.__doc__ or "") and "integer path of M <= 4" in flat(sweep.__doc__ or "")


def test_odd_knobs_at_m2_to_5_are_refused_by_name_before_anything_compiles(fake_matrix_plan: Any) -> None:
    """BlockScaledFp4Plan at M = 2..5 (the integer path's default at M = 2, asked for up to M = 4) with knobs of odd
    types and values, alone and beside the default's own: every refusal is a ContractError naming the knob, raised
    before the compiler; numpy integers are taken as ints. A rows or decode value neither kernel takes made the plan
    choose fp4_mma_bf16, whose refusal listed its own values only (rows 16, 32; no 'dp4a') although 4, 8 and 'dp4a'
    are what the default takes at M = 2: both kernels' values are named now."""
    make, compiled = fake_matrix_plan
    odd: dict[str, list[Any]] = {
        "rows": [np.array(4), np.array([4]), 4.0, True, "4", 0, -4, 3, 64],
        "decode": ["DP4A", b"dp4a", np.array("dp4a"), np.array(["dp4a"]), 1, True, "", "dp4a "],
        "block_sum": [1, True, np.array("fp32"), "int32", "fp8"],
        "persistent": [np.bool_(False), np.bool_(True), 0, 1, "no", np.array(False)],
        "row_warps": [np.array(2), 2.0, True, 3, "2", 16, -1],
        "warps": [np.array(2), 2.0, True, 9, "2", 0, 16],  # 3: fp4_mma_bf16's (M >= 3) since MMA_WARPS
        "stages": [np.array(3), 3.0, True, 1, "3", 5],
        "kernel": [1, True, b"fp4_mma_bf16", np.array("fp4_mma_bf16"), ""],
        "prefetch": [np.bool_(True), 1, "yes"],
        "pdl_trigger": [1, "x", True],
    }
    for m in (2, 3, 4, 5):
        for name, values in odd.items():
            for value in values:
                for extra in ({}, {"rows": 8}, {"row_warps": 2}, {"warps": 2}, {"decode": "dp4a"}):
                    if name in extra:
                        continue
                    with pytest.raises(mc.ContractError) as info:
                        make(m, **{name: value}, **extra)
                    assert info.value.argument in (name, *extra), (m, name, value, extra, str(info.value))
                    assert compiled == [], (m, name, value, extra)
    # the default's own values in numpy integers: taken, not refused
    plan = make(2, rows=np.int64(8), warps=np.int32(2), stages=np.int8(3))
    assert (plan.gemv_kernel, plan._gemv.decode, plan._gemv.rows, plan._gemv.warps, plan._gemv.stages) == (
        FP4_SYMBOL, "dp4a", 8, 2, 3)
    assert make(2, row_warps=np.int64(4))._gemv.row_warps == 4
    # what the refusal lists where the plan chose the tensor-core kernel for an odd value (M = 2: the default is dp4a)
    for knobs, names in [({"rows": 4.0}, ("(16, 32)", "fp4_matvec_bf16 takes (4, 8)")),
                         ({"decode": "DP4A"}, ("'table' (the decoders of kernel fp4_mma_bf16; 'dp4a' is "
                                               "fp4_matvec_bf16's integer path, M <= 4)",))]:
        with pytest.raises(mc.ContractError) as info:
            make(2, **knobs)
        assert all(text in str(info.value) for text in names), str(info.value)
    with pytest.raises(mc.ContractError, match=r"\(4, 8\) \(weight rows per block of kernel fp4_matvec_bf16; "
                                               r"fp4_mma_bf16 takes \(16, 32\)\)"):
        make(2, decode="dp4a", rows=16)
    # block_sum (a word decoder's knob) keeps M = 2 on the tensor-core kernel, which refuses it: the message says
    # which kernel takes it; persistent=True's already did
    for knobs, text in [({"block_sum": "fp32"}, "block_sum is fp4_matvec_bf16's: kernel='fp4_matvec_bf16'"),
                        ({"persistent": True}, "the persistent grid is fp4_matvec_bf16's")]:
        with pytest.raises(mc.ContractError) as info:
            make(2, **knobs)
        assert info.value.argument in knobs and text in str(info.value), str(info.value)
    assert make(2, kernel="fp4_matvec_bf16", block_sum="fp32")._gemv.decode == "e4m3"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
@pytest.mark.parametrize("m", [2, 3, 4])
def test_the_m_row_integer_path_compiles_without_a_stack_frame_at_its_default_stages(arch, m) -> None:
    """``lean_consume_rows`` (M = 2..4) with the plans' default 2 stages, rows 4 (linear scales) and 8 (tiled, row
    warps 2) compiles for every plan target, and where the integer path is a default (sm_80, sm_90) with no spill
    and no stack frame (DP4A_MAX_M's docstring; the CPU tests compiled the integer path at M = 1 only)."""
    for rows, layout, row_warps in [(4, "linear", 1), (8, "tiled", 2)]:
        opts = fp4_gemv_options(m, rows, layout, True, "fp4", "dp4a", "int32", 2, row_warps=row_warps)
        prog = mc.compile_program(fp4_vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                               ptxas_verbose=True))
        usage = prog.resource_usage()[FP4_SYMBOL]
        if arch != "sm_120f":  # there dp4a is only asked for; M = 4 with rows 8 takes 16 bytes of stack (13.0)
            assert usage.spill_store_bytes == usage.spill_load_bytes == usage.stack_frame_bytes == 0, (rows, usage)


def test_the_integer_path_refuses_m_above_4_and_m_row_tiles_of_the_grouped_kernel_at_compile_time() -> None:
    """The kernel's static_assert: M <= kDp4aMaxM (= DP4A_MAX_M) on the single plans' integer path, and M = 1 (1-row
    tiles) in the grouped kernel, whose tile walk stores one activation row; the same grouped options with 1-row
    tiles compile."""
    from mircuda.matmul._fp4 import DP4A_MAX_M
    from mircuda.matmul._moe_kernels import DecodeTuning, grouped_options

    assert f"constexpr int kDp4aMaxM = {DP4A_MAX_M};" in fp4_vector_source().text
    with pytest.raises(mc.CompileError, match=r"1 <= M <= 4"):
        mc.compile_program(fp4_vector_source(), "sm_90", fp4_gemv_options(5, 4, "linear", True, "fp4", "dp4a", "int32"))
    grouped = dict(grouped_options(n=64, k=256, groups=2, bank_size=2, capacity=4, rows_per_tile=1, fixed_rows=0,
                                   tiled=False, sets=1, variant="vector", tuning=DecodeTuning("dp4a", 2, 0, 1)).defines)
    assert grouped["MIRCUDA_FP4_DP4A"] == "1" and grouped["MIRCUDA_FP4_M"] == "1"
    assert b"fp4_grouped_bf16" in mc.compile_program(fp4_vector_source(), "sm_90",
                                                    mc.CompileOptions(defines=grouped)).image
    with pytest.raises(mc.CompileError, match=r"1-row tiles in the grouped kernel"):
        mc.compile_program(fp4_vector_source(), "sm_90", mc.CompileOptions(
            defines={**grouped, "MIRCUDA_FP4_M": 2, "MIRCUDA_MOE_MT": 2}))


def test_numba_execute_at_m2_launches_the_integer_path_kernel_with_its_alignments(
        fake_matrix_plan: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """BlockScaledFp4Plan at M = 2 with no knobs (the integer path's default) on a fake sm_90 device: numba_execute
    is fp4_executor over the one module compiled (one row block per block at N = 14336 too: M = 1's row warps
    rule is not M = 2's), with the plan's grid and block, N and K packed as the kernel's last parameters, and the integer path's activation alignments
    (16-byte codes, 2-byte scales) refused before any launch: the M = 1 test's pattern
    (test_both_plans_run_the_default_row_warps_module_from_numba_and_say_so) with the real executor and a
    stand-in cuLaunchKernel."""
    pytest.importorskip("numba")
    import ctypes
    import struct

    from mircuda.matmul import _fp4
    from mircuda.matmul._vector import INVALID_VALUE

    make, compiled = fake_matrix_plan
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    seen: list[tuple[Any, ...]] = []

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_uint64 * 10).from_address(params)
        n, k = struct.unpack("<ii", ctypes.string_at(pointers[8], 4) + ctypes.string_at(pointers[9], 4))
        seen.append((f, gx, bx, stream, n, k))
        return 0

    entry = proto(fake_launch)
    real = _fp4.fp4_executor
    monkeypatch.setattr(_fp4, "fp4_executor", lambda *args, **kw: real(*args, launch_function=entry, **kw))
    for n, handle, grid, block in [(4096, 100, 1024, 64), (14336, 100, 3584, 32)]:  # no default row warps at M = 2
        plan = make(2, n=n)
        assert plan.gemv_kernel == FP4_SYMBOL and plan._gemv.decode == "dp4a" and compiled[-1]["MIRCUDA_FP4_M"] == "2"
        assert (plan._gemv.config.grid[0], plan._gemv.config.block[0]) == (grid, block)
        align = {o.name: o.alignment for o in plan.operands}
        assert (align["a"], align["a_scales"]) == (16, 2)
        execute = plan.numba_execute
        seen.clear()
        assert execute(7, 0x1000, 0x2002, 0x3000, 0x4002, 0x5000, 0, 0, 1.0) == 0
        assert seen == [(handle, grid, block, 7, n, 4096)]
        assert execute(7, 0x1008, 0x2002, 0x3000, 0x4002, 0x5000, 0, 0, 1.0) == INVALID_VALUE  # a: 8-byte aligned
        assert execute(7, 0x1000, 0x2001, 0x3000, 0x4002, 0x5000, 0, 0, 1.0) == INVALID_VALUE  # a_scales: odd
        assert len(seen) == 1
