"""``python -m mircuda decoder-layer-profile`` on the device: it runs, checks every graph's four outputs, and a
wrong product makes it exit 1 (in subprocesses: the command makes its own context)."""

from __future__ import annotations

import json
import subprocess
import sys

QUICK = ["--m", "1,8", "--sets", "2", "--calls", "2", "--repeats", "1"]


def _run(argv: list[str], code: str = "") -> subprocess.CompletedProcess[str]:
    child = code + "import sys, mircuda.cli as cli; sys.exit(cli.main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", child, "decoder-layer-profile", *argv], capture_output=True,
                          text=True, timeout=600)


def test_the_layer_graph_runs_and_is_checked(tmp_path) -> None:
    out = _run([*QUICK, "--json", str(tmp_path / "layer.json")])
    assert out.returncode == 0, out.stderr + out.stdout
    result = json.loads((tmp_path / "layer.json").read_text())
    assert result["weight_bytes"] == 436_207_616 and result["weight_sets"] == 2 and result["failures"] == []
    paths = {(r["path"], r["m"]) for r in result["rows"]}
    for m in (1, 8):
        assert {("mircuda graph (4 plans, PDL)", m), ("mircuda graph (4 plans, PDL), single", m),
                ("mircuda direct (4 executes)", m), ("mircuda, the four alone, summed", m),
                ("  gate_up 28672x4096 alone", m), ("mircuda graph, layers chained, per layer", m),
                ("mircuda graph, static_weights=True", m)} <= paths
    graph = [r for r in result["rows"] if r["path"] == "mircuda graph (4 plans, PDL)"]
    assert all(r["us"] > 0 and r["tbps"] > 0 for r in graph)
    assert "dense_vector" in graph[0]["note"] and "batched_gemv" in graph[1]["note"]
    assert "PDL on 4/4 launches" in graph[0]["note"]  # the NVRTC kernels launch with PDL on cc >= 9.0 (H200)


def test_a_wrong_product_fails_the_run(tmp_path) -> None:
    """Every execute with alpha = 2 (patched in the child): the graphs' outputs are twice the reference."""
    patch = ("import mircuda as mc; _execute = mc.DenseMatmulPlan.execute; "
             "mc.DenseMatmulPlan.execute = lambda self, s, a, b, c, alpha=1.0, beta=0.0: _execute(self, s, a, b, c, "
             "2.0, beta)\n")
    out = _run(["--m", "1", "--sets", "2", "--calls", "1", "--repeats", "1", "--json", str(tmp_path / "w.json")],
               patch)
    assert out.returncode == 1, out.stderr + out.stdout
    failures = json.loads((tmp_path / "w.json").read_text())["failures"]
    # 2 graphs x 4 projections, as many with static_weights=True, then the chained graph's 2 layers x 4 (each
    # layer its own outputs)
    assert len(failures) == 24 and all("relative error" in f for f in failures)
    assert sum(f.startswith("static_weights graph of set ") for f in failures) == 8
    assert sum(f.startswith("chained graph, layer 0 (weight set 0), M=1 ") for f in failures) == 4
    assert sum(f.startswith("chained graph, layer 1 (weight set 1), M=1 ") for f in failures) == 4
