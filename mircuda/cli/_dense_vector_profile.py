"""``python -m mircuda dense-vector-profile``: DenseVectorPlan (M = 1) vs DenseMatmulPlan vs cuBLAS
(through ``torch.matmul``) on cold weights, measured in one run."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import RESULTS_HELP, check_results_file
from ._values import add_device_argument, dense_shape_values, shape_values, positive_int
from ._matmul_bench import Row, Types, check_vector, row, session, upload
from ._vector_sweep import sweep_rows

__all__ = ["GOAL_US", "VECTOR_SHAPES", "dense_vector_profile", "goal_lines", "register", "shape_values"]

VECTOR_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
"""(N, K) of the weights: Llama-3-8B-like projections (hidden 4096, MLP 14336, fused QKV 6144)."""

GOAL_US = {(4096, 4096): 9.0, (14336, 4096): 27.0, (4096, 14336): 27.0}
"""Issue 16's goals for the single GEMV, bf16, cold weights (27.0 µs is 97 % of the 4.43 TB/s read ceiling
measured on 1 GiB on the H200)."""


def dense_vector_profile(args: Any) -> int:
    """DenseVectorPlan vs DenseMatmulPlan (M = 1: the same NVRTC kernel, no CUTLASS library needed) vs cuBLAS."""
    import mircuda as mc

    check_profile_arguments(args)
    with session(mc.Driver.initialize(), args.device) as s:
        context, stream, pool, timer, torch_ = s.context, s.stream, s.pool, s.timer, s.torch_
        for n, k in args.shapes:
            for pair in [d for d in args.dtypes.split(",") if d]:
                t = Types.parse(pair)
                in_t, out_t, label = t.in_t, t.out_t, t.label
                isz, osz = t.sizes
                banks, ws, w_host = s.weights(t, n, k)
                x_host = s.rng.standard_normal(k, dtype=np.float32).astype(in_t)
                x = upload(context, stream, pool, x_host)
                y = pool.allocate(out_t, stream, n)
                want = w_host.astype(np.float64).reshape(n, k) @ x_host.astype(np.float64)
                plan: mc.DenseVectorPlan[Any] = mc.DenseVectorPlan(
                    context, stream, mc.DenseVectorSpec(n, k), input=in_t, output=t.plan_output)
                plan.execute(stream, x, ws[0], y)
                err = check_vector(context, stream, y, want)
                if not err <= 1e-2:  # NaN fails too
                    s.failures.append(f"DenseVectorPlan {label} {n}x{k}: relative error {err:.2e}")
                us = timer.median(lambda i: plan.execute(stream, x, ws[i % banks], y), args.calls, args.repeats)  # noqa: B023  (timed before the loop moves on)
                s.rows.append(row("DenseVectorPlan", label, 1, n, k, us, isz, osz,
                                   f"{plan.rows} rows x {plan.warps} warp(s)/block"
                                   + (", two chunks per step" if plan.unroll == 2 else "") + f", rel err {err:.1e}"))
                if args.sweep:
                    s.rows.extend(sweep_rows(
                        context, stream, timer, x, y, ws, in_t, out_t, n, k, args.calls, args.repeats,
                        (plan.rows, plan.warps, plan.unroll), lambda: check_vector(context, stream, y, want),  # noqa: B023
                        lambda path, us, note: row(path, label, 1, n, k, us, isz, osz, note), s.failures))  # noqa: B023
                s.rows.append(_matmul_row(context, stream, pool, timer, ws, x, y, want, in_t, out_t, label, n, k,
                                          banks, args, s.failures))
                if torch_ is not None:
                    tws = torch_.weights(n, k, t.input, banks)
                    enqueue, note = torch_.operands(1, tws, t.input, t.output)
                    us = timer.median(enqueue, args.calls, args.repeats)
                    s.rows.append(row("cuBLAS (torch.matmul)", label, 1, n, k, us, isz, osz, note))
                    del tws, enqueue
                s.release(ws + [x, y])
        info = s.info
        return s.report("dense-vector-profile", args.json,
                        f"dense-vector-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs, "
                        f"L2 {info.l2_cache_bytes >> 20} MiB): M = 1, cold weights, median of {args.repeats} x "
                        f"{args.calls} back-to-back calls", [s.why] if s.why else [], goals=goal_lines)


def goal_lines(rows: list[Row]) -> list[str]:
    """Per shape with a goal (:data:`GOAL_US`; bf16 only): DenseVectorPlan's µs and, after a sweep, the
    fastest configuration's."""
    out = []
    for (n, k), goal in GOAL_US.items():
        mine = [r for r in rows if r.n == n and r.k == k and r.dtype == "bf16->bf16"]
        plan = next((r for r in mine if r.path == "DenseVectorPlan"), None)
        if plan is None:
            continue
        line = f"{n}x{k} bf16: DenseVectorPlan {plan.us:.2f} µs (goal <= {goal:.1f}: {'met' if plan.us <= goal else 'NOT met'})"
        swept = [r for r in mine if r.path.startswith("dense_vector ")]
        if swept:
            best = min(swept, key=lambda r: r.us)
            line += f"; fastest swept {best.path}: {best.us:.2f} µs ({'met' if best.us <= goal else 'NOT met'})"
        out.append(line)
    return out


def _matmul_row(context: Any, stream: Any, pool: Any, timer: Any, ws: list[Any], x: Any, y: Any, want: np.ndarray,
                in_t: Any, out_t: Any, label: str, n: int, k: int, banks: int, args: Any, failures: list[str]) -> Row:
    import mircuda as mc

    plan: mc.DenseMatmulPlan[Any, Any] = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(1, n, k), input=in_t,
                                                           output=None if out_t is in_t else out_t)
    plan.execute(stream, x, ws[0], y)  # checked like DenseVectorPlan's rows: a fast wrong answer is a failure
    err = check_vector(context, stream, y, want)
    if not err <= 1e-2:  # NaN fails too
        failures.append(f"DenseMatmulPlan M=1 {label} {n}x{k} ({plan.kernel_name}): relative error {err:.2e}")
    us = timer.median(lambda i: plan.execute(stream, x, ws[i % banks], y), args.calls, args.repeats)
    measured = row("DenseMatmulPlan", label, 1, n, k, us, np.dtype(in_t).itemsize, np.dtype(out_t).itemsize,
                   f"{plan.kernel_name} splits={plan.splits}, rel err {err:.1e}")
    plan.close()
    return measured


def dtype_pairs_text(text: str) -> str:
    """``--dtypes``'s ``type=``: the comma-separated items stripped (``'bf16, f16'`` reads as ``bf16,f16``, as
    ``--m '1, 16'`` reads as 1 and 16); a text with an empty item is kept as typed, for :func:`check_dtype_pairs` to refuse by name quoting it."""
    items = [item.strip() for item in text.split(",")]
    return ",".join(items) if all(items) else text  # check_dtype_pairs refuses an empty item quoting what was typed


def check_dtype_pairs(text: str, flag: str = "--dtypes") -> None:
    """Each comma-separated ``input[->output]`` pair is one the dense plans take (input bf16 or f16,
    output the input type or f32), checked before any GPU work.

    Raises:
        ContractError: naming ``flag``.
    """
    from ..errors import ContractError

    pairs = str(text).split(",")
    expected = "comma-separated input[->output] pairs: input bf16 or f16, output the input type or f32"
    if not all(p.strip() for p in pairs):  # an empty item is most likely a pair the user meant to type
        raise ContractError(flag, expected + ", without an empty item", repr(text))
    seen = set()
    for pair in pairs:
        parts = pair.split("->")
        if len(parts) > 2 or parts[0] not in ("bf16", "f16") or (len(parts) == 2 and parts[1] not in (parts[0], "f32")):
            # bf16- is what the shell leaves of an unquoted bf16->f32 (it reads > as a redirection)
            hint = "; quote the value: the shell reads > as a redirection" if pair.endswith("-") else ""
            raise ContractError(flag, expected, f"{pair!r} in {text!r}{hint}")
        key = (parts[0], parts[-1])
        if key in seen:  # bf16 and bf16->bf16 are one pair: it would be measured and recorded twice
            raise ContractError(flag, expected + ", each once", f"{pair!r} again in {text!r}")
        seen.add(key)


def check_profile_arguments(args: Any) -> None:
    """``--dtypes``, ``--calls``, ``--repeats`` and ``--json`` before the driver is touched."""
    from ..errors import ContractError

    check_dtype_pairs(args.dtypes)
    for name in ("calls", "repeats"):
        if getattr(args, name) < 1:
            raise ContractError(f"--{name}", "a positive integer", str(getattr(args, name)))
    check_results_file(args.json, getattr(args, "json_default", None))


def add_vector_arguments(p: Any) -> None:
    add_device_argument(p)
    p.add_argument("--dtypes", type=dtype_pairs_text, default="bf16,f16,bf16->f32",
                   help="comma-separated input[->output] pairs (default: bf16,f16,bf16->f32)")
    p.add_argument("--calls", type=positive_int, default=50, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=positive_int, default=15, help="timed repeats (the median is reported)")
    p.add_argument("--shapes", type=dense_shape_values, default=",".join(f"{n}x{k}" for n, k in VECTOR_SHAPES),
                   help="comma-separated NxK weight shapes, each dimension below 2147418112 (default: the four "
                        "Llama-3-8B-like ones)")
    p.add_argument("--sweep", action="store_true",
                   help="also time every kernel configuration (rows 8/16 x warps 1/2/4/8 x unroll 1/2 x PDL trigger "
                        "early/late x launch-bounds min blocks; 48 per shape and type pair, 12 NVRTC modules)")
    p.add_argument("--json", default="benchmarks/results/dense_vector_profile.json",
                   help=RESULTS_HELP)


def register(sub: Any) -> None:
    """Add ``dense-vector-profile`` to the CLI's subparsers."""
    p = sub.add_parser("dense-vector-profile",
                       help="DenseVectorPlan (M = 1) vs DenseMatmulPlan vs cuBLAS on cold weights (GPU)")
    add_vector_arguments(p)
    p.set_defaults(func=dense_vector_profile, json_default=p.get_default("json"))
