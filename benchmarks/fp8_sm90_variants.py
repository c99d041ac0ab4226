"""Every SM90 blockwise FP8 CUTLASS kernel of the library forced by name through BlockwiseFp8Plan, beside the plan's
own choice and torch's rowwise and blockwise ``_scaled_mm`` (fp8-profile's torch peers, in the same process, on
the same operands), at large M on the four profile shapes: issue 13's M >= 2048 goal (>= 0.95x torch rowwise and
>= 1.0x torch blockwise). With a library built with the experimental families (``MIRCUDA_FAMILIES`` naming
``FP8_EXP``: family ``sm90_blockwise_experimental``, variants of the cooperative 128x128x128 kernel that no plan
chooses by itself) this measures the variants against the default kernels.

Correctness first, so that a wrong variant cannot win: at one shape (``--check``) every kernel's whole output,
written over a NaN-filled D, is compared with the plan's default kernel's (the largest |difference| over the
largest |default|: at most ``VARIANT_LIMIT``; the variants change the schedule, not the arithmetic) and, on three
sampled rows, with float64 (fp8-profile's ``CHECK_LIMIT``); every timed point is also checked on three rows. A
kernel that fails is reported, its timings kept but marked, and the script exits 1. Operands: fp8-profile's
random E4M3 codes and FP32 scales (``beta`` = 0: the experimental kernels without C take no other). Timing:
``StreamTimer`` median of ``--repeats`` x ``--calls`` back-to-back calls, weights rotated over banks of at
least 8x the L2 cache (cold). Needs an sm_90a device (H100/H200) and torch; bad flags are refused before the GPU.

    python benchmarks/fp8_sm90_variants.py [--m 2048,8192] [--shapes 4096x4096,...] [--kernels NAME,...]
        [--check 2048x4096x4096] [--calls 20] [--repeats 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import types
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's mircuda, not an installed one

import mircuda as mc  # noqa: E402
from mircuda.cli._fp8_profile import (  # noqa: E402
    CHECK_LIMIT,
    FP8_SHAPES,
    Fp8Row,
    _dequantize,
    _operands,
    _relative,
    _rotating,
    _sample_rows,
    _torch_rows,
    _TorchFp8,
    fp8_row,
    fp8_shape_values,
    ratios,
    row_operands,
    shape_weights,
)
from mircuda.cli._matmul_bench import add_results_argument, check_results_argument, session, upload  # noqa: E402
from mircuda.cli._values import comma_items, distinct, is_decimal, positive_int  # noqa: E402

VARIANT_LIMIT = 1e-2
"""Largest ``max |D - D_default| / max |D_default|`` a kernel may show at the check shape (the variants only
reorder tiles, multicast or stage the epilogue differently: their output should equal the default's)."""
GOAL_ROWWISE, GOAL_BLOCKWISE = 0.95, 1.0
"""Issue 13's M >= 2048 floors: torch rowwise µs / ours and torch blockwise µs / ours."""
MIN_M = 17
"""M from which BlockwiseFp8Plan runs a CUTLASS kernel (M <= 16 runs the NVRTC kernels)."""


def large_m(text: str) -> list[int]:
    """``--m``: comma-separated M values (ASCII digits), each at least :data:`MIN_M` (a CUTLASS kernel's M), once."""
    items = comma_items(text, "M value")
    if not all(is_decimal(x) and int(x) >= MIN_M for x in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated ints of at least {MIN_M} (M <= 16 runs the NVRTC "
                                         f"kernels), received {text!r}")
    return distinct([int(x) for x in items], text)


def check_shape(text: str) -> tuple[int, int, int]:
    """``--check``: ``MxNxK`` (ASCII digits), M at least :data:`MIN_M`, N a multiple of 8 and K of 16 (the
    CUTLASS kernels' multiples)."""
    parts = text.split("x")
    if len(parts) != 3 or not all(is_decimal(p) and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK of positive ints, received {text!r}")
    m, n, k = (int(p) for p in parts)
    if m < MIN_M or n % 8 or k % 16:
        raise argparse.ArgumentTypeError(f"expected M >= {MIN_M}, N a multiple of 8 and K of 16, received {text!r}")
    return m, n, k


def kernel_names(text: str) -> list[str]:
    """``--kernels``: comma-separated kernel names, each once (checked against the library after it loads)."""
    return distinct(comma_items(text, "kernel name"), text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=large_m, default="2048,8192",
                   help=f"comma-separated M values, each at least {MIN_M} (default: %(default)s)")
    p.add_argument("--shapes", type=fp8_shape_values, default=",".join(f"{n}x{k}" for n, k in FP8_SHAPES),
                   help="comma-separated NxK weight shapes, K a multiple of 16 (default: %(default)s)")
    p.add_argument("--kernels", type=kernel_names, default=None,
                   help="comma-separated kernel names to force (default: every sm90_ blockwise kernel of the library)")
    p.add_argument("--check", type=check_shape, default="2048x4096x4096",
                   help="MxNxK where every kernel's whole output is compared with the default kernel's "
                        "(default: %(default)s)")
    p.add_argument("--calls", type=positive_int, default=20, help="back-to-back calls per timed repeat "
                                                                  "(default: %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=7, help="timed repeats, the median reported "
                                                                   "(default: %(default)s)")
    add_results_argument(p, "fp8_sm90_variants.json")
    return p


def check_dimensions(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every ``--m`` x ``--shapes`` point and ``--check`` within the plans' dimension limits
    (:class:`~mircuda.DenseMatmulSpec`), refused here as a usage error rather than after the GPU is set up."""
    points = [("--check", args.check)] + [("--m/--shapes", (m, n, k)) for n, k in args.shapes for m in args.m]
    for flag, (m, n, k) in points:
        try:
            mc.DenseMatmulSpec(m, n, k)
        except mc.ContractError as exc:
            p.error(f"{flag}: {m}x{n}x{k}: {exc}")


def pick_kernels(library: Any, wanted: list[str] | None) -> list[Any]:
    """The library's ``sm90_`` blockwise kernels, or those ``wanted`` names (each one of them).

    Raises:
        ValueError: a wanted name is not an sm90_ blockwise kernel of the library (the message lists them).
    """
    sm90 = [k for k in library.scaled_kernels if k.kind == "blockwise_scaled" and k.name.startswith("sm90_")]
    if wanted is None:
        return sm90
    by_name = {k.name: k for k in sm90}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        raise ValueError(f"argument --kernels: expected names among {', '.join(by_name) or '(none)'}, received "
                         f"{', '.join(unknown)}")
    return [by_name[w] for w in wanted]


def summarize(rows: list[Fp8Row], failed: set[str]) -> list[dict[str, Any]]:
    """Per kernel (plan paths): the worst and geometric-mean ratios to torch rowwise and blockwise over the points
    at M >= 2048, and how many points meet both goals; a kernel in ``failed`` is marked and ranked last."""
    out = []
    for path in dict.fromkeys(r.path for r in rows if not r.path.startswith("torch")):
        mine = [r for r in rows if r.path == path and r.m >= 2048 and r.vs_rowwise and r.vs_blockwise]
        if not mine:
            continue
        pairs = [(float(r.vs_rowwise or 0), float(r.vs_blockwise or 0)) for r in mine]
        row: dict[str, Any] = {"kernel": path, "points": len(mine), "correct": path not in failed}
        for i, attr in enumerate(("vs_rowwise", "vs_blockwise")):
            values = [pair[i] for pair in pairs]
            row[f"worst_{attr}"] = min(values)
            row[f"geomean_{attr}"] = math.exp(sum(math.log(v) for v in values) / len(values))
        row["goals_met"] = sum(rw >= GOAL_ROWWISE and bw >= GOAL_BLOCKWISE for rw, bw in pairs)
        out.append(row)
    return sorted(out, key=lambda r: (not r["correct"], -r["geomean_vs_blockwise"]))


def _sampled_rows(stream: Any, pool: Any, d: Any, n: int, sample: list[int]) -> np.ndarray:
    """Rows ``sample`` of the BF16 ``[M, n]`` output ``d``, copied on the device (no whole-D download), as float64."""
    small = pool.allocate(mc.bf16, stream, len(sample) * n)
    for i, row in enumerate(sample):
        stream.copy_device_range(d, row * n, small, i * n, n)
    host = stream.download(small).astype(np.float64).reshape(len(sample), n)
    small.free(stream)
    return host


def _check_variants(s: Any, library: Any, kernels: list[Any], shape: tuple[int, int, int],
                    failures: list[str]) -> list[dict[str, Any]]:
    """Every kernel's whole output at ``shape`` over a NaN-filled D against the plan's default kernel's, and three
    rows against float64; returns one record per kernel (the default first)."""
    context, stream, pool = s.context, s.stream, s.pool
    m, n, k = shape
    a, sa = _operands(s.rng, m, k, m)
    b, sb = _operands(s.rng, n, k, -(-n // 128))
    sample = _sample_rows(m)
    want = _dequantize(a[sample], sa[sample], 1) @ _dequantize(b, sb, 128).T
    da, dsa, db, dsb = (upload(context, stream, pool, x.ravel()) for x in (a, sa, b, sb))
    nan = upload(context, stream, pool, np.full(m * n, np.nan, np.float32).astype(mc.bf16))
    d = pool.allocate(mc.bf16, stream, m * n)
    records: list[dict[str, Any]] = []
    reference: np.ndarray | None = None
    for kernel in [None, *kernels]:
        name = kernel.name if kernel is not None else None
        stream.copy_device_range(nan, 0, d, 0, m * n)
        try:
            with mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=name,
                                     library=library) as plan:
                plan.execute(stream, da, dsa, db, dsb, d)
                chosen = plan.kernel_info.name
        except mc.MircudaError as exc:
            failures.append(f"check {name} {m}x{n}x{k}: {type(exc).__name__}: {exc}"[:300])
            records.append({"kernel": name, "error": str(exc)[:300]})
            continue
        got = stream.download(d).astype(np.float64).reshape(m, n)
        err = _relative(got[sample], want)
        if reference is None:
            reference = got
            diff = 0.0
        else:
            scale = float(np.nanmax(np.abs(reference)))
            delta = np.abs(got - reference)
            diff = math.inf if np.isnan(delta).any() else float(delta.max()) / max(scale, 1e-300)
        label = name or f"default ({chosen})"
        ok = err <= CHECK_LIMIT and diff <= VARIANT_LIMIT
        if not ok:
            failures.append(f"check {label} {m}x{n}x{k}: rel err vs float64 {err:.2e}, max rel diff vs default "
                            f"{diff:.2e}")
        print(f"{'ok  ' if ok else 'FAIL'} check {label} {m}x{n}x{k}: rel err {err:.1e}, max rel diff vs default "
              f"{diff:.1e}", flush=True)
        records.append({"kernel": label, "chosen": chosen, "rel_err_float64": err, "max_rel_diff_vs_default": diff,
                        "ok": ok})
    for buf in (da, dsa, db, dsb, nan, d):
        buf.free(stream)
    return records


def main() -> None:
    p = parser()
    args = p.parse_args()
    check_results_argument(p, args.json)
    check_dimensions(p, args)
    try:
        library = mc.matmul.load_library()
    except mc.CutlassNotFound as exc:  # MIRCUDA_CUTLASS_LIBRARY unset or wrong: said in one line
        raise SystemExit(f"fp8_sm90_variants: {exc}") from None
    try:
        kernels = pick_kernels(library, args.kernels)
    except ValueError as exc:
        p.error(str(exc).removeprefix("argument --kernels: "))
    rows: list[Fp8Row] = []
    failures: list[str] = []
    refusals: list[str] = []
    timing = types.SimpleNamespace(calls=args.calls, repeats=args.repeats)  # what _torch_rows reads
    with session(mc.Driver.initialize(), 0) as s:
        context, stream, pool, timer, info = s.context, s.stream, s.pool, s.timer, s.info
        checks = _check_variants(s, library, kernels, args.check, failures)
        failed = {c["kernel"] for c in checks if not c.get("ok")}
        torch_ = _TorchFp8(s.torch_.torch, s.torch_.stream) if s.torch_ is not None else None
        if torch_ is None:
            failures.append(f"torch unavailable: {s.why}")
        for n, k in args.shapes:
            b, _, b_deq, wb, wsb, tw, tsb = shape_weights(s, torch_, n, k)
            b_codes = b.astype(np.float64)  # torch rowwise (unit scales) is checked on the codes
            for m in args.m:
                a, sa, sample, want, da, dsa, d = row_operands(s, m, n, k, b_deq)
                for kernel in [None, *kernels]:
                    name = kernel.name if kernel is not None else None
                    try:
                        plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=name,
                                                   library=library)
                    except mc.MircudaError as exc:  # a kernel that cannot take the shape: recorded
                        refusals.append(f"{name} M={m} {n}x{k}: {type(exc).__name__}: {exc}"[:300])
                        continue
                    with plan:
                        label = name or f"default ({plan.kernel_info.name})"
                        plan.execute(stream, da, dsa, wb[0], wsb[0], d)
                        err = _relative(_sampled_rows(stream, pool, d, n, sample), want)
                        if not err <= CHECK_LIMIT:
                            failures.append(f"{label} M={m} {n}x{k}: relative error {err:.2e}")
                            failed.add(label)
                        us = timer.median(_rotating(plan, stream, da, dsa, wb, wsb, d), args.calls, args.repeats)
                    rows.append(fp8_row(label, m, n, k, us, f"rel err {err:.1e}"))
                    print(f"M={m:5d} {n:6d}x{k:<6d} {label:64s} {us:9.2f} µs {rows[-1].tflops:7.1f} TFLOP/s",
                          flush=True)
                if torch_ is not None:
                    before = len(rows)
                    _torch_rows(torch_, timer, timing, a, sa, b_codes, want, sample, tw, tsb, m, n, k,
                                rows, failures, refusals)
                    for r in rows[before:]:
                        print(f"M={m:5d} {n:6d}x{k:<6d} {r.path:64s} {r.us:9.2f} µs {r.tflops:7.1f} TFLOP/s", flush=True)
                for buf in (da, dsa, d):
                    buf.free(stream)
            del tw, tsb, b_deq, b_codes
            s.release(wb + wsb)
        device = info.name
    ratios(rows)
    summary = summarize(rows, failed)
    print(f"{'kernel':64s} {'worst/geo rowwise':>18s} {'worst/geo blockwise':>20s} goals")
    for line in summary:
        print(f"{line['kernel']:64s} {line['worst_vs_rowwise']:8.3f} {line['geomean_vs_rowwise']:8.3f}   "
              f"{line['worst_vs_blockwise']:8.3f} {line['geomean_vs_blockwise']:8.3f}   "
              f"{line['goals_met']}/{line['points']}{'' if line['correct'] else '  (FAILED its check)'}")
    payload = {"benchmark": "benchmarks/fp8_sm90_variants.py", "device": device, "library": str(library.path),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "method": f"each sm90_ blockwise kernel forced and the plan's own choice ('default (...)'), torch "
                         f"_scaled_mm rowwise and blockwise; cold weights (banks >= 8x L2); StreamTimer median of "
                         f"{args.repeats} x {args.calls} back-to-back calls; vs_* = torch µs / this µs",
               "kernels": [{"name": k.name, "family": k.family, "tile": k.tile, "cluster": k.cluster,
                            "stages": k.stages} for k in kernels],
               "checks": checks, "summary": summary, "refusals": refusals, "failures": failures,
               "rows": [asdict(r) for r in rows]}
    with open(args.json, "w") as f:
        json.dump(payload, f, indent=1)
    print(f"results written to {args.json}")
    if failures:
        raise SystemExit(f"{len(failures)} failure(s): " + "; ".join(failures))


if __name__ == "__main__":
    main()
