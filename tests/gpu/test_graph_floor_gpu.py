"""graph-profile's C floor on the device: launch_floor.c built with nvcc replays a graph of N tick kernels
and the device counts every node; the profile's JSON has the floor's rows and Graph.launch's ratio to them
(skipped where nvcc is not found: the floor is then reported as not measured, tested on the CPU)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import mircuda as mc
from mircuda.cli import _graph_floor, _graph_profile


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory, driver: mc.Driver) -> _graph_floor.CFloor:
    arch = driver.devices()[0].info().arch
    cubin = mc.compile_program(mc.cuda_kernel(_graph_profile._source_text(), "graph_profile.cu"), arch).image
    try:
        return _graph_floor.build(tmp_path_factory.mktemp("floor"), cubin, "tick", 0)
    except _graph_floor.FloorUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("nodes", [1, 10, 100])
def test_the_c_floor_replays_every_node(floor: _graph_floor.CFloor, nodes: int) -> None:
    run = floor.run(nodes, 7, 3)
    assert run.counter == _graph_floor.expected_count(nodes, 7, 3) == nodes * 7 * 6
    assert run.host_us > 0


def test_the_c_floor_launch_loop_counts_too(floor: _graph_floor.CFloor) -> None:
    run = floor.run(0, 11, 2)  # NODES = 0: cuLaunchKernel per call
    assert run.counter == 11 * 5 and run.host_us > 0


def test_graph_profile_reports_the_floor_and_the_ratio(floor: _graph_floor.CFloor, tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "graph-profile", "--sizes", "1,10", "--calls", "20",
                          "--batches", "3", "--samples", "2", "--rounds", "2", "--json", str(tmp_path / "g.json")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr + out.stdout
    result = json.loads((tmp_path / "g.json").read_text())
    assert result["failures"] == [] and _graph_floor.FLOOR_NAME not in result["skipped"]
    rows = {(r["library"], r["kernels"]): r for r in result["rows"]}
    for n in (1, 10):
        c = rows[(_graph_floor.FLOOR_NAME, n)]
        assert c["graph_host_us"] > 0 and "graph_device_us" not in c and c["graph_host_ratio_to_c_floor"] == 1.0
        m = rows[("mircuda", n)]
        assert m["graph_host_ratio_to_c_floor"] == round(m["graph_host_us"] / c["graph_host_us"], 3)
        assert result["graph_launch_ratio_to_c_floor"][str(n)] == m["graph_host_ratio_to_c_floor"]
    assert "× C floor" in out.stdout and "Graph.launch ÷ the C floor's cuGraphLaunch" in out.stdout
