"""The grouped NVFP4 plans' ``"vector"`` variant on the integer path (``decode="dp4a"``: ``cuda_src/fp4_vector.cu``
with ``MIRCUDA_FP4_GROUPED`` and ``MIRCUDA_FP4_DP4A``, the single plan's ``fp4_matvec_lean`` on 1-row tiles) without a
GPU: the default rule (where it applies, knobs that override it), the refusals by field, the compile options, the
operand alignments, and the compiled kernel (every target, no local memory, IDP4A and PRMT, no FP16 decode, the
wait for the setup kernel before any load). Numerics on the GPU: ``tests/gpu/test_moe_dp4a_gpu.py``."""

from __future__ import annotations

import pytest

import mircuda as mc
from mircuda.matmul._moe import _set_operands
from mircuda.matmul._moe_kernels import (GROUPED_SYMBOL, SETUP_SYMBOL, DecodeTuning, check_tuning, default_tuning,
                                         dp4a_applies, grouped_options, resolve_tuning, vector_source)
from test_moe import entry
from test_moe_vector import options, ptx


def test_the_vector_variant_defaults_to_dp4a_for_one_row_tiles_and_k_a_multiple_of_32() -> None:
    # mixtral (N 14336, K 4096) and fine (N 768, K 2048) decode steps: 1-row tiles
    # the register cap and the row warps: measured on sm_90 (test_moe_lean.py, test_moe_row_warps.py)
    for arch, cap, row_warps in (("sm_80", None, None), ("sm_90", 80, 2)):
        assert default_tuning(arch, "vector", 1, 4096) == DecodeTuning("dp4a", 2, 0, 1, max_registers=cap,
                                                                       row_warps=row_warps)
        assert default_tuning(arch, "vector", 1, 2048) == DecodeTuning("dp4a", 2, 0, 1, max_registers=cap,
                                                                       row_warps=row_warps)
        assert default_tuning(arch, "vector", 1, 14336) == DecodeTuning("dp4a", 2, 0, 2)  # 8 rows: K > 4096
    word = DecodeTuning("e4m3", 2, 0, 1)
    assert default_tuning("sm_90", "vector", 2, 4096) == word  # 2-row tiles: the FP16 path
    assert default_tuning("sm_90", "vector", 1, 1040) == word  # K % 32 != 0
    assert default_tuning("sm_90", "vector") == word  # no tile or K given: as before
    assert default_tuning("sm_120f", "vector", 1, 4096) == word  # the cvt.rn.f16x2.e2m1x2 target: not measured
    assert default_tuning("sm_90", "split_k", 1, 4096) == DecodeTuning("e4m3", 2, 4, 2)
    assert not dp4a_applies("sm_90", "staged", 1, 4096) and dp4a_applies("sm_90", "vector", 1, 32)


def test_a_given_tuning_overrides_the_dp4a_default_and_dp4a_is_refused_by_field_where_it_cannot_run() -> None:
    assert resolve_tuning(None, "vector", "sm_90", 1, 4096) == DecodeTuning("dp4a", 2, 1, 1, max_registers=80,
                                                                            row_warps=2)
    assert resolve_tuning(None, "vector", "sm_90", 1, 4096) == resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_90",
                                                                              1, 4096)
    assert resolve_tuning(DecodeTuning("e4m3"), "vector", "sm_90", 1, 4096) == DecodeTuning("e4m3", 2, 0, 1)
    assert resolve_tuning(DecodeTuning("dp4a", 3, 2), "vector", "sm_90", 1, 4096) == \
        DecodeTuning("dp4a", 3, 2, 1, max_registers=80)
    assert check_tuning(DecodeTuning("dp4a", 2, 8, 2), "vector", "sm_80").decode == "dp4a"
    cases = [(("split_k", 1, 4096), lambda: DecodeTuning("dp4a", 2, 4, 1), "tuning.decode"),
             (("vector", 2, 4096), lambda: DecodeTuning("dp4a"), "tuning.decode"),
             (("vector", 1, 1040), lambda: DecodeTuning("dp4a"), "tuning.decode"),
             (("vector", 1, 4096), lambda: DecodeTuning("dp4a", 2, 0, 1, True), "tuning.persistent"),
             (("vector", 1, 4096), lambda: DecodeTuning("int8"), "tuning.decode")]  # refused when made
    for (variant, mt, k), make, field in cases:
        with pytest.raises(mc.ContractError) as info:
            resolve_tuning(make(), variant, "sm_90", mt, k)
        assert info.value.argument == field, (variant, mt, k)
    with pytest.raises(mc.ContractError) as info:  # the options refuse it too (a sweep building them directly)
        options(2, k=4096, tuning=DecodeTuning("dp4a", 2, 0, 1))
    assert info.value.argument == "tuning.decode"


def test_the_dp4a_options_select_the_integer_path() -> None:
    got = dict(options(1, k=4096, tuning=DecodeTuning("dp4a", 2, 0, 2)).defines)
    assert (got["MIRCUDA_FP4_DP4A"], got["MIRCUDA_FP4_DECODE"], got["MIRCUDA_FP4_HALF_SUM"]) == ("1", "0", "0")
    assert (got["MIRCUDA_FP4_M"], got["MIRCUDA_FP4_ROWS"], got["MIRCUDA_FP4_STAGES"]) == ("1", "8", "2")
    word = dict(options(1, k=4096, tuning=DecodeTuning("e4m3", 2, 0, 1)).defines)
    assert (word["MIRCUDA_FP4_DP4A"], word["MIRCUDA_FP4_HALF_SUM"]) == ("0", "1")


def test_dp4a_plans_ask_16_byte_activations_and_2_byte_activation_scales() -> None:
    lean = {o.name: o.alignment for o in _set_operands("", 768, 2048, 8, 128, "tiled", True, True)}
    fp16 = {o.name: o.alignment for o in _set_operands("", 768, 2048, 8, 128, "tiled", True)}
    assert (lean["a"], lean["a_scales"]) == (16, 2) and (fp16["a"], fp16["a_scales"]) == (8, 1)
    assert lean["b_bank"] == fp16["b_bank"] == 16 and lean["b_scales"] == fp16["b_scales"] == 2


@pytest.mark.parametrize("config", [dict(k=4096, n=14336, groups=8, bank=8, capacity=2), dict(k=2048),
                                    dict(k=96, n=259, tiled=False), dict(k=2048, fixed=1, sets=2)], ids=str)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_the_dp4a_grouped_kernel_compiles_for_every_target_without_local_memory(arch, config) -> None:
    for frags in (1, 2):
        opts = options(1, tuning=DecodeTuning("dp4a", 2, 0, frags), **config)
        prog = mc.compile_program(vector_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                           ptxas_verbose=True))
        usage = prog.resource_usage()
        for kernel in (usage[GROUPED_SYMBOL], usage[SETUP_SYMBOL]):
            assert kernel.spill_store_bytes == kernel.spill_load_bytes == kernel.stack_frame_bytes == 0, kernel
        assert b"fp4_matvec_bf16" not in prog.image


def test_the_dp4a_grouped_kernel_multiplies_int8_and_waits_for_the_setup_before_any_load() -> None:
    body = entry(ptx("compute_90", options(1, k=4096, tuning=DecodeTuning("dp4a", 2, 0, 1))), GROUPED_SYMBOL)
    assert "dp4a.s32.s32" in body and "prmt.b32" in body
    assert "fma.rn.f16x2" not in body and "mma.sync" not in body
    assert "ld.global.nc.v4.u32" in body or "ld.global.nc.L1::no_allocate.v4.u32" in body
    wait = body.index("griddepcontrol.wait")
    assert all(body.find(op) > wait for op in ("ld.global", "st.global") if op in body)


def test_the_grouped_options_are_those_of_the_plan_default() -> None:
    tuning = default_tuning("sm_90", "vector", 1, 2048)
    got = dict(grouped_options(n=768, k=2048, groups=128, bank_size=128, capacity=8, rows_per_tile=1, fixed_rows=0,
                               tiled=True, sets=1, variant="vector", tuning=tuning).defines)
    assert got["MIRCUDA_FP4_DP4A"] == "1" and got["MIRCUDA_FP4_ROWS"] == "4"


def test_moe_profile_sweeps_dp4a_on_one_row_tiles_only() -> None:
    from mircuda.cli import _moe_profile as mp

    got = mp.parse_candidates("dp4a:m1, dp4a:m1:r8:w2, e4m3:m1")
    assert [c.variant for c in got] == ["vector"] * 3
    assert got[1].resolve(default_tuning("sm_90", "vector")) == DecodeTuning("dp4a", 2, 2, 2)
    for bad in ("dp4a", "dp4a:m2", "dp4a:m1:p1", "dp4a:s3"):
        with pytest.raises(mc.ContractError) as info:
            mp.parse_candidates(bad)
        assert info.value.argument == "--sweep", bad


def test_the_grouped_dp4a_kernel_takes_a_register_cap_without_spills() -> None:
    """MIRCUDA_FP4_MAX_REGS (__maxnreg__, the integer path's experiment knob) reaches the grouped kernel too: 80
    registers hold both MoE layers' decode kernels without local memory on sm_90 (99 and 123 uncapped)."""
    for groups, n, k in ((8, 14336, 4096), (128, 768, 2048)):
        defines = dict(options(1, n=n, k=k, groups=groups, bank=groups, capacity=groups,
                               tuning=DecodeTuning("dp4a", 2, 0, 1)).defines)
        defines["MIRCUDA_FP4_MAX_REGS"] = "80"
        prog = mc.compile_program(vector_source(), "sm_90", mc.CompileOptions(defines=defines, ptxas_verbose=True))
        usage = prog.resource_usage()[GROUPED_SYMBOL]
        assert usage.registers <= 80
        assert usage.spill_store_bytes == usage.spill_load_bytes == usage.stack_frame_bytes == 0, usage


def test_a_given_tuning_takes_the_none_fields_of_the_decoder_it_names() -> None:
    """Where dp4a is the default (1-row tiles, K > 4096: 8 weight rows), a word decoder asked for kept dp4a's 8
    rows (frags 2) for its None fields; the word decoders' measured vector default is 4 rows (frags 1), as the
    single plan resolves decode='e4m3' (rows 4). And dp4a asked for where it is not the default (sm_120f) takes
    its own rows rule, 8 rows when K > 4096, as the single plan does."""
    from mircuda.matmul._fp4 import FP4_SYMBOL, resolve_gemv_knobs

    assert resolve_tuning(DecodeTuning("e4m3"), "vector", "sm_90", 1, 14336) == DecodeTuning("e4m3", 2, 0, 1)
    assert resolve_tuning(DecodeTuning("pairs"), "vector", "sm_80", 1, 14336) == DecodeTuning("pairs", 2, 0, 1)
    assert resolve_tuning(DecodeTuning("e4m3", frags=2), "vector", "sm_90", 1, 14336) == DecodeTuning("e4m3", 2, 0, 2)
    assert resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_90", 1, 14336) == DecodeTuning("dp4a", 2, 0, 2)
    assert resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_120f", 1, 14336) == DecodeTuning("dp4a", 2, 0, 2)
    assert resolve_tuning(DecodeTuning("dp4a"), "vector", "sm_120f", 1, 4096) == DecodeTuning("dp4a", 2, 0, 1)
    assert resolve_tuning(DecodeTuning("dp4a", frags=1), "vector", "sm_120f", 1, 14336).frags == 1
    for arch in ("sm_90", "sm_120f"):  # the single plan's rows for the same asks
        assert resolve_gemv_knobs(arch, FP4_SYMBOL, 1, 14336, "fp4", "e4m3", None, None, None, None).rows == 4
        assert resolve_gemv_knobs(arch, FP4_SYMBOL, 1, 14336, "fp4", "dp4a", None, None, None, None).rows == 8


def test_a_decode_that_is_not_a_string_is_refused_by_name() -> None:
    import numpy as np

    for bad in (np.array(["dp4a", "e4m3"]), np.array(["dp4a"]), None, 2):
        for variant in ("vector", "split_k"):
            with pytest.raises(mc.ContractError) as info:
                check_tuning(DecodeTuning(bad, 2, 0 if variant == "vector" else 4, 1), variant, "sm_90")
            assert info.value.argument == "tuning.decode", (bad, variant)
