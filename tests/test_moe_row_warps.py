"""Row warps in the grouped ``"vector"`` variant's integer path without a GPU (``DecodeTuning.row_warps``,
``MIRCUDA_FP4_ROW_WARPS``: each warp of a block takes its own weight-row block of the tile whole): the tuning's
checks and normal form, the sm_90 default (2 row warps with the register cap of 80, which spills 8 bytes in the
fine kernel: measured faster), the compile options, the grid, the sm_90 SASS of the mixtral and fine decode kernels
uncapped without local memory, the sweep's ``oN`` field. Numerics on the GPU: ``tests/gpu/test_moe_dp4a_gpu.py``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mircuda as mc
from mircuda.cli._moe_profile import parse_candidates
from mircuda.matmul._moe_kernels import (DP4A_ROW_WARPS, DecodeTuning, default_register_cap, default_row_warps,
                                         default_tuning, resolve_tuning, tile_shape)
from test_moe_lean import LAYERS, defines, usage


def test_row_warps_take_their_normal_form_and_the_default_plan_takes_two_on_sm_90() -> None:
    """None takes default_row_warps: 2 for dp4a with 4 weight rows per block on sm_90 (measured), with the cap of 80;
    1 given stays 1 (one row block per block) and turns them off; a K split, lean tiles or a persistent grid asked
    for keeps one row block per block (warps 0, the occupancy rule's, as row_warps 1); 8 weight rows per block and
    other targets take none."""
    four = resolve_tuning(DecodeTuning("dp4a", row_warps=4), "vector", "sm_90", 1, 4096)
    assert (four.row_warps, four.warps, four.max_registers) == (4, 1, 80)  # one warp per row block, the cap of 80
    assert four.label("vector") == "dp4a:s2:w1:r4:g80:o4"
    default = default_tuning("sm_90", "vector", 1, 4096)
    assert (default.row_warps, default.max_registers) == (DP4A_ROW_WARPS, 80) and DP4A_ROW_WARPS == 2
    given = resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_90", 1, 4096)
    assert (given.row_warps, given.warps, given.max_registers) == (2, 1, 80)
    assert resolve_tuning(DecodeTuning("dp4a", warps=1), "vector", "sm_90", 1, 4096).row_warps == 2
    one = resolve_tuning(DecodeTuning("dp4a", row_warps=1), "vector", "sm_90", 1, 4096)
    assert (one.row_warps, one.warps, one.max_registers) == (1, 0, 80) and one.label("vector") == "dp4a:s2:w0:r4:g80:o1"
    assert "MIRCUDA_FP4_ROW_WARPS" not in defines("mixtral", one)
    assert defines("mixtral", four)["MIRCUDA_FP4_ROW_WARPS"] == "4"
    assert defines("mixtral", given)["MIRCUDA_FP4_ROW_WARPS"] == "2"
    for tuning in (DecodeTuning("dp4a", warps=2), DecodeTuning("dp4a", lean_tiles=True),
                   DecodeTuning("dp4a", lean_tiles=True, persistent=True)):
        assert resolve_tuning(tuning, "vector", "sm_90", 1, 4096).row_warps is None, tuning
    # the occupancy rule's warps (0): one row block per block, named (test_the_plans_tuning_given_back_resolves_to_itself)
    assert resolve_tuning(DecodeTuning("dp4a", warps=0), "vector", "sm_90", 1, 4096).row_warps == 1
    assert resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_90", 1, 14336).row_warps is None  # 8 rows per block
    assert resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_80", 1, 4096).row_warps is None  # not measured
    assert resolve_tuning(DecodeTuning("e4m3"), "vector", "sm_90", 1, 4096).row_warps is None  # not the integer path
    assert default_row_warps("sm_90", "dp4a", 1) == 2 and default_row_warps("sm_90", "dp4a", 2) is None
    assert default_row_warps("sm_89", "dp4a", 1) is None and default_row_warps("sm_90", "e4m3", 1) is None
    assert default_register_cap("sm_90", "dp4a", 1) == 80 and default_register_cap("sm_90", "dp4a", 2) is None


def test_row_warps_are_refused_by_field_where_they_cannot_run() -> None:
    cases = [(dict(row_warps=3), "vector", 1, "tuning.row_warps"),  # these four refused when the tuning is made
             (dict(row_warps="2"), "vector", 1, "tuning.row_warps"),
             (dict(row_warps=2.0), "vector", 1, "tuning.row_warps"),
             (dict(row_warps=True), "vector", 1, "tuning.row_warps"),
             (dict(row_warps=2, lean_tiles=True), "vector", 1, "tuning.row_warps"),
             (dict(row_warps=2, lean_tiles=True, persistent=True), "vector", 1, "tuning.row_warps"),
             (dict(row_warps=2, warps=4), "vector", 1, "tuning.warps"),
             (dict(decode="e4m3", row_warps=2), "vector", 2, "tuning.row_warps"),
             (dict(decode="e4m3", row_warps=2), "split_k", 8, "tuning.row_warps")]
    for fields, variant, rows, argument in cases:
        with pytest.raises(mc.ContractError) as info:
            resolve_tuning(DecodeTuning(**{"decode": "dp4a", **fields}), variant, "sm_90", rows, 4096)
        assert info.value.argument == argument, (fields, info.value.argument)


def test_row_warps_divide_the_grid_of_weight_row_blocks() -> None:
    four = resolve_tuning(DecodeTuning("dp4a", row_warps=4), "vector", "sm_90", 1, 2048)
    shape = tile_shape(n=768, capacity=32, groups=128, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                       tuning=four)
    assert (shape.weight_blocks, shape.warps, shape.row_warps) == (192, 1, 4)
    plain = tile_shape(n=768, capacity=32, groups=128, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                       tuning=resolve_tuning(DecodeTuning("dp4a", row_warps=1), "vector", "sm_90", 1, 2048))
    assert plain.row_warps == 1 and plain.weight_blocks == 192
    default = tile_shape(n=768, capacity=32, groups=128, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                         tuning=resolve_tuning(None, "vector", "sm_90", 1, 2048))
    assert (default.row_warps, default.warps, default.weight_blocks) == (2, 1, 192)


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("row_warps", [2, 4, 8])
def test_row_warps_compile_without_local_memory_on_sm_90(layer, row_warps) -> None:
    """Uncapped (g0): no spills and no more registers than the uncapped one-warp kernel (99 / 123 for mixtral /
    fine: the K split's shared partial sums are gone); with the default cap of 80 the fine kernel spills 8 bytes,
    measured faster all the same (DP4A_ROW_WARPS_MEASURED)."""
    shape = LAYERS[layer]
    tuning = resolve_tuning(DecodeTuning("dp4a", row_warps=row_warps, max_registers=0), "vector", "sm_90", 1,
                            shape["k"])
    got = usage(layer, tuning)
    assert got.spill_store_bytes == got.spill_load_bytes == got.stack_frame_bytes == 0, got
    plain = usage(layer, DecodeTuning("dp4a", 2, 0, 1))
    assert got.registers <= plain.registers, (got.registers, plain.registers)
    if layer == "fine":
        capped = usage(layer, dataclasses.replace(tuning, max_registers=80))
        assert 0 < capped.spill_store_bytes <= 8  # the default's spill, as measured (DP4A_ROW_WARPS_MEASURED)


def test_the_sweep_takes_row_warps_with_dp4a_only() -> None:
    got = parse_candidates("dp4a:m1:o4,dp4a:m1:r8:o2:g96,dp4a:m1:o1:g0")
    assert [c.row_warps for c in got] == [4, 2, 1]  # o1: one row block per block (not the sm_90 default)
    assert got[0].tuning("sm_90", 4096) == DecodeTuning("dp4a", row_warps=4)
    for text in ("e4m3:m1:o2", "dp4a:m1:o4:l1", "dp4a:m1:o4:p1:l1", "dp4a:m1:o2:w2", "dp4a:m1:o3", "dp4a:o2",
                 "dp4a:m1:o2:o4"):
        with pytest.raises(mc.ContractError) as info:
            parse_candidates(text)
        assert info.value.argument == "--sweep", text


@pytest.mark.parametrize("n, frags, row_warps", [(259, 1, 4), (259, 2, 8), (320, 1, 2), (768, 1, 4), (77, 2, 8),
                                                 (136, 1, 8)], ids=str)
def test_the_grouped_kernels_and_their_executor_launch_every_row_block_once(n, frags, row_warps) -> None:
    """GroupedKernels (a stand-in compiler) and the numba executor (a stand-in cuLaunchKernel) launch the same
    grid and block: blocks of 32 row_warps threads, and over fp4_matvec_lean's mapping (block b, warp j: row
    block row_warps b + j, a warp past N returning at once) every weight-row block exactly once, fewer than
    row_warps spare warps, all in the last block."""
    import ctypes
    from types import SimpleNamespace

    from mircuda.matmul._moe_kernels import GroupedKernels, grouped_executor, grouped_options

    pytest.importorskip("numba")
    tuning = resolve_tuning(DecodeTuning("dp4a", frags=frags, row_warps=row_warps), "vector", "sm_90", 1, 2048)
    shape = tile_shape(n=n, capacity=10, groups=8, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                       tuning=tuning)
    options = grouped_options(n=n, k=2048, groups=8, bank_size=8, capacity=10, rows_per_tile=1, fixed_rows=0,
                              tiled=True, sets=1, variant="vector", tuning=tuning)
    assert dict(options.defines)["MIRCUDA_FP4_ROW_WARPS"] == str(row_warps)
    handles = iter((0x51, 0x52))
    module = SimpleNamespace(kernel=lambda export: SimpleNamespace(handle=next(handles)))
    compiler = SimpleNamespace(compile=lambda source, opts: module, arch="sm_90", context=None)
    kernels = GroupedKernels(compiler, options, shape, 8, 8, capacity=10, k=2048)
    gx, gy, gz = kernels.grouped_config.grid
    assert kernels.grouped_config.block == (32 * row_warps, 1, 1) and (gy, gz) == (shape.tiles, 1)
    rows = 4 * frags
    taken = [row_warps * b + j for b in range(gx) for j in range(row_warps)]
    assert [r for r in taken if r * rows < n] == list(range(-(-n // rows)))  # each row block once, in order
    spare = [r for r in taken if r * rows >= n]
    assert len(spare) < row_warps and all(r // row_warps == gx - 1 for r in spare)

    seen: list[tuple[int, ...]] = []

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen.append((f, gx, gy, gz, bx, by, bz, smem))
        return 0

    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, *[ctypes.c_uint] * 7, ctypes.c_uint64, ctypes.c_uint64,
                             ctypes.c_uint64)
    execute = grouped_executor(kernels, (0x1000, 0x2000, 0x3000), (15, 1, 15, 1, 1),
                               launch_function=proto(fake_launch), stream=0x55)
    assert execute(0x55, 0x4000, 0x4100, 0x4200, 0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x6000, 0x6100, 1.0,
                   0, 0, 0, 0, 0, 0, 0, 1.0) == 0
    assert seen[1] == (0x52, gx, gy, gz, 32 * row_warps, 1, 1, 0)


def test_the_row_warps_kernel_shares_nothing_and_its_spare_warps_leave_before_any_weight_load() -> None:
    """The fine layer (N 768: 192 row blocks) with 4 row warps, PTX: no shared memory, one barrier (the tile walk's,
    reached by every warp: a spare warp returns from fp4_matvec_lean, not from the kernel), and the test of the
    warp's row block against the last one (191) before the first weight load."""
    import re

    from mircuda.matmul._moe_kernels import GROUPED_SYMBOL
    from test_moe import entry
    from test_moe_vector import ptx

    four = resolve_tuning(DecodeTuning("dp4a", row_warps=4), "vector", "sm_90", 1, 2048)
    body = entry(ptx("compute_90", mc.CompileOptions(defines=defines("fine", four))), GROUPED_SYMBOL)
    assert ".shared" not in body and body.count("bar.sync") == 1
    spare = re.search(r"setp\.gt\.u32\s+%p\d+, %r\d+, 191;", body)
    assert spare is not None and spare.start() < body.index("ld.global.nc.L1::no_allocate.v4.u32")


@pytest.mark.parametrize("field, value", [("warps", np.array([1, 2])), ("lean_tiles", np.array([True, False])),
                                          ("persistent", np.array([False, False]))], ids=lambda v: str(v)[:10])
@pytest.mark.parametrize("row_warps", [None, 2])
def test_a_field_that_is_no_scalar_is_refused_by_name_where_the_default_row_warps_are_weighed(field, value,
                                                                                               row_warps) -> None:
    """resolve_tuning weighs warps, lean_tiles and persistent before check_tuning names a bad one, and check_tuning
    weighs warps against row warps above 1: a numpy array there raised numpy's ValueError (the truth value of an
    array), not the ContractError naming the field (row_warps None: since 734a3c1 made them a default; row_warps 2:
    before it too)."""
    with pytest.raises(mc.ContractError) as info:  # now when the tuning is made, before resolve_tuning
        resolve_tuning(dataclasses.replace(DecodeTuning("dp4a", row_warps=row_warps), **{field: value}), "vector",
                       "sm_90", 1, 4096)
    assert info.value.argument == f"tuning.{field}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize("tuning", [None, DecodeTuning("dp4a"), DecodeTuning("dp4a", warps=0),
                                    DecodeTuning("dp4a", warps=1), DecodeTuning("dp4a", warps=2),
                                    DecodeTuning("dp4a", row_warps=1), DecodeTuning("dp4a", row_warps=4),
                                    DecodeTuning("dp4a", warps=0, max_registers=0),
                                    DecodeTuning("dp4a", lean_tiles=True), DecodeTuning("pairs"),
                                    DecodeTuning("pairs", warps=0)],
                         ids=["default", "dp4a", "w0", "w1", "w2", "o1", "o4", "w0-g0", "l1", "pairs", "pairs-w0"])
def test_the_plans_tuning_given_back_resolves_to_itself(arch, tuning) -> None:
    """A plan's ``tuning`` is the resolved one with the occupancy rule's warps in place of 0 (``_build``); given to a
    plan again it must run the same kernel. ``DecodeTuning("dp4a", warps=0)`` keeps one row block per block on sm_90
    (the rule may split K); where the rule then took 1 warp, plan.tuning read ``warps=1, row_warps=None``, which given
    back took the default 2 row warps: half the grid, another kernel. Its row_warps is now 1, named."""
    for k in (2048, 14336):
        resolved = resolve_tuning(tuning, "vector", arch, 1, k)
        for warps in (1, 2, 4, 8) if resolved.warps == 0 else (resolved.warps,):
            shown = dataclasses.replace(resolved, warps=warps)  # what plan.tuning reads
            again = resolve_tuning(shown, "vector", arch, 1, k)
            assert again == shown, (k, shown, again)
            shapes = [tile_shape(n=768, capacity=32, groups=128, rows_per_tile=1, fixed_rows=0, sets=1,
                                 variant="vector", tuning=t) for t in (shown, again)]
            assert shapes[0] == shapes[1]
    if tuning == DecodeTuning("dp4a", warps=0) and arch == "sm_90":
        zero = resolve_tuning(tuning, "vector", arch, 1, 2048)
        assert (zero.warps, zero.row_warps) == (0, 1) and zero.label("vector") == "dp4a:s2:w0:r4:g80:o1"


def test_the_readme_names_the_default_row_warps() -> None:
    """After 734a3c1 made 2 row warps the sm_90 default and ``row_warps=1`` / ``o1`` the way to turn them off, the
    README's grouped-plan ``tuning=`` item still called them 'off by default and not yet measured' and
    ``DecodeTuning.label`` said it names them above 1 only (the sweep's help: tests/test_moe_profile_cli.py)."""
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    item = readme[readme.index("tunes the portable decode kernel"):][:900]
    item = item[:item.index("- `numba_execute`")]
    assert "not yet measured" not in item and "off by default" not in item, item
    assert "2 by default with 4 weight rows per block on sm_90" in item and "`row_warps=1` turns them off" in item
    assert "row warps above 1" not in DecodeTuning.label.__doc__
