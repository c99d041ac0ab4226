"""``benchmarks/cutlass_pdl_ab.py`` (the CUTLASS kernels without and with programmatic dependent launch) without a GPU:
every flag is refused in one line while the command line is parsed, before a device is asked; the default cells are
the recorded A/B's; the summary counts as the recorded one does."""

from __future__ import annotations

import ctypes.util
import json
from pathlib import Path

import pytest

from tests.benchmark_script import load_benchmark, run_benchmark

RECORD = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "cutlass_pdl_ab.json"


@pytest.mark.parametrize("args, said", [
    (("--cells", "64x4096"), "argument --cells: expected comma-separated MxNxK cells of positive ints"),
    (("--cells", "0x4096x4096"), "argument --cells: expected comma-separated MxNxK cells of positive ints"),
    (("--cells", "64x4100x4096"), "argument --cells: expected N and K multiples of 8"),
    (("--cells", "64x4096x4096,64x4096x4096"), "argument --cells: expected each value once"),
    (("--cells", "99999999999999999999999x8x8"), "argument --cells: 99999999999999999999999x8x8: argument 'm': "
                                                 "expected a dimension below"),
    (("--dtypes", "e4m3"), "argument --dtypes: expected comma-separated items of bf16, f16"),
    (("--rounds", "0"), "argument --rounds"),
    (("--json", "/nonexistent-dir/ab.json"), "'/nonexistent-dir' is not a directory"),
])
def test_a_bad_flag_is_refused_before_the_gpu(args, said) -> None:
    out = run_benchmark("cutlass_pdl_ab", *args)
    assert out.returncode == 2 and said in out.stderr, out.stderr[-300:]
    assert "Traceback" not in out.stderr


def test_the_default_cells_are_the_recorded_ones_and_the_summary_recounts() -> None:
    script = load_benchmark("cutlass_pdl_ab")
    record = json.loads(RECORD.read_text())
    cells = script.cell_values(script.CELLS)
    assert cells == [(r["m"], r["n"], r["k"]) for r in record["rows"]]
    recount = script.summarize(record["rows"])
    assert {key: recount[key] for key in record["summary"]} == record["summary"]


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is installed: it would measure")
def test_without_a_gpu_it_says_so_in_one_line(tmp_path) -> None:
    out = run_benchmark("cutlass_pdl_ab", "--cells", "64x4096x4096", "--json", str(tmp_path / "ab.json"))
    assert out.returncode == 2 and "cutlass_pdl_ab: needs a CUDA GPU: " in out.stderr, out.stderr[-300:]
    assert "Traceback" not in out.stderr and not (tmp_path / "ab.json").exists()
