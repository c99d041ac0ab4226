"""The grouped NVFP4 plans' ``"vector"`` variant on the integer path (``decode="dp4a"``: E2M1 -> int8 by PRMT, IDP4A,
exact int32 block sums; 1-row tiles, K % 32 == 0) on the GPU, against the float64 reference of the dequantized
operands: top-k routings with empty groups (1 token over 8 or 64 experts), N not a multiple of the weight rows per
block, K of one step (96) and of many (14336: 8 rows per block), both scale layouts, poisoned rows no group covers;
the default plan of a decode step taking it; the indexed plan with repeated indices and more products than
matrices; the paired plan; graph replays with the routing and the global scale rewritten on the device; the
activation alignments its loads need. (With 1-row tiles and K % 32 == 0 the vector cases of
``tests/gpu/test_moe_gpu.py`` run it too, as the default.)"""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from mircuda.matmul._moe_kernels import DecodeTuning
from test_moe_gpu import (BF16, TAIL, Activations, Bank, RawView, check_output, expected, poisoned, run_variable,
                          topk_routing, write)


def runs_dp4a_by_default(context) -> bool:
    """The targets without cvt.rn.f16x2.e2m1x2 (the H200): elsewhere (cc 12.x) the default keeps its decoder."""
    return context.device_info().compute_capability[0] < 10


@pytest.mark.parametrize("tokens", [1, 3, 16])
@pytest.mark.parametrize("tuning", [DecodeTuning("dp4a", 2, 0, 1), DecodeTuning("dp4a", 3, 8, 2),
                                    DecodeTuning("dp4a", 2, 1, 1)], ids=lambda t: t.label("vector"))
@pytest.mark.parametrize("experts, topk, n, k, layout", [(8, 2, 259, 4096, "tiled"), (64, 8, 136, 2048, "linear"),
                                                         (8, 2, 100, 14336, "tiled"), (16, 4, 77, 96, "linear")],
                         ids=str)
def test_the_dp4a_variable_plan_matches_float64_on_topk_routings(context, stream, pool, rng, experts, topk, n, k,
                                                                 layout, tuning, tokens) -> None:
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=tokens, n=n, k=k, layout=layout,
                 rows_per_tile=1, variant="vector", tuning=tuning)


@pytest.mark.parametrize("experts, topk, n, k", [(8, 2, 259, 4096), (64, 8, 136, 2048)], ids=str)
def test_a_decode_step_takes_dp4a_by_default(context, stream, pool, rng, experts, topk, n, k) -> None:
    """1 token x top-k over E experts: capacity / groups <= 1, the vector variant with 1-row tiles, and on the
    H200 its integer path (describe() quotes the rule and the measurement)."""
    capacity = topk + TAIL
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts)) as plan:
        if plan.path == "portable" and runs_dp4a_by_default(context):
            assert plan.variant == "vector" and plan.rows_per_tile == 1 and plan.tuning.decode == "dp4a"
            text = str(plan.describe())
            assert "decode='dp4a'" in text and "the default for 1-row tiles" in text and "H200, 2026-12-01" in text
            ops = {op.name: op.alignment for op in plan.operands}
            assert (ops["a"], ops["a_scales"]) == (16, 2)
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=1, n=n, k=k, layout="tiled")
    # a tuning given overrides the default decoder
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=1, n=n, k=k, layout="tiled",
                 rows_per_tile=1, variant="vector", tuning=DecodeTuning("pairs", 2, 0, 1))


@pytest.mark.parametrize("tuning", [None, DecodeTuning("dp4a", 2, 2, 2)], ids=str)
def test_the_indexed_dp4a_plan_takes_repeated_indices_and_more_products_than_matrices(context, stream, pool, rng,
                                                                                      tuning) -> None:
    n, k, rows, products, bank_size = 320, 1024, 1, 20, 6
    capacity = rows * products
    bank = Bank(context, stream, pool, rng, bank_size, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    idx = rng.integers(0, bank_size, products).astype(np.int32)
    idx[1] = idx[0]  # a repeat for certain
    indices = upload(context, stream, pool, idx)
    d = poisoned(context, stream, pool, capacity * n)
    spec = mc.IndexedGroupedFp4Spec(n, k, rows, products, bank_size)
    kw = {} if tuning is None else {"variant": "vector", "tuning": tuning}
    with mc.IndexedGroupedFp4Plan(context, stream, spec, **kw) as plan:
        if tuning is not None or (plan.path == "portable" and runs_dp4a_by_default(context)):
            assert plan.variant == "vector" and plan.tuning.decode == "dp4a"
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, indices, global_a=act.global_buf,
                     global_b=bank.global_buf, alpha=0.75)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
    alphas = (np.float32(0.75) * act.global_ * bank.global_).astype(np.float64)
    want, mag, covered = expected(act.value, bank.value, np.full(products, rows), np.arange(products) * rows, idx,
                                  alphas, capacity, n)
    assert covered.all()
    check_output(got, want, mag, covered)
    for b in (indices, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


@pytest.mark.parametrize("tokens", [1, 5])
def test_the_paired_dp4a_plan_runs_two_banks_with_their_own_scales_and_alphas(context, stream, pool, rng,
                                                                              tokens) -> None:
    experts, topk, n, k = 8, 2, 384, 512
    capacity = tokens * topk + TAIL
    counts, offsets, indices = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in (counts, offsets, indices)]
    banks = [Bank(context, stream, pool, rng, experts, n, k, layout) for layout in ("tiled", "tiled")]
    acts = [Activations(context, stream, pool, rng, capacity, k) for _ in range(2)]
    ds = [poisoned(context, stream, pool, capacity * n) for _ in range(2)]
    alphas = (0.5, 3.0)
    sets = [mc.GroupedFp4Operands(acts[i].codes, acts[i].scales, banks[i].codes, banks[i].scales, ds[i],
                                  global_a=acts[i].global_buf, global_b=banks[i].global_buf, alpha=alphas[i])
            for i in range(2)]
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts)
    with mc.PairedVariableGroupedFp4Plan(context, stream, spec, rows_per_tile=1, variant="vector",
                                         tuning=DecodeTuning("dp4a")) as plan:
        assert plan.tuning.decode == "dp4a"
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


def test_dp4a_graph_replays_follow_routing_and_global_scales_rewritten_on_the_device(context, stream, pool,
                                                                                     rng) -> None:
    experts, topk, tokens, n, k = 8, 2, 6, 259, 2048
    capacity = tokens * topk + TAIL
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    first = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in first]
    d = poisoned(context, stream, pool, capacity * n)
    plan = mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts),
                                     rows_per_tile=1, variant="vector", tuning=DecodeTuning("dp4a"))
    graph = stream.capture((act, bank, routing, d, plan), lambda _: plan.execute(
        stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
        global_b=bank.global_buf, alpha=1.0))
    for replay in range(3):
        counts, offsets, indices = first if replay == 0 else topk_routing(rng, tokens - 2 * replay, experts, topk)
        for buf, values in zip(routing, (counts, offsets, indices)):
            write(context, stream, buf, values)
        ga = np.float32(act.global_ * (1 + replay))
        write(context, stream, act.global_buf, np.array([ga], np.float32))
        write(context, stream, d, np.full(capacity * n, np.nan, np.float32).astype(BF16))  # re-poison
        graph.launch(stream)
        got = download(context, stream, d)
        alphas = (ga * bank.global_).astype(np.float64)
        check_output(got, *expected(act.value, bank.value, counts, offsets, indices, alphas, capacity, n))
    assert plan.read_error_flag() == 0
    graph.close()
    plan.close()
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


def test_dp4a_plans_refuse_activations_misaligned_for_its_loads_by_name(context, stream, pool, rng) -> None:
    """One 16-byte load of activation codes and one 16-bit load of two activation scales per lane and step: a
    view 8 bytes into the codes and one 1 byte into the scales are refused by name, nothing runs; numba_execute
    returns INVALID_VALUE (1) for the codes before launching."""
    experts, n, k, capacity = 2, 64, 256, 4
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity + 1, k)
    routing = [upload(context, stream, pool, np.array(x, np.int32)) for x in ([2, 2], [0, 2], [0, 1])]
    codes8 = mc.from_cuda_array_interface(RawView(act.codes.handle + 8, capacity * k // 2, "|u1"), context, stream,
                                          dtype=mc.u8)
    scales1 = mc.from_cuda_array_interface(RawView(act.scales.handle + 1, capacity * k // 16, "|V1"), context, stream,
                                           dtype=mc.e4m3)
    d = poisoned(context, stream, pool, capacity * n)
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, 2, experts),
                                   rows_per_tile=1, variant="vector", tuning=DecodeTuning("dp4a")) as plan:
        for a, sa, name in ((codes8, act.scales, "a"), (act.codes, scales1, "a_scales")):
            with pytest.raises(mc.ContractError) as info:
                plan.execute(stream, a, sa, bank.codes, bank.scales, d, *routing)
            assert info.value.argument == name
        assert np.isnan(download(context, stream, d).astype(np.float32)).all(), "a refused execute wrote"
        pytest.importorskip("numba")
        run = plan.numba_execute
        h = [r.handle for r in routing]
        assert run(stream.handle, act.codes.handle + 8, act.scales.handle, bank.codes.handle, bank.scales.handle,
                   d.handle, *h, 0, 0, 1.0) == 1
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)
