"""Values a command line used to take as something else, or to check by leaving a file behind: each is refused in
one line naming the flag, the value expected and the value received (exit status 2), before the driver is touched,
and nothing is created on the way."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli_refusal import refusal
from mircuda.cli import _parser, main
from mircuda.cli._values import comma_items

REPEATS_COMMANDS = ["dense-vector-profile", "matmul-profile", "decoder-layer-profile", "fp8-profile", "fp4-profile",
                    "multi-gpu-profile", "moe-profile"]


# -- 1. a results path is checked without creating or touching it -------------------------------------------------

def test_profile_checks_json_without_creating_it_and_keeps_an_existing_file(tmp_path: Path, no_driver: None,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``profile --json`` opened the file with mode "a" to check it: a missing file was left behind, 0 bytes,
    when the run then stopped (no driver). The directory is checked instead."""
    missing = tmp_path / "prof.json"
    assert main(["profile", "--json", str(missing)]) == 2
    assert "no driver (test stand-in)" in capsys.readouterr().err  # the check passed: the run stopped later
    assert not missing.exists()
    kept = tmp_path / "kept.json"
    kept.write_text('{"rows": {}}')
    assert main(["profile", "--json", str(kept)]) == 2
    assert kept.read_text() == '{"rows": {}}'


@pytest.mark.parametrize("json, said", [
    ("", "--json: expected a file path, received ''"),  # it wrote no JSON, silently
    ("{tmp}/missing/p.json", "--json: expected a file path in an existing directory, received '{tmp}/missing/p.json'; "
                             "'{tmp}/missing' is not a directory"),
    ("{tmp}", "--json: expected a file path in an existing directory, received '{tmp}'; it is a directory"),
])
def test_profile_refuses_a_json_path_it_cannot_write_before_the_driver(json: str, said: str, tmp_path: Path,
                                                                      no_driver: None,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--json", json.format(tmp=tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: ContractError: {said.format(tmp=tmp_path)}\n"
    assert list(tmp_path.iterdir()) == []


# -- 2. an empty string is refused, not read as the working directory or the default --------------------------------

def test_compile_refuses_an_empty_include_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-I ""`` was the working directory, a root the user never named."""
    out = tmp_path / "k.cubin"
    err = refusal(["compile", "k.cu", "--arch", "sm_90", "-I", "", "-o", str(out)], capsys)
    assert err.startswith("error: python -m mircuda compile: argument -I/--include-path: expected a directory path "
                          "(. for the working directory), received ''")
    assert not out.exists()


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build-cutlass that got past its checks fails the test instead of building (and no cache is made)."""
    import mircuda.cli._build_cutlass as command

    monkeypatch.setattr(command, "make_writable_directory", lambda *a: pytest.fail("the cache directory was made"))


def test_build_cutlass_refuses_an_empty_cache_dir(no_build: None, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cache-dir ""`` built into the default cache, as if the flag were left out."""
    err = refusal(["build-cutlass", "--cache-dir", ""], capsys)
    assert err.startswith("error: python -m mircuda build-cutlass: argument --cache-dir: expected a directory path "
                          "(leave the flag out for the default cache), received ''")


# -- 3. numbers: ASCII digits, each once in a list, below a documented bound ------------------------------------------

@pytest.mark.parametrize("argv, said", [
    *[(["profile", "--elements", v], "argument --elements: expected a positive integer up to 1073741824 (4 GiB per "
                                     "float32 vector)") for v in ("1_000", " 5", "0", "1073741825")],
    (["profile", "--launches", " 5"], "argument --launches: expected a positive integer up to 2147483647 (a C int)"),
    *[(["graph-profile", "--sizes", v], "argument --sizes: expected comma-separated kernel counts in [1, 1000000] "
                                        "(the C floor's limit)") for v in ("1_0", "1000001", "1,0", "1, 1_0")],
    (["graph-profile", "--sizes", "1,10,1"], "argument --sizes: expected each value once, received '1,10,1'"),
    *[(["decoder-layer-profile", "--sets", v], "argument --sets: expected an integer in [2, 1024]")
      for v in ("1_0", " 5", "1025", "1", "00")],  # 1 and 0 were refused later, in another form
    *[([c, f, v], f"argument {f}: expected a positive integer up to 2147483647 (a C int), received '{v}'")
      for c in REPEATS_COMMANDS for f in ("--calls", "--repeats") for v in ("2147483648", "9" * 23)],
    (["graph-profile", "--batches", "2147483648"], "argument --batches: expected a positive integer up to 2147483647"),
    *[(["compile", "k.cu", "--arch", "sm_90", "-o", "k.cubin", "--maxrregcount", v],
       f"argument --maxrregcount: expected registers per thread, an integer in [16, 255], received '{v}'")
      for v in ("1_6", "0", "256", " 32")],
    (["compile", "k.cu", "--arch", "sm_90", "-o", "k.cubin", "--diag-suppress", "1_77"],
     "argument --diag-suppress: expected diagnostic numbers in [1, 99999] such as 177 or 177,550, received '1_77'"),
])
def test_numbers_are_ascii_digits_within_their_bound(argv: list[str], said: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``type=int`` took ``1_000`` and `` 5``; counts had no upper bound."""
    assert f"{argv[0]}: {said}" in refusal(argv, capsys)


@pytest.mark.parametrize("argv, said", [
    # the plans' dimension limit, 2**31 - 2**16, as matmul-profile's --m and fp4-profile's --shapes
    *[([c, "--shapes", s], f"argument --shapes: expected NxK pairs of dimensions below 2147418112 (the kernels index "
                           f"with 32-bit ints), received {s.split(',')[-1]} in '{s}'")
      for c in ("dense-vector-profile", "fp8-profile") for s in ("99999999999x99999999984", "4096x4096,16x2147418112")],
    *[([c, "--m", "1,2147418112"], "argument --m: expected a dimension below 2147418112 (the kernels index with 32-bit "
                                   "ints), received 2147418112 in '1,2147418112'")
      for c in ("matmul-profile", "fp8-profile", "decoder-layer-profile", "multi-gpu-profile")],
])
def test_shapes_and_m_stay_below_the_plans_dimension_limit(argv: list[str], said: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert f"{argv[0]}: {said}" in refusal(argv, capsys)


@pytest.mark.parametrize("jobs", ["1_0", " 4", "0", "2147483648"])
def test_build_cutlass_jobs_are_ascii_digits(jobs: str, no_build: None, capsys: pytest.CaptureFixture[str]) -> None:
    """``type=int`` took ``--jobs 1_0`` as 10."""
    assert (f"argument --jobs: expected a positive integer up to 2147483647 (a C int), received {jobs!r}"
            in refusal(["build-cutlass", "--jobs", jobs], capsys))


@pytest.mark.parametrize("command", ["dense-vector-profile", "fp8-profile"])
def test_the_shapes_help_states_the_plans_dimension_limit(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from mircuda.matmul._spec import _DIM_LIMIT

    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert f"each dimension below {_DIM_LIMIT}" in " ".join(capsys.readouterr().out.split())


def test_the_bounds_themselves_are_taken() -> None:
    def parse(*argv: str):  # type: ignore[no-untyped-def]
        return _parser().parse_args(list(argv))

    assert parse("profile", "--elements", "1073741824", "--launches", "2147483647").elements == 1 << 30
    assert parse("graph-profile", "--sizes", "1, 1000000").sizes == (1, 1000000)
    assert parse("decoder-layer-profile", "--sets", "1024", "--m", "2147418111").sets == 1024
    assert parse("dense-vector-profile", "--shapes", "2147418111x16").shapes == ((2147418111, 16),)
    assert parse("fp8-profile", "--shapes", "16x2147418096").shapes == ((16, 2147418096),)
    assert parse("compile", "k.cu", "--arch", "sm_90", "-o", "k", "--maxrregcount", "255").max_registers == 255
    assert parse("build-cutlass", "--jobs", "8").jobs == 8


# -- 4. fp4-profile --sweep: dp4a takes no block sum ------------------------------------------------------------------

@pytest.mark.parametrize("candidate", ["vector:decode=dp4a:sum=fp16", "vector:sum=fp32:decode=dp4a"])
def test_fp4_sweep_refuses_a_block_sum_with_dp4a(candidate: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The help said "decode=dp4a: ... no sum" and the plans refuse ``block_sum`` there; the parser took it."""
    err = refusal(["fp4-profile", "--sweep", candidate], capsys)
    assert (f"argument --sweep: expected no sum with decode=dp4a (its block sums are exact int32 IDP4A sums: the plans "
            f"refuse block_sum), received {candidate!r}") in err


def test_fp4_sweep_help_says_what_dp4a_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    from mircuda.cli._fp4_profile import sweep_values

    with pytest.raises(SystemExit):
        main(["fp4-profile", "--help"])
    assert "decode=dp4a: the integer path, M <= 4, no sum or persistent=1" in " ".join(capsys.readouterr().out.split())
    assert sweep_values("vector:decode=e4m3:sum=fp16")[0].block_sum == "fp16"  # the word decoders take one


# -- 5. moe-profile --sweep names the field it refuses, then what that field takes --------------------------------------

@pytest.mark.parametrize("candidate, field, takes", [
    ("bytes:s5", "s5", "sN (stages) takes N = 2, 3 or 4"),
    ("bytes:t7", "t7", "tN (the m-tile of split_k) takes N = 8, 16 or 32"),
    ("dp4a:m1:o3", "o3", "oN (row warps, dp4a) takes N = 1, 2, 4 or 8"),
    ("e4m3:m1:w16", "w16", "wN (warps of the vector variant) takes N = 1, 2, 4 or 8"),
    ("e4m3:m1:t8", "t8", "tN (the m-tile) is for split_k (without mN) only"),
    ("e4m3:p1", "p1", "pN (the persistent grid) is for the vector variant (with mN) only"),
])
def test_moe_sweep_names_the_bad_field_then_its_values(candidate: str, field: str, takes: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """It printed every field of every variant and only the whole candidate."""
    assert main(["moe-profile", "--sweep", candidate]) == 2
    assert capsys.readouterr().err == (f"error: ContractError: --sweep: expected fields sN, wN, rN, mN, pN, lN, gN, tN, "
                                       f"oN with values they take, received {field!r} in {candidate!r}; {takes}\n")


def test_moe_sweep_names_a_repeated_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["moe-profile", "--sweep", "pairs:w8:w4"]) == 2
    assert capsys.readouterr().err.endswith("each once, received 'w4' in 'pairs:w8:w4'\n")


# -- 6. compile --arch takes one target per flag ----------------------------------------------------------------------

def test_compile_arch_says_to_repeat_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """build-cutlass's --arch takes a comma list; compile's did not say how to ask for several targets."""
    err = refusal(["compile", "k.cu", "--arch", "sm_90,sm_120f", "-o", "k.fatbin"], capsys)
    assert ("argument --arch: expected one NVRTC target per --arch (repeat the flag for a fatbin: --arch sm_90 --arch "
            "sm_120f), received 'sm_90,sm_120f'") in err
    assert _parser().parse_args(["compile", "k.cu", "--arch", "sm_90", "--arch", "sm_120f", "-o", "k"]).arch == [
        "sm_90", "sm_120f"]


# -- 7. wording ---------------------------------------------------------------------------------------------------------

def test_a_plural_of_an_item_ending_in_x_takes_es(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(["matmul-profile", "--sweep", "--kernels", ",foo"], capsys)
    assert "expected comma-separated kernel name prefixes without an empty item, received ',foo'" in err
    with pytest.raises(argparse.ArgumentTypeError, match="comma-separated NxK pairs without"):
        comma_items("4096x4096,", "NxK pair")


def test_a_hint_follows_the_received_value_after_a_semicolon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """"received '/tmp'. it is a directory" read as a sentence starting in lower case."""
    assert main(["compile", "k.cu", "--arch", "sm_90", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: ContractError: -o: expected a file path in an existing directory, "
                                       f"received {str(tmp_path)!r}; it is a directory\n")


def test_a_benchmark_scripts_json_hint_follows_a_semicolon_too(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from mircuda.cli._matmul_bench import check_results_argument

    with pytest.raises(SystemExit):
        check_results_argument(argparse.ArgumentParser(prog="bench"), str(tmp_path))
    assert capsys.readouterr().err.endswith(f"received {str(tmp_path)!r}; it is a directory\n")


def test_maxrregcount_says_what_the_cli_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """It said "expected None or an int in [16, 255]": None is Python's word, not a value of the flag."""
    err = refusal(["compile", "k.cu", "--arch", "sm_90", "--maxrregcount", "0", "-o", "k.cubin"], capsys)
    assert "None" not in err and "expected registers per thread, an integer in [16, 255], received '0'" in err
