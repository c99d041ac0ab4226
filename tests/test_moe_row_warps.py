"""Row warps in the grouped ``"vector"`` variant's integer path without a GPU (``DecodeTuning.row_warps``,
``MIRCUDA_FP4_ROW_WARPS``: each warp of a block takes its own weight-row block of the tile whole): the tuning's
checks and normal form, the compile options (the default plan's unchanged), no default register cap with them (the
cap of 80 spills), the grid, the sm_90 SASS of the mixtral and fine decode kernels without local memory, the
sweep's ``oN`` field. Numerics on the GPU: ``tests/gpu/test_moe_dp4a_gpu.py``."""

from __future__ import annotations

import dataclasses

import pytest

import mircuda as mc
from mircuda.cli._moe_profile import parse_candidates
from mircuda.matmul._moe_kernels import DecodeTuning, default_register_cap, resolve_tuning, tile_shape
from test_moe_lean import LAYERS, defines, usage


def test_row_warps_take_their_normal_form_and_leave_the_default_plan_unchanged() -> None:
    four = resolve_tuning(DecodeTuning("dp4a", row_warps=4), "vector", "sm_90", 1, 4096)
    assert (four.row_warps, four.warps, four.max_registers) == (4, 1, None)  # one warp per row block, no cap
    assert four.label("vector") == "dp4a:s2:w1:r4:o4"
    one = resolve_tuning(DecodeTuning("dp4a", row_warps=1), "vector", "sm_90", 1, 4096)
    assert one == resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_90", 1, 4096)  # 1 is the default
    assert one.row_warps is None and one.max_registers == 80
    assert "MIRCUDA_FP4_ROW_WARPS" not in defines("mixtral", one)
    assert defines("mixtral", four)["MIRCUDA_FP4_ROW_WARPS"] == "4"
    assert default_register_cap("sm_90", "dp4a", 1) == 80
    assert default_register_cap("sm_90", "dp4a", 1, 2) is None and default_register_cap("sm_90", "dp4a", 1, 1) == 80


def test_row_warps_are_refused_by_field_where_they_cannot_run() -> None:
    cases = [(DecodeTuning("dp4a", row_warps=3), "vector", 1, "tuning.row_warps"),
             (DecodeTuning("dp4a", row_warps="2"), "vector", 1, "tuning.row_warps"),
             (DecodeTuning("dp4a", row_warps=2.0), "vector", 1, "tuning.row_warps"),
             (DecodeTuning("dp4a", row_warps=True), "vector", 1, "tuning.row_warps"),
             (DecodeTuning("dp4a", row_warps=2, lean_tiles=True), "vector", 1, "tuning.row_warps"),
             (DecodeTuning("dp4a", row_warps=2, lean_tiles=True, persistent=True), "vector", 1, "tuning.row_warps"),
             (DecodeTuning("dp4a", row_warps=2, warps=4), "vector", 1, "tuning.warps"),
             (DecodeTuning("e4m3", row_warps=2), "vector", 2, "tuning.row_warps"),
             (DecodeTuning("e4m3", row_warps=2), "split_k", 8, "tuning.row_warps")]
    for tuning, variant, rows, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            resolve_tuning(tuning, variant, "sm_90", rows, 4096)
        assert info.value.argument == argument, (tuning, info.value.argument)


def test_row_warps_divide_the_grid_of_weight_row_blocks() -> None:
    four = resolve_tuning(DecodeTuning("dp4a", row_warps=4), "vector", "sm_90", 1, 2048)
    shape = tile_shape(n=768, capacity=32, groups=128, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                       tuning=four)
    assert (shape.weight_blocks, shape.warps, shape.row_warps) == (192, 1, 4)
    plain = tile_shape(n=768, capacity=32, groups=128, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                       tuning=resolve_tuning(None, "vector", "sm_90", 1, 2048))
    assert plain.row_warps == 1 and plain.weight_blocks == 192


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("row_warps", [2, 4, 8])
def test_row_warps_compile_without_local_memory_on_sm_90(layer, row_warps) -> None:
    """Uncapped (their default): no spills and no more registers than the uncapped one-warp kernel (99 / 123 for
    mixtral / fine: the K split's shared partial sums are gone); with the cap of 80 the fine kernel spills, which
    is why they take none by default."""
    shape = LAYERS[layer]
    tuning = resolve_tuning(DecodeTuning("dp4a", row_warps=row_warps), "vector", "sm_90", 1, shape["k"])
    got = usage(layer, tuning)
    assert got.spill_store_bytes == got.spill_load_bytes == got.stack_frame_bytes == 0, got
    plain = usage(layer, DecodeTuning("dp4a", 2, 0, 1))
    assert got.registers <= plain.registers, (got.registers, plain.registers)
    if layer == "fine":
        capped = usage(layer, dataclasses.replace(tuning, max_registers=80))
        assert capped.spill_store_bytes > 0  # the measured reason for no default cap with row warps


def test_the_sweep_takes_row_warps_with_dp4a_only() -> None:
    got = parse_candidates("dp4a:m1:o4,dp4a:m1:r8:o2:g96,dp4a:m1:o1:g0")
    assert [c.row_warps for c in got] == [4, 2, None]  # o1: the default
    assert got[0].tuning("sm_90", 4096) == DecodeTuning("dp4a", row_warps=4)
    for text in ("e4m3:m1:o2", "dp4a:m1:o4:l1", "dp4a:m1:o4:p1:l1", "dp4a:m1:o2:w2", "dp4a:m1:o3", "dp4a:o2",
                 "dp4a:m1:o2:o4"):
        with pytest.raises(mc.ContractError) as info:
            parse_candidates(text)
        assert info.value.argument == "--sweep", text
