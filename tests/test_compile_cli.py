"""``python -m mircuda compile``: offline compilation on the command line (no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNEL = '#include "value.cuh"\nextern "C" __global__ void k(int* o) { o[0] = VALUE + EXTRA; }\n'


ROOT = Path(__file__).resolve().parents[1]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: it imports this checkout's mircuda, whatever its cwd."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mircuda", "compile", *args], capture_output=True, text=True,
                          cwd=cwd, env=cli_env())


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
    (("src/k.cu", "--arch", "sm_91", "-o", "x"), "--arch: expected"),
    (("src/k.cu", "--arch", "sm_90", "-I", "nope", "-o", "x"), "-I/--include-path: expected an existing directory"),
    (("src/k.cu", "--arch", "sm_90", "-D", "1x", "-o", "x"), "-D/--define: expected"),
    (("src/k.cu", "--arch", "sm_90", "--std", "c++99", "-o", "x"), "--std: expected"),
    (("src/k.cu", "--arch", "compute_90", "-o", "x"), "compute_* targets produce PTX only: pass --ptx"),
])
def test_bad_arguments_exit_2_naming_them(project, args, message) -> None:
    out = run(*args, cwd=project)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_arch_and_output_are_required(project) -> None:
    out = run("src/k.cu", cwd=project)
    assert out.returncode == 2 and "--arch" in out.stderr


def test_cli_messages_speak_of_flags_not_python_names(project) -> None:
    out = run("src/k.cu", "--arch", "compute_90", "-I", "include", "-o", "k.cubin", cwd=project)
    assert out.returncode == 2 and "CompileOptions" not in out.stderr and "include_paths" not in out.stderr
    assert out.stderr.count("\n") == 1 and "--arch" in out.stderr and "--ptx" in out.stderr


@pytest.mark.parametrize("target, reason", [
    ("/dev/full", "No space left on device"),        # opens, but the write fails: after compiling
    ("nodir/k.cubin", "is not a directory"),          # checked before compiling
    ("/proc/no/such/k.cubin", "is not a directory"),
])
def test_an_unwritable_output_is_one_line_exit_2(project, target, reason) -> None:
    out = run("src/k.cu", "--arch", "sm_90a", "-I", "include", "-D", "EXTRA", "-o", target, cwd=project)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: ContractError: -o: expected") and reason in out.stderr


def test_a_read_only_directory_is_refused_before_compiling(project) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may write into a read-only directory")
    locked = project / "locked"
    locked.mkdir(mode=0o500)
    try:
        out = run("src/k.cu", "--arch", "sm_90a", "-o", "locked/k.cubin", cwd=project)  # value.cuh is missing:
        # a compile would fail with CompileError; the path is checked first
        assert out.returncode == 2 and "-o: expected a file path in a writable directory" in out.stderr
        assert "CompileError" not in out.stderr and "Traceback" not in out.stderr
    finally:
        locked.chmod(0o700)


def test_mircuda_debug_adds_the_traceback(project) -> None:
    env = cli_env(MIRCUDA_DEBUG="1")
    out = subprocess.run([sys.executable, "-m", "mircuda", "compile", "src/k.cu", "--arch", "sm_90a", "-I", "include",
                          "-D", "EXTRA", "-o", "/dev/full"], capture_output=True, text=True, cwd=project, env=env)
    assert out.returncode == 2 and "Traceback" in out.stderr and "error: ContractError: -o" in out.stderr


def test_the_readme_offline_snippet_runs_as_written(project, monkeypatch) -> None:
    """The README's OfflineCompiler lines, executed as written: GEMV includes a header from include/."""
    import mircuda as mc

    readme = (ROOT / "README.md").read_text().splitlines()
    lines = [line for line in readme if line.startswith(("offline = mc.OfflineCompiler(", "cubin = offline."))]
    assert len(lines) == 2, lines
    monkeypatch.chdir(project)  # the README's include root "include" is relative to the working directory
    namespace = {"mc": mc, "GEMV": mc.cuda_kernel(KERNEL.replace("VALUE + EXTRA", "VALUE"), "gemv.cu")}
    exec("\n".join(lines), namespace)
    assert namespace["cubin"].startswith(b"\x7fELF")
