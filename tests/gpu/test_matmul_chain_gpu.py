"""Decode chains: each GEMV reads the output of the kernel just before it on the stream.

On compute capability >= 9.0 the GEMV plans launch with programmatic dependent launch, so a kernel may
start while its predecessor still runs; these chains check that every stage still reads the finished
output of the stage before (poisoned NaN buffers expose an early read), launched directly and replayed
from a graph, with a plain CUDA C kernel in the middle of the chain.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from matmul_helpers import assert_close, poison, random

D = 2048  # square weights: each output is the next input
STAGES = 4
NEGATE = mc.cuda_kernel(r'''
#include <cuda_bf16.h>
extern "C" __global__ void negate(__nv_bfloat16* out, const __nv_bfloat16* in, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __hneg(in[i]);
}''', "negate.cu")
Negate = mc.cuda_export("negate", out=mc.Out[mc.DeviceBuffer[mc.bf16]], in_=mc.In[mc.DeviceBuffer[mc.bf16]], n=mc.u32)


def _check_stage(x: np.ndarray, w: np.ndarray, y: np.ndarray, m: int) -> None:
    x64, w64 = x.astype(np.float64).reshape(m, D), w.astype(np.float64)
    assert_close(y.reshape(m, D), x64 @ w64.T, np.abs(x64) @ np.abs(w64).T, "bf16")


def _sm90(kernel: str, m: int, splits: int | None) -> Any:
    return pytest.param(m, kernel, splits, id=f"{kernel}-{m}-splits{splits}", marks=pytest.mark.cutlass)


@pytest.mark.parametrize("m, family, splits", [
    pytest.param(1, None, None, id="DenseVectorPlan"),
    pytest.param(1, "dense_vector", None, id="DenseMatmulPlan-dense-vector"),
    pytest.param(4, "batched_gemv", None, id="DenseMatmulPlan-batched-gemv"),
    # CUTLASS kernels (SM90 tensor-op kernels on an H200), whatever launch attributes their runners use
    pytest.param(256, "cutlass", None, id="DenseMatmulPlan-cutlass-256", marks=pytest.mark.cutlass),
    pytest.param(2048, "cutlass", None, id="DenseMatmulPlan-cutlass-2048", marks=pytest.mark.cutlass),
    # the stream-K scheduler's three decompositions, each launched programmatically on cc 9.0: data-parallel (one
    # slice), split-K (its flags zeroed before each GEMM by zero_stream_k_flags, launched programmatically too) and
    # stream-K units that span tiles
    _sm90("sm90_swap_128x32x128_splitk_bf16_bf16", 128, 1),
    _sm90("sm90_swap_128x64x128_splitk_bf16_bf16", 128, 2),
    _sm90("sm90_coop_128x128x64_streamk_forced_swz1_bf16_bf16", 384, None)])
@pytest.mark.parametrize("replay", [False, True], ids=["direct", "graph"])
def test_each_stage_reads_the_finished_output_of_the_one_before(context, stream, pool, compiler, rng, m, family,
                                                               splits, replay) -> None:
    if family is None:
        plan: Any = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(D, D))
    elif family.startswith("sm90_"):
        if context.device_info().compute_capability != (9, 0):
            pytest.skip("an SM90 kernel")
        plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, D, D), kernel=family, splits=splits)
        assert plan.kernel_name == family and plan.programmatic_launch, plan.describe()
    else:
        plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, D, D))
        assert (plan.kernel.origin == "cutlass" if family == "cutlass" else plan.kernel.family == family), \
            plan.describe()
    negate = compiler.compile(NEGATE).kernel(Negate)
    weights = [random(rng, mc.bf16, D, D) for _ in range(STAGES)]
    x0 = random(rng, mc.bf16, m * D)
    ws = [upload(context, stream, pool, w.ravel()) for w in weights]
    bufs = [upload(context, stream, pool, x0)] + [upload(context, stream, pool, poison(mc.bf16, m * D))
                                                    for _ in range(STAGES + 1)]
    config = mc.LaunchConfig.for_elements(m * D, 256)
    b = bufs

    def chain(_: Any) -> None:
        plan.execute(stream, b[0], ws[0], b[1])
        plan.execute(stream, b[1], ws[1], b[2])
        negate.launch(stream, config, b[3], b[2], m * D)  # a plain kernel between two GEMVs
        plan.execute(stream, b[3], ws[2], b[4])
        plan.execute(stream, b[4], ws[3], b[5])

    if replay:
        graph = stream.capture((plan, negate, ws, bufs), chain)
        graph.launch(stream)
    else:
        chain(None)
    got = [download(context, stream, buf) for buf in bufs]
    _check_stage(got[0], weights[0], got[1], m)
    _check_stage(got[1], weights[1], got[2], m)
    np.testing.assert_array_equal(got[3].astype(np.float32), -got[2].astype(np.float32))
    _check_stage(got[3], weights[2], got[4], m)
    _check_stage(got[4], weights[3], got[5], m)
    if replay:
        graph.close()
    for buf in ws + bufs:
        buf.free(stream)
    if family is not None:
        plan.close()


@pytest.mark.cutlass
@pytest.mark.parametrize("kernel, m, splits", [
    ("sm90_swap_128x64x128_splitk_bf16_bf16", 128, 2),
    ("sm90_coop_128x128x64_streamk_forced_swz1_bf16_bf16", 384, None)])
@pytest.mark.parametrize("replay", [False, True], ids=["direct", "graph"])
def test_a_stream_k_kernel_reads_c_after_the_kernel_before_wrote_it(context, stream, pool, compiler, rng, kernel, m,
                                                                   splits, replay) -> None:
    # C = A W1^T + C with beta = 1, C written by a plain kernel just before: the GEMM's epilogue reads it, and the
    # kernel that zeroes its flags (launched before it, programmatically) must not let it start early. Then
    # C2 = C W2^T + C2 at once on the same plan, whose flag zeroing overlaps the first GEMM's tail while that one
    # still uses the same flags in the plan's workspace.
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("an SM90 kernel")
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, D, D), kernel=kernel, splits=splits)
    assert plan.kernel_name == kernel and plan.programmatic_launch, plan.describe()
    negate = compiler.compile(NEGATE).kernel(Negate)
    a, w1, w2, s, c2 = (random(rng, mc.bf16, *shape) for shape in ((m, D), (D, D), (D, D), (m, D), (m, D)))
    ba, bw1, bw2, bs, bc2 = (upload(context, stream, pool, x.ravel()) for x in (a, w1, w2, s, c2))
    bc1 = upload(context, stream, pool, poison(mc.bf16, m * D))
    bufs = (ba, bw1, bw2, bs, bc1, bc2)
    config = mc.LaunchConfig.for_elements(m * D, 256)

    def step(b: Any) -> None:
        negate.launch(stream, config, b[4], b[3], m * D)
        plan.execute(stream, b[0], b[1], b[4], 1.0, 1.0)
        plan.execute(stream, b[4], b[2], b[5], 1.0, 1.0)

    if replay:
        graph = stream.capture(bufs, step)
        # each execute is two kernels, the flag zeroing and the GEMM: no memset node, which no launch overlaps
        assert len(graph.kernel_nodes()) == 1 + 2 * 2, graph.kernel_nodes()
        graph.launch(stream)
    else:
        step(bufs)
    got1, got2 = download(context, stream, bc1).reshape(m, D), download(context, stream, bc2).reshape(m, D)
    a64, w164, w264, s64 = (x.astype(np.float64) for x in (a, w1, w2, s))
    assert_close(got1, a64 @ w164.T - s64, np.abs(a64) @ np.abs(w164).T + np.abs(s64), "bf16")
    c64, c264 = got1.astype(np.float64), c2.astype(np.float64)
    assert_close(got2, c64 @ w264.T + c264, np.abs(c64) @ np.abs(w264).T + np.abs(c264), "bf16")
    if replay:
        graph.close()
    for buf in bufs:
        buf.free(stream)
    plan.close()


def test_a_captured_plan_node_takes_new_weights_with_the_plans_own_config(context, stream, pool, rng) -> None:
    # A graph of one DenseVectorPlan.execute: update_kernel swaps in other weights and another output,
    # keeping the plan's launch configuration (programmatic on cc >= 9.0); the replay computes W2 x.
    n, k = 1000, 2056
    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k), output=mc.f32)
    x, w1, w2 = random(rng, mc.bf16, k), random(rng, mc.bf16, n, k), random(rng, mc.bf16, n, k)
    bx, bw1, bw2 = (upload(context, stream, pool, a.ravel()) for a in (x, w1, w2))
    by1, by2 = (upload(context, stream, pool, poison(mc.f32, n)) for _ in range(2))
    bufs = (bx, bw1, bw2, by1, by2)
    graph = stream.capture(bufs, lambda b: plan.execute(stream, b[0], b[1], b[3]))
    (node,) = graph.kernel_nodes()
    assert node.kernel is plan.kernel
    graph.update_kernel(node, lambda b: ((b[4], b[2], b[0], 1.0, 0.0, n, k), plan.launch_config))
    graph.launch(stream)
    x64, w64 = x.astype(np.float64), w2.astype(np.float64)
    assert_close(download(context, stream, by2), w64 @ x64, np.abs(w64) @ np.abs(x64), "f32")
    assert np.isnan(download(context, stream, by1)).all()  # the captured output was never written
    graph.close()
    for buf in bufs:
        buf.free(stream)
