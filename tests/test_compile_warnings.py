"""NVRTC warnings are attributed to the user's call, not to mircuda's own lines (issue 12, item 5)."""

from __future__ import annotations

import inspect
import sys
import warnings

import pytest

import mircuda as mc
from mircuda import _caller

WARNS = mc.cuda_kernel('extern "C" __global__ void k(int* o) { int unused; o[0] = 1; }', "warn.cu")
FLAGS = mc.CompileOptions(extra_flags=("--ftz=true", "--ftz=false"))  # NVRTC warns: the last one wins


def line_after() -> int:
    """The line number following the caller's current line."""
    return inspect.currentframe().f_back.f_lineno + 1  # type: ignore[union-attr]


@pytest.fixture(params=["native", "frame walk"])
def mode(request, monkeypatch) -> str:
    if request.param == "native" and sys.version_info < (3, 12):
        pytest.skip("skip_file_prefixes needs Python 3.12")
    if request.param == "frame walk":
        monkeypatch.setattr(_caller.sys, "version_info", (3, 11))
    return request.param


def only_warning(caught: list[warnings.WarningMessage]) -> warnings.WarningMessage:
    found = [w for w in caught if issubclass(w.category, mc.CompileWarning)]
    assert len(found) == 1, [str(w.message) for w in caught]
    return found[0]


def test_compile_program_warns_at_the_callers_line(mode) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = line_after()
        mc.compile_program(WARNS, "sm_90", FLAGS)
    w = only_warning(caught)
    assert "warn.cu" in str(w.message)
    assert (w.filename, w.lineno) == (__file__, line)


def test_a_compiler_warns_at_the_callers_line(mode) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiler = mc.OfflineCompiler("sm_90")
        line = line_after()
        compiler.compile(WARNS, FLAGS)
    w = only_warning(caught)
    assert (w.filename, w.lineno) == (__file__, line)


def test_the_package_directory_is_the_prefix_of_mircudas_files() -> None:
    assert mc.compile_program.__code__.co_filename.startswith(_caller.PACKAGE_DIR)
    assert not __file__.startswith(_caller.PACKAGE_DIR)
