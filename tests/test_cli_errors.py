"""Every command's failure is one line naming the flag, exit status 2 (``mircuda.cli.main``)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from mircuda.cli import _build_cutlass, main
from mircuda.cli._errors import cli_message
from mircuda.errors import ContractError


def build_must_not_run(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise AssertionError("the build started although its cache directory is unusable")


@pytest.mark.parametrize("argv, env, message", [
    (["build-cutlass", "--cache-dir", "/proc/x"], None, "--cache-dir: expected a writable directory"),
    (["build-cutlass", "--arch", "90a", "--cache-dir", "/proc/x"], None, "received '/proc/x'"),
    (["build-cutlass"], "/proc/x", "MIRCUDA_CACHE_DIR: expected a writable directory"),
    (["build-cutlass"], "/etc/hostname", "MIRCUDA_CACHE_DIR: expected a writable directory"),
])
def test_build_cutlass_refuses_an_unusable_cache_directory(monkeypatch, capsys, argv, env, message) -> None:
    import mircuda.matmul._build as build

    monkeypatch.setattr(build, "build", build_must_not_run)
    if env is None:
        monkeypatch.delenv("MIRCUDA_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("MIRCUDA_CACHE_DIR", env)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_build_cutlass_makes_its_cache_directory_first(monkeypatch, capsys, tmp_path) -> None:
    import mircuda.matmul._build as build

    calls: list[Path | None] = []
    monkeypatch.setattr(build, "build", lambda archs, jobs, root, families: calls.append(root) or Path("lib.so"))
    assert main(["build-cutlass", "--arch", "90a", "--cache-dir", str(tmp_path / "a" / "b")]) == 0
    assert calls == [tmp_path / "a" / "b"] and (tmp_path / "a" / "b").is_dir()


def test_an_os_error_anywhere_in_a_command_is_one_line(monkeypatch, capsys) -> None:
    def fails(args):  # type: ignore[no-untyped-def]
        raise PermissionError(errno.EACCES, "Permission denied", "/root/x")

    monkeypatch.setattr(_build_cutlass, "cmd_build_cutlass", fails)
    assert main(["build-cutlass"]) == 2
    assert capsys.readouterr().err == "error: PermissionError: Permission denied: '/root/x'\n"


def test_other_exceptions_are_bugs_and_keep_their_traceback(monkeypatch) -> None:
    monkeypatch.setattr(_build_cutlass, "cmd_build_cutlass", lambda args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["build-cutlass"])


def test_the_message_maps_python_names_to_flags() -> None:
    exc = ContractError("include_paths[1]", "an existing directory", "'x'")
    assert cli_message(exc, {"include_paths": "-I"}) == "error: ContractError: -I: expected an existing directory, received 'x'"
    exc = ContractError("arch", "an sm_* target", "'compute_90'", "pass CompileOptions(output='ptx')")
    assert (cli_message(exc, {"arch": "--arch"}, {"CompileOptions(output='ptx')": "--ptx"})
            == "error: ContractError: --arch: expected an sm_* target, received 'compute_90'; pass --ptx")
    unmapped = ContractError("stream", "a Stream", "None")
    assert cli_message(unmapped) == "error: ContractError: argument 'stream': expected a Stream, received None"
