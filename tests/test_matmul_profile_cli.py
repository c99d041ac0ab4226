"""``python -m mircuda matmul-profile`` without a GPU: its M grid (issue 16's middle M), its type pairs and
the goal lines computed from a table."""

from __future__ import annotations

import pytest

from mircuda.cli import _matmul_profile as mp
from mircuda.cli import _parser
from mircuda.cli._matmul_bench import _ratios, row


def test_the_default_grid_has_the_middle_m_and_every_type_pair() -> None:
    args = _parser().parse_args(["matmul-profile"])
    assert args.m == mp.MATMUL_M
    for m in (24, 48, 96, 192, 384, 768, 1024, 1536, 1, 16, 256, 2048, 8192):
        assert m in args.m, m
    assert list(args.m) == sorted(set(args.m))
    assert args.dtypes.split(",") == ["bf16", "f16", "bf16->f32"]
    sub = _parser().parse_args(["matmul-profile", "--m", "24,1536"])
    assert sub.m == (24, 1536) and sub.func is mp.matmul_profile


def _table(ratios: dict[int, float]) -> list:
    rows = []
    for m, ratio in ratios.items():
        rows.append(row("cuBLAS (torch.matmul)", "bf16->bf16", m, 64, 64, 10.0, 2, 2))
        rows.append(row("DenseMatmulPlan", "bf16->bf16", m, 64, 64, 10.0 / ratio, 2, 2))
    _ratios(rows)
    return rows


def test_the_goals_name_the_worst_middle_m() -> None:
    goals = mp._goals(_table({1: 1.25, 48: 0.96, 384: 1.02, 2048: 0.98}))
    assert goals[0].startswith("decode M <= 16 vs cuBLAS: worst ratio 1.25 (bf16->bf16 M=1 64x64); 1/1 >= 1")
    assert goals[2] == ("middle 16 < M < 2048 vs cuBLAS (goal >= 1.0, none below 0.97): worst ratio 0.96 "
                        "(bf16->bf16 M=48 64x64); 1/2 >= 1.0, 1 below 0.97")
    assert goals[3].startswith("every M vs cuBLAS (goal >= 1.0, none below 0.97): worst ratio 0.96")
    assert goals[3].endswith("2/4 >= 1.0, 1 below 0.97")


def test_without_cublas_there_is_no_goal_line() -> None:
    rows = [row("DenseMatmulPlan", "bf16->bf16", 48, 64, 64, 10.0, 2, 2)]
    _ratios(rows)
    assert mp._goals(rows) == []


@pytest.mark.parametrize("argv", [["matmul-profile", "--m", "0"], ["matmul-profile", "--m", "24,x"]])
def test_bad_m_exits_2_with_one_line(argv, capsys) -> None:
    from mircuda.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("error: python -m mircuda matmul-profile: argument --m")


def test_the_sweep_flags_parse() -> None:
    args = _parser().parse_args(["matmul-profile", "--sweep", "--table", "t.json", "--m", "48"])
    assert args.sweep and args.table == "t.json" and args.m == (48,)
    plain = _parser().parse_args(["matmul-profile"])
    assert not plain.sweep and plain.table is None


def test_a_table_without_the_sweep_exits_2_with_one_line(capsys, tmp_path) -> None:
    from mircuda.cli import main

    code = main(["matmul-profile", "--table", str(tmp_path / "t.json"), "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and "--table" in err and "--sweep with it" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.json").exists()
