"""The grouped NVFP4 plans' execute path without a GPU: stand-ins for the context, stream, buffers and the
two kernels (the plans' own checks and launches run unchanged). Valid operands enqueue the setup kernel and
the grouped kernel once each with the addresses, routing, global scales and alphas in the kernels'
parameter order; every bad operand is refused by name before anything is enqueued; the paired and indexed
plans name their own arguments; the @numba.njit executor packs both parameter blocks like C and refuses
another stream or a misaligned address before launching."""

from __future__ import annotations

import ctypes
import struct
import weakref
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.matmul._moe import (IndexedGroupedFp4Plan, PairedVariableGroupedFp4Plan, VariableGroupedFp4Plan,
                                 _set_operands)
from mircuda.matmul._moe_kernels import default_tuning, grouped_executor, tile_shape
from mircuda.matmul._vector import INVALID_HANDLE, INVALID_VALUE
from test_matmul_plan_checks import FakeContext, fake_buffer, fake_stream

WS, ERR, APM = 0xA0_0000, 0xA1_0000, 0xA2_0000


class KernelSpy:
    def __init__(self, name: str, calls: list[tuple[Any, ...]]) -> None:
        self.name, self.calls, self.handle = name, calls, hash(name) & 0xFFFF

    def launch(self, stream: Any, config: Any, *args: Any) -> None:
        self.calls.append((self.name, *args))


class Stand:
    """A plan of ``cls`` around kernel spies, with valid operands for every argument."""

    def __init__(self, cls: type, *, n: int = 96, k: int = 160, capacity: int = 40, groups: int = 5, bank: int = 3,
                 fixed: int = 0, layout: str = "tiled", scale_pairs: bool = False) -> None:
        self.ctx = FakeContext()
        self.stream = fake_stream(self.ctx, 0x5000)
        self.calls: list[tuple[Any, ...]] = []
        sets = 2 if cls is PairedVariableGroupedFp4Plan else 1
        plan: Any = object.__new__(cls)
        plan._spec = (mc.IndexedGroupedFp4Spec(n, k, fixed, groups, bank) if fixed else
                      mc.VariableGroupedFp4Spec(n, k, capacity, groups, bank))
        capacity = plan._spec.capacity
        plan._context, plan._stream = self.ctx, self.stream
        plan._in, plan._out = dtype_info(mc.u8), dtype_info(mc.bf16)
        plan._layout = layout
        plan._n, plan._k, plan._capacity, plan._groups, plan._bank = n, k, capacity, groups, bank
        plan._fixed, plan._sets, plan._closed, plan._numba, plan._cutlass = fixed, sets, False, None, None
        plan._ws = fake_buffer(self.ctx, mc.i32, 4 * groups + 2, WS)
        plan._error = fake_buffer(self.ctx, mc.i32, 1, ERR)
        plan._alpha = fake_buffer(self.ctx, mc.f32, sets * bank, APM)
        plan._buffers = [plan._ws, plan._error, plan._alpha]
        shape = tile_shape(n=n, capacity=capacity, groups=groups, rows_per_tile=16, fixed_rows=fixed, sets=sets)
        plan._kernels = SimpleNamespace(setup=KernelSpy("setup", self.calls), grouped=KernelSpy("grouped", self.calls),
                                        setup_config=mc.LaunchConfig(1, 256),
                                        grouped_config=mc.LaunchConfig((shape.tiles, shape.weight_blocks, sets), 256),
                                        shape=shape, arch="sm_90", pdl=False)
        plan._why_portable = "cc 9.0 has no FP4 tensor-core instruction"
        plan._tuning = default_tuning("sm_90", shape.variant)
        plan._finalizer = weakref.finalize(plan, lambda: None)
        plan._set_ops = tuple(_set_operands(s, n, k, capacity, bank, layout, scale_pairs)
                              for s in (("",) if sets == 1 else ("1", "2")))
        plan._operands = tuple(op for ops in plan._set_ops for op in ops)
        plan._masks = tuple(op.alignment - 1 for op in plan._set_ops[0])
        self.plan = plan
        self.sets = []
        for s, ops in enumerate(plan._set_ops):
            bufs = {op.name.rstrip("12"): fake_buffer(self.ctx, op.info.scalar_type, op.count, 0x100_0000 * (5 * s + j + 1))
                    for j, op in enumerate(ops)}
            bufs["global_a"] = fake_buffer(self.ctx, mc.f32, 1, 0x90_0000 + 0x1000 * s)
            bufs["global_b"] = fake_buffer(self.ctx, mc.f32, bank, 0x91_0000 + 0x1000 * s)
            self.sets.append(bufs)
        self.routing = {name: fake_buffer(self.ctx, mc.i32, groups, 0x80_0000 + 0x1000 * j)
                        for j, name in enumerate(("row_counts", "offsets", "matrix_indices"))}

    def run(self, **over: Any) -> None:
        p, s0 = self.plan, self.sets[0]
        stream = over.pop("stream", self.stream)
        if isinstance(p, PairedVariableGroupedFp4Plan):
            ops = [mc.GroupedFp4Operands(s["a"], s["a_scales"], s["b_bank"], s["b_scales"], s["d"], s["global_a"],
                                         s["global_b"], alpha) for s, alpha in zip(self.sets, (0.5, 2.0))]
            first = over.pop("first", ops[0])
            second = over.pop("second", ops[1])
            r = {**self.routing, **over}
            p.execute(stream, first, second, r["row_counts"], r["offsets"], r["matrix_indices"])
            return
        args = {**{k: s0[k] for k in ("a", "a_scales", "b_bank", "b_scales", "d")}, **over}
        kw = {"global_a": over.get("global_a", s0["global_a"]), "global_b": over.get("global_b", s0["global_b"]),
              "alpha": over.get("alpha", 1.5)}
        ops = [args[k] for k in ("a", "a_scales", "b_bank", "b_scales", "d")]
        if isinstance(p, IndexedGroupedFp4Plan):
            p.execute(stream, *ops, over.get("indices", self.routing["matrix_indices"]), **kw)
        else:
            r = {k: over.get(k, v) for k, v in self.routing.items()}
            p.execute(stream, *ops, r["row_counts"], r["offsets"], r["matrix_indices"], **kw)


def test_valid_operands_enqueue_setup_then_grouped_with_every_address_in_order() -> None:
    st = Stand(VariableGroupedFp4Plan)
    st.run()
    s, r = st.sets[0], st.routing
    h = {k: v.handle for k, v in s.items()}
    assert st.calls == [
        ("setup", WS, ERR, APM, r["row_counts"].handle, r["offsets"].handle, r["matrix_indices"].handle,
         h["global_a"], h["global_b"], 1.5, 0, 0, 1.0),
        ("grouped", WS, APM, h["a"], h["a_scales"], h["b_bank"], h["b_scales"], h["d"], 0, 0, 0, 0, 0)]


def test_absent_global_scales_are_null_addresses() -> None:
    st = Stand(VariableGroupedFp4Plan)
    st.run(global_a=None, global_b=None, alpha=2.0)
    assert st.calls[0][7:10] == (0, 0, 2.0)


@pytest.mark.parametrize("name, make, match", [
    ("a", lambda c: fake_buffer(c, mc.u8, 40 * 80 - 1, 0x300_0000), "at least 3200"),
    ("a", lambda c: fake_buffer(c, mc.u8, 40 * 80, 0x300_0004), "aligned to 8"),
    ("a_scales", lambda c: fake_buffer(c, mc.u8, 40 * 10, 0x300_0000), "e4m3"),
    ("b_bank", lambda c: fake_buffer(c, mc.u8, 3 * 96 * 80, 0x300_0008), "aligned to 16"),
    ("b_scales", lambda c: fake_buffer(c, mc.e4m3, 3 * 128 * 12 - 1, 0x300_0000), "at least 4608"),
    ("d", lambda c: fake_buffer(c, mc.f32, 40 * 96, 0x300_0000), "bf16"),
    ("row_counts", lambda c: fake_buffer(c, mc.i32, 4, 0x300_0000), "at least 5"),
    ("offsets", lambda c: fake_buffer(c, mc.u32, 5, 0x300_0000), "i32"),
    ("matrix_indices", lambda c: 0x300_0000, "DeviceBuffer"),
    ("global_a", lambda c: fake_buffer(c, mc.f32, 1, 0x300_0002), "aligned to 4"),
    ("global_b", lambda c: fake_buffer(c, mc.f32, 2, 0x300_0000), "at least 3"),
])
def test_a_bad_operand_is_refused_by_name_before_anything_is_enqueued(name, make, match) -> None:
    st = Stand(VariableGroupedFp4Plan)
    with pytest.raises(mc.ContractError, match=match) as info:
        st.run(**{name: make(st.ctx)})
    assert info.value.argument == name and st.calls == []


def test_the_vector_kernels_scale_pair_loads_need_2_byte_aligned_bank_scales() -> None:
    """fp4_vector.cu reads two adjacent bank scales as one 16-bit word when K % 32 == 0: an odd b_scales
    address (a foreign or offset buffer) would fault on the GPU (misaligned address, the context lost), so
    the plan's checks refuse it first; byte loads (K % 32 != 0, the staged variant) take any address."""
    odd = 0x300_0001
    st = Stand(VariableGroupedFp4Plan, scale_pairs=True)
    with pytest.raises(mc.ContractError, match="aligned to 2") as info:
        st.run(b_scales=fake_buffer(st.ctx, mc.e4m3, 3 * 128 * 12, odd))
    assert info.value.argument == "b_scales" and st.calls == []
    st = Stand(VariableGroupedFp4Plan)
    st.run(b_scales=fake_buffer(st.ctx, mc.e4m3, 3 * 128 * 12, odd))
    assert len(st.calls) == 2


def test_split_k_and_split_n_read_both_scale_operands_in_pairs_when_k_is_a_multiple_of_32() -> None:
    """fp4_grouped.cu's MIRCUDA_MOE_SCALE_PAIRS: a row's two scale bytes of a step in one 16-bit load, bank and
    activation scales alike, so both need 2-byte alignment; without pairs (K % 32 != 0) any address."""
    def align(k: int, pairs: bool) -> tuple[int, int]:
        ops = {o.name: o.alignment for o in _set_operands("", 768, k, 64, 8, "tiled", pairs, False, pairs)}
        return ops["a_scales"], ops["b_scales"]
    assert align(2048, True) == (2, 2)
    assert align(2064, False) == (1, 1)
    ops = {o.name: o for o in _set_operands("", 768, 2048, 64, 8, "linear", True, False, True)}
    assert "16-bit loads of two adjacent scales" in ops["a_scales"].reason


@pytest.mark.parametrize("k", [512, 528])
@pytest.mark.parametrize("variant", ["split_n", "split_k", "staged", "vector"])
def test_the_plans_scale_pair_rule_is_what_each_variants_kernel_loads(variant: str, k: int) -> None:
    """scale_pair_loads (what the plans ask 2-byte alignment for) against the PTX of the variant's kernel: 16-bit
    scale loads iff the bank scales are read in pairs, and no byte loads left iff the activation scales are too
    (the test above hands _set_operands its flags, so a wrong rule in the plan would pass it). The vector variant
    with a word decoder (dp4a's pairs are _set_operands' own flag)."""
    from mircuda.matmul._moe import scale_pair_loads
    from mircuda.matmul._moe_kernels import DecodeTuning, grouped_options, grouped_source, vector_source

    rows = {"vector": 1, "staged": 32}.get(variant, 16)
    tuning = DecodeTuning("e4m3", 2, 0, 1) if variant == "vector" else None
    options = grouped_options(n=256, k=k, groups=8, bank_size=8, capacity=64, rows_per_tile=rows, fixed_rows=0,
                              tiled=True, sets=1, variant=variant, tuning=tuning)
    source = vector_source() if variant == "vector" else grouped_source()
    ptx = mc.compile_program(source, "compute_90", mc.CompileOptions(defines=dict(options.defines),
                                                                     output="ptx")).image.decode()
    pairs = "ld.global.nc.u16" in ptx
    assert scale_pair_loads("portable", variant, k) == (pairs, pairs and "ld.global.nc.u8" not in ptx)
    assert scale_pair_loads("decode_grouped", variant, k) == (False, False)


def test_a_bad_alpha_another_stream_and_a_closed_plan_are_refused() -> None:
    st = Stand(VariableGroupedFp4Plan)
    with pytest.raises(mc.ContractError) as info:
        st.run(alpha=float("1e40"))
    assert info.value.argument == "alpha"
    with pytest.raises(mc.ContractError) as info:
        st.run(stream=fake_stream(st.ctx, 0x6000))
    assert info.value.argument == "stream" and st.calls == []
    st.plan.close()
    with pytest.raises(mc.ClosedResourceError):
        st.run()
    assert st.calls == []


def test_linear_bank_scales_take_n_k_over_16_bytes_per_matrix() -> None:
    st = Stand(VariableGroupedFp4Plan, layout="linear")
    assert st.plan.operands[3].count == 3 * 96 * 10
    st.run()
    assert len(st.calls) == 2


def test_the_indexed_plan_takes_indices_and_no_row_arrays() -> None:
    st = Stand(IndexedGroupedFp4Plan, fixed=4, groups=7)
    st.run()
    assert st.calls[0][4:7] == (0, 0, st.routing["matrix_indices"].handle)
    assert st.plan.operands[0].count == 7 * 4 * 80  # capacity P R rows of K/2 bytes
    with pytest.raises(mc.ContractError) as info:
        st.run(indices=fake_buffer(st.ctx, mc.i32, 6, 0x300_0000))
    assert info.value.argument == "indices" and len(st.calls) == 2


def test_the_paired_plan_names_each_sets_arguments_and_launches_both_sets_once() -> None:
    st = Stand(PairedVariableGroupedFp4Plan)
    st.run()
    s1, s2 = ({k: v.handle for k, v in s.items()} for s in st.sets)
    setup, grouped = st.calls
    assert setup[7:] == (s1["global_a"], s1["global_b"], 0.5, s2["global_a"], s2["global_b"], 2.0)
    assert grouped[3:] == tuple(s[k] for s in (s1, s2) for k in ("a", "a_scales", "b_bank", "b_scales", "d"))
    bad = mc.GroupedFp4Operands(st.sets[1]["a"], st.sets[1]["a_scales"], st.sets[1]["b_bank"],
                                fake_buffer(st.ctx, mc.e4m3, 7, 0x300_0000), st.sets[1]["d"])
    with pytest.raises(mc.ContractError) as info:
        st.run(second=bad)
    assert info.value.argument == "b_scales2"
    with pytest.raises(mc.ContractError) as info:
        st.run(first=(1, 2, 3))
    assert info.value.argument == "first" and len(st.calls) == 2


def test_describe_names_the_kernels_the_variant_and_why() -> None:
    st = Stand(VariableGroupedFp4Plan)
    st.ctx.device_info = lambda: SimpleNamespace(arch="sm_90")  # type: ignore[attr-defined]
    text = st.plan.describe()
    assert "fp4_grouped_setup" in text and "fp4_grouped_bf16" in text and "variant split_k" in text
    assert "software E2M1 decode" in text and "cc 9.0 has no FP4 tensor-core instruction" in text
    assert "e4m3" in text and "a ring of 2 load stages" in text and "4 warps split K over 32 weight rows" in text
    assert repr(Stand(IndexedGroupedFp4Plan, fixed=4).plan).startswith("IndexedGroupedFp4Plan(n=96, k=160, rows=4")


def test_the_executor_packs_both_parameter_blocks_like_c_and_refuses_before_launching() -> None:
    pytest.importorskip("numba")
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    seen: list[tuple[Any, ...]] = []

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        pointers = (ctypes.c_uint64 * 12).from_address(params)
        seen.append((f, (gx, gy, gz), bx, stream, b"".join(ctypes.string_at(p, 8) for p in pointers)))
        return 0

    st = Stand(PairedVariableGroupedFp4Plan)
    kernels = st.plan._kernels
    execute = grouped_executor(kernels, (WS, ERR, APM), (7, 0, 15, 0, 1), launch_function=proto(fake_launch),
                               stream=0x55)
    args = (0x8000, 0x8100, 0x8200, 0x1000, 0x1101, 0x2000, 0x3001, 0x4002, 0x5004, 0x5104, 0.5,
            0x1008, 0x1201, 0x2010, 0x3003, 0x4006, 0x6004, 0x6104, 2.0)
    assert execute(0x55, *args) == 0
    setup, grouped = seen
    assert setup[:4] == (kernels.setup.handle, (1, 1, 1), 256, 0x55)
    assert setup[4] == struct.pack("<QQQQQQQQdQQd", WS, ERR, APM, 0x8000, 0x8100, 0x8200, 0x5004, 0x5104, 0.5,
                                   0x6004, 0x6104, 2.0)
    assert grouped[:4] == (kernels.grouped.handle, kernels.grouped_config.grid, 256, 0x55)
    assert grouped[4] == struct.pack("<12Q", WS, APM, 0x1000, 0x1101, 0x2000, 0x3001, 0x4002, 0x1008, 0x1201,
                                     0x2010, 0x3003, 0x4006)
    assert execute(0x56, *args) == INVALID_HANDLE
    for i, bad in ((3, 0x1004), (5, 0x2008), (7, 0x4003), (0, 0x8002), (15, 0x4007), (17, 0x6006)):
        wrong = list(args)
        wrong[i] = bad
        assert execute(0x55, *wrong) == INVALID_VALUE, i
    assert len(seen) == 2


def test_numpy_integer_sizes_are_stored_as_python_ints_so_size_products_do_not_wrap() -> None:
    """A fresh user's review (2026-12-01): np.int32 sizes were kept, so capacity and the operands' lengths
    wrapped to 0 and the length checks let an 8-byte buffer through."""
    import numpy as np

    spec = mc.VariableGroupedFp4Spec(np.int32(4096), np.int32(4096), np.int32(2**20), 8, 8)
    assert type(spec.capacity) is int and spec.capacity * spec.k // 2 == 2**31
    with pytest.raises(mc.ContractError) as info:
        mc.IndexedGroupedFp4Spec(256, 256, np.int32(65536), np.int32(65536), 4)
    assert info.value.argument == "rows"
    dense = mc.DenseMatmulSpec(np.int32(65536), np.int32(65536), 16)
    assert type(dense.m) is int and dense.flops == 2 * 65536 * 65536 * 16


def test_a_library_that_is_not_a_cutlass_library_is_refused_by_name() -> None:
    """Review 2026-12-01: library='x' passed every check (and on cc 12.x fell back to the portable path)."""
    plan = object.__new__(mc.VariableGroupedFp4Plan)
    with pytest.raises(mc.ContractError) as info:
        plan._build(None, None, n=64, k=64, capacity=8, groups=2, bank=2, fixed_rows=0, sets=1, scale_layout="tiled",
                    compiler=None, rows_per_tile=None, variant=None, library="x")
    assert info.value.argument == "library"


def test_rows_per_tile_takes_numpy_integers_as_the_specs_do() -> None:
    """Review 2026-12-01: rows_per_tile=np.int64(16) was refused while every spec size takes numpy ints; a
    value outside the list is still refused by name."""
    import numpy as np

    plan = object.__new__(mc.VariableGroupedFp4Plan)
    with pytest.raises(mc.ContractError) as info:
        plan._build(None, None, n=64, k=64, capacity=8, groups=2, bank=2, fixed_rows=0, sets=1, scale_layout="tiled",
                    compiler=None, rows_per_tile=np.int64(24), variant=None, library=None)
    assert info.value.argument == "rows_per_tile"
    with pytest.raises(Exception) as later:  # past the knob checks: the (absent) stream is the next thing refused
        plan._build(None, None, n=64, k=64, capacity=8, groups=2, bank=2, fixed_rows=0, sets=1, scale_layout="tiled",
                    compiler=None, rows_per_tile=np.int64(16), variant=None, library=None)
    assert getattr(later.value, "argument", None) != "rows_per_tile"


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_alpha_is_refused_by_name(alpha) -> None:
    from mircuda.matmul._spec import check_scalar

    with pytest.raises(mc.ContractError) as info:
        check_scalar("alpha", alpha)
    assert info.value.argument == "alpha"
    assert check_scalar("alpha", 0.75) == 0.75


# -- outputs that overlap what the kernels read ----------------------------------------------------------
def test_an_output_overlapping_an_input_is_refused_with_both_byte_ranges() -> None:
    st = Stand(VariableGroupedFp4Plan)
    a = st.sets[0]["a"]
    inside_a = fake_buffer(st.ctx, mc.bf16, 40 * 96, a.handle + 64)
    with pytest.raises(mc.ContractError, match=r"d at \[0x[0-9a-f]+, 0x[0-9a-f]+\) overlapping a at") as info:
        st.run(d=inside_a)
    assert info.value.argument == "d" and st.calls == []
    counts = st.routing["row_counts"]
    over_counts = fake_buffer(st.ctx, mc.bf16, 40 * 96, counts.handle - 40 * 96 * 2 + 4)  # its last 4 bytes
    with pytest.raises(mc.ContractError, match="overlapping row_counts at") as info:
        st.run(d=over_counts)
    assert info.value.argument == "d" and st.calls == []
    touching = fake_buffer(st.ctx, mc.bf16, 40 * 96, counts.handle - 40 * 96 * 2)  # ends where row_counts starts
    st.run(d=touching)
    assert [c[0] for c in st.calls] == ["setup", "grouped"]


def test_the_paired_plans_outputs_must_not_overlap_each_other_or_the_other_sets_inputs() -> None:
    st = Stand(PairedVariableGroupedFp4Plan)
    s0, s1 = st.sets

    def operands(s: dict[str, Any], d: Any) -> mc.GroupedFp4Operands:
        return mc.GroupedFp4Operands(s["a"], s["a_scales"], s["b_bank"], s["b_scales"], d)

    with pytest.raises(mc.ContractError, match="overlapping d1 at") as info:
        st.run(second=operands(s1, s0["d"]))
    assert info.value.argument == "d2" and st.calls == []
    with pytest.raises(mc.ContractError, match="overlapping b_bank2 at") as info:
        st.run(first=operands(s0, fake_buffer(st.ctx, mc.bf16, 40 * 96, s1["b_bank"].handle)))
    assert info.value.argument == "d1" and st.calls == []


def test_the_indexed_plans_output_must_not_overlap_its_indices() -> None:
    st = Stand(IndexedGroupedFp4Plan, fixed=8)
    idx = st.routing["matrix_indices"]
    with pytest.raises(mc.ContractError, match="overlapping indices at") as info:
        st.run(d=fake_buffer(st.ctx, mc.bf16, 40 * 96, idx.handle))
    assert info.value.argument == "d" and st.calls == []


def test_an_output_over_the_global_scales_is_refused() -> None:
    """The setup kernel reads global_a and global_b on every execute: D written over them would feed the next
    execute (or replay) BF16 bytes as FP32 scales."""
    st = Stand(VariableGroupedFp4Plan)
    gb = st.sets[0]["global_b"]
    with pytest.raises(mc.ContractError, match="overlapping global_b at") as info:
        st.run(d=fake_buffer(st.ctx, mc.bf16, 40 * 96, gb.handle - 2))
    assert info.value.argument == "d" and st.calls == []
    paired = Stand(PairedVariableGroupedFp4Plan)
    s0, s1 = paired.sets
    over = fake_buffer(paired.ctx, mc.bf16, 40 * 96, s1["global_a"].handle)
    with pytest.raises(mc.ContractError, match="overlapping global_a2 at") as info:
        paired.run(first=mc.GroupedFp4Operands(s0["a"], s0["a_scales"], s0["b_bank"], s0["b_scales"], over,
                                               s0["global_a"], s0["global_b"]))
    assert info.value.argument == "d1" and paired.calls == []


def test_int_knob_turns_numpy_integers_into_ints_and_leaves_the_rest_to_the_knobs_check() -> None:
    import numpy as np

    from mircuda.matmul._spec import int_knob

    for value in (np.int64(4), np.uint8(4), np.int32(4)):
        assert int_knob(value) == 4 and type(int_knob(value)) is int
    for value in (None, 4, True, np.True_, 4.0, "4", [4]):
        assert int_knob(value) is value


def test_the_docs_say_which_variants_need_2_byte_aligned_scales() -> None:
    """MIRCUDA_MOE_SCALE_PAIRS made split_k and split_n ask 2-byte aligned a_scales and b_scales (K % 32 == 0); the
    plans' docstrings and the README named only the integer path's a_scales."""
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    said = ("`b_scales` must then be 2-byte aligned, and `a_scales` too for `\"split_k\"` and `\"split_n\"`")
    assert said in readme
    for cls in (VariableGroupedFp4Plan, IndexedGroupedFp4Plan, PairedVariableGroupedFp4Plan):
        doc = " ".join((cls.__doc__ or "").split())
        assert "``b_scales`` must then be 2-byte aligned, and ``a_scales`` too for ``\"split_k\"`` and ``\"split_n\"``" in doc
