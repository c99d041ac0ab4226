"""BlockwiseFp8Plan at M > 16 with each SM90 CUTLASS blockwise FP8 kernel of the library forced by name (the
64x128x128 ping-pong and the 128x128x128 cooperative kernels), beside the plan's own choice, on the four Llama
shapes (GPU; the measurement behind ``mircuda.matmul._select.sm90_fp8_family``).

Operands are random E4M3 codes with unit scales (timing only: numerics are fp8-profile's and the GPU tests'
business). Timing: ``mircuda.timing.StreamTimer`` (back-to-back calls behind a spin kernel, events, median),
weights rotated over banks of at least 8x the L2 cache.

    python benchmarks/fp8_sm90_kernels.py [--m 32,64,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's mircuda, not an installed one

import mircuda as mc  # noqa: E402
from mircuda.timing import StreamTimer, bank_count  # noqa: E402

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
M_VALUES = (32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 8192)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma-separated M values (> 16)")
    parser.add_argument("--json", default="benchmarks/results/fp8_sm90_cutlass_pingpong_vs_coop.json")
    args = parser.parse_args()
    ms = [int(v) for v in args.m.split(",")]
    import ml_dtypes

    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[0])
    stream = context.create_stream()
    pool = context.default_memory_pool()
    library = mc.matmul.load_library()
    info = context.device_info()
    names = [k.name for k in library.scaled_kernels if k.name.startswith("sm90_")]
    rng = np.random.default_rng(0)
    rows = []
    with StreamTimer(context, stream) as timer:
        for n, k in SHAPES:
            kb, nb = -(-k // 128), -(-n // 128)
            banks = bank_count(n * k, info.l2_cache_bytes)
            bs = [stream.upload(pool, rng.integers(0x30, 0x40, n * k, dtype=np.uint8).view(mc.e4m3))
                  for _ in range(banks)]
            sb = stream.upload(pool, np.ones(nb * kb, np.float32))
            for m in ms:
                a = stream.upload(pool, rng.integers(0x30, 0x40, m * k, dtype=np.uint8).view(mc.e4m3))
                sa = stream.upload(pool, np.ones(m * kb, np.float32))
                d = stream.upload(pool, np.zeros(m * n, ml_dtypes.bfloat16))
                for kernel in [None, *names]:
                    with mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=kernel,
                                             library=library) as plan:
                        us = timer.median(lambda i: plan.execute(stream, a, sa, bs[i % banks], sb, d),  # noqa: B023
                                          calls=20, repeats=7)
                        chosen = plan.kernel_info.name
                    tflops = 2 * m * n * k / us / 1e6
                    rows.append({"m": m, "n": n, "k": k, "kernel": kernel or "default", "chosen": chosen, "us": us,
                                 "tflops": tflops})
                    label = kernel or f"default ({chosen})"
                    print(f"{m:5d} {n:6d} {k:6d} {label:60s} {us:9.2f} µs "
                          f"{tflops:7.1f} TFLOP/s", flush=True)
                for buf in (a, sa, d):
                    buf.free(stream)
            for buf in [*bs, sb]:
                buf.free(stream)
    result = {"benchmark": "benchmarks/fp8_sm90_kernels.py", "device": info.name,
              "date": datetime.now(timezone.utc).isoformat(),
              "method": "each SM90 blockwise FP8 kernel forced and the plan's own choice ('default'); cold weights "
                        "(banks >= 8x L2); StreamTimer median of 7 x 20 back-to-back calls", "rows": rows}
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
