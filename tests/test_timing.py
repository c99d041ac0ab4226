"""mircuda.timing without a GPU: the host loop's structure, the bank count, the spin kernel's source."""

from __future__ import annotations

import pytest

import mircuda as mc
from mircuda.timing import SPIN_SOURCE, Spin, bank_count, host_us_per_call


def test_the_host_loop_discards_warmup_and_keeps_hooks_outside_the_timed_calls() -> None:
    log: list[str] = []
    out = host_us_per_call(lambda: log.append("run"), lambda: log.append("sync"), 3, 4, warmup=2,
                           before=lambda: log.append("before"), after=lambda: log.append("after"))
    assert len(out) == 4 and all(v >= 0 for v in out)
    batch = ["sync", "before", "run", "run", "run", "after"]
    assert log == batch * 6 + ["sync"]


def test_the_host_loop_without_hooks_or_warmup() -> None:
    calls: list[int] = []
    out = host_us_per_call(lambda: calls.append(1), lambda: None, 5, 2, warmup=0)
    assert len(out) == 2 and len(calls) == 10


@pytest.mark.parametrize("calls, batches, warmup, bad", [(0, 1, 1, "calls"), (1, 0, 1, "batches"),
                                                         (1, 1, -1, "warmup"), (1.5, 1, 1, "calls")])
def test_the_host_loop_refuses_bad_counts_before_running(calls, batches, warmup, bad) -> None:
    ran: list[int] = []
    with pytest.raises(mc.ContractError) as info:
        host_us_per_call(lambda: ran.append(1), lambda: ran.append(2), calls, batches, warmup=warmup)
    assert info.value.argument == bad and ran == []


def test_bank_count_covers_eight_times_the_l2() -> None:
    mib = 1 << 20
    assert bank_count(32 * mib, 50 * mib) == 13  # ceil(400 / 32)
    assert bank_count(32 * mib, 50 * mib, factor=2) == 4  # ceil(100 / 32)
    assert bank_count(1 << 40, mib) == 2  # never fewer than two
    assert bank_count(0, 10) == 80  # an empty bank counts as one byte


@pytest.mark.parametrize("arch", ["sm_90a", "sm_120f"])
def test_the_spin_kernel_compiles_for_hopper_and_blackwell(arch: str) -> None:
    program = mc.OfflineCompiler(arch).compile(SPIN_SOURCE)
    assert program.image[:4] == b"\x7fELF"
    assert Spin.symbol == "mircuda_spin" and Spin.names == ("nanoseconds",)
