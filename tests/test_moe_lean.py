"""The grouped ``"vector"`` variant's integer-path knobs without a GPU: ``DecodeTuning.lean_tiles`` (the group table in
one L2 round trip, a tile walk with nothing hoisted, ``MIRCUDA_MOE_LEAN_TILES``), ``max_registers``
(``__maxnreg__``, ``MIRCUDA_FP4_MAX_REGS``) and ``persistent`` with ``lean_tiles`` (one lookup per block, a walk
over the tile's weight-row blocks): refusals by field, the sweep's fields, the compile options (the default plan's
unchanged), and the default cap (80 registers for 4-row blocks on sm_90), the sm_90 SASS of the mixtral (N 14336, K
4096, 8 groups) and fine (N 768, K 2048, 128 groups) decode kernels: registers and no local memory. Numerics on the
GPU: ``tests/gpu/test_moe_lean_gpu.py``."""

from __future__ import annotations

import dataclasses

import pytest

import mircuda as mc
from mircuda.matmul._moe_kernels import (DP4A_REGISTER_CAP, GROUPED_SYMBOL, LEAN_MAX_GROUPS, REGISTER_CAPS, DecodeTuning,
                                         check_tuning,
                                         default_tuning, grouped_options, resolve_tuning, vector_source)
from test_moe import entry
from test_moe_vector import ptx

DP4A = DecodeTuning("dp4a", 2, 0, 1)
LEAN = dataclasses.replace(DP4A, lean_tiles=True)
LAYERS = {"mixtral": dict(n=14336, k=4096, groups=8, capacity=2), "fine": dict(n=768, k=2048, groups=128, capacity=8)}


def defines(layer: str, tuning: DecodeTuning) -> dict[str, str]:
    shape = LAYERS[layer]
    return dict(grouped_options(n=shape["n"], k=shape["k"], groups=shape["groups"], bank_size=shape["groups"],
                                capacity=shape["capacity"], rows_per_tile=1, fixed_rows=0, tiled=True, sets=1,
                                variant="vector", tuning=tuning).defines)


def usage(layer: str, tuning: DecodeTuning, arch: str = "sm_90"):
    prog = mc.compile_program(vector_source(), arch, mc.CompileOptions(defines=defines(layer, tuning),
                                                                       ptxas_verbose=True))
    return prog.resource_usage()[GROUPED_SYMBOL]


def test_the_dp4a_default_caps_four_row_blocks_at_80_registers_on_sm_90_and_keeps_the_other_knobs_off() -> None:
    # measured on the H200 (DP4A_REGISTER_CAP's docstring); 8-row blocks spill at every cap, other targets unmeasured
    for k in (2048, 4096):
        tuning = default_tuning("sm_90", "vector", 1, k)
        assert (tuning.lean_tiles, tuning.max_registers, tuning.persistent) == (False, DP4A_REGISTER_CAP, False)
        assert default_tuning("sm_80", "vector", 1, k).max_registers is None
    assert default_tuning("sm_90", "vector", 1, 14336).max_registers is None  # 8 weight rows per block
    got = defines("mixtral", default_tuning("sm_90", "vector", 1, 4096))
    assert "MIRCUDA_MOE_LEAN_TILES" not in got and got["MIRCUDA_FP4_MAX_REGS"] == "80"
    assert "MIRCUDA_FP4_MAX_REGS" not in defines("mixtral", default_tuning("sm_80", "vector", 1, 4096))
    # a tuning without max_registers takes the default cap for its own rows; 0 asks for none
    assert resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_90", 1, 4096).max_registers == 80
    assert resolve_tuning(DecodeTuning("dp4a", frags=2), "vector", "sm_90", 1, 4096).max_registers is None
    assert resolve_tuning(DecodeTuning("dp4a", max_registers=0), "vector", "sm_90", 1, 4096).max_registers == 0
    assert "MIRCUDA_FP4_MAX_REGS" not in defines("mixtral", dataclasses.replace(DP4A, max_registers=0))
    assert resolve_tuning(DecodeTuning("e4m3"), "vector", "sm_90", 1, 4096).max_registers is None
    got = defines("fine", dataclasses.replace(LEAN, max_registers=80, persistent=True))
    assert (got["MIRCUDA_MOE_LEAN_TILES"], got["MIRCUDA_FP4_MAX_REGS"], got["MIRCUDA_FP4_PERSISTENT"]) == ("1", "80", "1")


def test_the_knobs_are_refused_by_field_where_they_cannot_run() -> None:
    cases = [(lambda: DecodeTuning("e4m3", 2, 0, 1, lean_tiles=True), "tuning.lean_tiles"),
             (lambda: dataclasses.replace(DP4A, lean_tiles=1), "tuning.lean_tiles"),  # not a bool: refused when made
             (lambda: dataclasses.replace(DP4A, persistent=True), "tuning.persistent"),  # dp4a walks only lean
             (lambda: dataclasses.replace(DP4A, max_registers=64), "tuning.max_registers"),  # refused when made
             (lambda: dataclasses.replace(DP4A, max_registers=80.0), "tuning.max_registers"),  # refused when made
             (lambda: DecodeTuning("e4m3", 2, 0, 1, max_registers=80), "tuning.max_registers")]
    for make, field in cases:
        with pytest.raises(mc.ContractError) as info:
            check_tuning(make(), "vector", "sm_90")
        assert info.value.argument == field, field
    for cap in REGISTER_CAPS:
        assert check_tuning(dataclasses.replace(LEAN, max_registers=cap), "vector", "sm_90").max_registers == cap
    assert resolve_tuning(DecodeTuning("dp4a", lean_tiles=True, persistent=True), "vector", "sm_90", 1, 4096) == \
        DecodeTuning("dp4a", 2, 0, 1, True, True, DP4A_REGISTER_CAP)
    with pytest.raises(mc.ContractError) as info:  # the group table in registers: at most 128 groups
        grouped_options(n=128, k=256, groups=LEAN_MAX_GROUPS + 1, bank_size=8, capacity=8, rows_per_tile=1,
                        fixed_rows=0, tiled=True, sets=1, variant="vector", tuning=LEAN)
    assert info.value.argument == "tuning.lean_tiles"


def test_the_sweep_takes_the_knobs_with_dp4a_only() -> None:
    from mircuda.cli import _moe_profile as mp

    got = mp.parse_candidates("dp4a:m1:l1, dp4a:m1:g80, dp4a:m1:l1:p1:g80, dp4a:m1:g0")
    # its cap: 80; without its row warps (2 on sm_90), which the plan, not resolve(), fills where they can run
    base = dataclasses.replace(default_tuning("sm_90", "vector", 1, 4096), row_warps=None)
    assert [c.resolve(base) for c in got] == [dataclasses.replace(LEAN, max_registers=80),
                                              dataclasses.replace(DP4A, max_registers=80),
                                              DecodeTuning("dp4a", 2, 0, 1, True, True, 80),
                                              dataclasses.replace(DP4A, max_registers=0)]  # g0: no cap
    assert got[2].resolve(base).label("vector") == "dp4a:s2:w0:r4:l1:g80:persistent"
    for bad in ("e4m3:m1:l1", "e4m3:m1:g80", "dp4a:m1:g64", "dp4a:m1:p1", "dp4a:m1:l2", "dp4a:m1:l1:l1"):
        with pytest.raises(mc.ContractError) as info:
            mp.parse_candidates(bad)
        assert info.value.argument == "--sweep", bad


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_the_knobs_hold_their_registers_without_local_memory_on_sm_90(layer) -> None:
    """The uncapped grouped dp4a kernel: 99 / 123 registers (mixtral / fine); the single plan's: 72. A cap of 80
    holds both layers without spills, with and without the lean walk (persistent too); the lean walk alone needs
    fewer registers than the old loop."""
    plain = usage(layer, DP4A)
    for tuning in (dataclasses.replace(DP4A, max_registers=80), dataclasses.replace(LEAN, max_registers=80),
                   DecodeTuning("dp4a", 2, 0, 1, True, True, 80), LEAN, dataclasses.replace(LEAN, persistent=True)):
        got = usage(layer, tuning)
        assert got.spill_store_bytes == got.spill_load_bytes == got.stack_frame_bytes == 0, (tuning, got)
        assert got.registers <= (tuning.max_registers or plain.registers), (tuning, got.registers, plain.registers)
        if not tuning.max_registers:
            assert got.registers < plain.registers, (tuning, got.registers, plain.registers)


@pytest.mark.parametrize("arch", ["sm_80", "sm_120f"])
def test_the_lean_kernels_compile_for_the_other_targets_without_local_memory(arch) -> None:
    for tuning in (LEAN, DecodeTuning("dp4a", 2, 0, 1, True, True, 80)):
        got = usage("fine", tuning, arch)
        assert got.spill_store_bytes == got.spill_load_bytes == got.stack_frame_bytes == 0, (tuning, got)


def test_the_lean_walk_reads_the_table_in_one_round_trip_after_the_wait() -> None:
    """The tile's group is found by ballots over the prefix registers and its offset and matrix come by shuffles
    from the holder lane: the only global loads before the first weight load are the table's and the alpha's."""
    body = entry(ptx("compute_90", mc.CompileOptions(defines=defines("fine", LEAN))), GROUPED_SYMBOL)
    wait = body.index("griddepcontrol.wait")
    assert all(body.find(op) > wait for op in ("ld.global", "st.global"))
    assert "shfl.sync.idx" in body and "vote.sync.ballot" in body and "dp4a.s32.s32" in body
    first_weight = body.index("ld.global.nc.L1::no_allocate.v4.u32")
    before = body[wait:first_weight]
    # 4 registers x (prefix, offset, matrix) + the total, then the alpha; no other load on the way
    assert before.count("ld.global") == 3 * 4 + 1 + 1, before.count("ld.global")


@pytest.mark.parametrize("arch, k, tuning, cap, clause", [
    ("sm_90", 160, None, 80, True),                                   # the default: 4 weight rows per block
    ("sm_90a", 160, None, 80, True),
    ("sm_90", 8192, None, None, False),                               # 8 rows per block (K > 4096): no cap
    ("sm_80", 160, None, None, False),                                # other targets: unmeasured, no cap
    ("sm_90", 160, DecodeTuning("dp4a"), 80, False),                  # a given tuning: the cap, not the clause
    ("sm_90", 160, DecodeTuning("dp4a", max_registers=80), 80, False),
    ("sm_90", 160, DecodeTuning("dp4a", max_registers=0), 0, False)], ids=str)
def test_describe_calls_the_80_register_cap_the_default_only_for_the_default_tuning(arch, k, tuning, cap,
                                                                                    clause) -> None:
    """A plan of the execute-path stand-in (``tests/test_moe_plan_checks.py``) given the vector variant's 1-row
    tiles, the tuning the plan resolves on ``arch`` and a fake device of that target."""
    from types import SimpleNamespace

    from mircuda.matmul._moe import VariableGroupedFp4Plan
    from mircuda.matmul._moe_kernels import tile_shape
    from test_moe_plan_checks import Stand

    st = Stand(VariableGroupedFp4Plan, k=k)
    plan = st.plan
    st.ctx.device_info = lambda: SimpleNamespace(arch=arch)  # type: ignore[attr-defined]
    plan._tuning = resolve_tuning(tuning, "vector", arch, 1, k)
    plan._default_tuning = tuning is None
    plan._kernels.shape = tile_shape(n=96, capacity=40, groups=5, rows_per_tile=1, fixed_rows=0, sets=1,
                                     variant="vector", tuning=plan._tuning)
    plan._kernels.arch = arch
    assert (plan.tuning.decode, plan.tuning.max_registers) == ("dp4a", cap)
    text = str(plan.describe())
    assert ("the 80-register cap is the default with 4 weight rows per block on sm_90" in text) == clause, text
    assert ("at most 80 registers per thread (__maxnreg__)" in text) == (cap == 80), text
    assert ("the default for 1-row tiles" in text) == (tuning is None), text
