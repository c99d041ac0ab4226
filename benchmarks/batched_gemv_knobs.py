"""The batched GEMV's knobs beside cuBLAS: every row tiling R (16-row weight tiles per warp), unroll U
(32-column steps per chunk) and warp count W at each M of ``--m`` (1..32), bf16, the four shapes of
``matmul-profile`` (or ``--shapes``), cold weights (banks >= 8x L2), each configuration checked against float64
first (relative error at most 2e-2, as ``matmul-profile``'s; one that fails is reported and not timed, and the
script exits 1). Needs a GPU and torch (cuBLAS).

    python benchmarks/batched_gemv_knobs.py [--m 16,24,32] [--shapes 28672x4096,...] [--warps 1,2,4,8] [--json PATH]

``benchmarks/results/batched_gemv_m16_64_knobs.json`` (H200, 2026-12-01) also holds M = 48 and 64, run with
commit 04afb01, whose kernel took M up to 64: there its best was 0.57-0.82x cuBLAS, which is why the kernel
stops at 32 (``mircuda.matmul._gemv.MAX_M``). ``benchmarks/results/batched_gemv_m8_16_row_tiles.json`` (H200,
2026-12-02) times every knob at M = 8 and 16, adding what the earlier file lacks: two row tiles with four steps
(R = 2, U = 4), one-warp blocks (W = 1) and the decoder layer's 28672x4096 projection."""

from __future__ import annotations

import argparse
import itertools
import re

import numpy as np

import mircuda as mc
from mircuda.cli._values import distinct, distinct_ints
from mircuda.cli._matmul_bench import add_results_argument, check_results_argument, finish_script, Types, relative_error, session
from mircuda.compile import CompileOptions
from mircuda.dtypes import dtype_info
from mircuda.matmul._gemv import MAX_M, batched_gemv_source
from mircuda.matmul._spec import _DIM_LIMIT
from mircuda.matmul._vector import shared_compiler, vector_contract

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
KNOBS = [(1, 4), (1, 2), (1, 1), (2, 4), (2, 2), (2, 1)]  # (row tiles, unroll)
WARPS = [2, 4, 8]
TOLERANCE = 2e-2
"""The largest relative error against float64 (``matmul-profile``'s)."""


def accurate(err: float) -> bool:
    """Whether a configuration's relative error passes (a NaN does not)."""
    return err <= TOLERANCE


def runs(k: int, warps: int, unroll: int) -> bool:
    """Whether a configuration is timed on a K: each warp of the block takes at least two chunks of
    ``32 * unroll`` columns."""
    return k >= 2 * warps * 32 * unroll


def rows_of_a(text: str) -> list[int]:
    """``--m``: comma-separated M, each in 1..MAX_M (the kernel's ``kM``) and given once, checked before the GPU
    is touched."""
    return distinct_ints(text, range(1, MAX_M + 1), f"M values in 1..{MAX_M} (the kernel's largest M)")


def shapes_of(text: str) -> list[tuple[int, int]]:
    """``--shapes``: comma-separated NxK weight shapes, N and K below ``_DIM_LIMIT`` (a plan's, the kernel's
    ``int`` indices), each K a multiple of 8 (the 16-byte variant), each given once."""
    if not all(re.fullmatch(r"-?[0-9]+x-?[0-9]+", x) for x in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected comma-separated NxK shapes, received {text!r}")
    out = [(int(n), int(k)) for n, k in (x.split("x") for x in text.split(","))]
    if not all(1 <= n < _DIM_LIMIT and 8 <= k < _DIM_LIMIT and k % 8 == 0 for n, k in out):
        raise argparse.ArgumentTypeError(f"expected N in 1..{_DIM_LIMIT - 1} and K a positive multiple of 8 below "
                                         f"{_DIM_LIMIT}, received {text!r}")
    return distinct(out, text)


def warps_of(text: str) -> list[int]:
    """``--warps``: comma-separated warps per block, each 1, 2, 4 or 8, each given once."""
    return distinct_ints(text, (1, 2, 4, 8), "warps of 1, 2, 4 or 8")


def untimed(shapes: list[tuple[int, int]], warps: list[int]) -> list[str]:
    """The ``NxK`` of ``shapes`` on which no configuration of ``warps`` would be timed (:func:`runs`: K below
    64 x the fewest warps), which ``main`` refuses instead of recording nothing for them."""
    return [f"{n}x{k}" for n, k in shapes if not any(runs(k, w, 1) for w in warps)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=rows_of_a, default="16,24,32",
                   help=f"comma-separated M (rows of A), each in 1..{MAX_M} (default: 16,24,32)")
    p.add_argument("--shapes", type=shapes_of, default=",".join(f"{n}x{k}" for n, k in SHAPES),
                   help="comma-separated NxK weight shapes (N output rows, K columns), each K a multiple of 8 and "
                        "at least 64 x the fewest --warps (default: %(default)s, the four of matmul-profile)")
    p.add_argument("--warps", type=warps_of, default=",".join(map(str, WARPS)),
                   help="comma-separated warps per block, each 1, 2, 4 or 8 (default: 2,4,8)")
    add_results_argument(p, "batched_gemv_knobs.json")
    args = p.parse_args()
    check_results_argument(p, args.json)
    short = untimed(args.shapes, args.warps)
    if short:
        p.error(f"argument --shapes: expected each K >= {64 * min(args.warps)} (64 x the fewest --warps: each warp "
                f"takes at least two 32-column chunks), received {','.join(short)}")
    ms = args.m
    out = []
    failures = []
    with session(mc.Driver.initialize(), 0) as s:
        assert s.torch_ is not None, s.why
        t = Types.parse("bf16")
        compiler = shared_compiler(s.context)
        contract = vector_contract("batched_gemv_bf16_bf16_v16", dtype_info(mc.bf16), dtype_info(mc.bf16), ("c", "a", "w"))
        kernels = {}
        for n, k in args.shapes:
            banks, ws, w_host = s.weights(t, n, k)
            tw = s.torch_.weights(n, k, "bf16", banks)
            for m in ms:
                a_host = s.rng.standard_normal(m * k, dtype=np.float32).astype(mc.bf16)
                a = s.stream.upload(s.pool, a_host)
                c = s.pool.allocate(mc.bf16, s.stream, m * n)
                want = a_host.astype(np.float64).reshape(m, k) @ w_host.astype(np.float64).reshape(n, k).T
                enqueue, _ = s.torch_.operands(m, tw, "bf16", "bf16")
                cublas = s.timer.median(enqueue, 10, 5)
                for (r, u), w in itertools.product(KNOBS, args.warps):
                    if not runs(k, w, u):
                        continue
                    if (m, r, u) not in kernels:
                        defines = {"MIRCUDA_GEMV_M": m, "MIRCUDA_GEMV_ROW_TILES": r, "MIRCUDA_GEMV_UNROLL": u}
                        kernels[m, r, u] = compiler.compile(batched_gemv_source(),
                                                            CompileOptions(defines=defines)).kernel(contract)
                    kern = kernels[m, r, u]
                    cfg = mc.LaunchConfig((-(-n // (16 * r)),), (32 * w,), programmatic_stream_serialization=True)
                    kern.launch(s.stream, cfg, c, a, ws[0], 1.0, 0.0, n, k)
                    err = relative_error(s.stream.download(c).astype(np.float64).reshape(m, n), want)
                    if not accurate(err):
                        failures.append(f"M={m} {n}x{k} R={r} U={u} W={w}: relative error {err:.2e}")
                        print(f"FAILED {failures[-1]}", flush=True)
                        continue
                    us = s.timer.median(lambda i: kern.launch(s.stream, cfg, c, a, ws[i % banks], 1.0, 0.0, n, k),  # noqa: B023
                                        10, 5)
                    out.append(dict(n=n, k=k, m=m, r=r, u=u, w=w, us=us, cublas=cublas, ratio=cublas / us, err=err))
                    print(f"M={m:3d} {n}x{k} R={r} U={u} W={w}: {us:7.2f} µs  cuBLAS {cublas:7.2f}  "
                          f"ratio {cublas / us:5.2f}  rel err {err:.1e}", flush=True)
                a.free(s.stream)
                c.free(s.stream)
            s.release(ws)
            del tw
        device = s.info.name
    finish_script(args.json, device, out, failures, "configuration(s) failed the float64 check")


if __name__ == "__main__":
    main()
