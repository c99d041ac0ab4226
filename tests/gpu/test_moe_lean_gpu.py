"""The grouped ``"vector"`` variant's integer path with the knobs of ``tests/test_moe_lean.py`` on the GPU
(``DecodeTuning.lean_tiles``: the group table in one L2 round trip and a tile walk with nothing hoisted;
``max_registers``: the kernel's ``__maxnreg__``; ``persistent`` with ``lean_tiles``: one lookup per block, the
block walking the tile's weight-row blocks), against the float64 reference of the dequantized operands: top-k
routings with empty groups (1 and 16 tokens; 8, 64 and 128 groups: one to four registers of the table per lane),
N not a multiple of the weight rows per block, K of one step (96) and of many (14336), both scale layouts,
poisoned rows no group covers; overlapping row ranges past the tile slots (the walk past the first tile); the
indexed plan with repeated indices; the paired plan; graph replays with the routing rewritten on the device."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from mircuda.matmul._moe_kernels import DecodeTuning
from test_moe_gpu import (BF16, TAIL, Activations, Bank, check_output, expected, poisoned, run_variable, topk_routing,
                          write)

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
    experts, n, k, capacity = 2, 256, 512, 8
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    host = [np.array(x, np.int32) for x in ([7, 7, 1, 0], [0, 0, 7, 0], [0, 0, 1, 1])]
    routing = [upload(context, stream, pool, x) for x in host]
    d = poisoned(context, stream, pool, capacity * n)
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, 4, experts),
                                   rows_per_tile=1, variant="vector", tuning=tuning, path="portable") as plan:
        assert plan.tuning.lean_tiles and "lean tiles" in str(plan.describe())
        assert ("one table lookup each" in str(plan.describe())) == tuning.persistent
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
                     global_b=bank.global_buf)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
    want, mag, covered = expected(act.value, bank.value, *host, (act.global_ * bank.global_).astype(np.float64),
                                  capacity, n)
    assert covered.all()
    check_output(got, want, mag, covered)
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


@pytest.mark.parametrize("tuning", [LEAN, KNOBS[3]], ids=lambda t: t.label("vector"))
def test_the_lean_indexed_plan_takes_repeated_indices_and_more_products_than_matrices(context, stream, pool, rng,
                                                                                      tuning) -> None:
    n, k, rows, products, bank_size = 320, 1024, 1, 20, 6
    bank = Bank(context, stream, pool, rng, bank_size, n, k, "tiled")
    act = Activations(context, stream, pool, rng, products, k)
    idx = rng.integers(0, bank_size, products).astype(np.int32)
    idx[1] = idx[0]
    indices = upload(context, stream, pool, idx)
    d = poisoned(context, stream, pool, products * n)
    with mc.IndexedGroupedFp4Plan(context, stream, mc.IndexedGroupedFp4Spec(n, k, rows, products, bank_size),
                                  variant="vector", tuning=tuning) as plan:
        assert plan.tuning.lean_tiles and plan.tuning.decode == "dp4a"
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, indices, global_a=act.global_buf,
                     global_b=bank.global_buf, alpha=0.75)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
    alphas = (np.float32(0.75) * act.global_ * bank.global_).astype(np.float64)
    want, mag, covered = expected(act.value, bank.value, np.full(products, rows), np.arange(products) * rows, idx,
                                  alphas, products, n)
    assert covered.all()
    check_output(got, want, mag, covered)
    for b in (indices, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


def test_the_lean_paired_plan_runs_two_banks_with_their_own_scales_and_alphas(context, stream, pool, rng) -> None:
    experts, topk, tokens, n, k = 8, 2, 5, 384, 512
    capacity = tokens * topk + TAIL
    counts, offsets, indices = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in (counts, offsets, indices)]
    banks = [Bank(context, stream, pool, rng, experts, n, k, "tiled") for _ in range(2)]
    acts = [Activations(context, stream, pool, rng, capacity, k) for _ in range(2)]
    ds = [poisoned(context, stream, pool, capacity * n) for _ in range(2)]
    alphas = (0.5, 3.0)
    sets = [mc.GroupedFp4Operands(acts[i].codes, acts[i].scales, banks[i].codes, banks[i].scales, ds[i],
                                  global_a=acts[i].global_buf, global_b=banks[i].global_buf, alpha=alphas[i])
            for i in range(2)]
    with mc.PairedVariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts),
                                         rows_per_tile=1, variant="vector", tuning=KNOBS[2]) as plan:
        plan.execute(stream, sets[0], sets[1], *routing)
        gots = [download(context, stream, d) for d in ds]
        assert plan.read_error_flag() == 0
    for i in range(2):
        al = (np.float32(alphas[i]) * acts[i].global_ * banks[i].global_).astype(np.float64)
        check_output(gots[i], *expected(acts[i].value, banks[i].value, counts, offsets, indices, al, capacity, n))
    for b in (*routing, *ds):
        b.free(stream)
    for x in (*banks, *acts):
        x.free(stream)


@pytest.mark.parametrize("tuning", [KNOBS[2], KNOBS[3]], ids=lambda t: t.label("vector"))
def test_lean_graph_replays_follow_routing_rewritten_on_the_device(context, stream, pool, rng, tuning) -> None:
    experts, topk, tokens, n, k = 8, 2, 6, 259, 2048
    capacity = tokens * topk + TAIL
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    first = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in first]
    d = poisoned(context, stream, pool, capacity * n)
    plan = mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts),
                                     rows_per_tile=1, variant="vector", tuning=tuning)
    graph = stream.capture((act, bank, routing, d, plan), lambda _: plan.execute(
        stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
        global_b=bank.global_buf, alpha=1.0))
    for replay in range(3):
        counts, offsets, indices = first if replay == 0 else topk_routing(rng, tokens - 2 * replay, experts, topk)
        for buf, values in zip(routing, (counts, offsets, indices)):
            write(context, stream, buf, values)
        write(context, stream, d, np.full(capacity * n, np.nan, np.float32).astype(BF16))  # re-poison
        graph.launch(stream)
        got = download(context, stream, d)
        check_output(got, *expected(act.value, bank.value, counts, offsets, indices,
                                    (act.global_ * bank.global_).astype(np.float64), capacity, n))
    assert plan.read_error_flag() == 0
    graph.close()
    plan.close()
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


def test_lean_tiles_are_refused_by_name_past_128_groups(context, stream) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(128, 256, 160, 160, 160),
                                  rows_per_tile=1, variant="vector", tuning=LEAN)
    assert info.value.argument == "tuning.lean_tiles"
