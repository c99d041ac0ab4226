"""Blockwise FP8 on the GPU (cc >= 8.9): BlockwiseFp8VectorPlan and BlockwiseFp8Plan (M <= 16: the CUDA-core
kernel blockwise_fp8_gemv and the tensor-core kernel blockwise_fp8_mma, each for every M, both row
counts and both PDL triggers) against a float64 product of the dequantized operands (odd N, partial 128-blocks of K and N, alpha/beta with a
separate C and in place, every split of K, poisoned outputs with a guard band), the device quantizers
bit for bit against the numpy reference, numba_execute from @njit, graph capture, replay and node
updates, and a quantize -> GEMV chain with programmatic dependent launch. BlockwiseFp8Plan for M > 16
(the CUTLASS blockwise kernels, ``MIRCUDA_CUTLASS_LIBRARY`` or ``.fp8lib/libmircuda_cutlass.so``): the
same float64 reference for M in {17, 64, 256, 2048} (partial 128-blocks of N and K on SM90), alpha/beta,
poisoned outputs with a guard band, numba_execute, graph capture and replay, checks before enqueueing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import download, upload
from matmul_helpers import UNIT_ROUNDOFF, assert_close

import mircuda as mc
from mircuda.matmul import (
    dequantize_reference,
    quantize_activations_reference,
    quantize_weights_reference,
)
from mircuda.matmul._select import fp8_m1_choice

GUARD = 64
"""Elements past the end of every output buffer that no kernel may touch."""


@pytest.fixture(autouse=True)
def _fp8_device(context) -> None:
    if context.device_info().compute_capability < (8, 9):
        pytest.skip("blockwise FP8 needs compute capability >= 8.9")


def bf16_values(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Normal values whose rows differ in magnitude by up to 2**+-8 (so the block scales differ), in BF16."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, size=shape[:-1] + (1,)))
    return x.astype(np.float32).astype(mc.bf16)


def poisoned(dtype: Any, count: int) -> np.ndarray:
    """``count + GUARD`` NaNs of ``dtype`` (E4M3: the NaN code 0x7f)."""
    if dtype is mc.e4m3:
        return np.full(count + GUARD, 0x7F, np.uint8).view(mc.e4m3)
    return np.full(count + GUARD, np.nan, np.float32).astype(dtype)


def assert_guard_untouched(got: np.ndarray, count: int, dtype: Any) -> None:
    want = poisoned(dtype, count)[count:]
    assert got[count:].tobytes() == want.tobytes(), "a kernel wrote past the end of its output"


class Operands:
    """Fresh quantized operands of one M x N x K problem, uploaded, with their float64 dequantization."""

    def __init__(self, context, stream, pool, rng, m: int, n: int, k: int) -> None:
        self.m, self.n, self.k = m, n, k
        self.a, self.sa = quantize_activations_reference(bf16_values(rng, m, k))
        self.b, self.sb = quantize_weights_reference(bf16_values(rng, n, k))
        self.a64 = dequantize_reference(self.a, self.sa, (1, 128))
        self.b64 = dequantize_reference(self.b, self.sb, (128, 128))
        self.bufs = [upload(context, stream, pool, x.ravel()) for x in (self.a, self.sa, self.b, self.sb)]

    def want(self, alpha: float, beta: float, c: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        prod = self.a64 @ self.b64.T
        mag = np.abs(self.a64) @ np.abs(self.b64).T
        c64 = 0.0 if c is None else c.astype(np.float64).reshape(self.m, self.n)
        return alpha * prod + beta * c64, abs(alpha) * mag + abs(beta) * np.abs(c64)

    def free(self, stream) -> None:
        for b in self.bufs:
            b.free(stream)


def assert_close_decode(context, plan, got, want, mag) -> None:  # type: ignore[no-untyped-def]
    """The NVRTC kernels' bound: FP32 accumulation (``assert_close``), except for the tensor-core kernel
    off cc 9.x, whose FP8 ``mma.sync`` (QMMA) sums a 128-K block with an accumulator whose precision
    NVIDIA does not document (the FP8 bound of the CUTLASS kernels, :data:`FP8_ACCUMULATION`). On cc 9.x
    ptxas runs the E4M3 mma as exact E4M3 -> FP16 decodes and FP32-accumulating HMMA."""
    if plan.kernel_name == "blockwise_fp8_mma" and context.device_info().compute_capability[0] != 9:
        assert_close_fp8(got, want, mag)
    else:
        assert_close(got, want, mag, "bf16")


def run(context, stream, pool, rng, m, n, k, alpha=1.0, beta=0.0, *, vector=False, warps=None, separate_c=True,
        kernel=None, rows=None, pdl_trigger=None, decode=None, persistent=None):  # type: ignore[no-untyped-def]
    ops = Operands(context, stream, pool, rng, m, n, k)
    knobs = {"warps": warps, "kernel": kernel, "rows": rows, "pdl_trigger": pdl_trigger, "decode": decode}
    if persistent is not None:
        knobs["persistent"] = persistent
    if vector:
        plan: Any = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k), **knobs)
    else:
        plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), **knobs)
    c0 = bf16_values(rng, m, n).ravel() if beta else None
    if beta and not separate_c:  # accumulate in place: d holds C (and the guard band after it)
        d_host = poisoned(mc.bf16, m * n)
        d_host[: m * n] = c0
        bd, bc = upload(context, stream, pool, d_host), None
    else:
        bd = upload(context, stream, pool, poisoned(mc.bf16, m * n))
        bc = upload(context, stream, pool, c0) if beta else None
    plan.execute(stream, *ops.bufs, bd, alpha, beta, c=bc)
    got = download(context, stream, bd)
    assert_guard_untouched(got, m * n, mc.bf16)
    want, mag = ops.want(alpha, beta, c0)
    assert_close_decode(context, plan, got[: m * n].reshape(m, n), want, mag)
    for buf in [bd] + ([bc] if bc is not None else []):
        buf.free(stream)
    ops.free(stream)
    return plan


VECTOR_SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (1000, 1040), (37, 304), (1, 16), (129, 4112),
                 (300, 528), (7, 512 + 16)]


@pytest.mark.parametrize("n, k", VECTOR_SHAPES, ids=str)
def test_the_vector_plan_matches_float64_of_the_dequantized_operands(context, stream, pool, rng, n, k) -> None:
    plan = run(context, stream, pool, rng, 1, n, k, float(rng.uniform(0.5, 2.0)), vector=True)
    choice = fp8_m1_choice(n, k, context.device_info().compute_capability)
    assert plan.kernel.contract.symbol == choice.kernel and plan.rows == choice.rows


M1_DEFAULT_SHAPES = [(4096, 4096), (14336, 4096), (6144, 4096), (4096, 14336), (1001, 4096), (8197, 4096),
                     (8191, 4096), (1000, 4112), (37, 304), (1, 16)]
"""(N, K) of the default M = 1 plans: on cc 9.x the tensor-core kernel for K <= 4096 (32 rows from N = 8192:
8197 leaves a partial 32-row tile, 1001 a partial 16-row tile and a partial 128-row scale block), the CUDA-core
kernel above (K = 4112, 14336)."""


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
@pytest.mark.parametrize("n, k", M1_DEFAULT_SHAPES, ids=str)
def test_the_default_m_1_plans_run_the_rules_kernel_and_match_float64(context, stream, pool, rng, n, k,
                                                                      vector) -> None:
    plan = run(context, stream, pool, rng, 1, n, k, float(rng.uniform(0.5, 2.0)), 0.5, vector=vector)
    choice = fp8_m1_choice(n, k, context.device_info().compute_capability)
    assert plan.kernel_name == choice.kernel and plan.rows == choice.rows
    assert plan.launch_config.grid[0] == -(-n // choice.rows) and choice.reason in plan.describe()


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "matrix"])
@pytest.mark.parametrize("n, k", [(14336, 4096), (8197, 1040), (4096, 4096), (4096, 14336)], ids=str)
def test_the_integer_decode_without_kernel_keeps_the_m_1_rules_rows_and_matches_float64(context, stream, pool, rng,
                                                                                        n, k, vector) -> None:
    """decode='integer' names the tensor-core kernel; where the M = 1 rule runs that kernel its rows stay
    (32 from N = 8192 on cc 9.x), elsewhere the kernel's own 16."""
    plan = run(context, stream, pool, rng, 1, n, k, float(rng.uniform(0.5, 2.0)), 0.5, vector=vector,
               decode="integer")
    choice = fp8_m1_choice(n, k, context.device_info().compute_capability)
    rows = choice.rows if choice.kernel == "blockwise_fp8_mma" else 16
    assert plan.kernel_name == "blockwise_fp8_mma" and plan.rows == rows and plan._engine.decode == "integer"
    assert plan.launch_config.grid[0] == -(-n // rows)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9, 12, 16])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1000, 1040), (37, 304), (129, 4112)], ids=str)
def test_the_batched_plan_matches_float64_for_every_m_up_to_16(context, stream, pool, rng, m, n, k) -> None:
    plan = run(context, stream, pool, rng, m, n, k, float(rng.uniform(0.5, 2.0)))
    m1 = fp8_m1_choice(n, k, context.device_info().compute_capability).kernel
    assert plan.kernel_name == (m1 if m == 1 else "blockwise_fp8_mma")


@pytest.mark.parametrize("kernel", ["blockwise_fp8_gemv", "blockwise_fp8_mma"])
@pytest.mark.parametrize("m", [1, 2, 3, 8, 9, 16])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1000, 1040), (37, 304), (129, 4112), (300, 528), (16, 16), (1, 16),
                                  (7, 528)], ids=str)
def test_each_nvrtc_kernel_matches_float64_for_every_m(context, stream, pool, rng, kernel, m, n, k) -> None:
    plan = run(context, stream, pool, rng, m, n, k, float(rng.uniform(0.5, 2.0)), kernel=kernel)
    assert plan.kernel_name == kernel


@pytest.mark.parametrize("pdl_trigger", ["early", "late"])
@pytest.mark.parametrize("rows", [16, 32])
@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1000, 1040), (37, 304), (129, 4112)], ids=str)
def test_the_tensor_core_kernel_matches_float64_for_its_rows_and_triggers(context, stream, pool, rng, m, n, k, rows,
                                                                          pdl_trigger) -> None:
    plan = run(context, stream, pool, rng, m, n, k, float(rng.uniform(0.5, 2.0)), vector=m == 1,
               kernel="blockwise_fp8_mma", rows=rows, pdl_trigger=pdl_trigger)
    assert plan.kernel_name == "blockwise_fp8_mma" and plan.rows == rows
    assert plan.launch_config.grid[0] == -(-n // rows)


@pytest.mark.parametrize("rows", [16, 32])
@pytest.mark.parametrize("m", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1000, 1040), (37, 304), (129, 4112)], ids=str)
def test_the_integer_decode_matches_float64(context, stream, pool, rng, m, n, k, rows) -> None:
    # FP16 mma.sync with FP32 accumulation on every arch: the FP32 bound holds everywhere.
    plan = run(context, stream, pool, rng, m, n, k, float(rng.uniform(0.5, 2.0)), 0.5, vector=m == 1,
               kernel="blockwise_fp8_mma", rows=rows, decode="integer")
    assert plan._engine.decode == "integer" and "integer operations" in plan.describe()


@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("n, k", [(14336, 4096), (4096, 14336), (6144, 4096)], ids=str)
def test_the_tensor_core_kernel_matches_float64_on_the_profiled_shapes(context, stream, pool, rng, m, n, k) -> None:
    plan = run(context, stream, pool, rng, m, n, k, 1.0, vector=m == 1, kernel="blockwise_fp8_mma")
    assert plan.kernel_name == "blockwise_fp8_mma"


@pytest.mark.parametrize("pdl_trigger", ["early", "late"])
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
@pytest.mark.parametrize("n, k", [(4096, 4096), (129, 4112), (37, 304)], ids=str)
def test_the_vector_plan_matches_float64_for_every_rows_and_trigger(context, stream, pool, rng, n, k, rows,
                                                                    pdl_trigger) -> None:
    plan = run(context, stream, pool, rng, 1, n, k, 1.0, vector=True, rows=rows, pdl_trigger=pdl_trigger,
               kernel="blockwise_fp8_gemv")
    assert plan.rows == rows and plan.kernel_name == "blockwise_fp8_gemv"


@pytest.mark.parametrize("warps", [None, 1, 4])
@pytest.mark.parametrize("m, rows", [(1, 8), (1, 1), (3, 4), (16, 2)], ids=str)
@pytest.mark.parametrize("n, k", [(40000, 512), (4096, 4096), (129, 4112), (37, 304), (1, 16)], ids=str)
def test_the_persistent_grid_matches_float64(context, stream, pool, rng, n, k, m, rows, warps) -> None:
    """persistent=True: one wave of blocks walking the row blocks (N = 40000: several per block; N = 1: fewer
    row blocks than blocks), K with a partial 512-column chunk (4112, 304) and fewer chunks than warps."""
    plan = run(context, stream, pool, rng, m, n, k, 1.5, 0.5 if m > 1 else 0.0, vector=m == 1, rows=rows,
               warps=warps, kernel="blockwise_fp8_gemv", persistent=True)
    info = context.device_info()
    assert plan.launch_config.grid[0] <= min(-(-n // rows), info.multiprocessor_count * 32)
    assert "persistent blocks (one wave)" in plan.describe()


def test_the_persistent_knob_is_the_cuda_core_kernels(context, stream) -> None:
    for kw in ({"persistent": 1}, {"persistent": True, "kernel": "blockwise_fp8_mma"}):
        with pytest.raises(mc.ContractError) as info:
            mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(256, 256), **kw)
        assert info.value.argument == "persistent"
    with pytest.raises(mc.ContractError) as info:  # M = 4 runs the tensor-core kernel by default
        mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(4, 256, 256), persistent=True)
    assert info.value.argument == "persistent"


@pytest.mark.parametrize("separate_c", [True, False], ids=["c", "in-place"])
@pytest.mark.parametrize("m", [1, 4, 16])
def test_beta_accumulates_c(context, stream, pool, rng, m, separate_c) -> None:
    alpha, beta = float(rng.uniform(-2, -0.5)), float(rng.uniform(0.25, 1.5))
    run(context, stream, pool, rng, m, 777, 2064, alpha, beta, vector=m == 1, separate_c=separate_c)


@pytest.mark.parametrize("kernel", ["blockwise_fp8_gemv", "blockwise_fp8_mma"])
@pytest.mark.parametrize("warps", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_every_split_of_k_gives_the_same_answer(context, stream, pool, rng, m, warps, kernel) -> None:
    plan = run(context, stream, pool, rng, m, 520, 4112, 1.0, 0.5, warps=warps, kernel=kernel)
    assert plan.warps == warps and plan.launch_config.block[0] == 32 * warps
    assert plan.launch_config.grid[0] == -(-520 // plan.rows)


def test_an_all_zero_activation_block_contributes_nothing(context, stream, pool, rng) -> None:
    # Its scale is 1 and its codes zero: the product of the other blocks stays finite and exact.
    n, k = 256, 384
    x = bf16_values(rng, 1, k)
    x[0, 128:256] = 0
    a, sa = quantize_activations_reference(x)
    assert sa[0, 1] == 1.0
    b, sb = quantize_weights_reference(bf16_values(rng, n, k))
    plan = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k))
    bufs = [upload(context, stream, pool, v.ravel()) for v in (a, sa, b, sb)]
    bd = upload(context, stream, pool, poisoned(mc.bf16, n))
    plan.execute(stream, *bufs, bd)
    a64, b64 = dequantize_reference(a, sa, (1, 128)), dequantize_reference(b, sb, (128, 128))
    got = download(context, stream, bd)
    assert_close(got[:n].reshape(1, n), a64 @ b64.T, np.abs(a64) @ np.abs(b64).T, "bf16")
    for buf in [*bufs, bd]:
        buf.free(stream)


# -- quantizers ---------------------------------------------------------------------------------
def quantize_on_device(context, stream, pool, x: np.ndarray, block) -> tuple[np.ndarray, np.ndarray]:
    rows, k = x.shape
    quantizer = mc.BlockwiseFp8Quantizer(context, stream, rows, k, block)
    scale_count = quantizer.scale_shape[0] * quantizer.scale_shape[1]
    bx = upload(context, stream, pool, x.ravel())
    bq = upload(context, stream, pool, poisoned(mc.e4m3, rows * k))
    bs = upload(context, stream, pool, poisoned(mc.f32, scale_count))
    quantizer.execute(stream, bx, bq, bs)
    q, s = download(context, stream, bq), download(context, stream, bs)
    assert_guard_untouched(q, rows * k, mc.e4m3)
    assert_guard_untouched(s, scale_count, mc.f32)
    for buf in (bx, bq, bs):
        buf.free(stream)
    return q[: rows * k].reshape(rows, k), s[:scale_count].reshape(quantizer.scale_shape)


@pytest.mark.parametrize("block, shape", [((1, 128), (1, 4096)), ((1, 128), (3, 300)), ((1, 128), (16, 14336)),
                                          ((1, 128), (5, 16)), ((1, 128), (2, 1)), ((1, 128), (33, 1000)),
                                          ((128, 128), (200, 300)), ((128, 128), (4096, 4096)),
                                          ((128, 128), (129, 4100)), ((128, 128), (1, 7)), ((128, 128), (300, 129))],
                         ids=str)
def test_the_device_quantizers_match_the_reference_bit_for_bit(context, stream, pool, rng, block, shape) -> None:
    x = bf16_values(rng, *shape)
    if shape[1] > 256:
        x[0, 128:256] = 0.0          # an all-zero block: scale 1, codes +0
    if shape[0] > 1 and shape[1] > 128:
        x[1, :128] = -0.0            # codes -0 (0x80) where the whole block is -0 (activations)
    x.ravel()[rng.integers(0, x.size, 8)] = mc.bf16(2.0**-133)  # BF16 subnormals among normal values
    if shape[0] > 2 and shape[1] >= 128:  # a block of BF16 subnormals only: its scale is an FP32 subnormal
        x[2, :128] = (rng.integers(-20, 21, 128) * 2.0**-133).astype(np.float32).astype(mc.bf16)
        x[2, 0] = mc.bf16(19 * 2.0**-133)
    q, s = quantize_on_device(context, stream, pool, x, block)
    rq, rs = quantize_activations_reference(x) if block == (1, 128) else quantize_weights_reference(x)
    np.testing.assert_array_equal(s.view(np.uint32), rs.view(np.uint32))
    mismatch = np.flatnonzero(q.view(np.uint8) != rq.view(np.uint8))
    assert mismatch.size == 0, (f"{mismatch.size} codes differ; first at {np.unravel_index(mismatch[0], shape)}: "
                                f"{q.view(np.uint8).ravel()[mismatch[0]]:#x} vs {rq.view(np.uint8).ravel()[mismatch[0]]:#x}")


def test_non_finite_inputs_give_non_finite_scales_on_the_device(context, stream, pool) -> None:
    x = np.ones((3, 128), np.float32)
    x[0, 3], x[1, 100] = np.nan, -np.inf
    _, s = quantize_on_device(context, stream, pool, x.astype(mc.bf16), (1, 128))
    assert np.isnan(s[0, 0]) and s[1, 0] == np.inf and s[2, 0] == np.float32(1) / np.float32(448)


@pytest.mark.parametrize("kernel, pdl_trigger", [("blockwise_fp8_gemv", None), ("blockwise_fp8_mma", "early"),
                                                 ("blockwise_fp8_mma", "late")])
def test_quantize_then_gemv_in_one_graph(context, stream, pool, rng, kernel, pdl_trigger) -> None:
    # The quantizer writes A and sa; the GEMV (programmatic dependent launch on cc >= 9.0) must read them
    # only after it finished: direct and replayed, against the reference quantizer's operands.
    m, n, k = 4, 1000, 4112
    x = bf16_values(rng, m, k)
    b, sb = quantize_weights_reference(bf16_values(rng, n, k))
    quantizer = mc.BlockwiseFp8Quantizer(context, stream, m, k)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=kernel, pdl_trigger=pdl_trigger)
    bx = upload(context, stream, pool, x.ravel())
    ba = upload(context, stream, pool, poisoned(mc.e4m3, m * k))
    bsa = upload(context, stream, pool, poisoned(mc.f32, m * -(-k // 128)))
    bb, bsb = upload(context, stream, pool, b.ravel()), upload(context, stream, pool, sb.ravel())
    bds = [upload(context, stream, pool, poisoned(mc.bf16, m * n)) for _ in range(2)]
    bufs = (bx, ba, bsa, bb, bsb, *bds)

    def chain(d):  # type: ignore[no-untyped-def]
        quantizer.execute(stream, bx, ba, bsa)
        plan.execute(stream, ba, bsa, bb, bsb, d)

    chain(bds[0])
    graph = stream.capture(bufs, lambda _: chain(bds[1]))
    graph.launch(stream)
    a, sa = quantize_activations_reference(x)
    a64, b64 = dequantize_reference(a, sa, (1, 128)), dequantize_reference(b, sb, (128, 128))
    for bd in bds:
        got = download(context, stream, bd)
        assert_guard_untouched(got, m * n, mc.bf16)
        assert_close_decode(context, plan, got[: m * n].reshape(m, n), a64 @ b64.T, np.abs(a64) @ np.abs(b64).T)
    graph.close()
    for buf in bufs:
        buf.free(stream)


# -- plans: graphs, numba, checks --------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 4])
def test_a_captured_plan_replays_and_its_node_takes_new_weights(context, stream, pool, rng, m) -> None:
    n, k = 1000, 2064
    one = Operands(context, stream, pool, rng, m, n, k)
    two = Operands(context, stream, pool, rng, m, n, k)
    plan: Any = (mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k)) if m == 1
                 else mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k)))
    bd1, bd2 = (upload(context, stream, pool, poisoned(mc.bf16, m * n)) for _ in range(2))
    graph = stream.capture((one, two, bd1, bd2), lambda _: plan.execute(stream, *one.bufs, bd1))
    graph.launch(stream)
    want, mag = one.want(1.0, 0.0, None)
    assert_close_decode(context, plan, download(context, stream, bd1)[: m * n].reshape(m, n), want, mag)
    (node,) = graph.kernel_nodes()
    assert node.kernel is plan.kernel
    # Same activations, the other weights and output: (d, c, a, sa, b, sb, alpha, beta, n, k).
    graph.update_kernel(node, lambda _: ((bd2, bd2, one.bufs[0], one.bufs[1], two.bufs[2], two.bufs[3], 1.0, 0.0,
                                          n, k), plan.launch_config))
    graph.launch(stream)
    got = download(context, stream, bd2)
    assert_guard_untouched(got, m * n, mc.bf16)
    a64, b64 = one.a64, two.b64
    assert_close_decode(context, plan, got[: m * n].reshape(m, n), a64 @ b64.T, np.abs(a64) @ np.abs(b64).T)
    graph.close()
    for buf in (bd1, bd2):
        buf.free(stream)
    one.free(stream)
    two.free(stream)


def test_plans_run_from_numba_njit_loops(context, stream, pool, rng) -> None:
    numba = pytest.importorskip("numba")
    m, n, k, steps = 4, 1000, 2064, 3
    ops = [Operands(context, stream, pool, rng, m, n, k) for _ in range(steps)]
    batched = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k))
    vector = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k))
    ds = [upload(context, stream, pool, poisoned(mc.bf16, m * n)) for _ in range(steps)]
    ys = [upload(context, stream, pool, poisoned(mc.bf16, n)) for _ in range(steps)]
    cs = [upload(context, stream, pool, bf16_values(rng, n).ravel()) for _ in range(steps)]
    matmul, gemv = batched.numba_execute, vector.numba_execute

    @numba.njit
    def loop(stream_handle, a, sa, b, sb, d, y, c):  # type: ignore[no-untyped-def]
        status = 0
        for i in range(len(a)):
            status |= matmul(stream_handle, a[i], sa[i], b[i], sb[i], d[i], d[i], 1.0, 0.0)
            # Row 0 of A (and its scales) as the vector; y = 2 x.B^T - c.
            status |= gemv(stream_handle, a[i], sa[i], b[i], sb[i], y[i], c[i], 2.0, -1.0)
        return status

    def handles(bufs: list[Any]) -> np.ndarray:
        return np.array([x.handle for x in bufs], dtype=np.uint64)

    def column(j: int) -> np.ndarray:
        return handles([o.bufs[j] for o in ops])

    assert loop(stream.handle, column(0), column(1), column(2), column(3), handles(ds), handles(ys), handles(cs)) == 0
    for o, d, y, c in zip(ops, ds, ys, cs):
        want, mag = o.want(1.0, 0.0, None)
        got = download(context, stream, d)
        assert_guard_untouched(got, m * n, mc.bf16)
        assert_close_decode(context, batched, got[: m * n].reshape(m, n), want, mag)
        c64 = download(context, stream, c).astype(np.float64)
        row = 2.0 * (o.b64 @ o.a64[0]) - c64
        mag1 = 2.0 * (np.abs(o.b64) @ np.abs(o.a64[0])) + np.abs(c64)
        got1 = download(context, stream, y)
        assert_guard_untouched(got1, n, mc.bf16)
        assert_close(got1[:n], row, mag1, "bf16")
    misaligned = gemv(stream.handle, ops[0].bufs[0].handle + 8, ops[0].bufs[1].handle, ops[0].bufs[2].handle,
                      ops[0].bufs[3].handle, ys[0].handle, ys[0].handle, 1.0, 0.0)
    assert misaligned == 1
    other = context.create_stream()  # not the plan's stream: CUDA_ERROR_INVALID_HANDLE, nothing launched
    assert gemv(other.handle, *(o.handle for o in ops[0].bufs), ys[0].handle, ys[0].handle, 1.0, 0.0) == 400
    other.close()
    for buf in [*ds, *ys, *cs]:
        buf.free(stream)
    for o in ops:
        o.free(stream)


def test_operands_and_the_stream_are_checked_before_anything_is_enqueued(context, stream, pool, rng) -> None:
    m, n, k = 2, 256, 512
    ops = Operands(context, stream, pool, rng, m, n, k)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k))
    d = upload(context, stream, pool, poisoned(mc.bf16, m * n))
    short_sb = pool.allocate(mc.f32, stream, 7)
    wrong_a = pool.allocate(mc.u8, stream, m * k)
    a, sa, b, sb = ops.bufs
    for args, argument in (((a, sa, b, short_sb, d), "sb"), ((wrong_a, sa, b, sb, d), "a"),
                           ((a, sa, b, sb, wrong_a), "d"), ((a, short_sb, b, sb, d), "sa"),
                           ((a, sa, b, sb, d, 1.0, 1.0, short_sb), "c")):
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args)
        assert info.value.argument == argument
    other = context.create_stream()
    with pytest.raises(mc.ContractError) as info:
        plan.execute(other, a, sa, b, sb, d)
    assert info.value.argument == "stream"
    other.close()
    got = download(context, stream, d)
    assert np.isnan(got.astype(np.float32)).all()  # nothing ran
    for buf in (d, short_sb, wrong_a):
        buf.free(stream)
    ops.free(stream)


@pytest.mark.parametrize("m", [1, 2, 16])
def test_describe_names_the_kernel_and_its_shape(context, stream, m) -> None:
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, 4096, 4096))
    text = plan.describe()
    kernel = fp8_m1_choice(4096, 4096, context.device_info().compute_capability).kernel if m == 1 else "blockwise_fp8_mma"
    assert kernel in text and f"MIRCUDA_FP8_M={m}" in text and f"{plan.warps} warp" in text
    assert ("mma.sync m16n8k32" in text) is (kernel == "blockwise_fp8_mma")
    assert ("programmatic dependent launch" in text) is context.device_info().supports_programmatic_launch


# -- BlockwiseFp8Plan for M > 16: the CUTLASS blockwise kernels ------------------------------------
FP8_ACCUMULATION = 2.0**-11
"""Error allowed relative to sum |alpha a_k b_k| (dequantized) for the CUTLASS kernels: Hopper's FP8
WGMMA accumulates with fewer than FP32's bits (DeepSeek-V3 technical report, section 3.3.2); CUTLASS's
blockwise mainloop promotes each 128-K block's partial sum into FP32 (as in test_matmul_fp8_cutlass_gpu)."""
CUTLASS_SHAPES = [(1032, 1040), (256, 4112), (1024, 1024), (4096, 4096)]
"""(N, K): partial last 128-blocks of N (1032) and K (1040, 4112) -- SM90 takes them, SM12x refuses them
by name -- and whole blocks."""


@pytest.fixture(scope="module")
def fp8_library() -> Any:
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    local = Path(__file__).resolve().parents[2] / ".fp8lib" / "libmircuda_cutlass.so"
    try:
        lib = mc.matmul.load_library(None if env or not local.is_file() else local)
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    if not lib.scaled_kernels:
        pytest.skip(f"{lib.path} holds no blockwise FP8 kernels (build with --families FP8)")
    return lib


def cutlass_plan(context, stream, fp8_library, m, n, k, kernel=None):  # type: ignore[no-untyped-def]
    """The plan, or a skip for a CUTLASS shape the device refuses by name (checked to be the reason)."""
    cc = context.device_info().compute_capability
    cutlass = m > 16 or (kernel is not None and kernel not in ("blockwise_fp8_gemv", "blockwise_fp8_mma"))
    if cutlass and cc[0] not in (9, 12):
        with pytest.raises(mc.BlockwiseFp8Unavailable, match="compute capability"):
            mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), library=fp8_library)
        pytest.skip(f"no CUTLASS blockwise FP8 kernel for cc {cc}")
    if cutlass and cc[0] == 12 and (n % 128 or k % 128):
        with pytest.raises(mc.BlockwiseFp8Unavailable, match="not a multiple of 128"):
            mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), library=fp8_library)
        pytest.skip(f"the sm120 kernel takes N, K multiples of 128, not ({n}, {k}) (refusal checked)")
    return mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), library=fp8_library, kernel=kernel)


def assert_close_fp8(got: np.ndarray, want: np.ndarray, magnitude: np.ndarray) -> None:
    got64 = got.astype(np.float64)
    assert np.isfinite(got64).all(), "non-finite outputs (a poisoned value was read or not written)"
    bound = 2 * UNIT_ROUNDOFF["bf16"] * np.abs(want) + FP8_ACCUMULATION * magnitude + 1e-30
    excess = np.abs(got64 - want) / bound
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    assert excess.max() <= 1.0, (f"{int((excess > 1).sum())} of {excess.size} outputs outside the bound; worst at "
                                 f"{worst}: got {got64[worst]!r}, want {want[worst]!r}, bound {bound[worst]:.3g}")


def run_cutlass(context, stream, pool, rng, plan, alpha=1.0, beta=0.0, separate_c=True):  # type: ignore[no-untyped-def]
    m, n, k = plan.spec.m, plan.spec.n, plan.spec.k
    ops = Operands(context, stream, pool, rng, m, n, k)
    c0 = bf16_values(rng, m, n).ravel() if beta else None
    if beta and not separate_c:
        d_host = poisoned(mc.bf16, m * n)
        d_host[: m * n] = c0
        bd, bc = upload(context, stream, pool, d_host), None
    else:
        bd = upload(context, stream, pool, poisoned(mc.bf16, m * n))
        bc = upload(context, stream, pool, c0) if beta else None
    plan.execute(stream, *ops.bufs, bd, alpha, beta, c=bc)
    got = download(context, stream, bd)
    assert_guard_untouched(got, m * n, mc.bf16)
    want, mag = ops.want(alpha, beta, c0)
    assert_close_fp8(got[: m * n].reshape(m, n), want, mag)
    for buf in [bd] + ([bc] if bc is not None else []):
        buf.free(stream)
    ops.free(stream)


@pytest.mark.parametrize("m", [17, 64, 256, 2048])
@pytest.mark.parametrize("n, k", CUTLASS_SHAPES, ids=str)
def test_the_cutlass_plan_matches_float64_of_the_dequantized_operands(context, stream, pool, rng, fp8_library, m, n,
                                                                      k) -> None:
    if m == 2048 and n * k > 1032 * 1040:
        pytest.skip("the float64 reference of 2048 x 4096 x 4096 is slow on the host; M = 2048 runs the others")
    plan = cutlass_plan(context, stream, fp8_library, m, n, k)
    family = plan.kernel_info.family
    info = context.device_info()
    if info.compute_capability[0] == 9:  # ping-pong where its 64x128 tiles fit in one wave of the SMs
        one_wave = -(-m // 64) * -(-n // 128) <= info.multiprocessor_count
        assert family == ("sm90_blockwise_pingpong" if one_wave else "sm90_blockwise_cooperative"), (m, n)
    else:
        assert family == "sm120_blockwise"
    assert plan.kernel_info.origin == "cutlass" and plan.kernel_name in plan.describe()
    run_cutlass(context, stream, pool, rng, plan, float(rng.uniform(0.5, 2.0)))
    plan.close()


@pytest.mark.parametrize("m", [64, 1024], ids=["pingpong", "cooperative"])
def test_cutlass_plan_chains_read_what_the_kernel_before_wrote(context, stream, pool, rng, fp8_library, m) -> None:
    # On cc 9.0 the SM90 kernels launch with programmatic dependent launch (the cooperative kernel's sa copy too), so
    # each may start while the kernel before it runs. The quantizer writes A and sa, the plan must read them only
    # after it finished; two executes back to back on different operands (the second's sa copy overwrites the
    # workspace the first GEMM reads); and quantizer -> plan replayed from a graph. Poisoned buffers expose an early
    # read.
    n = k = 2048
    plan = cutlass_plan(context, stream, fp8_library, m, n, k)
    if context.device_info().compute_capability == (9, 0):
        assert plan.programmatic_launch and "programmatic dependent launch" in plan.describe()
    xs = [bf16_values(rng, m, k) for _ in range(2)]
    b, sb = quantize_weights_reference(bf16_values(rng, n, k))
    quantizer = mc.BlockwiseFp8Quantizer(context, stream, m, k)
    bx = [upload(context, stream, pool, x.ravel()) for x in xs]
    ba = [upload(context, stream, pool, poisoned(mc.e4m3, m * k)) for _ in xs]
    bsa = [upload(context, stream, pool, poisoned(mc.f32, m * -(-k // 128))) for _ in xs]
    bb, bsb = upload(context, stream, pool, b.ravel()), upload(context, stream, pool, sb.ravel())
    bds = [upload(context, stream, pool, poisoned(mc.bf16, m * n)) for _ in range(3)]
    bufs = (*bx, *ba, *bsa, bb, bsb, *bds)
    for i in (0, 1):
        quantizer.execute(stream, bx[i], ba[i], bsa[i])
    for i in (0, 1):
        plan.execute(stream, ba[i], bsa[i], bb, bsb, bds[i])

    def chain(_: Any) -> None:  # xs[0] again, through the second operand buffers
        quantizer.execute(stream, bx[0], ba[1], bsa[1])
        plan.execute(stream, ba[1], bsa[1], bb, bsb, bds[2])

    graph = stream.capture(bufs, chain)
    graph.launch(stream)
    b64 = dequantize_reference(b, sb, (128, 128))
    for bd, x in zip(bds, [xs[0], xs[1], xs[0]]):
        a, sa = quantize_activations_reference(x)
        a64 = dequantize_reference(a, sa, (1, 128))
        got = download(context, stream, bd)
        assert_guard_untouched(got, m * n, mc.bf16)
        assert_close_fp8(got[: m * n].reshape(m, n), a64 @ b64.T, np.abs(a64) @ np.abs(b64).T)
    graph.close()
    plan.close()
    for buf in bufs:
        buf.free(stream)


@pytest.mark.parametrize("separate_c", [True, False], ids=["c", "in-place"])
@pytest.mark.parametrize("m", [17, 300])
def test_the_cutlass_plan_accumulates_beta_c(context, stream, pool, rng, fp8_library, m, separate_c) -> None:
    plan = cutlass_plan(context, stream, fp8_library, m, 1024, 1024)
    run_cutlass(context, stream, pool, rng, plan, float(rng.uniform(-2, -0.5)), float(rng.uniform(0.25, 1.5)),
                separate_c)
    plan.close()


def test_every_cutlass_kernel_of_the_device_can_be_forced(context, stream, pool, rng, fp8_library) -> None:
    cc = context.device_info().compute_capability
    kernels = [x for x in fp8_library.scaled_kernels if x.runs_on(cc)]
    if not kernels:
        pytest.skip("no blockwise FP8 kernel of the library runs on this device")
    for m in (8, 100):  # a CUTLASS kernel for decode too, when forced
        for kernel in kernels:
            plan = cutlass_plan(context, stream, fp8_library, m, 1024, 1024, kernel=kernel.name)
            assert plan.kernel_name == kernel.name and "forced" in plan.describe()
            run_cutlass(context, stream, pool, rng, plan, 1.0, 0.5)
            plan.close()


def test_the_cutlass_plan_runs_from_numba_njit_loops(context, stream, pool, rng, fp8_library) -> None:
    numba = pytest.importorskip("numba")
    m, n, k, steps = 64, 1024, 1024, 3
    plan = cutlass_plan(context, stream, fp8_library, m, n, k)
    ops = [Operands(context, stream, pool, rng, m, n, k) for _ in range(steps)]
    ds = [upload(context, stream, pool, poisoned(mc.bf16, m * n)) for _ in range(steps)]
    execute = plan.numba_execute

    @numba.njit
    def loop(stream_handle, a, sa, b, sb, d):  # type: ignore[no-untyped-def]
        status = 0
        for i in range(len(a)):
            status |= execute(stream_handle, a[i], sa[i], b[i], sb[i], d[i], d[i], 1.0, 0.0)
        return status

    def handles(bufs: list[Any]) -> np.ndarray:
        return np.array([x.handle for x in bufs], dtype=np.uint64)

    def column(j: int) -> np.ndarray:
        return handles([o.bufs[j] for o in ops])

    assert loop(stream.handle, column(0), column(1), column(2), column(3), handles(ds)) == 0
    for o, d in zip(ops, ds):
        want, mag = o.want(1.0, 0.0, None)
        got = download(context, stream, d)
        assert_guard_untouched(got, m * n, mc.bf16)
        assert_close_fp8(got[: m * n].reshape(m, n), want, mag)
    a, sa, b, sb = (x.handle for x in ops[0].bufs)
    assert execute(stream.handle, a + 8, sa, b, sb, ds[0].handle, ds[0].handle, 1.0, 0.0) == 2  # MISALIGNED
    other = context.create_stream()
    assert execute(other.handle, a, sa, b, sb, ds[0].handle, ds[0].handle, 1.0, 0.0) == 1  # another stream
    other.close()
    for buf in ds:
        buf.free(stream)
    for o in ops:
        o.free(stream)
    plan.close()


def test_a_captured_cutlass_plan_replays_on_new_operand_values(context, stream, pool, rng, fp8_library) -> None:
    # The library's launch is recorded as it is (CUTLASS's parameters, not a mircuda kernel node): new
    # operands reach a replay through the captured buffers' contents.
    m, n, k = 200, 1024, 1024
    plan = cutlass_plan(context, stream, fp8_library, m, n, k)
    one = Operands(context, stream, pool, rng, m, n, k)
    two = Operands(context, stream, pool, rng, m, n, k)
    bd = upload(context, stream, pool, poisoned(mc.bf16, m * n))
    graph = stream.capture((plan, one, bd), lambda _: plan.execute(stream, *one.bufs, bd))
    got = download(context, stream, bd)
    assert np.isnan(got.astype(np.float32)).all()  # captured, not run
    graph.launch(stream)
    want, mag = one.want(1.0, 0.0, None)
    assert_close_fp8(download(context, stream, bd)[: m * n].reshape(m, n), want, mag)
    for src, dst in zip(two.bufs, one.bufs):
        stream.copy_device_range(src, 0, dst, 0, len(dst))
    graph.launch(stream)
    got = download(context, stream, bd)
    assert_guard_untouched(got, m * n, mc.bf16)
    want, mag = two.want(1.0, 0.0, None)
    assert_close_fp8(got[: m * n].reshape(m, n), want, mag)
    graph.close()
    bd.free(stream)
    one.free(stream)
    two.free(stream)
    plan.close()


def test_the_cutlass_plan_checks_operands_before_anything_is_enqueued(context, stream, pool, rng, fp8_library) -> None:
    m, n, k = 64, 1024, 1024
    plan = cutlass_plan(context, stream, fp8_library, m, n, k)
    assert plan.workspace_bytes >= 0 and plan.handle != 0
    ops = Operands(context, stream, pool, rng, m, n, k)
    d = upload(context, stream, pool, poisoned(mc.bf16, m * n))
    short_sb = pool.allocate(mc.f32, stream, 7)
    wrong_a = pool.allocate(mc.u8, stream, m * k)
    a, sa, b, sb = ops.bufs
    for args, argument in (((a, sa, b, short_sb, d), "sb"), ((wrong_a, sa, b, sb, d), "a"),
                           ((a, sa, b, sb, wrong_a), "d"), ((a, short_sb, b, sb, d), "sa"),
                           ((a, sa, b, sb, d, 1.0, 1.0, short_sb), "c")):
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args)
        assert info.value.argument == argument
    other = context.create_stream()
    with pytest.raises(mc.ContractError) as info:
        plan.execute(other, a, sa, b, sb, d)
    assert info.value.argument == "stream"
    other.close()
    got = download(context, stream, d)
    assert np.isnan(got.astype(np.float32)).all()  # nothing ran
    plan.close()
    with pytest.raises(mc.ClosedResourceError):
        plan.execute(stream, a, sa, b, sb, d)
    for buf in (d, short_sb, wrong_a):
        buf.free(stream)
    ops.free(stream)


def test_m_16_and_17_meet_at_the_boundary(context, stream, pool, rng, fp8_library) -> None:
    # The NVRTC kernel's last M and the CUTLASS kernel's first on the same operands' shape.
    for m in (16, 17):
        plan = cutlass_plan(context, stream, fp8_library, m, 1024, 1024)
        assert plan.kernel_info.origin == ("nvrtc" if m == 16 else "cutlass")
        run_cutlass(context, stream, pool, rng, plan, 1.5, 0.0)
        plan.close()
