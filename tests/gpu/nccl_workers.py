"""Process bodies of the multi-process NCCL tests (importable by spawned children: tests/gpu is on the
sys.path that multiprocessing's spawn hands them)."""

from __future__ import annotations

from typing import Any

import numpy as np


def all_reduce_rank(rank: int, size: int, unique_id: bytes, queue: Any) -> None:
    """Rank ``rank`` on device ``rank``: all-reduce (sum) of ``rank + 1 + arange(1024)`` in f32, plus a
    broadcast from rank 0, then put ``(rank, reduced, broadcast)`` (numpy arrays) or ``(rank, error)``."""
    try:
        import mircuda as mc
        import mircuda.nccl as nccl

        driver = mc.Driver.initialize()
        with driver.create_context(driver.device(rank)) as context:
            stream = context.create_stream()
            pool = context.default_memory_pool()
            comm = nccl.Communicator(rank, size, unique_id, context)
            x = stream.upload(pool, (rank + 1 + np.arange(1024)).astype(np.float32))
            y = pool.allocate(mc.f32, stream, 1024)
            comm.all_reduce(stream, x, y)
            b = stream.upload(pool, np.full(16, rank * 10 + 7, np.int32))
            comm.broadcast(stream, b, b, 0)
            reduced, broadcast = stream.download(y), stream.download(b)
            comm.close()
            queue.put((rank, reduced, broadcast))
    except BaseException as exc:  # reported to the parent, which fails the test with it
        queue.put((rank, f"{type(exc).__name__}: {exc}"))
