"""The grouped NVFP4 plans' ``"vector"`` variant without a GPU: ``cuda_src/fp4_vector.cu`` compiled with
``MIRCUDA_FP4_GROUPED`` (and the setup kernel of ``cuda_src/fp4_grouped_table.cuh``) by NVRTC for sm_80,
sm_90 and sm_120f; its tile rule, grid, knob checks, registers, and the PTX facts the plan relies on.
Numerics, graphs, the error flag and numba_execute are checked on the GPU (``tests/gpu/test_moe_gpu.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul._moe_kernels import (GROUPED_SYMBOL, SETUP_SYMBOL, VECTOR_ROWS_PER_TILE, DecodeTuning,
                                         check_tuning, default_tuning, default_vector_rows, grouped_options,
                                         tile_shape, vector_source)
from test_moe import entry


def options(mt: int = 1, *, n: int = 768, k: int = 2048, groups: int = 64, bank: int = 64, capacity: int = 64,
            fixed: int = 0, tiled: bool = True, sets: int = 1,
            tuning: DecodeTuning | None = None) -> mc.CompileOptions:
    tuning = DecodeTuning("e4m3", 3, 0, 1) if tuning is None else tuning
    return grouped_options(n=n, k=k, groups=groups, bank_size=bank, capacity=capacity, rows_per_tile=mt,
                           fixed_rows=fixed, tiled=tiled, sets=sets, variant="vector", tuning=tuning)


def ptx(arch: str, opts: mc.CompileOptions) -> str:
    return mc.compile_program(vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                          output="ptx")).image.decode()


@pytest.mark.parametrize("capacity, groups, fixed, want", [
    (2, 8, 0, 1), (8, 128, 0, 1), (128, 128, 0, 1), (9, 8, 0, 2), (30, 8, 0, 4), (64, 8, 0, 8), (4096, 8, 0, 8),
    (20, 20, 1, 1), (60, 20, 3, 4), (200, 20, 10, 8)])
def test_the_vector_tile_holds_a_groups_usual_rows(capacity, groups, fixed, want) -> None:
    assert default_vector_rows(capacity, groups, fixed) == want


def test_the_vector_grid_puts_weight_blocks_on_x_and_covers_every_tile() -> None:
    """4 or 8 weight rows per block (frags 1 or 2); tile slots min(ceil(capacity / MT) + G, capacity)."""
    for frags in (1, 2):
        shape = tile_shape(n=14336, capacity=2, groups=8, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                           tuning=DecodeTuning("e4m3", 3, 0, frags))
        assert (shape.variant, shape.weight_blocks, shape.tiles) == ("vector", 14336 // (4 * frags), 2)
    assert tile_shape(n=300, capacity=37, groups=8, rows_per_tile=4, fixed_rows=0, sets=2, variant="vector",
                      tuning=DecodeTuning("e4m3", 3, 0, 1)).tiles == 10 + 8


def test_the_vector_grid_holds_at_most_65535_tile_slots_and_the_blocks_walk_the_rest() -> None:
    """grid.y takes at most 65535 tile slots: 100000 products of one row (the indexed plan) get 65535 slots,
    and the kernel reads gridDim.y to walk the tiles past them (and those of overlapping row ranges)."""
    tuning = DecodeTuning("e4m3", 2, 0, 1)
    shape = tile_shape(n=256, capacity=100000, groups=100000, rows_per_tile=1, fixed_rows=1, sets=1,
                       variant="vector", tuning=tuning)
    assert shape.tiles == 65535
    assert tile_shape(n=256, capacity=65535, groups=8, rows_per_tile=1, fixed_rows=0, sets=1, variant="vector",
                      tuning=tuning).tiles == 65535
    body = entry(ptx("compute_90", options(1)), GROUPED_SYMBOL)
    assert "%nctaid.y" in body


@pytest.mark.parametrize("rows_per_tile", [np.array([1, 2]), np.array([1]), True, 1.0, "1", np.int64(3)], ids=repr)
def test_a_rows_per_tile_that_is_not_an_integer_is_refused_by_name_before_anything_else(rows_per_tile) -> None:
    """Checked before the context: no GPU needed. An array of two values once raised numpy's ValueError
    ('truth value ... ambiguous') from the automatic variant choice instead of a ContractError."""
    with pytest.raises(mc.ContractError) as info:
        mc.VariableGroupedFp4Plan(None, None, mc.VariableGroupedFp4Spec(256, 512, 8, 8, 8),  # type: ignore[arg-type]
                                  rows_per_tile=rows_per_tile)
    assert info.value.argument == "rows_per_tile"


CONFIGS = [dict(mt=1), dict(mt=2, tiled=False), dict(mt=4, sets=2), dict(mt=8, k=1040), dict(mt=1, fixed=3),
           dict(mt=1, groups=300, bank=300, k=96, n=259)]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_the_vector_kernels_compile_for_every_tile_layout_and_target(arch, config) -> None:
    cfg = dict(config)
    tuning = DecodeTuning("pairs" if arch == "sm_80" else "e4m3", 3, 0, 1)
    prog = mc.compile_program(vector_source(), arch, options(cfg.pop("mt"), tuning=tuning, **cfg))
    assert prog.image[:4] == b"\x7fELF"
    assert SETUP_SYMBOL.encode() in prog.image and GROUPED_SYMBOL.encode() in prog.image
    assert b"fp4_matvec_bf16" not in prog.image  # the single plan's kernel is left out of the grouped module


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
@pytest.mark.parametrize("mt", VECTOR_ROWS_PER_TILE)
def test_the_default_vector_kernel_keeps_its_ring_in_registers(arch, mt) -> None:
    tuning = default_tuning(arch, "vector")
    opts = options(mt, k=4096, tuning=tuning)
    prog = mc.compile_program(vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                       ptxas_verbose=True))
    usage = prog.resource_usage()
    for kernel in (usage[GROUPED_SYMBOL], usage[SETUP_SYMBOL]):
        assert kernel.spill_store_bytes == kernel.spill_load_bytes == kernel.stack_frame_bytes == 0, kernel
        assert kernel.registers <= 255


@pytest.mark.parametrize("mt, k", [(1, 4096), (4, 1040)])
def test_the_vector_kernel_streams_weights_past_l1_and_sums_blocks_in_fp16(mt, k) -> None:
    body = entry(ptx("compute_90", options(mt, k=k)), GROUPED_SYMBOL)
    wide = k % 32 == 0
    assert "ld.global.nc.L1::no_allocate." + ("v4.u32" if wide else "v2.u32") in body
    assert "fma.rn.f16x2" in body and "cvt.rn.f16x2.e4m3x2" in body
    assert "mma.sync" not in body


def test_on_hopper_and_later_both_vector_kernels_wait_for_the_previous_grid_before_touching_memory() -> None:
    text = ptx("compute_90", options(2))
    for symbol in (SETUP_SYMBOL, GROUPED_SYMBOL):
        body = entry(text, symbol)
        wait = body.index("griddepcontrol.wait")
        assert all(body.find(op) > wait for op in ("ld.global", "st.global", "atom.global") if op in body)
        assert "griddepcontrol.launch_dependents" in body
    assert "griddepcontrol" not in ptx("compute_80", options(2, tuning=DecodeTuning("pairs", 3, 0, 1)))


@pytest.mark.parametrize("groups, ballots", [(8, True), (128, True), (129, False)])
def test_the_vector_tile_group_comes_from_ballots_up_to_128_groups(groups, ballots) -> None:
    body = entry(ptx("compute_90", options(1, groups=groups, bank=groups)), GROUPED_SYMBOL)
    assert ("vote.sync.ballot.b32" in body) == ballots


@pytest.mark.parametrize("fields, field", [
    (("pairs", 2, 16), "tuning.warps"),  # the vector variant's own refusal: 16 warps are split_k's
    (("pairs", 2, 3), "tuning.warps"), (("pairs", 2, 2, 3), "tuning.frags"),  # these three refused when made
    (("pairs", 1, 2), "tuning.stages"), (("table", 2, 2), "tuning.decode")], ids=str)
def test_bad_vector_tuning_is_refused_by_field(fields, field) -> None:
    with pytest.raises(mc.ContractError) as info:
        check_tuning(DecodeTuning(*fields), "vector", "sm_90")
    assert info.value.argument == field
    for warps in (0, 1, 2, 4, 8):  # 0: the occupancy rule's count
        assert check_tuning(DecodeTuning("e4m3", 4, warps, 2), "vector", "sm_90").warps == warps


def test_the_default_vector_tuning_leaves_the_warps_to_the_occupancy_rule() -> None:
    for arch, decode in (("sm_90", "e4m3"), ("sm_80", "pairs"), ("sm_120f", "e4m3")):
        assert default_tuning(arch, "vector") == DecodeTuning(decode, 2, 0, 1)


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
@pytest.mark.parametrize("mt", [1, 4])
def test_the_persistent_vector_kernel_walks_weight_blocks_without_spills(arch, mt) -> None:
    opts = options(mt, k=4096, tuning=DecodeTuning("e4m3", 2, 0, 1, True))
    assert dict(opts.defines)["MIRCUDA_FP4_PERSISTENT"] == "1"
    prog = mc.compile_program(vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                       ptxas_verbose=True))
    usage = prog.resource_usage()[GROUPED_SYMBOL]
    assert usage.spill_store_bytes == usage.spill_load_bytes == usage.stack_frame_bytes == 0, usage
    body = entry(ptx("compute_90", opts), GROUPED_SYMBOL)
    assert "bar.sync" in body  # the warps meet at every weight-row block's end


def test_only_the_vector_variant_takes_the_persistent_grid() -> None:
    for variant in ("split_k", "staged", "split_n"):
        with pytest.raises(mc.ContractError) as info:
            check_tuning(DecodeTuning("e4m3", 2, 8, 1, True), variant, "sm_90")
        assert info.value.argument == "tuning.persistent"
    with pytest.raises(mc.ContractError) as info:
        check_tuning(DecodeTuning("e4m3", 2, 0, 1, 1), "vector", "sm_90")  # type: ignore[arg-type]
    assert info.value.argument == "tuning.persistent"
    assert check_tuning(DecodeTuning("e4m3", 2, 0, 1, True), "vector", "sm_90").persistent
    assert DecodeTuning("e4m3", 2, 0, 1, True).label("vector") == "e4m3:s2:w0:r4:persistent"
    assert DecodeTuning("e4m3", 2, 4, 2).label() == "e4m3:s2:w4:r32"  # split_k: 16 rows per frag


def test_the_occupancy_rule_counts_the_expected_tiles_of_every_operand_set() -> None:
    """vector_warps: blocks = weight-row blocks x min(ceil(capacity / MT), G) x sets; more blocks, fewer warps.
    768 rows in 4-row blocks (192) x 8 one-row tiles = 1536 blocks fit one wave of 2-warp blocks at 16 per
    SM on 132 SMs (2112); the paired plan's 3072 do not, so it keeps 1 warp."""
    from mircuda.matmul._moe_kernels import vector_warps

    def shape(sets: int):
        return tile_shape(n=768, capacity=8, groups=128, rows_per_tile=1, fixed_rows=0, sets=sets, variant="vector",
                          tuning=DecodeTuning("e4m3", 2, 0, 1))

    def occupancy(warps: int) -> int:
        return 16 if warps <= 2 else 8

    k = 16384  # long enough for every warp count to read two 1024-column chunks
    assert vector_warps(shape(1), 8, 128, k, 132, occupancy) == 2
    assert vector_warps(shape(2), 8, 128, k, 132, occupancy) == 1
