"""Static plus dynamic shared memory above 48 KiB: the opt-in is decided by static + dynamic, belongs
to the CUfunction (every binding and thread of it), and a configuration over the device's opt-in
limit is refused by name before anything is enqueued (issue 12, item 2)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

import mircuda as mc
from helpers import download, patience_s, upload

STATIC_FLOATS = 2048  # 8 KiB of static shared memory
TILED = mc.cuda_kernel(r'''
extern "C" __global__ void tiled(float* out, const float* in, unsigned n) {
    __shared__ float fixed[2048];
    extern __shared__ float tile[];
    for (unsigned i = threadIdx.x; i < 2048; i += blockDim.x) fixed[i] = (float)i;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i] + fixed[i % 2048];
}''', "tiled.cu")
Tiled = mc.cuda_export("tiled", out=mc.Out[mc.DeviceBuffer[mc.f32]], input=mc.In[mc.DeviceBuffer[mc.f32]], n=mc.u32)
TiledInOut = mc.cuda_export("tiled", out=mc.InOut[mc.DeviceBuffer[mc.f32]], input=mc.In[mc.DeviceBuffer[mc.f32]],
                            n=mc.u32)


_FRESH = itertools.count()


def want(h: np.ndarray) -> np.ndarray:
    n = len(h)
    return h[::-1] + (np.arange(n) % STATIC_FLOATS).astype(np.float32)


def run(context, stream, pool, kernel, dynamic_bytes: int, rng) -> None:
    n = dynamic_bytes // 4
    h = rng.standard_normal(n).astype(np.float32)
    x = upload(context, stream, pool, h)
    out = pool.allocate(mc.f32, stream, n)
    stream.memset(out, 0xFF)  # poison: NaN
    kernel.launch(stream, mc.LaunchConfig(1, 256, dynamic_bytes), out, x, n)
    np.testing.assert_array_equal(download(context, stream, out), want(h))


@pytest.fixture()
def module(compiler):
    # A fresh module per test: the function starts at the driver's default limit.
    return compiler.compile(TILED, mc.CompileOptions(defines={"FRESH": next(_FRESH)}))


@pytest.mark.parametrize("dynamic_kib", [40, 44, 48, 100])
def test_static_plus_dynamic_over_48_kib_runs(context, stream, pool, module, rng, dynamic_kib) -> None:
    kernel = module.kernel(Tiled)
    assert kernel.attributes.static_shared_bytes == STATIC_FLOATS * 4
    run(context, stream, pool, kernel, dynamic_kib << 10, rng)


def test_two_contracts_of_one_function_share_the_opt_in(context, stream, pool, module, rng) -> None:
    a, b = module.kernel(Tiled), module.kernel(TiledInOut)
    assert a is not b and a.handle == b.handle
    run(context, stream, pool, a, 60 << 10, rng)
    run(context, stream, pool, b, 44 << 10, rng)  # b's config is new to b: the function keeps a's opt-in
    run(context, stream, pool, b, 64 << 10, rng)
    run(context, stream, pool, a, 52 << 10, rng)


def test_threads_opt_one_function_in_concurrently(context, pool, module, rng) -> None:
    kernels = (module.kernel(Tiled), module.kernel(TiledInOut))
    sizes = [(44 + 4 * i) << 10 for i in range(8)]
    inputs = [rng.standard_normal(s // 4).astype(np.float32) for s in sizes]
    barrier = threading.Barrier(len(sizes), timeout=patience_s(600))
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            stream = context.create_stream()
            x = upload(context, stream, pool, inputs[i])
            out = pool.allocate(mc.f32, stream, len(inputs[i]))
            stream.memset(out, 0xFF)
            barrier.wait()
            kernels[i % 2].launch(stream, mc.LaunchConfig(1, 256, sizes[i]), out, x, len(inputs[i]))
            np.testing.assert_array_equal(download(context, stream, out), want(inputs[i]))
            x.free(stream)
            out.free(stream)
            stream.synchronize()
            stream.close()
        except BaseException as exc:  # reported in the test's thread
            barrier.abort()  # the others stop waiting for this one
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_over_the_limit_is_refused_by_name_and_nothing_runs(context, stream, pool, module) -> None:
    kernel = module.kernel(Tiled)
    optin = context.device_info().max_shared_memory_per_block_optin_bytes
    limit = optin - STATIC_FLOATS * 4
    n = 16
    x = pool.allocate(mc.f32, stream, n)
    out = pool.allocate(mc.f32, stream, n)
    stream.memset(x, 0x3F)
    stream.memset(out, 0xFF)  # poison: NaN
    for dynamic in (limit + 4, optin):
        with pytest.raises(mc.LaunchConfigError, match=rf"shared_mem_bytes: expected at most {limit} .*received {dynamic}"):
            kernel.launch(stream, mc.LaunchConfig(1, 32, dynamic), out, x, n)
    stream.synchronize()
    assert (download(context, stream, out).view(np.uint32) == 0xFFFFFFFF).all()
    run_limit = mc.LaunchConfig(1, 256, limit)  # the limit itself runs
    kernel.launch(stream, run_limit, out, x, n)
    stream.synchronize()
    assert not np.isnan(download(context, stream, out)).any()


def test_a_graph_node_update_opts_in_and_refuses_over_the_limit(context, stream, pool, module, rng) -> None:
    kernel = module.kernel(Tiled)
    small, large = 16 << 10, 48 << 10
    h = rng.standard_normal(large // 4).astype(np.float32)
    x = upload(context, stream, pool, h)
    out = pool.allocate(mc.f32, stream, large // 4)
    stream.memset(out, 0xFF)
    stream.synchronize()
    nodes: list[mc.KernelNode] = []
    graph = stream.capture((out, x), lambda r: nodes.append(
        kernel.launch_captured(stream, mc.LaunchConfig(1, 256, small), r[0], r[1], small // 4)))
    (node,) = nodes
    graph.update_kernel(node, lambda r: ((r[0], r[1], large // 4), mc.LaunchConfig(1, 256, large)))
    graph.launch(stream)
    np.testing.assert_array_equal(download(context, stream, out), want(h))
    optin = context.device_info().max_shared_memory_per_block_optin_bytes
    with pytest.raises(mc.LaunchConfigError, match="shared_mem_bytes: expected at most"):
        graph.update_kernel(node, lambda r: ((r[0], r[1], large // 4), mc.LaunchConfig(1, 256, optin)))
    stream.memset(out, 0xFF)
    graph.launch(stream)  # the refused update changed nothing: the last good one replays
    np.testing.assert_array_equal(download(context, stream, out), want(h))
    graph.close()
