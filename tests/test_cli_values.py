"""The argparse ``type=`` helpers of ``mircuda.cli._values`` that the benchmark scripts share."""

from __future__ import annotations

import argparse

import pytest

from mircuda.cli._values import distinct, distinct_ints


def test_distinct_ints_takes_decimal_integers_in_range_each_once() -> None:
    assert distinct_ints("4,2,-1", range(-1, 5), "values in -1..4") == [4, 2, -1]
    for bad, said in [("1_6", "comma-separated integers"), (" 4", "comma-separated integers"), ("", "comma-separated"),
                      ("4,,2", "comma-separated integers"), ("5", "expected values in -1..4"),
                      ("2,2", "expected each value once")]:
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            distinct_ints(bad, range(-1, 5), "values in -1..4")


def test_distinct_refuses_a_repeated_value_of_any_kind() -> None:
    assert distinct([(1, 2), (2, 1)], "1x2,2x1") == [(1, 2), (2, 1)]
    with pytest.raises(argparse.ArgumentTypeError, match="received '1x2,1x2'"):
        distinct([(1, 2), (1, 2)], "1x2,1x2")
