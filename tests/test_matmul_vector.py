"""DenseVectorPlan without a GPU: its kernel compiles with NVRTC for Ampere, Hopper and the SM12x
family; the split of K over warps; spec and dtype validation."""

from __future__ import annotations

import pytest

import mircuda as mc
from mircuda.matmul._spec import resolve_dtypes
from mircuda.matmul._vector import choose_dense_vector_warps, choose_vector_warps, dense_vector_source, kernel_symbol

SYMBOLS = [kernel_symbol(i, o, v) for i in ("bf16", "f16") for o in (i, "f32") for v in (True, False)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_the_kernel_compiles_for_every_target(arch) -> None:
    prog = mc.compile_program(dense_vector_source(), arch)
    assert prog.image[:4] == b"\x7fELF"
    for symbol in SYMBOLS:
        assert symbol.encode() in prog.image


def test_the_vector_kernel_streams_weights_past_l1() -> None:
    ptx = mc.compile_program(dense_vector_source(), "compute_90", mc.CompileOptions(output="ptx")).image.decode()
    body = ptx[ptx.index(".entry dense_vector_bf16_bf16_v16"):]
    body = body[: body.index("\n}")]
    assert body.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") >= 8  # eight rows, 16 bytes each


@pytest.mark.parametrize("arch, programmatic", [("compute_80", False), ("compute_90", True)])
def test_on_hopper_and_later_the_kernel_waits_for_the_previous_grid_before_its_first_load(arch, programmatic) -> None:
    ptx = mc.compile_program(dense_vector_source(), arch, mc.CompileOptions(output="ptx")).image.decode()
    for symbol in SYMBOLS:
        body = ptx[ptx.index(f".entry {symbol}"):]
        body = body[: body.index("\n}")]
        assert ("griddepcontrol.wait" in body) is programmatic
        if programmatic:
            wait = body.index("griddepcontrol.wait")
            assert all(body.find(op) > wait for op in ("ld.global", "st.global"))


def test_symbols_name_types_and_load_width() -> None:
    assert kernel_symbol("bf16", "f32", True) == "dense_vector_bf16_f32_v16"
    assert kernel_symbol("f16", "f16", False) == "dense_vector_f16_f16_any"


def occupancy(blocks_per_sm_at_one_warp: int):
    # Registers bound occupancy on a real device; model 16 resident warps per SM.
    return lambda warps: min(blocks_per_sm_at_one_warp, 16 // warps)


@pytest.mark.parametrize("n, k, expected", [
    (4096, 4096, 4),    # 512 blocks: four warps each still fit in one wave on 132 SMs
    (14336, 4096, 1),   # 1792 blocks: already enough warps
    (4096, 14336, 4),
    (64, 4096, 8),      # few rows: split K as far as it goes
    (64, 512, 1),       # too short to split: each warp reads >= two 256-column chunks
    (64, 1024, 2),
])
def test_k_is_split_until_the_wave_is_full(n, k, expected) -> None:
    assert choose_vector_warps(n, k, 132, occupancy(16)) == expected


def test_one_warp_when_even_one_per_block_overflows_a_wave() -> None:
    assert choose_vector_warps(1 << 20, 4096, 132, occupancy(16)) == 1


@pytest.mark.parametrize("n, k, expected", [
    (4096, 4096, 8),    # 512 blocks x 8 warps = 31 per SM on 132 SMs (the fastest split measured)
    (14336, 4096, 2),   # 1792 blocks: 27 warps per SM
    (6144, 4096, 4),
    (4096, 14336, 8),
    (64, 512, 1),       # too short to split: each warp reads >= two 256-column chunks
    (64, 1024, 2),
    (1 << 20, 4096, 1),
])
def test_dense_vector_plans_split_k_up_to_two_waves_of_warps(n, k, expected) -> None:
    assert choose_dense_vector_warps(n, k, 132) == expected


@pytest.mark.parametrize("kwargs, argument", [
    ({"input": mc.f32}, "input"), ({"input": mc.e4m3}, "input"), ({"input": "float"}, "input"),
    ({"input": mc.bf16, "output": mc.f16}, "output"), ({"input": mc.f16, "output": mc.f64}, "output"),
])
def test_dtypes_are_checked(kwargs, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        resolve_dtypes(kwargs["input"], kwargs.get("output"))
    assert info.value.argument == argument


def test_output_defaults_to_the_input_type() -> None:
    i, o = resolve_dtypes(mc.f16, None)
    assert i.name == o.name == "f16"
    assert resolve_dtypes(mc.bf16, mc.f32)[1].name == "f32"


@pytest.mark.parametrize("n, k, argument", [(0, 8, "n"), (8, -1, "k"), (8.0, 8, "n"), (True, 8, "n"),
                                             (8, 2**31, "k")])
def test_vector_specs_are_checked(n, k, argument) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.DenseVectorSpec(n, k)
    assert info.value.argument == argument


def test_specs_are_values() -> None:
    assert mc.DenseVectorSpec(4, 8) == mc.DenseVectorSpec(4, 8)
    assert mc.DenseVectorSpec(4096, 4096).flops == 2 * 4096 * 4096
    assert hash(mc.DenseMatmulSpec(1, 2, 3)) == hash(mc.DenseMatmulSpec(1, 2, 3))
