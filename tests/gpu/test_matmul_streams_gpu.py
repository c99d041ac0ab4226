"""Every dense plan on the GPU is bound to its stream and checks its operands' alignment before
anything is enqueued.

Issue 12: one split-K DenseMatmulPlan (M = 32, N = 4096, K = 8192, f32 out) executed alternately on two
unordered streams hung the H200 (the split-K workspace and its semaphores are the plan's); now every
execute on a stream other than the plan's is refused (ContractError naming ``stream``), also inside a
capture begun on another stream, and also when the plan's stream is forked into such a capture.
Issue 20: operands one element into other memory (borrowed through ``as_device_buffer``) are refused
(ContractError naming the operand, its address received). Each refusal leaves the poisoned output
untouched and the context usable: the next execute on the plan's stream matches float64.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from helpers import download, patience_s, upload
from matmul_helpers import assert_close, poison, random

HANG_GUARD_S = patience_s(120.0)
"""Longest wait for a stream (a few ms of work) before the test fails as hung instead of hanging the suite
(scaled by MIRCUDA_TEST_PATIENCE under slow tools: a guard, not a timing verdict)."""


def finish(stream: mc.Stream) -> None:
    """Wait for ``stream`` without blocking forever: a regression that lets two streams race on a
    split-K workspace would hang ``synchronize``."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not stream.query():
        if time.monotonic() > deadline:
            pytest.fail(f"{stream!r} did not finish within {HANG_GUARD_S} s: the device hangs")
        time.sleep(0.001)


@pytest.fixture()
def other(context: mc.Context):  # type: ignore[no-untyped-def]
    s = context.create_stream()
    yield s
    finish(s)
    s.close()


def _require_cutlass(context: mc.Context, sm90: bool) -> None:
    try:
        mc.matmul.load_library()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    if sm90 and context.device_info().compute_capability != (9, 0):
        pytest.skip("the split-K kernel is SM90's")


KINDS = {  # name: (plan class, M, N, K, forced kernel, needs CUTLASS, needs SM90)
    "vector": ("vector", 1, 520, 4096, None, False, False),
    "vector_any_k": ("vector", 1, 37, 1003, None, False, False),
    "matmul_m1": ("matmul", 1, 520, 4096, None, False, False),
    "gemv": ("matmul", 4, 520, 4096, None, False, False),
    "gemv_any_k": ("matmul", 5, 37, 1003, None, False, False),
    "cutlass": ("matmul", 256, 264, 520, None, True, False),
    "cutlass_simt": ("matmul", 33, 100, 30, None, True, False),
    "splitk": ("matmul", 32, 4096, 8192, "sm90_swap_128x32x128_splitk_bf16_f32", True, True),
}


@dataclass
class Case:
    """A plan (bf16 in, f32 out) on ``stream``, its host operands and device buffers (C poisoned)."""

    plan: Any
    names: tuple[str, str, str]
    a: np.ndarray
    b: np.ndarray
    bufs: list[mc.DeviceBuffer]

    def want(self) -> tuple[np.ndarray, np.ndarray]:
        a64, b64 = self.a.astype(np.float64), self.b.astype(np.float64)
        return (a64 @ b64.T).ravel(), (np.abs(a64) @ np.abs(b64).T).ravel()

    def check(self, context: mc.Context, stream: mc.Stream) -> None:
        """Poison C, execute on the plan's stream, compare with float64: the context is usable."""
        stream.memset(self.bufs[2], 0xFF)
        self.plan.execute(stream, *self.bufs, 1.0, 0.0)
        finish(stream)
        got = download(context, stream, self.bufs[2])
        assert_close(got, *self.want(), "f32")

    def free(self, stream: mc.Stream) -> None:
        for buf in self.bufs:
            buf.free(stream)


def make(kind: str, context: mc.Context, stream: mc.Stream, pool: mc.MemoryPool, rng: np.random.Generator) -> Case:
    cls, m, n, k, kernel, cutlass, sm90 = KINDS[kind]
    if cutlass:
        _require_cutlass(context, sm90)
    if cls == "vector":
        plan: Any = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k), output=mc.f32)
        names = ("x", "w", "y")
    else:
        plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), output=mc.f32, kernel=kernel)
        names = ("a", "b", "c")
        if kind == "splitk":
            assert plan.splits > 1 and plan.workspace_bytes > 0, plan.describe()
        if kind == "cutlass_simt":
            assert plan.kernel.family == "simt", plan.describe()
    a, b = random(rng, mc.bf16, m, k), random(rng, mc.bf16, n, k)
    bufs = [upload(context, stream, pool, a.ravel()), upload(context, stream, pool, b.ravel()),
            upload(context, stream, pool, poison(mc.f32, m * n))]
    return Case(plan, names, a, b, bufs)


def assert_poisoned(context: mc.Context, stream: mc.Stream, buf: mc.DeviceBuffer) -> None:
    finish(stream)
    assert np.isnan(download(context, stream, buf)).all(), "a refused execute wrote the output"


# -- streams ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
def test_another_stream_is_refused_before_anything_is_enqueued(context, stream, other, pool, rng, kind) -> None:
    case = make(kind, context, stream, pool, rng)
    finish(stream)
    with pytest.raises(mc.ContractError) as info:
        case.plan.execute(other, *case.bufs, 1.0, 0.0)
    err = info.value
    assert err.argument == "stream" and repr(stream) in err.expected and err.received == repr(other)
    finish(other)
    assert_poisoned(context, stream, case.bufs[2])
    case.check(context, stream)
    case.free(stream)


def test_the_split_k_plan_of_issue_12_alternating_two_streams_never_hangs(context, pool, rng) -> None:
    """The issue's input: a dozen executes alternately on two new streams with different A, nothing
    ordering them. Those on the second stream are refused; the first stream's results are right."""
    s1, s2 = context.create_stream(), context.create_stream()
    case = make("splitk", context, s1, pool, rng)
    m, k = case.a.shape
    other_a = upload(context, s2, pool, random(rng, mc.bf16, m, k).ravel())
    finish(s2)
    refused = 0
    for i in range(12):
        if i % 2:
            with pytest.raises(mc.ContractError) as info:
                case.plan.execute(s2, other_a, case.bufs[1], case.bufs[2], 1.0, 0.0)
            assert info.value.argument == "stream"
            refused += 1
        else:
            case.plan.execute(s1, *case.bufs, 1.0, 0.0)
    finish(s1)
    finish(s2)
    assert refused == 6
    assert_close(download(context, s1, case.bufs[2]), *case.want(), "f32")
    other_a.free(s2)
    case.free(s1)
    case.plan.close()
    finish(s1)
    s1.close()
    s2.close()


@pytest.mark.parametrize("kind", ["vector", "gemv", "splitk"])
def test_numba_execute_refuses_another_stream_handle(context, stream, other, pool, rng, kind) -> None:
    numba = pytest.importorskip("numba")
    case = make(kind, context, stream, pool, rng)
    execute = case.plan.numba_execute
    # CUDA_ERROR_INVALID_HANDLE from the NVRTC kernels' launch; the library's INVALID_ARGUMENT from CUTLASS's.
    wrong = 1 if getattr(case.plan, "handle", 0) else 400

    @numba.njit
    def run(s: int, a: int, b: int, c: int) -> int:
        return execute(s, a, b, c, 1.0, 0.0)

    handles = [buf.handle for buf in case.bufs]
    finish(stream)
    assert run(other.handle, *handles) == wrong
    finish(other)
    assert_poisoned(context, stream, case.bufs[2])
    assert run(stream.handle, *handles) == 0
    finish(stream)
    assert_close(download(context, stream, case.bufs[2]), *case.want(), "f32")
    case.free(stream)


# -- graph capture ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["vector", "gemv", "cutlass", "splitk"])
def test_a_capture_on_the_plans_stream_records_the_execute(context, stream, pool, rng, kind) -> None:
    case = make(kind, context, stream, pool, rng)
    graph = stream.capture(case.bufs, lambda bufs: case.plan.execute(stream, *bufs, 1.0, 0.0))
    assert_poisoned(context, stream, case.bufs[2])  # capturing ran nothing
    graph.launch(stream)
    finish(stream)
    assert_close(download(context, stream, case.bufs[2]), *case.want(), "f32")
    graph.close()
    case.free(stream)


@pytest.mark.parametrize("kind", ["vector", "gemv", "cutlass", "splitk"])
def test_a_capture_on_another_stream_is_refused_and_ended(context, stream, other, pool, rng, kind) -> None:
    case = make(kind, context, stream, pool, rng)
    finish(stream)
    with pytest.raises(mc.CaptureError) as info:
        other.capture(case.bufs, lambda bufs: case.plan.execute(other, *bufs, 1.0, 0.0))
    cause = info.value.__cause__
    assert isinstance(cause, mc.ContractError) and cause.argument == "stream"
    finish(other)  # the capture was ended: the stream captures and runs work again
    scratch = pool.allocate(mc.u8, other, 64)
    graph = other.capture(scratch, lambda buf: other.memset(buf, 0x5A))
    graph.launch(other)
    finish(other)
    assert (download(context, other, scratch) == 0x5A).all()
    graph.close()
    scratch.free(other)
    assert_poisoned(context, stream, case.bufs[2])
    case.check(context, stream)
    case.free(stream)


@pytest.mark.parametrize("kind", ["vector", "splitk"])
def test_the_plans_stream_forked_into_a_capture_begun_elsewhere_is_refused(context, stream, other, pool, rng,
                                                                            kind) -> None:
    """The graph of a capture begun on ``other`` launches only on ``other``: its replays would race
    with the plan's work on its own stream, so the plan's stream may not join that capture."""
    case = make(kind, context, stream, pool, rng)
    finish(stream)
    fork, join = context.create_event(), context.create_event()

    def forked(bufs: list[mc.DeviceBuffer]) -> None:
        fork.record(other)
        stream.wait_event(fork)
        try:
            case.plan.execute(stream, *bufs, 1.0, 0.0)
        finally:
            join.record(stream)
            other.wait_event(join)

    with pytest.raises(mc.CaptureError) as info:
        other.capture(case.bufs, forked)
    cause = info.value.__cause__
    assert isinstance(cause, mc.ContractError) and cause.argument == "stream"
    assert "forked into a capture begun on" in cause.received and repr(other) in cause.received
    finish(other)
    assert_poisoned(context, stream, case.bufs[2])
    case.check(context, stream)
    case.free(stream)


# -- alignment -------------------------------------------------------------------------------------------
class Window:
    """Another library's view of ``count`` elements from ``offset`` bytes into a DeviceBuffer (what
    ``as_device_buffer`` borrows): the easy way to an address the kernels cannot load from."""

    def __init__(self, buf: mc.DeviceBuffer, offset: int, count: int, typestr: str) -> None:
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": typestr, "strides": None,
                                         "data": (buf.handle + offset, False), "version": 3, "stream": None}


def borrowed(context: mc.Context, stream: mc.Stream, buf: mc.DeviceBuffer, offset: int, count: int) -> mc.DeviceBuffer:
    from mircuda.numba_ext import as_device_buffer

    typestr = {"bf16": "<V2", "f16": "<f2", "f32": "<f4"}[mc.dtypes.dtype_info(buf.scalar_type).name]
    return as_device_buffer(Window(buf, offset, count, typestr), context, stream, dtype=buf.scalar_type)


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_misaligned_operand_is_refused_naming_it(context, stream, pool, rng, kind) -> None:
    case = make(kind, context, stream, pool, rng)
    need = {op.name: op.alignment for op in case.plan.operands}
    spare = []
    for slot, name in enumerate(case.names):
        op = case.plan.operands[slot]
        assert op.name == name
        item = op.info.itemsize
        # Room for the view one element in: the same contents shifted, in a buffer one 16-byte block longer.
        host = download(context, stream, case.bufs[slot])
        wider = upload(context, stream, pool, np.concatenate([host, poison(op.info.scalar_type, 16 // item)]))
        spare.append(wider)
        offsets = [off for off in (1, item, need[name] // 2) if off % need[name]]
        if kind in ("vector", "gemv", "matmul_m1") and name in ("x", "w", "a", "b"):
            assert need[name] == 16 and item in offsets  # issue 20: one element in, under 16-byte loads
        if kind in ("cutlass", "splitk") and name == "c":
            assert need[name] == 16  # issue 20: C where the CUTLASS epilogue needs it
        for off in offsets:
            view = borrowed(context, stream, wider, off, op.count)
            args = list(case.bufs)
            args[slot] = view
            with pytest.raises(mc.ContractError) as info:
                case.plan.execute(stream, *args, 1.0, 0.0)
            err = info.value
            assert err.argument == name and err.received == hex(view.handle)
            assert f"aligned to {need[name]} bytes" in err.expected
        finish(stream)
        assert np.isnan(download(context, stream, case.bufs[2])).all(), "a refused execute wrote C"
        if name in ("y", "c"):
            assert np.isnan(download(context, stream, wider)[:op.count]).all()
    case.check(context, stream)
    for buf in spare:
        buf.free(stream)
    case.free(stream)


@pytest.mark.parametrize("kind", ["vector_any_k", "gemv_any_k", "cutlass_simt"])
def test_element_loads_take_any_element_aligned_operand(context, stream, pool, rng, kind) -> None:
    """Kernels that load one element at a time accept A and B one element into other memory (and
    compute the same result from there): only what the kernel needs is refused."""
    case = make(kind, context, stream, pool, rng)
    assert [op.alignment for op in case.plan.operands] == [2, 2, 4]
    shifted = []
    for slot in (0, 1):
        host = download(context, stream, case.bufs[slot])
        wider = upload(context, stream, pool, np.concatenate([poison(mc.bf16, 1), host]))
        shifted.append(wider)
        case.bufs[slot], original = borrowed(context, stream, wider, 2, len(host)), case.bufs[slot]
        original.free(stream)
    case.check(context, stream)
    for buf in (*shifted, case.bufs[2]):
        buf.free(stream)
