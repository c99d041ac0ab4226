"""Configuring the CUTLASS library's CMake project without CUTLASS or a GPU, for the tests that check which
translation units a family list generates: stand-in CUTLASS headers (empty files where the project
looks for them), the real nvcc, cmake and ninja (the test is skipped without them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.matmul import _build


def needs_build_tools() -> None:
    """Skip the calling test where nvcc, cmake or ninja is missing."""
    try:
        _build._find_nvcc()
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    if not (shutil.which("cmake") and shutil.which("ninja")):
        pytest.skip("cmake or ninja is not installed (pip install 'mircuda[cutlass]')")


def fake_cutlass(tmp_path: Path) -> tuple[Path, Path]:
    """Empty CUTLASS headers (include/ and tools/util/include/) under ``tmp_path``: enough to configure."""
    include, util = tmp_path / "include", tmp_path / "util"
    (include / "cutlass").mkdir(parents=True)
    (util / "cutlass" / "util").mkdir(parents=True)
    (include / "cutlass" / "cutlass.h").write_text("")
    (include / "cutlass" / "version.h").write_text("#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH 0\n")
    (util / "cutlass" / "util" / "packed_stride.hpp").write_text("")
    return include, util


def configure(tmp_path: Path, archs: tuple[str, ...], families: tuple[str, ...] = (),
              raw_archs: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the project's CMake configure into ``tmp_path/build`` for ``archs`` and ``families`` (the command
    line :func:`mircuda.matmul._build.configure_command` makes); ``raw_archs`` replaces the arch list as
    given, bypassing the Python check (to test CMake's own)."""
    include, util = fake_cutlass(tmp_path)
    tc = _build.Toolchain(include, util, "4.2.0", _build._find_nvcc(), "?", Path(shutil.which("cmake") or "cmake"),
                          Path(shutil.which("ninja") or "ninja"))
    cmd = _build.configure_command(tc, tmp_path / "build", archs, families)
    if raw_archs is not None:
        cmd = [c if not c.startswith("-DMIRCUDA_ARCHS=") else f"-DMIRCUDA_ARCHS={raw_archs}" for c in cmd]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)
