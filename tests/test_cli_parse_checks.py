"""Every profile command refuses a bad value while its command line is parsed, before the driver is
touched: exit status 2, one line naming the flag, no traceback (on any machine, with or without a GPU)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mircuda.cli import main

DEVICE_COMMANDS = ["profile", "graph-profile", "dense-vector-profile", "matmul-profile", "decoder-layer-profile",
                   "fp8-profile", "fp4-profile", "cutlass-check"]
M_COMMANDS = ["matmul-profile", "decoder-layer-profile", "fp8-profile", "fp4-profile", "multi-gpu-profile"]
REPEATS_COMMANDS = ["dense-vector-profile", "matmul-profile", "decoder-layer-profile", "fp8-profile", "fp4-profile",
                    "multi-gpu-profile"]

CASES = (
    [(c, ["--m", m], "--m") for c in M_COMMANDS for m in ("1,,2", "1,", ",1", "0", "x", "-3", "8,8", "1,16,1")]
    + [("matmul-profile", ["--m", m], "--m") for m in ("99999999999999999999", "16,2147418112")]
    + [(c, ["--device", d], "--device") for c in DEVICE_COMMANDS for d in ("-1", "²")]
    + [(c, ["--repeats", "0"], "--repeats") for c in REPEATS_COMMANDS]
    + [(c, ["--calls", "0"], "--calls") for c in REPEATS_COMMANDS]
    + [("fp8-profile", ["--sweep", s], "--sweep") for s in ("mma,", ",mma", "mma,,gemv", "mma:rows=16,mma:rows=16",
                                                             "foo")]
    + [("fp8-profile", ["--shapes", s], "--shapes") for s in ("4096x4097", "4096x4104", "4096x4096,,4096x4096")]
    + [("fp4-profile", ["--shapes", "4096x4096,"], "--shapes"), ("dense-vector-profile", ["--shapes", "16x16,"],
                                                                  "--shapes")]
    + [("multi-gpu-profile", ["--torch-timeout", t], "--torch-timeout") for t in ("-1", "0", "nan", "inf", "x")]
    + [("graph-profile", ["--sizes", "1,,2"], "--sizes")]
)


@pytest.mark.parametrize("command, argv, flag", CASES)
def test_bad_values_exit_2_with_one_line_naming_the_flag(command: str, argv: list[str], flag: str, tmp_path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main([command, *argv, "--json", str(tmp_path / "r.json")])
    except SystemExit as exc:  # argparse's refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and flag in err and "Traceback" not in err, err
    assert "UnsupportedPlatform" not in err and "CudaError" not in err, err


def test_messages_say_the_rule() -> None:
    def run(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-m", "mircuda", *argv], capture_output=True, text=True)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
        return out.stderr

    assert "K a multiple of 16" in run("fp8-profile", "--shapes", "4096x4097")
    assert "[:decode=hardware|integer]" in run("fp8-profile", "--sweep", "foo")
    assert "distinct candidates" in run("fp8-profile", "--sweep", "mma:rows=16,mma:rows=16")
    assert "without an empty item" in run("fp4-profile", "--m", "1,,2")


SHAPES_COMMANDS = ["dense-vector-profile", "fp8-profile", "fp4-profile"]
SHAPES_RULE = "expected comma-separated NxK pairs of positive ints"


@pytest.mark.parametrize("command, argv, rule", [
    *[(c, ["--m", m], "expected comma-separated positive ints") for c in M_COMMANDS for m in ("²", "1,²", "\u0661")],
    *[(c, ["--m", "1,8,1"], "expected each value once") for c in M_COMMANDS],
    *[(c, ["--device", "²"], "expected a device ordinal") for c in DEVICE_COMMANDS],
    ("fp8-profile", ["--calls", "²"], "expected a positive integer"),
    *[(c, ["--shapes", s], SHAPES_RULE) for c in SHAPES_COMMANDS for s in ("4096x²096", "²x4096", "4096x\u0664096")],
    *[(c, ["--shapes", "4096x4096,14336x4096,4096x4096"], "expected each value once") for c in SHAPES_COMMANDS]])
def test_a_character_that_isdigit_but_is_no_ascii_digit_gets_the_rule(command: str, argv: list[str], rule: str,
                                                                        tmp_path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``'²'.isdigit()`` is True and ``int('²')`` fails: argparse then said only "invalid m_values value: '²'"
    (likewise device_ordinal, positive_int, shape_values); an Arabic-Indic digit (U+0661) was read as its value.
    A repeated M or shape was measured and recorded twice."""
    with pytest.raises(SystemExit) as info:
        main([command, *argv, "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {argv[0]}: {rule}" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command", DEVICE_COMMANDS + ["multi-gpu-profile", "inspect", "build-cutlass"])
def test_an_unknown_option_is_reported_under_the_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--bogus"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (f"error: python -m mircuda {command}: unrecognized arguments: --bogus "
                                       f"(see python -m mircuda {command} --help)\n")


def test_an_unknown_option_before_the_command_is_the_top_parsers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--bogus", "inspect"])
    assert capsys.readouterr().err.startswith("error: python -m mircuda: unrecognized arguments: --bogus")


def test_good_values_still_parse() -> None:
    from mircuda.cli import _parser

    args = _parser().parse_args(["fp8-profile", "--m", "1, 16", "--shapes", "4096x4112", "--calls", "3",
                                 "--repeats", "2", "--device", "1", "--sweep", "mma,mma:rows=32"])
    assert (args.m, args.shapes, args.calls, args.repeats, args.device) == ((1, 16), ((4096, 4112),), 3, 2, 1)
    assert len(args.sweep) == 2
    assert _parser().parse_args(["multi-gpu-profile", "--torch-timeout", "0.5"]).torch_timeout == 0.5


COUNT_FLAGS = ([(c, f) for c in REPEATS_COMMANDS + ["moe-profile"] for f in ("--calls", "--repeats")]
               + [("graph-profile", f) for f in ("--calls", "--batches", "--samples", "--rounds")]
               + [("profile", f) for f in ("--elements", "--launches", "--batches")])


@pytest.mark.parametrize("command, flag", COUNT_FLAGS)
@pytest.mark.parametrize("value", ["1_0", " 5", "\uff12", "0", "-3", "x", ""])
def test_every_count_flag_takes_ascii_digits_only(command: str, flag: str, value: str, tmp_path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``type=int`` took '1_0' as 10, ' 5' as 5 and a full-width digit two (U+FF12) as 2 without a word; a count is ASCII
    digits >= 1, refused by argparse in one line naming the flag (every profile's --calls and --repeats, graph-profile's
    and profile's batch counts, profile's --elements)."""
    with pytest.raises(SystemExit) as info:
        main([command, flag, value, "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {flag}: expected a positive integer" in err, err
    assert len(err.splitlines()) == 1
