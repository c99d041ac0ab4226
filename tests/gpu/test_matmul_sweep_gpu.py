"""``matmul-profile --sweep --kernels`` on the device: only the listed kernels are timed, beside each plan's own
choice, every row is checked against float64, and the table written names a listed kernel or the plan's choice
(in a subprocess: the command makes its own context)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.cutlass
def test_a_sweep_of_listed_kernels_times_them_beside_each_plans_choice(tmp_path) -> None:
    table, report = tmp_path / "t.json", tmp_path / "r.json"
    env = {**os.environ, "MIRCUDA_DENSE_TABLE": ""}  # the packaged table decides the plans' choices
    out = subprocess.run([sys.executable, "-m", "mircuda", "matmul-profile", "--sweep", "--kernels",
                          "sm90_pingpong_128x128x64", "--dtypes", "bf16", "--m", "384", "--calls", "2", "--repeats",
                          "1", "--table", str(table), "--json", str(report)], capture_output=True, text=True,
                         timeout=900, env=env)
    assert out.returncode == 0, out.stderr + out.stdout
    result = json.loads(report.read_text())
    assert result["failures"] == []
    for cell in {(r["n"], r["k"]) for r in result["rows"]}:
        rows = [r for r in result["rows"] if (r["n"], r["k"]) == cell]
        plan = next(r for r in rows if r["path"] == "DenseMatmulPlan")
        chosen = plan["note"].split()[0]
        swept = {r["path"].removeprefix("sweep ") for r in rows if r["path"].startswith("sweep ")}
        assert swept <= {"sm90_pingpong_128x128x64_bf16_bf16", chosen} and chosen in swept, (cell, swept)
    entries = json.loads(table.read_text())["entries"]
    assert len(entries) == 4 and all(e[4] == 384 for e in entries)
    assert "--kernels sm90_pingpong_128x128x64" in json.loads(table.read_text())["command"]
