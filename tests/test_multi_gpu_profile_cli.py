"""multi-gpu-profile without a device: flags checked first, NCCL's bus-bandwidth formulas, the sweep and
the table; and the profile's processes keep NVLink multicast off."""

from __future__ import annotations

import re

import pytest

from mircuda.cli import main
from mircuda.cli._multi_gpu_profile import (LLAMA_PROJECTIONS, Row, bus_bandwidth, sizes_for, table)
from mircuda.cli._multi_gpu_torch import MULTICAST_OFF


@pytest.mark.parametrize("flags, head", [
    (["--m", "1,x"], ""),
])
def test_flags_are_checked_before_the_driver(flags: list[str], head: str, capsys: pytest.CaptureFixture[str],
                                             tmp_path) -> None:
    code = None
    try:
        code = main(["multi-gpu-profile", "--json", str(tmp_path / "r.json"), *flags])
    except SystemExit as exc:  # argparse's own refusal (--m)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: ContractError: {head}" if head else "error: python -m mircuda multi-gpu-profile")


def test_bus_bandwidth_follows_nccl_tests_formulas() -> None:
    # 1 GB in 1 ms: algbw 1000 GB/s. all-reduce: x 2(n-1)/n; all-gather: x (n-1)/n.
    assert bus_bandwidth("all_reduce", 10**9, 1000.0, 2) == pytest.approx(1000.0)
    assert bus_bandwidth("all_reduce", 10**9, 1000.0, 4) == pytest.approx(1500.0)
    assert bus_bandwidth("all_gather", 10**9, 1000.0, 2) == pytest.approx(500.0)
    assert bus_bandwidth("all_gather", 10**9, 1000.0, 8) == pytest.approx(875.0)


def test_the_sweeps_cover_8_kib_to_1_gib() -> None:
    full = sizes_for(False)
    assert full[0] == 8 << 10 and full[-1] == 1 << 30 and list(full) == sorted(full)
    assert all(b % 4 == 0 for b in full)  # bf16 elements, split over 2 ranks
    quick = sizes_for(True)
    assert quick == (8 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20)


def test_llama_projections_and_the_table() -> None:
    assert {name: (n, k) for name, n, k, _ in LLAMA_PROJECTIONS} == {
        "qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
    assert 2 * sum(n * k for _, n, k, _ in LLAMA_PROJECTIONS) == 436_207_616  # the 436 MB of bf16
    text = str(table([Row("b", "mircuda.nccl", "all_reduce", 1 << 20, 0, 45.9, 22.8, 1.05),
                      Row("c", "2 devices TP (graph/device)", "llama3-8b 4 proj", 436_207_616, 16, 70.0, 6231.5, 1.7)]))
    assert "1 MiB" in text and "45.90" in text and "1.05" in text and "1.70" in text


def test_multicast_stays_off_in_every_process() -> None:
    assert MULTICAST_OFF == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                             "NVSHMEM_DISABLE_NVLS": "1"}


def test_goals_report_each_target_as_measured() -> None:
    from mircuda.cli._multi_gpu_profile import _goals

    rows = [Row("a", "mircuda Stream.copy_peer", "GPU0->GPU1", 1 << 30, 0, 2700.0, 396.0, 1.0),
            Row("a", "mircuda copy_peer sm push", "GPU0->GPU1", 1 << 30, 0, 2600.0, 413.0, 1.05),
            Row("a", "mircuda copy_peer sm pull", "GPU0->GPU1", 1 << 30, 0, 2800.0, 383.0, 0.97),
            Row("b", "mircuda.nccl", "all_reduce", 1 << 20, 0, 40.0, 26.2, 1.15),
            Row("b", "mircuda.nccl", "all_gather", 1 << 20, 0, 30.0, 17.5, 0.9),
            Row("b", "mircuda.nccl in graphs", "all_reduce", 8 << 10, 0, 7.5, 1.1),
            Row("b", "mircuda.nccl in graphs", "all_reduce", 64 << 10, 0, 11.0, 6.0),
            Row("b", "mircuda.nccl in graphs, symmetric", "all_reduce", 8 << 10, 0, 3.3, 2.5),
            Row("c", "2 devices TP (graph/device)", "llama3-8b 4 proj", 436_207_616, 1, 70.0, 6231.5, 1.68),
            Row("c", "2 devices TP symmetric", "llama3-8b 4 proj", 436_207_616, 1, 65.0, 6710.9, 1.81),
            Row("c", "2 devices TP NCCL_PROTO=LL128", "llama3-8b 4 proj", 436_207_616, 1, 80.0, 5452.6, 1.47),
            Row("c", "2 devices GEMVs only", "llama3-8b 4 proj", 436_207_616, 1, 56.0, 7789.4, 2.1),
            Row("c", "2 devices TP (graph/device)", "llama3-8b 4 proj", 436_207_616, 2048, 900.0, 484.7, 1.9)]
    goals = _goals(rows)
    assert goals[0] == ("peer copy 1 GiB: 413 GB/s (mircuda copy_peer sm push), goal >= 400: met; "
                        "mircuda Stream.copy_peer 396; mircuda copy_peer sm pull 383")
    assert goals[1] == "collectives vs torch.distributed busbw: 1/2 >= 1.0x; worst 0.90x (all_gather 1 MiB)"
    assert goals[2] == "all-reduce in graphs 8-64 KiB: 8 KiB 7.5 µs, 64 KiB 11.0 µs; goal <= 10 µs: 1/2 met"
    assert goals[3] == "all-reduce in graphs, symmetric 8-64 KiB: 8 KiB 3.3 µs; goal <= 10 µs: 1/1 met"
    assert goals[4] == "Llama-3-8B projections M=1: 1.68x one device, goal >= 1.6x: met"
    assert goals[5] == "Llama-3-8B projections M=1 (symmetric): 1.81x one device, goal >= 1.6x: met"
    assert goals[6] == "Llama-3-8B projections M=1 (NCCL_PROTO=LL128): 1.47x one device, goal >= 1.6x: NOT met"
    assert goals[7] == ("Llama-3-8B projections M=1, GEMVs only (no all-reduce): 56.0 µs, 2.10x one device "
                        "(the floor of the TP rows)")
    assert goals[8] == "Llama-3-8B projections M=2048: 1.90x one device"
    assert len(goals) == 9


def test_tp_nccl_variants_parse_and_refuse_by_name() -> None:
    import argparse

    from mircuda.cli._multi_gpu_profile import DEFAULT_TP_NCCL, tp_nccl_variant, tp_nccl_variants

    assert tp_nccl_variant("NCCL_PROTO=LL") == (("NCCL_PROTO", "LL"),)
    assert tp_nccl_variant(" NCCL_PROTO=LL,LL128  NCCL_ALGO=Ring ") == (("NCCL_PROTO", "LL,LL128"), ("NCCL_ALGO", "Ring"))
    assert tp_nccl_variant("none") == ()
    for bad, words in (("", "NAME=VALUE settings or 'none'"), ("NCCL_PROTO", "NAME=VALUE settings separated"),
                       ("NCCL_PROTO=", "NAME=VALUE settings separated"), ("NCCL_NVLS_ENABLE=1", "NVLS stays off"),
                       ("NCCL_ALGO=NVLS", "NCCL_ALGO=<a comma-separated list of Ring, Tree>"),
                       ("NCCL_PROTO=LL,ll128", "NCCL_PROTO=<a comma-separated list of LL, LL128, Simple>"),
                       ("NCCL_MAX_CTAS=2", "a variable among NCCL_PROTO, NCCL_ALGO"),
                       ("NCCL_PROTO=LL NCCL_PROTO=Simple", "each variable once")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(words)):
            tp_nccl_variant(bad)
    assert tp_nccl_variants(None) == [tp_nccl_variant(v) for v in DEFAULT_TP_NCCL]
    assert tp_nccl_variants([(), (("NCCL_PROTO", "LL"),), (("NCCL_PROTO", "LL"),)]) == [(("NCCL_PROTO", "LL"),)]


def test_tp_nccl_environment_is_set_for_the_block_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from mircuda.cli._multi_gpu_profile import _NcclEnvironment

    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.delenv("NCCL_PROTO", raising=False)
    with _NcclEnvironment((("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Ring"))):
        assert (os.environ["NCCL_PROTO"], os.environ["NCCL_ALGO"]) == ("LL", "Ring")
    assert "NCCL_PROTO" not in os.environ and os.environ["NCCL_ALGO"] == "Tree"


def test_tp_nccl_flag_reaches_the_parser() -> None:
    import argparse

    from mircuda.cli._multi_gpu_profile import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["multi-gpu-profile", "--tp-nccl", "NCCL_PROTO=LL", "--tp-nccl", "none"])
    assert args.tp_nccl == [(("NCCL_PROTO", "LL"),), ()]
    assert parser.parse_args(["multi-gpu-profile"]).tp_nccl is None
    with pytest.raises(SystemExit):
        parser.parse_args(["multi-gpu-profile", "--tp-nccl", "NCCL_NVLS_ENABLE=1"])
