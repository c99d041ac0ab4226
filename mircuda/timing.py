"""Timing work on a stream: device time per call behind a spin kernel, host time per call, cold-weight banks.

Method (the one ``PERFORMANCE.md``'s reference figures and the ``python -m mircuda`` profiles use):

- **Device time** (:class:`StreamTimer`): a spin kernel holds the stream while the host enqueues
  ``calls`` executions back to back, so the host's per-call cost never starves the GPU; two events
  around the executions give the device time; the median over repeats is reported.
- **Host time** (:func:`host_us_per_call`): batches of calls timed with ``time.perf_counter``, the
  stream synchronized between batches, the first batches discarded as warm-up.
- **Cold weights** (:func:`bank_count`): weights are rotated over banks totalling at least 8x the L2
  cache, so every call reads them from HBM rather than L2.

Results go into a :class:`ResultTable` (defined in ``mircuda._repr``, exported here): the aligned
text table the profiles print, and an HTML table in Jupyter.

Nothing here is asserted on: timings are reported, never checked by tests.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._repr import Column, ResultTable
from .compile import Compiler, CudaSource
from .dtypes import u64
from .errors import ContractError
from .launch import LaunchConfig, cuda_export

if TYPE_CHECKING:
    from .launch import TypedKernel
    from .runtime import Context, Stream

__all__ = ["SPIN_SOURCE", "Column", "ResultTable", "Spin", "StreamTimer", "bank_count", "host_us_per_call",
           "spin_kernel"]

SPIN_SOURCE = CudaSource(r"""
// Waits `nanoseconds` of the GPU's global timer (%globaltimer, ns). Enqueued before a timed region, it keeps
// the device busy while the host enqueues the region, so events around the region time the device's
// back-to-back execution rather than the host's enqueue rate. __nanosleep (sm_70+) leaves the SM's issue
// slots to other work; the wait may overshoot by about a microsecond, which falls before the timed region.
extern "C" __global__ void mircuda_spin(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
""", "mircuda_spin.cu")
"""The one spin kernel of mircuda's timing (launched with 1 block of 32 threads)."""

Spin = cuda_export("mircuda_spin", nanoseconds=u64)
"""The spin kernel's contract: ``nanoseconds`` (u64) to wait."""


def spin_kernel(compiler: Compiler) -> TypedKernel:
    """The spin kernel compiled and loaded by ``compiler`` (cached by the compiler's module cache).

    Launch it with ``LaunchConfig(1, 32)`` and the wait in nanoseconds.
    """
    return compiler.compile(SPIN_SOURCE).kernel(Spin)


def bank_count(bank_bytes: int, l2_bytes: int, factor: int = 8) -> int:
    """How many weight banks of ``bank_bytes`` bytes make at least ``factor`` x ``l2_bytes`` in total
    (at least 2), so that rotating over them reads every bank from HBM, not L2.

    ``l2_bytes`` is the device's L2 size (``DeviceInfo.l2_cache_bytes``).
    """
    return max(2, -(-factor * l2_bytes // max(1, bank_bytes)))


def host_us_per_call(run: Callable[[], object], sync: Callable[[], object], calls: int, batches: int,
                     warmup: int = 1, before: Callable[[], object] | None = None,
                     after: Callable[[], object] | None = None) -> list[float]:
    """Host microseconds per call of ``run``, one value per batch.

    Each of ``warmup + batches`` batches calls ``sync()`` (so every batch starts from an idle stream),
    then ``before()``, then ``run()`` ``calls`` times under ``time.perf_counter``, then ``after()``;
    the first ``warmup`` batches are discarded. ``sync()`` is called once more at the end.
    ``before``/``after`` lie outside the timed region (e.g. events recorded around each batch).

    Raises:
        ContractError: ``calls`` or ``batches`` below 1, or ``warmup`` below 0.
    """
    for name, value, least in (("calls", calls, 1), ("batches", batches, 1), ("warmup", warmup, 0)):
        if not isinstance(value, int) or value < least:
            raise ContractError(name, f"an integer >= {least}", repr(value))
    out: list[float] = []
    for b in range(warmup + batches):
        sync()
        if before is not None:
            before()
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        t1 = time.perf_counter()
        if after is not None:
            after()
        if b >= warmup:
            out.append((t1 - t0) / calls * 1e6)
    sync()
    return out


class StreamTimer:
    """Device microseconds per call of work enqueued back to back on one stream (see the module docstring).

    Args:
        context: the context of ``stream``.
        stream: the stream the timed work is enqueued on.
        compiler: compiles the spin kernel (default: a new ``Compiler(context)``).

    Holds two timing events and the spin kernel; :meth:`close` (or ``with``) releases the events.
    Example::

        with StreamTimer(context, stream) as timer:
            us = timer.median(lambda i: plan.execute(stream, x, weights[i % banks], y))
    """

    _MIN_SPIN_NS = 2_000_000
    _MAX_SPIN_NS = 1_000_000_000

    def __init__(self, context: Context, stream: Stream, compiler: Compiler | None = None) -> None:
        self._stream = stream
        self._spin = spin_kernel(compiler if compiler is not None else Compiler(context))
        self._one = LaunchConfig(1, 32)
        self._start = context.create_event(timing=True)
        self._end = context.create_event(timing=True)
        self._spin_ns = self._MIN_SPIN_NS

    def measure(self, enqueue: Callable[[int], object], calls: int = 50, repeats: int = 15) -> list[float]:
        """Run ``enqueue(i)`` for i in range(calls), ``repeats`` times (plus one warm-up); return the
        device microseconds per call of each repeat (``repeats`` floats).

        ``enqueue`` must only enqueue work on the timer's stream (it may not synchronize). Waits for
        the stream after each repeat (a host synchronization).

        Raises:
            ContractError: ``calls`` or ``repeats`` below 1.
        """
        from .runtime import Event

        for name, value in (("calls", calls), ("repeats", repeats)):
            if not isinstance(value, int) or value < 1:
                raise ContractError(name, "an integer >= 1", repr(value))
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

    def median(self, enqueue: Callable[[int], object], calls: int = 50, repeats: int = 15) -> float:
        """The median of :meth:`measure`, in device microseconds per call."""
        return statistics.median(self.measure(enqueue, calls, repeats))

    def close(self) -> None:
        """Release the timing events (idempotent)."""
        self._start.close()
        self._end.close()

    def __enter__(self) -> StreamTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
