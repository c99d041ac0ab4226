"""mircuda.timing.StreamTimer on the device: what it enqueues, what it returns, how it refuses misuse."""

from __future__ import annotations

import pytest

import mircuda as mc
from mircuda.timing import StreamTimer, spin_kernel


def test_the_timer_runs_every_call_of_every_repeat_and_returns_one_sample_per_repeat(
        context: mc.Context, stream: mc.Stream, compiler: mc.Compiler) -> None:
    kernel = spin_kernel(compiler)
    one = mc.LaunchConfig(1, 32)
    seen: list[int] = []

    def enqueue(i: int) -> None:
        seen.append(i)
        kernel.launch(stream, one, 2_000)

    with StreamTimer(context, stream, compiler) as timer:
        samples = timer.measure(enqueue, calls=5, repeats=3)
        median = timer.median(enqueue, calls=5, repeats=3)
    assert len(samples) == 3 and all(s > 0 for s in samples)
    assert median > 0
    # One warm-up repeat, three timed ones, and at most three per call retried for a longer spin.
    assert len(seen) % 5 == 0 and 2 * 4 * 5 <= len(seen) <= 2 * 7 * 5
    assert seen[:5] == [0, 1, 2, 3, 4]


def test_the_timer_refuses_bad_counts_and_use_after_close(context: mc.Context, stream: mc.Stream) -> None:
    timer = StreamTimer(context, stream)
    for calls, repeats, bad in ((0, 1, "calls"), (1, 0, "repeats")):
        with pytest.raises(mc.ContractError) as info:
            timer.measure(lambda i: None, calls=calls, repeats=repeats)
        assert info.value.argument == bad
    timer.close()
    timer.close()  # idempotent
    with pytest.raises(mc.ClosedResourceError):
        timer.measure(lambda i: None, calls=1, repeats=1)
    stream.synchronize()
