"""``static_weights=True`` on the GPU: the promise that no running kernel writes the weights lets the decode
kernels load their first step of weights before ``griddepcontrol.wait``; the results are those of the plans
without it (float64 references, poisoned outputs), activations written by the kernel just before are still read
after it finishes (a chain of promised plans, direct and in a graph), the njit executor runs the same kernel, and
anything but a bool is refused by name; the same for the NVFP4 plans, whose integer path (decode="dp4a") loads its first ring
of weight codes and scales early and whose outputs are bit for bit those without the promise."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close, poison, random, run

pytestmark = pytest.mark.gpu


def preloads(context, k) -> bool:  # type: ignore[no-untyped-def]
    return context.device_info().compute_capability >= (9, 0) and k % 8 == 0


@pytest.mark.parametrize("m", [1, 2, 9, 16])
@pytest.mark.parametrize("n, k", [(520, 2056), (37, 1003), (4096, 4096), (1000, 14336)], ids=str)
@pytest.mark.parametrize("input, output", [(mc.bf16, None), (mc.f16, mc.f32)], ids=["bf16", "f16-f32"])
def test_a_promised_plan_gives_the_float64_result(context, stream, pool, rng, m, n, k, input, output) -> None:
    plan, got, want, mag, out = run(context, stream, pool, rng, m, n, k, input, output, 1.25, 0.0, static_weights=True)
    assert_close(got, want, mag, out)
    text = str(plan.describe())
    assert "MIRCUDA_PRELOAD_WEIGHTS=1" in text
    assert ("loaded before griddepcontrol.wait" in text) is preloads(context, k), text


def test_beta_still_reads_c(context, stream, pool, rng) -> None:
    for m in (1, 16):
        _, got, want, mag, out = run(context, stream, pool, rng, m, 1000, 4104, mc.bf16, mc.f32, -0.75, 0.5,
                                     static_weights=True)
        assert_close(got, want, mag, out)


@pytest.mark.parametrize("rows, warps", [(8, 1), (8, 8), (16, 4), (16, 8)])
def test_the_vector_plan_with_every_row_count_and_the_njit_executor(context, stream, pool, rng, rows, warps) -> None:
    import numba

    n, k = 4100, 4096
    x, w = random(rng, mc.bf16, k), random(rng, mc.bf16, n, k)
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k), rows=rows, warps=warps, static_weights=True)
    bx, bw = upload(context, stream, pool, x), upload(context, stream, pool, w.ravel())
    by, bz = (upload(context, stream, pool, poison(mc.bf16, n)) for _ in range(2))
    plan.execute(stream, bx, bw, by)
    execute = plan.numba_execute

    @numba.njit
    def once(s, xp, wp, yp):  # type: ignore[no-untyped-def]
        return execute(s, xp, wp, yp, 1.0, 0.0)

    assert once(stream.handle, bx.handle, bw.handle, bz.handle) == 0
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    for buf in (by, bz):
        assert_close(download(context, stream, buf), w64 @ x64, np.abs(w64) @ np.abs(x64), "bf16")
    for buf in (bx, bw, by, bz):
        buf.free(stream)


@pytest.mark.parametrize("m", [1, 16])
def test_a_chain_of_promised_plans_reads_each_activation_after_its_producer(context, stream, pool, rng, m) -> None:
    # y1 = W1 x, y2 = W2 y1, y3 = W3 y2, back to back (programmatic dependent launch between them) and then as
    # one graph: each kernel's activations are the previous kernel's outputs, poisoned (NaN) until it writes them.
    dims = [2048, 4096, 1032, 4096]
    ws = [random(rng, mc.bf16, dims[i + 1], dims[i]) * np.float32(1 / 32) for i in range(3)]
    ws = [w.astype(mc.bf16) for w in ws]
    plans = [mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, dims[i + 1], dims[i]), static_weights=True)
             for i in range(3)]
    x = random(rng, mc.bf16, m, dims[0])
    bx = upload(context, stream, pool, x.ravel())
    bws = [upload(context, stream, pool, w.ravel()) for w in ws]
    ys = [pool.allocate(mc.bf16, stream, m * d) for d in dims[1:]]

    def chain(_: object = None) -> None:
        for plan, a, w, y in zip(plans, [bx] + ys[:2], bws, ys):
            plan.execute(stream, a, w, y)

    def poison_all() -> None:  # NaN into every activation and output before each run
        for y in ys:
            host = stream.context.allocate_pinned(mc.bf16, len(y))
            host.write_prefix(poison(mc.bf16, len(y)))
            stream.copy_to_device(host, y)
            stream.synchronize()  # the copy has read the pinned buffer before it is closed
            host.close()

    def check() -> None:
        inputs = [x] + [download(context, stream, y).reshape(m, d) for y, d in zip(ys[:2], dims[1:3])]
        for i, (w, y) in enumerate(zip(ws, ys)):
            a64, w64 = inputs[i].astype(np.float64), w.astype(np.float64)
            got = download(context, stream, y).reshape(m, dims[i + 1])
            assert_close(got, a64 @ w64.T, np.abs(a64) @ np.abs(w64).T, "bf16")

    graph = stream.capture([plans, bx, bws, ys], chain)
    try:
        for run_it in (chain, lambda: graph.launch(stream)):
            poison_all()
            run_it()
            check()
    finally:
        graph.close()
    for buf in [bx, *bws, *ys]:
        buf.free(stream)


@pytest.mark.parametrize("layout", ["linear", "tiled"])
@pytest.mark.parametrize("n, k, knobs", [(4096, 4096, {}), (300, 14336, {}), (14336, 4096, {}),
                                         (301, 96, {"decode": "dp4a", "rows": 8, "stages": 3}),
                                         (37, 1056, {"decode": "bytes"})], ids=str)
def test_a_promised_fp4_vector_plan_gives_the_float64_result(context, stream, pool, rng, layout, n, k, knobs) -> None:
    from test_matmul_fp4_gpu import run_vector

    run_vector(context, stream, pool, rng, n, k, "fp4", layout, static_weights=True, **knobs)


@pytest.mark.parametrize("m, n, k", [(1, 4100, 4096), (1, 8192, 4096), (2, 4096, 14336), (3, 301, 96), (9, 520, 2048)],
                         ids=str)
def test_promised_fp4_plans_write_the_same_bits_as_unpromised_ones(context, stream, pool, rng, m, n, k) -> None:
    # the promise moves loads before the wait and changes no arithmetic: the outputs are equal bit for bit
    from test_matmul_fp4_gpu import Operand, bf16_data, check_guard, poisoned

    a = Operand(context, stream, pool, bf16_data(rng, m, k), "tiled")
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "tiled")
    outs, texts = [], []
    for static in (False, True):
        plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout="tiled",
                                     static_weights=static)
        d = poisoned(context, stream, pool, m * n)
        plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                     global_b=b.global_buf, alpha=0.75)
        outs.append(check_guard(download(context, stream, d), m * n).view(np.uint16))
        texts.append(str(plan.describe()))
        d.free(stream)
    assert np.array_equal(outs[0], outs[1])
    assert "static weights" not in texts[0] and "static weights" in texts[1]
    # the define only where the integer path compiled (its define list names MIRCUDA_FP4_DP4A=1)
    assert ("MIRCUDA_PRELOAD_WEIGHTS=1" in texts[1]) is ("MIRCUDA_FP4_DP4A=1" in texts[1]), texts[1]
    for op in (a, b):
        op.free(stream)


@pytest.mark.parametrize("n, k, static, trigger, early", [
    (14336, 4096, True, None, True),       # 58.7 M weights >= 2^25: the promise takes the early trigger
    (4096, 14336, True, None, True),
    (8192, 4096, True, None, True),        # exactly 2^25
    (8184, 4096, True, None, False),       # just below
    (4096, 4096, True, None, False),       # 16.8 M: measured slower with it
    (14336, 4096, False, None, False),     # no promise: the late default
    (14336, 4096, True, "late", False),    # a given trigger stands
])
def test_the_promise_takes_the_early_trigger_on_large_fp4_weights_at_m_1(context, stream, n, k, static, trigger,
                                                                          early) -> None:
    from mircuda.matmul._fp4 import STATIC_EARLY_MIN_WEIGHTS

    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(n, k), static_weights=static,
                                       pdl_trigger=trigger)
    text = plan.describe()
    if not context.device_info().supports_programmatic_launch:
        pytest.skip("no programmatic dependent launch below cc 9.0: no trigger to choose")
    assert "decode=dp4a" in text or "MIRCUDA_FP4_DP4A=1" in text, text
    assert ("early trigger" in text) is early, text
    assert (f">= {STATIC_EARLY_MIN_WEIGHTS}" in text) is (early and trigger is None), text


@pytest.mark.parametrize("value", [1, None, "yes"])
@pytest.mark.parametrize("make", [
    lambda c, s, v: mc.DenseVectorPlan(c, s, mc.DenseVectorSpec(64, 64), static_weights=v),
    lambda c, s, v: mc.DenseMatmulPlan(c, s, mc.DenseMatmulSpec(4, 64, 64), static_weights=v),
    lambda c, s, v: mc.BlockScaledFp4VectorPlan(c, s, mc.DenseVectorSpec(64, 64), static_weights=v),
    lambda c, s, v: mc.BlockScaledFp4Plan(c, s, mc.DenseMatmulSpec(4, 64, 64), static_weights=v)],
    ids=["DenseVectorPlan", "DenseMatmulPlan", "BlockScaledFp4VectorPlan", "BlockScaledFp4Plan"])
def test_anything_but_a_bool_is_refused_by_name(context, stream, make, value) -> None:
    with pytest.raises(mc.ContractError, match="static_weights"):
        make(context, stream, value)
