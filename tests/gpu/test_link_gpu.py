"""Relocatable device code on the GPU: CUDA C units linked by nvJitLink (mc.cuda_link) load as one
module, bind typed contracts and compute exactly what the units define; the linked module is cached
on disk and reloaded."""

from __future__ import annotations

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload

# A device function and a device variable in one unit, kernels (one templated) that use them in another.
LIB = mc.cuda_kernel(r'''
extern "C" __device__ int mix(int x, int i) { return x * 3 + (i ^ 5); }
extern "C" __device__ int bias = -11;
''', "lib.cu")
APP = mc.cuda_kernel(r'''
extern "C" __device__ int mix(int x, int i);
extern "C" __device__ int bias;
extern "C" __global__ void apply(int* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = mix(p[i], int(i)) + bias;
}
template <typename T> __global__ void apply_t(T* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = T(mix(int(p[i]), int(i)) + bias);
}''', "app.cu", name_expressions=["apply_t<long long>"])
Apply = mc.cuda_export("apply", p=mc.InOut[mc.DeviceBuffer[mc.i32]], n=mc.u32)
ApplyI64 = mc.cuda_export("apply_t<long long>", p=mc.InOut[mc.DeviceBuffer[mc.i64]], n=mc.u32)


def _expected(x: np.ndarray) -> np.ndarray:
    i = np.arange(x.size, dtype=np.int64)
    return x.astype(np.int64) * 3 + (i ^ 5) - 11


@pytest.mark.parametrize("lto", [False, True], ids=["rdc", "lto"])
@pytest.mark.parametrize("contract, dtype", [(Apply, np.int32), (ApplyI64, np.int64)], ids=["extern_c", "template"])
def test_a_linked_kernel_runs_and_reads_back_exactly(context, stream, pool, compiler, rng, contract, dtype,
                                                     lto) -> None:
    kernel = compiler.compile(mc.cuda_link([LIB, APP], "lib+app", lto=lto)).kernel(contract)
    n = 5000
    x = rng.integers(-(1 << 20), 1 << 20, size=n + 16).astype(dtype)
    buf = upload(context, stream, pool, x)
    kernel.launch(stream, mc.LaunchConfig.for_elements(n, 128), buf, n)
    got = download(context, stream, buf)
    np.testing.assert_array_equal(got[:n], _expected(x[:n]).astype(dtype))
    np.testing.assert_array_equal(got[n:], x[n:])  # the tail the kernel must not touch


def test_a_persisted_link_loads_and_runs_after_a_reload(context, stream, pool, tmp_path, rng) -> None:
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    mc.Compiler(context, config).compile(mc.cuda_link([LIB, APP], "lib+app"))
    again = mc.Compiler(context, config)
    kernel = again.compile(mc.cuda_link([LIB, APP], "lib+app")).kernel(Apply)
    assert again.cache_stats().persistent_hits == 1 and again.cache_stats().compilations == 0
    x = rng.integers(-1000, 1000, size=256).astype(np.int32)
    buf = upload(context, stream, pool, x)
    kernel.launch(stream, mc.LaunchConfig((2, 1, 1), (128, 1, 1)), buf, 256)
    np.testing.assert_array_equal(download(context, stream, buf), _expected(x).astype(np.int32))


def test_an_unresolved_link_fails_before_any_module_is_loaded(compiler) -> None:
    with pytest.raises(mc.LinkError) as info:
        compiler.compile(mc.cuda_link([APP], "app alone"))
    assert info.value.unresolved == ("mix", "bias")
    with pytest.raises(mc.LinkError):  # a failed link leaves nothing in the cache
        compiler.compile(mc.cuda_link([APP], "app alone"))
