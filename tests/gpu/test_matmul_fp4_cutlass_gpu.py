"""BlockScaledFp4Plan's SM120 CUTLASS path and the FP4 kernels' compile target on the GPU.

Below cc 12 (the H200) nothing changes: M > 16 takes the portable path and says why, the library's NVFP4
kernels are refused by name, the NVRTC kernels compile for the plain target (software decode). On cc 12.x
the library's block-scaled NVFP4 kernels run against a float64 product of the dequantized operands
(partial tiles in M, N, K; device and host alpha; poisoned D with a guard band), inside a captured graph
that follows the global scales, and from ``@numba.njit``; the NVRTC kernels compile for sm_12Yf and decode
with ``cvt.rn.f16x2.e2m1x2``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from test_matmul_fp4_gpu import Operand, bf16_data, check_guard, poisoned, reference

CUTLASS_ACCUMULATION = 2.0**-11
"""As cutlass-check's FP4_CUTLASS_ACCUMULATION: the block-scaled MMA's accumulation width is not documented."""


def assert_within(got: np.ndarray, want: np.ndarray, mag: np.ndarray) -> None:
    got64 = got.astype(np.float64)
    assert np.isfinite(got64).all(), "non-finite outputs (a poisoned value was read or not written)"
    bound = 2 * 2.0**-8 * np.abs(want) + CUTLASS_ACCUMULATION * mag + 1e-30
    excess = np.abs(got64 - want) / bound
    assert excess.max() <= 1.0, f"{int((excess > 1).sum())} of {excess.size} outputs outside the bound"


def sm120_kernels(context: mc.Context, library: Any) -> list[Any]:
    cc = context.device_info().compute_capability
    kernels = [k for k in library.block_scaled_kernels if k.runs_on(cc)]
    if not kernels:
        pytest.skip(f"needs cc 12.x and a library with the FP4 families (cc {cc[0]}.{cc[1]}, "
                    f"{len(library.block_scaled_kernels)} NVFP4 kernels)")
    return kernels


def below_cc_12(context: mc.Context) -> None:
    if context.device_info().compute_capability[0] == 12:
        pytest.skip("checks the path of devices below cc 12")


# -- the H200: unchanged ------------------------------------------------------------------------------


@pytest.mark.cutlass
@pytest.mark.parametrize("layout", ["linear", "tiled"])
def test_below_cc_12_large_m_keeps_the_portable_path(context, stream, library, layout) -> None:
    below_cc_12(context)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(300, 1024, 1024), scale_layout=layout,
                                 library=library)
    assert plan.path == "decode+dense" and plan.kernel is None
    assert "need cc 12.x" in plan.describe() and "DenseMatmulPlan" in plan.describe()
    plan.close()


@pytest.mark.cutlass
def test_below_cc_12_the_library_nvfp4_kernels_are_refused_by_name(context, stream, library) -> None:
    below_cc_12(context)
    if not library.block_scaled_kernels:
        pytest.skip("the library was built without the FP4 families (120f)")
    for kernel in library.block_scaled_kernels:
        with pytest.raises(mc.ContractError) as info:
            mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(300, 1024, 1024), scale_layout="tiled",
                                  library=library, kernel=kernel.name)
        assert info.value.argument == "kernel" and "does not load" in str(info.value)
    with pytest.raises(mc.ContractError) as info:
        mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(300, 1024, 1024), library=library, kernel="nope")
    assert info.value.argument == "kernel"


def test_below_cc_12_the_fp4_kernels_compile_for_the_plain_target(context, stream) -> None:
    below_cc_12(context)
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(256, 1024))
    assert plan._engine.arch == context.device_info().arch
    # the M = 1 default there is the integer path (default_vector_decode); the bytes decoder, which takes
    # cvt.rn.f16x2.e2m1x2 on the family targets, falls back to the exact software decode
    assert "decode='dp4a'" in plan.describe()
    word = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(256, 1024), decode="bytes")
    assert word._engine.arch == context.device_info().arch and "software E2M1 decode" in word.describe()


def test_a_compiler_takes_the_arch_specific_variant_of_its_device(context, stream, pool) -> None:
    from mircuda.matmul._fp4_layout import fp4_layout_source, layout_options

    info = context.device_info()
    if info.compute_capability < (9, 0):
        pytest.skip("arch-specific targets start at sm_90a")
    compiler = mc.Compiler(context, arch=info.arch + "a")
    assert compiler.arch == info.arch + "a"
    kernel = compiler.compile(fp4_layout_source(), layout_options("tiled")).kernel(mc.cuda_export(
        "fp4_alpha_product", out=mc.Out[mc.DeviceBuffer[mc.f32]], global_a=mc.u64, global_b=mc.u64, alpha=mc.f32))
    out = upload(context, stream, pool, np.zeros(1, np.float32))
    g = upload(context, stream, pool, np.array([0.25, 3.0], np.float32))
    kernel.launch(stream, mc.LaunchConfig((1,), (1,)), out, g.handle, g.handle + 4, 2.0)
    assert download(context, stream, out)[0] == np.float32(2.0 * 0.25 * 3.0)
    kernel.launch(stream, mc.LaunchConfig((1,), (1,)), out, 0, 0, 5.0)
    assert download(context, stream, out)[0] == np.float32(5.0)
    other = "sm_120f" if info.compute_capability[0] != 12 else "sm_90a"
    with pytest.raises(mc.ContractError) as exc:
        mc.Compiler(context, arch=other)
    assert exc.value.argument == "arch"
    out.free(stream)
    g.free(stream)


# -- cc 12.x: the CUTLASS NVFP4 kernels ---------------------------------------------------------------


@pytest.mark.cutlass
@pytest.mark.parametrize("m, n, k", [(300, 1032, 1056), (2048, 1024, 1024), (17, 264, 4096), (1, 136, 64)], ids=str)
@pytest.mark.parametrize("device_alpha", [True, False])
def test_the_sm120_nvfp4_kernels_match_float64(context, stream, pool, rng, library, m, n, k, device_alpha) -> None:
    for kernel in sm120_kernels(context, library):
        b = Operand(context, stream, pool, bf16_data(rng, n, k), "tiled")
        a = Operand(context, stream, pool, bf16_data(rng, m, k), "tiled")
        d = poisoned(context, stream, pool, m * n)
        plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout="tiled",
                                     library=library, kernel=kernel.name)
        assert plan.path == "cutlass" and plan.kernel == kernel, plan.describe()
        alpha = float(rng.uniform(0.5, 2.0))
        if device_alpha:
            plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, global_a=a.global_buf,
                         global_b=b.global_buf, alpha=alpha)
            scale = alpha * float(a.global_) * float(b.global_)
        else:
            plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d, alpha=alpha)
            scale = alpha
        got = check_guard(download(context, stream, d), m * n).reshape(m, n)
        want, mag = reference(a.value, b.value, scale)
        assert_within(got, want, mag)
        plan.close()
        for x in (a, b):
            x.free(stream)
        d.free(stream)


@pytest.mark.cutlass
def test_the_sm120_plan_chooses_the_cutlass_path_and_says_why(context, stream, library) -> None:
    sm120_kernels(context, library)
    spec = mc.DenseMatmulSpec(300, 1024, 1024)
    plan = mc.BlockScaledFp4Plan(context, stream, spec, scale_layout="tiled", library=library)
    assert plan.path == "cutlass" and "FP4 tensor cores" in plan.describe()
    assert "kind::mxf4nvf4.block_scale" in plan.describe()
    plan.close()
    for kwargs, words in [({"scale_layout": "linear"}, "scale_layout='linear'"),
                          ({"scale_layout": "tiled", "activation": "bf16"}, "activation='bf16'")]:
        plan = mc.BlockScaledFp4Plan(context, stream, spec, library=library, **kwargs)
        assert plan.path == "decode+dense" and words in plan.describe()
        plan.close()
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(300, 1024, 1040), scale_layout="tiled",
                                 library=library)
    assert plan.path == "decode+dense" and "K = 1040 is not a multiple of 32" in plan.describe()
    plan.close()


def test_on_cc_12_the_fp4_kernels_decode_with_cvt(context, stream) -> None:
    cc = context.device_info().compute_capability
    if cc[0] != 12:
        pytest.skip("needs cc 12.x")
    plan = mc.BlockScaledFp4VectorPlan(context, stream, mc.DenseVectorSpec(256, 1024))
    assert plan._engine.arch == f"sm_{cc[0]}{cc[1]}f" and "cvt.rn.f16x2.e2m1x2" in plan.describe()


@pytest.mark.cutlass
def test_a_captured_sm120_plan_follows_the_global_scales(context, stream, pool, rng, library) -> None:
    sm120_kernels(context, library)
    m, n, k = 300, 520, 2048
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "tiled")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "tiled")
    d = poisoned(context, stream, pool, m * n)
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout="tiled", library=library)
    assert plan.path == "cutlass"
    graph = stream.capture((a.codes, a.scale_buf, b.codes, b.scale_buf, d, a.global_buf, b.global_buf),
                           lambda _: plan.execute(stream, a.codes, a.scale_buf, b.codes, b.scale_buf, d,
                                                  global_a=a.global_buf, global_b=b.global_buf, alpha=0.5))
    for ga in (float(a.global_), float(a.global_) * 3.0):
        staging = context.allocate_pinned(mc.f32, 1)
        staging.write_prefix(np.array([ga], np.float32))
        stream.copy_to_device(staging, a.global_buf)
        graph.launch(stream)
        got = check_guard(download(context, stream, d), m * n).reshape(m, n)
        want, mag = reference(a.value, b.value, 0.5 * float(np.float32(ga)) * float(b.global_))
        assert_within(got, want, mag)
    graph.close()
    plan.close()
    for x in (a, b):
        x.free(stream)
    d.free(stream)


@pytest.mark.cutlass
def test_the_sm120_plan_runs_from_numba(context, stream, pool, rng, library) -> None:
    numba = pytest.importorskip("numba")
    sm120_kernels(context, library)
    m, n, k = 64, 256, 512
    b = Operand(context, stream, pool, bf16_data(rng, n, k), "tiled")
    a = Operand(context, stream, pool, bf16_data(rng, m, k), "tiled")
    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), scale_layout="tiled", library=library,
                                 kernel=library.block_scaled_kernels[0].name)
    outs = [poisoned(context, stream, pool, m * n) for _ in range(2)]
    execute = plan.numba_execute

    @numba.njit
    def loop(s, pa, psa, pb, psb, ds, ga, gb):
        status = 0
        for i in range(len(ds)):
            status |= execute(s, pa, psa, pb, psb, ds[i], ga, gb, 1.0 + i)
        return status

    ds = np.array([o.handle for o in outs], np.uint64)
    # one output at a time: the plan's device alpha is rewritten by each call, in stream order
    assert loop(stream.handle, a.codes.handle, a.scale_buf.handle, b.codes.handle, b.scale_buf.handle, ds,
                a.global_buf.handle, b.global_buf.handle) == 0
    assert execute(stream.handle + 1, a.codes.handle, 0, b.codes.handle, 0, outs[0].handle, 0, 0, 1.0) == 1
    assert execute(stream.handle, a.codes.handle + 8, a.scale_buf.handle, b.codes.handle, b.scale_buf.handle,
                   outs[0].handle, 0, 0, 1.0) == 2
    for i, out in enumerate(outs):
        got = check_guard(download(context, stream, out), m * n).reshape(m, n)
        want, mag = reference(a.value, b.value, (1.0 + i) * float(a.global_) * float(b.global_))
        assert_within(got, want, mag)
        out.free(stream)
    plan.close()
    for x in (a, b):
        x.free(stream)
