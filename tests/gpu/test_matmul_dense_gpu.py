"""DenseMatmulPlan on the GPU: every kernel family on shapes that select it (the SM80-style TensorOp
kernels, the SM120 path, are forced: they are compiled for sm_90a too; so are the CUTLASS kernels for
M <= 16, where the batched GEMV is chosen: see test_matmul_gemv_gpu.py), fp16/bf16/f32-out,
alpha/beta, odd shapes, against float64 numpy with poisoned outputs and fresh random data; and the
Numba-callable executors of both dense plans."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close, assert_still_poisoned, name, poison, random, run
from mircuda.matmul._tuned import lookup, packaged_table

PAIRS = [(mc.bf16, None), (mc.bf16, mc.f32), (mc.f16, None), (mc.f16, mc.f32)]
PAIR_IDS = ["bf16", "bf16-f32", "f16", "f16-f32"]


NVRTC_FAMILIES = ("dense_vector", "batched_gemv")
"""Families NVRTC compiles at plan construction: their tests run without the CUTLASS library."""


def _needs(m: int, n: int, k: int, family: str) -> pytest.param:  # type: ignore[valid-type]
    marks = () if family in NVRTC_FAMILIES else (pytest.mark.cutlass,)
    return pytest.param(m, n, k, family, marks=marks, id=f"{m}-{n}-{k}-{family}")


SELECTED = [_needs(*case) for case in [  # (M, N, K, the family the plan must pick on an H200)
    (1, 1024, 512, "dense_vector"), (1, 37, 1003, "dense_vector"), (1, 4096, 14336, "tuned"),
    (16, 4096, 4096, "batched_gemv"), (7, 9, 13, "batched_gemv"), (16, 4096, 14336, "batched_gemv"),
    (17, 1024, 512, "sm90_swapped"), (64, 264, 2048, "sm90_swapped"), (65, 384, 512, "sm90_pingpong"),
    (300, 1032, 1000, "sm90_pingpong"), (1024, 512, 512, "sm90_cooperative"), (1029, 264, 136, "sm90_cooperative"),
    (4096, 4096, 4096, "tuned"), (256, 4096, 14336, "tuned"), (48, 14336, 4096, "tuned"),
    (33, 100, 30, "simt"), (17, 64, 63, "simt"),
]]
"""K = 14336 (a 7B model's MLP down projection) and the 4096 cube reach the largest K and M the
kernels are run at; the others cover tile edges (odd M, N, K). "tuned": shapes of the packaged
measured table (``mircuda/matmul/tuned/sm90_dense.json``), whose kernel the plan must take on an H200;
the other shapes are more than 2x from every measured one, so the rules pick."""


@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("m, n, k, family", SELECTED)
def test_selected_kernels_match_float64(context, stream, pool, rng, input, output, m, n, k, family) -> None:
    if context.device_info().compute_capability != (9, 0) and family.startswith("sm90"):
        pytest.skip("an SM90 family")
    alpha = float(rng.uniform(0.5, 2.0))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, alpha, 0.0)
    if family == "tuned":
        if context.device_info().compute_capability != (9, 0):
            pytest.skip("the packaged table is an H200's")
        table = packaged_table((9, 0))
        out_t = input if output is None else output
        measured = table is not None and lookup(table.entries, m, n, k, name(input), name(out_t)) is not None
        # a type pair the table lacks (f16 -> f32: not swept) follows the rules
        assert ("measured fastest on" in str(plan.describe())) == measured, plan.describe()
    else:
        assert plan.kernel.family == family, plan.describe()
    assert_close(got, want, mag, out)


MIDDLE = ["sm90_swap_128x64x128_splitk", "sm90_swap_128x128x64_splitk", "sm90_coop_128x128x64_streamk",
          "sm90_pingpong_128x128x64", "sm90_coop_128x192x64"]
"""The SM90 kernels added for the middle M (issue 16's measured table)."""


@pytest.mark.cutlass
@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("prefix", MIDDLE)
@pytest.mark.parametrize("m, n, k, splits", [(37, 136, 264, 3), (129, 1032, 1000, 2), (300, 520, 1024, 5),
                                             (1029, 264, 136, None), (96, 4096, 4096, 16)],
                         ids=lambda v: str(v))
def test_middle_m_kernels_match_float64(context, stream, pool, rng, library, input, output, prefix, m, n, k,
                                        splits) -> None:
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("SM90 kernels")
    out_t = input if output is None else output
    kernel = f"{prefix}_{name(input)}_{name(out_t)}"
    split = splits if "splitk" in prefix else None
    k_tiles = -(-k // (128 if "x128_splitk" in prefix else 64))
    if split is not None:
        split = min(split, k_tiles)
    alpha, beta = float(rng.uniform(0.5, 2.0)), float(rng.uniform(-1.0, 1.0))
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, alpha, beta, kernel=kernel,
                                    splits=split)
    assert plan.kernel_name == kernel and (split is None or plan.splits == split)
    assert_close(got, want, mag, out)


DECODE_CUTLASS = [  # (M, N, K, the CUTLASS kernel forced in place of the batched GEMV)
    (1, 1024, 512, "sm90_swap_128x32x128_splitk"), (5, 768, 1024, "sm90_swap_128x32x128_splitk"),
    (16, 4096, 4096, "sm90_swap_128x32x128_splitk"), (7, 9, 13, "simt_128x128x8_2stage"),
    (16, 64, 63, "simt_128x128x8_2stage"),
]


@pytest.mark.cutlass
@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("m, n, k, prefix", DECODE_CUTLASS, ids=lambda v: str(v))
def test_cutlass_decode_kernels_stay_reachable(context, stream, pool, rng, library, input, output, m, n, k,
                                               prefix) -> None:
    if context.device_info().compute_capability != (9, 0) and prefix.startswith("sm90"):
        pytest.skip("an SM90 kernel")
    out_t = input if output is None else output
    kernel = f"{prefix}_{name(input)}_{name(out_t)}"
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, 1.25, 0.0, kernel=kernel)
    assert plan.kernel_name == kernel and plan.kernel.origin == "cutlass"
    assert_close(got, want, mag, out)


@pytest.mark.cutlass
@pytest.mark.parametrize("kernel, m, pdl", [("sm90_pingpong_64x128x64_bf16_bf16", 256, True),
                                            ("sm90_coop_128x256x64_c2x1_bf16_bf16", 2048, True),
                                            ("sm90_swap_128x32x128_splitk_bf16_bf16", 128, True),
                                            ("sm90_coop_128x192x64_streamk_swz1_bf16_bf16", 384, True),
                                            ("sm80_tensorop_64x64x64_5stage_bf16_bf16", 256, False),
                                            # the ping-pong 64x128 kernel's variant that never launches so
                                            ("sm90_pingpong_64x128x64_nopdl_bf16_bf16", 256, False)])
def test_sm90_cutlass_kernels_launch_programmatically(context, stream, library, kernel, m, pdl) -> None:
    # DenseMatmulPlan launches a CUTLASS kernel with programmatic dependent launch where the kernel waits for the
    # previous grid (the SM90 families, split-K and stream-K ones included since 2026-12-03; not the SM80 kernels) and
    # says so; test_matmul_chain_gpu.py checks that such chains still read finished outputs.
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("the SM90 families")
    with mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, 4096, 4096), kernel=kernel,
                            library=library) as plan:
        assert plan.kernel_name == kernel
        assert plan.programmatic_launch is pdl
        assert ("programmatic dependent launch" in str(plan.describe())) is pdl


@pytest.mark.cutlass
@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
def test_the_nopdl_variant_computes_what_its_kernel_computes(context, stream, pool, rng, library, input,
                                                           output) -> None:
    # sm90_pingpong_64x128x64_nopdl_* is the ping-pong 64x128 kernel under its own schedule, launched without
    # programmatic dependent launch (instance.cuh): the float64 bound at M = 192 on 4096x14336, where it was
    # measured, and the launch it says
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("an SM90 kernel")
    out_t = input if output is None else output
    kernel = f"sm90_pingpong_64x128x64_nopdl_{name(input)}_{name(out_t)}"
    plan, got, want, mag, out = run(context, stream, pool, rng, 192, 4096, 14336, input, output, 0.75, 0.5,
                                    kernel=kernel)
    assert plan.kernel_name == kernel and not plan.programmatic_launch
    assert "programmatic dependent launch" not in str(plan.describe())
    assert_close(got, want, mag, out)


TENSOROP = ["sm80_tensorop_32x128x64_4stage", "sm80_tensorop_64x64x64_5stage", "sm80_tensorop_128x128x32_4stage"]


@pytest.mark.cutlass
@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("prefix", TENSOROP)
@pytest.mark.parametrize("m, n, k", [(1, 4096, 512), (37, 136, 264), (300, 520, 1024)])
def test_sm120_path_kernels_match_float64(context, stream, pool, rng, library, input, output, prefix, m, n, k) -> None:
    out_t = input if output is None else output
    kernel = f"{prefix}_{name(input)}_{name(out_t)}"
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, 1.0, 0.0, kernel=kernel)
    assert plan.kernel_name == kernel
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("input, output", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("m", [1, pytest.param(200, marks=pytest.mark.cutlass),
                               pytest.param(2048, marks=pytest.mark.cutlass)])
def test_alpha_and_beta(context, stream, pool, rng, input, output, m) -> None:
    alpha, beta = float(rng.uniform(-2, -0.5)), float(rng.uniform(0.25, 1.5))
    _, got, want, mag, out = run(context, stream, pool, rng, m, 520, 776, input, output, alpha, beta)
    assert_close(got, want, mag, out)


@pytest.mark.cutlass
def test_every_kernel_of_the_device_runs_a_shape(context, stream, pool, rng, library) -> None:
    cc = context.device_info().compute_capability
    for k in library.kernels:
        if not k.runs_on(cc):
            continue
        in_t, out_t = getattr(mc, k.input), getattr(mc, k.output)
        _plan, got, want, mag, out = run(context, stream, pool, rng, 19, 136, 520, in_t,
                                         None if out_t is in_t else out_t, 0.75, 0.5, kernel=k.name)
        assert_close(got, want, mag, out)


@pytest.mark.cutlass
def test_split_k_takes_its_workspace_from_the_pool_at_construction(context, stream, library) -> None:
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("the split-K kernel is SM90's")
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(1, 4096, 4096),
                              kernel="sm90_swap_128x32x128_splitk_bf16_bf16")
    assert plan.splits > 1 and plan.workspace_bytes > 0
    assert plan._workspace.nbytes >= plan.workspace_bytes and plan._workspace.context is context
    text = plan.describe()
    assert plan.kernel_name in text and "Why:" in text and f"{plan.splits} K slices" in text
    plan.close()
    plan.close()
    with pytest.raises(mc.ClosedResourceError):
        plan.execute(stream, None, None, None)


def test_operands_are_checked_before_anything_is_enqueued(context, stream, pool, rng) -> None:
    """Each refused call raises naming the operand and enqueues nothing (the poisoned outputs stay
    poison; the same buffers, accepted, are written). M = 4: the batched GEMV, no library needed."""
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(4, 64, 128), input=mc.f16, output=mc.f32)
    a = upload(context, stream, pool, random(rng, mc.f16, 4 * 128))
    b = upload(context, stream, pool, random(rng, mc.f16, 64 * 128))
    c = upload(context, stream, pool, poison(mc.f32, 4 * 64))
    short = upload(context, stream, pool, poison(mc.f16, 64 * 128 - 8))
    half_c = upload(context, stream, pool, poison(mc.f16, 4 * 64))
    for args, argument in [((a, short, c), "b"), ((a, b, half_c), "c"), ((c, b, c), "a"), ((a, b, c, None), "alpha")]:
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args)
        assert info.value.argument == argument
        assert_still_poisoned(context, stream, c, short, half_c)
    plan.execute(stream, a, b, c)
    assert np.isfinite(download(context, stream, c)).all()
    for buf in (a, b, c, short, half_c):
        buf.free(stream)


@pytest.mark.cutlass
def test_an_unknown_kernel_name_is_refused(context, stream, library) -> None:
    # With the library loaded the name is looked up in its table too (without it: CutlassNotFound).
    with pytest.raises(mc.ContractError, match="kernel"):
        mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(4, 64, 128), kernel="no_such_kernel")


@pytest.mark.parametrize("m, family", [(1, "dense_vector"), (16, "batched_gemv"),
                                       pytest.param(256, "cutlass", marks=pytest.mark.cutlass)])
def test_plans_run_from_numba_njit_loops(context, stream, pool, rng, m, family) -> None:
    import numba
    n, k, steps = 1024, 512, 3
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k))
    assert plan.kernel.family == family or plan.kernel.origin == family == "cutlass", plan.describe()
    vector = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k))
    a = random(rng, mc.bf16, m, k)
    bs = [random(rng, mc.bf16, n, k) for _ in range(steps)]
    ba = upload(context, stream, pool, a.ravel())
    bbs = [upload(context, stream, pool, b.ravel()) for b in bs]
    cs = [upload(context, stream, pool, poison(mc.bf16, m * n)) for _ in range(steps)]
    ys = [upload(context, stream, pool, poison(mc.bf16, n)) for _ in range(steps)]
    matmul, gemv = plan.numba_execute, vector.numba_execute

    @numba.njit
    def loop(stream_handle, a_ptr, b_ptrs, c_ptrs, y_ptrs):
        status = 0
        for i in range(len(b_ptrs)):
            status |= matmul(stream_handle, a_ptr, b_ptrs[i], c_ptrs[i], 1.0, 0.0)
            status |= gemv(stream_handle, a_ptr, b_ptrs[i], y_ptrs[i], 1.0, 0.0)  # row 0 of A as x
        return status

    handles = lambda bufs: np.array([x.handle for x in bufs], dtype=np.uint64)  # noqa: E731
    assert loop(stream.handle, ba.handle, handles(bbs), handles(cs), handles(ys)) == 0
    for b, c, y in zip(bs, cs, ys):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        got = download(context, stream, c).reshape(m, n)
        assert_close(got, a64 @ b64.T, np.abs(a64) @ np.abs(b64).T, "bf16")
        assert_close(download(context, stream, y), b64 @ a64[0], np.abs(b64) @ np.abs(a64[0]), "bf16")
    for buf in [ba, *bbs, *cs, *ys]:
        buf.free(stream)


@pytest.mark.cutlass
def test_a_table_of_your_own_sweep_decides_through_the_variable(context, stream, pool, rng, library, tmp_path,
                                                                monkeypatch) -> None:
    # $MIRCUDA_DENSE_TABLE: the table `matmul-profile --sweep --table PATH` wrote, instead of the packaged one
    import json

    from mircuda.matmul._tuned import TABLE_ENV, TunedEntry, TunedTable

    info = context.device_info()
    if info.compute_capability != (9, 0):
        pytest.skip("SM90 kernels")
    kernel = "sm90_coop_128x192x64_bf16_bf16"  # the packaged table has no shape near 1024x1024: the rules pick
    mine = TunedTable(info.name, (9, 0), info.multiprocessor_count, "2026-12-03", "sweep",
                      (TunedEntry("bf16", "bf16", 1024, 1024, 200, kernel, 1, 9.0, 10.0),))
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(mine.to_json()))
    monkeypatch.setenv(TABLE_ENV, str(path))
    plan, got, want, mag, out = run(context, stream, pool, rng, 200, 1024, 1024, mc.bf16, None, 1.0, 0.0)
    assert plan.kernel.name == kernel and str(path) in str(plan.describe()), plan.describe()
    assert_close(got, want, mag, out)
    monkeypatch.delenv(TABLE_ENV)
    assert mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(200, 1024, 1024)).kernel.name != kernel
