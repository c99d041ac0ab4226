"""The tensor-core blockwise FP8 decode kernel (``cuda_src/fp8_mma_gemv.cu``) without a GPU: it compiles
with NVRTC for sm_89, sm_90 and sm_120f for every M and both row counts; its PTX issues the E4M3
``mma.sync.aligned.m16n8k32`` and streams the weights past L1 after ``griddepcontrol.wait``; its SASS
(when cuobjdump is found) holds the FP8 tensor-core MMA (``QMMA.16832.F32.E4M3.E4M3`` on sm_89 and
sm_120; on sm_90, which has no FP8 ``mma.sync``, ptxas's ``F2FP.F16.E4M3.UNPACK_B`` decode and
``HMMA.16816.F32``) and no local memory; and a numpy emulation of the kernel's lane -> column mapping
and of the PTX ISA's m16n8k32 fragment layouts reproduces the float64 product of the dequantized
operands (partial K and N blocks, M past 8, alpha and beta), reading nothing out of bounds."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul._fp8_mma import FP8_MMA_ROWS, FP8_MMA_SYMBOL, fp8_mma_options, fp8_mma_stages, fp8_mma_source
from mircuda.matmul._quantize import (
    dequantize_reference,
    quantize_activations_reference,
    quantize_weights_reference,
)

MMA_PTX = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
STREAMED = "ld.global.nc.L1::no_allocate.L2::128B.v4.u32"


def ptx(arch: str, m: int, rows: int = 16, trigger: str | None = None, decode: str | None = None,
        **extra: int) -> str:
    """The entry's PTX as the plans compile it (the load ring of :func:`fp8_mma_stages`), ``extra`` macros on top."""
    options = fp8_mma_options(m, rows, trigger, decode, fp8_mma_stages(m, rows))
    text = mc.compile_program(fp8_mma_source(), arch, mc.CompileOptions(defines={**dict(options.defines), **extra},
                                                                           output="ptx")).image.decode()
    body = text[text.index(f".entry {FP8_MMA_SYMBOL}"):]
    return body[: body.index("\n}")]


# -- compilation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("rows", FP8_MMA_ROWS)
@pytest.mark.parametrize("m", [1, 2, 3, 8, 9, 16])
@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_120f"])
def test_the_kernel_compiles_for_every_m_rows_and_target(arch, m, rows) -> None:
    prog = mc.compile_program(fp8_mma_source(), arch, fp8_mma_options(m, rows))
    assert prog.image[:4] == b"\x7fELF" and FP8_MMA_SYMBOL.encode() in prog.image


@pytest.mark.parametrize("arch", ["compute_89", "compute_120f"])
@pytest.mark.parametrize("m, rows", [(1, 16), (2, 16), (8, 32), (9, 16), (16, 32)])
def test_the_products_run_on_e4m3_mma_and_the_weights_stream_past_l1(arch, m, rows) -> None:
    body = ptx(arch, m, rows)
    tiles, n8, stages = rows // 16, -(-m // 8), fp8_mma_stages(m, rows)
    # Per 128-K block: 2 steps x 2 mmas per (weight tile, n8 tile); in each slot of the unrolled ring and the tail.
    assert body.count(MMA_PTX) == (stages + 1) * 4 * tiles * n8
    # 2 steps x (rows g, g + 8) per tile: the ring's first stages - 1 blocks, one per slot, the partial block.
    assert body.count(STREAMED) == 2 * stages * 4 * tiles
    assert "cvt.rn.f16x2.e4m3x2" not in body  # no CUDA-core decoding
    assert "fma.rn.f32" in body  # the block sums scaled and added in FP32


@pytest.mark.parametrize("m, rows", [(1, 16), (2, 16), (8, 32), (9, 16), (16, 32)])
def test_on_sm_90_each_fragment_is_decoded_once_and_fp16_mmas_chain_on_the_block_sum(m, rows) -> None:
    """Hopper has no E4M3 mma.sync: the kernel decodes each 16-byte weight and activation word set once
    (cvt.rn.f16x2.e4m3x2, two codes per instruction) and runs m16n8k16 FP16 mmas accumulating into the block sum,
    instead of the E4M3 mma that ptxas would emulate per instruction (decode, two HMMA from zero, FADDs);
    -D MIRCUDA_FP8_CVT=0 gives that emulation back for A/B runs."""
    body = ptx("compute_90", m, rows)
    tiles, n8, stages = rows // 16, -(-m // 8), fp8_mma_stages(m, rows)
    consumes = stages + 1  # the ring's slots and the partial block
    assert MMA_PTX not in body
    assert body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == consumes * 2 * 4 * tiles * n8
    # per consume: activations 2 steps x n8 x 8 cvt, weights tiles x 2 steps x (rows g, g + 8) x 8 cvt
    assert body.count("cvt.rn.f16x2.e4m3x2") == consumes * (16 * n8 + 32 * tiles)
    assert body.count(STREAMED) == 2 * stages * 4 * tiles
    emulated = ptx("compute_90", m, rows, MIRCUDA_FP8_CVT=0)
    assert emulated.count(MMA_PTX) == consumes * 4 * tiles * n8 and "cvt.rn.f16x2.e4m3x2" not in emulated


def test_the_load_ring_is_3_k_blocks_up_to_m_8_and_2_above_or_the_former_loop_for_a_b_runs() -> None:
    assert [fp8_mma_stages(m) for m in (1, 2, 8, 9, 16)] == [2, 3, 3, 2, 2]
    assert [fp8_mma_stages(m, 32) for m in (1, 2, 8, 9, 16)] == [0, 3, 3, 3, 3]  # M = 1 x 32 rows: the former kernel
    from mircuda.matmul._fp8_mma import fp8_mma_rows

    # 32-row blocks by default only above M = 8 at N >= 8192 (measured at M = 16 on 14336x4096)
    assert [fp8_mma_rows(m, n) for m, n in ((16, 14336), (9, 8192), (16, 8191), (8, 14336), (2, 28672))] == [
        32, 32, 16, 16, 16]
    assert dict(fp8_mma_options(1, 32, stages=0).defines) | {} == {"MIRCUDA_FP8_M": "1", "MIRCUDA_FP8_TILES": "2",
                                                                   "MIRCUDA_FP8_STAGES": "0", "MIRCUDA_FP8_CVT": "0"}
    assert dict(fp8_mma_options(4, 16, stages=3).defines)["MIRCUDA_FP8_STAGES"] == "3"
    assert "MIRCUDA_FP8_STAGES" not in dict(fp8_mma_options(4, 16).defines)  # the kernel's default: 2
    former = ptx("compute_89", 8, 16, MIRCUDA_FP8_STAGES=0)
    assert former.count(MMA_PTX) == 2 * 4 and former.count(STREAMED) == 3 * 4  # loop, tail; first, next, partial
    with pytest.raises(mc.CompileError, match="MIRCUDA_FP8_STAGES must be 0, 2, 3 or 4"):
        ptx("compute_90", 8, 16, MIRCUDA_FP8_STAGES=5)
    with pytest.raises(mc.CompileError, match="MIRCUDA_PRELOAD_WEIGHTS needs MIRCUDA_FP8_STAGES=0"):
        ptx("compute_90", 8, 16, MIRCUDA_FP8_STAGES=2, MIRCUDA_PRELOAD_WEIGHTS=1)


@pytest.mark.parametrize("arch", ["compute_89", "compute_90", "compute_120f"])
@pytest.mark.parametrize("m, rows", [(1, 16), (16, 32)])
def test_the_integer_decode_runs_fp16_mma_on_integer_decoded_fragments(arch, m, rows) -> None:
    body = ptx(arch, m, rows, decode="integer")
    tiles, n8 = rows // 16, -(-m // 8)
    assert MMA_PTX not in body and "cvt.rn.f16x2.e4m3x2" not in body
    consumes = fp8_mma_stages(m, rows) + 1  # the ring's slots and the partial block
    assert body.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == consumes * 2 * 4 * tiles * n8
    # The masks of the decode (PTX prints them in decimal): 0x3f803f80 and 0x80008000.
    assert f", {0x3F803F80};" in body and f", {0x80008000 - 2**32};" in body
    hardware = ptx(arch, m, rows, decode="hardware")
    assert hardware == ptx(arch, m, rows)  # "hardware" is the default


def test_on_hopper_and_later_the_kernel_waits_for_the_previous_grid_before_reading_its_operands() -> None:
    body = ptx("compute_90", 16)
    wait = body.index("griddepcontrol.wait")
    assert all(body.find(op) > wait for op in ("ld.global", "st.global"))
    assert body.index("prefetch.global.L2") < wait
    assert body.index("griddepcontrol.launch_dependents") > body.rindex(STREAMED)  # late by default
    early = ptx("compute_90", 16, trigger="early")
    assert early.index("griddepcontrol.launch_dependents") < early.index("griddepcontrol.wait")
    late = ptx("compute_90", 16, trigger="late")
    assert late.index("griddepcontrol.launch_dependents") > late.rindex(STREAMED)


def test_below_sm_89_the_kernel_refuses_to_compile_by_name() -> None:
    with pytest.raises(mc.CompileError, match="8.9"):
        mc.compile_program(fp8_mma_source(), "sm_80", fp8_mma_options(2))


@pytest.mark.parametrize("defines, message", [({}, "MIRCUDA_FP8_M"), ({"MIRCUDA_FP8_M": 17}, "1..16"),
                                              ({"MIRCUDA_FP8_M": 0}, "1..16"),
                                              ({"MIRCUDA_FP8_M": 4, "MIRCUDA_FP8_TILES": 3}, "1, 2 or 4"),
                                              ({"MIRCUDA_FP8_M": 4, "MIRCUDA_FP8_INT_DECODE": 2}, "0 or 1")])
def test_the_kernel_compiles_only_for_valid_m_and_tiles(defines, message) -> None:
    with pytest.raises(mc.CompileError, match=message):
        mc.compile_program(fp8_mma_source(), "sm_90", mc.CompileOptions(defines=defines))


def test_the_source_inlines_the_shared_decode_header() -> None:
    text = fp8_mma_source().text
    assert '#include "decode_common.cuh"' not in text and text.count("namespace decode {") == 1


# -- SASS ----------------------------------------------------------------------------------------
def cuobjdump() -> tuple[str, dict[str, str]]:
    """cuobjdump (PATH, the toolkit, or MIRCUDA_CUOBJDUMP) and an environment whose PATH has nvdisasm
    beside it (MIRCUDA_NVDISASM_DIR), or a skip."""
    from mircuda.matmul._sass import find_cuobjdump

    tool = os.environ.get("MIRCUDA_CUOBJDUMP") or find_cuobjdump()
    if not tool:
        pytest.skip("cuobjdump not found (CUDA toolkit bin/ on PATH, or MIRCUDA_CUOBJDUMP)")
    extra = os.environ.get("MIRCUDA_NVDISASM_DIR", str(Path(tool).parent))
    return tool, {**os.environ, "PATH": f"{extra}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.mark.parametrize("arch, decode, need, avoid", [
    ("sm_89", None, ("QMMA.16832.F32.E4M3.E4M3",), ("HMMA",)),
    ("sm_120", None, ("QMMA.16832.F32.E4M3.E4M3",), ("HMMA",)),
    ("sm_90", None, ("HMMA.16816.F32", "F2FP.F16.E4M3.UNPACK_B"), ("QMMA",)),
    ("sm_90", "integer", ("HMMA.16816.F32", "LOP3"), ("F2FP.F16.E4M3", "QMMA")),
])
@pytest.mark.parametrize("m, rows", [(2, 16), (16, 16), (16, 32), (1, 32)])
def test_the_sass_holds_the_tensor_core_mma_and_no_local_memory(tmp_path, arch, decode, need, avoid, m, rows) -> None:
    tool, env = cuobjdump()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(mc.compile_program(fp8_mma_source(), arch, fp8_mma_options(m, rows, decode=decode)).image)
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    sass = out.stdout
    for opcode in need:
        assert opcode in sass, f"{opcode} not in the {arch} SASS"
    for opcode in avoid:
        assert opcode not in sass, f"{opcode} in the {arch} SASS"
    assert not re.search(r"\b(?:STL|LDL)\b", sass), "the kernel spills to local memory"
    assert "LDG.E.NA.LTC128B.128" in sass  # the streamed 16-byte weight loads


# -- the lane mapping, emulated ---------------------------------------------------------------------
def e4m3_values(codes: np.ndarray) -> np.ndarray:
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


class Lanes:
    """The 32 lanes of a warp: ``g = lane / 4``, ``t = lane % 4`` (the PTX ISA's groupID and
    threadID_in_group)."""

    lane = np.arange(32)
    g = lane >> 2
    t = lane & 3


def mma_m16n8k32(c: np.ndarray, a_regs: list[np.ndarray], b_regs: list[np.ndarray]) -> np.ndarray:
    """``c += A B`` for one warp's ``mma.m16n8k32.row.col`` with 8-bit operands, from the fragments as the
    PTX ISA lays them out ("Matrix fragments for mma.m16n8k32", .e4m3): ``a_regs`` four [32, 4] code
    arrays, ``b_regs`` two, ``c`` [32, 4] (lane, c0..c3)."""
    g, t = Lanes.g, Lanes.t
    a = np.full((16, 32), np.nan)
    b = np.full((32, 8), np.nan)
    for i in range(4):
        a[g, 4 * t + i] = e4m3_values(a_regs[0][:, i])
        a[g + 8, 4 * t + i] = e4m3_values(a_regs[1][:, i])
        a[g, 4 * t + 16 + i] = e4m3_values(a_regs[2][:, i])
        a[g + 8, 4 * t + 16 + i] = e4m3_values(a_regs[3][:, i])
        b[4 * t + i, g] = e4m3_values(b_regs[0][:, i])
        b[4 * t + 16 + i, g] = e4m3_values(b_regs[1][:, i])
    assert not np.isnan(a).any() and not np.isnan(b).any()  # every element of both fragments was given
    d = a @ b
    return c + np.stack([d[g, 2 * t], d[g, 2 * t + 1], d[g + 8, 2 * t], d[g + 8, 2 * t + 1]], axis=1)


def f16_pairs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's integer decode (``MIRCUDA_FP8_INT_DECODE``) of [32, 4] E4M3 registers: the FP16
    registers (element 0, element 2) and (element 1, element 3), as [32, 2] float64 values."""
    w = codes.astype(np.uint32)
    word = w[:, 0] | w[:, 1] << 8 | w[:, 2] << 16 | w[:, 3] << 24
    mask, sign = np.uint32(0x3F803F80), np.uint32(0x80008000)
    even = ((word << np.uint32(7)) & mask) | ((word << np.uint32(8)) & sign)
    odd = ((word >> np.uint32(1)) & mask) | (word & sign)
    halves = [np.stack([x & np.uint32(0xFFFF), x >> np.uint32(16)], axis=1).astype(np.uint16).view(np.float16)
              for x in (even, odd)]
    return halves[0].astype(np.float64), halves[1].astype(np.float64)


def mma_m16n8k16_f16(c: np.ndarray, a_regs: list[np.ndarray], b_regs: list[np.ndarray]) -> np.ndarray:
    """``c += A B`` for ``mma.m16n8k16.row.col.f32.f16.f16.f32`` from [32, 2] FP16 register values (the PTX
    ISA's "Matrix fragments for mma.m16n8k16" with floating-point types)."""
    g, t = Lanes.g, Lanes.t
    a = np.full((16, 16), np.nan)
    b = np.full((16, 8), np.nan)
    for i in range(2):
        a[g, 2 * t + i] = a_regs[0][:, i]
        a[g + 8, 2 * t + i] = a_regs[1][:, i]
        a[g, 2 * t + 8 + i] = a_regs[2][:, i]
        a[g + 8, 2 * t + 8 + i] = a_regs[3][:, i]
        b[2 * t + i, g] = b_regs[0][:, i]
        b[2 * t + 8 + i, g] = b_regs[1][:, i]
    assert not np.isnan(a).any() and not np.isnan(b).any()
    d = a @ b
    return c + np.stack([d[g, 2 * t], d[g, 2 * t + 1], d[g + 8, 2 * t], d[g + 8, 2 * t + 1]], axis=1)


def mma_integer_decode(c: np.ndarray, a_regs: list[np.ndarray], b_regs: list[np.ndarray]) -> np.ndarray:
    """The kernel's m16n8k32 on the integer-decode path: two FP16 m16n8k16 (elements 0, 2 then 1, 3)."""
    a = [f16_pairs(r) for r in a_regs]
    b = [f16_pairs(r) for r in b_regs]
    c = mma_m16n8k16_f16(c, [x[0] for x in a], [x[0] for x in b])
    return mma_m16n8k16_f16(c, [x[1] for x in a], [x[1] for x in b])


def load16(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray, live: np.ndarray) -> np.ndarray:
    """Per lane, the 16 codes of ``matrix[rows, cols : cols + 16]`` where ``live`` (else zeros); every read
    must be inside the matrix."""
    out = np.zeros((32, 16), np.uint8)
    if live.any():
        r, c = rows[live], cols[live]
        assert (r >= 0).all() and (r < matrix.shape[0]).all() and (c >= 0).all() and (c + 16 <= matrix.shape[1]).all()
        out[live] = matrix.view(np.uint8)[r[:, None], c[:, None] + np.arange(16)]
    return out


def words(codes: np.ndarray) -> list[np.ndarray]:
    """A lane's 16 bytes as the four 32-bit words .x, .y, .z, .w (each [32, 4]: byte i = element i)."""
    return [codes[:, 4 * w:4 * w + 4] for w in range(4)]


def emulate(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray, alpha: float, beta: float,
            c: np.ndarray | None, rows: int, warps: int, integer: bool = False) -> np.ndarray:
    """What ``blockwise_fp8_mma`` computes, lane by lane, as ``cuda_src/fp8_mma_gemv.cu`` maps lanes to
    columns (float64 sums: the mapping, not the rounding, is under test)."""
    m, k = a.shape
    n = b.shape[0]
    tiles, n8 = rows // 16, -(-m // 8)
    full = k // 128
    g, t = Lanes.g, Lanes.t
    d = np.full((m, n), np.nan)
    for block in range(-(-n // rows)):
        row0 = block * rows
        total = np.zeros((tiles, n8, 32, 4))
        for warp in range(warps):
            blocks = list(range(warp, full, warps))
            if full * 128 < k and warp == full % warps:
                blocks.append(full)
            for kb in blocks:
                sbv = sb[row0 // 128, kb]
                for j in range(n8):
                    mrow = 8 * j + 2 * t
                    s = [np.where(mrow + e < m, sa[np.minimum(mrow + e, m - 1), kb], 0.0) * sbv for e in (0, 1)]
                    for i in range(tiles):
                        part = np.zeros((32, 4))
                        for step in range(2):
                            col = kb * 128 + step * 64 + 16 * t
                            inside = col < k
                            lo_rows = np.minimum(row0 + 16 * i + g, n - 1)
                            hi_rows = np.minimum(row0 + 16 * i + g + 8, n - 1)
                            lo = words(load16(b, lo_rows, col, inside))
                            hi = words(load16(b, hi_rows, col, inside))
                            x = words(load16(a, g + 8 * j, col, inside & (g + 8 * j < m)))
                            mma = mma_integer_decode if integer else mma_m16n8k32
                            part = mma(part, [lo[0], hi[0], lo[1], hi[1]], [x[0], x[1]])
                            part = mma(part, [lo[2], hi[2], lo[3], hi[3]], [x[2], x[3]])
                        scale = 65536.0 if integer else 1.0  # kBlockSumScale
                        total[i, j] += part * scale * np.stack([s[0], s[1], s[0], s[1]], axis=1)
        for i in range(tiles):
            for j in range(n8):
                for e in range(4):
                    mm = 8 * j + 2 * t + (e & 1)
                    row = row0 + 16 * i + g + 8 * (e >> 1)
                    keep = (mm < m) & (row < n)
                    v = alpha * total[i, j, keep, e]
                    if beta != 0 and c is not None:
                        v = v + beta * c[mm[keep], row[keep]]
                    d[mm[keep], row[keep]] = v
    return d


@pytest.mark.parametrize("integer", [False, True], ids=["hardware", "integer"])
@pytest.mark.parametrize("m, n, k, rows, warps", [
    (2, 40, 256, 16, 1), (3, 37, 304, 16, 2), (8, 64, 528, 32, 2), (9, 16, 128, 16, 1), (16, 33, 400, 32, 4),
    (1, 20, 144, 16, 1), (16, 129, 16, 16, 1),
])
def test_the_emulated_lane_mapping_gives_the_blockwise_product(m, n, k, rows, warps, integer) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-4, 4, (m, 1)))).astype(np.float32).astype(mc.bf16)
    w = (rng.standard_normal((n, k)) * np.exp2(rng.integers(-4, 4, (n, 1)))).astype(np.float32).astype(mc.bf16)
    a, sa = quantize_activations_reference(x)
    b, sb = quantize_weights_reference(w)
    c = rng.standard_normal((m, n))
    alpha, beta = 1.25, -0.5
    got = emulate(a, sa, b, sb, alpha, beta, c, rows, warps, integer)
    want = alpha * dequantize_reference(a, sa, (1, 128)) @ dequantize_reference(b, sb, (128, 128)).T + beta * c
    mag = np.abs(dequantize_reference(a, sa, (1, 128))) @ np.abs(dequantize_reference(b, sb, (128, 128))).T
    assert np.isfinite(got).all()
    # The kernel's one FP32 rounding per block, sa * sb in FP32 (the emulation keeps it), bounds the error.
    excess = np.abs(got - want) / (2.0**-22 * abs(alpha) * mag + 1e-300)
    assert excess.max() <= 1.0, f"worst at {np.unravel_index(int(np.argmax(excess)), excess.shape)}"


def test_the_integer_decode_is_every_e4m3_value_times_2_to_the_minus_8() -> None:
    codes = np.arange(256, dtype=np.uint8)
    even, odd = f16_pairs(codes.reshape(64, 4)[:32]), f16_pairs(codes.reshape(64, 4)[32:])
    got = np.empty(256)
    for half, (ev, od) in enumerate((even, odd)):
        block = got[128 * half:128 * half + 128].reshape(32, 4)
        block[:, 0], block[:, 2], block[:, 1], block[:, 3] = ev[:, 0], ev[:, 1], od[:, 0], od[:, 1]
    want = e4m3_values(codes) * 2.0**-8
    finite = np.isfinite(want)
    assert (~finite).sum() == 2 and np.array_equal(got[finite], want[finite])
    assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite]))  # -0 stays -0
    assert list(got[~finite]) == [480 * 2.0**-8, -480 * 2.0**-8]  # the NaN codes 0x7f, 0xff


def test_a_wrong_pairing_of_words_is_caught_by_the_emulation() -> None:
    # The emulation can fail: pairing .x with .z (not .y) in the A operand breaks the product.
    rng = np.random.default_rng(1)
    a = rng.integers(0, 0x70, (32, 16), dtype=np.uint8)
    b = rng.integers(0, 0x70, (32, 16), dtype=np.uint8)
    lo, x = words(a), words(b)
    right = mma_m16n8k32(np.zeros((32, 4)), [lo[0], lo[0], lo[1], lo[1]], [x[0], x[1]])
    wrong = mma_m16n8k32(np.zeros((32, 4)), [lo[0], lo[0], lo[2], lo[2]], [x[0], x[1]])
    assert not np.allclose(right, wrong)


# -- the engine with a stand-in device -----------------------------------------------------------
class _Kernel:
    handle = 0xABC
    attributes = type("Attributes", (), {"max_threads_per_block": 256})()

    def launch(self, *args: object) -> None:  # pragma: no cover - never launched here
        raise AssertionError("launched")


class _Compiler:
    """Compiles for real (offline, sm_90) and binds a stand-in kernel: the options reach NVRTC."""

    def __init__(self) -> None:
        self.options: list[mc.CompileOptions] = []

    def compile(self, source: mc.CudaSource, options: mc.CompileOptions) -> object:
        self.options.append(options)
        mc.compile_program(source, "sm_90", options)

        class Program:
            def kernel(self, contract: object) -> _Kernel:
                assert getattr(contract, "symbol", FP8_MMA_SYMBOL) == FP8_MMA_SYMBOL
                return _Kernel()

        return Program()


def stand_in_context(cc: tuple[int, int] = (9, 0)) -> object:
    from types import SimpleNamespace

    info = SimpleNamespace(compute_capability=cc, multiprocessor_count=132, supports_programmatic_launch=cc >= (9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                           max_grid_dims=(2**31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    return SimpleNamespace(device_info=lambda: info)


@pytest.mark.parametrize("m, n, k, rows, warps, grid", [
    (16, 4096, 4096, None, 8, 256),   # 256 blocks x 8 warps: two resident per SM, one wave
    (2, 14336, 4096, None, 2, 896),   # many blocks: fewer warps split K
    (8, 4096, 14336, 32, 8, 128), (3, 37, 304, None, 1, 3),
    (16, 14336, 4096, None, 4, 448),  # M > 8 at N >= 8192: 32-row blocks by default (fp8_mma_rows)
])
def test_the_engine_splits_k_for_one_wave_and_describes_itself(monkeypatch, m, n, k, rows, warps, grid) -> None:
    from mircuda.matmul import _fp8_mma

    monkeypatch.setattr(_fp8_mma, "blocks_per_sm", lambda context, kernel, w: {1: 16, 2: 8, 4: 4, 8: 2}[w])
    compiler = _Compiler()
    engine = _fp8_mma.Fp8MmaGemv(stand_in_context(), m, n, k, compiler, rows=rows)  # type: ignore[arg-type]
    used = rows or _fp8_mma.fp8_mma_rows(m, n)
    assert engine.rows == used
    assert engine.warps == warps and engine.config.grid == (grid, 1, 1) and engine.config.block == (32 * warps, 1, 1)
    assert dict(compiler.options[0].defines) == {"MIRCUDA_FP8_M": str(m), "MIRCUDA_FP8_TILES": str((used) // 16),
                                                 "MIRCUDA_FP8_STAGES": str(fp8_mma_stages(m, used))}
    text = engine.describe()
    assert f"a register ring of {fp8_mma_stages(m, used)} 128-K blocks of loads ({fp8_mma_stages(m, used) - 1} in flight" in text
    assert text.startswith(f"kernel {FP8_MMA_SYMBOL} (NVRTC, -D MIRCUDA_FP8_M={m} -D MIRCUDA_FP8_STAGES={fp8_mma_stages(m, used)} "
                           "-D MIRCUDA_FP8_TILES=")
    assert f"{grid} blocks of {used} weight rows x {warps} warp(s)" in text
    assert "mma.sync m16n8k32" in text and text.endswith("programmatic dependent launch")
    assert ("32 weight rows per block, the default for M > 8 at N >= 8192" in text) == (rows is None and used == 32)
    early = _fp8_mma.Fp8MmaGemv(stand_in_context(), m, n, k, compiler, pdl_trigger="early")  # type: ignore[arg-type]
    assert dict(compiler.options[-1].defines)["MIRCUDA_PDL_TRIGGER_LATE"] == "0"
    assert early.describe().endswith("programmatic dependent launch (early trigger)")
    integer = _fp8_mma.Fp8MmaGemv(stand_in_context(), m, n, k, compiler, decode="integer")  # type: ignore[arg-type]
    assert dict(compiler.options[-1].defines)["MIRCUDA_FP8_INT_DECODE"] == "1"
    assert "decoded by integer operations" in integer.describe() and integer.decode == "integer"
    on_ada = _fp8_mma.Fp8MmaGemv(stand_in_context((8, 9)), m, n, k, compiler, warps=1)  # type: ignore[arg-type]
    assert not on_ada.config.programmatic_stream_serialization and "programmatic" not in on_ada.describe()


def test_the_cvt_note_says_fp16_holds_the_values_and_fp32_the_products() -> None:
    """MIRCUDA_FP8_CVT's note said "FP16 holds every E4M3 value and their products exactly": the values yes, the
    products no (448 x 448 is past FP16's largest finite value); what keeps the sums exact per product is that
    mma.sync multiplies FP16 operands into FP32, where every product of two finite E4M3 values is exact."""
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    values = codes[np.isfinite(codes)]
    assert np.array_equal(values.astype(np.float16).astype(np.float64), values)  # every value exact in FP16
    products = np.multiply.outer(values, values)
    assert np.array_equal(products.astype(np.float32).astype(np.float64), products)  # every product exact in FP32
    largest = float(np.abs(products).max())
    assert largest > float(np.finfo(np.float16).max)  # ... but not in FP16
    source = (Path(__file__).resolve().parent.parent / "mircuda" / "cuda_src" / "fp8_mma_gemv.cu").read_text()
    note = " ".join(line.lstrip("/ ") for line in source.splitlines() if line.startswith("//"))
    assert "FP16 holds every E4M3 value and their products exactly" not in note
    assert f"448 x 448 = {largest:.0f} is past FP16's {float(np.finfo(np.float16).max):.0f}" in note


def test_the_rows_docstring_quotes_the_registers_of_the_kernel_the_plans_compile() -> None:
    """FP8_MMA_ROWS quoted 76-80 / 128 registers at one tile and 128-138 / 220 at two (M <= 8 / 16): the kernel
    before its load ring and cvt decode. With the plans' options (fp8_mma_stages) ptxas now gives other counts; the
    docstring quotes them, and four tiles still spill."""
    import inspect

    from mircuda.matmul import _fp8_mma

    def usage(m: int, rows: int):
        options = fp8_mma_options(m, rows, None, None, fp8_mma_stages(m, rows))
        program = mc.compile_program(fp8_mma_source(), "sm_90", mc.CompileOptions(defines=dict(options.defines),
                                                                                  ptxas_verbose=True))
        return program.resource_usage()[FP8_MMA_SYMBOL]

    ms = (1, 8, 16)
    counts = {rows: [usage(m, rows) for m in ms] for rows in FP8_MMA_ROWS}
    assert all(u.spill_store_bytes == 0 for us in counts.values() for u in us)
    one, two = (" / ".join(str(u.registers) for u in counts[rows]) for rows in FP8_MMA_ROWS)
    text = " ".join(inspect.getsource(_fp8_mma).split())
    assert f"gives {one} registers at one tile for M = 1 / 8 / 16 and {two} at two" in text
    assert usage(16, 64).spill_store_bytes > 0  # "four tiles spill at M = 16"


def test_the_decodes_docstring_says_what_sm_90_runs() -> None:
    """DECODES said that on sm_90 "ptxas decodes with F2FP and runs FP16 HMMA" for the hardware decode; since
    MIRCUDA_FP8_CVT the kernel decodes each fragment itself (cvt.rn.f16x2.e4m3x2) and no E4M3 mma reaches ptxas."""
    import inspect

    from mircuda.matmul import _fp8_mma

    body = ptx("compute_90", 8, 16, decode="hardware")
    assert "cvt.rn.f16x2.e4m3x2" in body and MMA_PTX not in body
    text = " ".join(inspect.getsource(_fp8_mma).split("DECODES = ")[1].split('"""')[1].split())
    assert "ptxas decodes" not in text
    assert "sm_90 has no E4M3 ``mma.sync``: there the kernel decodes each fragment once with ``cvt.rn.f16x2.e4m3x2``" in text
