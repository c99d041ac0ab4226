"""The decode kernels DenseMatmulPlan picks at M = 1, 8 and 16 for two of the decoder layer's projections
(gate+up 28672x4096 and down 4096x14336, bf16), each launched twice: a driver for Nsight Compute.

Run under ``ncu`` it gives what limits each kernel on cold weights (ncu flushes the caches before every
profiled launch): registers, occupancy, DRAM throughput, L1/L2 hit rates and warp stalls. Alone it prints
each plan's kernel and ``describe()`` and checks nothing else. The H200 run of 2026-12-04 is
``benchmarks/results/decode_kernels_ncu_20261204.json``:

    ncu --clock-control none -k regex:"gemv|dense_vector" --launch-count 12 \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \\
        --section MemoryWorkloadAnalysis \\
        --metrics l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum \\
        python benchmarks/decode_kernels_ncu.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's mircuda, not an installed one

import mircuda as mc  # noqa: E402
from mircuda.dtypes import bf16  # noqa: E402

SHAPES = ((28672, 4096), (4096, 14336))
"""(N, K): the decoder layer's gate+up and down projections (``decoder-layer-profile``'s ``LAYER``)."""
MS = (1, 8, 16)


def main() -> int:
    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[0])
    stream = context.create_stream()
    pool = context.default_memory_pool()
    rng = np.random.default_rng(0)
    for n, k in SHAPES:
        w = stream.upload(pool, rng.standard_normal((n, k), dtype=np.float32).astype(bf16))
        for m in MS:
            x = stream.upload(pool, rng.standard_normal((m, k), dtype=np.float32).astype(bf16))
            y = pool.allocate(bf16, stream, m * n)
            plan: mc.DenseMatmulPlan[Any, Any] = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=bf16)
            print(f"{n}x{k} M={m}: {plan.kernel_name}: {plan.describe()}", flush=True)
            for _ in range(2):
                plan.execute(stream, x, w, y)
            stream.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
