"""``python -m mircuda fp8-profile``: BlockwiseFp8Plan (and BlockwiseFp8VectorPlan at M = 1) beside torch's
FP8 scaled matmul (cuBLASLt through ``torch._scaled_mm``) in one run, on cold weights (banks >= 8x L2),
timed by :class:`~mircuda.timing.StreamTimer` on the session of :mod:`mircuda.cli._matmul_bench`.

Torch is measured with rowwise scaling (``scale_a`` [M, 1], ``scale_b`` [1, N]) always, and with
blockwise 1x128 / 128x128 scaling (``scale_a`` [M, K/128], ``scale_b`` [K/128, N/128]: the layouts
PERFORMANCE.md records for torch 2.11 on the H200) where the installed torch accepts it; a refusal
(cuBLASLt refuses blockwise at M = 1) is recorded, not raised. Both plans and torch's blockwise product
read the same E4M3 codes and FP32 scales; every result is checked on three rows (first, middle, last)
against float64 (the dequantized operands for blockwise, the codes for rowwise with unit scales).
Torch is optional: without it (or without CUDA in it) only mircuda's rows are measured and the table
says why.

``--sweep`` adds, for every M <= 16, one row per candidate configuration of the NVRTC decode kernels
(kernel, weight rows per block, warps splitting K, programmatic-dependent-launch trigger), each checked
like the default plans, and prints the fastest configuration per (M, N, K) beside the default: the
measurements that choose the decode defaults (see :func:`sweep_values`)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..timing import Column, ResultTable
from ._errors import RESULTS_HELP
from ._values import comma_items, add_device_argument, positive_int, shape_values

__all__ = ["COLUMNS", "FP8_M", "FP8_SHAPES", "SWEEP_KERNELS", "Candidate", "Fp8Row", "fp8_profile", "fp8_shape_values",
           "profile_shape_values", "register", "row_operands", "shape_values", "shape_weights", "sweep_best", "sweep_values", "table"]

FP8_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
"""(N, K) of the weights: Llama-3-8B-like projections (hidden 4096, MLP 14336, fused QKV 6144)."""
FP8_M = (1, 2, 4, 8, 16, 32, 64, 128, 512, 2048, 8192)
DECODE_MAX_M = 16
"""Rows up to this M are reported as bandwidth (TB/s), larger M as TFLOP/s (both are in the JSON)."""
CHECK_LIMIT = 2e-2
"""Largest relative error (Frobenius, three sampled rows) accepted against float64."""


@dataclass
class Fp8Row:
    """One measured configuration: µs per call (median), its rates, and torch µs / this µs."""

    path: str
    m: int
    n: int
    k: int
    us: float
    tflops: float
    tbps: float
    vs_rowwise: float | None = None
    vs_blockwise: float | None = None
    note: str = ""


def fp8_bytes(m: int, n: int, k: int) -> int:
    """Bytes one call moves at least: E4M3 A and B, FP32 scales (1x128 of A, 128x128 of B), BF16 D."""
    kb, nb = -(-k // 128), -(-n // 128)
    return n * k + m * k + 4 * (nb * kb + m * kb) + 2 * m * n


def fp8_row(path: str, m: int, n: int, k: int, us: float, note: str = "") -> Fp8Row:
    return Fp8Row(path, m, n, k, us, 2 * m * n * k / (us * 1e-6) / 1e12, fp8_bytes(m, n, k) / (us * 1e-6) / 1e12,
                  note=note)


def ratios(rows: list[Fp8Row]) -> None:
    """``vs_rowwise`` / ``vs_blockwise`` = torch's µs / this row's µs (> 1: faster than torch), per shape."""
    rowwise = {(r.m, r.n, r.k): r.us for r in rows if r.path.startswith("torch rowwise")}
    blockwise = {(r.m, r.n, r.k): r.us for r in rows if r.path.startswith("torch blockwise")}
    for r in rows:
        if r.path.startswith("torch"):
            continue
        key = (r.m, r.n, r.k)
        r.vs_rowwise = rowwise[key] / r.us if key in rowwise else None
        r.vs_blockwise = blockwise[key] / r.us if key in blockwise else None


def fp8_shape_values(text: str) -> tuple[tuple[int, int], ...]:
    """fp8-profile's ``--shapes``: :func:`shape_values` with K a multiple of 16, the rule of every blockwise
    FP8 plan (``mircuda.matmul._fp8.FP8_K_MULTIPLE``: 16-byte rows of E4M3 codes).

    Raises:
        argparse.ArgumentTypeError: naming the pair whose K breaks the rule.
    """
    from ..matmul._fp8 import FP8_K_MULTIPLE
    from ._values import k_multiple

    return k_multiple(shape_values(text), text, FP8_K_MULTIPLE, "16-byte rows of E4M3 codes")


def profile_shape_values(text: str) -> tuple[tuple[int, int], ...]:
    """fp8-profile's ``--shapes``: :func:`fp8_shape_values`, each N and K below the plans' dimension limit
    (:func:`~mircuda.cli._values.below_dim_limit`, checked while parsing, as dense-vector-profile's ``--shapes``).

    Raises:
        argparse.ArgumentTypeError: as :func:`fp8_shape_values`, or naming a pair at or above the limit.
    """
    from ._values import below_dim_limit

    return below_dim_limit(fp8_shape_values(text), text)


SWEEP_KERNELS = {"gemv": ("blockwise_fp8_gemv", (1, 2, 4, 8)), "mma": ("blockwise_fp8_mma", (16, 32))}
"""``--sweep``'s kernel names: the NVRTC decode kernel each names and the weight rows per block it takes
(``gemv``: ``cuda_src/fp8_vector.cu`` on CUDA cores, rows x M <= 32; ``mma``: ``cuda_src/fp8_mma_gemv.cu``
on the tensor cores)."""
SWEEP_PREFIX = "sweep "
"""The path of a sweep row: ``"sweep " + Candidate.label``."""


@dataclass(frozen=True)
class Candidate:
    """One decode configuration of ``--sweep``: ``kernel`` (a key of :data:`SWEEP_KERNELS`) and the
    plans' knobs ``rows``, ``warps``, ``pdl_trigger``, ``decode`` and ``persistent`` (None: the plan's
    default)."""

    kernel: str
    rows: int | None = None
    warps: int | None = None
    pdl_trigger: str | None = None
    decode: str | None = None
    persistent: bool | None = None

    @property
    def label(self) -> str:
        """``kernel[:rows=R][:warps=W][:trigger=T][:decode=D][:persistent=0|1]``, as ``--sweep`` spells it."""
        parts = [self.kernel] + [f"{key}={value}" for key, value in (("rows", self.rows), ("warps", self.warps),
                                                                     ("trigger", self.pdl_trigger),
                                                                     ("decode", self.decode),
                                                                     ("persistent", None if self.persistent is None
                                                                      else int(self.persistent)))
                                 if value is not None]
        return ":".join(parts)

    def knobs(self) -> dict[str, Any]:
        """The plans' keyword arguments for this configuration."""
        knobs = {"kernel": SWEEP_KERNELS[self.kernel][0], "rows": self.rows, "warps": self.warps,
                 "pdl_trigger": self.pdl_trigger, "decode": self.decode}
        if self.persistent is not None:  # gemv only
            knobs["persistent"] = self.persistent
        return knobs


def sweep_values(text: str) -> tuple[Candidate, ...]:
    """``--sweep``: comma-separated candidates ``kernel[:rows=R][:warps=W][:trigger=early|late]`` (and for
    ``mma`` ``[:decode=hardware|integer]``, for ``gemv`` ``[:persistent=0|1]``) with ``kernel`` ``gemv`` or
    ``mma`` (:data:`SWEEP_KERNELS`),
    e.g. ``mma,mma:rows=32,mma:warps=4:trigger=early,mma:decode=integer,gemv:rows=4``; a knob left out
    is the plan's default.

    Raises:
        argparse.ArgumentTypeError: naming the candidate and what is wrong with it (an empty candidate, ``mma,``,
            and the same candidate twice are refused too).
    """
    out: list[Candidate] = []
    for item in comma_items(text, "candidate"):
        kernel, *pairs = item.split(":")
        if kernel not in SWEEP_KERNELS:
            raise argparse.ArgumentTypeError(f"expected candidates kernel[:rows=R][:warps=W][:trigger=early|late]"
                                             f"[:decode=hardware|integer] with kernel gemv or mma (decode: mma only), "
                                             f"received {item!r}")
        knobs: dict[str, Any] = {}
        for pair in pairs:
            key, _, value = pair.partition("=")
            allowed = {"rows": SWEEP_KERNELS[kernel][1], "warps": (1, 2, 4, 8), "trigger": ("early", "late")}
            if kernel == "mma":
                allowed["decode"] = ("hardware", "integer")
            else:
                allowed["persistent"] = (0, 1)
            if key not in allowed or key in knobs:
                raise argparse.ArgumentTypeError(f"expected {'=, '.join(allowed)}= once each in {item!r}, "
                                                 f"received {pair!r}")
            # ASCII digits, at most two: str.isdigit() also takes '²' and other scripts' digits, and int()
            # refuses more than 4300 digits; no knob's value has more than two.
            numeric = value.isascii() and value.isdigit() and len(value) <= 2 and (value == "0" or value[0] != "0")
            parsed: Any = int(value) if key != "trigger" and numeric else value
            if parsed not in allowed[key]:
                raise argparse.ArgumentTypeError(f"expected {key} one of {', '.join(map(str, allowed[key]))} for "
                                                 f"{kernel} in {item[:60]!r}, received {value[:20]!r}")
            knobs[key] = parsed
        # persistent=0 is the plans' default: the same configuration as leaving it out
        candidate = Candidate(kernel, knobs.get("rows"), knobs.get("warps"), knobs.get("trigger"), knobs.get("decode"),
                              True if knobs.get("persistent") else None)
        if candidate in out:  # the same configuration twice would be measured twice and reported as two rows
            raise argparse.ArgumentTypeError(f"expected distinct candidates, received {item!r} twice in {text!r}")
        out.append(candidate)
    return tuple(out)


def sweep_best(rows: list[Fp8Row]) -> list[str]:
    """Per (M, N, K) with sweep rows: the fastest configuration among the sweep and the default plans."""
    defaults = ("BlockwiseFp8VectorPlan", "BlockwiseFp8Plan")
    keys = sorted({(r.m, r.n, r.k) for r in rows if r.path.startswith(SWEEP_PREFIX)})
    out = []
    for key in keys:
        mine = [r for r in rows if (r.m, r.n, r.k) == key and (r.path.startswith(SWEEP_PREFIX) or r.path in defaults)]
        best = min(mine, key=lambda r: r.us)
        default = ", ".join(f"{r.path} {r.us:.2f} µs ({r.note.split(', rel err')[0]})" for r in mine
                            if r.path in defaults)
        out.append(f"fastest M={key[0]} {key[1]}x{key[2]}: {best.path} {best.us:.2f} µs ({best.tbps:.2f} TB/s); "
                   f"default: {default or 'not measured'}")
    return out


def torch_available() -> str:
    """``""`` when torch can be imported, else why not (the profile runs without it)."""
    import importlib.util

    return "" if importlib.util.find_spec("torch") is not None else "torch is not installed"


class _TorchFp8:
    """``torch._scaled_mm`` on mircuda's stream over weight banks made from the same host codes and scales."""

    def __init__(self, torch: Any, stream: Any) -> None:
        self.t, self.stream = torch, stream
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            raise RuntimeError(f"torch {torch.__version__} has no _scaled_mm / float8_e4m3fn")

    def tensor(self, host: np.ndarray) -> Any:
        t = self.t
        if host.dtype.itemsize == 1:  # E4M3 codes
            cpu = t.from_numpy(np.ascontiguousarray(host).view(np.uint8)).view(t.float8_e4m3fn)
        else:
            cpu = t.from_numpy(np.ascontiguousarray(host))
        with t.cuda.stream(self.stream):
            return cpu.to("cuda", non_blocking=False)

    def banks(self, b: np.ndarray, sb: np.ndarray, count: int) -> tuple[list[Any], list[Any]]:
        t = self.t
        w, s = self.tensor(b), self.tensor(sb)
        with t.cuda.stream(self.stream):
            return [w] + [w.clone() for _ in range(count - 1)], [s] + [s.clone() for _ in range(count - 1)]

    def enqueue(self, a: Any, sa: Any, ws: list[Any], sbs: list[Any] | Any, transform: Any) -> tuple[Any, Any]:
        """(enqueue(i), first result): calls of ``_scaled_mm`` on bank ``i`` (BF16 out, allocated by torch's
        stream-ordered caching allocator: host work only, hidden behind the timer's spin kernel); the first
        call raises what torch raises."""
        t, stream, banks = self.t, self.stream, len(ws)
        with t.cuda.stream(stream):  # once, before timing: a per-call layout copy would be timed with torch
            scales = [transform(x) for x in sbs] if isinstance(sbs, list) else [transform(sbs)] * banks

        def call(i: int) -> Any:
            with t.cuda.stream(stream):
                return t._scaled_mm(a, ws[i % banks].t(), scale_a=sa, scale_b=scales[i % banks], out_dtype=t.bfloat16)

        return call, call(0)

    def rows(self, out: Any, rows: list[int]) -> np.ndarray:
        with self.t.cuda.stream(self.stream):
            host = out[rows].float().cpu()
        return host.numpy().astype(np.float64)


def _sample_rows(m: int) -> list[int]:
    return sorted({0, m // 2, m - 1})


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want)) / max(float(np.linalg.norm(want)), 1e-300)


def _operands(rng: np.random.Generator, rows: int, k: int, scale_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Random E4M3 codes (normal x 64, within +-448) and FP32 scales in [2**-6, 2**-2] (``scale_rows`` x
    ceil(K/128)): the values do not change the timing; the scales make a wrong scale layout visible."""
    import mircuda as mc

    codes = np.clip(rng.standard_normal((rows, k), dtype=np.float32) * 64, -448, 448).astype(mc.e4m3)
    scales = np.exp2(rng.uniform(-6, -2, (scale_rows, -(-k // 128)))).astype(np.float32)
    return codes, scales


def _dequantize(codes: np.ndarray, scales: np.ndarray, block_rows: int) -> np.ndarray:
    cols = np.arange(codes.shape[1]) // 128
    rows = np.arange(codes.shape[0]) // block_rows
    return codes.astype(np.float64) * scales.astype(np.float64)[rows[:, None], cols[None, :]]


def weight_banks(context: Any, stream: Any, pool: Any, b: np.ndarray, sb: np.ndarray,
                 banks: int) -> tuple[list[Any], list[Any]]:
    """``banks`` device copies of the E4M3 weights ``b`` and their FP32 scales ``sb`` (uploaded once, then copied
    on the device), rotated by the timed calls so that every call reads cold weights."""
    import mircuda as mc

    from ._matmul_bench import upload

    first_b, first_sb = upload(context, stream, pool, b.ravel()), upload(context, stream, pool, sb.ravel())
    wb, wsb = [first_b], [first_sb]
    for _ in range(banks - 1):
        wb.append(pool.allocate(mc.e4m3, stream, b.size))
        stream.copy_device_range(first_b, 0, wb[-1], 0, b.size)
        wsb.append(pool.allocate(mc.f32, stream, sb.size))
        stream.copy_device_range(first_sb, 0, wsb[-1], 0, sb.size)
    return wb, wsb


def shape_weights(s: Any, torch_: _TorchFp8 | None, n: int,
                  k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any], list[Any], list[Any], list[Any]]:
    """One (N, K)'s weights for a timed sweep on the session ``s`` (:func:`~mircuda.cli._matmul_bench.session`):
    ``(b, sb, b_deq, wb, wsb, tw, tsb)``, the host E4M3 codes and FP32 scales (:func:`_operands`), their float64
    dequantization, mircuda's banks of both (:func:`weight_banks`, at least 8x the L2 cache) and torch's (empty
    without torch)."""
    from ..timing import bank_count

    nb, kb = -(-n // 128), -(-k // 128)
    banks = bank_count(n * k + 4 * nb * kb, s.info.l2_cache_bytes)
    b, sb = _operands(s.rng, n, k, nb)
    wb, wsb = weight_banks(s.context, s.stream, s.pool, b, sb, banks)
    tw, tsb = torch_.banks(b, sb, banks) if torch_ is not None else ([], [])
    return b, sb, _dequantize(b, sb, 128), wb, wsb, tw, tsb


def row_operands(s: Any, m: int, n: int, k: int,
                 b_deq: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int], np.ndarray, Any, Any, Any]:
    """One timed point's activations against the weights ``b_deq`` (:func:`shape_weights`): ``(a, sa, sample, want,
    da, dsa, d)``, the host codes and scales, the sampled rows (:func:`_sample_rows`) and their float64 product,
    the device copies of ``a`` and ``sa`` and a BF16 ``[M, N]`` output (the caller frees the three)."""
    import mircuda as mc

    from ._matmul_bench import upload

    a, sa = _operands(s.rng, m, k, m)
    sample = _sample_rows(m)
    want = _dequantize(a[sample], sa[sample], 1) @ b_deq.T
    da, dsa = upload(s.context, s.stream, s.pool, a.ravel()), upload(s.context, s.stream, s.pool, sa.ravel())
    return a, sa, sample, want, da, dsa, s.pool.allocate(mc.bf16, s.stream, m * n)


BLOCKWISE_LAYOUTS: tuple[tuple[str, Any, Any], ...] = (
    ("sa [M, K/128] outer-major, sb [K/128, N/128]", lambda s: s.t().contiguous().t(), lambda s: s.t().contiguous()),
    ("sa [M, K/128], sb [K/128, N/128]", lambda s: s.contiguous(), lambda s: s.t().contiguous()),
    ("sa [M, K/128] outer-major, sb [N/128, K/128]^T", lambda s: s.t().contiguous().t(), lambda s: s.t()),
    ("sa [M, K/128], sb [N/128, K/128]^T", lambda s: s.contiguous(), lambda s: s.t()),
    ("sa [M, K/128] outer-major, sb [N/128, K/128]", lambda s: s.t().contiguous().t(), lambda s: s),
    ("sa [M, K/128], sb [N/128, K/128]", lambda s: s.contiguous(), lambda s: s),
)
"""Scale layouts tried for torch's blockwise ``_scaled_mm`` (``sb`` is kept [N/128, K/128] like ours and
transformed once per bank before timing); the first that torch accepts and that matches float64 is measured."""


def fp8_profile(args: Any) -> int:
    """BlockwiseFp8Plan / BlockwiseFp8VectorPlan vs torch._scaled_mm (rowwise, blockwise) over M x (N, K)."""
    import mircuda as mc

    from ._errors import check_results_file
    from ._matmul_bench import _write_json, session

    # Before the driver: a bad path is said without a GPU too.
    check_results_file(args.json, getattr(args, "json_default", None))
    driver = mc.Driver.initialize()  # without a driver nothing else matters
    ms, shapes = list(args.m), list(args.shapes)
    rows: list[Fp8Row] = []
    failures: list[str] = []
    notes: list[str] = []
    refusals: list[str] = []
    with session(driver, args.device) as s:
        context, stream, timer, info = s.context, s.stream, s.timer, s.info
        torch_: _TorchFp8 | None = None
        if s.torch_ is not None:
            try:
                torch_ = _TorchFp8(s.torch_.torch, s.torch_.stream)
            except RuntimeError as exc:
                notes.append(f"torch unavailable: {exc}")
        else:
            notes.append(s.why or torch_available() or "torch unavailable")
        lib = None
        if max(ms) > DECODE_MAX_M:
            try:
                lib = mc.matmul.load_library()
            except mc.CutlassNotFound as exc:
                notes.append(f"no CUTLASS library, M > {DECODE_MAX_M} is not measured for mircuda: {exc}"[:300])
        for n, k in shapes:
            b, _, b_deq, wb, wsb, tw, tsb = shape_weights(s, torch_, n, k)
            b_codes = b.astype(np.float64)
            for m in ms:
                a, sa, sample, want, da, dsa, d = row_operands(s, m, n, k, b_deq)
                plans: list[tuple[str, Any]] = []
                try:
                    if m == 1:
                        plans.append(("BlockwiseFp8VectorPlan",
                                      mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k))))
                    if m <= DECODE_MAX_M or lib is not None:
                        plans.append(("BlockwiseFp8Plan", mc.BlockwiseFp8Plan(context, stream,
                                                                              mc.DenseMatmulSpec(m, n, k),
                                                                              library=lib)))
                except mc.MircudaError as exc:
                    failures.append(f"BlockwiseFp8Plan M={m} {n}x{k}: {type(exc).__name__}: {exc}"[:300])
                if m <= DECODE_MAX_M:
                    plans += _sweep_plans(mc, context, stream, args.sweep or (), m, n, k, notes, failures)
                for name, plan in plans:
                    plan.execute(stream, da, dsa, wb[0], wsb[0], d)
                    back = context.allocate_pinned(mc.bf16, m * n)
                    stream.copy_to_host(d, back)
                    got = back.to_numpy().astype(np.float64).reshape(m, n)[sample]
                    back.close()
                    err = _relative(got, want)
                    if not err <= CHECK_LIMIT:
                        failures.append(f"{name} M={m} {n}x{k}: relative error {err:.2e}")
                    us = timer.median(_rotating(plan, stream, da, dsa, wb, wsb, d), args.calls, args.repeats)
                    rows.append(fp8_row(name, m, n, k, us, f"{_configuration(plan)}, rel err {err:.1e}"))
                    if hasattr(plan, "close"):
                        plan.close()
                if torch_ is not None:
                    _torch_rows(torch_, timer, args, a, sa, b_codes, want, sample, tw, tsb, m, n, k, rows, failures,
                                refusals)
                for buf in (da, dsa, d):
                    buf.free(stream)
            del tw, tsb
            s.release(wb + wsb)
    ratios(rows)
    _print_table(info, args, rows)
    goals = _goals(rows)
    best = sweep_best(rows)
    for line in goals + best + [f"refused: {r}" for r in refusals] + [f"note: {n}" for n in notes]:
        print(f"  {line}")
    import datetime
    import sys

    _write_json(args.json, {"benchmark": "fp8-profile", "device": info.name, "arch": info.arch,
                            "library": str(lib.path) if lib is not None else None,
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                            "method": "back-to-back calls behind a spin kernel, events, median; weight banks >= 8x L2",
                            "notes": notes, "refusals": refusals, "goals": goals, "sweep_best": best,
                            "sweep": [c.label for c in args.sweep or ()], "failures": failures,
                            "rows": [asdict(r) for r in rows]})
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print("fp8-profile: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def _configuration(plan: Any) -> str:
    """The kernel and, for an NVRTC kernel, its rows, warps and PDL trigger (what ``--sweep`` varies)."""
    kernel = plan.kernel_name
    engine = getattr(plan, "_engine", None)  # None: a CUTLASS kernel runs the plan
    if engine is None:
        return kernel
    trigger = engine.pdl_trigger or "late"
    decode = f" decode={engine.decode}" if getattr(engine, "decode", None) else ""
    walk = f" persistent grid={engine.config.grid[0]}" if getattr(engine, "persistent", False) else ""
    return f"{kernel} rows={engine.rows} warps={engine.warps} trigger={trigger}{decode}{walk}"


def _sweep_plans(mc: Any, context: Any, stream: Any, candidates: Any, m: int, n: int, k: int, notes: list[str],
                 failures: list[str]) -> list[tuple[str, Any]]:
    """One plan per ``--sweep`` candidate for this M <= 16 (the vector plan for M = 1); a candidate the
    plan refuses for this M (rows x M > 32 for gemv) is noted and left out."""
    out: list[tuple[str, Any]] = []
    for candidate in candidates:
        try:
            if m == 1:
                plan: Any = mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k), **candidate.knobs())
            else:
                plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), **candidate.knobs())
        except mc.ContractError as exc:
            notes.append(f"sweep {candidate.label} M={m} {n}x{k} left out: {exc}"[:300])
            continue
        except mc.MircudaError as exc:
            failures.append(f"sweep {candidate.label} M={m} {n}x{k}: {type(exc).__name__}: {exc}"[:300])
            continue
        out.append((SWEEP_PREFIX + candidate.label, plan))
    return out


def _rotating(plan: Any, stream: Any, a: Any, sa: Any, wb: list[Any], wsb: list[Any], d: Any) -> Any:
    """``enqueue(i)``: the plan on weight bank ``i`` (codes and scales rotated together)."""
    banks = len(wb)

    def enqueue(i: int) -> None:
        plan.execute(stream, a, sa, wb[i % banks], wsb[i % banks], d)

    return enqueue


def _torch_rows(torch_: _TorchFp8, timer: Any, args: Any, a: np.ndarray, sa: np.ndarray, b_codes: np.ndarray,
                want: np.ndarray, sample: list[int], tw: list[Any], tsb: list[Any], m: int, n: int, k: int,
                rows: list[Fp8Row], failures: list[str], refusals: list[str]) -> None:
    """torch rowwise (unit scales; checked against the codes' float64 product) and blockwise (the same
    scales as ours, each layout of :data:`BLOCKWISE_LAYOUTS` until one is accepted and correct)."""
    t = torch_.t
    ta = torch_.tensor(a)
    with t.cuda.stream(torch_.stream):
        ones_a = t.ones(m, 1, device="cuda", dtype=t.float32)
        ones_b = t.ones(1, n, device="cuda", dtype=t.float32)
    try:
        call, out = torch_.enqueue(ta, ones_a, tw, ones_b, lambda s: s)
        err = _relative(torch_.rows(out, sample), a[sample].astype(np.float64) @ b_codes.T)
        if not err <= CHECK_LIMIT:
            failures.append(f"torch rowwise M={m} {n}x{k}: relative error {err:.2e}")
        us = timer.median(call, args.calls, args.repeats)
        rows.append(fp8_row("torch rowwise (_scaled_mm)", m, n, k, us, f"rel err {err:.1e}"))
        del call, out
    except Exception as exc:  # torch's refusal (RuntimeError, NotImplementedError, ValueError...): recorded
        refusals.append(f"torch rowwise M={m} {n}x{k}: {str(exc).splitlines()[0][:200]}")
    tsa = torch_.tensor(sa)
    tried = []
    for label, fa, fb in BLOCKWISE_LAYOUTS:
        try:
            call, out = torch_.enqueue(ta, fa(tsa), tw, tsb, fb)
        except Exception as exc:  # a layout this torch refuses: the next is tried
            tried.append(f"{label}: {str(exc).splitlines()[0][:160]}")
            continue
        err = _relative(torch_.rows(out, sample), want)
        if not err <= CHECK_LIMIT:
            tried.append(f"{label}: relative error {err:.2e}")
            continue
        us = timer.median(call, args.calls, args.repeats)
        rows.append(fp8_row("torch blockwise (_scaled_mm)", m, n, k, us, f"{label}, rel err {err:.1e}"))
        return
    refusals.append(f"torch blockwise M={m} {n}x{k}: " + "; ".join(tried))


def _print_table(info: Any, args: Any, rows: list[Fp8Row]) -> None:
    print(f"fp8-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs): E4M3 x E4M3 -> BF16, cold "
          f"weights, median of {args.repeats} x {args.calls} back-to-back calls; rate: TB/s for M <= "
          f"{DECODE_MAX_M}, TFLOP/s above; torch/x > 1: faster than torch")
    print(table(rows))


COLUMNS = (Column("path", "path", 30, "<"), Column("m", "M", 5), Column("n", "N", 6), Column("k", "K", 6),
           Column("us", "µs", 9, format="{:.2f}"), Column("rate", "rate", 13),
           Column("vs_rowwise", "rowwise/x", 9, format="{:.2f}"), Column("vs_blockwise", "blockw/x", 9, format="{:.2f}"),
           Column("note", "", 0, "<", sep="  "))
"""The columns of fp8-profile's table: the fields of :class:`Fp8Row` and ``rate`` (TB/s for M <= 16, else
TFLOP/s, as text)."""


def table(rows: list[Fp8Row], title: str = "") -> ResultTable:
    """The rows as fp8-profile prints them (a ``rate`` key added to each row's fields)."""
    return ResultTable(COLUMNS, [{**asdict(r), "rate": f"{r.tbps:.2f} TB/s" if r.m <= DECODE_MAX_M
                                  else f"{r.tflops:.0f} TFLOP/s"} for r in rows], title=title, indent="  ")


def _goals(rows: list[Fp8Row]) -> list[str]:
    """Issue 13's goals, as measured: M = 1 µs limits, M <= 16 >= 1.5x torch, M >= 2048 >= 0.95x rowwise
    and >= 1.0x blockwise."""
    mine = [r for r in rows if r.path == "BlockwiseFp8Plan"]
    out = []
    limits = {(4096, 4096): 6.5, (14336, 4096): 16.5, (4096, 14336): 16.5}
    for r in rows:
        if r.path == "BlockwiseFp8VectorPlan" and (r.n, r.k) in limits:
            limit = limits[(r.n, r.k)]
            out.append(f"M = 1 {r.n}x{r.k}: {r.us:.2f} µs ({r.tbps:.2f} TB/s), goal <= {limit} µs: "
                       f"{'met' if r.us <= limit else 'NOT met'}")
    for label, pick, attr, floor in (("M <= 16 vs torch rowwise", lambda r: r.m <= 16, "vs_rowwise", 1.5),
                                     ("M >= 2048 vs torch rowwise", lambda r: r.m >= 2048, "vs_rowwise", 0.95),
                                     ("M >= 2048 vs torch blockwise", lambda r: r.m >= 2048, "vs_blockwise", 1.0)):
        chosen = [r for r in mine if pick(r) and getattr(r, attr) is not None]
        if chosen:
            worst = min(chosen, key=lambda r: getattr(r, attr))
            met = sum(getattr(r, attr) >= floor for r in chosen)
            out.append(f"{label}: worst {getattr(worst, attr):.2f} (M={worst.m} {worst.n}x{worst.k}); {met}/"
                       f"{len(chosen)} >= {floor}")
    return out


def register(sub: Any) -> None:
    """Add ``fp8-profile`` to the CLI's subparsers."""
    from ._matmul_profile import dense_m_values

    p = sub.add_parser("fp8-profile", help="BlockwiseFp8Plan vs torch._scaled_mm (rowwise, blockwise) over M and "
                                           "Llama-like (N, K) on cold weights (GPU; torch optional)")
    add_device_argument(p)
    p.add_argument("--m", type=dense_m_values, default=",".join(map(str, FP8_M)), help="comma-separated M values")
    p.add_argument("--shapes", type=profile_shape_values, default=",".join(f"{n}x{k}" for n, k in FP8_SHAPES),
                   help="comma-separated NxK weight shapes, K a multiple of 16, each dimension below 2147418112 "
                        "(default: the four Llama-like ones)")
    p.add_argument("--calls", type=positive_int, default=20, help="back-to-back calls per timed repeat")
    p.add_argument("--repeats", type=positive_int, default=7, help="timed repeats (the median is reported)")
    p.add_argument("--sweep", type=sweep_values, default=None,
                   help="decode configurations measured beside the defaults for every M <= 16: comma-separated "
                        "kernel[:rows=R][:warps=W][:trigger=early|late], kernel gemv (CUDA cores, rows 1, 2, 4, 8) "
                        "or mma (tensor cores, rows 16, 32; also :decode=hardware|integer); gemv also "
                        ":persistent=0|1, e.g. mma,mma:rows=32,mma:decode=integer,gemv:rows=4:warps=2:persistent=1")
    p.add_argument("--json", default="benchmarks/results/fp8_profile.json",
                   help=RESULTS_HELP)
    p.set_defaults(func=fp8_profile, json_default=p.get_default("json"))
