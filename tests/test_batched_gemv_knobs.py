"""benchmarks/batched_gemv_knobs.py without a GPU: its help, its refusal, before the GPU is touched, of an M the
kernel does not take, of a bad or repeated --m, --shapes or --warps value, of a --json it could not write and of a
shape on which no configuration would be timed, and its float64 check's verdict."""

from __future__ import annotations

import math
import subprocess

import pytest
from benchmark_script import help_options, load_benchmark, run_benchmark


def _module():  # type: ignore[no-untyped-def]
    return load_benchmark("batched_gemv_knobs")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("batched_gemv_knobs", *args)


def test_help_says_what_it_measures_and_what_m_it_takes() -> None:
    out = _run("--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "each configuration checked against float64 first" in text and "Needs a GPU" in text
    assert "each in 1..32" in text


@pytest.mark.parametrize("m", ["48", "0", "16,33", "x"])
def test_an_m_the_kernel_does_not_take_is_refused_before_the_gpu(m) -> None:
    out = _run("--m", m)  # without the check this reached the driver (a traceback here, no GPU)
    assert out.returncode == 2 and "argument --m" in out.stderr and repr(m) in out.stderr
    assert "Traceback" not in out.stderr


def test_help_gives_each_options_default() -> None:
    options = help_options(_run("--help").stdout)
    assert list(options) == ["--m", "--shapes", "--warps", "--json"]
    assert not [flag for flag, text in options.items() if "(default: " not in text]
    # --shapes named "the four of matmul-profile" without listing them, nor said what a shape must be
    assert "(default: 4096x4096,14336x4096,4096x14336,6144x4096, the four of matmul-profile)" in options["--shapes"]
    assert "each K a multiple of 8 and at least 64 x the fewest --warps" in options["--shapes"]


def test_the_float64_check_fails_a_wrong_or_nan_result() -> None:
    module = _module()
    assert module.rows_of_a("1,24,32") == [1, 24, 32]
    assert module.accurate(1.7e-3) and module.accurate(2e-2)
    assert not module.accurate(3e-2) and not module.accurate(math.nan)


@pytest.mark.parametrize("flag, value, said", [
    ("--shapes", "4096", "expected comma-separated NxK shapes"),
    ("--shapes", "4096x4100", "K a positive multiple of 8"),
    ("--shapes", "4096x4096,4096x4096", "expected each value once"),  # was timed and recorded twice
    ("--shapes", "4096x96", "expected each K >= 128"),  # was no configuration at all (default warps 2, 4, 8)
    ("--warps", "3", "expected warps of 1, 2, 4 or 8"),
    ("--warps", "2,2", "expected each value once"),
    ("--m", "8,8", "expected each value once"),
    ("--m", "1_6", "expected comma-separated integers"),  # int() took it as 16
    ("--warps", "0_8", "expected comma-separated integers"),  # int() took it as 8
    ("--shapes", "4_096x4096", "expected comma-separated NxK shapes"),  # int() took it as 4096
    ("--shapes", "3000000000x4096", "expected N in 1..2147418111"),  # reached the driver: N is an int on the GPU
    ("--shapes", "4096x2147483648", "K a positive multiple of 8 below 2147418112"),
    ("--json", "", "expected a file path in an existing directory"),  # these failed after the whole GPU run
    ("--json", "/nonexistent-dir/knobs.json", "'/nonexistent-dir' is not a directory"),
    ("--json", "/", "expected a file path, received '/'; it names a directory"),
])
def test_a_bad_or_repeated_shape_warp_count_or_m_is_refused_before_the_gpu(flag, value, said) -> None:
    out = _run(flag, value)
    assert out.returncode == 2 and flag in out.stderr.splitlines()[-1] and said in out.stderr, out.stderr[-300:]
    assert "Traceback" not in out.stderr


def test_a_shape_is_refused_only_where_no_configuration_of_the_warps_would_be_timed() -> None:
    module = _module()
    assert module.runs(64, 1, 1) and not module.runs(63, 1, 1) and not module.runs(256, 2, 4)
    assert module.untimed([(8, 64), (16, 56), (32, 4096)], [1, 8]) == ["16x56"]
    assert module.untimed([(8, 64)], [2, 4]) == ["8x64"]
    assert module.shapes_of("28672x4096,8x8") == [(28672, 4096), (8, 8)] and module.warps_of("8,1") == [8, 1]
