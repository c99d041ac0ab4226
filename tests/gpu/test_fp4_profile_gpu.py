"""``python -m mircuda fp4-profile`` on the GPU, on small shapes: every path it measures is checked against
float64 by the command itself (a wrong result exits 1 and is listed under ``failures``); here the run
must pass, fill the columns that can run on this machine and write one JSON row per (shape, M). No
timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_probe import cutlass_unavailable_reason

SHAPES = "384x1040,1000x2048"
"""N = 1000: no multiple of the kernels' row blocks; K = 1040: a multiple of 16, not of 32, 64 or 128."""


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["fp4", "bf16"])
def test_a_small_profile_passes_its_own_checks(context, tmp_path: Path, activation: str) -> None:
    out = tmp_path / "fp4.json"
    run = subprocess.run([sys.executable, "-m", "mircuda", "fp4-profile", "--m", "1,2,16,32", "--shapes", SHAPES,
                          "--activation", activation, "--calls", "2", "--repeats", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failures"] == [] and result["activation"] == activation
    rows = result["rows"]
    assert [(r["n"], r["k"], r["m"]) for r in rows] == [(n, k, m) for n, k in ((384, 1040), (1000, 2048))
                                                        for m in (1, 2, 16, 32)]
    cc = context.device_info().compute_capability
    cutlass = cutlass_unavailable_reason() is None
    torch_cuda = importlib.util.find_spec("torch") is not None and "torch unavailable" not in " ".join(result["notes"])
    for r in rows:
        runs = r["m"] <= 16 or cutlass
        assert (r["fp4_us"] is not None) == runs and (r["bf16_us"] is not None) == runs, r
        if r["m"] <= 16:
            integer_m2 = r["m"] == 2 and r["k"] % 32 == 0 and cc[0] < 10  # the integer path's default at M = 2
            assert r["fp4_path"] == ("vector" if r["m"] == 1 else
                                     f"gemv {'fp4_mma_bf16' if activation == 'fp4' and not integer_m2 else 'fp4_matvec_bf16'}")
        else:
            assert (r["fp4_path"] != "") == runs
        assert (r["dense_f32_us"] is not None) == (r["fp4_path"] == "decode+dense")
        assert ("decode+dense (epilogue=folded)" in r["note"]) == (r["fp4_path"] == "decode+dense")
        if (cc >= (8, 9) and r["m"] <= 16) or (cc == (9, 0) and runs):  # SM90 FP8 CUTLASS takes K % 128 != 0
            assert r["fp8_us"] is not None, r
        if torch_cuda:
            assert r["cublas_us"] is not None, r
    assert "fp4-profile: all checks passed" in run.stdout
