"""Which cuBLAS kernel torch.matmul (torch._scaled_mm for the FP8 pairs) runs per (type pair, M, N, K) (GPU, torch).

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

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's mircuda, not an installed one

from mircuda.cli._matmul_bench import check_results_argument  # noqa: E402
from mircuda.cli._matmul_profile import m_values  # noqa: E402
from mircuda.cli._values import known_items, shape_values  # noqa: E402

SHAPES = "4096x4096,14336x4096,4096x14336,6144x4096"
TYPES = ("bf16", "f16", "bf16->f32")
FP8_TYPES = ("e4m3-rowwise", "e4m3-blockwise")
KNOWN_TYPES = (*TYPES, "f16->f32", *FP8_TYPES)
"""Every ``--dtypes`` item this script knows (the default is :data:`TYPES`)."""


def type_values(text: str) -> list[str]:
    """``--dtypes``: comma-separated items of :data:`KNOWN_TYPES`, each once (an unknown name is refused rather
    than run as something else)."""
    return known_items(text, KNOWN_TYPES, "type pair")


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
        dtype = torch.float16 if types.startswith("f16") else torch.bfloat16  # KNOWN_TYPES: bf16 or f16 inputs
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=m_values, default="96,192,384,512,768,1536", help="comma-separated M (tokens)")
    parser.add_argument("--shapes", type=shape_values, default=SHAPES, help="comma-separated NxK weight shapes")
    parser.add_argument("--dtypes", type=type_values, default=",".join(TYPES),
                        help=f"comma-separated items of: {', '.join(KNOWN_TYPES)}")
    parser.add_argument("--json", help="write {cell: [kernel names]} here (a file in an existing directory)")
    args = parser.parse_args(argv)
    if args.json is not None:
        check_results_argument(parser, args.json)  # before the GPU work, not after it
    try:
        import torch
    except ImportError as exc:
        raise SystemExit(f"cublas_kernel_names: needs torch (with CUDA): {exc}") from None

    out: dict[str, list[str]] = {}
    for types in args.dtypes:
        for n, k in args.shapes:
            for m in args.m:
                key = f"{types} M={m} N={n} K={k}"
                out[key] = kernel_names(torch, m, n, k, types)
                print(key, "|", " ; ".join(name[:80] for name in out[key]), flush=True)
    if args.json is not None:
        Path(args.json).write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels": out}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
