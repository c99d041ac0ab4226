"""``python -m mircuda matmul-profile``: DenseMatmulPlan vs cuBLAS (through ``torch.matmul``) over M and
Llama-like (N, K), on cold weights, measured in one run."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._dense_vector_profile import check_profile_arguments, dtype_pairs_text
from ._errors import RESULTS_HELP, check_results_file
from ._values import comma_items, add_device_argument, distinct, is_decimal, positive_int
from ._matmul_bench import Row, Types, relative_error, row, session, upload
from ..matmul._tuned import TunedTable, merge, read_table_file
from ._matmul_sweep import winners

__all__ = ["MATMUL_M", "MATMUL_SHAPES", "m_values", "matmul_profile", "register"]

MATMUL_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))

MATMUL_M = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 8192)
"""``--m``'s default: decode (1-16), the middle where batched serving lives (24-1536, issue 16's
table and the values it adds) and prefill (2048, 8192). 20 M x 4 shapes x 3 type pairs = 240
configurations, each plan and cuBLAS timed over ``--calls`` x (``--repeats`` + 1) calls; estimated at
1.5-2.5 minutes on an H200 host (the host's random operands of M = 8192 and the NVRTC modules of the
batched GEMV dominate; not yet measured). ``--m 24,48,96,192,384,768,1024,1536`` runs the middle only."""


def matmul_profile(args: Any) -> int:
    """DenseMatmulPlan vs cuBLAS (torch.matmul) over M x (N, K) x dtypes, cold weights."""
    import mircuda as mc

    from ..matmul import load_library
    from ..matmul._gemv import RULE_MAX_M

    check_profile_arguments(args)  # before the driver: bad flags are said without a GPU too
    sweep, table_path = getattr(args, "sweep", False), getattr(args, "table", None)
    existing = check_table_argument(table_path, sweep, args.json)
    if getattr(args, "kernels", ()) and not sweep:
        from ..errors import ContractError

        raise ContractError("--kernels", "--sweep with it (it chooses the kernels a sweep times)",
                            ",".join(args.kernels))
    driver = mc.Driver.initialize()  # without a driver nothing else matters
    ms = list(args.m)
    lib = load_library() if sweep or max(ms) > RULE_MAX_M else None  # the NVRTC kernels (M <= 16) need no CUTLASS
    swept: list[dict[str, Any]] = []
    with session(driver, args.device) as s:
        check_table_device(existing, table_path, s.info)
        if sweep and lib is not None:
            check_kernels_argument(getattr(args, "kernels", ()), lib, args.dtypes, ms, s.info)
        context, stream, pool, timer, torch_ = s.context, s.stream, s.pool, s.timer, s.torch_
        for n, k in MATMUL_SHAPES:
            for pair in [d for d in args.dtypes.split(",") if d]:
                t = Types.parse(pair)
                in_t, out_t, label = t.in_t, t.out_t, t.label
                isz, osz = t.sizes
                banks, ws, w_host = s.weights(t, n, k)
                tws = torch_.weights(n, k, t.input, banks) if torch_ is not None else None
                for m in ms:
                    a_host = s.rng.standard_normal((m, k), dtype=np.float32).astype(in_t)
                    a = upload(context, stream, pool, a_host)
                    c = pool.allocate(out_t, stream, m * n)
                    plan: mc.DenseMatmulPlan[Any, Any] = mc.DenseMatmulPlan(
                        context, stream, mc.DenseMatmulSpec(m, n, k), input=in_t, output=t.plan_output, library=lib)
                    plan.execute(stream, a, ws[0], c)
                    err = _check_rows(context, stream, c, a_host, w_host.reshape(n, k), m, n)
                    if not err <= 2e-2:  # NaN fails too
                        s.failures.append(f"DenseMatmulPlan {label} M={m} {n}x{k}: relative error {err:.2e}")
                    us = timer.median(lambda i: plan.execute(stream, a, ws[i % banks], c), args.calls, args.repeats)  # noqa: B023  (timed before the loop moves on)
                    s.rows.append(row("DenseMatmulPlan", label, m, n, k, us, isz, osz,
                                       f"{plan.kernel_name} splits={plan.splits} rel err {err:.1e}"))
                    cublas_us = None
                    if tws is not None:
                        enqueue, note = torch_.operands(m, tws, t.input, t.output)  # type: ignore[union-attr]
                        cublas_us = timer.median(enqueue, args.calls, args.repeats)
                        s.rows.append(row("cuBLAS (torch.matmul)", label, m, n, k, cublas_us, isz, osz, note))
                        del enqueue
                    chosen = (plan.kernel_name, plan.splits, us)
                    plan.close()
                    if sweep:
                        assert lib is not None
                        swept.extend(sweep_configuration(s, lib, t, m, n, k, a, a_host, w_host, ws, c, args,
                                                         cublas_us, chosen))
                    a.free(stream)
                    c.free(stream)
                del tws
                s.release(ws)
        info = s.info
        if table_path is not None:
            command = sweep_command(args, ms, table_path)
            table = winners(swept, info.name, tuple(info.compute_capability), info.multiprocessor_count, command)
            write_table(table_path, table)
        return s.report("matmul-profile", args.json,
                        f"matmul-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs): cold "
                        f"weights, median of {args.repeats} x {args.calls} back-to-back calls; cuBLAS/x > 1: faster "
                        "than cuBLAS", [s.why] if s.why else [], goals=_goals,
                        library=str(lib.path) if lib is not None else None)


def sweep_command(args: Any, ms: list[int], table_path: str) -> str:
    """The command line a measured table records: the flags that decide what was measured and where it
    was written (``--device`` only when it is not device 0)."""
    kernels = getattr(args, "kernels", ())
    flags = [("dtypes", args.dtypes), ("m", ",".join(map(str, ms))), ("calls", args.calls), ("repeats", args.repeats),
             *([("kernels", ",".join(kernels))] if kernels else []),
             *([("device", args.device)] if args.device else []), ("table", table_path)]
    return "python -m mircuda matmul-profile --sweep " + " ".join(f"--{f} {shlex.quote(str(v))}" for f, v in flags)


def check_kernels_argument(prefixes: Sequence[str], lib: Any, dtypes: str, ms: Sequence[int], info: Any) -> None:
    """Each ``--kernels`` prefix starts the name of a kernel the sweep would time on this device for one of the
    ``--dtypes`` pairs, ``--m`` values and shapes (the library's or an NVRTC decode kernel's, as
    :func:`~mircuda.cli._matmul_sweep.candidates` offers them): a misspelt prefix, or one of kernels that never run
    there, would leave the sweep timing the plans' own choices only. Checked before anything is timed.

    Raises:
        ContractError: naming ``--kernels`` and the prefix.
    """
    from ..errors import ContractError
    from ..matmul._dense import dense_kernels
    from ._matmul_sweep import candidates

    if not prefixes:
        return
    table = dense_kernels(lib)
    cc = tuple(info.compute_capability)
    pairs = [Types.parse(pair) for pair in dtypes.split(",") if pair]
    offered = {x.name for t in pairs for m in ms for n, k in MATMUL_SHAPES
               for x, _ in candidates(table, m, n, k, t.input, t.output, cc, info.multiprocessor_count)}
    for prefix in prefixes:
        if not any(name.startswith(prefix) for name in offered):
            raise ContractError("--kernels", f"prefixes of kernels a sweep times on {info.name} for --dtypes "
                                f"{dtypes} and these --m values (e.g. sm90_pingpong_64x96x64_c2x1, batched_gemv)",
                                repr(prefix[:80]))


def check_table_argument(path: str | None, sweep: bool, results: str) -> TunedTable | None:
    """``--table`` before the driver is touched: given only with ``--sweep``, a file path in an existing
    directory (:func:`check_results_file`), not the ``--json`` file (the report written after the table
    would replace it), and, when the file exists, a measured table the sweep's winners can merge into.
    Nothing is written.

    Returns:
        The table already at ``path``, or None (no ``--table``, or no file there yet).

    Raises:
        ContractError: naming ``--table``, with the reason.
    """
    from ..errors import ContractError

    if path is None:
        return None
    if not sweep:
        raise ContractError("--table", "--sweep with it (the table holds the sweep's winners)", path)
    check_results_file(path, None, "--table")
    same = (os.path.samefile(path, results) if os.path.exists(path) and os.path.exists(results)
            else os.path.abspath(path) == os.path.abspath(results))
    if same:
        raise ContractError("--table", f"a file other than --json's {results!r} (the report would replace the "
                            "table)", repr(path))
    if not os.path.isfile(path):
        return None
    try:  # the sweep merges into it: a bad one is said before minutes of work
        return read_table_file(path, path)
    except ContractError as exc:
        raise ContractError("--table", "a measured table (JSON) to merge into, or a new file", repr(path),
                            f"{exc.expected}, received {exc.received}") from None


def check_table_device(existing: TunedTable | None, path: str | None, info: Any) -> None:
    """The table already at ``--table`` is of this device's kind (compute capability and SM count, what
    :func:`mircuda.matmul._tuned.merge` requires), checked once the device is known and before the
    sweep: the winners merge into it only after minutes of work.

    Raises:
        ContractError: naming ``--table``, with both devices.
    """
    from ..errors import ContractError

    if existing is None:
        return
    here = (tuple(info.compute_capability), info.multiprocessor_count)
    if (existing.compute_capability, existing.multiprocessors) != here or existing.device != info.name:
        raise ContractError("--table", f"a table of this device to merge into (cc {here[0][0]}.{here[0][1]} "
                            f"with {here[1]} SMs: {info.name})", repr(path),
                            f"it holds {existing.device}'s sweep (cc {existing.compute_capability[0]}."
                            f"{existing.compute_capability[1]} with {existing.multiprocessors} SMs); give "
                            "another path")


def sweep_configuration(s: Any, lib: Any, t: Any, m: int, n: int, k: int, a: Any, a_host: np.ndarray,
                        w_host: np.ndarray, ws: list[Any], c: Any, args: Any,
                        cublas_us: float | None, chosen: tuple[str, int, float] | None = None) -> list[dict[str, Any]]:
    """Time every candidate kernel (and K slice count) of one configuration (with ``--kernels``, those listed
    and ``chosen``, the plan's own kernel, K slices and time); rows for the table, and one profile row each
    (path ``sweep <kernel> splits=<s>``). A candidate CUTLASS cannot implement is noted and skipped; a wrong
    result is a failure. With ``--kernels``, if the plan's own kernel gave no row here, its plan row's time stands
    for it: a listed kernel replaces an entry only by beating it."""
    import mircuda as mc

    from ..errors import MircudaError
    from ..matmul._dense import dense_kernels
    from ._matmul_sweep import candidates

    info = s.info
    isz, osz = t.sizes
    banks = len(ws)
    out: list[dict[str, Any]] = []
    table = dense_kernels(lib)
    for kernel, splits in candidates(table, m, n, k, t.input, t.output, tuple(info.compute_capability),
                                     info.multiprocessor_count, tuple(getattr(args, "kernels", ())),
                                     chosen[:2] if chosen is not None else None):
        try:
            plan: Any = mc.DenseMatmulPlan(s.context, s.stream, mc.DenseMatmulSpec(m, n, k), input=t.in_t,
                                           output=t.plan_output, kernel=kernel.name, splits=splits, library=lib)
        except MircudaError as exc:  # e.g. CUTLASS's can_implement refuses the shape: not a candidate
            print(f"  sweep: {kernel.name} splits={splits} {t.label} M={m} {n}x{k} not run: {exc}"[:300])
            continue
        try:
            plan.execute(s.stream, a, ws[0], c)
            err = _check_rows(s.context, s.stream, c, a_host, w_host.reshape(n, k), m, n)
            if not err <= 2e-2:
                s.failures.append(f"sweep {kernel.name} splits={plan.splits} {t.label} M={m} {n}x{k}: relative "
                                  f"error {err:.2e}")
                continue
            us = s.timer.median(lambda i: plan.execute(s.stream, a, ws[i % banks], c), args.calls, args.repeats)  # noqa: B023
        finally:
            plan.close()
        s.rows.append(row(f"sweep {kernel.name}", t.label, m, n, k, us, isz, osz,
                          f"splits={plan.splits} rel err {err:.1e}"))
        out.append({"input": t.input, "output": t.output, "n": n, "k": k, "m": m, "kernel": kernel.name,
                    "splits": plan.splits, "us": us, "cublas_us": cublas_us})
    if getattr(args, "kernels", ()) and chosen is not None:
        out = with_plan_row(out, chosen, {"input": t.input, "output": t.output, "n": n, "k": k, "m": m,
                                          "cublas_us": cublas_us})
    return out


def with_plan_row(rows: list[dict[str, Any]], chosen: tuple[str, int, float],
                  configuration: dict[str, Any]) -> list[dict[str, Any]]:
    """``rows`` of a ``--kernels`` sweep of one configuration, with the plan's own (kernel, K slices, µs) added
    when none of them is that kernel with those slices (it could not be made with ``kernel=`` or failed its
    check): a listed kernel then replaces the entry only if faster than the plan's time in the same run."""
    if any((r["kernel"], r["splits"]) == chosen[:2] for r in rows):
        return rows
    return [*rows, {**configuration, "kernel": chosen[0], "splits": chosen[1], "us": chosen[2]}]


def write_table(path: str, table: Any) -> None:
    """The measured table as JSON at ``path`` (the form :func:`mircuda.matmul._tuned.parse_table` reads).
    A table already there of the same device kind keeps the entries this one did not measure
    (:func:`mircuda.matmul._tuned.merge`), so sweeping one type pair or shape updates it in place."""
    if os.path.isfile(path):
        table = merge(read_table_file(path, path), table)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    data = table.to_json()
    entries = data.pop("entries")
    head = json.dumps(data, indent=1)[:-2]  # one entry per line: the table reads (and diffs) by configuration
    body = ",\n".join("  " + json.dumps(e) for e in entries)
    # written beside and renamed over: a failed write (a full disk) leaves the old table whole
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        f.write(f'{head},\n "entries": [\n{body}\n ]\n}}\n')
    os.replace(partial, path)
    print(f"measured table ({len(table.entries)} entries) written to {path}")


def _check_rows(context: Any, stream: Any, c: Any, a: np.ndarray, w: np.ndarray, m: int, n: int) -> float:
    """Relative error of three sampled rows of C (first, middle, last) against float64."""
    back = context.allocate_pinned(c.scalar_type, m * n)
    stream.copy_to_host(c, back)
    got = back.to_numpy().reshape(m, n)
    back.close()
    rows = sorted({0, m // 2, m - 1})
    want = a[rows].astype(np.float64) @ w.astype(np.float64).T
    return relative_error(got[rows], want)


def _goals(rows: list[Row]) -> list[str]:
    """The issue's goals: decode (M <= 16) at least as fast as cuBLAS; prefill (M >= 2048) >= 0.95x; and
    (issue 16) every M at >= 1.0x cuBLAS with none below 0.97, said per M range so the middle shows."""
    mine = [r for r in rows if r.path == "DenseMatmulPlan" and r.ratio_to_cublas is not None]
    decode = [r for r in mine if r.m <= 16]
    prefill = [r for r in mine if r.m >= 2048]
    out = []
    if decode:
        worst = min(decode, key=lambda r: r.ratio_to_cublas or 0)
        out.append(f"decode M <= 16 vs cuBLAS: worst ratio {worst.ratio_to_cublas:.2f} ({worst.dtype} M={worst.m} "
                   f"{worst.n}x{worst.k}); {sum((r.ratio_to_cublas or 0) >= 1 for r in decode)}/{len(decode)} >= 1")
    if prefill:
        worst = min(prefill, key=lambda r: r.ratio_to_cublas or 0)
        out.append(f"prefill M >= 2048 vs cuBLAS: worst ratio {worst.ratio_to_cublas:.2f} ({worst.dtype} M={worst.m} "
                   f"{worst.n}x{worst.k}); {sum((r.ratio_to_cublas or 0) >= 0.95 for r in prefill)}/{len(prefill)} >= 0.95")
    for label, low, high in (("middle 16 < M < 2048", 17, 2047), ("every M", 1, 1 << 62)):
        part = [r for r in mine if low <= r.m <= high]
        if part:
            worst = min(part, key=lambda r: r.ratio_to_cublas or 0)
            out.append(f"{label} vs cuBLAS (goal >= 1.0, none below 0.97): worst ratio {worst.ratio_to_cublas:.2f} "
                       f"({worst.dtype} M={worst.m} {worst.n}x{worst.k}); "
                       f"{sum((r.ratio_to_cublas or 0) >= 1 for r in part)}/{len(part)} >= 1.0, "
                       f"{sum((r.ratio_to_cublas or 0) < 0.97 for r in part)} below 0.97")
    return out


def m_values(text: str) -> tuple[int, ...]:
    """``--m`` (of every profile that takes one): comma-separated positive ints (ASCII digits), each once,
    e.g. ``1,16,2048``.

    Raises:
        argparse.ArgumentTypeError: naming the value that is not a positive int, an empty item (``1,,2``) or a
            repeated value (it would be measured and recorded twice).
    """
    import argparse

    values = []
    for v in comma_items(text, "positive int"):
        if not is_decimal(v) or int(v) < 1:
            raise argparse.ArgumentTypeError(f"expected comma-separated positive ints, received {v!r} in {text!r}")
        values.append(int(v))
    return tuple(distinct(values, text))


def kernel_prefixes(text: str) -> tuple[str, ...]:
    """``--kernels``: distinct comma-separated prefixes of kernel names (lower-case letters, digits, ``_``).

    Raises:
        argparse.ArgumentTypeError: an empty item, a repeated one, or another character.
    """
    import argparse
    import re

    items = distinct(comma_items(text, "kernel name prefix"), text)
    bad = [v for v in items if not re.fullmatch(r"[a-z0-9_]+", v)]
    if bad:
        raise argparse.ArgumentTypeError(f"expected prefixes of kernel names (a-z, 0-9, _), received {bad[0][:80]!r}")
    return tuple(items)


def dense_m_values(text: str) -> tuple[int, ...]:
    """``--m`` of matmul-profile (and fp8-profile, decoder-layer-profile, multi-gpu-profile): :func:`m_values`, each
    below the dense plans' dimension limit (checked while parsing, before an operand of that many rows is allocated).

    Raises:
        argparse.ArgumentTypeError: as :func:`m_values`, or naming a value at or above the limit.
    """
    import argparse

    from ..errors import ContractError
    from ..matmul._spec import _dim

    values = m_values(text)
    for v in values:
        try:
            _dim("m", v)
        except ContractError as exc:
            raise argparse.ArgumentTypeError(f"expected {exc.expected}, received {exc.received} in {text!r}") from None
    return values


def add_matmul_arguments(p: Any) -> None:
    add_device_argument(p)
    p.add_argument("--dtypes", type=dtype_pairs_text, default="bf16,f16,bf16->f32",
                   help="comma-separated input[->output] pairs (default: bf16,f16,bf16->f32)")
    p.add_argument("--m", type=dense_m_values, default=",".join(map(str, MATMUL_M)),
                   help="comma-separated M values (positive ints; default: the 20 of MATMUL_M, 1 to 8192 -- "
                        "subset it for a quick run, e.g. --m 24,48,96,192,384,768,1024,1536)")
    p.add_argument("--calls", type=positive_int, default=20, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=positive_int, default=7, help="timed repeats (the median is reported)")
    p.add_argument("--json", default="benchmarks/results/matmul_profile.json",
                   help=RESULTS_HELP)


def add_sweep_arguments(p: Any) -> None:
    p.add_argument("--sweep", action="store_true",
                   help="also time every kernel the device can run (and split-K slice counts) per configuration")
    p.add_argument("--kernels", type=kernel_prefixes, default=(),
                   help="with --sweep: time only the kernels whose names start with one of these comma-separated "
                        "prefixes, beside the kernel each plan chooses now (default: every kernel)")
    p.add_argument("--table", help="with --sweep: write the fastest kernel of each configuration here as "
                   "DenseMatmulPlan's measured table (the package's is mircuda/matmul/tuned/sm90_dense.json; "
                   "MIRCUDA_DENSE_TABLE=PATH makes plans consult yours)")


def register(sub: Any) -> None:
    """Add ``matmul-profile`` to the CLI's subparsers."""
    p = sub.add_parser("matmul-profile", help="DenseMatmulPlan vs cuBLAS over M and Llama-like (N, K) (GPU)")
    add_matmul_arguments(p)
    add_sweep_arguments(p)
    # read_table_file and merge name the table ``table``: on this command line it is --table
    p.set_defaults(func=matmul_profile, json_default=p.get_default("json"), flags={"table": "--table"})
