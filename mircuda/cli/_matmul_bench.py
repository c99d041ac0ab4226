"""``python -m mircuda dense-vector-profile`` and ``matmul-profile``: mircuda's dense plans beside
cuBLAS (through ``torch.matmul``), measured in one run on cold weights (see ``_timing``)."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["dense_vector_profile", "matmul_profile", "Row"]

VECTOR_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
"""(N, K) of the weights: Llama-3-8B-like projections (hidden 4096, MLP 14336, fused QKV 6144)."""


@dataclass
class Row:
    """One measured configuration: µs per call (median), and derived rates."""

    path: str
    dtype: str
    m: int
    n: int
    k: int
    us: float
    tflops: float
    tbps: float
    ratio_to_cublas: float | None = None
    note: str = ""


def _bytes(m: int, n: int, k: int, in_size: int, out_size: int) -> int:
    return (n * k + m * k) * in_size + m * n * out_size


def _row(path: str, dtype: str, m: int, n: int, k: int, us: float, in_size: int, out_size: int,
         note: str = "") -> Row:
    return Row(path, dtype, m, n, k, us, 2 * m * n * k / (us * 1e-6) / 1e12,
               _bytes(m, n, k, in_size, out_size) / (us * 1e-6) / 1e12, None, note)


class _Torch:
    """cuBLAS through torch.matmul on mircuda's stream (an external stream)."""

    def __init__(self, stream_handle: int) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.torch = torch
        self.stream = torch.cuda.ExternalStream(stream_handle)

    def dtype(self, name: str) -> Any:
        return {"bf16": self.torch.bfloat16, "f16": self.torch.float16, "f32": self.torch.float32}[name]

    def weights(self, n: int, k: int, input: str, banks: int) -> list[Any]:
        t = self.torch
        with t.cuda.stream(self.stream):
            return [t.randn(n, k, device="cuda").to(self.dtype(input)) for _ in range(banks)]

    def operands(self, m: int, ws: list[Any], input: str, output: str) -> tuple[Callable[[int], None], str]:
        """An enqueue function ``C = A W_i^T`` over the weight banks, and a note on the output."""
        t = self.torch
        n, k = ws[0].shape
        banks = len(ws)
        with t.cuda.stream(self.stream):
            a = t.randn(m, k, device="cuda").to(self.dtype(input))
            c = t.empty(m, n, device="cuda", dtype=self.dtype(output))
        stream = self.stream

        def same(i: int) -> None:
            with t.cuda.stream(stream):
                t.matmul(a, ws[i % banks].t(), out=c)

        def widened(i: int) -> None:  # cuBLAS accumulates in f32 and writes f32 (torch >= 2.9: out_dtype)
            with t.cuda.stream(stream):
                t.mm(a, ws[i % banks].t(), out_dtype=t.float32, out=c)

        if input == output:
            same(0)
            return same, ""
        try:
            widened(0)
            return widened, "torch.mm(out_dtype=float32)"
        except (TypeError, RuntimeError):
            with t.cuda.stream(stream):
                c = t.empty(m, n, device="cuda", dtype=self.dtype(input))
            same(0)
            return same, f"{input} output (this torch has no mm out_dtype)"

    def release(self) -> None:
        self.stream.synchronize()
        self.torch.cuda.empty_cache()


@dataclass(frozen=True)
class _Types:
    """One ``input[->output]`` pair of the command line (``bf16``, ``bf16->f32``)."""

    input: str
    output: str
    in_t: Any
    out_t: Any

    @classmethod
    def parse(cls, pair: str) -> _Types:
        import mircuda as mc

        input, output = (pair.split("->") + [""])[:2]
        output = output or input
        return cls(input, output, getattr(mc, input), getattr(mc, output))

    @property
    def label(self) -> str:
        return f"{self.input}->{self.output}"

    @property
    def sizes(self) -> tuple[int, int]:
        return np.dtype(self.in_t).itemsize, np.dtype(self.out_t).itemsize

    @property
    def plan_output(self) -> Any:
        """The ``output=`` argument of a plan: None when it is the input type."""
        return None if self.out_t is self.in_t else self.out_t


def upload(context: Any, stream: Any, pool: Any, host: np.ndarray) -> Any:
    """A new device buffer holding ``host`` (through pinned memory; waits for the copy)."""
    buf = pool.allocate(host.dtype, stream, host.size)
    staging = context.allocate_pinned(host.dtype, host.size)
    staging.write_prefix(host.ravel())
    stream.copy_to_device(staging, buf)
    staging.close()
    return buf


def _torch_or_reason(stream_handle: int) -> tuple[_Torch | None, str]:
    try:
        return _Torch(stream_handle), ""
    except Exception as exc:  # torch missing or without CUDA: the table says so
        return None, f"torch unavailable ({type(exc).__name__}: {exc})"[:200]


def _weight_banks(context: Any, stream: Any, pool: Any, rng: np.random.Generator, dtype: Any, n: int, k: int,
                  banks: int) -> tuple[list[Any], np.ndarray]:
    """``banks`` device copies of one random [N, K] matrix (values do not change the timing)."""
    host = rng.standard_normal(n * k, dtype=np.float32).astype(dtype)
    first = upload(context, stream, pool, host)
    out = [first]
    for _ in range(banks - 1):
        b = pool.allocate(dtype, stream, n * k)
        stream.copy_device_range(first, 0, b, 0, n * k)
        out.append(b)
    return out, host


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-300))


def _print_table(title: str, rows: list[Row]) -> None:
    print(title)
    print(f"  {'path':<34} {'dtype':<10} {'M':>5} {'N':>6} {'K':>6} {'µs':>9} {'TFLOP/s':>8} {'TB/s':>6} {'cuBLAS/x':>8}")
    for r in rows:
        ratio = f"{r.ratio_to_cublas:.2f}" if r.ratio_to_cublas is not None else "-"
        print(f"  {r.path:<34} {r.dtype:<10} {r.m:>5} {r.n:>6} {r.k:>6} {r.us:>9.2f} {r.tflops:>8.1f} "
              f"{r.tbps:>6.2f} {ratio:>8}{'  ' + r.note if r.note else ''}")


def _write_json(path: str, payload: dict[str, Any]) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"results written to {path}")


def _ratios(rows: list[Row]) -> None:
    """ratio_to_cublas = cuBLAS µs / this path's µs (> 1: faster than cuBLAS) for rows of one shape."""
    ref = {(r.dtype, r.m, r.n, r.k): r.us for r in rows if r.path.startswith("cuBLAS")}
    for r in rows:
        base = ref.get((r.dtype, r.m, r.n, r.k))
        if base is not None:
            r.ratio_to_cublas = base / r.us


@dataclass
class _Session:
    """What both profiles measure with: one context's stream, pool and timer, cuBLAS through torch
    when it is installed, and the rows and failures gathered so far."""

    context: Any
    info: Any
    stream: Any
    pool: Any
    timer: Any
    torch_: _Torch | None
    why: str
    rng: np.random.Generator
    rows: list[Row]
    failures: list[str]

    def weights(self, t: _Types, n: int, k: int) -> tuple[int, list[Any], np.ndarray]:
        """(banks, device banks, host values) of one random [N, K] weight, banks >= 8x L2 in bytes."""
        from ._timing import bank_count

        banks = bank_count(n * k * t.sizes[0], self.info.l2_cache_bytes)
        ws, host = _weight_banks(self.context, self.stream, self.pool, self.rng, t.in_t, n, k, banks)
        return banks, ws, host

    def release(self, buffers: list[Any]) -> None:
        """Free one shape's buffers and torch's cached blocks before the next shape allocates."""
        for b in buffers:
            b.free(self.stream)
        self.stream.synchronize()
        if self.torch_ is not None:
            self.torch_.release()

    def report(self, benchmark: str, path: str, title: str, notes: list[str], goals: bool = False,
               **extra: Any) -> int:
        """Ratios to cuBLAS, the table (and the goals), the JSON at ``path``; the exit status."""
        _ratios(self.rows)
        _print_table(title, self.rows)
        lines = _goals(self.rows) if goals else []
        for g in lines:
            print(f"  goal: {g}")
        for n in notes:
            print(f"  note: {n}")
        payload = {"benchmark": benchmark, "device": self.info.name, "arch": self.info.arch, **extra,
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "method": "back-to-back calls behind a spin kernel, events, median; weight banks >= 8x L2",
                   "notes": notes}
        if goals:
            payload["goals"] = lines
        payload.update(failures=self.failures, rows=[asdict(r) for r in self.rows])
        _write_json(path, payload)
        for f in self.failures:
            print(f"FAILED: {f}", file=sys.stderr)
        return 1 if self.failures else 0


@contextlib.contextmanager
def _session(driver: Any, device: int) -> Iterator[_Session]:
    from ._timing import StreamTimer

    with driver.create_context(driver.device(device)) as context:
        stream = context.create_stream()
        timer = StreamTimer(context, stream)
        torch_, why = _torch_or_reason(stream.handle)
        try:
            yield _Session(context, context.device_info(), stream, context.default_memory_pool(), timer, torch_,
                           why, np.random.default_rng(), [], [])
        finally:
            timer.close()


def dense_vector_profile(args: Any) -> int:
    """DenseVectorPlan vs DenseMatmulPlan (M = 1: the same NVRTC kernel, no CUTLASS library needed) vs cuBLAS."""
    import mircuda as mc

    with _session(mc.Driver.initialize(), args.device) as s:
        context, stream, pool, timer, torch_ = s.context, s.stream, s.pool, s.timer, s.torch_
        for n, k in VECTOR_SHAPES:
            for pair in [d for d in args.dtypes.split(",") if d]:
                t = _Types.parse(pair)
                in_t, out_t, label = t.in_t, t.out_t, t.label
                isz, osz = t.sizes
                banks, ws, w_host = s.weights(t, n, k)
                x_host = s.rng.standard_normal(k, dtype=np.float32).astype(in_t)
                x = upload(context, stream, pool, x_host)
                y = pool.allocate(out_t, stream, n)
                want = w_host.astype(np.float64).reshape(n, k) @ x_host.astype(np.float64)
                choices = [(None, None)] + ([(r, w) for r in (8, 16) for w in (1, 2, 4, 8)] if args.sweep else [])
                for rows_per_block, warps in choices:
                    plan = mc.DenseVectorPlan(context, stream, mc.DenseVectorSpec(n, k), input=in_t,
                                              output=t.plan_output, rows=rows_per_block, warps=warps)
                    plan.execute(stream, x, ws[0], y)
                    err = _check_vector(context, stream, y, want)
                    if err > 1e-2:
                        s.failures.append(f"DenseVectorPlan {label} {n}x{k}: relative error {err:.2e}")
                    us = timer.median(lambda i: plan.execute(stream, x, ws[i % banks], y), args.calls, args.repeats)
                    name = "DenseVectorPlan" + ("" if warps is None else f" rows={rows_per_block} warps={warps}")
                    s.rows.append(_row(name, label, 1, n, k, us, isz, osz,
                                       f"{plan.rows} rows x {plan.warps} warp(s)/block, rel err {err:.1e}"))
                s.rows.append(_matmul_row(context, stream, pool, timer, ws, x, y, want, in_t, out_t, label, n, k,
                                          banks, args, s.failures))
                if torch_ is not None:
                    tws = torch_.weights(n, k, t.input, banks)
                    enqueue, note = torch_.operands(1, tws, t.input, t.output)
                    us = timer.median(enqueue, args.calls, args.repeats)
                    s.rows.append(_row("cuBLAS (torch.matmul)", label, 1, n, k, us, isz, osz, note))
                    del tws, enqueue
                s.release(ws + [x, y])
        info = s.info
        return s.report("dense-vector-profile", args.json,
                        f"dense-vector-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs, "
                        f"L2 {info.l2_cache_bytes >> 20} MiB): M = 1, cold weights, median of {args.repeats} x "
                        f"{args.calls} back-to-back calls", [s.why] if s.why else [])


def _check_vector(context: Any, stream: Any, y: Any, want: np.ndarray) -> float:
    back = context.allocate_pinned(y.scalar_type, len(y))
    stream.copy_to_host(y, back)
    got = back.to_numpy()
    back.close()
    return _relative_error(got, want)


def _matmul_row(context: Any, stream: Any, pool: Any, timer: Any, ws: list[Any], x: Any, y: Any, want: np.ndarray,
                in_t: Any, out_t: Any, label: str, n: int, k: int, banks: int, args: Any, failures: list[str]) -> Row:
    import mircuda as mc

    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(1, n, k), input=in_t,
                              output=None if out_t is in_t else out_t)
    plan.execute(stream, x, ws[0], y)  # checked like DenseVectorPlan's rows: a fast wrong answer is a failure
    err = _check_vector(context, stream, y, want)
    if err > 1e-2:
        failures.append(f"DenseMatmulPlan M=1 {label} {n}x{k} ({plan.kernel_name}): relative error {err:.2e}")
    us = timer.median(lambda i: plan.execute(stream, x, ws[i % banks], y), args.calls, args.repeats)
    row = _row("DenseMatmulPlan", label, 1, n, k, us, np.dtype(in_t).itemsize, np.dtype(out_t).itemsize,
               f"{plan.kernel_name} splits={plan.splits}, rel err {err:.1e}")
    plan.close()
    return row


def add_vector_arguments(p: Any) -> None:
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--dtypes", default="bf16,f16,bf16->f32",
                   help="comma-separated input[->output] pairs (default: bf16,f16,bf16->f32)")
    p.add_argument("--calls", type=int, default=50, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=int, default=15, help="timed repeats (the median is reported)")
    p.add_argument("--sweep", action="store_true", help="also time every block shape (8 or 16 rows x 1, 2, 4, 8 warps splitting K)")
    p.add_argument("--json", default="benchmarks/results/dense_vector_profile.json")


MATMUL_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))


def matmul_profile(args: Any) -> int:
    """DenseMatmulPlan vs cuBLAS (torch.matmul) over M x (N, K) x dtypes, cold weights."""
    import mircuda as mc

    from ._gemv import MAX_M
    from ._library import load_library

    driver = mc.Driver.initialize()  # first: without a driver nothing else matters
    ms = list(args.m)
    lib = load_library() if max(ms) > MAX_M else None  # the NVRTC kernels (M <= 16) need no CUTLASS
    with _session(driver, args.device) as s:
        context, stream, pool, timer, torch_ = s.context, s.stream, s.pool, s.timer, s.torch_
        for n, k in MATMUL_SHAPES:
            for pair in [d for d in args.dtypes.split(",") if d]:
                t = _Types.parse(pair)
                in_t, out_t, label = t.in_t, t.out_t, t.label
                isz, osz = t.sizes
                banks, ws, w_host = s.weights(t, n, k)
                tws = torch_.weights(n, k, t.input, banks) if torch_ is not None else None
                for m in ms:
                    a_host = s.rng.standard_normal((m, k), dtype=np.float32).astype(in_t)
                    a = upload(context, stream, pool, a_host)
                    c = pool.allocate(out_t, stream, m * n)
                    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=in_t,
                                              output=t.plan_output, library=lib)
                    plan.execute(stream, a, ws[0], c)
                    err = _check_rows(context, stream, c, a_host, w_host.reshape(n, k), m, n)
                    if err > 2e-2:
                        s.failures.append(f"DenseMatmulPlan {label} M={m} {n}x{k}: relative error {err:.2e}")
                    us = timer.median(lambda i: plan.execute(stream, a, ws[i % banks], c), args.calls, args.repeats)
                    s.rows.append(_row("DenseMatmulPlan", label, m, n, k, us, isz, osz,
                                       f"{plan.kernel_name} splits={plan.splits} rel err {err:.1e}"))
                    if tws is not None:
                        enqueue, note = torch_.operands(m, tws, t.input, t.output)  # type: ignore[union-attr]
                        us = timer.median(enqueue, args.calls, args.repeats)
                        s.rows.append(_row("cuBLAS (torch.matmul)", label, m, n, k, us, isz, osz, note))
                        del enqueue
                    plan.close()
                    a.free(stream)
                    c.free(stream)
                del tws
                s.release(ws)
        info = s.info
        return s.report("matmul-profile", args.json,
                        f"matmul-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs): cold "
                        f"weights, median of {args.repeats} x {args.calls} back-to-back calls; cuBLAS/x > 1: faster "
                        "than cuBLAS", [s.why] if s.why else [], goals=True,
                        library=str(lib.path) if lib is not None else None)


def _check_rows(context: Any, stream: Any, c: Any, a: np.ndarray, w: np.ndarray, m: int, n: int) -> float:
    """Relative error of three sampled rows of C (first, middle, last) against float64."""
    back = context.allocate_pinned(c.scalar_type, m * n)
    stream.copy_to_host(c, back)
    got = back.to_numpy().reshape(m, n)
    back.close()
    rows = sorted({0, m // 2, m - 1})
    want = a[rows].astype(np.float64) @ w.astype(np.float64).T
    return _relative_error(got[rows], want)


def _goals(rows: list[Row]) -> list[str]:
    """The issue's goals: decode (M <= 16) at least as fast as cuBLAS; prefill (M >= 2048) >= 0.95x."""
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
    return out


def m_values(text: str) -> tuple[int, ...]:
    """``--m``: comma-separated positive ints, e.g. ``1,16,2048``.

    Raises:
        argparse.ArgumentTypeError: naming the value that is not a positive int.
    """
    import argparse

    values = []
    for v in (v.strip() for v in text.split(",")):
        if v and (not v.isdigit() or int(v) < 1):
            raise argparse.ArgumentTypeError(f"expected comma-separated positive ints, received {v!r} in {text!r}")
        if v:
            values.append(int(v))
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one positive int, received {text!r}")
    return tuple(values)


def add_matmul_arguments(p: Any) -> None:
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--dtypes", default="bf16,f16,bf16->f32",
                   help="comma-separated input[->output] pairs (default: bf16,f16,bf16->f32)")
    p.add_argument("--m", type=m_values, default="1,2,4,8,16,32,64,128,512,2048,8192",
                   help="comma-separated M values (positive ints)")
    p.add_argument("--calls", type=int, default=20, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats (the median is reported)")
    p.add_argument("--json", default="benchmarks/results/matmul_profile.json")
