"""DenseVectorPlan without a GPU: its kernel compiles with NVRTC for Ampere, Hopper and the SM12x
family; the block shape (8 or 16 rows, the split of K over warps); rows, warps, spec and dtype
validation."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from mircuda.dtypes import dtype_info
from mircuda.matmul._spec import resolve_dtypes
from mircuda.matmul._vector import (VectorKernel, choose_dense_vector, choose_vector_warps, dense_vector_rows,
                                    dense_vector_source, kernel_symbol, takes_two_chunks, vector_contract,
                                    vector_options)

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


@pytest.mark.parametrize("input, output", [(mc.bf16, mc.bf16), (mc.f16, mc.f32)])
def test_the_vector_kernels_contract_is_the_one_cuda_export_declares(input, output) -> None:
    built = vector_contract("dense_vector_k", dtype_info(output), dtype_info(input), ("y", "w", "x"))
    declared = mc.cuda_export("dense_vector_k", y=mc.InOut[mc.DeviceBuffer[output]], w=mc.In[mc.DeviceBuffer[input]],
                              x=mc.In[mc.DeviceBuffer[input]], alpha=mc.f32, beta=mc.f32, n=mc.i32, k=mc.i32)
    assert built == declared
    assert [p.describe() for p in built.params] == [f"inout DeviceBuffer[{dtype_info(output).name}]",
                                                    f"in DeviceBuffer[{dtype_info(input).name}]",
                                                    f"in DeviceBuffer[{dtype_info(input).name}]",
                                                    "f32", "f32", "i32", "i32"]


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


def h200_occupancy(rows: int, warps: int) -> int:
    # sm_90 registers per thread: 121 with 8 rows (16 warps per SM), 238 with 16 rows (8 warps per SM).
    return (16 if rows == 8 else 8) // warps


@pytest.mark.parametrize("n, k, expected", [
    (4096, 4096, (16, 4)),     # 256 blocks of 16 rows x 4 warps: one wave of 8 warps per SM on 132 SMs
    (2048, 8192, (16, 8)),
    (4096, 14336, (16, 4)),
    (8192, 8192, (8, 2)),      # 16 rows would leave 2 warps per block: 8 rows, 1024 blocks x 2 warps
    (6144, 4096, (8, 2)),
    (14336, 4096, (8, 1)),
    (28672, 4096, (8, 1)),
    (64, 512, (8, 1)),         # too short to split: each warp reads >= two 256-column chunks
    (64, 1024, (8, 2)),
    (2048, 4096, (16, 8)),     # 128 blocks of 16 rows still cover 3/4 of the SMs
    (1024, 14336, (8, 8)),     # 64 would leave half of them idle: 128 blocks of 8 rows
    (64, 4096, (8, 8)),
])
def test_dense_vector_plans_take_16_rows_where_four_or_more_warps_still_split_k_in_one_wave(n, k, expected) -> None:
    assert choose_dense_vector(n, k, 132, h200_occupancy) == expected


@pytest.mark.parametrize("n, k", [(4096, 4096), (2048, 8192), (8192, 8192), (14336, 4096), (64, 512), (1, 4096),
                                  (1024, 14336), (2048, 4096),
                                  (2**31 - 2**16 - 1, 4096)])
def test_a_given_split_of_k_alone_gets_the_rows_the_rule_gives_that_split(n, k) -> None:
    rows, warps = choose_dense_vector(n, k, 132, h200_occupancy)
    assert dense_vector_rows(n, warps, 132, h200_occupancy) == rows


@pytest.mark.parametrize("warps, expected", [(1, 8), (2, 8), (4, 16), (8, 8)])
def test_sixteen_rows_need_four_warps_and_one_wave(warps, expected) -> None:
    # 4096 rows: 256 blocks of 16 rows; with 8 warps (one block per SM) they take two waves on 132 SMs.
    assert dense_vector_rows(4096, warps, 132, h200_occupancy) == expected


@pytest.mark.parametrize("kwargs, argument, received", [
    ({"rows": 4}, "rows", "4"), ({"rows": 8.0}, "rows", "8.0"), ({"rows": True}, "rows", "True"),
    ({"rows": "16"}, "rows", "'16'"), ({"warps": 3}, "warps", "3"), ({"warps": 16}, "warps", "16"),
    ({"warps": False}, "warps", "False"), ({"rows": 4, "warps": 3}, "rows", "4"), ({"rows": 16, "warps": 0}, "warps", "0"),
])
def test_rows_and_warps_are_checked_before_the_device_is_asked(kwargs, argument, received) -> None:
    i, o = resolve_dtypes(mc.bf16, None)
    with pytest.raises(mc.ContractError) as info:
        VectorKernel(None, 64, 64, i, o, **kwargs)  # no context: the check comes first
    assert info.value.argument == argument and info.value.received == received
    assert ("8 or 16" if argument == "rows" else "1, 2, 4 or 8") in info.value.expected


@pytest.mark.parametrize("rows, late", [(8, True), (16, False)])
def test_eight_row_blocks_let_the_next_kernel_start_after_their_loads_sixteen_row_blocks_before(rows, late) -> None:
    options = mc.CompileOptions(defines={"DENSE_VECTOR_ROWS": rows}, output="ptx")
    ptx = mc.compile_program(dense_vector_source(), "compute_90", options).image.decode()
    body = ptx[ptx.index(".entry dense_vector_bf16_bf16_v16"):]
    body = body[: body.index("\n}")]
    trigger, wait = body.index("griddepcontrol.launch_dependents"), body.index("griddepcontrol.wait")
    last_weight_load = body.rindex("ld.global.nc.L1::no_allocate")
    assert (trigger > last_weight_load) is late and (trigger < wait) is not late
    assert body.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") >= rows


@pytest.mark.parametrize("n, k, cc, vector, expected", [
    (4096, 4096, (9, 0), True, True),      # 512 blocks of 8 rows on 132 SMs: 3.9 per SM
    (6144, 4096, (9, 0), True, True),      # 768: 5.8 per SM
    (4096, 14336, (9, 0), True, True),
    (14336, 4096, (9, 0), True, False),    # 1792: 13.6 per SM, measured no faster
    (28672, 4096, (9, 0), True, False),
    (2048, 8192, (9, 0), True, False),     # 256: 1.9 per SM, not measured
    (3696, 4096, (9, 0), True, True),      # 462 blocks: 3.5 per SM, the lower bound
    (3688, 4096, (9, 0), True, False),     # 461
    (6336, 4096, (9, 0), True, True),      # 792 blocks: 6 per SM, the upper bound
    (6344, 4096, (9, 0), True, False),     # 793
    (4096, 2048, (9, 0), True, False),     # K below two 512-column steps for each of 4 warps
    (4096, 4096, (9, 0), False, False),    # element loads (K % 8 != 0 in a plan)
    (4096, 4096, (8, 0), True, False),     # measured on the H200 only
    (4096, 4096, (12, 0), True, False),
])
def test_the_two_chunk_form_is_taken_where_it_was_measured_faster(n, k, cc, vector, expected) -> None:
    assert takes_two_chunks(n, k, 132, cc, vector) is expected


def test_the_repr_tells_the_two_chunk_default_from_the_same_rows_and_warps_given(monkeypatch) -> None:
    # both are 8 rows x 4 warps in 512 blocks; given rows and warps compile the one-chunk form (measured 11.09 against
    # 9.81 us at 4096x4096 on the H200), and the repr was the same for both
    from mircuda.matmul import _vector
    from tests.test_static_weights import StandInCompiler, stand_in_context

    compiler = StandInCompiler()
    monkeypatch.setattr(_vector, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_vector, "plan_compiler", lambda given, context: compiler)
    monkeypatch.setattr(_vector, "blocks_per_sm", lambda context, kernel, warps: 2)
    spec = mc.DenseVectorSpec(4096, 4096)
    default = mc.DenseVectorPlan(stand_in_context((9, 0)), None, spec)  # type: ignore[arg-type]
    given = mc.DenseVectorPlan(stand_in_context((9, 0)), None, spec, rows=8, warps=4)  # type: ignore[arg-type]
    assert (default.rows, default.warps, default.launch_config.grid) == (given.rows, given.warps, given.launch_config.grid)
    assert repr(default) == "DenseVectorPlan[bf16, bf16](n=4096, k=4096, rows=8, warps=4, two chunks per step)"
    assert repr(given) == "DenseVectorPlan[bf16, bf16](n=4096, k=4096, rows=8, warps=4)"
    assert "DENSE_VECTOR_UNROLL=2" in str(default.describe()) and "DENSE_VECTOR_UNROLL" not in str(given.describe())


def test_the_two_chunk_form_compiles_without_spills_and_triggers_early() -> None:
    options = vector_options(8, unroll=2)
    assert dict(options.defines) == {"DENSE_VECTOR_ROWS": "8", "DENSE_VECTOR_UNROLL": "2",
                                     "DENSE_VECTOR_MIN_BLOCKS": "1", "MIRCUDA_PDL_TRIGGER_LATE": "0"}
    prog = mc.compile_program(dense_vector_source(), "sm_90", mc.CompileOptions(defines=options.defines,
                                                                               ptxas_verbose=True))
    usage = prog.resource_usage()["dense_vector_bf16_bf16_v16"]
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0
    ptx = mc.compile_program(dense_vector_source(), "compute_90",
                             mc.CompileOptions(defines=options.defines, output="ptx")).image.decode()
    body = ptx[ptx.index(".entry dense_vector_bf16_bf16_v16"):]
    body = body[: body.index("\n}")]
    assert body.index("griddepcontrol.launch_dependents") < body.index("griddepcontrol.wait")
    assert body.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") >= 16  # 8 rows x two chunks


def test_only_8_or_16_rows_compile() -> None:
    with pytest.raises(mc.CompileError, match="DENSE_VECTOR_ROWS"):
        mc.compile_program(dense_vector_source(), "sm_90", mc.CompileOptions(defines={"DENSE_VECTOR_ROWS": 4}))
    assert vector_options(16).defines == (("DENSE_VECTOR_ROWS", "16"),)


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


def test_package_sources_inline_their_shared_header_for_nvrtc() -> None:
    from mircuda.matmul._gemv import batched_gemv_source

    for source in (dense_vector_source(), batched_gemv_source()):
        assert '#include "decode_common.cuh"' not in source.text
        assert source.text.count("namespace decode {") == 1 and "pdl_trigger_late" in source.text


class _NoDevice:
    """A context whose device may not be asked: the plans' plain-value checks come first."""

    def device_info(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the device was queried before the arguments were checked")


@pytest.mark.parametrize("plan, kwargs, argument", [
    ("dense", {"rows": 12}, "rows"), ("dense", {"warps": 3}, "warps"), ("dense", {"rows": "8"}, "rows"),
    ("dense", {"warps": True}, "warps"), ("fp4", {"pdl_trigger": "soon"}, "pdl_trigger"),
    ("fp4", {"pdl_trigger": 1}, "pdl_trigger"), ("fp4", {"row_warps": 3}, "row_warps"),
    ("fp4 matmul", {"pdl_trigger": "EARLY"}, "pdl_trigger"), ("fp4 matmul", {"row_warps": 16}, "row_warps")])
def test_bad_knobs_are_refused_by_name_before_the_device_is_asked(monkeypatch, plan, kwargs, argument) -> None:
    # DenseVectorPlan checked rows and warps, the FP4 plans pdl_trigger and row_warps, only after the compute capability
    # (a device below 8.0 said UnsupportedPlatform for a bad knob) and after making the compiler
    from mircuda.matmul import _fp4, _vector

    def no_compiler(given, context):  # type: ignore[no-untyped-def]
        raise AssertionError("a compiler was made before the arguments were checked")

    for module in (_vector, _fp4):
        monkeypatch.setattr(module, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_vector, "plan_compiler", no_compiler)
    monkeypatch.setattr(_fp4, "fp4_compiler", no_compiler)
    make = {"dense": lambda: mc.DenseVectorPlan(_NoDevice(), None, mc.DenseVectorSpec(4096, 4096), **kwargs),
            "fp4": lambda: mc.BlockScaledFp4VectorPlan(_NoDevice(), None, mc.DenseVectorSpec(4096, 4096), **kwargs),
            "fp4 matmul": lambda: mc.BlockScaledFp4Plan(_NoDevice(), None, mc.DenseMatmulSpec(1, 4096, 4096),
                                                        library=None, **kwargs)}[plan]
    with pytest.raises(mc.ContractError) as info:
        make()
    assert info.value.argument == argument and repr(next(iter(kwargs.values()))) in str(info.value)


def test_dense_vector_plan_takes_numpy_integer_knobs_as_the_fp8_and_fp4_plans_do(monkeypatch) -> None:
    # warps=np.int64(4) was refused as "expected None, 1, 2, 4 or 8 ..., received np.int64(4)"
    from mircuda.matmul import _vector
    from tests.test_static_weights import StandInCompiler, stand_in_context

    compiler = StandInCompiler()
    monkeypatch.setattr(_vector, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_vector, "plan_compiler", lambda given, context: compiler)
    monkeypatch.setattr(_vector, "blocks_per_sm", lambda context, kernel, warps: 2)
    plan = mc.DenseVectorPlan(stand_in_context((9, 0)), None, mc.DenseVectorSpec(4096, 4096),  # type: ignore[arg-type]
                              rows=np.int32(16), warps=np.int64(4))
    assert (plan.rows, plan.warps) == (16, 4) and type(plan.rows) is int and type(plan.warps) is int
    assert compiler.defines == [{"DENSE_VECTOR_ROWS": "16"}]
