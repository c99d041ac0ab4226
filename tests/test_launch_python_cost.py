"""benchmarks/launch_python_cost.py runs on a machine without a GPU (in a subprocess: it repoints the C
extension's entry points at its no-op driver) and writes every row and piece it prints; no timing is
checked."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "launch_python_cost.py"


def _extension_binds() -> bool:
    if importlib.util.find_spec("mircuda._hotpath") is None:
        return False
    from mircuda import _hotpath  # type: ignore[attr-defined]

    return hasattr(_hotpath, "bind_launch")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) for the no-op driver")
@pytest.mark.skipif(not _extension_binds(), reason="the C extension was not built with bind_launch")
def test_the_benchmark_runs_and_writes_its_rows(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--calls", "20", "--batches", "2", "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["cpu"] and result["unit"].startswith("ns per launch")
    rows = result["ns_per_launch"]
    assert "C floor: a C loop calling the no-op cuLaunchKernel" in rows
    for kernel in ("empty(p)", "seven(y, w, x, alpha, beta, n, k)"):
        assert f"this checkout: TypedKernel.launch, {kernel}" in rows
    assert "this checkout, no C extension (ctypes): TypedKernel.launch, empty(p)" in rows
    old = "main (git): TypedKernel.launch, empty(p)"
    assert old in rows or "main (git) generated launch" in result["unavailable"]  # a checkout without git history
    pieces = [p["piece"] for p in result["breakdown"]["this checkout, empty"]]
    assert pieces[-2:] == ["entry point call (bound launcher: thread, config, slot writes, driver): _L", "result test"]
    assert len(result["c_call"]) == 5
