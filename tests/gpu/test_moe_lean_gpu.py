"""The grouped ``"vector"`` variant's integer path with the knobs of ``tests/test_moe_lean.py`` on the GPU
(``DecodeTuning.lean_tiles``: the group table in one L2 round trip and a tile walk with nothing hoisted;
``max_registers``: the kernel's ``__maxnreg__``; ``persistent`` with ``lean_tiles``: one lookup per block, the
block walking the tile's weight-row blocks), against the float64 reference of the dequantized operands: top-k
routings with empty groups (1 and 16 tokens; 8, 64 and 128 groups: one to four registers of the table per lane),
N not a multiple of the weight rows per block, K of one step (96) and of many (14336), both scale layouts,
poisoned rows no group covers; overlapping row ranges past the tile slots (the walk past the first tile); the
indexed plan with repeated indices; the paired plan; graph replays with the routing rewritten on the device."""

from __future__ import annotations

from typing import Any

import pytest

import mircuda as mc
from mircuda.matmul._moe_kernels import DecodeTuning
from test_moe_gpu import run_graph_replays, run_indexed, run_overlapping, run_paired, run_variable

LEAN = DecodeTuning("dp4a", 2, 0, 1, lean_tiles=True)
KNOBS = [LEAN, DecodeTuning("dp4a", 2, 0, 1, max_registers=80), DecodeTuning("dp4a", 2, 0, 1, lean_tiles=True,
                                                                             max_registers=80),
         DecodeTuning("dp4a", 2, 0, 1, persistent=True, lean_tiles=True, max_registers=80),
         DecodeTuning("dp4a", 3, 2, 2, lean_tiles=True), DecodeTuning("dp4a", 2, 8, 1, persistent=True, lean_tiles=True)]


@pytest.mark.parametrize("tokens", [1, 16])
@pytest.mark.parametrize("tuning", KNOBS, ids=lambda t: t.label("vector"))
@pytest.mark.parametrize("experts, topk, n, k, layout", [(8, 2, 259, 4096, "tiled"), (64, 8, 136, 2048, "linear"),
                                                         (128, 8, 100, 96, "linear"), (8, 2, 100, 14336, "tiled")],
                         ids=str)
def test_the_dp4a_knobs_match_float64_on_topk_routings(context, stream, pool, rng, experts, topk, n, k, layout, tuning,
                                                       tokens) -> None:
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=tokens, n=n, k=k, layout=layout,
                 rows_per_tile=1, variant="vector", tuning=tuning)


@pytest.mark.parametrize("tuning", [LEAN, KNOBS[3]], ids=lambda t: t.label("vector"))
def test_the_lean_walk_computes_overlapping_row_ranges_past_the_tile_slots(context, stream, pool, rng, tuning) -> None:
    """Groups 0 and 1 both cover rows [0, 7) (the same matrix), group 2 alone row 7: 15 tiles for 8 slots, so
    blocks take a second tile (the walk past the first, its table read again)."""
    def check(plan: Any) -> None:
        assert plan.tuning.lean_tiles and "lean tiles" in str(plan.describe())
        assert ("one table lookup each" in str(plan.describe())) == tuning.persistent

    run_overlapping(context, stream, pool, rng, check_plan=check, rows_per_tile=1, variant="vector", tuning=tuning)


def lean_dp4a(plan: Any) -> None:
    assert plan.tuning.lean_tiles and plan.tuning.decode == "dp4a"


@pytest.mark.parametrize("tuning", [LEAN, KNOBS[3]], ids=lambda t: t.label("vector"))
def test_the_lean_indexed_plan_takes_repeated_indices_and_more_products_than_matrices(context, stream, pool, rng,
                                                                                      tuning) -> None:
    run_indexed(context, stream, pool, rng, n=320, k=1024, rows=1, products=20, bank_size=6, check_plan=lean_dp4a,
                variant="vector", tuning=tuning)


def test_the_lean_paired_plan_runs_two_banks_with_their_own_scales_and_alphas(context, stream, pool, rng) -> None:
    run_paired(context, stream, pool, rng, tokens=5, check_plan=lean_dp4a, rows_per_tile=1, variant="vector",
               tuning=KNOBS[2])


@pytest.mark.parametrize("tuning", [KNOBS[2], KNOBS[3]], ids=lambda t: t.label("vector"))
def test_lean_graph_replays_follow_routing_rewritten_on_the_device(context, stream, pool, rng, tuning) -> None:
    # the activations' global scale is rewritten on the device too (run_graph_replays)
    run_graph_replays(context, stream, pool, rng, tokens=6, n=259, k=2048, shrink=2, rows_per_tile=1,
                      variant="vector", tuning=tuning)


def test_lean_tiles_are_refused_by_name_past_128_groups(context, stream) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(128, 256, 160, 160, 160),
                                  rows_per_tile=1, variant="vector", tuning=LEAN)
    assert info.value.argument == "tuning.lean_tiles"
