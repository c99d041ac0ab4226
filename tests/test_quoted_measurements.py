"""The counts and comparisons that README.md and the rules' measurement constants quote, against the recorded
results they name (``benchmarks/results/*.json``): a sweep re-run that changes them, or a summary that miscounts
(the SM90 FP8 rule once said 21 of 25 where its sweep has 22 of 26), fails here. No GPU."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

from mircuda.matmul._fp4 import DP4A_M2_MEASURED
from mircuda.matmul._select import FP8_SM90_RULE_MEASURED, sm90_fp8_family

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PINGPONG, COOP = "sm90_blockwise_pingpong_64x128x128_e4m3_bf16", "sm90_blockwise_coop_128x128x128_c1x2_e4m3_bf16"


def recorded(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    return result


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_sm90_fp8_rule_counts_its_sweep() -> None:
    # the forced sweep behind FP8_SM90_RULE_MEASURED (two runs at some points: their mean)
    times: dict[tuple[int, int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in recorded("fp8_sm90_cutlass_pingpong_vs_coop.json")["forced_sweep"]["rows"]:
        if row["kernel"] in (PINGPONG, COOP):
            times[(row["n"], row["k"], row["m"])][row["kernel"]].append(row["us"])
    fits, others, coop_wins = 0, 0, 0
    for (n, _k, m), by in times.items():
        pingpong_faster = mean(by[PINGPONG]) < mean(by[COOP])
        if sm90_fp8_family(m, n, 132)[0] == "sm90_blockwise_pingpong":
            fits += 1
            assert pingpong_faster, (n, m)  # "the ping-pong kernel was the faster at every point where [it fits]"
        else:
            others += 1
            coop_wins += not pingpong_faster
    assert (fits, others) == (18, 26)
    assert f"the cooperative one at {coop_wins} of {others} points" in FP8_SM90_RULE_MEASURED
    assert f"the cooperative kernel at {coop_wins} of the {others} other points" in flat(README)


def test_the_m4_integer_path_comparison_is_as_recorded() -> None:
    sweep = recorded("fp4_sweep_m2_4.json")["sweep"]
    m4 = {(r["n"], r["k"]): r for r in sweep if r["m"] == 4 and r["candidate"] == "vector:decode=dp4a"}
    rows8 = {(r["n"], r["k"]): r for r in sweep if r["m"] == 4 and r["candidate"] == "vector:decode=dp4a:rows=8"}
    assert len(m4) == len(rows8) == 4
    assert sum(r["us"] < r["default_us"] for r in m4.values()) == 0  # slower everywhere with its default rows
    assert sum(r["us"] < r["default_us"] for r in rows8.values()) == 2
    for shape in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)):
        assert f"{m4[shape]['us']:.2f} vs {m4[shape]['default_us']:.2f}" in DP4A_M2_MEASURED
    assert "M = 4 slower on all four" in DP4A_M2_MEASURED
    assert ("at M = 4 it was slower on all four with its default rows, 7.30 against 7.12 µs on 4096x4096 and 21.59 "
            "against 17.05 on 14336x4096, and with `rows=8` faster on two and slower on two") in flat(README)


def test_the_fp4_mma_default_comparison_is_as_recorded() -> None:
    # fp4_mma_bf16's default (32 rows x 3 stages) against the former 16 rows x 2 stages at M = 2, 8, 16
    rows = [r for r in recorded("fp4_sweep_rows_stages.json")["sweep"]
            if r["candidate"] == "mma:decode=e4m3:rows=32:stages=3" and r["m"] in (2, 8, 16)]
    faster = [r for r in rows if r["us"] < r["default_us"]]
    slower = [(r["m"], r["n"], r["k"], round(r["us"], 2), round(r["default_us"], 2)) for r in rows if r not in faster]
    assert (len(faster), len(rows)) == (11, 12) and slower == [(16, 4096, 4096, 8.5, 8.43)]
    assert "faster than 16 rows x 2 stages at 11 of the 12 points M = 2, 8, 16" in flat(README)
    assert "level at M = 16 on 4096x4096, 8.50 against 8.43" in flat(README)
