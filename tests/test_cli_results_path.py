"""Every profile command checks ``--json`` (and dense-vector/matmul-profile ``--dtypes``/``--calls``)
before the driver is touched: one line naming the flag, exit 2, on any machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from mircuda.cli import main
from mircuda.cli._errors import check_results_file
from mircuda.errors import ContractError

PROFILES = ["graph-profile", "fp8-profile", "cutlass-check", "dense-vector-profile", "matmul-profile",
            "decoder-layer-profile", "multi-gpu-profile", "fp4-profile"]


@pytest.mark.parametrize("command", PROFILES)
def test_json_in_a_missing_directory_is_refused_first(command: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing" / "x.json"
    assert main([command, "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: ContractError: --json: expected a file path in an existing directory, received "
                   f"{str(target)!r}; {str(target.parent)!r} is not a directory\n")


@pytest.mark.parametrize("command", PROFILES)
def test_json_that_is_a_directory_is_refused_first(command: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--json", str(tmp_path)]) == 2
    # the directory exists: the message says what is wrong with the path itself
    assert capsys.readouterr().err == (f"error: ContractError: --json: expected a file path in an existing directory, "
                                       f"received {str(tmp_path)!r}; it is a directory\n")


@pytest.mark.parametrize("command", ["dense-vector-profile", "matmul-profile"])
@pytest.mark.parametrize("flags, head", [
    (["--dtypes", "garbage"], "--dtypes: expected comma-separated input[->output] pairs"),
    (["--dtypes", "f16->bf16"], "--dtypes: expected comma-separated input[->output] pairs"),
    (["--dtypes", ","], "--dtypes: expected comma-separated input[->output] pairs"),
    # an empty item is refused, not skipped; a pair given twice (bf16 is bf16->bf16) would be measured twice
    (["--dtypes", "bf16,,f16"], "--dtypes: expected comma-separated input[->output] pairs: input bf16 or f16, output "
                                "the input type or f32, without an empty item, received 'bf16,,f16'"),
    (["--dtypes", ",bf16"], "--dtypes: expected comma-separated input[->output] pairs"),
    (["--dtypes", "bf16,bf16->bf16"], "--dtypes: expected comma-separated input[->output] pairs: input bf16 or f16, "
                                      "output the input type or f32, each once, received 'bf16->bf16' again in "
                                      "'bf16,bf16->bf16'"),
    # what the shell leaves of an unquoted bf16->f32
    (["--dtypes", "f16,bf16-"], "--dtypes: expected comma-separated input[->output] pairs: input bf16 or f16, output "
                                "the input type or f32, received 'bf16-' in 'f16,bf16-'; quote the value: the shell "
                                "reads > as a redirection"),
])
def test_dense_profiles_check_their_flags_first(command: str, flags: list[str], head: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, *flags]) == 2
    assert capsys.readouterr().err.startswith(f"error: ContractError: {head}")


def test_the_default_path_may_have_missing_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    default = "benchmarks/results/x.json"
    check_results_file(default, default)  # the command makes benchmarks/results/ when it writes
    assert not (tmp_path / "benchmarks").exists()  # nothing is created by the check
    with pytest.raises(ContractError) as info:
        check_results_file("other/x.json", default)  # a path the user gives: its directory must exist
    assert info.value.argument == "--json"
    (tmp_path / "benchmarks").write_text("")
    with pytest.raises(ContractError) as info:
        check_results_file(default, default)
    assert "is not a directory" in str(info.value)


@pytest.mark.parametrize("command", PROFILES)
def test_help_says_where_results_go(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "relative to the working directory" in out and "benchmarks/results/" in out


@pytest.mark.parametrize("command", [*(c for c in PROFILES if c != "multi-gpu-profile"), "moe-profile", "profile"])
def test_help_says_what_device_means(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE CUDA device ordinal to run on (default 0)" in out
