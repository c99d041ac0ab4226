"""What ``dense-vector-profile`` and ``matmul-profile`` share: one session (context, stream, pool, stream
timer, cuBLAS through torch, weight banks), the rows, the table and the results JSON. mircuda's dense
plans are measured beside cuBLAS in one run on cold weights (the method: :mod:`mircuda.timing`)."""

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

from ..timing import Column, ResultTable

__all__ = ["COLUMNS", "Row", "Types", "check_vector", "relative_error", "row", "session", "table", "upload"]

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


def row(path: str, dtype: str, m: int, n: int, k: int, us: float, in_size: int, out_size: int,
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
class Types:
    """One ``input[->output]`` pair of the command line (``bf16``, ``bf16->f32``)."""

    input: str
    output: str
    in_t: Any
    out_t: Any

    @classmethod
    def parse(cls, pair: str) -> Types:
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
    """A new device buffer holding ``host``: :meth:`mircuda.Stream.upload` (staged through pinned memory;
    waits for the copy). ``context`` is the stream's; kept so the profiles' call sites read alike."""
    return stream.upload(pool, host)


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


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-300))


COLUMNS = (Column("path", "path", 34, "<"), Column("dtype", "dtype", 10, "<"), Column("m", "M", 5),
           Column("n", "N", 6), Column("k", "K", 6), Column("us", "µs", 9, format="{:.2f}"),
           Column("tflops", "TFLOP/s", 8, format="{:.1f}"), Column("tbps", "TB/s", 6, format="{:.2f}"),
           Column("ratio_to_cublas", "cuBLAS/x", 8, format="{:.2f}"), Column("note", "", 0, "<", sep="  "))
"""The columns of the dense profiles' table (keys: the fields of :class:`Row`)."""


def table(title: str, rows: list[Row]) -> ResultTable:
    """The rows as the table ``matmul-profile`` and ``dense-vector-profile`` print (and show in Jupyter)."""
    return ResultTable(COLUMNS, [asdict(r) for r in rows], title=title, indent="  ")


def _print_table(title: str, rows: list[Row]) -> None:
    print(table(title, rows))


def _write_json(path: str, payload: dict[str, Any]) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"results written to {path}")


def add_results_argument(parser: Any, default: str) -> None:
    """A benchmark script's ``--json`` option (where its results go, ``default`` unless given)."""
    parser.add_argument("--json", default=default,
                        help="where the results go, a file in an existing directory (default: %(default)s)")


def check_results_argument(parser: Any, path: str) -> None:
    """``--json`` checked before any GPU work (not after minutes of it): an unusable path ends the script with
    argparse's one-line error (exit status 2)."""
    from ..errors import ContractError
    from ._errors import check_output_file, contract_text

    try:
        check_output_file(path, "--json")
    except ContractError as exc:
        parser.error(contract_text(exc))


def finish_script(path: str, device: str, rows: list[dict[str, Any]], failures: list[str], failed: str) -> None:
    """The end of a benchmark script (``benchmarks/*.py``): ``{"device", "rows", "failures"}`` written to ``path``
    (JSON), then exit status 1 with ``"<count> <failed>: <failures>"`` when any configuration failed.

    Raises:
        SystemExit: ``failures`` is not empty.
    """
    with open(path, "w") as f:
        json.dump({"device": device, "rows": rows, "failures": failures}, f, indent=1)
    if failures:
        raise SystemExit(f"{len(failures)} {failed}: " + "; ".join(failures))


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

    def weights(self, t: Types, n: int, k: int) -> tuple[int, list[Any], np.ndarray]:
        """(banks, device banks, host values) of one random [N, K] weight, banks >= 8x L2 in bytes."""
        from ..timing import bank_count

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

    def report(self, benchmark: str, path: str, title: str, notes: list[str],
               goals: Callable[[list[Row]], list[str]] | None = None, **extra: Any) -> int:
        """Ratios to cuBLAS, the table (and ``goals(rows)``), the JSON at ``path``; the exit status."""
        _ratios(self.rows)
        _print_table(title, self.rows)
        lines = goals(self.rows) if goals is not None else []
        for g in lines:
            print(f"  goal: {g}")
        for n in notes:
            print(f"  note: {n}")
        payload = {"benchmark": benchmark, "device": self.info.name, "arch": self.info.arch, **extra,
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "method": "back-to-back calls behind a spin kernel, events, median; weight banks >= 8x L2",
                   "notes": notes}
        if goals is not None:
            payload["goals"] = lines
        payload.update(failures=self.failures, rows=[asdict(r) for r in self.rows])
        _write_json(path, payload)
        for f in self.failures:
            print(f"FAILED: {f}", file=sys.stderr)
        return 1 if self.failures else 0


@contextlib.contextmanager
def session(driver: Any, device: int) -> Iterator[_Session]:
    """One context on ``device`` with its stream, pool and :class:`~mircuda.timing.StreamTimer` (closed on exit)."""
    from ..matmul._vector import shared_compiler
    from ..timing import StreamTimer

    with driver.create_context(driver.device(device)) as context:
        stream = context.create_stream()
        timer = StreamTimer(context, stream, shared_compiler(context))  # one NVRTC load with the plans'
        torch_, why = _torch_or_reason(stream.handle)
        try:
            yield _Session(context, context.device_info(), stream, context.default_memory_pool(), timer, torch_,
                           why, np.random.default_rng(), [], [])
        finally:
            timer.close()


def check_vector(context: Any, stream: Any, y: Any, want: np.ndarray) -> float:
    back = context.allocate_pinned(y.scalar_type, len(y))
    stream.copy_to_host(y, back)
    got = back.to_numpy()
    back.close()
    return relative_error(got, want)
