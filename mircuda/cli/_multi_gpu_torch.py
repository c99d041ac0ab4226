"""The torch side of ``multi-gpu-profile``: torch.distributed (NCCL backend) in two spawned processes,
one per device, measured the way the profile measures mircuda's eager collectives; rank 0 also times
a torch peer copy GPU 0 -> GPU 1. Imported only by the spawned processes and the profile."""

from __future__ import annotations

import os
import statistics
from typing import Any

__all__ = ["MULTICAST_OFF", "torch_worker"]

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast stays off in every process the profile starts (set unless already set)."""


def _median_us(torch: Any, stream: Any, run: Any, calls: int, repeats: int, barrier: Any) -> float:
    """Median over ``repeats`` of device-event µs per call of ``calls`` back-to-back ``run()`` (one
    warm-up repeat; the ranks meet at ``barrier`` before each repeat)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for r in range(repeats + 1):
        barrier()
        start.record(stream)
        for _ in range(calls):
            run()
        end.record(stream)
        end.synchronize()
        if r:
            samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def torch_worker(rank: int, world: int, init_method: str, sizes: list[int], copy_sizes: list[int],
                 plan: dict[str, int], queue: Any) -> None:
    """Rank ``rank`` on ``cuda:rank``: for each byte size, bf16 ``all_reduce`` (the whole buffer) and
    ``all_gather_into_tensor`` (``size`` bytes of output) timed; rank 0 puts
    ``{"collectives": [(op, bytes, us)], "peer_copy": [(bytes, us)], "version": ...}`` on ``queue``
    (or ``{"error": text}``)."""
    for k, v in MULTICAST_OFF.items():
        os.environ.setdefault(k, v)
    try:
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        out: dict[str, Any] = {"version": torch.__version__, "collectives": [], "peer_copy": []}
        stream = torch.cuda.current_stream(device)
        if rank == 0:
            for nbytes in copy_sizes:
                src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
                dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:1")
                us = _median_us(torch, stream, lambda s=src, d=dst: d.copy_(s, non_blocking=True),
                                plan["copy_calls"], plan["repeats"], lambda: None)
                torch.cuda.synchronize(1)
                out["peer_copy"].append((nbytes, us))
                del src, dst
            torch.cuda.empty_cache()
        dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=world, device_id=device)
        barrier = dist.barrier
        for nbytes in sizes:
            count = nbytes // 2
            x = torch.ones(count, dtype=torch.bfloat16, device=device)
            calls = plan["calls"] if nbytes <= (8 << 20) else plan["big_calls"]
            us = _median_us(torch, stream, lambda t=x: dist.all_reduce(t), calls, plan["repeats"], barrier)
            if rank == 0:
                out["collectives"].append(("all_reduce", nbytes, us))
            del x
            part = torch.ones(count // world, dtype=torch.bfloat16, device=device)
            full = torch.empty(count, dtype=torch.bfloat16, device=device)
            us = _median_us(torch, stream, lambda p=part, f=full: dist.all_gather_into_tensor(f, p), calls,
                            plan["repeats"], barrier)
            if rank == 0:
                out["collectives"].append(("all_gather", nbytes, us))
            del part, full
        # One checked value: 1 + 1 summed over the ranks.
        check = torch.ones(4, dtype=torch.bfloat16, device=device)
        dist.all_reduce(check)
        torch.cuda.synchronize(device)
        out["check"] = float(check[0].item())
        dist.barrier()
        dist.destroy_process_group()
        if rank == 0:
            queue.put(out)
    except BaseException as exc:  # the profile reports it and measures mircuda all the same
        queue.put({"error": f"rank {rank}: {type(exc).__name__}: {exc}"[:400]})
