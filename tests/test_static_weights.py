"""``static_weights=True`` (DenseVectorPlan, DenseMatmulPlan) without a GPU: the promise that no running kernel
writes the weights compiles the decode kernels with ``MIRCUDA_PRELOAD_WEIGHTS=1``, which on Hopper and later
issues the first step's weight loads (and only those) before ``griddepcontrol.wait``; x, the scales of nothing
else and every store still wait. Without the promise nothing but L2 prefetches precedes the wait. The kernels keep
to registers either way."""

from __future__ import annotations

import re
import subprocess

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


@pytest.mark.parametrize("value", [1, 0, None, "yes", 1.0])
def test_anything_but_a_bool_is_refused_by_name(value) -> None:
    with pytest.raises(ContractError, match="static_weights") as info:
        check_static_weights(value)
    assert info.value.argument == "static_weights" and repr(value) in str(info.value)
    assert check_static_weights(True) is True and check_static_weights(False) is False


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
    assert static_weights_note(False, True, True) == ""
    assert "loaded before griddepcontrol.wait" in static_weights_note(True, True, True)
    assert "no effect" in static_weights_note(True, False, True) and "9.0" in static_weights_note(True, False, True)
    assert "no effect" in static_weights_note(True, True, False)


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
