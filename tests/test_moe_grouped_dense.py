"""The grouped NVFP4 plans' decode_grouped path without a GPU: the SM90 grouped BF16 CUTLASS family (kind
GROUPED_DENSE: header codes, entry point and operand struct, CMake configuration, a built library's table and
the C entry points' refusals before any device call), the ctypes layer's checks, the plans' path choice and
``path=`` knob, the engine's argument checks and launch order (decode of the bank(s) and activations, then
one grouped launch), the plans' enqueue through the engine and the engine's numba executor (against fake
launch and library functions). The GPU tests are in ``tests/gpu/test_moe_gpu.py`` (``decode_grouped``)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from cmake_project import configure, needs_build_tools
from mircuda.matmul import _build, _library, _moe_grouped_dense
from mircuda.matmul._moe import PATHS, PairedVariableGroupedFp4Plan, VariableGroupedFp4Plan
from mircuda.matmul._moe_grouped_dense import (COOPERATIVE_MIN_ROWS, DECODE_GROUPED_MIN_ROWS, DecodeGroupedFp4,
                                               choose_dense_kernel, decode_grouped_why_not)
from test_matmul_plan_checks import FakeContext, fake_stream
from test_moe_plan_checks import Stand

HEADER = _build.project_dir() / "include" / "mircuda_cutlass.h"
DENSE_NAMES = {"sm90_grouped_coop_128x256x64_c1x1_bf16_bf16": "sm90_grouped_cooperative",
               "sm90_grouped_pingpong_128x128x64_c1x1_bf16_bf16": "sm90_grouped_pingpong"}


def _kernel(family: str = "sm90_grouped_cooperative", **changes: Any) -> _library.KernelInfo:
    name = next(n for n, f in DENSE_NAMES.items() if f == family)
    base = _library.KernelInfo(3, name, family, "bf16", "bf16", (128, 256, 64), (1, 1), 0, 16, False, (90,),
                               "cutlass", "grouped_dense", (1, 8, 8), "", (0, 0, 0), ("", ""))
    return dataclasses.replace(base, **changes)


# -- the C ABI and the build -------------------------------------------------------------------------------

def test_the_header_defines_the_grouped_dense_kind_families_entry_point_and_struct() -> None:
    text = HEADER.read_text()
    assert "#define MIRCUDA_CUTLASS_KIND_GROUPED_DENSE 4" in text and _library.KINDS[4] == "grouped_dense"
    for code in (12, 13):
        assert f"#define MIRCUDA_CUTLASS_{_library.FAMILIES[code].upper()} {code}" in text
    for fn in _library.GROUPED_DENSE_SYMBOLS:
        assert f"int {fn}(" in text
    found = re.search(r"typedef struct \{([^{}]*)\} mircuda_cutlass_grouped_dense_operands;", text)
    assert found is not None
    fields = tuple(re.findall(r"\*\s*(\w+);", found.group(1)))
    assert fields == _library.GROUPED_DENSE_OPERAND_FIELDS == ("a", "b_bank", "d", "alpha_per_matrix")
    assert [name for name, _ in _library.GroupedDenseOperands._fields_] == list(fields)
    assert len(_library.GROUPED_DENSE_OPERAND_ALIGNMENT) == len(fields)
    # the ABI version is unchanged: an addition, as the docstring of GROUPED_DENSE_SYMBOLS says
    assert "#define MIRCUDA_CUTLASS_ABI_VERSION 3" in text and _library.ABI_VERSION == 3


def test_the_grouped_dense_family_group_parses() -> None:
    assert _build.parse_families("grouped_dense") == ("GROUPED_DENSE",)  # CMake expands the group
    assert _build.FAMILY_GROUPS["GROUPED_DENSE"] == ("SM90_GROUPED_COOP", "SM90_GROUPED_PINGPONG")
    assert _build.parse_families("sm90_grouped_coop") == ("SM90_GROUPED_COOP",)


def test_the_grouped_dense_families_configure_for_90a_only(tmp_path) -> None:
    needs_build_tools()
    out = configure(tmp_path / "alone", ("90a",), ("GROUPED_DENSE",))
    assert out.returncode == 0, out.stdout + out.stderr
    gen = tmp_path / "alone" / "build" / "gen"
    assert {p.name for p in gen.glob("*.cu")} == {"sm90_grouped_coop_bf16_bf16.cu",
                                                  "sm90_grouped_pingpong_bf16_bf16.cu"}
    tu = (gen / "sm90_grouped_coop_bf16_bf16.cu").read_text()
    assert "MIRCUDA_SM90_GROUPED_COOP 1" in tu and "MIRCUDA_ARCH_LIST 90" in tu and "grouped_dense_instance.cuh" in tu
    ninja = (tmp_path / "alone" / "build" / "build.ninja").read_text()
    assert "arch=compute_90a,code=sm_90a" in ninja and "sm_120f" not in ninja
    out = configure(tmp_path / "blackwell", ("120f",), ())
    assert out.returncode == 0, out.stdout + out.stderr
    assert not list((tmp_path / "blackwell" / "build" / "gen").glob("sm90_grouped_*.cu"))
    out = configure(tmp_path / "refused", ("120f",), ("SM90_GROUPED_PINGPONG",))
    assert out.returncode != 0 and "SM90_GROUPED_PINGPONG is compiled for 90a" in out.stdout + out.stderr


def _built_library() -> Path | None:
    """``MIRCUDA_CUTLASS_LIBRARY``, else a build under the repository's ignored ``build/`` (``python -m mircuda
    build-cutlass --arch 90a --families GROUPED_DENSE --cache-dir build/iter``) that holds the family."""
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    if env and Path(env).is_file():
        return Path(env)
    root = Path(__file__).resolve().parents[1] / "build"
    for path in sorted(root.glob("*/*/libmircuda_cutlass.so")):
        if b"mircuda_cutlass_grouped_dense_plan_execute" in path.read_bytes():
            return path
    return None


def _dense_library() -> _library.CutlassLibrary:
    path = _built_library()
    if path is None:
        pytest.skip("no built libmircuda_cutlass.so with the grouped BF16 families (MIRCUDA_CUTLASS_LIBRARY, or "
                    "python -m mircuda build-cutlass --arch 90a --families GROUPED_DENSE --cache-dir build/iter)")
    lib = _library.CutlassLibrary(path)
    if not lib.grouped_dense_kernels:
        pytest.skip(f"{path} was built without the grouped BF16 families")
    return lib


def test_a_built_library_lists_the_grouped_dense_kernels_with_their_metadata() -> None:
    lib = _dense_library()
    assert lib.has_grouped_dense and lib.grouped_dense_execute_address
    assert {k.name: k.family for k in lib.grouped_dense_kernels} == DENSE_NAMES
    for k in lib.grouped_dense_kernels:
        assert (k.input, k.output, k.kind, k.origin, k.multiples) == ("bf16", "bf16", "grouped_dense", "cutlass",
                                                                      (1, 8, 8))
        assert k.archs == (90,) and k.runs_on((9, 0)) and not k.runs_on((12, 0)) and k.cluster == (1, 1)
        assert (k.scale_type, k.scale_major) == ("", ("", ""))
    assert {k.tile for k in lib.grouped_dense_kernels} == {(128, 256, 64), (128, 128, 64)}
    others = (*lib.kernels, *lib.scaled_kernels, *lib.block_scaled_kernels, *lib.grouped_kernels)
    assert all(k.kind != "grouped_dense" for k in others)


def test_the_grouped_dense_c_entry_points_refuse_before_any_device_call() -> None:
    # Kind, sizes, sets and the multiples are checked before the device query: this answers without a GPU.
    lib = _dense_library()
    c = lib._lib
    out = ctypes.c_void_p()
    g = lib.grouped_dense_kernels[0].index
    ok = (g, 256, 256, 64, 8, 8, 1)
    for bad in ((g, 0, *ok[2:]), (g, 256, 0, *ok[3:]), (g, 256, 256, 0, *ok[4:]), (g, 256, 256, 64, 0, 8, 1),
                (g, 256, 256, 64, 8, 0, 1), (g, 256, 256, 64, 8, 8, 0), (g, 256, 256, 64, 8, 8, 3)):
        assert c.mircuda_cutlass_grouped_plan_create(*bad, ctypes.byref(out)) == 1, bad
        assert not out.value
    assert c.mircuda_cutlass_grouped_plan_create(g, 260, 256, 64, 8, 8, 1, ctypes.byref(out)) == 2  # N % 8
    assert c.mircuda_cutlass_grouped_plan_create(g, 256, 252, 64, 8, 8, 1, ctypes.byref(out)) == 2  # K % 8
    # the other entry points refuse a grouped BF16 kernel
    assert c.mircuda_cutlass_plan_create(g, 64, 256, 256, 1, ctypes.byref(out)) == 1
    assert c.mircuda_cutlass_scaled_plan_create(g, 64, 256, 256, ctypes.byref(out)) == 1
    ops = (_library.GroupedDenseOperands * 1)()
    fn = c.mircuda_cutlass_grouped_dense_plan_execute
    assert fn(None, None, 4, 8, 12, ops, 16) == 1
    assert fn(None, None, None, 8, 12, ops, 16) == 1
    assert not out.value


def test_execute_grouped_dense_refuses_bad_operand_sets_before_calling_the_library() -> None:
    lib = SimpleNamespace(has_grouped_dense=True)
    call = _library.CutlassLibrary.execute_grouped_dense
    for bad in ([], "ab", [(1, 2, 3)], [(1, 2, 3, -4)], [(1, 2, 3, 4.0)]):
        with pytest.raises(mc.ContractError) as info:
            call(lib, 1, 0, 4, 8, 12, bad, 16)  # type: ignore[arg-type]
        assert info.value.argument.startswith("operands")
    missing = SimpleNamespace(has_grouped_dense=False, path="lib.so")
    with pytest.raises(mc.CutlassError):
        call(missing, 1, 0, 4, 8, 12, [(16, 32, 48, 4)], 16)  # type: ignore[arg-type]


def test_create_grouped_plan_takes_a_grouped_dense_kernel_only_from_a_library_that_has_them() -> None:
    lib: Any = object.__new__(_library.CutlassLibrary)
    lib.has_grouped, lib.has_grouped_dense = True, False
    with pytest.raises(mc.ContractError) as info:
        lib.create_grouped_plan(_kernel(), 256, 256, 64, 8, 8, 1)
    assert info.value.argument == "kernel"
    lib.has_grouped_dense = True
    with pytest.raises(mc.ContractError) as info:
        lib.create_grouped_plan(_kernel(), 252, 256, 64, 8, 8, 1)  # N % 8
    assert info.value.argument == "shape"


# -- path choice -------------------------------------------------------------------------------------------

def test_the_kernel_choice_follows_the_rows_per_group() -> None:
    coop, ping = _kernel(), _kernel("sm90_grouped_pingpong", index=4, tile=(128, 128, 64))
    assert choose_dense_kernel([coop, ping], COOPERATIVE_MIN_ROWS)[0] is coop
    assert choose_dense_kernel([coop, ping], COOPERATIVE_MIN_ROWS - 1)[0] is ping
    kernel, why = choose_dense_kernel([coop], 64)
    assert kernel is coop and "the library has only" in why


def test_why_not_names_each_reason() -> None:
    assert "no CUTLASS library" in decode_grouped_why_not(None, (9, 0), 256, 256)
    empty = SimpleNamespace(grouped_dense_kernels=(), path="x.so")
    assert "no grouped BF16 kernels" in decode_grouped_why_not(empty, (9, 0), 256, 256)  # type: ignore[arg-type]
    lib = SimpleNamespace(grouped_dense_kernels=(_kernel(),), path="x.so")
    assert "cc 9.0 only" in decode_grouped_why_not(lib, (12, 0), 256, 256)  # type: ignore[arg-type]
    assert "K % 32" in decode_grouped_why_not(lib, (9, 0), 256, 272)  # type: ignore[arg-type]
    assert decode_grouped_why_not(lib, (9, 0), 256, 256) == ""  # type: ignore[arg-type]


class _FakeEngine:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.workspace_bytes = 1000

    def execute(self, stream: Any, **kw: Any) -> None:
        self.calls.append(kw)

    def describe(self) -> str:
        return "engine"


def _choose(plan: Any, path: Any, monkeypatch: Any, *, cutlass: bool = False, dense: bool = True) -> str:
    def try_cutlass(library: Any) -> str:
        if cutlass:
            plan._cutlass = object()
            return ""
        return "cc 9.0 has no FP4 tensor-core instruction"

    def try_dense(library: Any, compiler: Any, rows: float) -> str:
        plan._rows_seen = rows
        if dense:
            plan._dense = _FakeEngine()
            return ""
        return "no grouped BF16 kernels"

    monkeypatch.setattr(plan, "_try_cutlass", try_cutlass)
    monkeypatch.setattr(plan, "_try_decode_grouped", try_dense)
    plan._cutlass, plan._dense = None, None
    return str(plan._choose_path(path, None, None))


def test_the_automatic_choice_takes_decode_grouped_from_the_row_threshold_on(monkeypatch) -> None:
    # capacity / groups: 40 / 5 = 8 rows per group on average (below the threshold) -> portable
    plan = Stand(VariableGroupedFp4Plan).plan
    why = _choose(plan, None, monkeypatch)
    assert plan.path == "portable" and f"< {DECODE_GROUPED_MIN_ROWS}" in why
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5).plan
    assert _choose(plan, None, monkeypatch) == "" and plan.path == "decode_grouped" and plan._rows_seen == 64
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5 - 1).plan
    _choose(plan, None, monkeypatch)
    assert plan.path == "portable"
    # the indexed plan's rows per group is its fixed R
    from mircuda.matmul._moe import IndexedGroupedFp4Plan
    plan = Stand(IndexedGroupedFp4Plan, fixed=64).plan
    _choose(plan, None, monkeypatch)
    assert plan.path == "decode_grouped" and plan._rows_seen == 64
    # the SM120 kernels come first where they run
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5).plan
    _choose(plan, None, monkeypatch, cutlass=True)
    assert plan.path == "cutlass"
    # the portable kernel's knobs keep the automatic choice portable, on SM90 and where the SM120 kernels run
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5).plan
    monkeypatch.setattr(plan, "_try_cutlass", lambda library: "cc 9.0")
    assert "rows_per_tile, variant or tuning" in plan._choose_path(None, None, None, portable_knobs=True)
    assert plan.path == "portable"
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5).plan
    tried: list[object] = []
    monkeypatch.setattr(plan, "_try_cutlass", lambda library: tried.append(library) or "")
    assert "the portable kernel's knobs" in plan._choose_path(None, None, None, portable_knobs=True)
    assert plan.path == "portable" and plan._cutlass is None and tried == []  # the SM120 engine is never made
    # no engine: portable, with both reasons
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5).plan
    why = _choose(plan, None, monkeypatch, dense=False)
    assert plan.path == "portable" and "cc 9.0" in why and "no grouped BF16 kernels" in why


def test_the_path_knob_forces_a_path_or_says_why_it_cannot(monkeypatch) -> None:
    plan = Stand(VariableGroupedFp4Plan).plan  # 8 rows per group: forced anyway
    assert _choose(plan, "decode_grouped", monkeypatch) == "" and plan.path == "decode_grouped"
    plan = Stand(VariableGroupedFp4Plan, capacity=64 * 5).plan
    assert "asked for" in _choose(plan, "portable", monkeypatch) and plan.path == "portable"
    with pytest.raises(mc.ContractError) as info:
        _choose(Stand(VariableGroupedFp4Plan).plan, "decode_grouped", monkeypatch, dense=False)
    assert info.value.argument == "path" and "no grouped BF16 kernels" in str(info.value)
    with pytest.raises(mc.ContractError) as info:
        _choose(Stand(VariableGroupedFp4Plan).plan, "cutlass", monkeypatch)
    assert info.value.argument == "path" and "cc 9.0" in str(info.value)
    assert PATHS == ("cutlass", "decode_grouped", "portable")


def test_a_bad_path_is_refused_by_name() -> None:
    ctx = FakeContext()
    plan: Any = object.__new__(VariableGroupedFp4Plan)
    for bad in ("fast", 1, "Portable"):
        with pytest.raises(mc.ContractError) as info:
            plan._build(ctx, fake_stream(ctx, 0x10), n=96, k=160, capacity=40, groups=5, bank=3, fixed_rows=0,
                        sets=1, scale_layout="tiled", compiler=None, rows_per_tile=None, variant=None, library=None,
                        path=bad)
        assert info.value.argument == "path"  # checked before anything else (the fake context is not)


def test_the_plans_enqueue_the_setup_then_the_engine_with_both_sets(monkeypatch) -> None:
    st = Stand(PairedVariableGroupedFp4Plan)
    engine = _FakeEngine()
    st.plan._dense = engine
    st.ctx.device_info = lambda: SimpleNamespace(arch="sm_90")  # type: ignore[attr-defined]
    st.run()
    assert [c[0] for c in st.calls] == ["setup"]  # the portable grouped kernel is not launched
    (call,) = engine.calls
    r = st.routing
    assert (call["row_counts"], call["offsets"], call["matrix_indices"], call["error_flag"]) == (
        r["row_counts"]._ptr, r["offsets"]._ptr, r["matrix_indices"]._ptr, 0xA1_0000)
    first, second = call["operands"]
    assert first[5] == 0xA2_0000 and second[5] == 0xA2_0000 + 4 * st.plan._bank  # alpha_per_matrix of each set
    s0, s1 = st.sets
    assert first[:5] == tuple(s0[n]._ptr for n in ("a", "a_scales", "b_bank", "b_scales", "d"))
    assert second[:5] == tuple(s1[n]._ptr for n in ("a", "a_scales", "b_bank", "b_scales", "d"))
    assert st.plan.path == "decode_grouped" and "path decode_grouped" in str(st.plan.describe())
    engine.kernel = _kernel()  # type: ignore[attr-defined]
    assert st.plan.cutlass_kernel == "sm90_grouped_coop_128x256x64_c1x1_bf16_bf16"
    assert st.plan.workspace_bytes == sum(b.nbytes for b in st.plan._buffers) + 1000


# -- the engine --------------------------------------------------------------------------------------------

class _Spy:
    def __init__(self, name: str, calls: list[tuple[Any, ...]]) -> None:
        self.name, self.calls, self.handle = name, calls, hash(name) & 0xFFFF

    def launch(self, stream: Any, config: Any, *args: Any) -> None:
        self.calls.append((self.name, *args))


def _engine(*, sets: int = 1, n: int = 256, k: int = 64, bank: int = 3, capacity: int = 100, groups: int = 4,
            layout: str = "tiled") -> tuple[Any, list[tuple[Any, ...]]]:
    ctx = FakeContext()
    calls: list[tuple[Any, ...]] = []
    e: Any = object.__new__(DecodeGroupedFp4)
    e.context, e.stream, e.handle = ctx, fake_stream(ctx, 0x55), 0x9A
    e.n, e.k, e.capacity, e.groups, e.bank_size, e.sets, e.scale_layout = n, k, capacity, groups, bank, sets, layout
    e.whole_bank = layout == "linear" or n % 128 == 0
    from mircuda.matmul._fp4_reference import scale_bytes
    e.matrix_scale_bytes = scale_bytes(n, k, layout)
    e._decode_a, e._decode_b = _Spy("decode_a", calls), _Spy("decode_b", calls)
    e._config_a = e._config_b = None
    e._a16 = SimpleNamespace(handle=0x10_0000, nbytes=2 * sets * capacity * k)
    e._b16 = SimpleNamespace(handle=0x20_0000, nbytes=2 * sets * bank * n * k)
    e._buffers = [e._a16, e._b16]
    e._lock = __import__("threading").Lock()

    def dense(handle: int, stream: int, rc: int, of: int, mi: int, ops: Any, err: int) -> None:
        calls.append(("grouped", handle, stream, rc, of, mi, tuple(map(tuple, ops)), err))

    e.library = SimpleNamespace(execute_grouped_dense=dense)
    e.kernel, e.why = _kernel(), "test"
    return e, calls


GOOD = (0x1000, 0x2001, 0x3000, 0x4001, 0x5000, 0x6004)


def test_the_engine_decodes_each_set_then_launches_one_grouped_gemm() -> None:
    e, calls = _engine(sets=2)
    two = (0x7000, 0x8000, 0x9000, 0xA000, 0xB000, 0xC000)
    e.execute(e.stream, row_counts=0x100, offsets=0x200, matrix_indices=0x300, operands=[GOOD, two], error_flag=0x400)
    n, k, bank, cap = e.n, e.k, e.bank_size, e.capacity
    b_set, a_set = 2 * bank * n * k, 2 * cap * k
    assert calls == [
        ("decode_b", 0x20_0000, 0x3000, 0x4001, bank * n, k),  # N % 128 == 0: the whole tiled bank at once
        ("decode_a", 0x10_0000, 0x1000, 0x2001, cap, k),
        ("decode_b", 0x20_0000 + b_set, 0x9000, 0xA000, bank * n, k),
        ("decode_a", 0x10_0000 + a_set, 0x7000, 0x8000, cap, k),
        ("grouped", 0x9A, 0x55, 0x100, 0x200, 0x300,
         ((0x10_0000, 0x20_0000, 0x5000, 0x6004), (0x10_0000 + a_set, 0x20_0000 + b_set, 0xB000, 0xC000)), 0x400)]


def test_a_tiled_bank_of_padded_matrices_is_decoded_matrix_by_matrix() -> None:
    e, calls = _engine(n=96, bank=3)
    e.execute(e.stream, row_counts=0x100, offsets=0x200, matrix_indices=0x300, operands=[GOOD], error_flag=0x400)
    per = 128 * (e.k // 64) * 4  # N padded to 128, K/16 to 4
    assert calls[:3] == [("decode_b", 0x20_0000 + 2 * i * 96 * e.k, 0x3000 + i * 96 * e.k // 2, 0x4001 + i * per, 96,
                          e.k) for i in range(3)]
    assert [c[0] for c in calls[3:]] == ["decode_a", "grouped"]
    e, calls = _engine(n=96, bank=3, layout="linear")
    e.execute(e.stream, row_counts=0x100, offsets=0x200, matrix_indices=0x300, operands=[GOOD], error_flag=0x400)
    assert calls[0] == ("decode_b", 0x20_0000, 0x3000, 0x4001, 3 * 96, e.k)


def test_the_engine_refuses_every_bad_argument_by_name_before_launching() -> None:
    e, calls = _engine()
    ok: dict[str, Any] = {"row_counts": 0x100, "offsets": 0x200, "matrix_indices": 0x300, "operands": [GOOD],
                          "error_flag": 0x400}
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (fake_stream(FakeContext(), 0x56), {}, "stream"),
        (e.stream, {"row_counts": 0}, "row_counts"),
        (e.stream, {"offsets": 0x202}, "offsets"),
        (e.stream, {"matrix_indices": 3.0}, "matrix_indices"),
        (e.stream, {"error_flag": -4}, "error_flag"),
        (e.stream, {"operands": [GOOD, GOOD]}, "operands"),
        (e.stream, {"operands": "ab"}, "operands"),
        (e.stream, {"operands": [GOOD[:5]]}, "operands[0]"),
        (e.stream, {"operands": [(0x1002, *GOOD[1:])]}, "operands[0].a"),
        (e.stream, {"operands": [(*GOOD[:2], 0x3002, *GOOD[3:])]}, "operands[0].b_bank"),
        (e.stream, {"operands": [(*GOOD[:4], 0x5008, GOOD[5])]}, "operands[0].d"),
        (e.stream, {"operands": [(*GOOD[:5], 0x6002)]}, "operands[0].alpha_per_matrix"),
        (e.stream, {"operands": [(GOOD[0], 0, *GOOD[2:])]}, "operands[0].a_scales"),
    ]
    for stream, change, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            e.execute(stream, **{**ok, **change})
        assert info.value.argument == argument, change
    assert calls == []
    e.handle = 0
    with pytest.raises(mc.ClosedResourceError):
        e.execute(e.stream, **ok)


def test_the_engine_executor_decodes_and_calls_the_library_like_execute() -> None:
    pytest.importorskip("numba")
    launches: list[tuple[Any, ...]] = []
    library_calls: list[tuple[Any, ...]] = []
    u64 = ctypes.c_uint64
    launch_proto = ctypes.CFUNCTYPE(ctypes.c_int, u64, *[ctypes.c_uint] * 7, u64, u64, u64)

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # type: ignore[no-untyped-def]
        pointers = (ctypes.c_uint64 * 5).from_address(params)
        out, q, scales = (ctypes.c_uint64.from_address(pointers[i]).value for i in range(3))
        rows, k = (ctypes.c_int32.from_address(pointers[i]).value for i in (3, 4))
        launches.append((f, gx, bx, stream, out, q, scales, rows, k))
        return 0

    lib_proto = ctypes.CFUNCTYPE(ctypes.c_int, u64, u64, u64, u64, u64, u64, u64)
    sets_seen = [2]

    def fake_library(plan, stream, rc, of, mi, operands, flag):  # type: ignore[no-untyped-def]
        library_calls.append((plan, stream, rc, of, mi, tuple((ctypes.c_uint64 * (4 * sets_seen[0])).from_address(
            operands)), flag))
        return 0

    keep = lib_proto(fake_library)
    e, _ = _engine(sets=2, n=96, bank=2)
    e.library = SimpleNamespace(grouped_dense_execute_address=ctypes.cast(keep, ctypes.c_void_p).value)
    e._config_a = SimpleNamespace(grid=(7,))
    e._config_b = SimpleNamespace(grid=(5,))
    execute = _moe_grouped_dense._executor(e, launch_function=launch_proto(fake_launch))
    two = (0x7000, 0x8000, 0x9000, 0xA000, 0xB000, 0xC000)
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, *GOOD, *two) == 0
    n, k, cap = 96, e.k, e.capacity
    per = 128 * (k // 64) * 4
    a_set, b_set = 2 * cap * k, 2 * 2 * n * k
    ha, hb = e._decode_a.handle, e._decode_b.handle
    expected = []
    for s, ops in enumerate((GOOD, two)):
        for i in range(2):  # N = 96, tiled: matrix by matrix
            expected.append((hb, 5, 256, 0x55, 0x20_0000 + s * b_set + 2 * i * n * k, ops[2] + i * n * k // 2,
                             ops[3] + i * per, n, k))
        expected.append((ha, 7, 256, 0x55, 0x10_0000 + s * a_set, ops[0], ops[1], cap, k))
    assert launches == expected
    assert library_calls == [(0x9A, 0x55, 0x100, 0x200, 0x300,
                              (0x10_0000, 0x20_0000, 0x5000, 0x6004, 0x10_0000 + a_set, 0x20_0000 + b_set, 0xB000,
                               0xC000), 0x400)]
    launches.clear()
    library_calls.clear()
    assert execute(0x56, 0x100, 0x200, 0x300, 0x400, *GOOD, *two) == _moe_grouped_dense.INVALID_ARGUMENT
    assert execute(0x55, 0, 0x200, 0x300, 0x400, *GOOD, *two) == _moe_grouped_dense.INVALID_ARGUMENT
    assert execute(0x55, 0x102, 0x200, 0x300, 0x400, *GOOD, *two) == _moe_grouped_dense.MISALIGNED
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, *GOOD[:4], 0x5008, GOOD[5], *two) == _moe_grouped_dense.MISALIGNED
    assert execute(0x55, 0x100, 0x200, 0x300, 0x400, *GOOD, *two[:5], 0) == _moe_grouped_dense.INVALID_ARGUMENT
    assert launches == [] and library_calls == []
    assert struct.calcsize("<4Q") == 32  # the operand array the library reads: 4 addresses per set


def test_the_sm120_adaptor_passes_the_error_flag_fifth_and_as_many_sets_as_the_wrapper_takes() -> None:
    numba = pytest.importorskip("numba")
    from mircuda.matmul._moe import _sm120_adaptor

    @numba.njit
    def one(stream, rc, of, mi, err, a, sa, b, sb, d, apm):  # type: ignore[no-untyped-def]
        return stream + 2 * rc + 3 * of + 5 * mi + 7 * err + 11 * a + 13 * sa + 17 * b + 19 * sb + 23 * d + 29 * apm

    @numba.njit
    def two(stream, rc, of, mi, err, a, sa, b, sb, d, apm, a2, sa2, b2, sb2, d2, apm2):  # type: ignore[no-untyped-def]
        return (one(stream, rc, of, mi, err, a, sa, b, sb, d, apm)
                + 31 * a2 + 37 * sa2 + 41 * b2 + 43 * sb2 + 47 * d2 + 53 * apm2)

    args = tuple(range(1, 18))
    assert _sm120_adaptor(one, 1)(*args) == one(*args[:11])
    assert _sm120_adaptor(two, 2)(*args) == two(*args)
