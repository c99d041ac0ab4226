"""benchmarks/launch_breakdown.py without a GPU: its prefixes cover the generated launch function exactly,
and its stand-in mode runs (in a subprocess: it repoints the C extension's entry points)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from benchmark_script import load_benchmark

import mircuda as mc
from mircuda.launch import LAUNCH_ABIS
from mircuda.launch._kernel import TypedKernel

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "launch_breakdown.py"


def _module():  # type: ignore[no-untyped-def]
    return load_benchmark("launch_breakdown")


class _Context:
    _closed, _handle, handle = True, 1, 1


def _launch_function(contract):  # type: ignore[no-untyped-def]
    k = object.__new__(TypedKernel)
    k._contract, k._abi, k._handle, k._context = contract, LAUNCH_ABIS["c"], 0x40, _Context()
    k._config_dims = lambda c: (*c.grid, *c.block, c.shared_mem_bytes)
    k._owner = threading.get_ident()
    k._thread_launchers = {}
    return k._generate(k._owner)


def test_the_prefixes_end_with_the_whole_function() -> None:
    lb = _module()
    fn = _launch_function(lb.Seven)
    header, groups = lb.statement_groups(fn.__mircuda_source__)
    assert header + "\n" + "\n".join(line for g in groups for line in g) + "\n" == fn.__mircuda_source__
    steps = lb.prefixes(fn)
    assert len(steps) == len(groups) + 1
    labels = [label for label, _ in steps]
    assert labels[0].startswith("Python call") and labels[-2].startswith("entry point call")
    assert labels[-1] == "result test"
    for name in ("y", "w", "x"):  # the values the bound launcher writes
        assert f"buffer argument {name}: identity tests + value" in labels
    for name in ("alpha", "beta", "n", "k"):
        assert f"scalar argument {name}: type/range test + value" in labels
    last = steps[-1][1]
    assert last.__code__.co_names == fn.__code__.co_names  # the same statements, plus a `pass`


@pytest.mark.skipif(importlib.util.find_spec("mircuda._hotpath") is None, reason="the C extension was not built")
def test_the_stand_in_mode_runs(tmp_path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--stand-in", "--calls", "50", "--batches", "2", "--json",
                          str(tmp_path / "b.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["mircuda"] == str(Path(mc.__file__).parent)
    sections = result["sections"]
    assert set(sections) == {"typed launch, empty(float*)", "typed launch, seven(y, w, x, alpha, beta, n, k)",
                             "Graph.launch (stand-in nodes)", "entry points alone"}
    empty = sections["typed launch, empty(float*)"]
    assert [r["piece"] for r in empty][-2:] == ["entry point call (bound launcher: thread, config, slot writes, driver): _L",
                                               "result test"]
