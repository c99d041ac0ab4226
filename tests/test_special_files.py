"""Non-regular files (a FIFO here; sockets and devices take the same path) are refused by name, never
opened in a way that blocks; a library that is not libmircuda_cutlass.so is refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.compile._includes import scan_dependencies
from mircuda.errors import ContractError, CutlassNotFound
from mircuda.matmul import load_library

ROOT = Path(__file__).resolve().parents[1]
fifo_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no mkfifo on this platform")


@fifo_only
def test_fifo_source_file_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.cu"
    os.mkfifo(fifo)
    with pytest.raises(ContractError) as info:
        mc.cuda_kernel_file(fifo)
    assert info.value.argument == "path"
    assert "a FIFO, not a regular file" in str(info.value)
    assert "regular" in info.value.expected


@fifo_only
def test_fifo_header_is_listed_as_special_and_refused_by_the_compiler(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "h.cuh")
    text = '#include "h.cuh"\nextern "C" __global__ void k() {}\n'
    deps = scan_dependencies(text, str(tmp_path / "k.cu"), (str(tmp_path),))
    assert deps.special == (str(tmp_path / "h.cuh"),)
    assert deps.files == ()
    (tmp_path / "k.cu").write_text(text)
    source = mc.cuda_kernel_file(tmp_path / "k.cu")
    with pytest.raises(ContractError) as info:
        mc.OfflineCompiler("sm_90").compile(source)
    assert info.value.argument == "source"
    assert str(tmp_path / "h.cuh") in info.value.received


def test_regular_header_is_not_special(tmp_path: Path) -> None:
    (tmp_path / "h.cuh").write_text("#define X 1\n")
    deps = scan_dependencies('#include "h.cuh"\n', str(tmp_path / "k.cu"), (str(tmp_path),))
    assert deps.special == ()
    assert deps.files == (str(tmp_path / "h.cuh"),)


@fifo_only
def test_cli_compile_of_a_fifo_exits_2_with_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.cu"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "mircuda", "compile", str(fifo), "--arch", "sm_90",
                           "-o", str(tmp_path / "x.cubin")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "FILE" in lines[0] and "a FIFO, not a regular file" in lines[0]


@pytest.mark.parametrize("path", [123, "a\x00b", b"/x.so", ""])
def test_load_library_refuses_bad_path_values(path: object) -> None:
    with pytest.raises(ContractError) as info:
        load_library(path)  # type: ignore[arg-type]
    assert info.value.argument == "path"
    assert info.value.received == repr(path)


def _some_other_library() -> str:
    import ctypes.util
    name = ctypes.util.find_library("z") or ctypes.util.find_library("m")
    if name is None:
        pytest.skip("no libz or libm to stand for a wrong library")
    return name


def test_load_library_refuses_a_library_without_the_entry_points() -> None:
    other = _some_other_library()
    with pytest.raises(CutlassNotFound) as info:
        load_library(other)
    message = str(info.value)
    assert message.startswith("argument 'path': expected a libmircuda_cutlass.so")
    assert "no mircuda_cutlass_abi_version" in message


def test_env_library_without_the_entry_points_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    other = _some_other_library()
    if not os.path.isabs(other):  # find_library gives a soname; the variable needs a file
        import ctypes
        lib = ctypes.CDLL(other)
        del lib
        candidates = [p for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64",
                                  "/usr/lib/aarch64-linux-gnu") if os.path.isfile(p := os.path.join(d, other))]
        if not candidates:
            pytest.skip(f"no file path for {other}")
        other = candidates[0]
    monkeypatch.setenv("MIRCUDA_CUTLASS_LIBRARY", other)
    with pytest.raises(CutlassNotFound) as info:
        load_library()
    assert str(info.value).startswith("MIRCUDA_CUTLASS_LIBRARY: expected a libmircuda_cutlass.so")
