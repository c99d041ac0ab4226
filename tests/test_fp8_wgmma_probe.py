"""The experimental Hopper FP8 decode kernel (``cuda_src/fp8_wgmma_gemv.cu``; no plan runs it) and its probe
(``benchmarks/fp8_wgmma_probe.py``), without a GPU: NVRTC compiles it for sm_90a, its SASS holds the native
E4M3 warpgroup MMA and never spills, it refuses the targets and rings it cannot run; the probe's variant flags
map to the kernel's macros, and the probe refuses, before the GPU, flags the kernel cannot take. (Its numerics
are checked on the GPU by the probe, against float64.)"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.compile import CompileOptions
from mircuda.matmul._vector import package_source
from tests.benchmark_script import help_options
from tests.test_matmul_fp8_mma import cuobjdump


def source() -> mc.CudaSource:
    return package_source("fp8_wgmma_gemv.cu")


def options(m: int, rows: int, stages: int = 4, **extra: int) -> CompileOptions:
    return CompileOptions(defines={"MIRCUDA_FP8_M": m, "MIRCUDA_FP8_WG_ROWS": rows, "MIRCUDA_FP8_WG_STAGES": stages,
                                   **extra})


@pytest.mark.parametrize("m, rows, sync, swizzle", [(1, 8, 2, 0), (8, 16, 2, 0), (16, 32, 2, 0), (16, 16, 1, 0),
                                                    (5, 32, 0, 0), (12, 16, 2, 0), (1, 8, 2, 1), (16, 32, 2, 1),
                                                    (9, 16, 0, 1), (12, 16, 2, 1)])
def test_the_sass_holds_four_e4m3_warpgroup_mmas_per_stage_and_no_local_memory(tmp_path, m, rows, sync, swizzle) -> None:
    tool, env = cuobjdump()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(mc.compile_program(source(), "sm_90a", options(m, rows, MIRCUDA_FP8_WG_SYNC=sync,
                                                                     MIRCUDA_FP8_WG_SWIZZLE=swizzle)).image)
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    sass = out.stdout
    # one 128-K stage = four 32-K slices, each a native FP8 warpgroup MMA (no F2FP decode, no HMMA)
    assert len(re.findall(rf"QGMMA\.64x{rows}x32\.F32\.E4M3\.E4M3", sass)) == 4
    assert "F2FP.F16.E4M3" not in sass and "HMMA" not in sass
    assert not re.search(r"\b(?:STL|LDL)\b", sass), "the kernel spills to local memory"
    assert "LDGSTS" in sass  # the cp.async ring
    assert ("SYNCS.PHASECHK" in sass) is (sync == 2)  # the mbarrier wait, or the block barrier
    assert ("MEMBAR" in sass) is (sync == 0)  # fence.proxy.async


def test_plain_sm_90_is_refused_by_name() -> None:
    # wgmma needs the architecture-specific target; the kernel says so instead of failing in ptxas
    with pytest.raises(mc.CompileError, match="needs sm_90a"):
        mc.compile_program(source(), "sm_90", options(1, 16))


@pytest.mark.parametrize("defines, message", [
    ({"MIRCUDA_FP8_M": 17, "MIRCUDA_FP8_WG_ROWS": 16}, "MIRCUDA_FP8_M must be in 1..16"),
    ({"MIRCUDA_FP8_M": 1, "MIRCUDA_FP8_WG_ROWS": 64}, "MIRCUDA_FP8_WG_ROWS must be 8, 16 or 32"),
    ({"MIRCUDA_FP8_M": 1, "MIRCUDA_FP8_WG_ROWS": 32, "MIRCUDA_FP8_WG_STAGES": 8}, "at most 48 KiB"),
    ({"MIRCUDA_FP8_M": 1, "MIRCUDA_FP8_WG_ROWS": 32, "MIRCUDA_FP8_WG_STAGES": 8, "MIRCUDA_FP8_WG_SWIZZLE": 1},
     "at most 48 KiB"),
])
def test_configurations_it_cannot_hold_are_refused_at_compile_time(defines, message) -> None:
    with pytest.raises(mc.CompileError, match=re.escape(message)):
        mc.compile_program(source(), "sm_90a", CompileOptions(defines=defines))


def test_the_probe_maps_its_variant_fields_to_the_kernel_macros() -> None:
    from benchmarks.fp8_wgmma_probe import defines_of, variants

    assert variants("Y2:L1:R0,Y0,W0") == ["Y2:L1:R0", "Y0", "W0"]
    assert defines_of("W1") == {"MIRCUDA_FP8_WG_SWIZZLE": 1}
    assert defines_of("Y2:L0:R1") == {"MIRCUDA_FP8_WG_SYNC": 2, "MIRCUDA_FP8_WG_ACT_L1": 0, "MIRCUDA_FP8_WG_ROTATE": 1}
    for bad in ("Q1", "Y", "Y2:", "Y2:Lx", "Y²"):  # Y² passed isdigit(), then int() raised a bare ValueError
        with pytest.raises(argparse.ArgumentTypeError, match="expected fields"):
            variants(bad)


PROBE = Path(__file__).resolve().parent.parent / "benchmarks" / "fp8_wgmma_probe.py"


@pytest.mark.parametrize("args, said", [
    (("--m", "17"), "argument --m: expected M values in 1..16"),
    (("--m", "0"), "argument --m: expected M values in 1..16"),
    (("--m", "4,4"), "argument --m: expected each value once"),
    (("--rows", "64"), "argument --rows: expected weight rows of 8, 16 or 32"),
    (("--stages", "1"), "argument --stages: expected stage counts in 2..15"),
    (("--stages", "16"), "argument --stages: expected stage counts in 2..15"),
    (("--stages", "8", "--rows", "32"), "argument --stages: expected a ring of at most 48 KiB at some --rows (32)"),
    (("--variants", "Y3"), "argument --variants: expected each of Y (0, 1, 2), L (0, 1), R (0, 1), W (0, 1) at most"),
    (("--variants", "W2"), "argument --variants: expected each of Y (0, 1, 2), L (0, 1), R (0, 1), W (0, 1) at most"),
    (("--variants", "Y2,Y2:L1:R0:W1"), "argument --variants: expected each variant once"),
    (("--variants", "Y2:Y0"), "argument --variants: expected each of Y"),
    (("--variants", "Y2,Y2:L1:R0"), "argument --variants: expected each variant once"),
    (("--m", "1_6"), "argument --m: expected comma-separated integers, received '1_6'"),  # int() took it as 16
    (("--stages", "0_4"), "argument --stages: expected comma-separated integers"),  # int() took it as 4
    # these three ran the whole GPU sweep, then failed to write its results with a traceback
    (("--json", ""), "argument '--json': expected a file path in an existing directory, received ''"),
    (("--json", "/nonexistent-dir/probe.json"), "'/nonexistent-dir' is not a directory"),
    (("--json", "/"), "argument '--json': expected a file path, received '/'; it names a directory"),
])
def test_a_flag_the_kernel_cannot_take_is_refused_before_the_gpu(args, said) -> None:
    # without the checks each reached the driver (or NVRTC's static_assert on the GPU machine), or, for Y3, L2 or a
    # repeated value, timed a kernel under a label it is not
    out = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and said in out.stderr, out.stderr[-300:]
    assert "Traceback" not in out.stderr


def test_help_gives_each_options_meaning_values_and_default() -> None:
    out = subprocess.run([sys.executable, str(PROBE), "--help"], capture_output=True, text=True, timeout=120)
    options = help_options(out.stdout)
    assert list(options) == ["--m", "--rows", "--stages", "--variants", "--json"]
    # --m, --rows, --stages and --json gave no default, --json no help at all, --variants no field's values
    assert not [flag for flag, text in options.items() if "(default: " not in text]
    assert "each in 1..16 (default: 1,2,4,8,16)" in options["--m"] and "(default: 4,6,8;" in options["--stages"]
    for field in ("Y (MIRCUDA_FP8_WG_SYNC", "L (MIRCUDA_FP8_WG_ACT_L1", "R (MIRCUDA_FP8_WG_ROTATE",
                  "W (MIRCUDA_FP8_WG_SWIZZLE", "2 an mbarrier per stage", "128-byte swizzle, 1"):
        assert field in options["--variants"], field


def test_the_probes_ring_is_the_kernels() -> None:
    # the probe skips and refuses the rings the kernel's static_assert refuses: the deepest ring it allows compiles,
    # one stage more does not
    from benchmarks.fp8_wgmma_probe import MAX_STAGES, SHARED_LIMIT, ring_bytes, stage_counts, weight_rows

    assert ring_bytes(8, MAX_STAGES, 0) <= SHARED_LIMIT < ring_bytes(8, MAX_STAGES + 1, 0)
    for swizzle in (0, 1):
        for rows in (8, 32):
            deepest = max(s for s in range(2, 64) if ring_bytes(rows, s, swizzle) <= SHARED_LIMIT)
            mc.compile_program(source(), "sm_90a", options(1, rows, deepest, MIRCUDA_FP8_WG_SWIZZLE=swizzle))
            with pytest.raises(mc.CompileError, match="at most 48 KiB"):
                mc.compile_program(source(), "sm_90a", options(1, rows, deepest + 1, MIRCUDA_FP8_WG_SWIZZLE=swizzle))
    assert stage_counts(f"2,{MAX_STAGES}") == [2, MAX_STAGES] and weight_rows("32,8") == [32, 8]


def test_the_probes_correctness_pass_reaches_the_untimed_corners() -> None:
    # rows past N at every block size, a ring longer than K (fewer K-blocks than its four stages: barriers armed and
    # never awaited), an M between the 8- and 16-row activation tiles; K a multiple of 16, as the kernel requires
    from benchmarks.fp8_wgmma_probe import ODD, ODD_M

    assert all(k % 16 == 0 for _, k in ODD)
    assert any(n % 8 for n, _ in ODD) and any(n % 32 for n, _ in ODD) and any(k % 128 for _, k in ODD)
    assert any(-(-k // 128) < 4 for _, k in ODD) and any(9 <= m <= 15 for m in ODD_M) and {1, 16} <= set(ODD_M)
