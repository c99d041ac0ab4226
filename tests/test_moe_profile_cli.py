"""``python -m mircuda moe-profile`` without a GPU: its flags and refusals, the routing it draws, the rows'
arithmetic and goals, and the table. The lead runs it on the H200."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_probe import gpu_unavailable_reason

from mircuda.cli import _moe_profile as mp
from mircuda.cli import _parser, main


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return _parser().parse_args(["moe-profile", *argv])


def test_the_command_is_listed_and_its_defaults_are_the_issue_grid(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and "    moe-profile " in capsys.readouterr().out
    args = parse()
    assert args.func is mp.moe_profile and args.json == "benchmarks/results/moe_profile.json"
    assert mp.grid(args) == (("mixtral", "fine"), (1, 16, 256, 4096), 20, 7)
    assert mp.LAYERS == {"mixtral": (8, 14336, 4096, 2), "fine": (128, 768, 2048, 8)}


def test_quick_is_a_smaller_grid_and_each_flag_still_wins() -> None:
    assert mp.grid(parse("--quick")) == (("mixtral", "fine"), (1, 16, 4096), 10, 5)
    assert mp.grid(parse("--quick", "--tokens", "7", "--layers", "fine", "--repeats", "3")) == (("fine",), (7,), 10, 3)
    assert parse().variant is None and parse("--variant", "split_n").variant == "split_n"


@pytest.mark.parametrize("flags, head", [(["--layers", "mixtral,dense"], "--layers: expected comma-separated names"),
                                         (["--sweep", "fp8:s2"], "--sweep: expected a decode of bytes, pairs, e4m3"),
                                         (["--sweep", "e4m3:s5"], "--sweep: expected fields sN"),
                                         (["--sweep", "pairs:w8:w4"], "--sweep: expected fields sN"),
                                         (["--sweep", ","], "--sweep: expected 'all' or"),
                                         (["--sweep", "e4m3:m3"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:m1:w16"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:m1:r16"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:w1"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:m1:m2"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:p1"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:m1,e4m3:m1:p0"], "--sweep: expected distinct"),
                                         (["--sweep", "default"], "--sweep: expected distinct"),
                                         (["--sweep", "e4m3:m1,,e4m3:m2"], "--sweep: expected 'all' or"),
                                         (["--sweep", "e4m3:m1,"], "--sweep: expected 'all' or"),
                                         (["--sweep", "e4m3:m01"], "--sweep: expected fields sN"),
                                         (["--sweep", "vector", "--variant", "split_k"], "--variant: expected no"),
                                         (["--sweep", "e4m3:m1:p2"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:s\u00b2"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:m\u0661"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:s" + "9" * 5000], "--sweep: expected fields sN"),
                                         (["--sweep", ""], "--sweep: expected 'all' or"),
                                         (["--sweep", "e4m3:t9"], "--sweep: expected fields sN"),
                                         (["--sweep", "e4m3:m1:g0"], "--sweep: expected l1, gN (g0 included) and oN"),
                                         (["--sweep", "default:g0"], "--sweep: expected l1, gN (g0 included) and oN"),
                                         (["--sweep", "dp4a:m1:p1"], "--sweep: expected dp4a with m1 (1-row tiles "
                                          "of the vector variant), p1 only with l1"),
                                         (["--tokens", "3000000000"], "--tokens: expected tokens per step up to 65536"),
                                         (["--layers", "fine,fine"], "--layers: expected distinct layer names")])
def test_bad_values_are_refused_by_flag_before_the_driver(flags, head, capsys) -> None:
    assert main(["moe-profile", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: ContractError: {head}") and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [["--tokens", "0"], ["--tokens", "x"], ["--tokens", "1,1"], ["--layers", ""],
                                  ["--layers", "fine,,"], ["--variant", "tiled"]])
def test_bad_flags_exit_2_with_one_line(argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["moe-profile", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "usage" not in err
    assert err.startswith("error: python -m mircuda moe-profile: argument --") and len(err.splitlines()) == 1
    if argv == ["--tokens", "1,1"]:  # a repeated count is refused by the flag's parser (the CLI's m_values)
        assert "expected each value once, received '1,1'" in err


def test_json_in_a_missing_directory_is_refused_first(tmp_path: Path, capsys) -> None:
    assert main(["moe-profile", "--json", str(tmp_path / "missing" / "x.json")]) == 2
    assert capsys.readouterr().err.startswith("error: ContractError: --json: expected a file path")


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_without_a_gpu_it_fails_cleanly() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "moe-profile", "--tokens", "1", "--layers", "fine"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("tokens, experts, topk", [(1, 8, 2), (7, 128, 8), (4096, 8, 2)])
def test_the_routing_gives_each_token_topk_distinct_experts_sorted_by_expert(tokens, experts, topk) -> None:
    counts, offsets = mp.routing(np.random.default_rng(3), tokens, experts, topk)
    assert counts.dtype == offsets.dtype == np.int32 and counts.shape == (experts,)
    assert counts.sum() == tokens * topk and counts.max() <= tokens
    np.testing.assert_array_equal(offsets, np.concatenate([[0], np.cumsum(counts)[:-1]]))


def test_rates_ratios_and_goals() -> None:
    r = mp.moe_row("mixtral", 1, 8, 14336, 4096, 2, 2, grouped_us=25.0, loop_us=60.0)
    assert mp.expert_bytes(14336, 4096) == 14336 * 2048 + 14336 * 256
    assert r.grouped_tbps == pytest.approx(2 * mp.expert_bytes(14336, 4096) / 25e-6 / 1e12)
    assert r.loop_ratio == pytest.approx(2.4) and r.met is True and r.goal == ">= 2.5 TB/s, loop/grouped >= 2"
    slow = mp.moe_row("mixtral", 16, 8, 14336, 4096, 2, 8, grouped_us=200.0, loop_us=300.0)
    assert slow.met is False
    big = mp.moe_row("fine", 4096, 128, 768, 2048, 8, 128, grouped_us=900.0, torch_us=810.0)
    assert big.torch_ratio == pytest.approx(0.9) and (big.goal, big.met) == ("TFLOP/s >= 0.8x torch", True)
    assert big.grouped_tflops == pytest.approx(2 * 4096 * 8 * 768 * 2048 / 900e-6 / 1e12)
    assert mp.moe_row("fine", 256, 128, 768, 2048, 8, 128, grouped_us=50.0, torch_us=40.0).goal is None
    assert mp.moe_row("fine", 4096, 128, 768, 2048, 8, 128, grouped_us=None, torch_us=40.0).goal is None
    lines = mp.goals([r, slow, big])
    assert lines[0].startswith("mixtral 1 tokens: >= 2.5 TB/s") and lines[0].endswith("loop/grouped 2.40)")
    assert "NOT met" in lines[1] and lines[2] == "fine 4096 tokens: TFLOP/s >= 0.8x torch: met (ratio 0.90)"
    t = mp.table([r, slow, big], "title")
    assert len(t) == 3 and t.column("verdict")[2] == "TFLOP/s >= 0.8x torch: met"
    assert str(t).splitlines()[0] == "title"
    json.dumps([dataclasses.asdict(x) for x in (r, slow, big)])


def test_sweep_candidates_resolve_over_the_default_and_all_is_the_documented_list() -> None:
    from mircuda.matmul._moe_kernels import DecodeTuning

    assert parse().sweep is None and parse("--sweep", "all").sweep == "all"
    default = DecodeTuning("e4m3", 3)
    got = mp.parse_candidates("pairs, e4m3:s4:w16:r32,default:s2")
    assert [c.resolve(default) for c in got] == [DecodeTuning("pairs", 3), DecodeTuning("e4m3", 4, 16, 2),
                                                 DecodeTuning("e4m3", 2)]
    everything = mp.parse_candidates("all")
    assert tuple(c.text for c in everything) == mp.SWEEP_ALL
    assert [c.resolve(default).label() for c in everything] == list(mp.SWEEP_ALL)  # every field spelled out
    assert len(set(mp.SWEEP_ALL)) == len(mp.SWEEP_ALL)


def test_sweep_rows_give_rates_the_ratio_to_the_default_and_the_fastest() -> None:
    measured = [("default", "e4m3:s3:w8:r16", 30.0), ("pairs", "pairs:s3:w8:r16", 40.0),
                ("e4m3:s4", "e4m3:s4:w8:r16", 25.0), ("bytes", "bytes:s3:w8:r16", None)]
    rows = mp.sweep_rows("mixtral", 1, 14336, 4096, 2, measured, "e4m3:s3:w8:r16")
    assert [r.vs_default for r in rows] == [1.0, 0.75, 1.2, None]
    assert rows[0].note == "default" and rows[2].note == "fastest" and rows[3].us is None and rows[3].tbps is None
    assert rows[2].tbps == pytest.approx(2 * mp.expert_bytes(14336, 4096) / 25e-6 / 1e12)
    text = str(mp.sweep_table(rows, "sweep"))
    assert "e4m3:s4:w8:r16" in text and "fastest" in text and "default/µs" in text


def test_vector_candidates_name_their_tile_rows_and_vector_is_the_documented_list() -> None:
    from mircuda.matmul._moe_kernels import DecodeTuning, default_tuning

    got = mp.parse_candidates("e4m3:m1, pairs:s4:w2:r8:m4")
    assert [(c.variant, c.rows_per_tile) for c in got] == [("vector", 1), ("vector", 4)]
    assert got[1].resolve(default_tuning("sm_90", "vector")) == DecodeTuning("pairs", 4, 2, 2)
    assert got[0].resolve(default_tuning("sm_90", "vector")) == DecodeTuning("e4m3", 2, 0, 1)  # warps: occupancy
    assert mp.parse_candidates("e4m3:s3")[0].variant == "split_k"
    named = mp.parse_candidates("vector")
    assert tuple(c.text for c in named) == mp.SWEEP_VECTOR and all(c.variant == "vector" for c in named)
    assert parse("--variant", "vector").variant == "vector"
    (walk,) = mp.parse_candidates("e4m3:m2:p1")
    assert walk.resolve(default_tuning("sm_90", "vector")) == DecodeTuning("e4m3", 2, 0, 1, True)


def test_split_k_candidates_may_name_their_m_tile() -> None:
    import mircuda as mc
    from mircuda.matmul._moe_kernels import DecodeTuning

    eight, plain = mp.parse_candidates("e4m3:s2:w4:r32:t8, e4m3:s2:w4:r32")
    assert (eight.variant, eight.tile_rows, eight.rows_per_tile) == ("split_k", 8, None)
    assert plain.tile_rows is None and eight.resolve(DecodeTuning("e4m3", 3)) == DecodeTuning("e4m3", 2, 4, 2)
    for bad in ("e4m3:m1:t8", "e4m3:t64", "e4m3:t4", "e4m3:t8:t8"):  # vector tiles are mN; staged takes 64
        with pytest.raises(mc.ContractError) as info:
            mp.parse_candidates(bad)
        assert info.value.argument == "--sweep", bad


def test_the_sweep_help_names_every_field_and_the_values_the_parser_takes(capsys) -> None:
    from mircuda.matmul._fp4 import ROW_WARPS
    from mircuda.matmul._moe_kernels import REGISTER_CAPS, ROWS_PER_TILE

    with pytest.raises(SystemExit):
        main(["moe-profile", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help at spaces
    assert "decode[:sN][:wN][:rN][:mN][:pN][:lN][:gN][:tN][:oN]" in text
    # the caps and split_k m-tiles the parser accepts (g0: no cap; tN: the first three tiles, staged takes 64)
    assert f"gN a register cap {'/'.join(map(str, REGISTER_CAPS[1:]))}, g0 none" in text
    assert f"tN the m-tile {'/'.join(map(str, ROWS_PER_TILE[:3]))}" in text
    # every row warps value the parser takes, o1 (off) included, and the sm_90 default (2 since 734a3c1)
    assert f"oN row warps {'/'.join(map(str, ROW_WARPS))}, o1 none" in text and "g80 and o2" in text
    for field in ("e4m3:t8", "e4m3:m1:p1", "dp4a:m1:l1:p1", "dp4a:m1:g72", "dp4a:m1:g0", "dp4a:m1:o1", "dp4a:m1:o2",
                  "dp4a:m1:o8"):
        assert mp.parse_candidates(field)


def test_a_candidate_gives_the_plan_its_fields_and_the_default_decoder_of_its_tile() -> None:
    """The plan fills the fields left None from the default of the decoder named; ``default:...`` names the plan's
    own decoder for the candidate's tile (``dp4a`` for 1-row vector tiles with K % 32 == 0 on sm_90: it measured
    the e4m3 word decoder under that name before)."""
    from mircuda.matmul._moe_kernels import DecodeTuning, resolve_tuning

    default_m1, e4m3_m1, split, lean = mp.parse_candidates("default:m1, e4m3:m1, pairs:s3, dp4a:m1:l1:g0")
    assert default_m1.tuning("sm_90", 4096) == DecodeTuning("dp4a")
    assert default_m1.tuning("sm_90", 4112).decode == "e4m3"  # K % 32 != 0: the word decoder is the default
    assert default_m1.tuning("sm_80", 4096).decode == "dp4a" and default_m1.tuning("sm_120f", 4096).decode == "e4m3"
    walk, lean_walk = mp.parse_candidates("default:m1:p1, dp4a:m1:l1:p1")  # dp4a walks only with l1
    assert walk.tuning("sm_90", 4096) == DecodeTuning("e4m3", persistent=True)
    assert lean_walk.tuning("sm_90", 4096) == DecodeTuning("dp4a", persistent=True, lean_tiles=True)
    assert e4m3_m1.tuning("sm_90", 4096) == DecodeTuning("e4m3")
    assert split.tuning("sm_90", 4096) == DecodeTuning("pairs", 3)
    assert lean.tuning("sm_90", 4096) == DecodeTuning("dp4a", lean_tiles=True, max_registers=0)
    # what the plan then runs: the measured knobs of the decoder named (the cap only where dp4a is the default's)
    assert resolve_tuning(default_m1.tuning("sm_90", 4096), "vector", "sm_90", 1, 4096) == \
        DecodeTuning("dp4a", 2, 1, 1, max_registers=80, row_warps=2)  # and the row warps, one warp per row block
    assert resolve_tuning(e4m3_m1.tuning("sm_90", 4096), "vector", "sm_90", 1, 4096) == DecodeTuning("e4m3", 2, 0, 1)
    assert resolve_tuning(split.tuning("sm_90", 4096), "split_k", "sm_90") == DecodeTuning("pairs", 3, 4, 2)
