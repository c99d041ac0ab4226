"""One CUDA graph per device: concurrent captures, one thread per stream."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..errors import ContractError

if TYPE_CHECKING:
    from ..graph import Graph
    from ..runtime import Stream

__all__ = ["capture_each"]

R = TypeVar("R")


def capture_each(streams: Sequence[Stream], resources: R, enqueue: Callable[[int, R], object]) -> list[Graph[R]]:
    """Capture ``enqueue(i, resources)`` on ``streams[i]`` for every ``i``, each capture in its own
    thread, all at once; return the graphs (``graphs[i]`` launches on ``streams[i]``).

    Why threads: NCCL collectives in a capture may wait on the host for the other ranks (their first
    call connects them), so the ranks of one process are captured concurrently, each thread driving
    its own communicator (NCCL's one-thread-per-rank model; no group needed). ``enqueue(i, ...)``
    must enqueue work on ``streams[i]`` only (and streams it forks and joins back). Each graph holds
    the buffers reachable from ``resources`` (see :meth:`Stream.capture`).

    Raises:
        ContractError: ``streams`` is empty or holds something else than Streams; the same stream twice.
        CaptureError: a capture failed (the first failure is raised; the graphs that were made are
            closed).
    """
    from ..runtime import Stream

    if isinstance(streams, (str, bytes)) or not isinstance(streams, Sequence) or not streams:
        raise ContractError("streams", "a non-empty sequence of Streams", repr(streams)[:80])
    for i, s in enumerate(streams):
        if not isinstance(s, Stream):
            raise ContractError(f"streams[{i}]", "a mircuda Stream", type(s).__name__)
        if any(s is t for t in streams[:i]):
            raise ContractError(f"streams[{i}]", "a stream not listed before", repr(s))
    if not callable(enqueue):
        raise ContractError("enqueue", "a callable enqueue(index, resources)", type(enqueue).__name__)
    graphs: list[Graph[R] | None] = [None] * len(streams)
    errors: list[BaseException | None] = [None] * len(streams)

    def run(i: int) -> None:
        try:
            graphs[i] = streams[i].capture(resources, lambda res: enqueue(i, res))
        except BaseException as exc:  # raised in the calling thread below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), name=f"mircuda-capture-{i}") for i in range(len(streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        for g in graphs:
            if g is not None:
                g.close()
        raise failed
    return [g for g in graphs if g is not None]


