"""DenseVectorPlan on the GPU: y = alpha W x + beta y against float64 numpy, every dtype pair, both
kernel variants (16-byte loads and any K), odd shapes, alpha/beta, poisoned outputs, fresh data."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close, assert_still_poisoned, name, poison, random, split_guard, with_guard
from mircuda.matmul._vector import takes_two_chunks

PAIRS = [(mc.bf16, None), (mc.bf16, mc.f32), (mc.f16, None), (mc.f16, mc.f32)]
SHAPES = [(4096, 4096), (1000, 1000), (8, 256), (13, 7), (37, 1003), (300, 4104), (1, 8), (14336, 64)]


def run(context, stream, pool, rng, n, k, input, output, alpha, beta, warps=None, rows=None):
    out_t = input if output is None else output
    x, w = random(rng, input, k), random(rng, input, n, k)
    y0 = random(rng, out_t, n) if beta else poison(out_t, n)
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k), input=input, output=output, warps=warps,
                              rows=rows)
    bx, bw = upload(context, stream, pool, x), upload(context, stream, pool, w.ravel())
    by = upload(context, stream, pool, with_guard(y0))  # y, then a poisoned band that must stay untouched
    plan.execute(stream, bx, bw, by, alpha, beta)
    got = split_guard(download(context, stream, by), n)
    w64, x64, y64 = w.astype(np.float64), x.astype(np.float64), y0.astype(np.float64)
    want = alpha * (w64 @ x64) + (beta * y64 if beta else 0.0)
    magnitude = abs(alpha) * (np.abs(w64) @ np.abs(x64)) + (abs(beta) * np.abs(y64) if beta else 0.0)
    for b in (bx, bw, by):
        b.free(stream)
    return plan, got, want, magnitude, name(out_t)


@pytest.mark.parametrize("input, output", PAIRS, ids=lambda t: "same" if t is None else name(t))
@pytest.mark.parametrize("n, k", SHAPES, ids=lambda v: str(v))
def test_matches_float64(context, stream, pool, rng, input, output, n, k) -> None:
    alpha = float(rng.uniform(0.5, 2.0))
    plan, got, want, mag, out = run(context, stream, pool, rng, n, k, input, output, alpha, 0.0)
    assert_close(got, want, mag, out)
    assert plan.kernel.contract.symbol.endswith("_v16" if k % 8 == 0 else "_any")


@pytest.mark.parametrize("input, output", PAIRS, ids=lambda t: "same" if t is None else name(t))
def test_beta_accumulates_into_y(context, stream, pool, rng, input, output) -> None:
    alpha, beta = float(rng.uniform(-2, -0.5)), float(rng.uniform(0.25, 1.5))
    _, got, want, mag, out = run(context, stream, pool, rng, 777, 2056, input, output, alpha, beta)
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("warps", [1, 2, 4, 8])
@pytest.mark.parametrize("n, k", [(520, 3080), (37, 1003)], ids=str)
def test_every_row_count_and_split_of_k_gives_the_same_answer(context, stream, pool, rng, rows, warps, n, k) -> None:
    plan, got, want, mag, out = run(context, stream, pool, rng, n, k, mc.bf16, mc.f32, 1.0, 0.5, warps=warps, rows=rows)
    assert plan.warps == warps and plan.rows == rows
    assert plan.launch_config.block[0] == 32 * warps and plan.launch_config.grid[0] == -(-n // rows)
    assert_close(got, want, mag, out)


@pytest.mark.parametrize("n, rows", [(4096, 8), (14336, 8), (1024, 8), (2048, 16)])
def test_describe_names_the_kernel_and_the_split(context, stream, n, rows) -> None:
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, 4096))
    text = plan.describe()
    assert "dense_vector_bf16_bf16_v16" in text and f"{plan.warps} warp" in text
    two = takes_two_chunks(n, 4096, context.device_info().multiprocessor_count,
                           context.device_info().compute_capability, True)
    assert ("DENSE_VECTOR_UNROLL=2" in text) is two and ("two 256-column chunks" in text) is two
    if context.device_info().multiprocessor_count == 132:  # the H200 rows of the rules
        assert plan.rows == rows and f"{n // rows} blocks" in text and f"DENSE_VECTOR_ROWS={rows}" in text
        assert two is (n == 4096)


@pytest.mark.parametrize("static_weights", [False, True])
@pytest.mark.parametrize("input, output", PAIRS, ids=lambda t: "same" if t is None else name(t))
@pytest.mark.parametrize("n, k", [(4096, 4096), (4100, 4104), (6144, 4096), (5003, 14336)], ids=str)
def test_the_two_chunk_form_matches_float64(context, stream, pool, rng, input, output, n, k, static_weights) -> None:
    """The default where takes_two_chunks says so (an H200: 3.5 to 6 blocks of 8 rows per SM), with partial
    row blocks, a K that ends inside a step, alpha and beta."""
    info = context.device_info()
    if not takes_two_chunks(n, k, info.multiprocessor_count, info.compute_capability, True):
        pytest.skip("the two-chunk form is the default on cc 9.x with 3.5 to 6 blocks of 8 rows per SM")
    out_t = input if output is None else output
    x, w, y0 = random(rng, input, k), random(rng, input, n, k), random(rng, out_t, n)
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k), input=input, output=output,
                              static_weights=static_weights)
    assert plan.rows == 8 and plan.warps == 4 and "DENSE_VECTOR_UNROLL=2" in plan.describe()
    bx, bw = upload(context, stream, pool, x), upload(context, stream, pool, w.ravel())
    by = upload(context, stream, pool, with_guard(y0))
    plan.execute(stream, bx, bw, by, -1.5, 0.75)
    got = split_guard(download(context, stream, by), n)
    w64, x64, y64 = w.astype(np.float64), x.astype(np.float64), y0.astype(np.float64)
    assert_close(got, -1.5 * (w64 @ x64) + 0.75 * y64, 1.5 * (np.abs(w64) @ np.abs(x64)) + 0.75 * np.abs(y64),
                 name(out_t))
    for b in (bx, bw, by):
        b.free(stream)


def test_operands_are_checked_before_anything_is_enqueued(context, stream, pool, rng) -> None:
    """Each refused call raises naming the operand and enqueues nothing: the poisoned outputs (and
    the refused operands) are still poison afterwards, while valid inputs would have written them."""
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(64, 128), input=mc.f16)
    x = upload(context, stream, pool, random(rng, mc.f16, 128))
    w = upload(context, stream, pool, random(rng, mc.f16, 64 * 128))
    y = upload(context, stream, pool, poison(mc.f16, 64))
    short = upload(context, stream, pool, poison(mc.f16, 64 * 128 - 1))
    wrong = upload(context, stream, pool, poison(mc.bf16, 64))
    cases = [((x, short, y), "w"), ((x, w, wrong), "y"), ((np.zeros(128, np.float16), w, y), "x"),
             ((y, w, y), "x")]
    for args, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args)
        assert info.value.argument == argument
        assert_still_poisoned(context, stream, y, short, wrong)
    with pytest.raises(mc.ContractError, match="alpha"):
        plan.execute(stream, x, w, y, "1")
    assert_still_poisoned(context, stream, y, short, wrong)
    short.free(stream)
    with pytest.raises(mc.UseAfterFree):
        plan.execute(stream, x, short, y)
    assert_still_poisoned(context, stream, y, wrong)
    plan.execute(stream, x, w, y)  # the same buffers, accepted: the output is written
    assert np.isfinite(download(context, stream, y).astype(np.float32)).all()
    for b in (x, w, y, wrong):
        b.free(stream)


def test_construction_checks_its_arguments(context, stream) -> None:
    spec = mc.DenseVectorSpec(8, 8)
    with pytest.raises(mc.ContractError, match="spec"):
        mc.DenseVectorPlan(context, stream, (8, 8))
    with pytest.raises(mc.ContractError, match="warps"):
        mc.DenseVectorPlan(context, stream, spec, warps=3)
    for rows in (4, 8.0, True):
        with pytest.raises(mc.ContractError, match="rows"):
            mc.DenseVectorPlan(context, stream, spec, rows=rows)
    with pytest.raises(mc.ContractError, match="stream"):
        mc.DenseVectorPlan(context, None, spec)
    with pytest.raises(mc.ContractError, match="compiler"):
        mc.DenseVectorPlan(context, stream, spec, compiler=object())


@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_a_given_split_of_k_alone_gets_its_rows_from_the_rule(context, stream, warps) -> None:
    # 16 rows only with four or more warps whose grid fits one wave; with 1 or 2 warps always 8.
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(4096, 4096), warps=warps)
    assert plan.warps == warps and plan.launch_config.grid[0] == 4096 // plan.rows
    if warps < 4:
        assert plan.rows == 8
    if context.device_info().multiprocessor_count == 132:  # H200: 256 blocks of 16 rows fit one wave at 4 warps, not 8
        assert plan.rows == {4: 16, 8: 8}.get(warps, 8)
