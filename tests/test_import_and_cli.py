"""Importing mircuda and its command line work on machines without a GPU or driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mircuda as mc
from gpu_probe import gpu_unavailable_reason


FORBIDDEN_AT_IMPORT = ("cuda", "numba", "llvmlite")
"""Top-level packages ``import mircuda`` must not load: the driver bindings (cuda-python: cuda.bindings,
cuda.core, ...), Numba and its LLVM binding. They load on first use (Driver.initialize, numba_ext)."""
PROBE = f"import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_AT_IMPORT!r})))"


@pytest.mark.parametrize("statement", ["import mircuda", "import mircuda.matmul, mircuda.graph, mircuda.compile"])
def test_import_never_touches_the_driver_nor_loads_numba(statement) -> None:
    code = f"{statement}; {PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_import_check_sees_what_numba_ext_loads() -> None:
    # The probe above is not vacuous: importing mircuda.numba_ext (which needs numba) shows up in it.
    code = f"import mircuda.numba_ext; {PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "numba" in json.loads(out.stdout)


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_gpu_tests_fail_instead_of_skipping_when_a_gpu_is_required() -> None:
    node = "tests/gpu/test_runtime.py"
    env = {k: v for k, v in os.environ.items() if k != "MIRCUDA_REQUIRE_GPU"}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", node]
    root = Path(__file__).resolve().parents[1]
    skipped = subprocess.run(args, capture_output=True, text=True, env=env, cwd=root)
    assert skipped.returncode == 0 and "passed" not in skipped.stdout and "skipped" in skipped.stdout, skipped.stdout
    failed = subprocess.run(args, capture_output=True, text=True, env={**env, "MIRCUDA_REQUIRE_GPU": "1"}, cwd=root)
    assert failed.returncode == 1 and "MIRCUDA_REQUIRE_GPU=1 but no usable CUDA driver" in failed.stdout, failed.stdout
    assert "skipped" not in failed.stdout


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_driver_initialize_without_a_driver_says_so() -> None:
    with pytest.raises((mc.UnsupportedPlatform, mc.CudaError)) as info:
        mc.Driver.initialize()
    assert isinstance(info.value, mc.MircudaError)


def test_every_error_is_a_mircuda_error() -> None:
    for cls in (mc.UnsupportedPlatform, mc.CudaError, mc.NvrtcError, mc.CompileError, mc.ContractError,
                mc.LaunchConfigError, mc.UseAfterFree, mc.ClosedResourceError, mc.CaptureError,
                mc.GraphStreamError):
        assert issubclass(cls, mc.MircudaError)
    err = mc.CudaError(2, "CUDA_ERROR_OUT_OF_MEMORY", "cuMemAllocFromPoolAsync")
    assert "CUDA_ERROR_OUT_OF_MEMORY" in str(err) and err.call == "cuMemAllocFromPoolAsync"
    c = mc.ContractError("n", "an integer", "float 1.5")
    assert c.argument == "n" and "expected an integer, received float 1.5" in str(c)


def test_cli_inspect_compiles_for_hopper_and_blackwell() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "inspect"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "NVRTC" in text and "CUDA driver:" in text
    for arch in ("sm_90a", "sm_120f"):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(arch))
        assert "CUBIN" in line and "FAILED" not in line


def test_cli_requires_a_command() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["error: python -m mircuda: the following arguments are required: command "
                                       "(see python -m mircuda --help)"]


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_cli_profile_without_a_gpu_fails_cleanly() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "profile"], capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("value, ok", [("1,16,2048", (1, 16, 2048)), (" 8, 16", (8, 16)), ("8,", None),
                                       ("1,,2", None), (",1", None), ("0", None), ("abc", None), ("", None),
                                       ("-4", None)])
def test_matmul_profile_m_values_are_positive_ints(value, ok) -> None:
    import argparse

    from mircuda.cli._matmul_profile import m_values

    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError, match="positive int"):
            m_values(value)
    else:
        assert m_values(value) == ok


def test_the_library_never_imports_the_command_line() -> None:
    code = ("import sys, mircuda, mircuda.timing, mircuda.compile, mircuda.graph, mircuda.matmul\n"
            "import mircuda.numba_ext\n"
            "print(sorted(m for m in sys.modules if m.startswith('mircuda.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_console_script_lists_every_command(capsys) -> None:
    from mircuda.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for command in ("inspect", "profile", "graph-profile", "compile", "dense-vector-profile", "matmul-profile",
                    "decoder-layer-profile", "fp8-profile", "fp4-profile", "moe-profile", "multi-gpu-profile",
                    "build-cutlass", "cutlass-check"):
        assert f"    {command} " in text or f"    {command}\n" in text, command



def test_the_top_level_help_is_plain_text_and_version_answers(capsys) -> None:
    """``--help`` printed the docstring's reST quotes (````python -m mircuda````); ``--version`` was refused as a
    missing command."""
    from mircuda.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and "python -m mircuda: inspect the machine" in " ".join(text.split())
    out = subprocess.run([sys.executable, "-m", "mircuda", "--version"], capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"mircuda {mc.__version__}\n", "")


WRONG_AXPBY = r"""
extern "C" __global__ void axpby(float* __restrict__ y, const float* __restrict__ x, float a, float b,
                                 unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == n / 2) y[i] = a * x[i] + b * y[i] + 1.0f;  // one wrong element
    else if (i < n) y[i] = a * x[i] + b * y[i];
}
"""


@pytest.mark.gpu
def test_cli_profile_exits_1_on_a_wrong_value() -> None:
    """``python -m mircuda profile`` checks its own results: a kernel with one wrong element (swapped in
    for the sample through the module attribute, in a subprocess) makes it print FAILED and exit 1."""
    code = ("import sys, mircuda.cli as cli, mircuda.cli._profile as p; p.SAMPLE_SOURCE = sys.argv[1]; "
            "sys.exit(cli.main(['profile', '--elements', '4099', '--launches', '2', '--batches', '2']))")
    out = subprocess.run([sys.executable, "-c", code, WRONG_AXPBY], capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED: axpby relative error" in out.stderr and "profile: FAILED" in out.stdout
    ok = subprocess.run([sys.executable, "-m", "mircuda", "profile", "--elements", "4099", "--launches", "2",
                         "--batches", "2"], capture_output=True, text=True)
    assert ok.returncode == 0 and "profile: all checks passed" in ok.stdout, ok.stdout + ok.stderr
