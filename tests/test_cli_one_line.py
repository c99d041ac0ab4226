"""argparse's value errors in mircuda's one-line form (exit 2, no usage block); NVRTC warnings printed
by the compile command as its own ``warning:`` lines, not through the warnings module's location."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mircuda.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv, head", [
    (["compile", "k.cu", "--arch", "sm_90", "--maxrregcount", "abc"],
     "error: python -m mircuda compile: argument --maxrregcount: expected registers per thread, an integer in "
     "[16, 255], received 'abc'"),
    (["compile", "k.cu", "--arch", "sm_90", "--diag-suppress", "abc"],
     "error: python -m mircuda compile: argument --diag-suppress: expected diagnostic numbers"),
    (["matmul-profile", "--m", "0"], "error: python -m mircuda matmul-profile: argument --m: "),
    (["fp8-profile", "--shapes", "4096"], "error: python -m mircuda fp8-profile: argument --shapes: "),
])
def test_argparse_value_errors_are_one_line(argv: list[str], head: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(head)
    assert err.endswith(f"(see python -m mircuda {argv[0]} --help)\n")
    assert len(err.splitlines()) == 1


def test_help_still_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["compile", "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m mircuda compile")


def test_compile_prints_nvrtc_warnings_as_its_own_lines(tmp_path: Path) -> None:
    src = tmp_path / "w.cu"
    src.write_text('extern "C" __global__ void k(float* p) { int unused; p[0] = 1.0f; }\n')
    done = subprocess.run([sys.executable, "-m", "mircuda", "compile", str(src), "--arch", "sm_90",
                           "-o", str(tmp_path / "w.cubin")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("warning: ") for line in lines)
    assert any("#177-D" in line and "unused" in line for line in lines)
    assert "runpy" not in done.stderr and "CompileWarning" not in done.stderr
