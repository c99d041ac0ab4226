"""CLI errors name the flag or environment variable the user set, not the library's parameter names."""

from __future__ import annotations

from pathlib import Path

import pytest

from mircuda.cli import main
from mircuda.errors import ContractError, CutlassNotFound
from mircuda.matmul._build import _cutlass_headers, default_archs


def test_ptxas_verbose_with_ptx_names_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k() {}\n')
    assert main(["compile", str(src), "--arch", "sm_90a", "--ptxas-options=-v", "--ptx",
                 "-o", str(tmp_path / "k.ptx")]) == 2
    assert capsys.readouterr().err == ("error: ContractError: --ptxas-options=-v: expected it left out with --ptx "
                                       "(ptxas runs only for a CUBIN), received both\n")


def test_build_cutlass_bad_arch_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build-cutlass", "--arch", "80"]) == 2
    assert capsys.readouterr().err.startswith("error: ContractError: --arch: expected one of 90a, 120f, received '80'")


def test_bad_cuda_arch_variable_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MIRCUDA_CUDA_ARCH", "garbage")
    with pytest.raises(ContractError) as info:
        default_archs()
    assert info.value.argument == "MIRCUDA_CUDA_ARCH" and info.value.received == "'garbage'"
    assert main(["build-cutlass"]) == 2
    assert capsys.readouterr().err.startswith("error: ContractError: MIRCUDA_CUDA_ARCH: expected one of 90a, 120f, "
                                              "received 'garbage'")


def test_bad_cutlass_include_variable_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MIRCUDA_CUTLASS_INCLUDE", str(tmp_path))
    with pytest.raises(CutlassNotFound) as info:
        _cutlass_headers()
    assert str(info.value).startswith(f"MIRCUDA_CUTLASS_INCLUDE={tmp_path}: {tmp_path} holds no cutlass/version.h")


def test_build_cutlass_help_names_xdg_cache_home(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["build-cutlass", "--help"])
    assert "$XDG_CACHE_HOME/mircuda/cutlass" in " ".join(capsys.readouterr().out.split())


def test_every_option_of_every_command_has_help() -> None:
    import argparse

    from mircuda.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [(command, a.option_strings or a.dest) for command, parser in sub.choices.items()
               for a in parser._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert missing == []
