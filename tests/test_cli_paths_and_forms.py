"""Paths and values a fresh user typed that the command line took as something else, checked when they are read:
an output path ending in '/' (it passed the early check and the results were lost when they were written), white
space around a path (an invisible file or directory in the working directory), '-' for a profile's --json, a
timeout past what the standard library waits, a flag's value that starts with '-', and a host allocation too
large for the machine (a traceback). Each is one line naming the flag, exit status 2, nothing created."""

from __future__ import annotations

from pathlib import Path

import pytest

import mircuda as mc
from cli_refusal import refusal
from mircuda.cli import _parser, main


PROFILES = ["profile", "graph-profile", "dense-vector-profile", "matmul-profile", "decoder-layer-profile",
            "fp8-profile", "fp4-profile", "moe-profile"]


@pytest.mark.parametrize("command", PROFILES)
@pytest.mark.parametrize("name, said", [
    ("out/", "expected a file path, received '{path}'; it names a directory"),
    (" ", "expected a file path without white space around it, received '{path}'"),
    ("r.json ", "expected a file path without white space around it, received '{path}'"),
])
def test_a_results_path_that_cannot_be_a_new_file_is_refused_first(command: str, name: str, said: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, no_driver: None,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--json out/`` passed the check (``abspath`` drops the '/'); the writer then made ``out/`` and failed with
    IsADirectoryError after the whole run, or graph-profile wrote a file named ``out``."""
    monkeypatch.chdir(tmp_path)
    assert main([command, "--json", name]) == 2
    assert capsys.readouterr().err == f"error: ContractError: --json: {said.format(path=name)}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", PROFILES)
def test_a_profile_refuses_a_dash_for_json(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           no_driver: None, capsys: pytest.CaptureFixture[str]) -> None:
    """``compile -o -`` writes to standard output; a profile took ``--json -`` as a file named '-'."""
    monkeypatch.chdir(tmp_path)
    assert main([command, "--json", "-"]) == 2
    assert capsys.readouterr().err == ("error: ContractError: --json: expected a file path, received '-'; the table is "
                                       "printed on standard output already\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out", ["newdir/", " ", "k.cubin "])
def test_compile_refuses_an_output_that_cannot_be_a_new_file_before_compiling(out: str, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``-o newdir/`` compiled, then failed to write 'Is a directory'; ``-o ' '`` wrote a file named ' '."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    assert main(["compile", "k.cu", "--arch", "sm_90", "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ContractError: -o: expected a file path") and repr(out) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.cu"]


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build-cutlass that got past its checks fails the test instead of building."""
    import mircuda.matmul._build as build

    monkeypatch.setattr(build, "build", lambda *a, **k: pytest.fail("the build started"))


@pytest.mark.parametrize("value, expected", [
    (" ", "a directory path (leave the flag out for the default cache)"),
    (" cache", "a directory path without white space around it"),
    ("cache ", "a directory path without white space around it"),
    ("~/cache", "a directory path the shell expanded (~ is not expanded after '='; write --cache-dir ~/...)"),
])
def test_build_cutlass_refuses_white_space_around_the_cache_dir_or_a_literal_tilde(
        value: str, expected: str, no_build: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--cache-dir ' '`` made a directory named ' ' in the working directory ('' was already refused), and
    ``--cache-dir=~/c`` a directory named '~'."""
    monkeypatch.chdir(tmp_path)
    err = refusal(["build-cutlass", f"--cache-dir={value}"], capsys)
    assert err.startswith(f"error: python -m mircuda build-cutlass: argument --cache-dir: expected {expected}, "
                          f"received {value!r}"), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("variable, value", [("MIRCUDA_CACHE_DIR", " "), ("MIRCUDA_CACHE_DIR", "c "),
                                             ("MIRCUDA_CACHE_DIR", "~/c"), ("XDG_CACHE_HOME", "xc "),
                                             ("XDG_CACHE_HOME", "~")])
def test_build_cutlass_refuses_a_cache_variable_with_white_space_or_a_literal_tilde(
        variable: str, value: str, no_build: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``XDG_CACHE_HOME='xc '`` made ``'xc '/mircuda/cutlass``; the message names the variable and its value."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MIRCUDA_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, value)
    assert main(["build-cutlass", "--arch", "90a"]) == 2
    assert capsys.readouterr().err == (f"error: ContractError: {variable}: expected a directory path without white "
                                       f"space around it or a leading ~, received {value!r}\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("inside", [False, True])
def test_build_cutlass_says_a_file_is_where_the_cache_directory_goes(inside: bool, no_build: None, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The message ended in errno's text ('File exists', or 'Not a directory' for a file on the way)."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    target = blocker / "sub" if inside else blocker
    assert main(["build-cutlass", "--arch", "90a", "--cache-dir", str(target)]) == 2
    assert capsys.readouterr().err == (f"error: ContractError: --cache-dir: expected a writable directory (or a path "
                                       f"where one can be made), received {str(target)!r}; {str(blocker)!r} is a "
                                       f"file, not a directory\n")


@pytest.mark.parametrize("value", [" 5", "1_0", "1e3", "inf", "86401", "10000000000"])
def test_the_torch_timeout_is_plain_seconds_up_to_a_day(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--torch-timeout 1e10`` parsed, then ``queue.get`` raised OverflowError at once and the torch rows were
    dropped as if torch had given no result in 10**10 s; ``' 5'`` and ``1_0`` passed where counts refuse them."""
    err = refusal(["multi-gpu-profile", "--torch-timeout", value], capsys)
    assert ("argument --torch-timeout: expected a number of seconds above 0 and up to 86400 (a day), such as 240 or "
            f"0.5, received {value!r}") in err


def test_the_torch_timeout_takes_a_day_and_fractions() -> None:
    for value, seconds in (("86400", 86400.0), ("0.5", 0.5), (".5", 0.5), ("240", 240.0)):
        assert _parser().parse_args(["multi-gpu-profile", "--torch-timeout", value]).torch_timeout == seconds


@pytest.mark.parametrize("argv, flag", [
    (["compile", "k.cu", "--arch", "sm_90", "--ptxas-options", "-v", "-o", "k.cubin"], "--ptxas-options"),
    (["matmul-profile", "--dtypes", "->f32"], "--dtypes"),
])
def test_a_value_that_starts_with_a_dash_is_shown_the_equals_form(argv: list[str], flag: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The help showed ``--ptxas-options -v``, which argparse refuses with only 'expected one argument'."""
    err = refusal(argv, capsys)
    assert f"argument {flag}: expected one argument (none was given, or it starts with '-': write {flag}=<value>)" in err


def test_a_missing_value_is_not_said_to_start_with_a_dash_only(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(["matmul-profile", "--json"], capsys)
    assert "argument --json: expected one argument (none was given, or it starts with '-'" in err


def test_the_equals_form_of_ptxas_options_parses_and_the_help_shows_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["compile", "k.cu", "--arch", "sm_90", "--ptxas-options=-v", "-o", "k.cubin"])
    assert args.ptxas_options == "-v"
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    assert "written --ptxas-options=-v" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("value", ["0", "100000", "99999999999999999999", "177,0"])
def test_diagnostic_numbers_are_refused_in_one_form_with_their_range(value: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--diag-suppress 0`` passed argparse and was refused later as 'positive ints', a rule 10**20 meets."""
    err = refusal(["compile", "k.cu", "--arch", "sm_90", "-o", "k.cubin", "--diag-suppress", value], capsys)
    assert f"argument --diag-suppress: expected diagnostic numbers in [1, 99999] such as 177 or 177,550, received " \
           f"{value!r}" in err


def test_compile_options_state_the_diagnostic_range() -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.CompileOptions(diag_suppress=[100000])
    assert info.value.argument == "diag_suppress" and "ints in [1, 99999]" in info.value.expected
    assert mc.CompileOptions(diag_suppress=[99999, 1]).diag_suppress == (1, 99999)


@pytest.mark.parametrize("exc", [MemoryError("Unable to allocate 373. GiB"),
                                 ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the "
                                            "maximum possible size.")])
def test_a_host_allocation_too_large_is_one_line(exc: BaseException, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Each dimension is bounded while parsing; their product (``--shapes 1000000x100000``) reached numpy's
    allocation on a GPU host and printed a traceback."""
    import mircuda.cli._profile as command

    def allocate(args: object) -> int:
        raise exc

    monkeypatch.setattr(command, "cmd_profile", allocate)
    assert main(["profile"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: MemoryError: the host could not allocate what this run asked for ({exc}); ask for "
                   "smaller sizes\n")


def test_a_bare_memory_error_still_says_what_happened(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import mircuda.cli._profile as command

    def allocate(args: object) -> int:
        raise MemoryError()

    monkeypatch.setattr(command, "cmd_profile", allocate)
    assert main(["profile"]) == 2
    assert "(out of memory); ask for smaller sizes" in capsys.readouterr().err


def test_any_other_value_error_is_a_fault_and_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import mircuda.cli._profile as command

    def broken(args: object) -> int:
        raise ValueError("a bug")

    monkeypatch.setattr(command, "cmd_profile", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["profile"])


def test_a_relative_file_is_said_to_be_resolved_against_the_working_directory(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The message named the library's parameter: "resolved against '...' (relative_to)"."""
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "missing.cu", "--arch", "sm_90", "-o", "k.cubin"]) == 2
    err = capsys.readouterr().err
    assert f"'missing.cu' was resolved against {str(tmp_path)!r} (the working directory)" in err, err
    assert "relative_to" not in err


@pytest.mark.parametrize("command", ["matmul-profile", "dense-vector-profile"])
def test_dtype_pairs_read_around_spaces_like_the_other_lists(command: str) -> None:
    """``--dtypes ' bf16'`` was refused while ``--m ' 5'``, ``--shapes`` and ``--sweep`` items were stripped."""
    assert _parser().parse_args([command, "--dtypes", " bf16, bf16->f32 "]).dtypes == "bf16,bf16->f32"


@pytest.mark.parametrize("command", ["matmul-profile", "dense-vector-profile"])
@pytest.mark.parametrize("value", ["bf16, ,f16", " ", "bf16,"])
def test_an_empty_dtype_item_is_refused_quoting_what_was_typed(command: str, value: str, no_driver: None,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``--dtypes ' '`` was quoted as '' (the stripped text)."""
    assert main([command, "--dtypes", value]) == 2
    assert capsys.readouterr().err == ("error: ContractError: --dtypes: expected comma-separated input[->output] pairs: "
                                       "input bf16 or f16, output the input type or f32, without an empty item, "
                                       f"received {value!r}\n")


@pytest.mark.parametrize("command", ["profile", "matmul-profile", "graph-profile"])
def test_a_path_through_a_missing_directory_is_refused_though_it_folds_away(command: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          no_driver: None,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``nodir/../r.json``: ``abspath`` folds it to ``r.json`` and the check passed; the writer then made ``nodir``
    or failed after the run (the kernel resolves ``nodir`` first)."""
    monkeypatch.chdir(tmp_path)
    assert main([command, "--json", "nodir/../r.json"]) == 2
    assert capsys.readouterr().err == ("error: ContractError: --json: expected a file path in an existing directory, "
                                       "received 'nodir/../r.json'; 'nodir/..' is not a directory\n")
    assert list(tmp_path.iterdir()) == []


def test_compile_refuses_a_path_through_a_missing_directory_before_compiling(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    assert main(["compile", "k.cu", "--arch", "sm_90", "-o", "nodir/../k.cubin"]) == 2
    assert "'nodir/..' is not a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.cu"]


def test_a_benchmark_scripts_json_refuses_a_dash() -> None:
    """The benchmark scripts check --json with check_output_file, which took '-' as a file named '-'."""
    from mircuda.cli._errors import check_output_file

    with pytest.raises(mc.ContractError) as info:
        check_output_file("-", "--json")
    assert info.value.argument == "--json" and "standard output is not written here" in str(info.value)


@pytest.mark.parametrize("command, flag, says", [
    ("compile", "--diag-suppress", "1 to 99999"),
    ("multi-gpu-profile", "--torch-timeout", "up to 86400 (default 240)"),
])
def test_the_help_states_the_range(command: str, flag: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert says in " ".join(capsys.readouterr().out.split())
