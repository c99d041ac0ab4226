"""Programmatic dependent launch of the CUTLASS kernels, without and with, on the same kernel (GPU, torch optional).

For each cell (type pair, M, N, K) one DenseMatmulPlan (the table's kernel) is timed with its kernel launched without
programmatic dependent launch (``plan.library.set_pdl(plan.handle, False)``) and with it (``True``), alternately
``--rounds`` times (off first), each a StreamTimer median of ``--repeats`` x ``--calls`` back-to-back calls on cold
weights (banks of at least 8x the L2 cache); cuBLAS (torch.matmul) once per cell when torch is installed. Both
settings' outputs are checked against float64 on sampled rows and against each other. Without a GPU it says so in one
line (status 2). A kernel that cannot launch
with it (the NVRTC kernels; split-K and stream-K in a library built before 2026-12-03) is timed the same way as a
control: its two settings are the same launch. ``on_vs_off`` = off µs / on µs from the means of the rounds' medians; ``ratio_*`` = cuBLAS µs / ours.

    python benchmarks/cutlass_pdl_ab.py [--cells 64x4096x4096,...] [--dtypes bf16] [--calls 20] [--repeats 7]
        [--rounds 2] [--json cutlass_pdl_ab.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's mircuda, not an installed one

from mircuda.cli._matmul_bench import Types, check_results_argument, session, upload  # noqa: E402
from mircuda.errors import ContractError, MircudaError  # noqa: E402
from mircuda.matmul import DenseMatmulSpec  # noqa: E402
from mircuda.cli._values import comma_items, distinct, known_items, is_decimal, positive_int  # noqa: E402

CELLS = ("64x4096x4096,128x4096x4096,256x4096x4096,384x4096x4096,512x4096x4096,32x14336x4096,128x14336x4096,"
         "192x14336x4096,256x14336x4096,384x14336x4096,768x14336x4096,128x4096x14336,192x4096x14336,384x4096x14336,"
         "48x6144x4096,64x6144x4096,128x6144x4096,192x6144x4096,256x6144x4096,384x6144x4096,768x6144x4096,"
         "1536x6144x4096")
"""The 22 bf16 cells of ``benchmarks/results/cutlass_pdl_ab.json`` (2026-12-03) as ``MxNxK``."""
DTYPES = ("bf16", "f16", "bf16->f32", "f16->f32")
CHECK_LIMIT = 2e-2
"""Largest relative error on the sampled rows against float64 (matmul-profile's)."""


def cell_values(text: str) -> list[tuple[int, int, int]]:
    """``--cells``: comma-separated ``MxNxK`` (ASCII digits, positive; N a multiple of 8 and K of 8: the CUTLASS
    tensor-op kernels' 16-byte rows), each once."""
    items = comma_items(text, "cell")
    out = []
    for item in items:
        parts = item.split("x")
        if len(parts) != 3 or not all(is_decimal(p) and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated MxNxK cells of positive ints, received "
                                             f"{item!r} in {text!r}")
        m, n, k = map(int, parts)
        if n % 8 or k % 8:
            raise argparse.ArgumentTypeError(f"expected N and K multiples of 8, received {item!r} in {text!r}")
        try:  # the plans' dimension limits, before a device is asked
            DenseMatmulSpec(m, n, k)
        except ContractError as exc:
            raise argparse.ArgumentTypeError(f"{item}: {exc}") from None
        out.append((m, n, k))
    return distinct(out, text)


def dtype_values(text: str) -> list[str]:
    """``--dtypes``: comma-separated items of :data:`DTYPES`, each once."""
    return known_items(text, DTYPES, "type pair")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=cell_values, default=CELLS, help="comma-separated MxNxK")
    p.add_argument("--dtypes", type=dtype_values, default="bf16", help=f"comma-separated of {', '.join(DTYPES)}")
    p.add_argument("--calls", type=positive_int, default=20, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=positive_int, default=7, help="timed repeats per median")
    p.add_argument("--rounds", type=positive_int, default=2, help="off/on alternations per cell")
    p.add_argument("--json", default="cutlass_pdl_ab.json",
                   help="results file, its directory existing (default: %(default)s in the current directory; the "
                        "records the README quotes are benchmarks/results/cutlass_pdl_ab*.json: name one to replace it)")
    return p


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the cells: capable ones faster by more than 1 %, within 1 %, slower by more than 1 %; the
    controls' on_vs_off; cells below 0.97 and at or above 1.0 of cuBLAS without and with."""
    capable = [r for r in rows if r["pdl_capable"]]
    timed = [r for r in rows if r["ratio_off"] is not None]
    return {"pdl_capable_cells": len(capable), "faster_over_1pct": sum(r["on_vs_off"] > 1.01 for r in capable),
            "within_1pct": sum(abs(r["on_vs_off"] - 1) <= 0.0105 for r in capable),
            "slower_over_1pct": sum(r["on_vs_off"] < 0.99 for r in capable),
            "control_cells_on_vs_off": [r["on_vs_off"] for r in rows if not r["pdl_capable"]],
            "cells_below_0.97_of_cublas": {side: sum(r[f"ratio_{side}"] < 0.97 for r in timed) for side in ("off", "on")},
            "cells_at_or_above_1.0": {side: sum(r[f"ratio_{side}"] >= 1.0 for r in timed) for side in ("off", "on")},
            "cells": len(rows)}


def _sampled_error(stream: Any, c: Any, a_host: np.ndarray, w_host: np.ndarray, m: int, n: int) -> float:
    rows = sorted({0, m // 2, m - 1})
    got = stream.download(c).astype(np.float64).reshape(m, n)[rows]
    want = a_host[rows].astype(np.float64) @ w_host.astype(np.float64).T
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    check_results_argument(p, args.json)
    import mircuda as mc

    try:
        driver = mc.Driver.initialize()
    except MircudaError as exc:  # no driver or no GPU: one line, as the CLI profiles say it
        p.exit(2, f"cutlass_pdl_ab: needs a CUDA GPU: {exc}\n")
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    with session(driver, 0) as s:
        context, stream, pool, timer = s.context, s.stream, s.pool, s.timer
        shapes = list(dict.fromkeys((n, k) for _, n, k in args.cells))  # in order, each once
        for pair in args.dtypes:
            t = Types.parse(pair)
            for n, k in shapes:
                banks, ws, w_host = s.weights(t, n, k)
                tws = s.torch_.weights(n, k, t.input, banks) if s.torch_ is not None else None
                for m in [m for m, cn, ck in args.cells if (cn, ck) == (n, k)]:
                    a_host = s.rng.standard_normal((m, k), dtype=np.float32).astype(t.in_t)
                    a = upload(context, stream, pool, a_host)
                    c = pool.allocate(t.out_t, stream, m * n)
                    plan: Any
                    with mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=t.in_t,
                                            output=t.plan_output) as plan:
                        library = plan.library
                        capable = library is not None and plan.programmatic_launch and plan.kernel.origin == "cutlass"
                        outputs: dict[str, np.ndarray] = {}
                        us: dict[str, list[float]] = {"off": [], "on": []}
                        worst = 0.0
                        for _ in range(args.rounds):
                            for side in ("off", "on"):
                                if capable:
                                    library.set_pdl(plan.handle, side == "on")
                                plan.execute(stream, a, ws[0], c)
                                outputs[side] = stream.download(c).astype(np.float64)
                                err = _sampled_error(stream, c, a_host, w_host.reshape(n, k), m, n)
                                worst = max(worst, err)
                                if not err <= CHECK_LIMIT:
                                    failures.append(f"{t.label} M={m} {n}x{k} {side}: relative error {err:.2e}")
                                us[side].append(timer.median(lambda i: plan.execute(stream, a, ws[i % banks], c),  # noqa: B023
                                                             args.calls, args.repeats))
                        if capable:
                            library.set_pdl(plan.handle, True)
                        scale = max(float(np.abs(outputs["off"]).max()), 1e-300)
                        diff = float(np.abs(outputs["off"] - outputs["on"]).max()) / scale
                        cublas = None
                        if s.torch_ is not None and tws is not None:
                            enqueue, _ = s.torch_.operands(m, tws, t.input, t.output)
                            cublas = timer.median(enqueue, args.calls, args.repeats)
                            del enqueue
                        off, on = (sum(us[side]) / len(us[side]) for side in ("off", "on"))
                        rows.append({"dtype": t.label, "m": m, "n": n, "k": k, "kernel": plan.kernel_name,
                                     "splits": plan.splits, "pdl_capable": capable, "off_us": us["off"], "on_us": us["on"],
                                     "off_mean_us": round(off, 2), "on_mean_us": round(on, 2),
                                     "on_vs_off": round(off / on, 3), "cublas_us": cublas,
                                     "ratio_off": None if cublas is None else round(cublas / off, 3),
                                     "ratio_on": None if cublas is None else round(cublas / on, 3),
                                     "rel_err": worst, "max_rel_diff_on_off": diff})
                        print(f"{t.label:9s} M={m:5d} {n:6d}x{k:<6d} {plan.kernel_name[:48]:48s} "
                              f"{'pdl' if capable else 'ctl'} off {off:8.2f} on {on:8.2f} µs  x{off / on:.3f}"
                              + ("" if cublas is None else f"  cuBLAS {cublas:8.2f}"), flush=True)
                    a.free(stream)
                    c.free(stream)
                del tws
                s.release(ws)
        device = s.info.name
    payload = {"benchmark": "benchmarks/cutlass_pdl_ab.py", "device": device,
               "summary": summarize(rows),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "method": f"per cell one DenseMatmulPlan, its kernel's programmatic dependent launch off and on "
                         f"(CutlassLibrary.set_pdl), {args.rounds} alternations of StreamTimer medians of "
                         f"{args.repeats} x {args.calls} back-to-back calls on cold weights; cuBLAS once",
               "failures": failures, "rows": rows}
    try:
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
    except OSError as exc:  # checked before the run, but the path may have changed since: keep the measurements
        print(json.dumps(payload, indent=1))
        p.exit(2, f"cutlass_pdl_ab: --json: cannot write {args.json!r} ({exc}); the results are on stdout above\n")
    print(f"results written to {args.json}")
    for line in failures:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
