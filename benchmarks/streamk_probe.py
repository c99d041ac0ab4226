"""The stream-K and swizzle-1 SM90 kernels beside the existing stream-K and ping-pong kernels and cuBLAS
(torch.matmul) at issue 16's middle M, on cold weights, with numerics checked against float64 (GPU).

Each kernel is forced by name (``DenseMatmulPlan(kernel=...)``); a name the library lacks is listed as not
built and skipped. Timing as ``matmul-profile``'s (``mircuda.cli._matmul_bench``: back-to-back calls behind
a spin kernel, events, median; weight banks >= 8x L2). Every result's sampled rows (the first and last row
of every 128-row M tile, and the middle row) are compared with a float64 product; a relative error above
2e-2 is a failure (exit status 1). The table gives each run beside cuBLAS and the prediction of
``benchmarks/streamk_model.py``; the JSON has matmul-profile's form (``streamk_model.py --measured`` reads it).

    MIRCUDA_CUTLASS_LIBRARY=.cutlass/probe/libmircuda_cutlass.so \\
        python benchmarks/streamk_probe.py [--m 96,192,384,512,768,1024,1536] [--dtypes bf16] \\
        [--kernels NAME,...] [--with-default] [--calls 20] [--repeats 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the model beside it; this checkout's mircuda, not an installed one

import streamk_model as model  # noqa: E402

from mircuda.cli._matmul_bench import Types, relative_error, row, session, upload  # noqa: E402
from mircuda.cli._matmul_profile import m_values  # noqa: E402

BASELINES = ("sm90_pingpong_128x128x64", "sm90_pingpong_64x128x64")
"""The data-parallel kernels the stream-K ones must beat (the sweep's best at most middle M)."""

MAX_ERROR = 2e-2


def default_kernels() -> tuple[str, ...]:
    """The entries the model covers (existing and new), then the ping-pong baselines."""
    return tuple(v.name for v in model.VARIANTS if v.built) + BASELINES


def sample_rows(m: int, tile_m: int = 128) -> list[int]:
    """The first and last row of every ``tile_m``-row tile of M, and the middle row: where a wrongly
    reduced or a wrongly placed tile (a padding tile's output, a partial sum added twice) shows."""
    rows = {m // 2}
    for start in range(0, m, tile_m):
        rows.update((start, min(start + tile_m, m) - 1))
    return sorted(rows)


def check_rows(context: Any, stream: Any, c: Any, a: np.ndarray, w: np.ndarray, m: int, n: int) -> float:
    """Relative error of :func:`sample_rows` of C against float64."""
    back = context.allocate_pinned(c.scalar_type, m * n)
    stream.copy_to_host(c, back)
    got = back.to_numpy().reshape(m, n)
    back.close()
    rows = sample_rows(m)
    want = a[rows].astype(np.float64) @ w.astype(np.float64).T
    return relative_error(got[rows], want)


def predicted(name: str, m: int, n: int, k: int) -> float | None:
    """The model's µs for a kernel the model covers, else None."""
    for v in model.VARIANTS:
        if v.name == name:
            return v.predict(m, n, k).us
    return None


def parse_names(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated kernel names, received {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--m", type=m_values, default=",".join(map(str, model.MIDDLE_M)), help="comma-separated M values")
    p.add_argument("--dtypes", default="bf16", help="comma-separated input[->output] pairs (default: bf16)")
    p.add_argument("--kernels", type=parse_names, default=",".join(default_kernels()),
                   help="kernel prefixes (the types are appended), default: the model's entries and ping-pong")
    p.add_argument("--library", default=None, help="libmircuda_cutlass.so (default: MIRCUDA_CUTLASS_LIBRARY, "
                   "else the cached build)")
    p.add_argument("--calls", type=int, default=20, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats (the median is reported)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    p.add_argument("--with-default", action="store_true",
                   help="also time DenseMatmulPlan's own choice (its measured table or rules) at every cell")
    p.add_argument("--json", default="benchmarks/results/streamk_probe.json")
    args = p.parse_args(argv)

    import mircuda as mc
    from mircuda.errors import MircudaError
    from mircuda.matmul import load_library

    lib = load_library(args.library)
    have = {k.name for k in lib.kernels}
    notes: list[str] = []
    driver = mc.Driver.initialize()
    with session(driver, args.device) as s:
        for n, k in model.SHAPES:
            for pair in [d for d in args.dtypes.split(",") if d]:
                t = Types.parse(pair)
                isz, osz = t.sizes
                banks, ws, w_host = s.weights(t, n, k)
                w2 = w_host.reshape(n, k)
                tws = s.torch_.weights(n, k, t.input, banks) if s.torch_ is not None else None
                for m in args.m:
                    a_host = s.rng.standard_normal((m, k), dtype=np.float32).astype(t.in_t)
                    a = upload(s.context, s.stream, s.pool, a_host)
                    c = s.pool.allocate(t.out_t, s.stream, m * n)
                    if tws is not None:
                        enqueue, note = s.torch_.operands(m, tws, t.input, t.output)  # type: ignore[union-attr]
                        us = s.timer.median(enqueue, args.calls, args.repeats)
                        s.rows.append(row("cuBLAS (torch.matmul)", t.label, m, n, k, us, isz, osz, note))
                        del enqueue
                    for prefix in ((None,) if args.with_default else ()) + args.kernels:
                        name = None if prefix is None else f"{prefix}_{t.input}_{t.output}"
                        if name is not None and name not in have:
                            if f"{name} not built" not in notes:
                                notes.append(f"{name} not built")
                            continue
                        try:
                            plan: Any = mc.DenseMatmulPlan(s.context, s.stream, mc.DenseMatmulSpec(m, n, k),
                                                           input=t.in_t, output=t.plan_output, kernel=name,
                                                           library=lib)
                        except MircudaError as exc:  # CUTLASS's can_implement refused the shape
                            notes.append(f"{name} M={m} {n}x{k} not run: {exc}"[:300])
                            continue
                        label = (f"DenseMatmulPlan ({plan.kernel_name} splits={plan.splits})" if name is None
                                 else f"probe {name}")
                        try:
                            s.stream.memset(c, 0xFF)  # NaN in every output type: a tile never written shows
                            plan.execute(s.stream, a, ws[0], c)
                            err = check_rows(s.context, s.stream, c, a_host, w2, m, n)
                            if not err <= MAX_ERROR:  # NaN fails too
                                s.failures.append(f"{label} M={m} {n}x{k}: relative error {err:.2e}")
                                continue
                            us = s.timer.median(lambda i: plan.execute(s.stream, a, ws[i % banks], c),  # noqa: B023
                                                args.calls, args.repeats)
                        except MircudaError as exc:
                            s.failures.append(f"{label} M={m} {n}x{k}: {exc}"[:400])
                            continue
                        finally:
                            plan.close()
                        pred = None if prefix is None else predicted(prefix, m, n, k)
                        extra = f" model {pred:.1f} µs" if pred is not None else ""
                        s.rows.append(row(label, t.label, m, n, k, us, isz, osz, f"rel err {err:.1e}{extra}"))
                    a.free(s.stream)
                    c.free(s.stream)
                del tws
                s.release(ws)
        info = s.info
        return s.report("streamk-probe", args.json,
                        f"streamk_probe on {info.name} ({info.arch}, {info.multiprocessor_count} SMs): cold "
                        f"weights, median of {args.repeats} x {args.calls} back-to-back calls; cuBLAS/x > 1: "
                        "faster than cuBLAS", ([s.why] if s.why else []) + notes,
                        library=str(lib.path), kernels=list(args.kernels))


if __name__ == "__main__":
    raise SystemExit(main())
