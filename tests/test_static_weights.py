"""``static_weights=True`` (DenseVectorPlan, DenseMatmulPlan) without a GPU: the promise that no running kernel
writes the weights compiles the decode kernels with ``MIRCUDA_PRELOAD_WEIGHTS=1``, which on Hopper and later
issues the first step's weight loads (and only those) before ``griddepcontrol.wait``; x, the scales of nothing
else and every store still wait. Without the promise nothing but L2 prefetches precedes the wait. The kernels keep
to registers either way."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import mircuda as mc
from mircuda.errors import ContractError
from mircuda.matmul._gemv import batched_gemv_source, gemv_options
from mircuda.matmul._vector import check_static_weights, dense_vector_source, static_weights_note, vector_options

WEIGHT_LOAD = "ld.global.nc.L1::no_allocate.L2::128B.v4.u32"


def entry(ptx: str, symbol: str) -> str:
    body = ptx[ptx.index(f".entry {symbol}"):]
    return body[: body.index("\n}")]


def before_wait(body: str) -> str:
    return body[: body.index("griddepcontrol.wait")]


def ptx(source: mc.CudaSource, arch: str, options: mc.CompileOptions) -> str:
    return mc.compile_program(source, arch, mc.CompileOptions(defines=dict(options.defines), output="ptx")).image.decode()


def test_the_promise_is_one_define_and_nothing_without_it() -> None:
    assert dict(vector_options(16).defines) == {"DENSE_VECTOR_ROWS": "16"}
    assert dict(vector_options(16, True).defines) == {"DENSE_VECTOR_ROWS": "16", "MIRCUDA_PRELOAD_WEIGHTS": "1"}
    assert "MIRCUDA_PRELOAD_WEIGHTS" not in dict(gemv_options(8, 4, 2).defines)
    assert dict(gemv_options(8, 4, 2, True).defines)["MIRCUDA_PRELOAD_WEIGHTS"] == "1"


@pytest.mark.parametrize("value", [1, 0, None, "yes", 1.0, np.int8(1), np.array([True])])
def test_anything_but_a_bool_is_refused_by_name(value) -> None:
    with pytest.raises(ContractError, match="static_weights") as info:
        check_static_weights(value)
    assert info.value.argument == "static_weights" and repr(value) in str(info.value)
    assert "True or False" in str(info.value)
    assert check_static_weights(True) is True and check_static_weights(False) is False


def test_a_numpy_bool_is_a_bool() -> None:
    # what a comparison of NumPy or CuPy scalars gives (cupy.bool_ is numpy.bool_); it was refused
    for value in (np.True_, np.False_, np.bool_(1)):
        checked = check_static_weights(value)
        assert type(checked) is bool and checked == bool(value)


# -- the plans, on CPU stand-ins for the device, the compiler and the occupancy query -----------------------------

class StandInCompiler:
    """Records each module's defines; its kernels launch nothing."""

    def __init__(self) -> None:
        self.defines: list[dict[str, str]] = []

    def compile(self, source, options):
        self.defines.append(dict(options.defines))
        kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=1024), launch=None, handle=0)
        return SimpleNamespace(kernel=lambda contract: kernel)


def stand_in_context(cc: tuple[int, int]) -> SimpleNamespace:
    info = SimpleNamespace(compute_capability=cc, multiprocessor_count=132, arch=f"sm_{cc[0]}{cc[1]}", name="stand-in",
                           supports_programmatic_launch=cc >= (9, 0), max_threads_per_block=1024,
                           max_block_dims=(1024, 1024, 64), max_grid_dims=(2**31 - 1, 65535, 65535),
                           max_shared_memory_per_block_optin_bytes=227 * 1024)
    return SimpleNamespace(device_info=lambda: info)


@pytest.fixture
def stand_ins(monkeypatch) -> StandInCompiler:
    from mircuda.matmul import _dense, _gemv, _vector
    from mircuda.matmul._build import CutlassNotFound

    def missing():
        raise CutlassNotFound("no library here")

    compiler = StandInCompiler()
    for module in (_vector, _dense):
        monkeypatch.setattr(module, "plan_stream", lambda stream, context: None)
        monkeypatch.setattr(module, "plan_compiler", lambda given, context: compiler)
    for module in (_vector, _gemv):
        monkeypatch.setattr(module, "blocks_per_sm", lambda context, kernel, warps: 2)
    monkeypatch.setattr(_dense, "load_library", missing)
    return compiler


def vector_plan(cc: tuple[int, int], k: int, static_weights) -> mc.DenseVectorPlan:
    return mc.DenseVectorPlan(stand_in_context(cc), None, mc.DenseVectorSpec(4096, k),  # type: ignore[arg-type]
                              static_weights=static_weights)


def matmul_plan(cc: tuple[int, int], m: int, k: int, static_weights) -> mc.DenseMatmulPlan:
    return mc.DenseMatmulPlan(stand_in_context(cc), None, mc.DenseMatmulSpec(m, 4096, k),  # type: ignore[arg-type]
                              static_weights=static_weights)


@pytest.mark.parametrize("value", [1, None, "yes"])
def test_both_plans_refuse_a_non_bool_by_name(stand_ins, value) -> None:
    for make in (lambda: vector_plan((9, 0), 4096, value), lambda: matmul_plan((9, 0), 8, 4096, value)):
        with pytest.raises(ContractError, match="static_weights") as info:
            make()
        assert info.value.argument == "static_weights" and repr(value) in str(info.value)
    assert stand_ins.defines == []  # refused before anything is compiled


@pytest.mark.parametrize("value", [np.True_, np.False_])
def test_both_plans_take_a_numpy_bool_as_the_bool(stand_ins, value) -> None:
    engines = [vector_plan((9, 0), 4096, value)._engine, matmul_plan((9, 0), 1, 4096, value)._nvrtc,
               matmul_plan((9, 0), 8, 4096, value)._nvrtc]
    assert [type(e.static_weights) for e in engines] == [bool] * 3  # type: ignore[union-attr]
    assert [e.static_weights for e in engines] == [bool(value)] * 3  # type: ignore[union-attr]
    assert {d.get("MIRCUDA_PRELOAD_WEIGHTS") for d in stand_ins.defines} == {"1" if value else None}


VECTOR_EARLY = "; static weights: the first step's weights are loaded before griddepcontrol.wait"
GEMV_EARLY = "; static weights: the first chunk's weights are loaded before griddepcontrol.wait"
NO_PDL = "; static weights: no effect (no programmatic dependent launch below compute capability 9.0)"
ELEMENTS = "; static weights: no effect (the element-load variant loads nothing early)"


@pytest.mark.parametrize("cc, m, k, static, define, note", [
    ((9, 0), 1, 4096, True, True, VECTOR_EARLY),
    ((9, 0), 1, 4096, False, False, None),
    ((8, 0), 1, 4096, True, True, NO_PDL),          # compiled with the define; the wait is not there
    ((9, 0), 1, 4100, True, True, ELEMENTS),        # K % 8 != 0: the _any kernel
    ((9, 0), 8, 4096, True, True, GEMV_EARLY),      # the batched GEMV: a chunk, not a step
    ((8, 0), 8, 4096, True, True, NO_PDL),
    ((9, 0), 8, 4100, True, True, ELEMENTS),
    ((12, 0), 16, 4096, True, True, GEMV_EARLY),
    ((9, 0), 1, 248, True, True, "; static weights: no effect (K = 248: no warp has a whole 256-column step"),
    ((9, 0), 8, 24, True, True, "; static weights: no effect (K = 24: no warp has a whole ")])
def test_describe_says_what_the_promise_does_for_each_kernel(stand_ins, cc, m, k, static, define, note) -> None:
    texts = [str(matmul_plan(cc, m, k, static).describe())]
    if m == 1:
        texts.append(str(vector_plan(cc, k, static).describe()))
    for text in texts:
        assert ("-D MIRCUDA_PRELOAD_WEIGHTS=1" in text) is define, text
        if note is None:
            assert "static weights" not in text, text
        else:
            assert note in text and text.count("static weights") == 1, text
    assert all(("MIRCUDA_PRELOAD_WEIGHTS" in d) is define for d in stand_ins.defines)


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("cc, knobs, form", [
    ((9, 0), {}, (8, 4, 2)),            # 512 blocks of 8 rows on 132 SMs: takes_two_chunks
    ((9, 0), {"rows": 8}, (8, 1, 1)),   # a given rows or warps keeps the one-chunk forms
    ((9, 0), {"warps": 4}, (16, 4, 1)),
    ((8, 0), {}, (16, 8, 1))])          # cc 8.x: choose_dense_vector's rule (stand-in occupancy: 2 blocks per SM)
def test_the_two_chunk_form_is_what_both_plans_launch_where_the_rule_takes_it(stand_ins, monkeypatch, cc, knobs, form,
                                                                             static) -> None:
    # VectorKernel's wiring of takes_two_chunks (N = K = 4096): rows, warps and unroll, the module's defines, the
    # launch geometry (numba_execute's too) and describe(); DenseMatmulPlan at M = 1 runs the same engine
    from mircuda.matmul import _vector

    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(_vector, "kernel_executor", lambda function, grid, block, *args, **kwargs: seen.append((grid, block)))
    rows, warps, unroll = form
    plans = [mc.DenseVectorPlan(stand_in_context(cc), None, mc.DenseVectorSpec(4096, 4096),  # type: ignore[arg-type]
                                static_weights=static, **knobs)]
    if not knobs:
        plans.append(matmul_plan(cc, 1, 4096, static))
    for plan in plans:
        engine = plan._engine if isinstance(plan, mc.DenseVectorPlan) else plan._nvrtc
        assert (engine.rows, engine.warps, engine.unroll) == form  # type: ignore[union-attr]
        assert engine.config.grid == (4096 // rows, 1, 1) and engine.config.block == (32 * warps, 1, 1)  # type: ignore[union-attr]
        engine.numba_executor(0)  # type: ignore[union-attr]
        text = str(plan.describe())
        two = "-D DENSE_VECTOR_UNROLL=2 -D DENSE_VECTOR_MIN_BLOCKS=1 -D MIRCUDA_PDL_TRIGGER_LATE=0"
        assert (two in text) is (unroll == 2) and ("two 256-column chunks" in text) is (unroll == 2), text
        assert (VECTOR_EARLY in text) is (static and cc >= (9, 0)), text
    assert seen == [(4096 // rows, 32 * warps)] * len(plans)
    assert stand_ins.defines[-1].get("DENSE_VECTOR_UNROLL") == ("2" if unroll == 2 else None)


def test_describe_says_the_promise_does_nothing_for_a_cutlass_kernel() -> None:
    # a CUTLASS plan without the library: the attributes describe() reads, as the constructor sets them
    from mircuda.matmul._library import KernelInfo
    from mircuda.matmul._select import Selection

    from mircuda.dtypes import dtype_info

    info = KernelInfo(0, "sm90_swap_128x32x128_splitk_bf16_bf16", "sm90_swapped", "bf16", "bf16", (128, 32, 128),
                      (1, 1), 0, 16, True, (90,))
    for static in (True, False):
        for pdl in (False, True):  # (with a library built before 2026-12-03 the split-K kernel launches without)
            plan = object.__new__(mc.DenseMatmulPlan)
            plan.__dict__.update(_selection=Selection(info, 3, "forced by the caller"), _nvrtc=None,
                                 _spec=mc.DenseMatmulSpec(64, 4096, 4096), _in=dtype_info(mc.bf16),
                                 _out=dtype_info(mc.bf16), _context=stand_in_context((9, 0)), _workspace_bytes=0,
                                 _static_weights=static, _pdl=pdl)
            text = str(plan.describe())
            assert text.endswith("Why: forced by the caller." + (" static_weights has no effect on CUTLASS kernels."
                                                                  if static else "")), text
            assert ("3 K slices, programmatic dependent launch). Why:" in text) is pdl, text
            assert plan.programmatic_launch is pdl


@pytest.mark.parametrize("arch", ["compute_90", "compute_120"])
@pytest.mark.parametrize("rows", [8, 16])
def test_the_vector_kernel_loads_one_step_of_weights_before_the_wait_and_nothing_else(arch, rows) -> None:
    text = ptx(dense_vector_source(), arch, vector_options(rows, True))
    plain = ptx(dense_vector_source(), arch, vector_options(rows))
    for symbol in ("dense_vector_bf16_bf16_v16", "dense_vector_f16_f32_v16"):
        early = before_wait(entry(text, symbol))
        # one 16-byte load per weight row of the warp's first 256-column chunk, and no other global access
        assert early.count(WEIGHT_LOAD) == rows
        assert len(re.findall(r"ld\.global", early)) == rows and "st.global" not in early
        assert "ld.global" not in before_wait(entry(plain, symbol))
    for symbol in ("dense_vector_bf16_bf16_any", "dense_vector_f16_f16_any"):  # element loads: nothing early
        assert "ld.global" not in before_wait(entry(text, symbol))


@pytest.mark.parametrize("arch", ["compute_90", "compute_120"])
@pytest.mark.parametrize("m, unroll, row_tiles", [(2, 4, 1), (8, 4, 1), (16, 2, 1), (16, 4, 2)])
def test_the_batched_gemv_loads_one_chunk_of_weights_before_the_wait_and_nothing_else(arch, m, unroll,
                                                                                       row_tiles) -> None:
    text = ptx(batched_gemv_source(), arch, gemv_options(m, unroll, row_tiles, True))
    plain = ptx(batched_gemv_source(), arch, gemv_options(m, unroll, row_tiles))
    for symbol in ("batched_gemv_bf16_bf16_v16", "batched_gemv_f16_f32_v16"):
        early = before_wait(entry(text, symbol))
        # each lane: rows g and g + 8 of every 16-row tile, for each 32-column step of its first chunk
        assert early.count(WEIGHT_LOAD) == 2 * row_tiles * unroll
        assert len(re.findall(r"ld\.global", early)) == 2 * row_tiles * unroll and "st.global" not in early
        assert "ld.global" not in before_wait(entry(plain, symbol))


def test_below_hopper_the_promise_compiles_to_the_same_kernel() -> None:
    # compute_80 has no griddepcontrol: the define loads nothing early (and nothing is left unused)
    assert ptx(dense_vector_source(), "compute_80", vector_options(16, True)) == \
        ptx(dense_vector_source(), "compute_80", vector_options(16))
    assert ptx(batched_gemv_source(), "compute_80", gemv_options(16, 4, 2, True)) == \
        ptx(batched_gemv_source(), "compute_80", gemv_options(16, 4, 2))


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
@pytest.mark.parametrize("source, options", [
    ("vector", vector_options(8, True)), ("vector", vector_options(16, True)),
    ("gemv", gemv_options(8, 4, 1, True)), ("gemv", gemv_options(16, 2, 1, True)), ("gemv", gemv_options(16, 4, 2, True))],
    ids=["vector8", "vector16", "gemv8", "gemv16", "gemv16x2"])
def test_the_preloading_kernels_keep_to_registers(tmp_path, arch, source, options) -> None:
    from mircuda.matmul._sass import sass_functions
    from tests.test_matmul_fp8_mma import cuobjdump

    tool, env = cuobjdump()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(mc.compile_program(dense_vector_source() if source == "vector" else batched_gemv_source(), arch,
                                         options).image)
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    for name, body in sass_functions(out.stdout):
        if name.endswith("_v16"):
            assert not re.search(r"\b(?:STL|LDL)\b", body), f"{name} spills to local memory on {arch}"


def test_describe_says_what_the_promise_does_where() -> None:
    assert static_weights_note(False, True, True, 4096, 256) == ""
    assert "loaded before griddepcontrol.wait" in static_weights_note(True, True, True, 256, 256)
    assert "no effect" in static_weights_note(True, False, True, 4096, 256)
    assert "9.0" in static_weights_note(True, False, True, 4096, 256)
    assert "no effect" in static_weights_note(True, True, False, 4096, 256)
    # K below one step: no warp has a whole first step, and the kernels' guard (warp < K / columns) loads nothing
    assert "no effect (K = 248: no warp has a whole 256-column step" in static_weights_note(True, True, True, 248, 256)


@pytest.mark.parametrize("rows", [16, 32])
def test_the_fp8_experiment_loads_its_first_k_blocks_of_weights_before_the_wait_and_nothing_else(rows) -> None:
    # fp8_mma_gemv.cu's MIRCUDA_PRELOAD_WEIGHTS (experimental, no plan sets it): level L loads L K-blocks (two
    # 64-column halves x rows g and g + 8 of each 16-row tile per lane) before the wait; 0 nothing but prefetches
    from mircuda.matmul._fp8_mma import fp8_mma_options, fp8_mma_source

    for level in (0, 1, 2):
        defines = {**dict(fp8_mma_options(8, rows, "late").defines), "MIRCUDA_PRELOAD_WEIGHTS": str(level)}
        text = ptx(fp8_mma_source(), "compute_90", mc.CompileOptions(defines=defines))
        early = before_wait(entry(text, "blockwise_fp8_mma"))
        loads = level * 2 * 2 * (rows // 16)
        assert early.count(WEIGHT_LOAD) == loads, level
        assert len(re.findall(r"ld\.global", early)) == loads and "st.global" not in early, level


def test_the_fp4_integer_path_alone_gets_the_define() -> None:
    from mircuda.matmul._fp4 import fp4_gemv_options

    dp4a = dict(fp4_gemv_options(1, 4, "tiled", True, "fp4", "dp4a", static_weights=True).defines)
    assert dp4a["MIRCUDA_PRELOAD_WEIGHTS"] == "1"
    assert "MIRCUDA_PRELOAD_WEIGHTS" not in dict(fp4_gemv_options(1, 4, "tiled", True, "fp4", "dp4a").defines)
    # the FP16 decoders load nothing early: no define, the same module as without the promise
    assert "MIRCUDA_PRELOAD_WEIGHTS" not in dict(fp4_gemv_options(1, 4, "tiled", True, "fp4", "bytes",
                                                                  static_weights=True).defines)


@pytest.mark.parametrize("m, rows, stages", [(1, 4, 2), (1, 8, 3), (2, 4, 2)])
def test_the_fp4_integer_path_loads_its_first_ring_of_weights_before_the_wait_and_nothing_else(m, rows,
                                                                                                stages) -> None:
    from mircuda.matmul._fp4 import fp4_gemv_options, fp4_vector_source

    options = fp4_gemv_options(m, rows, "tiled", True, "fp4", "dp4a", stages=stages, static_weights=True)
    body = entry(ptx(fp4_vector_source(), "compute_90", options), "fp4_matvec_bf16")
    early = before_wait(body)
    # per row and ring step: one 16-byte code load (past L1) and one 2-byte scale load; no activation load
    assert early.count("ld.global.nc.L1::no_allocate.v4.u32") == rows * (stages - 1)
    assert len(re.findall(r"ld\.global", early)) == 2 * rows * (stages - 1) and "st.global" not in early
    plain = fp4_gemv_options(m, rows, "tiled", True, "fp4", "dp4a", stages=stages)
    assert "ld.global" not in before_wait(entry(ptx(fp4_vector_source(), "compute_90", plain), "fp4_matvec_bf16"))


@pytest.mark.parametrize("static, decode, pdl, says", [
    (False, "dp4a", True, ""),
    (True, "dp4a", True, "; static weights: the first ring's weights are loaded before griddepcontrol.wait"),
    (True, "dp4a", False, "no effect (no programmatic dependent launch below compute capability 9.0)"),
    (True, "e4m3", True, "no effect (only the integer path, decode='dp4a', loads weights early)"),
    (True, "bytes", False, "no effect (only the integer path")])
def test_the_fp4_engines_describe_says_what_the_promise_does(static, decode, pdl, says) -> None:
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import Fp4Gemv

    engine = SimpleNamespace(static_weights=static, decode=decode, k=4096,
                             config=SimpleNamespace(programmatic_stream_serialization=pdl))
    text = Fp4Gemv._static_text(engine)  # type: ignore[arg-type]
    assert (text == "") if not says else (says in text)
