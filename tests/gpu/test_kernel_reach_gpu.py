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


# NVRTC 13 keeps CUBINs in the CUDA driver's compute cache (CUDA_CACHE_PATH) and, on a hit, skips
# ptxas and its -v report. Two processes sharing one cache directory stand for two runs (or two xdist
# workers) on a warm machine.
_RAW_NVRTC = r'''
import sys
from cuda.bindings import nvrtc
src = open(sys.argv[1], "rb").read()
flags = [f.encode() for f in sys.argv[2:]]
err, prog = nvrtc.nvrtcCreateProgram(src, b"staged.cu", 0, [], [])
(result,) = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
err, size = nvrtc.nvrtcGetProgramLogSize(prog)
log = b" " * size
nvrtc.nvrtcGetProgramLog(prog, log)
print(int(result))
print(log.rstrip(b"\0").decode())
'''

_MIRCUDA_REPORT = r'''
import json, sys
import mircuda as mc
source = mc.cuda_kernel(open(sys.argv[1]).read(), "staged.cu")
out = {}
for regs in (None, 24):
    usage = mc.compile_program(source, sys.argv[2], mc.CompileOptions(ptxas_verbose=True, max_registers=regs))
    out[str(regs)] = usage.resource_usage()["staged"].__dict__
print(json.dumps(out))
'''


def _run(code: str, *args: str, cache: str) -> str:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, CUDA_CACHE_PATH=cache, PYTHONPATH=os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("CUDA_CACHE_DISABLE", None)
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_report_does_not_depend_on_what_other_processes_compiled(context, tmp_path) -> None:
    arch = context.device_info().arch
    (tmp_path / "staged.cu").write_text(STAGED.text)
    cache = str(tmp_path / "cuda-cache")
    first = _run(_MIRCUDA_REPORT, str(tmp_path / "staged.cu"), arch, cache=cache)
    second = _run(_MIRCUDA_REPORT, str(tmp_path / "staged.cu"), arch, cache=cache)  # a warm driver cache now
    assert first == second
    import json

    usage = json.loads(second)
    assert usage["24"]["registers"] <= 24 < usage["None"]["registers"] and usage["24"]["spill_store_bytes"] > 0


def test_the_root_cause_nvrtc_answers_from_the_driver_cache_without_ptxas_unless_no_cache(context, tmp_path) -> None:
    """The witness of issue 18's flaky report: without --no-cache, NVRTC's second compile of a program
    (another process, the same CUDA_CACHE_PATH) takes the CUBIN from the driver's cache and its log has
    no ptxas report; with --no-cache both have it."""
    arch = context.device_info().arch
    (tmp_path / "staged.cu").write_text(STAGED.text)
    base = [str(tmp_path / "staged.cu"), f"--gpu-architecture={arch}", "--ptxas-options=-v", "--enable-cache-trace"]
    cache = str(tmp_path / "cuda-cache")
    logs = [_run(_RAW_NVRTC, *base, cache=cache) for _ in range(2)]
    assert all(log.startswith("0\n") for log in logs)
    assert "Compiling entry function 'staged'" in logs[0]
    assert "Compiling entry function 'staged'" not in logs[1] and "cached cubin" in logs[1]
    uncached = [_run(_RAW_NVRTC, *base, "--no-cache", cache=cache) for _ in range(2)]
    assert all("Compiling entry function 'staged'" in log for log in uncached)


@pytest.mark.parametrize("block, smem", [(32, 0), (128, 0), (256, 4096), ((16, 16), 40 * 1024), ("max", 0)])
def test_max_active_blocks_per_sm_is_the_drivers_figure(compiler, block, smem) -> None:
    from cuda.bindings import driver as drv

    kernel = compiler.compile(STAGED).kernel(Staged)
    if block == "max":  # the function's own limit (registers can hold it below 1024: 896 on the H200)
        block = kernel.attributes.max_threads_per_block
        with pytest.raises(mc.LaunchConfigError, match="block"):
            kernel.max_active_blocks_per_sm(block + 32, smem)
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


# -- vector and struct parameters -----------------------------------------------------------------
Params = mc.struct("Params", [("n", mc.u32), ("scale", mc.f32), ("out", mc.DeviceBuffer[mc.f32]),
                              ("offset", mc.float4), ("tag", mc.u8), ("h", mc.half2), ("d", mc.f64)])
STRUCTS = mc.cuda_kernel(r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
''' + Params.c_declaration().replace("uint32_t", "unsigned").replace("uint8_t", "unsigned char") + r'''
extern "C" __global__ void echo_vec(float4 v, int2 i, double2 d, __nv_bfloat162 b, unsigned char pad, float4 w,
                                    float* out) {
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    out[4] = __int_as_float(i.x); out[5] = __int_as_float(i.y);
    out[6] = (float)d.x; out[7] = (float)d.y;
    out[8] = __bfloat162float(b.x); out[9] = __bfloat162float(b.y);
    out[10] = pad; out[11] = w.x; out[12] = w.w;
}
extern "C" __global__ void use_params(Params p) {
    unsigned t = threadIdx.x;
    if (t < p.n) p.out[t] = p.scale * t + p.offset.x + p.offset.y + p.offset.z + p.offset.w + p.tag
                            + __half2float(p.h.x) + __half2float(p.h.y) + (float)p.d;
}''', "structs.cu")
EchoVec = mc.cuda_export("echo_vec", v=mc.float4, i=mc.int2, d=mc.double2, b=mc.bfloat162, pad=mc.u8, w=mc.float4,
                         out=mc.Out[mc.DeviceBuffer[mc.f32]])
UseParams = mc.cuda_export("use_params", p=Params)


def test_vector_parameters_read_back_exactly(context, stream, pool, compiler) -> None:
    kernel = compiler.compile(STRUCTS).kernel(EchoVec)
    out = pool.allocate(np.float32, stream, 13)
    stream.memset(out, 0xFF)
    v = np.array([1.0 / 3.0, -2.5, 3.4e38, -1e-45], np.float32)       # a subnormal and f32's largest range
    i = (np.float32(0.1).view(np.int32).item(), np.float32(-2.0).view(np.int32).item())  # bits read as floats
    kernel.launch(stream, mc.LaunchConfig(1, 1), v, i, {"x": 0.5, "y": -0.25}, (1.5, -3.0), 200, (9.0, 0, 0, -9.0),
                  out)
    got = download(context, stream, out)
    want = np.array([*v, 0.1, -2.0, 0.5, -0.25, 1.5, -3.0, 200, 9.0, -9.0], np.float32)
    assert got.tobytes() == want.tobytes()


def test_a_struct_parameter_with_a_buffer_reads_back_exactly(context, stream, pool, compiler) -> None:
    kernel = compiler.compile(STRUCTS).kernel(UseParams)
    n = 96
    out = pool.allocate(np.float32, stream, 128)
    stream.memset(out, 0)
    value = {"n": n, "scale": 0.5, "out": out, "offset": (1.0, 2.0, 4.0, 8.0), "tag": 3, "h": (0.25, 0.125),
             "d": 1024.0}
    kernel.launch(stream, mc.LaunchConfig(1, 128), value)
    got = download(context, stream, out)
    t = np.arange(n, dtype=np.float32)
    want = np.float32(0.5) * t + np.float32(15.0) + np.float32(3) + np.float32(0.375) + np.float32(1024.0)
    np.testing.assert_array_equal(got[:n], want)
    np.testing.assert_array_equal(got[n:], np.zeros(128 - n, np.float32))


def test_a_struct_with_the_wrong_alignment_is_refused_at_bind_time(compiler) -> None:
    # Same size as float4 but 4-byte aligned: after a u8 it would sit at offset 4, the kernel's float4 at 16.
    loose = mc.struct("loose4", [("x", mc.f32), ("y", mc.f32), ("z", mc.f32), ("w", mc.f32)])
    bad = mc.cuda_export("echo_vec", v=mc.float4, i=mc.int2, d=mc.double2, b=mc.bfloat162, pad=mc.u8, w=loose,
                         out=mc.Out[mc.DeviceBuffer[mc.f32]])
    with pytest.raises(mc.ContractError) as info:
        compiler.compile(STRUCTS).kernel(bad)
    assert info.value.argument == "w" and "offset" in str(info.value)


def test_a_struct_argument_updates_a_graph_node_and_its_buffer_is_held(context, stream, pool, compiler) -> None:
    kernel = compiler.compile(STRUCTS).kernel(UseParams)
    first, second = pool.allocate(np.float32, stream, 32), pool.allocate(np.float32, stream, 32)
    stream.memset(first, 0)
    stream.memset(second, 0)
    base = {"n": 32, "scale": 1.0, "out": first, "offset": (0, 0, 0, 0), "tag": 0, "h": (0, 0), "d": 0.0}
    nodes = {}

    def record(r: dict) -> None:
        nodes["use"] = kernel.launch_captured(stream, mc.LaunchConfig(1, 32), r)

    graph = stream.capture(base, record)
    graph.update_kernel(nodes["use"], lambda r: ({**r, "scale": 2.0, "tag": 1, "out": second},))
    with pytest.raises(mc.ContractError):  # the graph holds the buffer named inside the struct
        second.free(stream)
    graph.launch(stream)
    np.testing.assert_array_equal(download(context, stream, second), 2.0 * np.arange(32, dtype=np.float32) + 1)
    np.testing.assert_array_equal(download(context, stream, first), np.zeros(32, np.float32))
    graph.close()


# -- launch kinds: cooperative grids and thread block clusters --------------------------------------
KINDS = mc.cuda_kernel(r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Every block writes its id, the whole grid synchronizes, then each block reads its neighbour's:
// without a cooperative launch grid.sync() is undefined.
extern "C" __global__ void grid_rotate(int* stage, int* out, unsigned blocks) {
    cg::grid_group grid = cg::this_grid();
    if (threadIdx.x == 0) stage[blockIdx.x] = (int)blockIdx.x * 10 + 1;
    grid.sync();
    if (threadIdx.x == 0) out[blockIdx.x] = stage[(blockIdx.x + 1) % blocks];
}

// Each block of a 2x1 cluster fills its shared memory, then reads its partner block's through
// distributed shared memory.
extern "C" __global__ void cluster_swap(int* out) {
    __shared__ int tile[128];
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    tile[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    cluster.sync();
    int* partner = cluster.map_shared_rank(tile, rank ^ 1);
    out[blockIdx.x * blockDim.x + threadIdx.x] = partner[threadIdx.x] + (int)cluster.num_blocks() * 1000000;
    cluster.sync();  // keep this block's shared memory alive until the partner has read it
}''', "kinds.cu")
GridRotate = mc.cuda_export("grid_rotate", stage=mc.DeviceBuffer[mc.i32], out=mc.Out[mc.DeviceBuffer[mc.i32]],
                            blocks=mc.u32)
ClusterSwap = mc.cuda_export("cluster_swap", out=mc.Out[mc.DeviceBuffer[mc.i32]])


def _cluster_device(context) -> None:
    if context.device_info().compute_capability < (9, 0):
        pytest.skip("thread block clusters need compute capability >= 9.0")


def test_a_cooperative_grid_synchronizes(context, stream, pool, compiler) -> None:
    kernel = compiler.compile(KINDS).kernel(GridRotate)
    blocks = context.device_info().multiprocessor_count * kernel.max_active_blocks_per_sm(64)
    stage, out = pool.allocate(np.int32, stream, blocks), pool.allocate(np.int32, stream, blocks)
    stream.memset(stage, 0)
    stream.memset(out, 0xFF)
    kernel.launch(stream, mc.LaunchConfig(blocks, 64, cooperative=True), stage, out, blocks)
    want = (np.roll(np.arange(blocks), -1) * 10 + 1).astype(np.int32)
    np.testing.assert_array_equal(download(context, stream, out), want)


def test_a_cooperative_grid_too_large_to_be_resident_is_refused_with_the_figures(context, stream, pool,
                                                                                 compiler) -> None:
    kernel = compiler.compile(KINDS).kernel(GridRotate)
    per_sm = kernel.max_active_blocks_per_sm(64)
    sms = context.device_info().multiprocessor_count
    stage, out = pool.allocate(np.int32, stream, 1), pool.allocate(np.int32, stream, 1)
    with pytest.raises(mc.LaunchConfigError) as info:
        kernel.launch(stream, mc.LaunchConfig(per_sm * sms + 1, 64, cooperative=True), stage, out, 1)
    assert f"{per_sm * sms + 1} blocks exceed {per_sm} per SM x {sms} SMs" in str(info.value)


def test_a_2x1_cluster_reads_its_partners_shared_memory(context, stream, pool, compiler) -> None:
    _cluster_device(context)
    kernel = compiler.compile(KINDS).kernel(ClusterSwap)
    blocks = 8
    out = pool.allocate(np.int32, stream, blocks * 128)
    stream.memset(out, 0xFF)
    kernel.launch(stream, mc.LaunchConfig(blocks, 128, cluster=(2, 1, 1)), out)
    got = download(context, stream, out).reshape(blocks, 128)
    partner = np.arange(blocks) ^ 1
    want = partner[:, None] * 1000 + np.arange(128)[None, :] + 2 * 1000000
    np.testing.assert_array_equal(got, want.astype(np.int32))


def test_a_cluster_launch_under_graph_capture(context, stream, pool, compiler) -> None:
    _cluster_device(context)
    kernel = compiler.compile(KINDS).kernel(ClusterSwap)
    out = pool.allocate(np.int32, stream, 4 * 128)
    stream.memset(out, 0)
    config = mc.LaunchConfig(4, 128, cluster=(2, 1, 1))
    nodes = {}
    graph = stream.capture(out, lambda o: nodes.setdefault("swap", kernel.launch_captured(stream, config, o)))
    with pytest.raises(mc.LaunchConfigError, match="cannot change them"):
        graph.update_kernel(nodes["swap"], lambda o: ((o,), mc.LaunchConfig(4, 128)))
    graph.launch(stream)
    got = download(context, stream, out).reshape(4, 128)
    want = (np.arange(4) ^ 1)[:, None] * 1000 + np.arange(128)[None, :] + 2 * 1000000
    np.testing.assert_array_equal(got, want.astype(np.int32))
    graph.close()


def test_a_cluster_must_tile_the_grid_and_fit_the_portable_size(context, stream, pool, compiler) -> None:
    _cluster_device(context)
    kernel = compiler.compile(KINDS).kernel(ClusterSwap)
    out = pool.allocate(np.int32, stream, 32 * 32)
    with pytest.raises(mc.LaunchConfigError, match="not a multiple of cluster"):
        mc.LaunchConfig(3, 32, cluster=2)
    with pytest.raises(mc.LaunchConfigError, match="non-portable"):
        kernel.launch(stream, mc.LaunchConfig(32, 32, cluster=16), out)
