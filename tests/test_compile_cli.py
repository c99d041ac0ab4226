"""``python -m mircuda compile``: offline compilation on the command line (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

KERNEL = '#include "value.cuh"\nextern "C" __global__ void k(int* o) { o[0] = VALUE + EXTRA; }\n'


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mircuda", "compile", *args], capture_output=True, text=True,
                          cwd=cwd)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "include").mkdir()
    (tmp_path / "src" / "k.cu").write_text(KERNEL)
    (tmp_path / "include" / "value.cuh").write_text("#define VALUE 40\n")
    return tmp_path


def test_cubin_for_an_absent_architecture(project) -> None:
    out = run("src/k.cu", "--arch", "sm_120f", "-I", "include", "-D", "EXTRA=2", "-o", "k.cubin", cwd=project)
    assert out.returncode == 0, out.stderr
    image = (project / "k.cubin").read_bytes()
    assert image.startswith(b"\x7fELF")
    assert "CUBIN for sm_120f" in out.stdout and str(project / "src" / "k.cu") in out.stdout


def test_ptx_is_written_as_plain_text(project) -> None:
    out = run("src/k.cu", "--arch", "compute_120f", "--ptx", "--include-path", "include", "--define", "EXTRA=2",
              "--std", "c++20", "-o", "k.ptx", cwd=project)
    assert out.returncode == 0, out.stderr
    text = (project / "k.ptx").read_bytes()
    assert not text.endswith(b"\0") and b".target sm_120f" in text and b", 42;" in text


def test_headers_next_to_the_file_need_no_include_path(project) -> None:
    (project / "src" / "value.cuh").write_text("#define VALUE 1\n")
    out = run("src/k.cu", "--arch", "sm_90a", "-D", "EXTRA", "-o", "k.cubin", cwd=project)
    assert out.returncode == 0, out.stderr


def test_compile_errors_exit_2_with_the_nvrtc_log(project) -> None:
    out = run("src/k.cu", "--arch", "sm_90", "-o", "k.cubin", cwd=project)  # value.cuh is not found
    assert out.returncode == 2 and "CompileError" in out.stderr and 'cannot open source file "value.cuh"' in out.stderr
    assert "Traceback" not in out.stderr and not (project / "k.cubin").exists()


@pytest.mark.parametrize("args, message", [
    (("missing.cu", "--arch", "sm_90", "-o", "x"), "missing.cu"),
    (("src/k.cu", "--arch", "sm_91", "-o", "x"), "arch"),
    (("src/k.cu", "--arch", "sm_90", "-I", "nope", "-o", "x"), "include_paths[0]"),
])
def test_bad_arguments_exit_2_naming_them(project, args, message) -> None:
    out = run(*args, cwd=project)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_arch_and_output_are_required(project) -> None:
    out = run("src/k.cu", cwd=project)
    assert out.returncode == 2 and "--arch" in out.stderr
