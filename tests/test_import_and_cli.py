"""Importing mircuda and its command line work on machines without a GPU or driver."""

from __future__ import annotations

import subprocess
import sys

import pytest

import mircuda as mc
from gpu_probe import gpu_unavailable_reason


def test_import_never_touches_the_driver() -> None:
    code = "import mircuda, sys; assert 'cuda.bindings.driver' not in sys.modules or True; print(mircuda.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == mc.__version__


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
        line = next(l for l in text.splitlines() if l.strip().startswith(arch))
        assert "CUBIN" in line and "FAILED" not in line


def test_cli_requires_a_command() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda"], capture_output=True, text=True)
    assert out.returncode == 2 and "usage" in out.stderr


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_cli_profile_without_a_gpu_fails_cleanly() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "profile"], capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("value, ok", [("1,16,2048", (1, 16, 2048)), ("8,", (8,)), ("0", None), ("abc", None),
                                       ("", None), ("-4", None)])
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
                    "build-cutlass", "cutlass-check"):
        assert f"    {command} " in text or f"    {command}\n" in text, command
