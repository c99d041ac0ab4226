"""benchmarks/launch_overhead.py's per-round verdict without a GPU: each round's ratio divides the path's
median by the floor measured in that round, so drift between rounds does not decide the ratio."""

from __future__ import annotations

import pytest
from benchmark_script import load_benchmark


def test_each_round_is_compared_with_its_own_floor() -> None:
    round_ratios = load_benchmark("launch_overhead").round_ratios
    # the floor doubles between rounds and the path with it: the ratio is the same in both rounds
    assert round_ratios([2.0, 4.0], [[2.2, 2.4, 2.3], [4.6, 4.4, 4.8]]) == pytest.approx([1.15, 1.15])
    # a round without a floor or without samples (a path that failed) is left out
    assert round_ratios([None, 3.0, 3.0], [[1.0], [], [3.3]]) == pytest.approx([1.1])
    assert round_ratios([], []) == []


def test_the_round_robin_keeps_each_rounds_samples_with_its_floor(monkeypatch) -> None:
    bench = load_benchmark("launch_overhead")
    floors = iter([2.0, 4.0])
    samples = {"fast": iter([[2.2, 2.2], [4.4, 4.4]]), "slow": iter([[3.0], [6.0]])}
    monkeypatch.setattr(bench, "build_c_floor", lambda tmp, cubin: ["floor"])
    monkeypatch.setattr(bench, "c_floor", lambda cmd, calls, batches: next(floors))
    monkeypatch.setattr(bench, "run_child",
                        lambda name, calls, batches, script: next(samples[name]) if name in samples else "no such path")
    rows, floor, unavailable, by_round = bench.round_robin("script", ["fast", "slow", "gone"], b"", 1, 1, 2)
    assert floor == 3.0 and unavailable == {"gone": "no such path"}
    assert dict(rows) == pytest.approx({"C, driver API cuLaunchKernel (the floor)": 3.0, "fast": 3.3, "slow": 4.5})
    assert by_round == {"fast": pytest.approx([1.1, 1.1]), "slow": pytest.approx([1.5, 1.5])}
