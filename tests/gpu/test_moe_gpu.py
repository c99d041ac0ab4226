"""Grouped NVFP4 plans on the GPU (issue 15): VariableGroupedFp4Plan, IndexedGroupedFp4Plan and
PairedVariableGroupedFp4Plan against a float64 reference of the dequantized operands. Random routings
(8 experts top-2, 64 experts top-8; 1, 7, 16, 256, 4096 tokens) with empty groups, every m-tile size,
both bank-scale layouts, K a multiple of 16 but not of 32; repeated indices and P > E; two operand sets
with different scales and alphas; graph replays with the routing and global scales rewritten on the
device between them; poisoned rows no group covers left untouched; invalid routing -> error flag bits,
the other groups still correct; numba_execute from @njit; the operand checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close
from mircuda.matmul import _fp4_reference as ref

E4M3 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16
TAIL = 5
"""Rows past the routed ones in every test's capacity: no group covers them, they must stay poisoned."""


def data(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    return (rng.standard_normal((rows, k)) * np.exp(rng.uniform(-2, 2, (rows, 1)))).astype(BF16)


class Bank:
    """E quantized weight matrices [N, K]: codes [E, N, K/2], scales per matrix back to back, global [E]."""

    def __init__(self, context, stream, pool, rng, e: int, n: int, k: int, layout: str) -> None:
        packed, scales, values, globals_ = [], [], [], []
        for _ in range(e):
            p, s, g = ref.quantize(data(rng, n, k), layout=layout)
            packed.append(p.ravel())
            scales.append(s.ravel())
            values.append(ref.dequantize(p, s, n, k, layout))
            globals_.append(g)
        self.value = np.stack(values)  # [E, N, K] float64, without the global scales
        self.global_ = np.array(globals_, np.float32)
        self.codes = upload(context, stream, pool, np.concatenate(packed))
        self.scales = upload(context, stream, pool, np.concatenate(scales).view(E4M3))
        self.global_buf = upload(context, stream, pool, self.global_)

    def free(self, stream) -> None:
        for b in (self.codes, self.scales, self.global_buf):
            b.free(stream)


class Activations:
    """[capacity, K] quantized with linear scales and one global scale."""

    def __init__(self, context, stream, pool, rng, capacity: int, k: int) -> None:
        p, s, g = ref.quantize(data(rng, capacity, k), layout="linear")
        self.value = ref.dequantize(p, s, capacity, k, "linear")
        self.global_ = g
        self.codes = upload(context, stream, pool, p.ravel())
        self.scales = upload(context, stream, pool, s.ravel().view(E4M3))
        self.global_buf = upload(context, stream, pool, np.array([g], np.float32))

    def free(self, stream) -> None:
        for b in (self.codes, self.scales, self.global_buf):
            b.free(stream)


def topk_routing(rng: np.random.Generator, tokens: int, experts: int, topk: int) -> tuple[np.ndarray, ...]:
    """Each token picks ``topk`` distinct experts; the rows are sorted by expert: groups = experts,
    ``(row_counts, offsets, matrix_indices)`` int32, compact offsets."""
    choice = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk]
    counts = np.bincount(choice.ravel(), minlength=experts).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    # groups in a shuffled order of experts: the matrix index is not the group index
    order = rng.permutation(experts)
    return counts[order], offsets[order], order.astype(np.int32)


def poisoned(context, stream, pool, count: int) -> mc.DeviceBuffer:
    return upload(context, stream, pool, np.full(count, np.nan, np.float32).astype(BF16))


def expected(a64: np.ndarray, bank64: np.ndarray, counts, offsets, indices, alphas: np.ndarray,
             capacity: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(want, magnitude, covered) [capacity, N]: each valid group's rows, NaN elsewhere."""
    want = np.full((capacity, n), np.nan)
    mag = np.zeros((capacity, n))
    covered = np.zeros(capacity, bool)
    for c, o, e in ((int(c), int(o), int(e)) for c, o, e in zip(counts, offsets, indices)):  # no int32 wrap
        if c <= 0 or o < 0 or o + c > capacity or not 0 <= e < len(bank64):
            continue
        rows = slice(o, o + c)
        want[rows] = alphas[e] * (a64[rows] @ bank64[e].T)
        mag[rows] = abs(alphas[e]) * (np.abs(a64[rows]) @ np.abs(bank64[e]).T)
        covered[rows] = True
    return want, mag, covered


def check_output(got: np.ndarray, want: np.ndarray, mag: np.ndarray, covered: np.ndarray) -> None:
    got = got.reshape(want.shape)
    assert np.isnan(got[~covered].astype(np.float32)).all(), "a row no group covers was written"
    if covered.any():
        assert_close(got[covered], want[covered], mag[covered], "bf16")


def run_variable(context, stream, pool, rng, *, experts, topk, tokens, n, k, layout, rows_per_tile=None,
                 variant=None, path=None, tuning=None) -> None:
    capacity = tokens * topk + TAIL
    counts, offsets, indices = topk_routing(rng, tokens, experts, topk)
    bank = Bank(context, stream, pool, rng, experts, n, k, layout)
    act = Activations(context, stream, pool, rng, capacity, k)
    routing = [upload(context, stream, pool, x) for x in (counts, offsets, indices)]
    d = poisoned(context, stream, pool, capacity * n)
    alpha = float(rng.uniform(0.5, 2.0))
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts)
    with mc.VariableGroupedFp4Plan(context, stream, spec, scale_layout=layout, rows_per_tile=rows_per_tile,
                                   variant=variant, path=path, tuning=tuning) as plan:
        assert plan.path != "cutlass" or context.device_info().compute_capability[0] == 12
        if path is not None:
            assert plan.path == path and f"path {path}" in plan.describe()
        if variant is not None:
            assert plan.variant == variant and f"variant {variant}" in plan.describe()
        if tuning is not None:
            from mircuda.matmul._moe_kernels import default_register_cap, default_row_warps, resolve_tuning

            arch = plan._kernels.arch
            cap = (default_register_cap(arch, tuning.decode, tuning.frags)
                   if tuning.max_registers is None else tuning.max_registers)  # None: the default cap
            row_warps = tuning.row_warps
            if (row_warps is None and plan.variant == "vector" and tuning.warps in (None, 0, 1) and not tuning.lean_tiles
                    and not tuning.persistent):  # None: the default row warps where they can run
                row_warps = default_row_warps(arch, tuning.decode, tuning.frags)
                if row_warps is not None and tuning.warps == 0:  # the occupancy rule's warps: none, named
                    row_warps = 1
            warps = 1 if row_warps is not None and row_warps > 1 else tuning.warps or plan.tuning.warps
            assert plan.tuning == dataclasses.replace(tuning, warps=warps, max_registers=cap, row_warps=row_warps)
            # and given back, the plan's tuning runs the same kernel
            assert resolve_tuning(plan.tuning, plan.variant, arch, plan.rows_per_tile, k) == plan.tuning
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
                     global_b=bank.global_buf, alpha=alpha)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
        apm = download(context, stream, plan.alpha_per_matrix)
        alphas = np.float32(alpha) * act.global_ * bank.global_
        np.testing.assert_array_equal(apm, alphas.astype(np.float32))
    want, mag, covered = expected(act.value, bank.value, counts, offsets, indices, alphas.astype(np.float64),
                                  capacity, n)
    check_output(got, want, mag, covered)
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


@pytest.mark.parametrize("tokens", [1, 7, 16, 256, 4096])
@pytest.mark.parametrize("experts, topk, n, k", [(8, 2, 512, 2048), (64, 8, 256, 512), (160, 4, 128, 256)], ids=str)
def test_the_variable_plan_matches_float64_on_topk_routings(context, stream, pool, rng, experts, topk, n, k,
                                                            tokens) -> None:
    """160 groups: the grouped kernel finds a tile's group by binary search (ballots up to 128 groups)."""
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=tokens, n=n, k=k, layout="tiled")


TILES = [(8, "split_k"), (16, "split_k"), (32, "split_k"), (64, "split_k"), (8, "split_n"), (16, "split_n"),
         (64, "split_n"), (16, "staged"), (32, "staged"), (64, "staged"), (1, "vector"), (2, "vector"), (4, "vector"),
         (8, "vector")]


@pytest.mark.parametrize("rows_per_tile, variant", TILES, ids=str)
@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k", [(259, 1040), (768, 96), (300, 4096)], ids=str)
def test_every_tile_size_and_variant_both_layouts_odd_n_and_narrow_k(context, stream, pool, rng, n, k, layout,
                                                                     rows_per_tile, variant) -> None:
    """K = 1040: a multiple of 16, not of 32 (8-byte loads, a K tail in the last step); 96: of 32, not of 64
    (16-byte loads, one partial step); N = 259 and 300: blocks with rows past N (staged: whole warps)."""
    run_variable(context, stream, pool, rng, experts=8, topk=2, tokens=37, n=n, k=k, layout=layout,
                 rows_per_tile=rows_per_tile, variant=variant)


def _tunings() -> list[Any]:
    """The split_k decode knobs (fp4_grouped.cu: MIRCUDA_MOE_DECODE, _STAGES, _WARPS, _FRAGS): every decoder
    with each ring depth, and the warp / 32-row variants (moe-profile --sweep's candidates)."""
    from mircuda.matmul._moe_kernels import DecodeTuning

    out = [DecodeTuning(d, s, 8, 1) for d in ("bytes", "pairs", "e4m3") for s in (2, 3, 4)]
    out += [DecodeTuning("e4m3", 3, w, f) for w in (4, 8, 16) for f in (1, 2)]
    return out + [DecodeTuning("pairs", 2, 4, 2), DecodeTuning("bytes", 4, 16, 2)]


@pytest.mark.parametrize("tuning", _tunings(), ids=lambda t: t.label())
@pytest.mark.parametrize("rows_per_tile, n, k, tokens", [(8, 259, 1040, 3), (16, 300, 4096, 7), (8, 768, 96, 1)],
                         ids=str)
def test_every_split_k_decode_knob_matches_float64(context, stream, pool, rng, tuning, rows_per_tile, n, k,
                                                   tokens) -> None:
    """Decode (bytes / pairs / e4m3), ring stages, warps and 16/32-row blocks: K = 1040 (a K tail, 8-byte
    loads), 4096 (every warp several steps: the ring wraps), 96 (fewer steps than warps); N = 259 / 300:
    blocks with rows past N; both scale layouts over the cases."""
    if tuning.decode == "e4m3" and context.device_info().compute_capability < (8, 9):
        pytest.skip("cvt.rn.f16x2.e4m3x2 needs cc >= 8.9")
    run_variable(context, stream, pool, rng, experts=8, topk=2, tokens=tokens, n=n, k=k,
                 layout="linear" if k == 1040 else "tiled", rows_per_tile=rows_per_tile, variant="split_k",
                 tuning=tuning)


def _vector_tunings() -> list[Any]:
    """The vector variant's knobs (fp4_vector.cu: MIRCUDA_FP4_DECODE, _STAGES, the warps splitting K, 4 or 8
    weight rows per block)."""
    from mircuda.matmul._moe_kernels import DecodeTuning

    return [DecodeTuning(d, s, w, f, p) for d, s, w, f, p in (
        ("bytes", 2, 1, 1, False), ("pairs", 3, 2, 2, False), ("e4m3", 4, 8, 1, False), ("e4m3", 3, 4, 2, False),
        ("bytes", 4, 8, 2, False), ("e4m3", 2, 0, 1, True), ("pairs", 3, 2, 2, True), ("e4m3", 2, 8, 1, True))]


@pytest.mark.parametrize("tuning", _vector_tunings(), ids=lambda t: t.label())
@pytest.mark.parametrize("rows_per_tile, n, k, tokens", [(1, 259, 1040, 3), (2, 300, 4096, 7), (8, 768, 96, 1)],
                         ids=str)
def test_every_vector_knob_matches_float64(context, stream, pool, rng, tuning, rows_per_tile, n, k, tokens) -> None:
    """K = 1040: 8-byte loads (K % 32 != 0); 4096: the ring wraps many times; 96: fewer chunks than warps;
    N = 259 / 300: a last block with rows past N; tiles of 1, 2 and 8 rows over groups of 0-3 rows."""
    if tuning.decode == "e4m3" and context.device_info().compute_capability < (8, 9):
        pytest.skip("cvt.rn.f16x2.e4m3x2 needs cc >= 8.9")
    run_variable(context, stream, pool, rng, experts=8, topk=2, tokens=tokens, n=n, k=k,
                 layout="linear" if k == 1040 else "tiled", rows_per_tile=rows_per_tile, variant="vector",
                 tuning=tuning)


def test_the_automatic_choice_takes_the_vector_variant_for_a_row_or_less_per_group(context, stream) -> None:
    """capacity / groups <= 1 (a decode step): the CUDA-core vector kernel, its warps from the occupancy rule;
    above: the mma variants. rows_per_tile 1, 2 or 4 alone choose it too."""
    from mircuda.matmul._moe_kernels import VECTOR_WARPS

    for capacity, want in ((8, "vector"), (2, "vector"), (9, "split_k")):
        with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(256, 512, capacity, 8, 8),
                                       path="portable") as plan:
            assert plan.variant == want
            if want == "vector":
                assert plan.rows_per_tile == 1 and plan.tuning.warps in VECTOR_WARPS
                assert "variant vector" in plan.describe() and "no tensor cores" in plan.describe()
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(256, 512, 64, 8, 8),
                                   rows_per_tile=4) as plan:
        assert (plan.variant, plan.rows_per_tile) == ("vector", 4)
    with mc.IndexedGroupedFp4Plan(context, stream, mc.IndexedGroupedFp4Spec(256, 512, 1, 6, 4)) as plan:
        assert plan.variant == "vector"
    from mircuda.matmul._moe_kernels import DecodeTuning

    split_k_knobs = DecodeTuning("e4m3", 3, 16, 2)  # a tuning given without a variant keeps the split_k default
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(256, 512, 8, 8, 8),
                                   tuning=split_k_knobs) as plan:
        assert plan.variant == "split_k" and plan.tuning == split_k_knobs
    for kw, field in (({"variant": "vector", "rows_per_tile": 16}, "rows_per_tile"),
                      ({"variant": "split_k", "rows_per_tile": 2}, "rows_per_tile"),
                      ({"rows_per_tile": 3}, "rows_per_tile")):
        with pytest.raises(mc.ContractError) as info:
            mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(256, 512, 16, 8, 8), **kw)
        assert info.value.argument == field


def test_the_default_tuning_is_the_targets_and_bad_knobs_are_refused_by_name(context, stream) -> None:
    from mircuda.matmul._moe_kernels import DecodeTuning, default_tuning

    spec = mc.VariableGroupedFp4Spec(256, 512, 16, 8, 8)
    with mc.VariableGroupedFp4Plan(context, stream, spec, variant="split_k") as plan:
        if plan.path == "portable":
            assert plan.tuning == default_tuning(plan._kernels.arch, "split_k")
            assert f"a ring of {plan.tuning.stages} load stages" in plan.describe()
    # the split_k variant's own refusals (what no variant takes is refused when the tuning is made: test_moe.py)
    for bad, field in (("e4m3", "tuning"), ({"decode": "dp4a"}, "tuning.decode"),
                       ({"decode": "pairs", "warps": 1}, "tuning.warps")):
        with pytest.raises(mc.ContractError) as info:
            mc.VariableGroupedFp4Plan(context, stream, spec, variant="split_k",
                                      tuning=DecodeTuning(**bad) if isinstance(bad, dict) else bad)
        assert info.value.argument == field
    with pytest.raises(mc.ContractError) as info:
        mc.VariableGroupedFp4Plan(context, stream, spec, variant="staged", tuning=DecodeTuning("pairs", 2, 4))
    assert info.value.argument == "tuning.warps"
    for make, field in ((lambda: DecodeTuning("pairs", 2, 16), "tuning.warps"),
                        (lambda: DecodeTuning("pairs", 2, 2, 4), "tuning.frags")):  # refused when made
        with pytest.raises(mc.ContractError) as info:
            mc.VariableGroupedFp4Plan(context, stream, spec, variant="vector", tuning=make())
        assert info.value.argument == field


def run_indexed(context, stream, pool, rng, *, n: int, k: int, rows: int, products: int, bank_size: int,
                check_plan: Callable[[Any], None], **plan_kwargs: Any) -> None:
    """IndexedGroupedFp4Plan(**plan_kwargs): ``products`` products of ``rows`` rows over a tiled bank of
    ``bank_size`` matrices (index 1 repeats index 0), alpha 0.75 and both global scales, against float64;
    ``check_plan(plan)`` runs before the plan executes."""
    capacity = rows * products
    bank = Bank(context, stream, pool, rng, bank_size, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    idx = rng.integers(0, bank_size, products).astype(np.int32)
    idx[1] = idx[0]  # a repeat for certain
    indices = upload(context, stream, pool, idx)
    d = poisoned(context, stream, pool, capacity * n)
    spec = mc.IndexedGroupedFp4Spec(n, k, rows, products, bank_size)
    with mc.IndexedGroupedFp4Plan(context, stream, spec, **plan_kwargs) as plan:
        check_plan(plan)
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, indices, global_a=act.global_buf,
                     global_b=bank.global_buf, alpha=0.75)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
    alphas = (np.float32(0.75) * act.global_ * bank.global_).astype(np.float64)
    counts = np.full(products, rows, np.int32)
    offsets = (np.arange(products) * rows).astype(np.int32)
    want, mag, covered = expected(act.value, bank.value, counts, offsets, idx, alphas, capacity, n)
    assert covered.all()
    check_output(got, want, mag, covered)
    for b in (indices, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


@pytest.mark.parametrize("variant", [None, "vector"])
@pytest.mark.parametrize("rows, products, bank_size", [(1, 20, 6), (5, 20, 6), (16, 9, 4), (40, 7, 3)], ids=str)
def test_the_indexed_plan_takes_repeated_indices_and_more_products_than_matrices(context, stream, pool, rng, rows,
                                                                                 products, bank_size, variant) -> None:
    def check(plan: Any) -> None:
        assert variant is None or plan.variant == variant

    run_indexed(context, stream, pool, rng, n=320, k=1024, rows=rows, products=products, bank_size=bank_size,
                check_plan=check, variant=variant)


def run_paired(context, stream, pool, rng, *, tokens: int, check_plan: Callable[[Any], None],
               **plan_kwargs: Any) -> None:
    """PairedVariableGroupedFp4Plan(**plan_kwargs) on 8 experts top-2 (N 384, K 512): two tiled banks and two
    activation sets with their own global scales and alphas 0.5 and 3.0, against float64; ``check_plan(plan)``
    runs before the plan executes."""
    experts, topk, n, k = 8, 2, 384, 512
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
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts)
    with mc.PairedVariableGroupedFp4Plan(context, stream, spec, **plan_kwargs) as plan:
        check_plan(plan)
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


@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("variant", [None, "vector"])
def test_the_paired_plan_runs_two_banks_with_their_own_scales_and_alphas(context, stream, pool, rng, tokens,
                                                                         variant) -> None:
    def check(plan: Any) -> None:
        assert variant is None or plan.variant == variant

    run_paired(context, stream, pool, rng, tokens=tokens, check_plan=check, variant=variant)


def write(context, stream, buf: mc.DeviceBuffer, values: np.ndarray) -> None:
    """A stream-ordered host -> device copy (cuMemcpyHtoDAsync from pinned memory), then a sync."""
    kinds = {np.dtype(np.int32): mc.i32, np.dtype(np.float32): mc.f32, np.dtype(BF16): mc.bf16}
    staging = context.allocate_pinned(kinds[values.dtype], len(values))
    staging.write_prefix(values)
    stream.copy_to_device(staging, buf)
    stream.synchronize()


def run_graph_replays(context, stream, pool, rng, *, tokens: int, n: int, k: int, shrink: int, replays: int = 3,
                      one_group_last: bool = False, **plan_kwargs: Any) -> None:
    """VariableGroupedFp4Plan(**plan_kwargs) on 8 experts top-2 captured once into a graph, then ``replays``
    launches, each after the routing (replay r: ``tokens - shrink * r`` tokens; with ``one_group_last`` the last
    replay routes every row to one group, the others empty), the activations' global scale and a re-poisoned
    output are written on the device; each replay against float64, no error flag."""
    experts, topk = 8, 2
    capacity = tokens * topk + TAIL
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    first = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in first]
    d = poisoned(context, stream, pool, capacity * n)
    plan = mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts),
                                     **plan_kwargs)
    graph = stream.capture((act, bank, routing, d, plan), lambda _: plan.execute(
        stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
        global_b=bank.global_buf, alpha=1.0))
    for replay in range(replays):
        if replay == 0:
            counts, offsets, indices = first
        elif one_group_last and replay == replays - 1:  # everything in one group, the others empty
            counts = np.zeros(experts, np.int32)
            counts[2] = tokens * topk
            offsets, indices = np.zeros(experts, np.int32), np.arange(experts, dtype=np.int32)
        else:
            counts, offsets, indices = topk_routing(rng, tokens - shrink * replay, experts, topk)
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


@pytest.mark.parametrize("variant", [None, "vector"])
def test_graph_replays_follow_routing_and_global_scales_rewritten_on_the_device(context, stream, pool, rng,
                                                                                variant) -> None:
    run_graph_replays(context, stream, pool, rng, tokens=24, n=256, k=512, shrink=3, variant=variant)


@pytest.mark.parametrize("rows_per_tile, variant", [(8, "split_k"), (64, "staged"), (32, "split_n"), (1, "vector"),
                                                   (4, "vector")], ids=str)
def test_invalid_routing_sets_the_error_flag_and_the_other_groups_stay_correct(context, stream, pool, rng,
                                                                               rows_per_tile, variant) -> None:
    experts, n, k, capacity = 4, 256, 512, 64
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    cases = [  # (counts, offsets, indices, bits)
        ([8, 8, 8, 8], [0, 8, 16, 24], [0, 1, 2, 3], 0),
        ([8, 8, 8, 8], [0, 8, 16, 24], [0, 4, 2, -1], mc.matmul.ERROR_MATRIX_INDEX),
        ([8, -3, 8, 8], [0, 8, 60, 24], [0, 1, 2, 3], mc.matmul.ERROR_ROWS),
        ([8, 2**30, 8, 8], [-1, 8, 16, 2**31 - 4], [0, 1, 7, 3], mc.matmul.ERROR_ROWS | mc.matmul.ERROR_MATRIX_INDEX),
        ([0, 0, 64, 0], [0, 0, 0, 0], [0, 0, 3, 0], 0),
    ]
    plan = mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, 4, experts),
                                     rows_per_tile=rows_per_tile, variant=variant)
    routing = [pool.allocate(mc.i32, stream, 4) for _ in range(3)]
    alphas = (act.global_ * bank.global_).astype(np.float64)
    for counts, offsets, indices, bits in cases:
        host = [np.array(x, np.int32) for x in (counts, offsets, indices)]
        for buf, values in zip(routing, host):
            write(context, stream, buf, values)
        d = poisoned(context, stream, pool, capacity * n)
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
                     global_b=bank.global_buf)
        got = download(context, stream, d)
        assert plan.read_error_flag() == bits
        assert plan.read_error_flag() == 0  # reset by the first read
        want, mag, covered = expected(act.value, bank.value, *host, alphas, capacity, n)
        check_output(got, want, mag, covered)
        d.free(stream)
    plan.close()
    for b in routing:
        b.free(stream)
    bank.free(stream)
    act.free(stream)


def run_overlapping(context, stream, pool, rng, *, check_plan: Callable[[Any], None], **plan_kwargs: Any) -> None:
    """VariableGroupedFp4Plan(path="portable", **plan_kwargs) on 4 groups of 2 matrices (N 256, K 512, 8 rows):
    groups 0 and 1 both cover rows [0, 7) (the same matrix: one value per row whichever writes last), group 2
    alone row 7, against float64 with every row covered; ``check_plan(plan)`` runs before the plan executes."""
    experts, n, k, capacity = 2, 256, 512, 8
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    host = [np.array(x, np.int32) for x in ([7, 7, 1, 0], [0, 0, 7, 0], [0, 0, 1, 1])]
    routing = [upload(context, stream, pool, x) for x in host]
    d = poisoned(context, stream, pool, capacity * n)
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, 4, experts),
                                   path="portable", **plan_kwargs) as plan:
        check_plan(plan)
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
                     global_b=bank.global_buf)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
    alphas = (act.global_ * bank.global_).astype(np.float64)
    want, mag, covered = expected(act.value, bank.value, *host, alphas, capacity, n)
    assert covered.all()
    check_output(got, want, mag, covered)
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


@pytest.mark.parametrize("rows_per_tile, variant", [(1, "vector"), (2, "vector"), (8, "split_k")], ids=str)
def test_overlapping_row_ranges_past_the_tile_slots_are_still_all_computed(context, stream, pool, rng, rows_per_tile,
                                                                           variant) -> None:
    """The overlapping routing of :func:`run_overlapping`: 15 (vector, 1 row) or 9 (2 rows) tiles for the 8 slots
    min(ceil(8 / MT) + G, 8) of the grid; the vector kernel once ran one tile per slot and left row 7 unwritten."""
    def check(plan: Any) -> None:
        assert plan.variant == variant and plan.rows_per_tile == rows_per_tile

    run_overlapping(context, stream, pool, rng, check_plan=check, rows_per_tile=rows_per_tile, variant=variant)


@pytest.mark.parametrize("rows_per_tile, variant, capacity", [(1, "vector", 65537), (8, "split_k", 524289)], ids=str)
def test_a_tile_list_of_2_31_tiles_or_more_sets_bit_2_and_computes_nothing(context, stream, pool, rng, rows_per_tile,
                                                                           variant, capacity) -> None:
    """65536 groups each covering every row (overlapping ranges, each valid alone): 65536 * 65537 tiles =
    2^32 + 2^16, which int32 sums wrapped to 65536 (a non-monotonic tile list: blocks then read groups'
    rows from garbage prefix entries, and no bit was set). The setup sums in 64 bits and refuses the list
    whole: bit 2, nothing written; the next execute with a valid routing runs normally."""
    groups, n, k = 65536, 16, 16
    bank = Bank(context, stream, pool, rng, 1, n, k, "linear")
    act = Activations(context, stream, pool, rng, capacity, k)
    counts = np.full(groups, capacity, np.int32)
    routing = [upload(context, stream, pool, x) for x in (counts, np.zeros(groups, np.int32),
                                                          np.zeros(groups, np.int32))]
    d = poisoned(context, stream, pool, capacity * n)
    with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, groups, 1),
                                   scale_layout="linear", rows_per_tile=rows_per_tile, variant=variant,
                                   path="portable") as plan:
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing)
        assert plan.read_error_flag() == mc.matmul.ERROR_ROWS
        assert np.isnan(download(context, stream, d).astype(np.float32)).all(), "a refused tile list wrote"
        counts[:] = 0
        counts[3] = 5  # group 3: rows [0, 5) of matrix 0
        write(context, stream, routing[0], counts)
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing)
        got = download(context, stream, d)
        assert plan.read_error_flag() == 0
    want, mag, covered = expected(act.value, bank.value, counts, np.zeros(groups, np.int32),
                                  np.zeros(groups, np.int32), np.ones(1), capacity, n)
    assert covered.sum() == 5
    check_output(got, want, mag, covered)
    for b in (*routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


@pytest.mark.parametrize("variant", [None, "vector"])
def test_the_plans_run_from_numba_njit(context, stream, pool, rng, variant) -> None:
    numba = pytest.importorskip("numba")
    experts, topk, tokens, n, k = 8, 2, 10, 256, 1040
    capacity = tokens * topk + TAIL
    counts, offsets, indices = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in (counts, offsets, indices)]
    banks = [Bank(context, stream, pool, rng, experts, n, k, "tiled") for _ in range(2)]
    act = Activations(context, stream, pool, rng, capacity, k)
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts)
    variable = mc.VariableGroupedFp4Plan(context, stream, spec, variant=variant)
    paired = mc.PairedVariableGroupedFp4Plan(context, stream, spec, variant=variant)
    ds = [poisoned(context, stream, pool, capacity * n) for _ in range(3)]
    run_v, run_p = variable.numba_execute, paired.numba_execute
    h = [r.handle for r in routing]

    @numba.njit
    def both(s, a, sa, b1, sb1, b2, sb2, d0, d1, d2, rc, of, mi, ga, gb1, gb2):
        status = run_v(s, a, sa, b1, sb1, d0, rc, of, mi, ga, gb1, 2.0)
        status |= run_p(s, rc, of, mi, a, sa, b1, sb1, d1, ga, gb1, 1.0, a, sa, b2, sb2, d2, ga, gb2, 0.5)
        return status

    assert both(stream.handle, act.codes.handle, act.scales.handle, banks[0].codes.handle, banks[0].scales.handle,
                banks[1].codes.handle, banks[1].scales.handle, ds[0].handle, ds[1].handle, ds[2].handle, *h,
                act.global_buf.handle, banks[0].global_buf.handle, banks[1].global_buf.handle) == 0
    assert run_v(stream.handle + 1, act.codes.handle, act.scales.handle, banks[0].codes.handle, 0, ds[0].handle,
                 *h, 0, 0, 1.0) == 400
    assert run_v(stream.handle, act.codes.handle + 1, act.scales.handle, banks[0].codes.handle, 0, ds[0].handle,
                 *h, 0, 0, 1.0) == 1
    for d, bank, alpha in ((ds[0], banks[0], 2.0), (ds[1], banks[0], 1.0), (ds[2], banks[1], 0.5)):
        got = download(context, stream, d)
        al = (np.float32(alpha) * act.global_ * bank.global_).astype(np.float64)
        check_output(got, *expected(act.value, bank.value, counts, offsets, indices, al, capacity, n))
    assert variable.read_error_flag() == 0
    variable.close()
    paired.close()
    for b in (*routing, *ds):
        b.free(stream)
    for x in (*banks, act):
        x.free(stream)


def test_the_vector_plan_asks_2_byte_aligned_bank_scales_where_it_loads_scale_pairs(context, stream, pool) -> None:
    """K % 32 == 0: fp4_vector.cu reads two adjacent bank scales as one 16-bit word, so the portable vector
    plan's b_scales needs 2-byte alignment (it was 1: an odd address faulted); numba_execute refuses an odd
    one with INVALID_VALUE (1) before launching. The mma variant split_k reads its scales in pairs as well
    (fp4_grouped.cu's MIRCUDA_MOE_SCALE_PAIRS): b_scales and a_scales 2. K % 32 != 0 (byte loads): 1."""
    pytest.importorskip("numba")
    spec = mc.VariableGroupedFp4Spec(256, 512, 8, 8, 8)
    with mc.VariableGroupedFp4Plan(context, stream, spec, variant="vector", path="portable") as plan:
        assert {op.name: op.alignment for op in plan.operands}["b_scales"] == 2
        run = plan.numba_execute
        assert run(stream.handle, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1.0) == 1
    for kw, k, want in (({"variant": "vector"}, 528, 1), ({"variant": "split_k"}, 528, 1),
                        ({"variant": "split_k"}, 512, 2)):
        with mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(256, k, 8, 8, 8), path="portable",
                                       **kw) as plan:
            align = {op.name: op.alignment for op in plan.operands}
            assert (align["b_scales"], align["a_scales"]) == (want, want), (kw, k)


def test_bad_operands_are_refused_before_anything_is_enqueued(context, stream, pool, rng) -> None:
    experts, n, k, capacity = 4, 128, 256, 16
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    routing = [upload(context, stream, pool, np.array(x, np.int32)) for x in ([4, 4, 4, 4], [0, 4, 8, 12], [0, 1, 2, 3])]
    d = poisoned(context, stream, pool, capacity * n)
    plan = mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, 4, experts))
    good: dict[str, Any] = dict(a=act.codes, a_scales=act.scales, b_bank=bank.codes, b_scales=bank.scales, d=d,
                                row_counts=routing[0], offsets=routing[1], matrix_indices=routing[2])
    short_bank = pool.allocate(mc.u8, stream, experts * n * k // 2 - 16)
    wrong_type = pool.allocate(mc.f32, stream, capacity)
    short_gb = pool.allocate(mc.f32, stream, experts - 1)
    for name, value in (("b_bank", short_bank), ("row_counts", wrong_type), ("d", act.codes)):
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, **{**good, name: value})
        assert info.value.argument == name
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, **good, global_b=short_gb)
    assert info.value.argument == "global_b"
    other = context.create_stream()
    with pytest.raises(mc.ContractError) as info:
        plan.execute(other, **good)
    assert info.value.argument == "stream"
    other.close()
    assert np.isnan(download(context, stream, d).astype(np.float32)).all(), "a refused execute wrote"
    text = plan.describe()
    assert "fp4_grouped_setup" in text and ("fp4_grouped_bf16" in text or plan.path == "cutlass")
    if context.device_info().compute_capability == (9, 0):
        assert plan.path == "portable" and "software E2M1 decode" in text
    plan.close()
    with pytest.raises(mc.ClosedResourceError):
        plan.execute(stream, **good)
    for b in (short_bank, wrong_type, short_gb, *routing, d):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


class RawView:
    """Another library's flat device array (``__cuda_array_interface__`` v3) at a chosen address: how a user
    hands mircuda a view that overlaps or misaligns another buffer."""

    def __init__(self, ptr: int, count: int, typestr: str) -> None:
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


@pytest.mark.parametrize("variant", [None, "vector"])
def test_an_output_overlapping_an_input_or_the_other_output_is_refused_by_name(context, stream, pool, rng,
                                                                               variant) -> None:
    """D written over the activations it reads (a u8 view of D's bytes as A), over the routing (an int32 view),
    and the paired plan's D2 on D1's bytes: races with no defined result, refused with both byte ranges."""
    experts, n, k, capacity = 4, 128, 256, 16
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    routing = [upload(context, stream, pool, np.array(x, np.int32)) for x in ([4, 4, 4, 4], [0, 4, 8, 12], [0, 1, 2, 3])]
    d = poisoned(context, stream, pool, capacity * n)
    a_over_d = mc.from_cuda_array_interface(RawView(d.handle, capacity * k // 2, "|u1"), context, stream)
    counts_over_d = mc.from_cuda_array_interface(RawView(d.handle + 64, 4, "<i4"), context, stream)
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, 4, experts)
    good: dict[str, Any] = dict(a=act.codes, a_scales=act.scales, b_bank=bank.codes, b_scales=bank.scales, d=d,
                                row_counts=routing[0], offsets=routing[1], matrix_indices=routing[2])
    with mc.VariableGroupedFp4Plan(context, stream, spec, variant=variant) as plan:
        for name, value in (("a", a_over_d), ("row_counts", counts_over_d)):
            with pytest.raises(mc.ContractError) as info:
                plan.execute(stream, **{**good, name: value})
            assert info.value.argument == "d" and f"overlapping {name} at" in str(info.value)
    d2 = poisoned(context, stream, pool, capacity * n)
    with mc.PairedVariableGroupedFp4Plan(context, stream, spec, variant=variant) as paired:
        sets = [mc.GroupedFp4Operands(act.codes, act.scales, bank.codes, bank.scales, out) for out in (d, d)]
        with pytest.raises(mc.ContractError) as info:
            paired.execute(stream, sets[0], sets[1], *routing)
        assert info.value.argument == "d2" and "overlapping d1 at" in str(info.value)
        sets[1] = mc.GroupedFp4Operands(act.codes, act.scales, bank.codes, bank.scales, d2)
        paired.execute(stream, sets[0], sets[1], *routing)  # disjoint outputs run
        assert paired.read_error_flag() == 0
    assert not np.isnan(download(context, stream, d2).astype(np.float32)).any()
    for b in (*routing, d, d2):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


def test_the_scale_pair_variants_need_2_byte_aligned_bank_scales_when_k_is_a_multiple_of_32(context, stream, pool,
                                                                                           rng) -> None:
    """fp4_vector.cu reads two adjacent blocks' scale bytes as one 16-bit word (K % 32 == 0), and so does
    fp4_grouped.cu's split_k (MIRCUDA_MOE_SCALE_PAIRS): an odd address is refused by name, before anything is
    enqueued; aligned, both variants agree."""
    experts, n, k, capacity = 2, 64, 256, 4
    bank = Bank(context, stream, pool, rng, experts, n, k, "linear")
    act = Activations(context, stream, pool, rng, capacity, k)
    routing = [upload(context, stream, pool, np.array(x, np.int32)) for x in ([2, 2], [0, 2], [0, 1])]
    per = len(bank.scales)
    shifted = pool.allocate(mc.e4m3, stream, per + 1)
    stream.copy_device_range(bank.scales, 0, shifted, 1, per)
    odd = mc.from_cuda_array_interface(RawView(shifted.handle + 1, per, "|V1"), context, stream, dtype=mc.e4m3)
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, 2, experts)
    results = []
    for variant in ("vector", "split_k"):
        d = poisoned(context, stream, pool, capacity * n)
        with mc.VariableGroupedFp4Plan(context, stream, spec, variant=variant, scale_layout="linear") as plan:
            args = (act.codes, act.scales, bank.codes, odd, d, *routing)
            with pytest.raises(mc.ContractError) as info:
                plan.execute(stream, *args)
            assert info.value.argument == "b_scales" and "16-bit loads" in str(info.value)
            assert np.isnan(download(context, stream, d).astype(np.float32)).all(), "a refused execute wrote"
            plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing)
            results.append(download(context, stream, d))
        d.free(stream)
    np.testing.assert_allclose(results[0].astype(np.float32), results[1].astype(np.float32), rtol=1e-2, atol=1e-2)
    for b in (*routing, shifted):
        b.free(stream)
    bank.free(stream)
    act.free(stream)


# -- the decode_grouped path (SM90: BF16 decode + the grouped BF16 CUTLASS kernel) ----------------------------

def needs_decode_grouped(context) -> None:
    """Skip unless the decode_grouped path runs here: cc 9.0 and a CUTLASS library with the grouped BF16 kernels
    (``python -m mircuda build-cutlass --arch 90a``, or MIRCUDA_CUTLASS_LIBRARY)."""
    from mircuda.matmul._library import load_library
    from mircuda.matmul._moe_grouped_dense import decode_grouped_why_not

    cc = context.device_info().compute_capability
    try:
        lib = load_library()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    why = decode_grouped_why_not(lib, (cc[0], cc[1]), 256, 512)
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("experts, topk, tokens, n, k, layout", [
    (8, 2, 4096, 512, 2048, "tiled"),    # 1024 rows per group: cooperative; whole tiled bank in one decode
    (8, 2, 1, 264, 512, "tiled"),        # six empty groups; N % 128 != 0: the bank decoded matrix by matrix
    (8, 2, 7, 256, 96, "linear"),        # K = 96: three K blocks of 32
    (64, 8, 256, 256, 512, "linear"),    # 32 rows per group: ping-pong; forced below the automatic threshold
], ids=str)
def test_the_decode_grouped_path_matches_float64(context, stream, pool, rng, experts, topk, tokens, n, k,
                                                 layout) -> None:
    needs_decode_grouped(context)
    run_variable(context, stream, pool, rng, experts=experts, topk=topk, tokens=tokens, n=n, k=k, layout=layout,
                 path="decode_grouped")


def test_the_automatic_choice_takes_decode_grouped_for_many_rows_per_group(context, stream, pool) -> None:
    needs_decode_grouped(context)
    from mircuda.matmul._moe_grouped_dense import DECODE_GROUPED_MIN_ROWS

    many = mc.VariableGroupedFp4Spec(256, 512, 8 * DECODE_GROUPED_MIN_ROWS, 8, 8)
    few = mc.VariableGroupedFp4Spec(256, 512, 8 * DECODE_GROUPED_MIN_ROWS - 1, 8, 8)
    with mc.VariableGroupedFp4Plan(context, stream, many) as plan:
        assert plan.path == "decode_grouped" and "sm90_grouped_" in plan.describe()
    with mc.VariableGroupedFp4Plan(context, stream, few) as plan:
        assert plan.path == "portable" and f"< {DECODE_GROUPED_MIN_ROWS}" in plan.describe()
    with mc.VariableGroupedFp4Plan(context, stream, many, variant="staged") as plan:
        assert plan.path == "portable"
    with mc.VariableGroupedFp4Plan(context, stream, many, path="portable") as plan:
        assert plan.path == "portable"
    with pytest.raises(mc.ContractError) as info:
        mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(256, 528, 64, 1, 1),
                                  path="decode_grouped")  # K % 32 != 0
    assert info.value.argument == "path"


@pytest.mark.parametrize("rows, products, bank_size", [(64, 9, 4), (100, 7, 3)], ids=str)
def test_the_indexed_plan_on_decode_grouped_takes_repeated_indices(context, stream, pool, rng, rows, products,
                                                                    bank_size) -> None:
    needs_decode_grouped(context)

    def check(plan: Any) -> None:
        assert plan.path == "decode_grouped"  # R >= 64 rows per product: the automatic choice

    run_indexed(context, stream, pool, rng, n=256, k=512, rows=rows, products=products, bank_size=bank_size,
                check_plan=check)


def test_the_paired_plan_on_decode_grouped_runs_both_banks_in_one_grouped_launch(context, stream, pool, rng) -> None:
    needs_decode_grouped(context)

    def check(plan: Any) -> None:
        assert "2 x 8 groups in one launch" in plan.describe()

    run_paired(context, stream, pool, rng, tokens=300, check_plan=check, path="decode_grouped")


def test_decode_grouped_graph_replays_follow_routing_rewritten_on_the_device(context, stream, pool, rng) -> None:
    needs_decode_grouped(context)
    run_graph_replays(context, stream, pool, rng, tokens=300, n=256, k=512, shrink=50, replays=4, one_group_last=True,
                      path="decode_grouped")


def test_decode_grouped_invalid_routing_sets_the_error_flag_and_the_other_groups_stay_correct(
        context, stream, pool, rng) -> None:
    needs_decode_grouped(context)
    experts, n, k, capacity = 4, 256, 512, 256
    bank = Bank(context, stream, pool, rng, experts, n, k, "tiled")
    act = Activations(context, stream, pool, rng, capacity, k)
    cases = [  # (counts, offsets, indices, bits)
        ([64, 64, 64, 64], [0, 64, 128, 192], [0, 1, 2, 3], 0),
        ([64, 64, 64, 64], [0, 64, 128, 192], [0, 4, 2, -1], mc.matmul.ERROR_MATRIX_INDEX),
        ([64, -3, 64, 64], [0, 64, 250, 192], [0, 1, 2, 3], mc.matmul.ERROR_ROWS),
        ([64, 2**30, 8, 8], [-1, 8, 16, 2**31 - 4], [0, 1, 7, 3], mc.matmul.ERROR_ROWS | mc.matmul.ERROR_MATRIX_INDEX),
        ([0, 0, 256, 0], [0, 0, 0, 0], [0, 0, 3, 0], 0),
    ]
    plan = mc.VariableGroupedFp4Plan(context, stream, mc.VariableGroupedFp4Spec(n, k, capacity, 4, experts),
                                     path="decode_grouped")
    routing = [pool.allocate(mc.i32, stream, 4) for _ in range(3)]
    alphas = (act.global_ * bank.global_).astype(np.float64)
    for counts, offsets, indices, bits in cases:
        host = [np.array(x, np.int32) for x in (counts, offsets, indices)]
        for buf, values in zip(routing, host):
            write(context, stream, buf, values)
        d = poisoned(context, stream, pool, capacity * n)
        plan.execute(stream, act.codes, act.scales, bank.codes, bank.scales, d, *routing, global_a=act.global_buf,
                     global_b=bank.global_buf)
        got = download(context, stream, d)
        assert plan.read_error_flag() == bits
        assert plan.read_error_flag() == 0
        check_output(got, *expected(act.value, bank.value, *host, alphas, capacity, n))
        d.free(stream)
    plan.close()
    for b in routing:
        b.free(stream)
    bank.free(stream)
    act.free(stream)


def test_decode_grouped_plans_run_from_numba_njit(context, stream, pool, rng) -> None:
    numba = pytest.importorskip("numba")
    needs_decode_grouped(context)
    experts, topk, tokens, n, k = 8, 2, 200, 264, 512  # N % 128 != 0: matrix-by-matrix decode in the executor
    capacity = tokens * topk + TAIL
    counts, offsets, indices = topk_routing(rng, tokens, experts, topk)
    routing = [upload(context, stream, pool, x) for x in (counts, offsets, indices)]
    banks = [Bank(context, stream, pool, rng, experts, n, k, "tiled") for _ in range(2)]
    act = Activations(context, stream, pool, rng, capacity, k)
    spec = mc.VariableGroupedFp4Spec(n, k, capacity, experts, experts)
    variable = mc.VariableGroupedFp4Plan(context, stream, spec, path="decode_grouped")
    paired = mc.PairedVariableGroupedFp4Plan(context, stream, spec, path="decode_grouped")
    ds = [poisoned(context, stream, pool, capacity * n) for _ in range(3)]
    run_v, run_p = variable.numba_execute, paired.numba_execute
    h = [r.handle for r in routing]

    @numba.njit
    def both(s, a, sa, b1, sb1, b2, sb2, d0, d1, d2, rc, of, mi, ga, gb1, gb2):
        status = run_v(s, a, sa, b1, sb1, d0, rc, of, mi, ga, gb1, 2.0)
        status |= run_p(s, rc, of, mi, a, sa, b1, sb1, d1, ga, gb1, 1.0, a, sa, b2, sb2, d2, ga, gb2, 0.5)
        return status

    assert both(stream.handle, act.codes.handle, act.scales.handle, banks[0].codes.handle, banks[0].scales.handle,
                banks[1].codes.handle, banks[1].scales.handle, ds[0].handle, ds[1].handle, ds[2].handle, *h,
                act.global_buf.handle, banks[0].global_buf.handle, banks[1].global_buf.handle) == 0
    for d, bank, alpha in ((ds[0], banks[0], 2.0), (ds[1], banks[0], 1.0), (ds[2], banks[1], 0.5)):
        got = download(context, stream, d)
        al = (np.float32(alpha) * act.global_ * bank.global_).astype(np.float64)
        check_output(got, *expected(act.value, bank.value, counts, offsets, indices, al, capacity, n))
    assert variable.read_error_flag() == 0 and paired.read_error_flag() == 0
    variable.close()
    paired.close()
    for b in (*routing, *ds):
        b.free(stream)
    for x in (*banks, act):
        x.free(stream)
