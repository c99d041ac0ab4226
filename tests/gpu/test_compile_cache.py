"""The compiler's caches on the device: persistent hits load and run, driver-rejected entries are rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import mircuda as mc
from helpers import download, patience_s, upload
from mircuda.compile import _persistent

SCALE_TEXT = r'''
extern "C" __global__ void scale(float* y, const float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}'''
SCALE = mc.cuda_kernel(SCALE_TEXT, "scale.cu")
Scale = mc.cuda_export("scale", y=mc.Out[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]], a=mc.f32,
                       n=mc.u32)


def check_scale(context, stream, pool, module: mc.Module, rng: np.random.Generator) -> None:
    """Launch ``scale`` from ``module`` on fresh data into a poisoned output; compare with float64 numpy."""
    n = 100_003
    x_h = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(0.5, 2.0))
    x = upload(context, stream, pool, x_h)
    y = pool.allocate(mc.f32, stream, n)
    stream.memset(y, 0xFF)  # NaN
    module.kernel(Scale).launch(stream, mc.LaunchConfig.for_elements(n, 256), y, x, a, n)
    got = download(context, stream, y).astype(np.float64)
    want = np.float32(a) * x_h.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
    x.free(stream)
    y.free(stream)


def cached(context, directory: Path, **config) -> mc.Compiler:
    return mc.Compiler.with_config(context, mc.CompilerConfig(cache_directory=directory, **config))


@pytest.mark.parametrize("output", ["cubin", "ptx"])
def test_a_persistent_hit_loads_and_runs(context, stream, pool, rng, tmp_path, output) -> None:
    options = mc.CompileOptions(output=output)
    first = cached(context, tmp_path)
    check_scale(context, stream, pool, first.compile(SCALE, options), rng)
    again = cached(context, tmp_path)
    module = again.compile(SCALE, options)
    assert again.cache_stats() == mc.CompileCacheStats(persistent_hits=1)
    assert module.program.output == output
    check_scale(context, stream, pool, module, rng)


def wrong_gpu_cubin(program: mc.CompiledProgram) -> bytes:
    """A complete, valid CUBIN for a GPU other than this one (the driver refuses it)."""
    other = "sm_120" if program.arch != "sm_120" else "sm_90"
    return mc.compile_program(SCALE, other).image


REJECTED = {
    "CUBIN for another GPU": wrong_gpu_cubin,
    "ELF magic, then zeros": lambda program: b"\x7fELF" + bytes(4092),
}


@pytest.mark.parametrize("bad_image", REJECTED.values(), ids=REJECTED.keys())
def test_a_driver_rejected_entry_is_removed_rebuilt_and_rewritten(context, stream, pool, rng, tmp_path,
                                                                  bad_image) -> None:
    writer = cached(context, tmp_path)
    program = writer.compile(SCALE).program
    key = writer.cache_key(SCALE)
    path = tmp_path / f"{key}.mcm"
    # A validly framed entry (right key, arch, NVRTC, checksum) whose image the driver will refuse.
    poisoned = replace(program, image=bad_image(program))
    path.write_bytes(_persistent.encode_entry(key, writer.arch, writer.nvrtc_version, poisoned))
    assert _persistent.decode_entry(path.read_bytes(), key, writer.arch, writer.nvrtc_version) == poisoned

    rebuilt = cached(context, tmp_path)
    module = rebuilt.compile(SCALE)
    assert rebuilt.cache_stats() == mc.CompileCacheStats(compilations=1, persistent_failures=1)
    check_scale(context, stream, pool, module, rng)
    assert _persistent.decode_entry(path.read_bytes(), key, writer.arch, writer.nvrtc_version) == program
    assert cached(context, tmp_path).compile(SCALE).program == program


CHILD = r'''
import json, sys
import numpy as np
import mircuda as mc
directory, text = sys.argv[1], sys.argv[2]
driver = mc.Driver.initialize()
with driver.create_context(driver.devices()[0]) as context:
    stream = context.create_stream()
    pool = context.default_memory_pool()
    compiler = mc.Compiler.with_config(context, mc.CompilerConfig(cache_directory=directory))
    module = compiler.compile(mc.cuda_kernel(text, "scale.cu"))
    scale = module.kernel(mc.cuda_export("scale", y=mc.Out[mc.DeviceBuffer[mc.f32]],
                                         x=mc.In[mc.DeviceBuffer[mc.f32]], a=mc.f32, n=mc.u32))
    n, a = 4099, 1.75
    x_h = np.random.default_rng().standard_normal(n).astype(np.float32)
    staging = context.allocate_pinned(mc.f32, n)
    staging.write_prefix(x_h)
    x, y = pool.allocate(mc.f32, stream, n), pool.allocate(mc.f32, stream, n)
    stream.copy_to_device(staging, x)
    stream.memset(y, 0xFF)
    scale.launch(stream, mc.LaunchConfig.for_elements(n, 128), y, x, a, n)
    stream.copy_to_host(y, staging)
    got = staging.to_numpy().astype(np.float64)
    want = np.float32(a) * x_h.astype(np.float64)
    x.free(stream)
    y.free(stream)
    stream.synchronize()
    s = compiler.cache_stats()
    print(json.dumps({"error": float(np.linalg.norm(got - want) / np.linalg.norm(want)),
                      "persistent_hits": s.persistent_hits, "compilations": s.compilations,
                      "persistent_failures": s.persistent_failures}))
'''


def test_a_persistent_hit_in_a_new_process_loads_and_runs(context, tmp_path) -> None:
    cached(context, tmp_path).compile(SCALE)
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), SCALE_TEXT], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=patience_s(300))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["persistent_hits"] == 1 and result["compilations"] == 0 and result["persistent_failures"] == 0
    assert result["error"] < 1e-6


def test_file_sources_with_include_roots_follow_header_edits(context, stream, pool, rng, tmp_path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "factor.cuh").write_text("#define FACTOR 2.0f\n")
    (tmp_path / "scale_by.cu").write_text(r'''
#include <factor.cuh>
extern "C" __global__ void scale(float* y, const float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FACTOR * a * x[i];
}''')
    source = mc.cuda_kernel_file(tmp_path / "scale_by.cu")
    compiler = mc.Compiler.with_config(context, mc.CompilerConfig(include_paths=[tmp_path / "include"],
                                                                  cache_directory=tmp_path / "cache"))
    n = 1000
    x_h = rng.standard_normal(n).astype(np.float32)
    x = upload(context, stream, pool, x_h)
    y = pool.allocate(mc.f32, stream, n)
    for factor in (2.0, 3.0):
        (tmp_path / "include" / "factor.cuh").write_text(f"#define FACTOR {factor}f\n")
        stream.memset(y, 0xFF)
        compiler.compile(source).kernel(Scale).launch(stream, mc.LaunchConfig.for_elements(n, 256), y, x, 0.5, n)
        np.testing.assert_allclose(download(context, stream, y), factor * 0.5 * x_h, rtol=1e-6)
    assert compiler.cache_stats().compilations == 2
    x.free(stream)
    y.free(stream)


def test_a_toolkit_header_edit_rebuilds_the_module(context, stream, pool, rng, tmp_path, monkeypatch) -> None:
    """Issue 12 item 3: headers from the toolkit directories (here a fake one) are in the key."""
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    for name, module in list(sys.modules.items()):  # the key's lookup and NVRTC's
        if name.startswith("mircuda") and hasattr(module, "toolkit_include_dirs"):
            monkeypatch.setattr(module, "toolkit_include_dirs", lambda: (str(toolkit),))
    source = mc.cuda_kernel(r'''
#include <fake_toolkit_factor.h>
extern "C" __global__ void scale(float* y, const float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FACTOR * a * x[i];
}''', "scale_toolkit.cu")
    compiler = cached(context, tmp_path / "cache")
    n = 1000
    x_h = rng.standard_normal(n).astype(np.float32)
    x = upload(context, stream, pool, x_h)
    y = pool.allocate(mc.f32, stream, n)
    for factor in (2.0, 3.0):
        (toolkit / "fake_toolkit_factor.h").write_text(f"#define FACTOR {factor}f\n")
        stream.memset(y, 0xFF)
        compiler.compile(source).kernel(Scale).launch(stream, mc.LaunchConfig.for_elements(n, 256), y, x, 0.5, n)
        np.testing.assert_allclose(download(context, stream, y), factor * 0.5 * x_h, rtol=1e-6)
    assert compiler.cache_stats().compilations == 2
    x.free(stream)
    y.free(stream)


def lie(data: bytes, meta_bytes: bytes | None = None, **changes) -> bytes:
    """An entry with rewritten metadata and a correct checksum."""
    import hashlib
    import struct

    (meta_len,) = struct.unpack_from("<I", data, 108)
    meta = json.loads(data[112:112 + meta_len])
    meta.update(changes)
    raw = json.dumps(meta).encode() if meta_bytes is None else meta_bytes
    payload = struct.pack("<I", len(raw)) + raw + data[112 + meta_len:]
    header = data[:68] + struct.pack("<Q", len(payload))
    return header + hashlib.sha256(header + payload).digest() + payload


LIES = {
    "deeply nested metadata": lambda d: lie(d, meta_bytes=b"[" * 100_000 + b"]" * 100_000),
    "the Numba ABI for CUDA C": lambda d: lie(d, abi="numba"),
    "another arch in the metadata": lambda d: lie(d, arch="sm_80"),
    "empty output": lambda d: lie(d, output=""),
}


@pytest.mark.parametrize("liar", LIES.values(), ids=LIES.keys())
def test_a_checksummed_entry_that_lies_is_rebuilt_on_the_device(context, stream, pool, rng, tmp_path, liar) -> None:
    """Issue 12 item 5: a valid checksum does not make contradicting metadata a hit."""
    writer = cached(context, tmp_path)
    program = writer.compile(SCALE).program
    path = tmp_path / f"{writer.cache_key(SCALE)}.mcm"
    path.write_bytes(liar(path.read_bytes()))
    rebuilt = cached(context, tmp_path)
    module = rebuilt.compile(SCALE)
    assert rebuilt.cache_stats() == mc.CompileCacheStats(compilations=1, persistent_failures=1)
    assert module.program == program
    check_scale(context, stream, pool, module, rng)


def test_nvrtc_warnings_of_a_device_compile_point_at_the_caller(context) -> None:
    import inspect
    import warnings

    source = mc.cuda_kernel('extern "C" __global__ void k(int* o) { int unused; o[0] = 1; }', "warn_gpu.cu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        mc.Compiler(context).compile(source, mc.CompileOptions(extra_flags=("--ftz=true", "--ftz=false")))
    (w,) = [w for w in caught if issubclass(w.category, mc.CompileWarning)]
    assert (w.filename, w.lineno) == (__file__, line)
