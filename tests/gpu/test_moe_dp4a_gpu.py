"""The grouped NVFP4 plans' ``"vector"`` variant on the integer path (``decode="dp4a"``: E2M1 -> int8 by PRMT, IDP4A,
exact int32 block sums; 1-row tiles, K % 32 == 0) on the GPU, against the float64 reference of the dequantized
operands: top-k routings with empty groups (1 token over 8 or 64 experts), N not a multiple of the weight rows per
block, K of one step (96) and of many (14336: 8 rows per block), both scale layouts, poisoned rows no group covers;
the default plan of a decode step taking it; the indexed plan with repeated indices and more products than
matrices; the paired plan; graph replays with the routing and the global scale rewritten on the device; the
activation alignments its loads need; row warps (``DecodeTuning.row_warps``: each warp of a block its own weight-row
block) in the variable, indexed and paired plans and in graph replays. (With 1-row tiles and K % 32 == 0 the vector cases of
``tests/gpu/test_moe_gpu.py`` run it too, as the default.)"""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from mircuda.matmul._moe_kernels import DecodeTuning
from test_moe_gpu import (TAIL, Activations, Bank, RawView, poisoned, run_graph_replays, run_indexed, run_paired,
                          run_variable)


def runs_dp4a_by_default(context) -> bool:
    """The targets without cvt.rn.f16x2.e2m1x2 (the H200): elsewhere (cc 12.x) the default keeps its decoder."""
    return context.device_info().compute_capability[0] < 10


@pytest.mark.parametrize("tokens", [1, 3, 16])
@pytest.mark.parametrize("tuning", [DecodeTuning("dp4a", 2, 0, 1), DecodeTuning("dp4a", 3, 8, 2),
                                    DecodeTuning("dp4a", 2, 1, 1), DecodeTuning("dp4a", 2, 1, 1, row_warps=1),
                                    DecodeTuning("dp4a", 2, 1, 1, row_warps=4),
                                    DecodeTuning("dp4a", 2, 0, 2, row_warps=8)], ids=lambda t: t.label("vector"))
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
            if plan._kernels.arch == "sm_90":  # 4 weight rows per block (K <= 4096): the measured register cap
                assert plan.tuning.max_registers == 80 and "the 80-register cap is the default" in text
                # and 2 row warps (DP4A_ROW_WARPS_MEASURED), one warp per row block
                assert (plan.tuning.row_warps, plan.tuning.warps) == (2, 1)
                assert "row_warps; the default with 4 weight rows per block on sm_90, measured" in text
            ops = {op.name: op.alignment for op in plan.operands}
            assert (ops["a"], ops["a_scales"]) == (16, 2)
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=1, n=n, k=k, layout="tiled")
    # a tuning given overrides the default decoder
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=1, n=n, k=k, layout="tiled",
                 rows_per_tile=1, variant="vector", tuning=DecodeTuning("pairs", 2, 0, 1))


@pytest.mark.parametrize("tuning", [None, DecodeTuning("dp4a", 2, 2, 2)], ids=str)
def test_the_indexed_dp4a_plan_takes_repeated_indices_and_more_products_than_matrices(context, stream, pool, rng,
                                                                                      tuning) -> None:
    def check(plan) -> None:
        if tuning is not None or (plan.path == "portable" and runs_dp4a_by_default(context)):
            assert plan.variant == "vector" and plan.tuning.decode == "dp4a"

    kw = {} if tuning is None else {"variant": "vector", "tuning": tuning}
    run_indexed(context, stream, pool, rng, n=320, k=1024, rows=1, products=20, bank_size=6, check_plan=check, **kw)


@pytest.mark.parametrize("tokens", [1, 5])
def test_the_paired_dp4a_plan_runs_two_banks_with_their_own_scales_and_alphas(context, stream, pool, rng,
                                                                              tokens) -> None:
    def check(plan) -> None:
        assert plan.tuning.decode == "dp4a"

    run_paired(context, stream, pool, rng, tokens=tokens, check_plan=check, rows_per_tile=1, variant="vector",
               tuning=DecodeTuning("dp4a"))


def test_dp4a_graph_replays_follow_routing_and_global_scales_rewritten_on_the_device(context, stream, pool,
                                                                                     rng) -> None:
    run_graph_replays(context, stream, pool, rng, tokens=6, n=259, k=2048, shrink=2, rows_per_tile=1,
                      variant="vector", tuning=DecodeTuning("dp4a"))


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


def test_row_warps_in_the_indexed_and_paired_plans_and_graph_replays(context, stream, pool, rng) -> None:
    """row_warps 2 in the indexed plan (N = 300: 75 row blocks in 38 blocks, the last one's spare warp stores
    nothing), 8 in the paired plan's two banks (N = 384: 96 row blocks, 12 blocks, no spare warp) and 4 in graph
    replays with the routing rewritten on the device (N = 259: 65 row blocks, 17 blocks, 3 spare warps);
    describe() says it and the grid has that many times fewer blocks."""
    def check(row_warps: int):
        def checked(plan) -> None:
            assert plan.tuning.row_warps == row_warps and plan.tuning.warps == 1
            shape = plan._kernels.shape
            assert plan._kernels.grouped_config.grid[0] == -(-shape.weight_blocks // row_warps)
            assert plan._kernels.grouped_config.block[0] == 32 * row_warps
            assert f"in blocks of {row_warps} warps, each warp taking its own row block whole" in plan.describe()
        return checked

    run_indexed(context, stream, pool, rng, n=300, k=1024, rows=1, products=20, bank_size=6, check_plan=check(2),
                variant="vector", tuning=DecodeTuning("dp4a", row_warps=2))
    run_paired(context, stream, pool, rng, tokens=5, check_plan=check(8), rows_per_tile=1, variant="vector",
               tuning=DecodeTuning("dp4a", row_warps=8))
    run_graph_replays(context, stream, pool, rng, tokens=6, n=259, k=2048, shrink=2, rows_per_tile=1,
                      variant="vector", tuning=DecodeTuning("dp4a", row_warps=4))


def test_row_warps_refusals_name_the_tuning_field(context, stream) -> None:
    spec = mc.VariableGroupedFp4Spec(64, 256, 8, 4, 4)
    for fields, rows, argument in [(dict(decode="dp4a", row_warps=3), 1, "tuning.row_warps"),  # refused when made
                                   (dict(decode="dp4a", row_warps=2, lean_tiles=True), 1, "tuning.row_warps"),
                                   (dict(decode="dp4a", row_warps=2, warps=2), 1, "tuning.warps"),
                                   (dict(decode="e4m3", row_warps=2), 2, "tuning.row_warps")]:
        with pytest.raises(mc.ContractError) as info:
            mc.VariableGroupedFp4Plan(context, stream, spec, rows_per_tile=rows, variant="vector",
                                      tuning=DecodeTuning(**fields))
        assert info.value.argument == argument
