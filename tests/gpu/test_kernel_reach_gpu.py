"""Kernel-language reach on the GPU (issue 18): templated kernels bound by name expressions,
occupancy figures, and what the finished pieces of the issue need."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mircuda as mc
from helpers import download

FILL = mc.cuda_kernel(r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T> __global__ void fill(T* out, T value, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}''', "fill_template.cu", name_expressions=["fill<float>", "fill<double>", "fill<int>", "fill<unsigned char>",
                                            "fill<__half>", "fill<__nv_bfloat16>"])

# (expression, contract type, numpy dtype, a value exactly representable in the type)
TYPES = [("fill<float>", mc.f32, np.float32, 1.0 / 3.0), ("fill<double>", mc.f64, np.float64, 1.0 / 3.0),
         ("fill<int>", mc.i32, np.int32, -123456789), ("fill<unsigned char>", mc.u8, np.uint8, 201),
         ("fill<__half>", mc.f16, np.float16, 0.099975586), ("fill<__nv_bfloat16>", mc.bf16, ml_dtypes.bfloat16, -1.5)]


@pytest.mark.parametrize("expression, ctype, dtype, value", TYPES, ids=[t[0] for t in TYPES])
def test_a_templated_kernel_per_type_reads_back_exactly(context, stream, pool, compiler, expression, ctype,
                                                         dtype, value) -> None:
    contract = mc.cuda_export(expression, out=mc.Out[mc.DeviceBuffer[ctype]], value=ctype, n=mc.u32)
    kernel = compiler.compile(FILL).kernel(contract)
    n = 1000
    out = pool.allocate(dtype, stream, n + 24)
    stream.memset(out, 0xA5)  # poison, including the tail the kernel must not write
    kernel.launch(stream, mc.LaunchConfig.for_elements(n, 128), out, value, n)
    got = download(context, stream, out)
    np.testing.assert_array_equal(got[:n], np.full(n, value, dtype=dtype))
    assert got[n:].tobytes() == b"\xa5" * (24 * np.dtype(dtype).itemsize)


def test_an_expression_the_source_does_not_list_is_refused_at_bind_time(compiler) -> None:
    module = compiler.compile(FILL)
    with pytest.raises(mc.ContractError) as info:
        module.kernel(mc.cuda_export("fill<long>", out=mc.Out[mc.DeviceBuffer[mc.i64]], value=mc.i64, n=mc.u32))
    assert info.value.argument == "symbol" and "'fill<float>'" in str(info.value)


def test_a_contract_whose_sizes_differ_from_the_instantiation_is_refused(compiler) -> None:
    with pytest.raises(mc.ContractError):  # fill<double> takes an 8-byte value
        compiler.compile(FILL).kernel(mc.cuda_export("fill<double>", out=mc.Out[mc.DeviceBuffer[mc.f64]],
                                                     value=mc.f32, n=mc.u32))


def test_a_persisted_program_binds_by_expression_after_a_reload(context, stream, pool, tmp_path) -> None:
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    mc.Compiler(context, config).compile(FILL)
    again = mc.Compiler(context, config)
    module = again.compile(FILL)
    assert again.cache_stats().persistent_hits == 1
    kernel = module.kernel(mc.cuda_export("fill<int>", out=mc.Out[mc.DeviceBuffer[mc.i32]], value=mc.i32,
                                          n=mc.u32))
    out = pool.allocate(np.int32, stream, 64)
    kernel.launch(stream, mc.LaunchConfig((1, 1, 1), (64, 1, 1)), out, 7, 64)
    np.testing.assert_array_equal(download(context, stream, out), np.full(64, 7, np.int32))


# -- occupancy and resources ----------------------------------------------------------------------
STAGED = mc.cuda_kernel(r'''
extern "C" __global__ void staged(float* p, int k) {
    __shared__ float s[256];
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = p[i * k];
    s[threadIdx.x] = a[k & 63];
    __syncthreads();
    p[threadIdx.x] = s[(threadIdx.x + 1) & 255];
}''', "staged.cu")
Staged = mc.cuda_export("staged", p=mc.DeviceBuffer[mc.f32], k=mc.i32)


@pytest.mark.parametrize("max_registers", [None, 24])
def test_the_offline_report_equals_the_loaded_function_attributes(compiler, max_registers) -> None:
    options = mc.CompileOptions(ptxas_verbose=True, max_registers=max_registers)
    module = compiler.compile(STAGED, options)
    usage = module.program.resource_usage()["staged"]
    attributes = module.kernel(Staged).attributes
    assert usage.registers == attributes.registers
    assert usage.shared_bytes == attributes.static_shared_bytes
    assert usage.stack_frame_bytes == attributes.local_bytes


@pytest.mark.parametrize("block, smem", [(32, 0), (128, 0), (256, 4096), ((16, 16), 40 * 1024), (1024, 0)])
def test_max_active_blocks_per_sm_is_the_drivers_figure(compiler, block, smem) -> None:
    from cuda.bindings import driver as drv

    kernel = compiler.compile(STAGED).kernel(Staged)
    threads = block if isinstance(block, int) else block[0] * block[1]
    err, want = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(drv.CUfunction(kernel.handle), threads, smem)
    assert int(err) == 0
    assert kernel.max_active_blocks_per_sm(block, smem) == want > 0


@pytest.mark.parametrize("smem, limit", [(0, 0), (8192, 0), (0, 96)])
def test_suggested_block_size_is_the_drivers_figure(compiler, smem, limit) -> None:
    from cuda.bindings import driver as drv

    kernel = compiler.compile(STAGED).kernel(Staged)
    err, grid, block = drv.cuOccupancyMaxPotentialBlockSize(drv.CUfunction(kernel.handle), None, smem, limit)
    assert int(err) == 0
    got = kernel.suggested_block_size(smem, limit)
    assert (got.min_grid_size, got.block_size) == (grid, block)
    assert 0 < got.block_size <= (limit or 1024)


def test_max_active_clusters_is_the_drivers_figure(context, compiler) -> None:
    from cuda.bindings import driver as drv

    if context.device_info().compute_capability < (9, 0):
        pytest.skip("thread block clusters need compute capability >= 9.0")
    kernel = compiler.compile(STAGED).kernel(Staged)
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = 2, 1, 1
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = 2, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = 256, 1, 1
    config.attrs, config.numAttrs = [attr], 1
    err, want = drv.cuOccupancyMaxActiveClusters(drv.CUfunction(kernel.handle), config)
    assert int(err) == 0
    assert kernel.max_active_clusters((2, 1, 1), 256) == want > 0
