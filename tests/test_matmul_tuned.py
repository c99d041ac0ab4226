"""DenseMatmulPlan's measured kernel table without a GPU: how an entry is found for a shape (nearest
measured N x K within a factor of 2, the largest measured M not above the plan's), when the selector
uses it and when it falls back to its rules, the ``splits=`` knob's checks, the sweep's candidates and
winners, and the table shipped in the package."""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import mircuda as mc
from mircuda.cli._matmul_sweep import SPLIT_CHOICES, candidates, winners
from mircuda.matmul._gemv import gemv_kernels
from mircuda.matmul._library import KernelInfo
from mircuda.matmul._select import MAX_SPLITS, select_kernel, split_k_slices
from mircuda.matmul._tuned import (TABLE_ENV, TABLE_FILES, TunedEntry, TunedTable, lookup, merge, packaged_table,
                                   parse_table, table_for)
from mircuda.matmul._vector import vector_kernels

H200 = ((9, 0), 132)
PAIRS = (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32"))
ROWS = [("sm90_coop_128x256x64_c2x1", "sm90_cooperative", (128, 256, 64), False),
        ("sm90_coop_128x128x64_streamk", "sm90_cooperative", (128, 128, 64), False),
        ("sm90_pingpong_64x128x64", "sm90_pingpong", (64, 128, 64), False),
        ("sm90_pingpong_128x128x64", "sm90_pingpong", (128, 128, 64), False),
        ("sm90_swap_128x32x128_splitk", "sm90_swapped", (128, 32, 128), True),
        ("sm90_swap_128x64x128_splitk", "sm90_swapped", (128, 64, 128), True),
        ("sm90_swap_128x128x64_splitk", "sm90_swapped", (128, 128, 64), True),
        ("sm80_tensorop_128x128x32_4stage", "sm80_tensorop", (128, 128, 32), False),
        ("simt_128x128x8_2stage", "simt", (128, 128, 8), False)]


def library_table() -> list[KernelInfo]:
    """The SM90 dense kernels as the library reports them, listed in an order unlike the selector's
    preference (the new tiles first), so a selection that ignored tiles would show."""
    out = []
    for prefix, family, tile, split in reversed(ROWS):
        for i, o in PAIRS:
            archs = (90,) if family.startswith("sm90") else (90, 120)
            out.append(KernelInfo(len(out), f"{prefix}_{i}_{o}", family, i, o, tile, (1, 1), 0,
                                  2 if family == "simt" else 16, split, archs))
    return out


def entry(m, n=4096, k=4096, kernel="sm90_swap_128x64x128_splitk_bf16_bf16", splits=3, types=("bf16", "bf16")):
    return TunedEntry(types[0], types[1], n, k, m, kernel, splits, 10.0 + m / 100, 12.0)


def tuned(*entries, sms=132, cc=(9, 0)) -> TunedTable:
    return TunedTable("NVIDIA H200", cc, sms, "2026-12-01T09:00:00+00:00", "python -m mircuda matmul-profile --sweep",
                      tuple(entries))


def pick(m, n, k, table=None, splits=None, forced=None, output="bf16", device=H200):
    cc, sms = device
    kernels = [*vector_kernels(), *gemv_kernels(), *library_table()]
    return select_kernel(kernels, mc.DenseMatmulSpec(m, n, k), "bf16", output, cc, sms, forced, tuned=table,
                         splits=splits)


# -- lookup ------------------------------------------------------------------------------------
def test_lookup_takes_the_largest_measured_m_not_above_the_plans() -> None:
    rows = [entry(32, kernel="a"), entry(64, kernel="b"), entry(256, kernel="c")]
    assert lookup(rows, 32, 4096, 4096, "bf16", "bf16").kernel == "a"
    assert lookup(rows, 63, 4096, 4096, "bf16", "bf16").kernel == "a"
    assert lookup(rows, 64, 4096, 4096, "bf16", "bf16").kernel == "b"
    assert lookup(rows, 8192, 4096, 4096, "bf16", "bf16").kernel == "c"
    assert lookup(rows, 31, 4096, 4096, "bf16", "bf16") is None  # below every measured M: the rules decide


def test_lookup_takes_the_nearest_measured_shape_within_a_factor_of_two() -> None:
    rows = [entry(32, 4096, 4096, kernel="square"), entry(32, 14336, 4096, kernel="tall"),
            entry(32, 4096, 14336, kernel="deep")]
    assert lookup(rows, 32, 5120, 4096, "bf16", "bf16").kernel == "square"
    assert lookup(rows, 32, 28672, 4096, "bf16", "bf16").kernel == "tall"  # gate+up: 2x the measured N
    assert lookup(rows, 32, 4096, 11008, "bf16", "bf16").kernel == "deep"
    assert lookup(rows, 32, 1024, 4096, "bf16", "bf16") is None  # 4x below every measured N
    assert lookup(rows, 32, 4096, 65536, "bf16", "bf16") is None


def test_lookup_matches_the_types() -> None:
    rows = [entry(32, types=("bf16", "f32"), kernel="wide")]
    assert lookup(rows, 32, 4096, 4096, "bf16", "bf16") is None
    assert lookup(rows, 32, 4096, 4096, "bf16", "f32").kernel == "wide"


# -- the selector with a table -------------------------------------------------------------------
def test_the_selector_runs_the_measured_kernel_with_its_splits_on_the_measured_shape() -> None:
    s = pick(48, 4096, 4096, tuned(entry(48, splits=3)))
    assert s.kernel.name == "sm90_swap_128x64x128_splitk_bf16_bf16" and s.splits == 3
    assert "measured fastest on NVIDIA H200" in s.reason and "at M = 48 on this shape" in s.reason


def test_a_nearby_shape_takes_the_kernel_and_the_split_k_rules_slices() -> None:
    s = pick(48, 6144, 4096, tuned(entry(48, splits=3)))
    want = split_k_slices(mc.DenseMatmulSpec(48, 6144, 4096), s.kernel, 132)
    assert s.kernel.name == "sm90_swap_128x64x128_splitk_bf16_bf16" and s.splits == want != 3
    assert "nearest measured shape 4096x4096" in s.reason and "by the split-K rule" in s.reason


def test_another_sm_count_keeps_the_kernel_but_not_the_measured_splits() -> None:
    s = pick(48, 4096, 4096, tuned(entry(48, splits=3), sms=114))
    assert s.kernel.tile == (128, 64, 128)
    assert s.splits == split_k_slices(mc.DenseMatmulSpec(48, 4096, 4096), s.kernel, 132)


@pytest.mark.parametrize("why, table, m, n, k", [
    ("another compute capability", tuned(entry(48), cc=(12, 0)), 48, 4096, 4096),
    ("a kernel the library lacks", tuned(entry(48, kernel="sm90_swap_256x8x8_bf16_bf16")), 48, 4096, 4096),
    ("the batched GEMV above M = 32", tuned(entry(32, kernel="batched_gemv_bf16_bf16", splits=1)), 40, 4096, 4096),
    ("the 32-row batched GEMV above M = 32", tuned(entry(24, kernel="batched_gemv_rows32_bf16_bf16", splits=1)), 33,
     4096, 4096),
    ("the vector kernel above M = 1", tuned(entry(1, kernel="dense_vector_bf16_bf16", splits=1)), 2, 4096, 4096),
    ("a tensor-core kernel for K * 2 bytes not a multiple of 16", tuned(entry(48)), 48, 4096, 4100),
])
def test_the_rules_decide_when_the_table_has_nothing_that_runs(why, table, m, n, k) -> None:
    assert pick(m, n, k, table) == pick(m, n, k), why


def test_the_rules_name_their_sm90_tiles_whatever_the_library_order() -> None:
    # the library lists several tiles per family; without a table each rule takes its own tile
    assert pick(48, 4096, 4096).kernel.name == "sm90_swap_128x32x128_splitk_bf16_bf16"
    assert pick(256, 4096, 4096).kernel.name == "sm90_pingpong_64x128x64_bf16_bf16"
    assert pick(2048, 4096, 4096).kernel.name == "sm90_coop_128x256x64_c2x1_bf16_bf16"


def test_a_measured_nvrtc_kernel_is_taken_for_decode() -> None:
    s = pick(16, 4096, 4096, tuned(entry(16, kernel="batched_gemv_bf16_bf16", splits=1)))
    assert s.kernel.name == "batched_gemv_bf16_bf16" and s.splits == 1


@pytest.mark.parametrize("name", ["batched_gemv_bf16_bf16", "batched_gemv_rows32_bf16_bf16"])
def test_the_table_takes_the_batched_gemv_up_to_m_32(name) -> None:
    # the rules stop at M = 16; a measured entry at M = 24 holds up to the next measured M
    table = tuned(entry(24, kernel=name, splits=1))
    for m in (24, 29, 32):
        s = pick(m, 4096, 4096, table)
        assert s.kernel.name == name and "measured fastest" in s.reason
    assert pick(20, 4096, 4096, table) == pick(20, 4096, 4096)


# -- splits= ------------------------------------------------------------------------------------
def test_splits_override_the_rule_for_a_split_k_kernel() -> None:
    s = pick(32, 4096, 4096, splits=5)
    assert s.kernel.split_k and s.splits == 5 and "5 K slice(s) given by the caller" in s.reason
    forced = pick(64, 4096, 4096, forced="sm90_swap_128x128x64_splitk_bf16_bf16", splits=2)
    assert forced.kernel.tile == (128, 128, 64) and forced.splits == 2


@pytest.mark.parametrize("m, splits, expected", [
    (256, 2, "None: sm90_pingpong_64x128x64_bf16_bf16 does not split K"),
    (1, 2, "None: dense_vector_bf16_bf16 does not split K"),
    (32, 0, "1 to 32 K slices (32 K tiles of 128 for K = 4096)"),
    (32, 33, "1 to 32 K slices (32 K tiles of 128 for K = 4096)"),
    (32, 10**30, "1 to 32 K slices (32 K tiles of 128 for K = 4096)"),
    (32, np.int64(-1), "1 to 32 K slices (32 K tiles of 128 for K = 4096)"),
])
def test_splits_out_of_range_or_for_an_unsplit_kernel_are_refused(m, splits, expected) -> None:
    with pytest.raises(mc.ContractError) as e:
        pick(m, 4096, 4096, splits=splits)
    assert e.value.argument == "splits" and e.value.expected == expected and e.value.received == repr(splits)


@pytest.mark.parametrize("splits", [True, False, np.bool_(True), 1.5, 2.0, "2", np.float32(2.0), [2]])
def test_splits_that_are_not_integers_are_refused_by_the_selector(splits) -> None:
    # select_kernel checks splits itself: True and 2.0 are in the range 1..32 and "2" is not comparable
    with pytest.raises(mc.ContractError) as e:
        pick(32, 4096, 4096, splits=splits)
    assert e.value.argument == "splits" and e.value.received == repr(splits)
    assert e.value.expected == "None or a positive int (K slices of a split-K kernel)"


@pytest.mark.parametrize("splits", [np.int64(3), np.uint8(3), np.int32(3)])
def test_numpy_integer_splits_become_a_python_int(splits) -> None:
    s = pick(32, 4096, 4096, splits=splits)
    assert s.splits == 3 and type(s.splits) is int and s.reason.endswith("; 3 K slice(s) given by the caller")


def test_the_callers_splits_replace_only_the_slice_clause_of_the_reason() -> None:
    rule = pick(48, 4096, 4096)
    given = pick(48, 4096, 4096, splits=5)
    assert rule.reason.endswith(f"; {rule.splits} K slice(s)")
    assert given.reason == rule.reason[:-len(f"; {rule.splits} K slice(s)")] + "; 5 K slice(s) given by the caller"
    measured = pick(48, 4096, 4096, tuned(entry(48, splits=3)))
    again = pick(48, 4096, 4096, tuned(entry(48, splits=3)), splits=5)
    assert measured.reason.endswith("regenerates it); 3 K slice(s)")
    assert again.reason == measured.reason.replace("; 3 K slice(s)", "; 5 K slice(s) given by the caller")
    nearby = pick(48, 6144, 4096, tuned(entry(48, splits=3)), splits=5)
    assert nearby.reason.endswith("regenerates it); 5 K slice(s) given by the caller")


@pytest.mark.parametrize("splits", [0, -1, True, False, 1.5, 2.0, "2", np.int64(0), np.int8(-2), np.bool_(True)])
def test_the_plan_refuses_bad_splits_before_it_builds_anything(monkeypatch, splits) -> None:
    from mircuda.matmul import _dense

    def built(*args, **kwargs):
        raise AssertionError("the plan went past its argument checks")

    monkeypatch.setattr(_dense, "plan_stream", lambda stream, context: None)  # no device: context and stream pass
    for name in ("plan_compiler", "load_library", "select_kernel", "table_for"):
        monkeypatch.setattr(_dense, name, built)
    with pytest.raises(mc.ContractError) as e:
        mc.DenseMatmulPlan(None, None, mc.DenseMatmulSpec(32, 4096, 4096), splits=splits)  # type: ignore[arg-type]
    assert e.value.argument == "splits" and e.value.received == repr(splits)
    assert e.value.expected == "None or a positive int (K slices of a split-K kernel)"


def test_splits_are_bounded_by_the_k_tiles() -> None:
    with pytest.raises(mc.ContractError) as e:
        pick(32, 4096, 512, splits=5)
    assert e.value.expected == "1 to 4 K slices (4 K tiles of 128 for K = 512)"
    assert MAX_SPLITS == 32


# -- the sweep ----------------------------------------------------------------------------------
def names(cands):
    return [(k.name.rsplit("_", 2)[0], s) for k, s in cands]


def test_the_sweep_tries_decode_kernels_swapped_splits_and_tiles_by_m() -> None:
    kernels = [*vector_kernels(), *gemv_kernels(), *library_table()]
    one = names(candidates(kernels, 1, 4096, 4096, "bf16", "bf16", (9, 0), 132))
    assert ("dense_vector", None) in one and ("batched_gemv", None) in one
    assert not any(n.startswith(("sm90_coop", "sm90_pingpong", "sm80", "simt")) for n, _ in one)
    sixteen = names(candidates(kernels, 16, 4096, 4096, "bf16", "bf16", (9, 0), 132))
    assert ("batched_gemv", None) in sixteen and ("dense_vector", None) not in sixteen
    mid = names(candidates(kernels, 256, 4096, 4096, "bf16", "bf16", (9, 0), 132))
    assert {"sm90_coop_128x256x64_c2x1", "sm90_coop_128x128x64_streamk", "sm90_pingpong_64x128x64",
            "sm90_pingpong_128x128x64"} <= {n for n, s in mid if s is None}
    big = names(candidates(kernels, 2048, 4096, 4096, "bf16", "bf16", (9, 0), 132))
    assert not any(n.startswith("sm90_swap") for n, _ in big)  # above MAX_SWAPPED_M


def test_from_m_17_to_32_the_sweep_tries_both_batched_gemvs_beside_every_cutlass_tile() -> None:
    kernels = [*vector_kernels(), *gemv_kernels(), *library_table()]
    for m in (17, 32):
        cands = [(k.name, s) for k, s in candidates(kernels, m, 4096, 4096, "bf16", "bf16", (9, 0), 132)]
        assert ("batched_gemv_bf16_bf16", None) in cands and ("batched_gemv_rows32_bf16_bf16", None) in cands
        assert ("sm90_pingpong_64x128x64_bf16_bf16", None) in cands
    above = [k.family for k, _ in candidates(kernels, 33, 4096, 4096, "bf16", "bf16", (9, 0), 132)]
    assert "batched_gemv" not in above


def test_kernels_keeps_the_listed_prefixes_beside_the_plans_own_choice() -> None:
    kernels = [*vector_kernels(), *gemv_kernels(), *library_table()]
    every = candidates(kernels, 256, 4096, 4096, "bf16", "bf16", (9, 0), 132)
    listed = candidates(kernels, 256, 4096, 4096, "bf16", "bf16", (9, 0), 132, only=("sm90_pingpong_",),
                        keep=("sm90_coop_128x256x64_c2x1_bf16_bf16", 1))
    assert [k.name for k, _ in listed] == ["sm90_coop_128x256x64_c2x1_bf16_bf16"] + [
        k.name for k, _ in every if k.name.startswith("sm90_pingpong_")]
    # a split-K choice is kept with its own slices, once, even where the listed ones hold the kernel already
    split = candidates(kernels, 32, 4096, 4096, "bf16", "bf16", (9, 0), 132, only=("sm90_swap_128x32x128",),
                       keep=("sm90_swap_128x32x128_splitk_bf16_bf16", 5))
    assert names(split).count(("sm90_swap_128x32x128_splitk", 5)) == 1
    assert {s for _, s in split} >= set(s for k, s in every if k.name.startswith("sm90_swap_128x32x128"))
    # without a list, the plan's choice changes nothing
    assert candidates(kernels, 256, 4096, 4096, "bf16", "bf16", (9, 0), 132, keep=("batched_gemv_bf16_bf16", 1)) \
        == every


def test_kernels_prefixes_parse_and_are_checked_against_the_library(capsys) -> None:
    import argparse
    from types import SimpleNamespace

    from mircuda.cli import _parser
    from mircuda.cli._matmul_profile import check_kernels_argument, kernel_prefixes, sweep_command

    assert kernel_prefixes("sm90_pingpong_64x96,batched_gemv") == ("sm90_pingpong_64x96", "batched_gemv")
    for bad in ("", "a,,b", "a,a", "Sm90", "sm90 x"):
        with pytest.raises(argparse.ArgumentTypeError):
            kernel_prefixes(bad)
    args = _parser().parse_args(["matmul-profile", "--sweep", "--kernels", "sm90_pingpong_64x96", "--m", "128"])
    assert args.kernels == ("sm90_pingpong_64x96",)
    lib = SimpleNamespace(kernels=library_table(), path="lib.so")
    h200 = SimpleNamespace(name="NVIDIA H200", compute_capability=(9, 0), multiprocessor_count=132)
    check_kernels_argument(("sm90_pingpong_", "batched_gemv_rows32"), lib, "bf16", [24, 128], h200)
    # misspelt, never run on cc 9.0 (sm80, simt: K and N are multiples of 16 bytes), of another type pair, or
    # never offered at these M (the batched GEMV above M = 32)
    for prefix, dtypes, ms in [("sm90_pingpong_64x97", "bf16", [128]), ("sm80_", "bf16", [128]),
                               ("simt", "bf16", [128]), ("sm90_pingpong_128x128x64_bf16_f32", "bf16", [128]),
                               ("batched_gemv", "bf16", [64, 128])]:
        with pytest.raises(mc.ContractError) as e:
            check_kernels_argument(("sm90_pingpong_", prefix), lib, dtypes, ms, h200)
        assert e.value.argument == "--kernels" and e.value.received == repr(prefix), prefix
    check_kernels_argument(("sm90_pingpong_128x128x64_bf16_f32",), lib, "bf16,bf16->f32", [128], h200)
    recorded_args = SimpleNamespace(dtypes="bf16", calls=20, repeats=7, device=0, kernels=("sm90_pingpong_64x96",))
    assert "--repeats 7 --kernels sm90_pingpong_64x96 --table t.json" in sweep_command(recorded_args, [128], "t.json")


def test_a_listed_kernel_replaces_an_entry_only_by_beating_the_plans_own_time() -> None:
    from mircuda.cli._matmul_profile import with_plan_row

    cell = {"input": "bf16", "output": "bf16", "n": 4096, "k": 4096, "m": 128, "cublas_us": 15.0}
    listed = [{**cell, "kernel": "sm90_pingpong_64x96x64_c2x1_bf16_bf16", "splits": 1, "us": 16.0}]
    # the plan's kernel gave no sweep row (refused with kernel=, or a failed check): its plan row stands for it
    rows = with_plan_row(listed, ("sm90_swap_pingpong_64x64x64_c2x1_bf16_bf16", 1, 14.8), cell)
    assert winners(rows, "NVIDIA H200", (9, 0), 132, "sweep").entries[0].kernel == \
        "sm90_swap_pingpong_64x64x64_c2x1_bf16_bf16"
    timed = [*listed, {**cell, "kernel": "sm90_swap_pingpong_64x64x64_c2x1_bf16_bf16", "splits": 1, "us": 14.9}]
    assert with_plan_row(timed, ("sm90_swap_pingpong_64x64x64_c2x1_bf16_bf16", 1, 14.8), cell) == timed


def test_kernels_without_the_sweep_exits_2_with_one_line(capsys, tmp_path) -> None:
    from mircuda.cli import main

    code = main(["matmul-profile", "--kernels", "batched_gemv", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and "--kernels" in err and "--sweep with it" in err and len(err.strip().splitlines()) == 1


def test_the_sweeps_split_counts_fit_the_k_tiles_and_the_sms() -> None:
    kernels = library_table()
    for m, n, k in ((32, 4096, 4096), (64, 14336, 4096), (128, 4096, 512)):
        for kernel, s in candidates(kernels, m, n, k, "bf16", "bf16", (9, 0), 132):
            if not kernel.split_k:
                continue
            tm, tn, tk = kernel.tile
            tiles = -(-n // tm) * -(-m // tn)
            rule = split_k_slices(mc.DenseMatmulSpec(m, n, k), kernel, 132)
            assert s is not None and s <= -(-k // tk)
            assert s == rule or (s in SPLIT_CHOICES and tiles * s <= 264)


def test_winners_keep_the_fastest_of_each_configuration() -> None:
    rows = [{"input": "bf16", "output": "bf16", "n": 4096, "k": 4096, "m": 32, "kernel": "x", "splits": 1,
             "us": 11.0, "cublas_us": 12.0},
            {"input": "bf16", "output": "bf16", "n": 4096, "k": 4096, "m": 32, "kernel": "y", "splits": 4,
             "us": 9.5, "cublas_us": 12.0},
            {"input": "bf16", "output": "bf16", "n": 4096, "k": 4096, "m": 64, "kernel": "x", "splits": 2,
             "us": 13.0, "cublas_us": None}]
    table = winners(rows, "NVIDIA H200", (9, 0), 132, "cmd")
    assert [(e.m, e.kernel, e.splits, e.us) for e in table.entries] == [(32, "y", 4, 9.5), (64, "x", 2, 13.0)]
    again = parse_table(json.loads(json.dumps(table.to_json())))
    assert again == table


def test_winners_never_name_a_nondeterministic_reduction() -> None:
    # the stream-K entries with ReductionMode::Nondeterministic may differ in the last bits between runs: the fastest
    # deterministic kernel is the entry (H200 2026-12-03, bf16->f32 M = 128 on 4096x14336: 43.91 against 44.17 µs)
    rows = [{"input": "bf16", "output": "f32", "n": 4096, "k": 14336, "m": 128,
             "kernel": "sm90_coop_128x128x64_streamk_nd_swz1_bf16_f32", "splits": 1, "us": 43.91, "cublas_us": 38.0},
            {"input": "bf16", "output": "f32", "n": 4096, "k": 14336, "m": 128,
             "kernel": "sm90_swap_128x128x64_splitk_bf16_f32", "splits": 3, "us": 44.17, "cublas_us": 38.0}]
    (entry,) = winners(rows, "NVIDIA H200", (9, 0), 132, "cmd").entries
    assert (entry.kernel, entry.splits) == ("sm90_swap_128x128x64_splitk_bf16_f32", 3)


def test_the_packaged_table_names_no_nondeterministic_kernel() -> None:
    from mircuda.cli._matmul_sweep import NONDETERMINISTIC

    table = json.loads((Path(mc.__file__).parent / "matmul" / "tuned" / "sm90_dense.json").read_text())
    assert not [e for e in table["entries"] if NONDETERMINISTIC in e[5]]


# -- the table's form --------------------------------------------------------------------------
def good() -> dict:
    return tuned(entry(32)).to_json()


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d.pop("entries"), "the field 'entries' in t.json"),
    (lambda d: d.update(entries="zzz"), "entries as a list in t.json"),
    (lambda d: d.update(compute_capability=[9]), "compute_capability as [major, minor] in t.json"),
    (lambda d: d["entries"][0].pop(), "entries of 9 fields (input, output, n, k, m, kernel, splits, us, cublas_us) "
                                      "in t.json"),
    (lambda d: d["entries"][0].__setitem__(4, 0), "m as an int from 1 to 2147418111 in t.json"),
    (lambda d: d["entries"][0].__setitem__(2, 10**400), "n as an int from 1 to 2147418111 in t.json"),
    (lambda d: d["entries"][0].__setitem__(6, 1.5), "splits as an int from 1 to 32 in t.json"),
    (lambda d: d["entries"][0].__setitem__(6, 33), "splits as an int from 1 to 32 in t.json"),
    (lambda d: d["entries"][0].__setitem__(7, 10**400), "positive µs figures in t.json"),
    (lambda d: d.update(multiprocessors=2**40), "multiprocessors as an int from 1 to 1048576 in t.json"),
    (lambda d: d["entries"][0].__setitem__(7, -1.0), "positive µs figures in t.json"),
    (lambda d: d["entries"][0].__setitem__(5, 3), "input, output and kernel as strings in t.json"),
    (lambda d: d["entries"][0].__setitem__(7, True), "positive µs figures in t.json"),
    (lambda d: d["entries"][0].__setitem__(7, float("inf")), "positive µs figures in t.json"),
    (lambda d: d["entries"][0].__setitem__(8, -3.0), "positive µs figures in t.json"),
    (lambda d: d["entries"][0].__setitem__(8, False), "positive µs figures in t.json"),
    (lambda d: d["entries"][0].__setitem__(8, 0), "positive µs figures in t.json"),
    (lambda d: d.update(device=5), "device as a string in t.json"),
    (lambda d: d.update(date=None), "date as a string in t.json"),
])
def test_a_malformed_table_is_refused_by_field(edit, expected) -> None:
    data = good()
    edit(data)
    with pytest.raises(mc.ContractError) as e:
        parse_table(data, "t.json")
    assert e.value.argument == "table" and e.value.expected == expected


def _prefixes() -> set[str]:
    text = (Path(mc.__file__).parent / "cutlass_build" / "src" / "instance.cuh").read_text()
    # MIRCUDA_PREFIX and the scheduler variants' MIRCUDA_PREFIX_SWZ1, _FORCED_SWZ1, _ND_SWZ1
    return set(re.findall(r'#define MIRCUDA_PREFIX\w* "([a-z0-9_]+)"', text))


def test_the_packaged_table_parses_and_names_kernels_the_build_makes() -> None:
    path = resources.files("mircuda.matmul").joinpath("tuned").joinpath(TABLE_FILES[(9, 0)])
    if not path.is_file():
        pytest.skip("no measured table is packaged yet")
    table = packaged_table((9, 0))
    assert table is not None and table.compute_capability == (9, 0) and table.entries
    prefixes = _prefixes()
    nvrtc = {k.name for k in (*vector_kernels(), *gemv_kernels())}
    for e in table.entries:
        assert e.kernel in nvrtc or any(e.kernel == p + f"{e.input}_{e.output}" for p in prefixes), e
        assert e.kernel.endswith(f"_{e.input}_{e.output}")
        assert np.isfinite(e.us) and e.us > 0
    # one winner per configuration
    keys = [(e.input, e.output, e.n, e.k, e.m) for e in table.entries]
    assert len(keys) == len(set(keys))


def test_merge_keeps_the_configurations_the_new_sweep_did_not_measure() -> None:
    old = tuned(entry(32, kernel="old32"), entry(64, kernel="old64"), entry(32, types=("f16", "f16"), kernel="f"))
    new = TunedTable("NVIDIA H200", (9, 0), 132, "2026-12-02", "sweep bf16", (entry(32, kernel="new32"),))
    both = merge(old, new)
    assert [(e.input, e.m, e.kernel) for e in both.entries] == [("bf16", 32, "new32"), ("bf16", 64, "old64"),
                                                                 ("f16", 32, "f")]
    assert both.command == f"{old.command} ; sweep bf16" and both.date == "2026-12-02"
    # a command line already recorded is not repeated, whichever table it comes from
    again = merge(both, TunedTable("NVIDIA H200", (9, 0), 132, "2026-12-03", f"sweep f16 ; {old.command}",
                                   (entry(48, kernel="again"),)))
    assert again.command == f"{old.command} ; sweep bf16 ; sweep f16"
    assert merge(again, again).command == again.command
    with pytest.raises(mc.ContractError) as e:
        merge(old, tuned(entry(32), sms=114))
    assert e.value.argument == "table"


def test_writing_a_table_merges_into_the_one_already_there(tmp_path) -> None:
    from mircuda.cli._matmul_profile import write_table

    path = tmp_path / "t.json"
    write_table(str(path), tuned(entry(32, kernel="a"), entry(64, kernel="b")))
    write_table(str(path), tuned(entry(64, kernel="c")))
    table = parse_table(json.loads(path.read_text()))
    assert [(e.m, e.kernel) for e in table.entries] == [(32, "a"), (64, "c")]


@pytest.mark.parametrize("text, expected", [("{", "a measured table (JSON) to merge into, or a new file"),
                                            ("[]", "a JSON object in")])
def test_a_bad_table_to_merge_into_is_refused_before_the_gpu(tmp_path, capsys, text, expected) -> None:
    from mircuda.cli import main

    path = tmp_path / "t.json"
    path.write_text(text)
    code = main(["matmul-profile", "--sweep", "--table", str(path), "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert path.read_text() == text


def _bad_tables() -> list:
    wrong = good()
    wrong["entries"][0].pop()
    return [(b"\xff\xfe\x00 not text", "can't decode byte 0xff"),
            (b"", "Expecting value"),
            (b"[]", "a JSON object in"),
            (b'{"a": 1}', "the field 'compute_capability' in"),
            (json.dumps(wrong).encode(), "entries of 9 fields")]


@pytest.mark.parametrize("content, reason", _bad_tables())
def test_a_table_that_cannot_be_merged_into_exits_2_naming_the_flag_and_is_left_as_it_was(
        tmp_path, capsys, content, reason) -> None:
    from mircuda.cli import main

    path = tmp_path / "t.json"
    path.write_bytes(content)
    code = main(["matmul-profile", "--sweep", "--table", str(path), "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ContractError: --table: expected a measured table (JSON) to merge into, or a new "
                          f"file, received {str(path)!r}") and reason in err
    assert path.read_bytes() == content and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("where, expected", [("missing/t.json", "a file path in an existing directory"),
                                             ("", "a file path in an existing directory")])
def test_a_table_path_that_cannot_be_written_exits_2_naming_the_flag(tmp_path, capsys, where, expected) -> None:
    from mircuda.cli import main

    path = tmp_path / where  # "": the directory itself
    code = main(["matmul-profile", "--sweep", "--table", str(path), "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: ContractError: --table: expected {expected}")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("spelling", ["same", "dot", "link"])
def test_the_table_and_the_report_cannot_be_one_file(tmp_path, capsys, monkeypatch, spelling) -> None:
    # the report (--json) is written after the table: it would replace the sweep's winners
    from mircuda.cli import main

    monkeypatch.chdir(tmp_path)
    table = tmp_path / "t.json"
    text = json.dumps(good())
    table.write_text(text)
    report = {"same": str(table), "dot": "./t.json", "link": str(tmp_path / "l.json")}[spelling]
    if spelling == "link":
        (tmp_path / "l.json").symlink_to(table)
    code = main(["matmul-profile", "--sweep", "--table", str(table), "--json", report])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ContractError: --table: expected a file other than --json's")
    assert len(err.strip().splitlines()) == 1 and table.read_text() == text
    fresh = tmp_path / "new.json"
    assert main(["matmul-profile", "--sweep", "--table", str(fresh), "--json", str(fresh)]) == 2
    assert "--table: expected a file other than --json's" in capsys.readouterr().err and not fresh.exists()


def test_a_table_of_another_device_kind_is_refused_before_the_sweep(tmp_path, capsys, monkeypatch) -> None:
    import contextlib
    from types import SimpleNamespace

    import mircuda.matmul
    from mircuda.cli import _matmul_profile as mp
    from mircuda.cli import main

    path = tmp_path / "t.json"
    text = json.dumps(tuned(entry(32), sms=114).to_json())  # an H100 PCIe's sweep, say
    path.write_text(text)
    swept = []

    class Session:
        info = SimpleNamespace(name="NVIDIA H200", compute_capability=(9, 0), multiprocessor_count=132)
        context = stream = pool = timer = torch_ = None

        def weights(self, *args):
            swept.append(args)
            raise AssertionError("the sweep started")

    monkeypatch.setattr(mc.Driver, "initialize", staticmethod(lambda: object()))
    monkeypatch.setattr(mircuda.matmul, "load_library", lambda: object())
    monkeypatch.setattr(mp, "session", lambda driver, device: contextlib.nullcontext(Session()))
    code = main(["matmul-profile", "--sweep", "--table", str(path), "--json", str(tmp_path / "r.json"), "--m", "32"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and swept == []
    assert err.startswith("error: ContractError: --table: expected a table of this device to merge into "
                          "(cc 9.0 with 132 SMs: NVIDIA H200)") and "cc 9.0 with 114 SMs" in err
    assert path.read_text() == text


def test_measured_splits_hold_only_at_the_measured_m() -> None:
    table = tuned(entry(32, kernel="sm90_swap_128x32x128_splitk_bf16_bf16", splits=4))
    at = pick(32, 4096, 4096, table)
    assert at.splits == 4 and at.reason.endswith("; 4 K slice(s)")
    between = pick(40, 4096, 4096, table)  # the M = 32 winner's kernel, the rule's slices for M = 40
    rule = split_k_slices(mc.DenseMatmulSpec(40, 4096, 4096), between.kernel, 132)
    assert between.kernel.tile == (128, 32, 128) and between.splits == rule
    assert between.reason.endswith(f"; {rule} K slice(s) by the split-K rule")


def test_tables_of_two_devices_do_not_merge() -> None:
    h200 = tuned(entry(32))
    h100 = TunedTable("NVIDIA H100 80GB HBM3", (9, 0), 132, "2026-12-02", "sweep", (entry(64),))
    with pytest.raises(mc.ContractError) as e:
        merge(h200, h100)
    assert e.value.argument == "table" and "NVIDIA H100 80GB HBM3" in e.value.expected and "NVIDIA H200" in e.value.received


def test_a_table_is_written_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    from mircuda.cli import _matmul_profile as mp

    path = tmp_path / "t.json"
    mp.write_table(str(path), tuned(entry(32, kernel="a")))
    before = path.read_text()
    real = mp.os.replace

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mp.os, "replace", full_disk)
    with pytest.raises(OSError):
        mp.write_table(str(path), tuned(entry(64, kernel="b")))
    assert path.read_text() == before  # the old table is whole
    monkeypatch.setattr(mp.os, "replace", real)
    mp.write_table(str(path), tuned(entry(64, kernel="b")))
    assert not (tmp_path / "t.json.partial").exists()
    assert [e.kernel for e in parse_table(json.loads(path.read_text())).entries] == ["a", "b"]


def test_a_bad_splits_is_said_even_without_the_cutlass_library(monkeypatch) -> None:
    from mircuda.matmul import _dense
    from mircuda.matmul._build import CutlassNotFound

    def missing():
        raise CutlassNotFound("no library here")

    monkeypatch.setattr(_dense, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_dense, "plan_compiler", lambda compiler, context: None)
    monkeypatch.setattr(_dense, "load_library", missing)
    monkeypatch.setattr(_dense, "table_for", lambda cc: None)
    context = SimpleNamespace(device_info=lambda: SimpleNamespace(compute_capability=(9, 0), multiprocessor_count=132))
    with pytest.raises(mc.ContractError) as e:  # M = 1 runs the vector kernel, which does not split K
        mc.DenseMatmulPlan(context, None, mc.DenseMatmulSpec(1, 4096, 4096), splits=2)  # type: ignore[arg-type]
    assert e.value.argument == "splits" and "does not split K" in e.value.expected
    with pytest.raises(CutlassNotFound):  # a CUTLASS kernel's M without the library: the library is what is missing
        mc.DenseMatmulPlan(context, None, mc.DenseMatmulSpec(64, 4096, 4096), splits=2)  # type: ignore[arg-type]


def test_the_table_records_the_sweeps_command_line_with_its_table_and_device() -> None:
    from types import SimpleNamespace

    from mircuda.cli._matmul_profile import sweep_command

    args = SimpleNamespace(dtypes="bf16->f32", calls=10, repeats=5, device=0)
    assert sweep_command(args, [24, 32], "t.json") == ("python -m mircuda matmul-profile --sweep --dtypes "
                                                       "'bf16->f32' --m 24,32 --calls 10 --repeats 5 --table t.json")
    assert sweep_command(args, [24], "my tables/t.json").endswith("--table 'my tables/t.json'")  # one shell word
    args.device = 1
    assert "--repeats 5 --device 1 --table t.json" in sweep_command(args, [24], "t.json")


# -- $MIRCUDA_DENSE_TABLE: a table of your own sweep, consulted instead of the packaged one ------------------------
def write(path, table: TunedTable):
    path.write_text(json.dumps(table.to_json()))
    return path


def test_without_the_variable_plans_consult_the_packaged_table(monkeypatch) -> None:
    monkeypatch.delenv(TABLE_ENV, raising=False)
    assert table_for((9, 0)) is packaged_table((9, 0))
    monkeypatch.setenv(TABLE_ENV, "")  # empty is unset
    assert table_for((9, 0)) is packaged_table((9, 0))
    if packaged_table((9, 0)) is not None:
        assert packaged_table((9, 0)).source == "mircuda/matmul/tuned/sm90_dense.json"


def test_the_variable_names_a_table_that_replaces_the_packaged_one_on_its_compute_capability(
        monkeypatch, tmp_path) -> None:
    mine = write(tmp_path / "h100.json", TunedTable("NVIDIA H100 80GB HBM3", (9, 0), 132, "2026-12-03", "sweep",
                                                    (entry(64, kernel="sm90_swap_128x64x128_splitk_bf16_bf16"),)))
    monkeypatch.setenv(TABLE_ENV, str(mine))
    table = table_for((9, 0))
    assert table is not None and table.device == "NVIDIA H100 80GB HBM3" and table.source == f"{mine} (${TABLE_ENV})"
    with pytest.warns(UserWarning, match="plans follow mircuda's own table for it"):
        assert table_for((12, 0)) is packaged_table((12, 0))  # another compute capability: its own table, if any
    chosen = pick(64, 4096, 4096, table=table)
    assert chosen.kernel.name == "sm90_swap_128x64x128_splitk_bf16_bf16" and chosen.splits == 3
    assert f"({mine} (${TABLE_ENV}); `matmul-profile --sweep --table` regenerates it)" in chosen.reason


def test_a_rewritten_table_is_read_again(monkeypatch, tmp_path) -> None:
    path = write(tmp_path / "t.json", tuned(entry(64, kernel="a")))
    monkeypatch.setenv(TABLE_ENV, str(path))
    assert [e.kernel for e in table_for((9, 0)).entries] == ["a"]
    write(path, tuned(entry(64, kernel="a"), entry(128, kernel="bb")))  # another size, whatever the clock
    assert [e.kernel for e in table_for((9, 0)).entries] == ["a", "bb"]


@pytest.mark.parametrize("content, expected, received", [
    (None, "the path of a measured table (`matmul-profile --sweep --table PATH` writes one)",
     "No such file or directory"),
    ("{not json", "a measured table (JSON in UTF-8)", "Expecting property name"),
    (bytes(range(256)), "a measured table (JSON in UTF-8)", "can't decode byte 0x80"),
    ("[" * 100000 + "]" * 100000, "a measured table (JSON in UTF-8)", "maximum recursion depth"),
    ('{"entries": []}', "the field 'compute_capability' in", "none"),
    ('[1, 2]', "a JSON object in", "list"),
])
def test_a_variable_that_names_no_table_is_refused_naming_it(monkeypatch, tmp_path, content, expected,
                                                            received) -> None:
    path = tmp_path / "t.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    monkeypatch.setenv(TABLE_ENV, str(path))
    with pytest.raises(mc.ContractError) as e:
        table_for((9, 0))
    assert e.value.argument == TABLE_ENV and e.value.expected.startswith(expected)
    assert repr(str(path)) in e.value.received or str(path) in e.value.expected
    assert received in e.value.received


def test_a_plan_says_a_bad_table_variable_before_it_looks_for_the_library(monkeypatch, tmp_path) -> None:
    from mircuda.matmul import _dense
    from mircuda.matmul._build import CutlassNotFound

    def missing():
        raise CutlassNotFound("no library here")

    monkeypatch.setattr(_dense, "plan_stream", lambda stream, context: None)
    monkeypatch.setattr(_dense, "plan_compiler", lambda compiler, context: None)
    monkeypatch.setattr(_dense, "load_library", missing)
    monkeypatch.setenv(TABLE_ENV, str(tmp_path / "absent.json"))
    context = SimpleNamespace(device_info=lambda: SimpleNamespace(compute_capability=(9, 0), multiprocessor_count=132))
    with pytest.raises(mc.ContractError) as e:
        mc.DenseMatmulPlan(context, None, mc.DenseMatmulSpec(64, 4096, 4096))  # type: ignore[arg-type]
    assert e.value.argument == TABLE_ENV


@pytest.mark.parametrize("where", ["directory", "fifo", "/dev/zero"])
def test_the_variable_must_name_a_regular_file(monkeypatch, tmp_path, where) -> None:
    # a FIFO would block the read and /dev/zero never end: only a regular file is opened
    path = {"directory": str(tmp_path), "/dev/zero": "/dev/zero"}.get(where, str(tmp_path / "fifo"))
    if where == "fifo":
        os.mkfifo(path)
    monkeypatch.setenv(TABLE_ENV, path)
    with pytest.raises(mc.ContractError) as e:
        table_for((9, 0))
    assert e.value.argument == TABLE_ENV and e.value.received == f"{path!r}: not a regular file"


def test_a_table_file_larger_than_the_limit_is_refused_unread(monkeypatch, tmp_path) -> None:
    from mircuda.matmul import _tuned

    path = write(tmp_path / "t.json", tuned(entry(64)))
    monkeypatch.setattr(_tuned, "MAX_TABLE_BYTES", path.stat().st_size - 1)
    monkeypatch.setenv(TABLE_ENV, str(path))
    with pytest.raises(mc.ContractError) as e:
        table_for((9, 0))
    assert e.value.argument == TABLE_ENV and e.value.received == f"{str(path)!r}: larger"
    assert _tuned.MAX_SPLITS is MAX_SPLITS  # an entry names no more slices than a caller may give: one constant


def test_a_file_changed_long_enough_ago_is_read_once_per_version(monkeypatch, tmp_path) -> None:
    from mircuda.matmul import _tuned

    path = write(tmp_path / "t.json", tuned(entry(64, kernel="a")))
    monkeypatch.setenv(TABLE_ENV, str(path))
    later = path.stat().st_ctime_ns + _tuned.RACY_NS + 1
    monkeypatch.setattr(_tuned.time, "time_ns", lambda: later)
    first = table_for((9, 0))
    assert table_for((9, 0)) is first  # the same version: not read again
    monkeypatch.setattr(_tuned.time, "time_ns", lambda: path.stat().st_ctime_ns)  # changed just now: read each time
    assert table_for((9, 0)) is not first and table_for((9, 0)) == first


def test_a_rewrite_of_the_same_size_and_modification_time_is_read_again(monkeypatch, tmp_path) -> None:
    # within one tick of the file clock the stamp may not move: a file changed this recently is read every time
    path = write(tmp_path / "t.json", tuned(entry(64, kernel="a")))
    before = path.stat()
    monkeypatch.setenv(TABLE_ENV, str(path))
    assert [e.kernel for e in table_for((9, 0)).entries] == ["a"]
    write(path, tuned(entry(64, kernel="b")))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the change time still moves
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert [e.kernel for e in table_for((9, 0)).entries] == ["b"]


def test_a_table_of_another_compute_capability_is_passed_over_with_a_warning(monkeypatch, tmp_path) -> None:
    path = write(tmp_path / "t.json", tuned(entry(64), cc=(12, 0)))
    monkeypatch.setenv(TABLE_ENV, str(path))
    with pytest.warns(UserWarning, match=r"names a table of compute capability 12\.0 .*on this device of compute "
                                         r"capability 9\.0 plans follow mircuda's own table for it, or the "
                                         r"selection rules where there is none"):
        assert table_for((9, 0)) is packaged_table((9, 0))
    assert table_for((12, 0)).source == f"{path} (${TABLE_ENV})"


def test_measured_splits_beyond_the_k_tiles_give_way_to_the_rule() -> None:
    # a table of another build may name more slices than this K has tiles of the kernel's K tile
    table = tuned(entry(64, k=512, splits=30))
    chosen = pick(64, 4096, 512, table=table)
    assert chosen.kernel.name == "sm90_swap_128x64x128_splitk_bf16_bf16"
    assert chosen.splits <= 512 // 128 and chosen.reason.endswith("by the split-K rule")
