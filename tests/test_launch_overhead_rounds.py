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
