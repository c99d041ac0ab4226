"""Offline resource usage (ptxas' -v report through NVRTC) and the argument checks of the occupancy
queries; NVRTC runs here, no GPU needed."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest

import mircuda as mc
from mircuda import _cuda
from mircuda.compile import KernelResources, _nvrtc, parse_ptxas_report
from mircuda.compile._persistent import PersistentCache
from mircuda.compile._resources import is_ptxas_report_line
from mircuda.launch._occupancy import max_active_blocks_per_sm, max_active_clusters, suggested_block_size

SOURCE = r'''
extern "C" __global__ void staged(float* p, int k) {
    __shared__ float s[256];
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = p[i * k];
    s[threadIdx.x] = a[k & 63];
    __syncthreads();
    p[threadIdx.x] = s[(threadIdx.x + 1) & 255];
}
template <typename T> __global__ void fill(T* p, T v) { p[threadIdx.x] = v; }
'''


def program(**options) -> mc.CompiledProgram:
    source = mc.cuda_kernel(SOURCE, "staged.cu", name_expressions=["fill<float>"])
    return mc.compile_program(source, "sm_90", mc.CompileOptions(ptxas_verbose=True, **options))


def test_the_report_gives_each_kernel_by_the_name_contracts_use() -> None:
    usage = program().resource_usage()
    assert list(usage) == ["fill<float>", "staged"]
    staged = usage["staged"]
    assert staged.name == "staged" and staged.arch == "sm_90"
    assert staged.shared_bytes == 256 * 4          # float s[256]
    assert staged.barriers == 1                    # __syncthreads
    assert staged.registers > 0
    fill = usage["fill<float>"]
    assert fill.name == "_Z4fillIfEvPT_S0_" and fill.shared_bytes == 0 and fill.barriers == 0


def test_a_register_cap_shows_as_spills_and_a_stack_frame() -> None:
    free = program().resource_usage()["staged"]
    capped = program(max_registers=24).resource_usage()["staged"]
    assert capped.registers <= 24 < free.registers
    assert capped.spill_store_bytes > 0 and capped.spill_load_bytes > 0
    assert capped.stack_frame_bytes >= capped.spill_store_bytes // 2 > 0


def test_the_report_is_not_issued_as_a_warning_but_real_warnings_are() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program()
    noisy = mc.cuda_kernel(SOURCE + "\n__global__ void w() { int unused; }\n", "noisy.cu")
    with pytest.warns(mc.CompileWarning) as caught:
        mc.compile_program(noisy, "sm_90", mc.CompileOptions(ptxas_verbose=True))
    text = str(caught[0].message)
    assert "unused" in text and "ptxas info" not in text


def test_the_report_survives_the_persistent_cache(tmp_path) -> None:
    source = mc.cuda_kernel(SOURCE, "staged.cu")
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    options = mc.CompileOptions(ptxas_verbose=True)
    first = mc.OfflineCompiler("sm_90", config).compile(source, options)
    assert "ptxas info" in first.log
    again = mc.OfflineCompiler("sm_90", config)
    assert again.compile(source, options).resource_usage() == first.resource_usage()
    assert again.cache_stats().persistent_hits == 1
    assert again.cache_key(source, options) != again.cache_key(source, mc.CompileOptions())


class _WarmDriverCache:
    """NVRTC 13 on a machine with a CUDA driver whose compute cache (``CUDA_CACHE_PATH``) already holds
    the CUBIN: NVRTC takes it from there and skips ptxas, unless the compile passes ``--no-cache``.
    (Seen on the H200 host: the second compile of a program in a run, or any compile of one an earlier
    run or another worker compiled, had no ptxas report. NVRTC's ``--enable-cache-trace`` says
    "Successfully retrieved cached cubin from driver cache, skip compilation"; here, without a driver,
    it says "fail to load driver lib" and ptxas always runs, which is why the tests passed here.)"""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.flags: list[list[str]] = []
        self._real = _cuda.nvrtc()
        read_log = _nvrtc._log
        monkeypatch.setattr(_cuda, "_nvrtc", self)

        def log_of(prog: Any) -> str:
            text = read_log(prog)
            if "--no-cache" in self.flags[-1]:
                return text
            return "\n".join(line for line in text.splitlines() if not is_ptxas_report_line(line))

        monkeypatch.setattr(_nvrtc, "_log", log_of)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def nvrtcCompileProgram(self, prog: Any, n: int, flags: list[bytes]) -> Any:
        self.flags.append([f.decode() for f in flags])
        return self._real.nvrtcCompileProgram(prog, n, flags)


def test_a_warm_driver_cache_cannot_take_the_report_away(monkeypatch) -> None:
    warm = _WarmDriverCache(monkeypatch)
    free = program().resource_usage()["staged"]
    capped = program(max_registers=24).resource_usage()["staged"]
    assert capped.registers <= 24 < free.registers and capped.spill_store_bytes > 0
    assert len(warm.flags) == 2 and all("--no-cache" in flags for flags in warm.flags)
    plain = mc.compile_program(mc.cuda_kernel(SOURCE, "staged.cu"), "sm_90")  # no report asked: cache allowed
    assert "--no-cache" not in warm.flags[-1] and plain.image[:4] == b"\x7fELF"


def test_a_persisted_entry_without_the_report_is_rebuilt(tmp_path) -> None:
    """An entry written while NVRTC answered from the driver's cache (before ptxas_verbose passed
    --no-cache) holds a log without the report: it is a counted miss, rebuilt and rewritten."""
    source = mc.cuda_kernel(SOURCE, "staged.cu")
    options = mc.CompileOptions(ptxas_verbose=True)
    compiler = mc.OfflineCompiler("sm_90", mc.CompilerConfig(cache_directory=str(tmp_path)))
    fresh = mc.compile_program(source, "sm_90", options)
    stale = dataclasses.replace(fresh, log="")
    key = compiler.cache_key(source, options)
    assert PersistentCache(str(tmp_path)).store(key, "sm_90", compiler.nvrtc_version, stale) is None
    assert compiler.compile(source, options).resource_usage() == fresh.resource_usage()
    stats = compiler.cache_stats()
    assert (stats.persistent_hits, stats.persistent_failures, stats.compilations) == (0, 1, 1)
    again = mc.OfflineCompiler("sm_90", mc.CompilerConfig(cache_directory=str(tmp_path)))
    assert again.compile(source, options).resource_usage() == fresh.resource_usage()
    assert again.cache_stats().persistent_hits == 1
    plain = mc.CompileOptions()  # an entry compiled without the report is not asked for one
    PersistentCache(str(tmp_path)).store(compiler.cache_key(source, plain), "sm_90", compiler.nvrtc_version, stale)
    third = mc.OfflineCompiler("sm_90", mc.CompilerConfig(cache_directory=str(tmp_path)))
    third.compile(source, plain)
    assert third.cache_stats().persistent_hits == 1


def test_no_report_is_a_contract_error() -> None:
    plain = mc.compile_program(mc.cuda_kernel(SOURCE, "staged.cu"), "sm_90")
    with pytest.raises(mc.ContractError, match="ptxas_verbose=True"):
        plain.resource_usage()
    ptx = mc.compile_program(mc.cuda_kernel(SOURCE, "staged.cu"), "compute_90", mc.CompileOptions(output="ptx"))
    with pytest.raises(mc.ContractError, match="CUBIN"):
        ptx.resource_usage()
    with pytest.raises(mc.ContractError) as info:
        mc.CompileOptions(ptxas_verbose=True, output="ptx")
    assert info.value.argument == "ptxas_verbose"
    with pytest.raises(mc.ContractError):
        mc.CompileOptions(ptxas_verbose=1)


def test_the_parser_reads_ptxas_12_and_13_lines_and_skips_device_functions() -> None:
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     16 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 2 barriers, 80 bytes cumulative stack size, 2048 bytes smem, 368 bytes cmem[0]
ptxas info    : Compile time = 1.0 ms
ptxas info    : Compiling entry function 'j' for 'sm_80'
ptxas info    : Function properties for j
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 360 bytes cmem[0]
"""
    assert parse_ptxas_report(log) == {
        "k": KernelResources("k", "sm_80", 40, barriers=2, shared_bytes=2048, constant_bytes=368,
                             stack_frame_bytes=16, spill_store_bytes=4, spill_load_bytes=12,
                             cumulative_stack_bytes=80),
        "j": KernelResources("j", "sm_80", 8, constant_bytes=360),
    }
    assert parse_ptxas_report("") == {}


@pytest.mark.parametrize("call", [
    lambda: max_active_blocks_per_sm(None, None, 1024, 0),
    lambda: max_active_blocks_per_sm(None, None, 1024, (32, 0)),
    lambda: max_active_blocks_per_sm(None, None, 1024, True),
    lambda: max_active_blocks_per_sm(None, None, 1024, (32, 32, 2)),     # 2048 threads > the function's 1024
    lambda: max_active_blocks_per_sm(None, None, 1024, 128, -1),
    lambda: max_active_blocks_per_sm(None, None, 1024, 128, 1.5),
    lambda: suggested_block_size(None, None, -4),
    lambda: suggested_block_size(None, None, 0, -1),
    lambda: max_active_clusters(None, None, (2, 0), 128),
    lambda: max_active_clusters(None, None, 2, 128, -1),
])
def test_occupancy_arguments_are_checked_before_the_driver(call) -> None:
    with pytest.raises(mc.LaunchConfigError):
        call()
