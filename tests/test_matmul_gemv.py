"""The batched GEMV of DenseMatmulPlan (M <= 16) without a GPU: its CUDA C compiles with NVRTC for
Hopper and the SM12x family for one and two n8 tiles of A, streams weights with 16-byte loads past L1
into tensor-core mma.sync, and refuses an M outside 1..16 at compile time."""

from __future__ import annotations

import re

import pytest

import mircuda as mc
from mircuda.matmul._gemv import batched_gemv_source, gemv_options, gemv_symbol

SYMBOLS = [gemv_symbol(i, o, v) for i in ("bf16", "f16") for o in (i, "f32") for v in (True, False)]


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
@pytest.mark.parametrize("m", [1, 9, 16])
def test_the_kernel_compiles_for_every_target_and_m(arch, m) -> None:
    prog = mc.compile_program(batched_gemv_source(), arch, gemv_options(m))
    assert prog.image[:4] == b"\x7fELF"
    for symbol in SYMBOLS:
        assert symbol.encode() in prog.image


def entry(ptx: str, symbol: str) -> str:
    body = ptx[ptx.index(f".entry {symbol}"):]
    return body[: body.index("\n}")]


@pytest.mark.parametrize("m, tiles", [(1, 1), (8, 1), (9, 2), (16, 2)])
def test_weights_stream_past_l1_into_one_mma_pair_per_step_and_tile(m, tiles) -> None:
    options = mc.CompileOptions(defines={"MIRCUDA_GEMV_M": m}, output="ptx")
    ptx = mc.compile_program(batched_gemv_source(), "compute_90", options).image.decode()
    bf16 = entry(ptx, "batched_gemv_bf16_bf16_v16")
    # Chunked loop: four 32-column steps x two weight rows; one tail step: two more.
    assert bf16.count("ld.global.nc.L1::no_allocate.v4.u32") >= 4 * 2 * 2 + 2
    # Per step and n8 tile of A: two m16n8k16 (columns 8t..8t+3 and 8t+4..8t+7 of the lane).
    mma = re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32", bf16)
    assert len(mma) >= 2 * 4 * tiles
    assert "f16.f16.f32" in entry(ptx, "batched_gemv_f16_f32_v16")
    assert "mma.sync" in entry(ptx, "batched_gemv_f16_f16_any")


@pytest.mark.parametrize("m", [0, 17])
def test_an_m_outside_1_to_16_does_not_compile(m) -> None:
    with pytest.raises(mc.CompileError, match="MIRCUDA_GEMV_M"):
        mc.compile_program(batched_gemv_source(), "sm_90", gemv_options(m))


def test_symbols_name_types_and_load_width() -> None:
    assert gemv_symbol("bf16", "f32", True) == "batched_gemv_bf16_f32_v16"
    assert gemv_symbol("f16", "f16", False) == "batched_gemv_f16_f16_any"
