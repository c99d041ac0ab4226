"""What every dense plan's ``execute`` refuses before anything is enqueued, without a device: a stream
that is not the plan's (issue 12: two unordered streams sharing a split-K workspace hang the GPU), the
plan's stream forked into a capture begun elsewhere, and operand addresses the kernel cannot load or
store (issue 20). The plans are stand-ins around spies that record every launch; their operand
checks are the plans' own (built by the engines' ``operands`` and ``cutlass_operands``)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.graph import _capture
from mircuda.matmul import _spec
from mircuda.matmul._dense import MISALIGNED, WRONG_STREAM, cutlass_operands, matmul_executor
from mircuda.matmul._gemv import BatchedGemv, gemv_symbol
from mircuda.matmul._library import KernelInfo
from mircuda.matmul._vector import INVALID_HANDLE, INVALID_VALUE, VectorKernel, kernel_executor, kernel_symbol
from mircuda.runtime import Stream


class FakeContext:
    """Stands in for a Context: plans and buffers compare it by identity. ``_closed`` keeps the
    buffers' finalizers from calling the driver; making it current does nothing."""

    _closed = True
    _handle = 1

    def _make_current(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"FakeContext({id(self):#x})"


def fake_stream(ctx: Any, handle: int) -> Stream:
    stream = object.__new__(Stream)
    stream._context, stream._handle, stream._cu = ctx, handle, handle
    return stream


def fake_buffer(ctx: Any, dtype: Any, count: int, ptr: int) -> mc.DeviceBuffer:
    return mc.DeviceBuffer._adopt(ctx, None, dtype_info(dtype), count, ptr)  # type: ignore[arg-type]


class Spy:
    """Records every launch or library execute; a refused call must leave it empty."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)

    launch = __call__
    execute = __call__


def vector_engine(n: int, k: int, input: Any, output: Any) -> VectorKernel:
    """The dense vector kernel's engine without compiling it (what ``operands`` reads)."""
    engine = object.__new__(VectorKernel)
    engine.n, engine.k = n, k
    engine.input, engine.output = dtype_info(input), dtype_info(output)
    engine.vector = k % 8 == 0
    engine.alignment = 16 if engine.vector else 2
    engine.symbol = kernel_symbol(engine.input.name, engine.output.name, engine.vector)
    return engine


def gemv_engine(spec: mc.DenseMatmulSpec, input: Any, output: Any) -> BatchedGemv:
    engine = object.__new__(BatchedGemv)
    engine._spec = spec
    engine.input, engine.output = dtype_info(input), dtype_info(output)
    engine.vector = spec.k % 8 == 0
    engine.alignment = 16 if engine.vector else 2
    engine.symbol = gemv_symbol(engine.input.name, engine.output.name, engine.vector)
    return engine


def cutlass_kernel(family: str, input: str, output: str) -> KernelInfo:
    """A library table entry as the build reports it (``instance.cuh``: 16 bytes for the tensor-core
    kernels, the input's element size for SIMT)."""
    align = 2 if family == "simt" else 16
    name = {"simt": "simt_128x128x8_2stage", "sm90_swapped": "sm90_swap_128x32x128_splitk"}[family]
    return KernelInfo(0, f"{name}_{input}_{output}", family, input, output, (128, 32, 128), (1, 1), 0, align,
                      family == "sm90_swapped", (90,))


class Stand:
    """One stand-in plan with its context, stream, operands and spy: ``run(**overrides)`` executes it
    with valid operands, replacing the named ones."""

    def __init__(self, kind: str, output: Any = mc.f32, k: int = 128) -> None:
        self.kind = kind
        self.ctx = FakeContext()
        self.stream = fake_stream(self.ctx, 0x5000)
        self.spy = Spy()
        self.input, self.output = mc.bf16, output
        i, o = dtype_info(self.input), dtype_info(output)
        if kind == "vector":
            n = 64
            plan: Any = object.__new__(mc.DenseVectorPlan)
            plan._spec = mc.DenseVectorSpec(n, k)
            plan._operands = vector_engine(n, k, self.input, output).operands("x", "w", "y")
            plan._launch, plan._config = self.spy, None
            self.names = ("x", "w", "y")
        else:
            m = 1 if kind == "matmul_m1" else (4 if kind == "matmul_gemv" else 32)
            spec = mc.DenseMatmulSpec(m, 4096 if kind.startswith("cutlass") else 64, k)
            plan = object.__new__(mc.DenseMatmulPlan)
            plan._spec, plan._closed, plan._lock, plan._handle = spec, False, threading.Lock(), 0xC0
            plan._nvrtc, plan._lib = None, None
            if kind == "matmul_m1":
                plan._nvrtc = self.spy
                plan._operands = vector_engine(spec.n, k, self.input, output).operands("a", "b", "c")
            elif kind == "matmul_gemv":
                plan._nvrtc = self.spy
                plan._operands = gemv_engine(spec, self.input, output).operands()
            else:
                family = "simt" if kind == "cutlass_simt" else "sm90_swapped"
                plan._lib = self.spy
                plan._operands = cutlass_operands(cutlass_kernel(family, i.name, o.name), spec, i, o)
            self.names = ("a", "b", "c")
        plan._context, plan._stream, plan._in, plan._out = self.ctx, self.stream, i, o
        self.plan = plan
        # 256 MiB apart: disjoint whatever the shape (an output overlapping an input is refused)
        self.buffers = {op.name: fake_buffer(self.ctx, op.info.scalar_type, op.count, 0x1000_0000 * (j + 1))
                        for j, op in enumerate(plan.operands)}

    def run(self, *stream: Any, **overrides: Any) -> None:
        """Execute on the plan's stream, or on ``stream[0]`` when given."""
        args = [overrides.get(name, self.buffers[name]) for name in self.names]
        self.plan.execute(stream[0] if stream else self.stream, *args, 1.0, 0.0)

    def offset(self, name: str, nbytes: int) -> mc.DeviceBuffer:
        """The named operand's buffer moved ``nbytes`` into its memory (a borrowed view one element in)."""
        op = next(o for o in self.plan.operands if o.name == name)
        return fake_buffer(self.ctx, op.info.scalar_type, op.count, self.buffers[name].handle + nbytes)


KINDS = ["vector", "matmul_m1", "matmul_gemv", "cutlass_splitk", "cutlass_simt"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_plans_own_stream_enqueues(kind) -> None:
    stand = Stand(kind)
    stand.run()
    assert len(stand.spy.calls) == 1
    assert stand.plan.stream is stand.stream


@pytest.mark.parametrize("kind", KINDS)
def test_another_stream_is_refused_naming_both_before_anything_is_enqueued(kind) -> None:
    stand = Stand(kind)
    other = fake_stream(stand.ctx, 0x6000)
    with pytest.raises(mc.ContractError) as info:
        stand.run(other)
    err = info.value
    assert err.argument == "stream" and repr(stand.stream) in err.expected and err.received == repr(other)
    assert "0x5000" in err.expected and "0x6000" in err.received and "bound to the stream" in str(err)
    assert stand.spy.calls == []
    stand.run()  # the refusal left the plan usable
    assert len(stand.spy.calls) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_of_another_context_or_no_stream_is_refused(kind) -> None:
    stand = Stand(kind)
    foreign = fake_stream(FakeContext(), 0x5000)  # even with the same handle: another context's stream
    with pytest.raises(mc.ContractError) as info:
        stand.run(foreign)
    assert info.value.argument == "stream" and " of FakeContext(" in info.value.received
    for bad in (None, 0x5000, stand.stream.handle):
        with pytest.raises(mc.ContractError) as info:
            stand.run(bad)
        assert info.value.argument == "stream" and info.value.received in ("NoneType", "int")
    assert stand.spy.calls == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_plans_closed_stream_is_refused(kind) -> None:
    stand = Stand(kind)
    stand.stream._handle = 0
    with pytest.raises(mc.ClosedResourceError, match="stream"):
        stand.run()
    assert stand.spy.calls == []


@pytest.fixture()
def capturing(monkeypatch):  # type: ignore[no-untyped-def]
    """Pretend a mircuda capture (id 7) is in progress, begun on ``set_origin``'s stream, with every
    stream asked about taking part in it."""
    state: dict[str, Any] = {}

    def set_origin(stream: Stream) -> None:
        monkeypatch.setitem(_capture._records, 7, _capture.CaptureRecord(stream, 7))
        monkeypatch.setattr(_spec, "_capture_info", lambda s: (_capture._ACTIVE, 7, None, []))
        state["origin"] = stream

    return set_origin


@pytest.mark.parametrize("kind", KINDS)
def test_the_plans_stream_forked_into_a_capture_begun_elsewhere_is_refused(kind, capturing) -> None:
    stand = Stand(kind)
    origin = fake_stream(stand.ctx, 0x7000)
    capturing(origin)
    with pytest.raises(mc.ContractError) as info:
        stand.run()
    assert info.value.argument == "stream" and "forked into a capture begun on" in info.value.received
    assert repr(origin) in info.value.received and stand.spy.calls == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_capture_begun_on_the_plans_stream_records_the_execute(kind, capturing) -> None:
    stand = Stand(kind)
    capturing(stand.stream)
    stand.run()
    assert len(stand.spy.calls) == 1


def test_another_threads_capture_of_another_stream_leaves_the_plan_alone(monkeypatch) -> None:
    stand = Stand("cutlass_splitk")
    monkeypatch.setitem(_capture._records, 7, _capture.CaptureRecord(fake_stream(stand.ctx, 0x7000), 7))
    monkeypatch.setattr(_spec, "_capture_info", lambda s: (0, 0, None, []))  # the plan's stream: not capturing
    stand.run()
    assert len(stand.spy.calls) == 1


ALIGNMENTS = [  # (kind, output, K, {operand: the alignment its kernel needs})
    ("vector", mc.bf16, 128, {"x": 16, "w": 16, "y": 2}),
    ("vector", mc.f32, 128, {"x": 16, "w": 16, "y": 4}),
    ("vector", mc.f32, 127, {"x": 2, "w": 2, "y": 4}),
    ("matmul_m1", mc.f32, 128, {"a": 16, "b": 16, "c": 4}),
    ("matmul_gemv", mc.bf16, 128, {"a": 16, "b": 16, "c": 2}),
    ("matmul_gemv", mc.f32, 129, {"a": 2, "b": 2, "c": 4}),
    ("cutlass_splitk", mc.bf16, 128, {"a": 16, "b": 16, "c": 16}),
    ("cutlass_splitk", mc.f32, 128, {"a": 16, "b": 16, "c": 16}),
    ("cutlass_simt", mc.f32, 129, {"a": 2, "b": 2, "c": 4}),
    ("cutlass_simt", mc.bf16, 129, {"a": 2, "b": 2, "c": 2}),
]


@pytest.mark.parametrize("kind, output, k, need", ALIGNMENTS)
def test_each_operand_needs_the_alignment_of_its_kernels_accesses(kind, output, k, need) -> None:
    stand = Stand(kind, output, k)
    assert {op.name: op.alignment for op in stand.plan.operands} == need
    for name, align in need.items():
        item = dtype_info(output if name in ("y", "c") else mc.bf16).itemsize
        for nbytes in sorted({1, item, align // 2}):  # an odd address, one element in, half the alignment
            if nbytes % align == 0:
                continue
            bad = stand.offset(name, nbytes)
            with pytest.raises(mc.ContractError) as info:
                stand.run(**{name: bad})
            err = info.value
            assert err.argument == name and err.received == hex(bad.handle), err
            assert f"aligned to {align} bytes" in err.expected and "kernel " in err.expected
        stand.run(**{name: stand.offset(name, align)})  # one alignment further in: accepted
    assert stand.spy.calls and len(stand.spy.calls) == len(need)


def test_a_borrowed_buffer_one_element_in_is_refused_by_the_16_byte_vector_loads() -> None:
    # Issue 20: a stand-in plan accepted x at an address ending in 0x2 and w at 0x...2.
    stand = Stand("vector", mc.bf16, 4096)
    for name in ("x", "w"):
        with pytest.raises(mc.ContractError) as info:
            stand.run(**{name: stand.offset(name, 2)})
        assert info.value.argument == name and info.value.received.endswith("2")
        assert "16-byte loads" in info.value.expected
    assert stand.spy.calls == []


def test_the_cutlass_output_is_checked_where_its_kernel_needs_it() -> None:
    # Issue 20: DenseMatmulPlan.execute did not check c.
    stand = Stand("cutlass_splitk", mc.f32)
    with pytest.raises(mc.ContractError) as info:
        stand.run(c=stand.offset("c", 4))
    assert info.value.argument == "c" and "aligned to 16 bytes" in info.value.expected
    assert "sm90_swap_128x32x128_splitk_bf16_f32" in info.value.expected and stand.spy.calls == []


def test_an_f32_output_two_bytes_off_is_refused_even_where_loads_need_no_alignment() -> None:
    stand = Stand("matmul_gemv", mc.f32, 129)
    with pytest.raises(mc.ContractError) as info:
        stand.run(c=stand.offset("c", 2))
    assert info.value.argument == "c" and "4-byte f32 stores" in info.value.expected
    assert stand.spy.calls == []


def test_the_stream_is_checked_before_the_operands() -> None:
    stand = Stand("cutlass_splitk")
    with pytest.raises(mc.ContractError) as info:
        stand.run(fake_stream(stand.ctx, 0x6000), a=None)
    assert info.value.argument == "stream"


def test_operands_are_fixed_at_construction_and_alignments_are_powers_of_two() -> None:
    stand = Stand("matmul_gemv")
    ops = stand.plan.operands
    stand.run()
    assert stand.plan.operands is ops and all(op.mask == op.alignment - 1 for op in ops)
    with pytest.raises(ValueError, match="power of two"):
        _spec.Operand("x", dtype_info(mc.bf16), 1, "[1]", 12, "test")


# -- the Numba executors ----------------------------------------------------------------------------
def test_the_matmul_executor_refuses_another_stream_and_a_misaligned_c() -> None:
    pytest.importorskip("numba")
    seen: list[tuple[Any, ...]] = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64, ctypes.c_float, ctypes.c_float)
    entry = proto(lambda *args: seen.append(args) or 0)
    execute = matmul_executor(ctypes.cast(entry, ctypes.c_void_p).value, 0xABC0, 2, stream=0x77, c_alignment=4)
    assert execute(0x78, 0x1000, 0x2000, 0x3000, 1.0, 0.0) == WRONG_STREAM and seen == []
    assert execute(0x77, 0x1000, 0x2000, 0x3002, 1.0, 0.0) == MISALIGNED and seen == []
    assert execute(0x77, 0x1002, 0x2002, 0x3004, 1.0, 0.0) == 0  # SIMT: A and B one element in are fine
    assert seen == [(0xABC0, 0x77, 0x1002, 0x2002, 0x3004, 1.0, 0.0)]


def test_the_kernel_executor_refuses_another_stream_and_an_output_off_its_element_size() -> None:
    pytest.importorskip("numba")
    seen: list[int] = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    entry = proto(lambda f, gx, gy, gz, bx, by, bz, smem, stream, params, extra: seen.append(stream) or 0)
    execute = kernel_executor(0xF00, 8, 64, 64, 128, 16, True, launch_function=entry, stream=0x55, out_alignment=4)
    assert execute(np.uint64(0x56), 0x1000, 0x2000, 0x3000, 1.0, 0.0) == INVALID_HANDLE and seen == []
    assert execute(0x55, 0x1000, 0x2000, 0x3002, 1.0, 0.0) == INVALID_VALUE and seen == []
    assert execute(0x55, 0x1000, 0x2000, 0x3004, 1.0, 0.0) == 0 and seen == [0x55]


OUTPUT = {"vector": "y", "matmul_m1": "c", "matmul_gemv": "c", "cutlass_splitk": "c", "cutlass_simt": "c"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_output_over_an_input_is_refused_with_both_byte_ranges(kind) -> None:
    stand = Stand(kind)
    out = OUTPUT[kind]
    op = next(o for o in stand.plan.operands if o.name == out)
    for name in stand.names:
        if name == out:
            continue
        where = stand.buffers[name].handle + 16  # C (y) 16 bytes into an input: the kernel reads what it writes
        with pytest.raises(mc.ContractError) as info:
            stand.run(**{out: fake_buffer(stand.ctx, op.info.scalar_type, op.count, where)})
        err = info.value
        assert err.argument == out and f"does not overlap {name}" in err.expected
        assert err.received.startswith(f"{out} at [{where:#x}, ") and f"overlapping {name} at [" in err.received
    assert stand.spy.calls == []
    inp = next(o for o in stand.plan.operands if o.name == stand.names[1])
    right_after = stand.buffers[inp.name].handle + inp.count * inp.info.itemsize
    stand.run(**{out: fake_buffer(stand.ctx, op.info.scalar_type, op.count, right_after)})  # adjacent: disjoint
    assert len(stand.spy.calls) == 1


# -- kernel= at construction ----------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["", "   ", b"sm90_pingpong_128x128x64_bf16_bf16", 7], ids=repr)
@pytest.mark.parametrize("plan", ["DenseMatmulPlan", "BlockwiseFp8Plan", "BlockScaledFp4Plan"])
def test_every_matrix_plan_refuses_a_kernel_that_is_not_a_name_before_looking_for_a_library(monkeypatch, plan,
                                                                                             kernel) -> None:
    """An empty name once went on to the library lookup: without a built library BlockwiseFp8Plan raised
    CutlassNotFound ("build the library"), as if the name were a real kernel the machine lacked."""
    from mircuda.matmul import _dense, _fp4, _fp8

    for module in (_dense, _fp4, _fp8):
        monkeypatch.setattr(module, "plan_stream", lambda stream, context: None)
    with pytest.raises(mc.ContractError) as info:
        getattr(mc, plan)(FakeContext(), None, mc.DenseMatmulSpec(4, 256, 512), kernel=kernel)
    assert info.value.argument == "kernel" and info.value.received == repr(kernel)
    assert "a non-empty str" in info.value.expected
