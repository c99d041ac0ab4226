"""graph-profile's C floor row without a GPU: building it (unavailable without nvcc, outside a source
checkout, or when nvcc fails: a reason, never a failed profile), reading its output, one round of it
(a wrong device count is a failure; a failed run drops the floor), and the report's ratios to it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from mircuda.cli import _graph_floor, _graph_profile
from mircuda.cli._graph_floor import FLOOR_NAME, FloorRun, FloorUnavailable
from mircuda.errors import CutlassNotFound
from mircuda.matmul import _build


def no_nvcc(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Path:
        raise CutlassNotFound("nvcc was not found: install the CUDA toolkit")
    monkeypatch.setattr(_build, "_find_nvcc", missing)


def test_without_nvcc_the_floor_is_unavailable_with_the_reason(monkeypatch, tmp_path) -> None:
    no_nvcc(monkeypatch)
    with pytest.raises(FloorUnavailable, match="^no nvcc: nvcc was not found"):
        _graph_floor.build(tmp_path, b"image", "tick", 0)
    assert list(tmp_path.iterdir()) == []


def test_setup_floor_records_the_reason_in_skipped(monkeypatch, tmp_path) -> None:
    no_nvcc(monkeypatch)  # the tick kernel itself compiles (NVRTC needs no GPU); the build stops at nvcc
    skipped: dict[str, str] = {}
    assert _graph_profile._setup_floor(str(tmp_path), _graph_profile._source_text(), "sm_90", 0, skipped) is None
    assert skipped == {FLOOR_NAME: "no nvcc: nvcc was not found: install the CUDA toolkit"}


def test_outside_a_source_checkout_the_floor_is_unavailable(tmp_path) -> None:
    with pytest.raises(FloorUnavailable, match="missing.c is missing: the C floor runs from a source checkout"):
        _graph_floor.build(tmp_path, b"image", "tick", 0, source=tmp_path / "missing.c")
    assert _graph_floor.SOURCE.is_file()  # this checkout has it where the module looks


def test_a_failing_nvcc_is_unavailable_with_its_last_line(monkeypatch, tmp_path) -> None:
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'compiling' \necho '/usr/bin/ld: cannot find -lcuda' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(_build, "_find_nvcc", lambda: fake)
    with pytest.raises(FloorUnavailable, match="^nvcc failed with status 1: /usr/bin/ld: cannot find -lcuda$"):
        _graph_floor.build(tmp_path, b"image", "tick", 0)


def test_a_built_floor_has_its_cubin_and_command(monkeypatch, tmp_path) -> None:
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setattr(_build, "_find_nvcc", lambda: fake)
    floor = _graph_floor.build(tmp_path, b"\x7fELF image", "tick", 3)
    assert floor.cubin.read_bytes() == b"\x7fELF image"
    assert floor.command(100, 200, 20) == [str(tmp_path / "launch_floor"), str(tmp_path / "tick.cubin"), "tick",
                                           "200", "20", "100", "3"]


@pytest.mark.parametrize("text, want", [("1.3800\ncounter 460000\n", FloorRun(1.38, 460000)),
                                        ("0.0000\ncounter 0\n", FloorRun(0.0, 0))])
def test_parse_output(text: str, want: FloorRun) -> None:
    assert _graph_floor.parse_output(text) == want


@pytest.mark.parametrize("text", ["1.38\n", "1.38\ncount 5\n", "x\ncounter 5\n", "1.38\ncounter 5.5\n",
                                  "nan\ncounter 5\n", "-1\ncounter 5\n", "1.38\ncounter 5\nextra\n", ""])
def test_unexpected_output_is_refused(text: str) -> None:
    with pytest.raises(FloorUnavailable, match="launch_floor printed"):
        _graph_floor.parse_output(text)


def test_expected_count_includes_the_warmup_batches_and_wraps_like_the_counter() -> None:
    assert _graph_floor.expected_count(100, 200, 20) == 100 * 200 * 23 == 460000
    assert _graph_floor.expected_count(1, 2**30 + 1, 1) == 4  # (2**30 + 1) x 4 batches, modulo 2**32


class FakeFloor:
    """Stands in for a built CFloor: returns ``runs`` in turn, or raises FloorUnavailable once they run out."""

    def __init__(self, runs: list[FloorRun]) -> None:
        self.runs, self.calls = runs, []  # type: ignore[var-annotated]

    def run(self, nodes: int, calls: int, batches: int) -> FloorRun:
        self.calls.append((nodes, calls, batches))
        if not self.runs:
            raise FloorUnavailable("launch_floor exited with status 1: cuGraphLaunch(exec, stream) failed: X")
        return self.runs.pop(0)


ARGS = argparse.Namespace(calls=4, batches=2, samples=1, rounds=1)


def test_a_round_adds_each_n_and_checks_the_count() -> None:
    fake = FakeFloor([FloorRun(1.2, _graph_floor.expected_count(1, 4, 2)), FloorRun(1.5, 7)])
    host: dict[tuple[str, int, str], list[float]] = {}
    skipped: dict[str, str] = {}
    failures: list[str] = []
    assert _graph_profile._floor_round(fake, [1, 10], ARGS, host, skipped, failures) is fake  # type: ignore[arg-type]
    assert fake.calls == [(1, 4, 2), (10, 4, 2)]
    assert host == {(FLOOR_NAME, 1, "graph"): [1.2], (FLOOR_NAME, 10, "graph"): [1.5]}
    assert skipped == {} and failures == [f"{FLOOR_NAME}: N = 10: the device counted 7 kernels, 200 were enqueued"]


def test_a_failed_run_drops_the_floor_and_its_samples() -> None:
    fake = FakeFloor([FloorRun(1.2, 20), FloorRun(1.5, 200), FloorRun(1.25, 20)])
    host: dict[tuple[str, int, str], list[float]] = {("mircuda", 1, "graph"): [1.6]}
    skipped: dict[str, str] = {}
    failures: list[str] = []
    floor: Any = fake
    floor = _graph_profile._floor_round(floor, [1, 10], ARGS, host, skipped, failures)
    floor = _graph_profile._floor_round(floor, [1, 10], ARGS, host, skipped, failures)  # fails at N = 10
    assert floor is None and host == {("mircuda", 1, "graph"): [1.6]} and failures == []
    assert skipped == {FLOOR_NAME: "launch_floor exited with status 1: cuGraphLaunch(exec, stream) failed: X"}
    assert _graph_profile._floor_round(None, [1], ARGS, host, skipped, failures) is None


def report(tmp_path: Path, host: dict[tuple[str, int, str], list[float]], skipped: dict[str, str]) -> dict[str, Any]:
    device = {k: [2.0] for k in host if k[0] != FLOOR_NAME}
    names = ([FLOOR_NAME] if (FLOOR_NAME, 1, "graph") in host else []) + ["mircuda", "CuPy"]
    args = argparse.Namespace(rounds=1, batches=2, samples=1, calls=4, json=str(tmp_path / "g.json"))
    assert _graph_profile._report(args, [1, 100], "H200", "sm_90", names, host, device, skipped, [], "test") == 0
    result: dict[str, Any] = json.loads((tmp_path / "g.json").read_text())
    return result


def samples(floor: bool) -> dict[tuple[str, int, str], list[float]]:
    host = {("mircuda", 1, "direct"): [2.0], ("mircuda", 1, "graph"): [1.5], ("mircuda", 100, "direct"): [200.0],
            ("mircuda", 100, "graph"): [1.6, 1.8, 1.7], ("CuPy", 1, "graph"): [3.0], ("CuPy", 100, "graph"): [3.4]}
    if floor:
        host |= {(FLOOR_NAME, 1, "graph"): [1.2, 1.0, 1.3], (FLOOR_NAME, 100, "graph"): [1.36]}
    return host


def test_the_report_gives_graph_launch_over_the_c_floor_per_n(tmp_path, capsys) -> None:
    result = report(tmp_path, samples(floor=True), {})
    rows = {(r["library"], r["kernels"]): r for r in result["rows"]}
    c1 = rows[(FLOOR_NAME, 1)]
    assert c1["graph_host_us"] == 1.2 and "graph_device_us" not in c1 and "direct_host_us" not in c1
    assert c1["graph_host_ratio_to_c_floor"] == 1.0 and c1["note"] == _graph_floor.note("sm_90")
    assert rows[("mircuda", 1)]["graph_host_ratio_to_c_floor"] == 1.25
    assert rows[("mircuda", 100)]["graph_host_ratio_to_c_floor"] == 1.25  # 1.7 / 1.36
    assert rows[("CuPy", 100)]["graph_host_ratio_to_c_floor"] == 2.5
    assert result["graph_launch_ratio_to_c_floor"] == {"1": 1.25, "100": 1.25}
    out = capsys.readouterr().out
    assert "× C floor" in out and "CUBIN for sm_90 by NVRTC" in out
    assert "Graph.launch ÷ the C floor's cuGraphLaunch: N = 1: 1.25, N = 100: 1.25" in out
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("mircuda ")] == ["1.25", "1.25"]


def test_without_the_floor_the_report_says_why_and_has_no_ratios(tmp_path, capsys) -> None:
    why = "no nvcc: nvcc was not found: install the CUDA toolkit"
    result = report(tmp_path, samples(floor=False), {FLOOR_NAME: why})
    assert result["skipped"] == {FLOOR_NAME: why} and result["graph_launch_ratio_to_c_floor"] == {}
    assert all("graph_host_ratio_to_c_floor" not in r for r in result["rows"])
    assert {r["library"] for r in result["rows"]} == {"mircuda", "CuPy"}
    out = capsys.readouterr().out
    assert f"{FLOOR_NAME}: not measured ({why})" in out and "÷ the C floor" not in out
