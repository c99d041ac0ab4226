"""benchmarks/batched_gemv_knobs.py without a GPU: its help, its refusal of an M the kernel does not take
before the GPU is touched, and its float64 check's verdict."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_script import load_benchmark

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "batched_gemv_knobs.py"


def _module():  # type: ignore[no-untyped-def]
    return load_benchmark("batched_gemv_knobs")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


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


def test_the_float64_check_fails_a_wrong_or_nan_result() -> None:
    module = _module()
    assert module.rows_of_a("1,24,32") == [1, 24, 32]
    assert module.accurate(1.7e-3) and module.accurate(2e-2)
    assert not module.accurate(3e-2) and not module.accurate(math.nan)
