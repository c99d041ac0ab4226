"""Device timing of back-to-back work on one stream, and cold-weight banks.

Method (the one ``PERFORMANCE.md``'s reference figures use): a spin kernel holds the stream while the
host enqueues ``calls`` executions back to back, so the host's per-call cost never starves the GPU;
two events around the executions give the device time; the median over repeats is reported.
Weights are rotated over banks totalling at least 8x the L2 cache, so every call reads them from HBM.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..compile import CudaSource
from ..dtypes import u64
from ..launch import LaunchConfig, cuda_export

if TYPE_CHECKING:
    from ..runtime import Context, Stream

__all__ = ["StreamTimer", "bank_count"]

SPIN = CudaSource(r"""
extern "C" __global__ void mircuda_spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
""", "mircuda_spin.cu")
Spin = cuda_export("mircuda_spin", nanoseconds=u64)


def bank_count(bank_bytes: int, l2_bytes: int, factor: int = 8) -> int:
    """Banks of ``bank_bytes`` whose total is at least ``factor`` x ``l2_bytes`` (and at least 2)."""
    return max(2, -(-factor * l2_bytes // max(1, bank_bytes)))


class StreamTimer:
    """Device time per call of work enqueued back to back on ``stream`` (see the module docstring)."""

    _MIN_SPIN_NS = 2_000_000
    _MAX_SPIN_NS = 1_000_000_000

    def __init__(self, context: Context, stream: Stream) -> None:
        from ._vector import shared_compiler

        self._stream = stream
        self._spin = shared_compiler(context).compile(SPIN).kernel(Spin)
        self._one = LaunchConfig(1, 32)
        self._start = context.create_event(timing=True)
        self._end = context.create_event(timing=True)
        self._spin_ns = self._MIN_SPIN_NS

    def measure(self, enqueue: Callable[[int], None], calls: int = 50, repeats: int = 15) -> list[float]:
        """Run ``enqueue(i)`` for i in range(calls) ``repeats`` times (plus one warm-up); return the
        device microseconds per call of each repeat.

        ``enqueue`` must only enqueue work on the timer's stream (it may not synchronize).
        """
        from ..runtime import Event

        samples: list[float] = []
        r = retries = 0
        while r <= repeats:
            self._spin.launch(self._stream, self._one, self._spin_ns)
            self._start.record(self._stream)
            t0 = time.perf_counter()
            for i in range(calls):
                enqueue(i)
            host_ns = (time.perf_counter() - t0) * 1e9
            self._end.record(self._stream)
            self._end.synchronize()
            # The spin must outlast the host's enqueueing, or the device waits on the host and the
            # repeat measures the host: such a repeat is done again with a longer spin. The spin
            # follows the last repeat (a one-off stall, such as a first call, does not slow the rest).
            starved = host_ns > 0.8 * self._spin_ns
            self._spin_ns = int(min(max(self._MIN_SPIN_NS, 2 * host_ns), self._MAX_SPIN_NS))
            if starved and retries < 3:
                retries += 1
                continue
            if r:
                samples.append(Event.elapsed_ms(self._start, self._end) * 1e3 / calls)
            r += 1
        return samples

    def median(self, enqueue: Callable[[int], None], calls: int = 50, repeats: int = 15) -> float:
        """The median of :meth:`measure`, in microseconds per call."""
        return statistics.median(self.measure(enqueue, calls, repeats))

    def close(self) -> None:
        self._start.close()
        self._end.close()
