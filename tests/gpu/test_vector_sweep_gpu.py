"""``dense-vector-profile --sweep`` on the device: every configuration compiles, launches, is checked (poisoned
output first) and timed; the plan's own configuration is among them (in a subprocess: the command makes its
own context)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_sweep_checks_and_times_every_configuration(tmp_path) -> None:
    path = tmp_path / "sweep.json"
    out = subprocess.run([sys.executable, "-m", "mircuda", "dense-vector-profile", "--sweep", "--shapes", "1000x2048",
                          "--dtypes", "bf16", "--calls", "2", "--repeats", "1", "--json", str(path)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr + out.stdout
    result = json.loads(path.read_text())
    assert result["failures"] == []
    swept = [r for r in result["rows"] if r["path"].startswith("dense_vector ")]
    assert 40 <= len(swept) <= 48 and all(r["us"] > 0 for r in swept)
    assert sum("(DenseVectorPlan's choice)" in r["note"] for r in swept) == 1
