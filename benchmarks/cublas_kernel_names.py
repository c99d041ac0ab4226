"""Which cuBLAS kernel torch.matmul runs for each (type pair, M, N, K) of issue 16's middle M (GPU, torch).

The names tell what the dense table has to match: cuBLAS is column-major, so it computes C^T = W . A^T and
in ``nvjet_sm90_tst_<X>x<Y>_64x<S>_<A>x<B>_...`` X is the tile along N (weight rows), Y the tile along M
(tokens), S the pipeline stages and AxB the cluster along (N, M); ``splitK`` adds cuBLASLt's reduce kernel.
The FP8 pairs ``e4m3-rowwise`` and ``e4m3-blockwise`` name what ``torch._scaled_mm`` (cuBLASLt) runs for
issue 13's peers: E4M3 [M, K] x E4M3 [N, K]^T -> BF16 with per-row / per-column FP32 scales, or with 1 x 128
and 128 x 128 block scales (the layout fp8-profile found torch to take: sa M-major, sb [K/128, N/128]).
Read with torch.profiler (one call per cell after a warm-up call); nothing is timed here.

    python benchmarks/cublas_kernel_names.py [--m 96,192,384] [--shapes 6144x4096,...] [--json PATH]
    python benchmarks/cublas_kernel_names.py --dtypes e4m3-rowwise,e4m3-blockwise --m 2048,8192
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SHAPES = "4096x4096,14336x4096,4096x14336,6144x4096"
TYPES = ("bf16", "f16", "bf16->f32")
FP8_TYPES = ("e4m3-rowwise", "e4m3-blockwise")


def kernel_names(torch: Any, m: int, n: int, k: int, types: str) -> list[str]:
    """The CUDA kernels one ``A[M, K] @ W[N, K]^T`` launches (names as the profiler reports them)."""
    from torch.profiler import ProfilerActivity, profile

    if types in FP8_TYPES:
        e4m3 = torch.float8_e4m3fn
        a = torch.randn(m, k, device="cuda").to(e4m3)
        w = torch.randn(n, k, device="cuda").to(e4m3)
        if types == "e4m3-rowwise":
            sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
        else:  # 1 x 128 blocks of A (M-major), 128 x 128 blocks of W as [K/128, N/128] viewed transposed
            kb, nb = -(-k // 128), -(-n // 128)
            sa = torch.ones(kb, m, device="cuda").t()
            sb = torch.ones(nb, kb, device="cuda").t()

        def call() -> Any:
            return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    else:
        dtype = torch.float16 if types.startswith("f16") else torch.bfloat16
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)

        def call() -> Any:
            return torch.mm(a, w.t(), out_dtype=torch.float32) if types.endswith("->f32") else a @ w.t()

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type.name == "CUDA"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", default="96,192,384,512,768,1536", help="comma-separated M (tokens)")
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated NxK weight shapes")
    parser.add_argument(
        "--dtypes",
        default=",".join(TYPES),
        help="comma-separated input[->output] pairs, or e4m3-rowwise / e4m3-blockwise",
    )
    parser.add_argument("--json", type=Path, help="write {cell: [kernel names]} here")
    args = parser.parse_args(argv)
    import torch

    out: dict[str, list[str]] = {}
    for types in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            n, k = (int(v) for v in shape.split("x"))
            for m in (int(v) for v in args.m.split(",")):
                key = f"{types} M={m} N={n} K={k}"
                out[key] = kernel_names(torch, m, n, k, types)
                print(key, "|", " ; ".join(name[:80] for name in out[key]), flush=True)
    if args.json:
        args.json.write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels": out}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
