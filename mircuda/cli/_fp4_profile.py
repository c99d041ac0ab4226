"""``python -m mircuda fp4-profile``: the NVFP4 plans beside the BF16 dense plans, cuBLAS BF16 (``torch.matmul``)
and the blockwise FP8 plans, side by side in one run on cold weights (issue 14's "Measure").

One table row per weight shape (N, K) and M: ``BlockScaledFp4VectorPlan`` / ``DenseVectorPlan`` /
``BlockwiseFp8VectorPlan`` at M = 1, ``BlockScaledFp4Plan`` / ``DenseMatmulPlan`` / ``BlockwiseFp8Plan``
above, and cuBLAS on the BF16 weights. The BF16 operands are the dequantized NVFP4 ones (an E2M1 value
times a UE4M3 scale is exact in BF16), so the FP4, BF16 and cuBLAS rows compute the same product and
are checked against one float64 reference (three sampled rows: first, middle, last); FP8 has its own
E4M3 operands and reference. On the portable FP4 path (M > 16: decode to BF16 + the dense plan; by default
``epilogue="folded"``, the global scales folded into one operand's decode and BF16 written directly) the dense
BF16 -> FP32 step of ``epilogue="exact"`` (FP32 output + a scaling pass) is timed alone too, so the table shows
what the decode costs beside the dense step (the BF16 column is the folded path's dense step).

Timing: :class:`~mircuda.timing.StreamTimer` (back-to-back calls behind a spin kernel, events, median),
weights rotated over banks of at least 8x the L2 (:func:`~mircuda.timing.bank_count`). Goals (issue 14)
are shown as pass/miss and never asserted: M = 1 vector time limits, FP4/BF16 time <= 0.5 at M <= 16,
FP4 TFLOP/s >= 0.8x BF16's at M >= 2048 on the portable path. Torch and the FP8 plans are optional:
without them their columns stay empty and the notes say why.

``--sweep`` adds, for every M <= 16, one measurement per candidate configuration of the NVRTC decode
kernels (kernel, E2M1 decoder, rows per block, warps, FP16 or FP32 block sums; see :func:`sweep_values`),
on the same banks and operands as the default plan, checked the same way; a second table lists them with
their time relative to the default plan's, and the JSON keeps them under ``"sweep"``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ContractError
from ..timing import Column, ResultTable
from ._errors import RESULTS_HELP
from ._values import comma_items, add_device_argument, positive_int

__all__ = ["COLUMNS", "FP4_M", "FP4_SHAPES", "Fp4Row", "QUICK", "bf16_to_f64", "collect", "dequantize_bf16", "fp4_profile",
           "fp4_row", "goals", "grid", "register", "table", "Fp4Candidate", "SweepRow", "sweep_values", "sweep_rows",
           "sweep_table", "sweep_best", "SWEEP_KERNELS", "SWEEP_ALL"]

FP4_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
"""(N, K) of the weights: Llama-3-8B-like projections (hidden 4096, MLP 14336, fused QKV 6144)."""
FP4_M = (1, 2, 4, 8, 16, 32, 128, 512, 2048, 8192)
QUICK = ((1, 16, 2048), ((4096, 4096), (14336, 4096)), 10, 5)
"""``--quick``: (M values, shapes, calls, repeats) unless ``--m`` / ``--shapes`` / ``--calls`` / ``--repeats`` say."""
DECODE_MAX_M = 16
"""Rows up to this M report the weights' effective TB/s, larger M TFLOP/s (both are in the JSON)."""
CHECK_LIMIT = 2e-2
"""Largest relative error (Frobenius, three sampled rows) accepted against float64 (BF16 output)."""
VECTOR_LIMIT_US = {(4096, 4096): 5.0, (14336, 4096): 10.5, (4096, 14336): 10.5}
"""Issue 14: BlockScaledFp4VectorPlan's M = 1 time limits in µs (33 MB of codes + scales in 10.5 µs is
3.1 TB/s)."""
DECODE_RATIO = 0.5
"""Issue 14: FP4 time / BF16 time at M <= 16."""
PREFILL_M, PREFILL_RATIO = 2048, 0.8
"""Issue 14: at M >= 2048 on the portable path, FP4 TFLOP/s >= 0.8x the BF16 DenseMatmulPlan's."""
GLOBAL_A, GLOBAL_B = 0.5, 0.25
"""The FP32 global scales of A and B (device memory; exact powers of two, so the reference is exact)."""
SCALE_BYTES = (0x28, 0x48)
"""The UE4M3 block scales drawn: bytes in [0x28, 0x48), values 2^-2 .. 1.875 * 2^1 (no zero, no NaN)."""


@dataclass
class Fp4Row:
    """One (N, K, M): µs per call (median) of each path, the rates, the goals' ratios and verdicts."""

    m: int
    n: int
    k: int
    activation: str
    fp4_us: float | None = None
    fp4_path: str = ""
    bf16_us: float | None = None
    bf16_path: str = ""
    cublas_us: float | None = None
    fp8_us: float | None = None
    dense_f32_us: float | None = None
    fp4_tbps: float | None = None
    fp4_tflops: float | None = None
    bf16_tflops: float | None = None
    cublas_tflops: float | None = None
    fp8_tflops: float | None = None
    time_ratio: float | None = None
    tflops_ratio: float | None = None
    vector_goal: str | None = None
    vector_met: bool | None = None
    ratio_goal: str | None = None
    ratio_met: bool | None = None
    note: str = ""


# -- --sweep ---------------------------------------------------------------------------------------------
SWEEP_KERNELS = {"vector": "fp4_matvec_bf16", "mma": "fp4_mma_bf16"}
"""``--sweep``'s kernel names: ``vector`` the CUDA-core kernel (``cuda_src/fp4_vector.cu``), ``mma`` the
tensor-core one (``cuda_src/fp4_mma_gemv.cu``; NVFP4 activations only; at M = 1 too)."""
SWEEP_DECODES = ("bytes", "pairs", "e4m3", "table")
"""The decoders of ``cuda_src/fp4_common.cuh`` (``mircuda.matmul._fp4.DECODES``)."""
SWEEP_KNOBS: dict[str, dict[str, tuple[Any, ...]]] = {
    "vector": {"decode": SWEEP_DECODES + ("dp4a",), "rows": (4, 8), "warps": (1, 2, 4, 8), "sum": ("fp16", "fp32"),
               "stages": (2, 3, 4), "prefetch": (0, 1), "persistent": (0, 1), "rowwarps": (1, 2, 4, 8),
               "trigger": ("early", "late")},
    "mma": {"decode": SWEEP_DECODES, "rows": (16, 32), "warps": tuple(range(1, 9)), "stages": (2, 3, 4),
            "trigger": ("early", "late")},
}
"""The knobs each sweep kernel takes and their values (``sum``: the plans' ``block_sum``; ``prefetch`` and
``persistent``: 0 or 1 for the plans' knobs False / True; ``warps``: 1, 2, 4 or 8 for ``vector``, any count up to 8
for ``mma``, as the plans take them (``mircuda.matmul._fp4.MMA_WARPS``); ``rowwarps``: the plans' ``row_warps``, above 1 with
``decode=dp4a`` only (1: one row block per block, which the plans' default is not at large N on the integer path);
``trigger``: the plans' ``pdl_trigger``; ``decode=dp4a``: ``fp4_matvec_bf16``'s integer path,
``mircuda.matmul._fp4.VECTOR_DECODES``, M <= ``mircuda.matmul._fp4.DP4A_MAX_M`` only: the plans refuse it at
larger M and the sweep notes that)."""


@dataclass(frozen=True)
class Fp4Candidate:
    """One decode configuration of ``--sweep``: ``kernel`` (a key of :data:`SWEEP_KERNELS`) and the plans'
    knobs (None: the plan's default)."""

    kernel: str
    decode: str | None = None
    rows: int | None = None
    warps: int | None = None
    block_sum: str | None = None
    stages: int | None = None
    prefetch: bool | None = None
    persistent: bool | None = None
    row_warps: int | None = None
    pdl_trigger: str | None = None

    @property
    def label(self) -> str:
        """``kernel[:decode=D][:rows=R][:warps=W][:sum=S][:stages=P][:prefetch=0|1][:persistent=0|1][:rowwarps=G]
        [:trigger=T]``, as ``--sweep`` spells it."""
        parts = [self.kernel] + [f"{key}={value}" for key, value in (("decode", self.decode), ("rows", self.rows),
                                                                     ("warps", self.warps), ("sum", self.block_sum),
                                                                     ("stages", self.stages),
                                                                     ("prefetch", None if self.prefetch is None
                                                                      else int(self.prefetch)),
                                                                     ("persistent", None if self.persistent is None
                                                                      else int(self.persistent)),
                                                                     ("rowwarps", self.row_warps),
                                                                     ("trigger", self.pdl_trigger))
                                 if value is not None]
        return ":".join(parts)

    def knobs(self) -> dict[str, Any]:
        """The plans' keyword arguments (BlockScaledFp4VectorPlan and BlockScaledFp4Plan take the same)."""
        knobs = {"kernel": SWEEP_KERNELS[self.kernel], "decode": self.decode, "rows": self.rows, "warps": self.warps,
                 "block_sum": self.block_sum, "stages": self.stages}
        for name in ("prefetch", "persistent", "row_warps", "pdl_trigger"):  # given only when the candidate sets them
            if getattr(self, name) is not None:
                knobs[name] = getattr(self, name)
        return knobs


SWEEP_ALL = (tuple(Fp4Candidate("vector", d, r, None, b) for d in SWEEP_DECODES for r in (4, 8) for b in ("fp16", "fp32"))
             + tuple(Fp4Candidate("mma", d, r) for d in SWEEP_DECODES for r in (16, 32))
             + tuple(Fp4Candidate("vector", "e4m3", r, None, None, p) for r in (4, 8) for p in (3, 4))
             + tuple(Fp4Candidate("mma", "e4m3", r, None, None, p) for r in (16, 32) for p in (3, 4)))
"""``--sweep all``: every decoder with each kernel's rows per block and the vector kernel's block sums, and
deeper load rings (stages 3, 4) with the e4m3 decoder (warps: the plans' choice; name them in explicit
candidates): 32 candidates."""


def sweep_values(text: str) -> tuple[Fp4Candidate, ...]:
    """``--sweep``: ``all`` (:data:`SWEEP_ALL`) or comma-separated candidates
    ``kernel[:decode=D][:rows=R][:warps=W][:sum=fp16|fp32][:stages=2|3|4][:prefetch=0|1][:persistent=0|1]
    [:rowwarps=1|2|4|8][:trigger=early|late]`` with ``kernel`` ``vector`` or ``mma`` (``rows`` 4 or 8 for ``vector``, 16 or 32 for
    ``mma``; ``sum``, ``prefetch``, ``persistent``, ``rowwarps`` and ``decode=dp4a``, the integer path of M <= 4,
    for ``vector`` only; ``decode=dp4a`` takes no ``sum`` and no ``persistent=1``; ``rowwarps`` > 1 needs
    ``decode=dp4a`` and no ``warps`` > 1), e.g.
    ``vector:decode=e4m3,vector:decode=pairs:sum=fp32,mma:decode=table:rows=32:warps=4``; a knob left out is
    the plan's default.

    Raises:
        argparse.ArgumentTypeError: naming the candidate and what is wrong with it (an empty candidate and the
            same candidate twice are refused too).
    """
    if text.strip() == "all":
        return SWEEP_ALL
    out: list[Fp4Candidate] = []
    for item in comma_items(text, "candidate"):
        kernel, *pairs = item.split(":")
        if kernel not in SWEEP_KERNELS:
            raise argparse.ArgumentTypeError(f"expected 'all' or candidates kernel[:decode=D][:rows=R][:warps=W]"
                                             f"[:sum=fp16|fp32][:stages=S] with kernel vector or mma, received {item!r}")
        allowed = SWEEP_KNOBS[kernel]
        knobs: dict[str, Any] = {}
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key not in allowed or key in knobs:
                raise argparse.ArgumentTypeError(f"expected {'=, '.join(allowed)}= once each for {kernel} in "
                                                 f"{item!r}, received {pair!r}")
            # ASCII digits, at most two: str.isdigit() also takes '²' and other scripts' digits, and int()
            # refuses more than 4300 digits; no knob's value has more than two.
            numeric = value.isascii() and value.isdigit() and len(value) <= 2 and (value == "0" or value[0] != "0")
            parsed: Any = int(value) if numeric else value
            if parsed not in allowed[key]:
                raise argparse.ArgumentTypeError(f"expected {key} one of {', '.join(map(str, allowed[key]))} for "
                                                 f"{kernel} in {item[:60]!r}, received {value[:20]!r}")
            knobs[key] = parsed
        # prefetch=0 / persistent=0 are the plans' defaults: the same configuration as leaving them out; rowwarps=1
        # is not (the plans may take row warps by default on the integer path), so it stays a candidate of its own
        row_warps = knobs.get("rowwarps")
        if row_warps == 1 and (knobs.get("decode") not in (None, "dp4a") or knobs.get("warps") is not None):
            row_warps = None  # only the integer path without a given K split may take row warps by default
        if row_warps is not None and row_warps > 1:
            # the plans' own rule (a decode left out is refused: the parser cannot know the plan's default)
            from ..matmul._fp4 import refuse_row_warps

            try:
                refuse_row_warps(row_warps, knobs.get("decode") or "(left out)", knobs.get("warps"), SWEEP_KERNELS[kernel])
            except ContractError as exc:
                raise argparse.ArgumentTypeError(f"expected rowwarps=G > 1 with decode=dp4a and no warps > 1 "
                                                 f"({exc}), received {item!r}") from None
        if knobs.get("decode") == "dp4a" and knobs.get("persistent"):
            raise argparse.ArgumentTypeError(f"expected no persistent=1 with decode=dp4a (the integer path has no "
                                             f"persistent grid: the plans refuse it), received {item!r}")
        if knobs.get("decode") == "dp4a" and "sum" in knobs:
            raise argparse.ArgumentTypeError(f"expected no sum with decode=dp4a (its block sums are exact int32 IDP4A "
                                             f"sums: the plans refuse block_sum), received {item!r}")
        # with row warps, warps=1 is what the plan runs anyway: the same configuration as leaving it out
        warps = None if row_warps is not None and row_warps > 1 else knobs.get("warps")
        candidate = Fp4Candidate(kernel, knobs.get("decode"), knobs.get("rows"), warps, knobs.get("sum"),
                                 knobs.get("stages"), True if knobs.get("prefetch") else None,
                                 True if knobs.get("persistent") else None, row_warps, knobs.get("trigger"))
        if candidate in out:
            raise argparse.ArgumentTypeError(f"expected distinct candidates, received {item!r} twice in {text!r}")
        out.append(candidate)
    return tuple(out)


@dataclass
class SweepRow:
    """One candidate at one (M, N, K): µs per call (median), the weights' TB/s, the default plan's µs and the
    ratio (candidate / default), and what ran (the plan's decode kernel description, shortened)."""

    m: int
    n: int
    k: int
    candidate: str
    us: float
    tbps: float
    default_us: float | None = None
    vs_default: float | None = None
    ran: str = ""


def sweep_row(m: int, n: int, k: int, candidate: str, us: float, default_us: float | None, ran: str = "") -> SweepRow:
    return SweepRow(m, n, k, candidate, us, weight_bytes(n, k) / (us * 1e-6) / 1e12, default_us,
                    None if default_us is None else us / default_us, ran)


SWEEP_COLUMNS = (Column("n", "N", 6), Column("k", "K", 6), Column("m", "M", 4),
                 Column("candidate", "candidate", 38, "<", sep="  "), Column("us", "µs", 8, format="{:.2f}"),
                 Column("tbps", "TB/s", 6, format="{:.2f}"), Column("default_us", "default", 8, format="{:.2f}"),
                 Column("vs_default", "/default", 8, format="{:.2f}"), Column("ran", "", 0, "<", sep="  "))


def sweep_table(rows: Iterable[SweepRow], title: str = "") -> ResultTable:
    return ResultTable(SWEEP_COLUMNS, [asdict(r) for r in rows], title=title, indent="  ")


def sweep_best(rows: list[SweepRow]) -> list[str]:
    """Per (M, N, K): the fastest candidate, its µs and TB/s, and the default plan's µs."""
    out = []
    for key in sorted({(r.m, r.n, r.k) for r in rows}):
        mine = [r for r in rows if (r.m, r.n, r.k) == key]
        best = min(mine, key=lambda r: r.us)
        default = "not measured" if best.default_us is None else f"{best.default_us:.2f} µs"
        out.append(f"fastest M={key[0]} {key[1]}x{key[2]}: {best.candidate} {best.us:.2f} µs ({best.tbps:.2f} TB/s); "
                   f"default plan: {default}")
    return out


def sweep_rows(rows: list[SweepRow], fp4: list[Fp4Row]) -> list[SweepRow]:
    """``rows`` with the default plan's µs of the same (M, N, K) from ``fp4`` filled in."""
    default = {(r.m, r.n, r.k): r.fp4_us for r in fp4}
    out = []
    for r in rows:
        d = default.get((r.m, r.n, r.k))
        out.append(sweep_row(r.m, r.n, r.k, r.candidate, r.us, d, r.ran))
    return out


def weight_bytes(n: int, k: int) -> int:
    """Bytes of NVFP4 weights: E2M1 codes (K/2 per row) and UE4M3 scales (K/16 per row, linear)."""
    return n * k // 2 + n * k // 16


def _tflops(m: int, n: int, k: int, us: float | None) -> float | None:
    return None if us is None else 2 * m * n * k / (us * 1e-6) / 1e12


def fp4_row(m: int, n: int, k: int, activation: str = "fp4", *, fp4_us: float | None = None, fp4_path: str = "",
            bf16_us: float | None = None, bf16_path: str = "", cublas_us: float | None = None,
            fp8_us: float | None = None, dense_f32_us: float | None = None, note: str = "") -> Fp4Row:
    """A row with its rates, ratios (``time_ratio`` = FP4 µs / BF16 µs; ``tflops_ratio`` = FP4 TFLOP/s /
    BF16 TFLOP/s) and the issue's goals filled in from the measured µs (``None``: not measured)."""
    r = Fp4Row(m, n, k, activation, fp4_us, fp4_path, bf16_us, bf16_path, cublas_us, fp8_us, dense_f32_us,
               note=note)
    r.fp4_tbps = None if fp4_us is None else weight_bytes(n, k) / (fp4_us * 1e-6) / 1e12
    r.fp4_tflops, r.bf16_tflops = _tflops(m, n, k, fp4_us), _tflops(m, n, k, bf16_us)
    r.cublas_tflops, r.fp8_tflops = _tflops(m, n, k, cublas_us), _tflops(m, n, k, fp8_us)
    if fp4_us is not None and bf16_us is not None:
        r.time_ratio = fp4_us / bf16_us
        r.tflops_ratio = bf16_us / fp4_us  # the same FLOPs: the ratio of rates is that of times, inverted
    limit = VECTOR_LIMIT_US.get((n, k))
    if m == 1 and limit is not None and fp4_us is not None:
        r.vector_goal, r.vector_met = f"<= {limit:g} µs", fp4_us <= limit
    if m <= DECODE_MAX_M and r.time_ratio is not None:
        r.ratio_goal, r.ratio_met = f"fp4/bf16 <= {DECODE_RATIO:g}", r.time_ratio <= DECODE_RATIO
    elif m >= PREFILL_M and fp4_path == "decode+dense" and r.tflops_ratio is not None:
        r.ratio_goal, r.ratio_met = f"TFLOP/s >= {PREFILL_RATIO:g}x", r.tflops_ratio >= PREFILL_RATIO
    return r


def _verdict(goal: str | None, met: bool | None) -> str | None:
    return None if goal is None else f"{goal}: {'pass' if met else 'miss'}"


def _rate(r: Fp4Row) -> str | None:
    if r.m <= DECODE_MAX_M:
        return None if r.fp4_tbps is None else f"{r.fp4_tbps:.2f} TB/s"
    return None if r.fp4_tflops is None else f"{r.fp4_tflops:.0f} TFLOP/s"


COLUMNS = (Column("n", "N", 6), Column("k", "K", 6), Column("m", "M", 5),
           Column("fp4_us", "FP4 µs", 9, format="{:.2f}"), Column("bf16_us", "BF16 µs", 9, format="{:.2f}"),
           Column("cublas_us", "cuBLAS µs", 9, format="{:.2f}"), Column("fp8_us", "FP8 µs", 9, format="{:.2f}"),
           Column("dense_f32_us", "dense f32", 9, format="{:.2f}"),
           Column("rate", "FP4 rate", 14), Column("bf16_tflops", "BF16 TF/s", 9, format="{:.0f}"),
           Column("time_ratio", "fp4/bf16", 8, format="{:.2f}"),
           Column("tflops_ratio", "TF/s ratio", 10, format="{:.2f}"),
           Column("vector", "M=1 goal", 20, "<", sep="  "), Column("ratio", "ratio goal", 26, "<", sep="  "),
           Column("note", "", 0, "<", sep="  "))
"""fp4-profile's columns: µs per call of each path (FP4: BlockScaledFp4VectorPlan at M = 1, else
BlockScaledFp4Plan; BF16: DenseVectorPlan at M = 1, else DenseMatmulPlan; FP8 likewise; "dense f32": the
portable FP4 path's dense BF16 -> FP32 step alone: epilogue="exact"'s, so FP4 µs minus it is the decode and
scaling; with the default epilogue="folded", named in the note, the dense step is the BF16 column's), the FP4 rate
(weights' TB/s for M <= 16, TFLOP/s above), BF16 TFLOP/s, FP4/BF16 time, FP4/BF16 TFLOP/s, and the goals."""


def table(rows: Iterable[Fp4Row], title: str = "") -> ResultTable:
    """The rows as fp4-profile prints them (``rate``, ``vector`` and ``ratio`` added to each row's fields)."""
    return ResultTable(COLUMNS, [{**asdict(r), "rate": _rate(r), "vector": _verdict(r.vector_goal, r.vector_met),
                                  "ratio": _verdict(r.ratio_goal, r.ratio_met)} for r in rows],
                       title=title, indent="  ")


def goals(rows: list[Fp4Row], static_weights: bool = False) -> list[str]:
    """Issue 14's goals as measured, one line each: every M = 1 limit, then the worst ratio of each kind. With
    ``static_weights`` (``--static-weights``: the FP4 and BF16 plans were made with the promise) every line says
    so, since a figure met only under the promise is not the default's."""
    out = []
    for r in rows:
        if r.vector_goal is not None and r.fp4_us is not None:
            out.append(f"M = 1 {r.n}x{r.k}: {r.fp4_us:.2f} µs ({r.fp4_tbps:.2f} TB/s), goal {r.vector_goal}: "
                       f"{'met' if r.vector_met else 'NOT met'}")
    for label, pick, attr, key, sign in (
            (f"M <= {DECODE_MAX_M} FP4/BF16 time", lambda r: r.m <= DECODE_MAX_M, "time_ratio", max, "<="),
            (f"M >= {PREFILL_M} portable FP4/BF16 TFLOP/s", lambda r: r.m >= PREFILL_M, "tflops_ratio", min, ">=")):
        chosen = [r for r in rows if pick(r) and r.ratio_goal is not None]
        if chosen:
            worst = key(chosen, key=lambda r: getattr(r, attr))
            limit = DECODE_RATIO if sign == "<=" else PREFILL_RATIO
            out.append(f"{label}: worst {getattr(worst, attr):.2f} (M={worst.m} {worst.n}x{worst.k}); "
                       f"{sum(bool(r.ratio_met) for r in chosen)}/{len(chosen)} {sign} {limit:g}")
    return [f"{line} (static_weights=True)" for line in out] if static_weights else out


def grid(args: Any) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...], int, int]:
    """(M values, shapes, calls, repeats) of the command line: the issue's grid, or ``--quick``'s smaller
    one, each overridden by its flag when given.

    Raises:
        ContractError: ``--calls`` or ``--repeats`` below 1, a shape's K not a multiple of 16, or an M, N or K at
            or above the plans' dimension limit (:class:`~mircuda.DenseMatmulSpec`; named).
    """
    quick_m, quick_shapes, quick_calls, quick_repeats = QUICK
    ms = args.m if args.m is not None else (quick_m if args.quick else FP4_M)
    shapes = args.shapes if args.shapes is not None else (quick_shapes if args.quick else FP4_SHAPES)
    calls = args.calls if args.calls is not None else (quick_calls if args.quick else 20)
    repeats = args.repeats if args.repeats is not None else (quick_repeats if args.quick else 7)
    for name, value in (("--calls", calls), ("--repeats", repeats)):
        if value < 1:
            raise ContractError(name, "a positive integer", str(value))
    for n, k in shapes:
        if k % 16:
            raise ContractError("--shapes", "NxK pairs with K a multiple of 16 (one UE4M3 scale per 16 K-elements)",
                                f"{n}x{k}")
    from ..matmul import DenseMatmulSpec

    # the plans' dimension limit here, not as a traceback from numpy or a plan after the device is set up
    for flag, what, value, dims in [("--m", "M values", str(m), (m, 16, 16)) for m in ms] + [
            ("--shapes", "NxK pairs", f"{n}x{k}", (1, n, k)) for n, k in shapes]:
        try:
            DenseMatmulSpec(*dims)
        except ContractError as exc:
            raise ContractError(flag, f"{what} the plans take ({exc.expected})", value) from None
    return tuple(ms), tuple(shapes), calls, repeats


def fp4_shape_values(text: str) -> tuple[tuple[int, int], ...]:
    """fp4-profile's ``--shapes``: NxK pairs (:func:`~mircuda.cli._values.shape_values`) with K a multiple of 16
    (one UE4M3 scale per 16 K-elements), each N and K below the plans' dimension limit
    (:func:`~mircuda.cli._values.below_dim_limit`), checked while parsing as fp8-profile's are; :func:`grid`
    checks the same for arguments made without the parser.

    Raises:
        argparse.ArgumentTypeError: naming the pair that breaks a rule.
    """
    from ._values import below_dim_limit, k_multiple, shape_values

    return below_dim_limit(k_multiple(shape_values(text), text, 16, "one UE4M3 scale per 16 K-elements"), text)


def collect(shapes: Iterable[tuple[int, int]], ms: Iterable[int],
            bench: Callable[[int, int], Callable[[int], Fp4Row]]) -> list[Fp4Row]:
    """The rows of every shape and M, shape by shape: ``bench(n, k)`` prepares a shape (a context manager's
    ``__enter__`` result or a plain callable) and returns ``measure(m) -> Fp4Row``."""
    rows: list[Fp4Row] = []
    ms = tuple(ms)
    for n, k in shapes:
        measure = bench(n, k)
        try:
            rows.extend(measure(m) for m in ms)
        finally:
            close = getattr(measure, "close", None)
            if close is not None:
                close()
    return rows


# -- host operands ------------------------------------------------------------------------------------
def _bf16_table() -> np.ndarray:
    """``[scale byte << 8 | code byte]`` -> the two BF16 bit patterns (element 2i in the low half) of
    ``E2M1(code nibble) * UE4M3(scale byte)``: exact, an E2M1 value has 2 significant bits, a UE4M3 one 4,
    and their product lies within 2^-10 .. 2688 (BF16 keeps 8 bits)."""
    import ml_dtypes

    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    scale = (np.arange(256, dtype=np.uint8) & 0x7F).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    code = np.arange(256)
    low = (scale[:, None] * e2m1[code & 0xF][None, :]).astype(ml_dtypes.bfloat16).view(np.uint16)
    high = (scale[:, None] * e2m1[code >> 4][None, :]).astype(ml_dtypes.bfloat16).view(np.uint16)
    return (low.astype(np.uint32) | (high.astype(np.uint32) << 16)).reshape(-1)


_BF16_PAIRS = _bf16_table()


def dequantize_bf16(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``[rows, K]`` BF16 ``q * block scale`` of packed E2M1 codes ``[rows, K/2]`` (element 2i in the low
    nibble) and linear UE4M3 scale bytes ``[rows, K/16]``, exactly: the values of
    :func:`mircuda.matmul.fp4_dequantize_reference` (float64; the tests compare them), by one table
    lookup per byte so that the largest operands (117 M elements) take about a second."""
    import ml_dtypes

    rows, half = packed.shape
    index = np.repeat(scales.reshape(rows, -1).astype(np.uint16) << 8, 8, axis=1) | packed
    return _BF16_PAIRS[index].view(np.uint16).view(ml_dtypes.bfloat16).reshape(rows, 2 * half)


def bf16_to_f64(values: np.ndarray) -> np.ndarray:
    """BF16 -> float64 through the bits (BF16 is the top half of an FP32)."""
    return (values.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def random_fp4(rng: np.random.Generator, rows: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Random packed codes ``[rows, K/2]`` (every E2M1 value) and linear scale bytes ``[rows, K/16]`` in
    :data:`SCALE_BYTES` (the values do not change the timing; the scales make a wrong layout visible)."""
    packed = rng.integers(0, 256, (rows, k // 2), dtype=np.uint8)
    scales = rng.integers(SCALE_BYTES[0], SCALE_BYTES[1], (rows, k // 16), dtype=np.uint8)
    return packed, scales


def random_fp8(rng: np.random.Generator, rows: int, k: int, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Random E4M3 codes ``[rows, K]`` of magnitude <= 1.875 (bit 6 of the byte clear) and FP32 scales
    ``[ceil(rows / block_rows), ceil(K / 128)]`` in [2^-6, 2^-2] (block_rows: 1 for activations, 128 for
    weights; the layout of the FP8 plans)."""
    import ml_dtypes

    codes = rng.integers(0, 256, (rows, k), dtype=np.uint8) & 0xBF  # bit 6 clear: exponent field <= 7, no NaN
    scales = np.exp2(rng.uniform(-6, -2, (-(-rows // block_rows), -(-k // 128)))).astype(np.float32)
    return codes.view(ml_dtypes.float8_e4m3fn), scales


def fp8_values(codes: np.ndarray, scales: np.ndarray, block_rows: int) -> np.ndarray:
    """float64 ``code * scale`` of :func:`random_fp8`'s operands (one scale per ``block_rows`` x 128 block)."""
    import ml_dtypes

    table = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    rows, k = codes.shape
    expanded = np.repeat(np.repeat(scales, block_rows, axis=0)[:rows], 128, axis=1)[:, :k]
    return table[codes.view(np.uint8)] * expanded


def _sample_rows(m: int) -> list[int]:
    return sorted({0, m // 2, m - 1})


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want)) / max(float(np.linalg.norm(want)), 1e-300)


class _ShapeBench:
    """One weight shape on the device: NVFP4, BF16 (the same values) and FP8 weight banks, torch views of the
    BF16 banks, the float64 references; :meth:`__call__` measures one M. :meth:`close` frees it all."""

    def __init__(self, s: Any, n: int, k: int, activation: str, lib: Any, calls: int, repeats: int,
                 fp8: bool, notes: list[str], failures: list[str], sweep: tuple[Fp4Candidate, ...] = (),
                 swept: list[SweepRow] | None = None, static_weights: bool = False) -> None:
        import mircuda as mc

        from ..timing import bank_count

        self.s, self.n, self.k, self.activation, self.lib = s, n, k, activation, lib
        self.calls, self.repeats, self.fp8, self.notes, self.failures = calls, repeats, fp8, notes, failures
        self.sweep, self.swept = sweep, swept if swept is not None else []
        self.static_weights = static_weights  # the FP4 and BF16 plans' promise (--static-weights)
        self.buffers: list[Any] = []
        stream, pool, l2 = s.stream, s.pool, s.info.l2_cache_bytes
        packed, scales = random_fp4(s.rng, n, k)
        w16 = dequantize_bf16(packed, scales)
        self.w64 = bf16_to_f64(w16)
        self.w4 = self._banks(bank_count(weight_bytes(n, k), l2), packed.ravel(), scales.ravel().view(mc.e4m3))
        (self.w16,) = self._banks(bank_count(2 * n * k, l2), w16.ravel())
        del w16
        self.ga = self._keep(stream.upload(pool, np.array([GLOBAL_A], np.float32)))
        self.gb = self._keep(stream.upload(pool, np.array([GLOBAL_B], np.float32)))
        self.w8: list[list[Any]] = []
        if fp8:
            nb = -(-n // 128)
            b8, sb8 = random_fp8(s.rng, n, k, 128)
            self.w8_64 = fp8_values(b8, sb8, 128)
            self.w8 = self._banks(bank_count(n * k + 4 * nb * -(-k // 128), l2), b8.ravel(), sb8.ravel())
        self.torch_w: list[Any] = []
        if s.torch_ is not None:
            t = s.torch_.torch
            with t.cuda.stream(s.torch_.stream):
                self.torch_w = [t.from_dlpack(b).view(n, k) for b in self.w16]

    def _keep(self, buf: Any) -> Any:
        self.buffers.append(buf)
        return buf

    def _banks(self, count: int, *hosts: np.ndarray) -> list[list[Any]]:
        """``count`` device copies of each host array (bank i: the i-th copy of every one)."""
        stream, pool = self.s.stream, self.s.pool
        out = []
        for host in hosts:
            first = self._keep(stream.upload(pool, host))
            copies = [first]
            for _ in range(count - 1):
                copies.append(self._keep(pool.allocate(first.scalar_type, stream, len(first))))
                stream.copy_device_range(first, 0, copies[-1], 0, len(first))
            out.append(copies)
        return out

    def _rows(self, buf: Any, m: int, width: int, sample: list[int]) -> np.ndarray:
        """The sampled rows of ``buf`` ([m, width]) as float64, copied out without downloading the rest."""
        stream, pool = self.s.stream, self.s.pool
        tmp = pool.allocate(buf.scalar_type, stream, len(sample) * width)
        for j, r in enumerate(sample):
            stream.copy_device_range(buf, r * width, tmp, j * width, width)
        host = stream.download(tmp)
        tmp.free(stream)
        return host.astype(np.float64).reshape(len(sample), width)

    def _run(self, what: str, m: int, enqueue: Callable[[int], object], out: Any, width: int, sample: list[int],
             want: np.ndarray) -> float:
        """Poison ``out``, run bank 0 once, check the sampled rows against ``want``, then time the banks."""
        self.s.stream.memset(out, 0xFF)
        enqueue(0)
        err = _relative(self._rows(out, m, width, sample), want)
        if not err <= CHECK_LIMIT:
            self.failures.append(f"{what} M={m} {self.n}x{self.k}: relative error {err:.2e}")
        return float(self.s.timer.median(enqueue, self.calls, self.repeats))

    def __call__(self, m: int) -> Fp4Row:
        import mircuda as mc

        s, n, k = self.s, self.n, self.k
        stream, pool = s.stream, s.pool
        sample = _sample_rows(m)
        packed, scales = random_fp4(s.rng, m, k)
        a_values = dequantize_bf16(packed, scales)
        want = bf16_to_f64(a_values[sample]) @ self.w64.T
        a16 = stream.upload(pool, a_values.ravel())
        del a_values
        d = pool.allocate(mc.bf16, stream, m * n)
        made: list[Any] = []
        temps = [a16, d]
        kw: dict[str, Any] = {}
        try:
            # Each path on its own: a failure is recorded and the other columns are still measured.
            for column, measure in (("fp4_us", lambda: self._fp4(m, packed, scales, a16, d, sample, want, made,
                                                                 temps, kw)),
                                    ("bf16_us", lambda: self._bf16(m, a16, d, sample, want, made, kw)),
                                    ("dense_f32_us", lambda: self._dense_f32(m, a16, sample, want, made, temps, kw)),
                                    ("cublas_us", lambda: self._cublas(m, a16, d, sample, want)),
                                    ("fp8_us", lambda: self._fp8(m, sample, d, made, temps))):
                try:
                    kw[column] = measure()
                except mc.MircudaError as exc:
                    self.failures.append(f"{column} M={m} {n}x{k}: {type(exc).__name__}: {exc}"[:300])
            if m <= DECODE_MAX_M:
                for candidate in self.sweep:
                    self._sweep(candidate, m, packed, scales, a16, d, sample, want, temps)
        finally:
            for plan in made:
                close = getattr(plan, "close", None)
                if close is not None:
                    close()
            for buf in temps:
                buf.free(stream)
        epilogue = kw.pop("fp4_epilogue", None)
        plans = [p for p in (kw.get("fp4_path"), kw.get("bf16_path")) if p]
        if epilogue:
            plans[0] += f" (epilogue={epilogue})"
        return fp4_row(m, n, k, self.activation, **kw, note=", ".join(plans))

    def _sweep(self, candidate: Fp4Candidate, m: int, packed: np.ndarray, scales: np.ndarray, a16: Any, d: Any,
               sample: list[int], want: np.ndarray, temps: list[Any]) -> None:
        """One ``--sweep`` candidate at this M <= 16, measured like the default plan; a candidate the plans
        refuse here (e.g. ``mma`` or ``sum=fp16`` with BF16 activations, ``e4m3`` below cc 8.9) is noted."""
        import mircuda as mc

        s, n, k, stream = self.s, self.n, self.k, self.s.stream
        what = f"sweep {candidate.label} M={m} {n}x{k}"
        try:
            if m == 1:
                plan: Any = mc.BlockScaledFp4VectorPlan(s.context, stream, mc.DenseVectorSpec(n, k),
                                                        activation=self.activation, static_weights=self.static_weights,
                                                        **candidate.knobs())
            else:
                plan = mc.BlockScaledFp4Plan(s.context, stream, mc.DenseMatmulSpec(m, n, k),
                                             activation=self.activation, static_weights=self.static_weights,
                                             **candidate.knobs())
        except mc.ContractError as exc:
            note = f"{what} left out: {exc}"[:300]
            self.notes.append(note)
            return
        except mc.MircudaError as exc:
            self.failures.append(f"{what}: {type(exc).__name__}: {exc}"[:300])
            return
        try:
            us = self._fp4_run(plan, m, packed, scales, a16, d, sample, want, temps, what)
            self.swept.append(sweep_row(m, n, k, candidate.label, us, None, _configuration(plan)))
        except mc.MircudaError as exc:
            self.failures.append(f"{what}: {type(exc).__name__}: {exc}"[:300])
        finally:
            close = getattr(plan, "close", None)
            if close is not None:
                close()

    def _fp4_run(self, plan: Any, m: int, packed: np.ndarray, scales: np.ndarray, a16: Any, d: Any,
                 sample: list[int], want: np.ndarray, temps: list[Any], what: str) -> float:
        """Time ``plan`` (an FP4 plan for this M) on the NVFP4 banks, checked against ``want``."""
        import mircuda as mc

        stream, pool = self.s.stream, self.s.pool
        if self.activation == "fp4":
            a4, sa4 = stream.upload(pool, packed.ravel()), stream.upload(pool, scales.ravel().view(mc.e4m3))
            temps += [a4, sa4]
            scaled, extra = GLOBAL_A * GLOBAL_B * want, {"global_a": self.ga, "global_b": self.gb}
        else:
            a4, sa4, scaled, extra = a16, None, GLOBAL_B * want, {"global_b": self.gb}
        if m == 1:  # the vector plan's names: x, w
            extra = {{"global_a": "global_x", "global_b": "global_w"}[key]: v for key, v in extra.items()}
        w4, sw4 = self.w4
        return self._run(what, m, _enqueue(plan.execute, stream, a4, sa4, w4, sw4, d, extra), d, self.n, sample,
                         scaled)

    def _fp4(self, m: int, packed: np.ndarray, scales: np.ndarray, a16: Any, d: Any, sample: list[int],
             want: np.ndarray, made: list[Any], temps: list[Any], kw: dict[str, Any]) -> float | None:
        """BlockScaledFp4VectorPlan (M = 1) or BlockScaledFp4Plan on the NVFP4 banks (``kw["fp4_path"]`` set);
        ``None`` where M > 16 has no library."""
        import mircuda as mc

        s, n, k, stream = self.s, self.n, self.k, self.s.stream
        if m == 1:
            plan: Any = mc.BlockScaledFp4VectorPlan(s.context, stream, mc.DenseVectorSpec(n, k),
                                                    activation=self.activation, static_weights=self.static_weights)
            kw["fp4_path"] = "vector"
        elif m <= DECODE_MAX_M or self.lib is not None:
            plan = mc.BlockScaledFp4Plan(s.context, stream, mc.DenseMatmulSpec(m, n, k), activation=self.activation,
                                         library=self.lib, static_weights=self.static_weights)
            # "gemv <kernel>" on the decode path: which NVRTC kernel (CUDA or tensor cores) was measured
            kernel = getattr(plan, "gemv_kernel", None)
            kw["fp4_path"] = plan.path if kernel is None else f"{plan.path} {kernel}"
            if getattr(plan, "epilogue", None):  # the portable path's scaling, named in the row's note
                kw["fp4_epilogue"] = plan.epilogue
        else:
            return None
        made.append(plan)
        return self._fp4_run(plan, m, packed, scales, a16, d, sample, want, temps, f"FP4 {type(plan).__name__}")

    def _bf16(self, m: int, a16: Any, d: Any, sample: list[int], want: np.ndarray, made: list[Any],
              kw: dict[str, Any]) -> float | None:
        """DenseVectorPlan (M = 1) or DenseMatmulPlan on the BF16 banks (the same values as the NVFP4 ones)."""
        import mircuda as mc

        s, n, k, stream = self.s, self.n, self.k, self.s.stream
        if m == 1:
            plan: Any = mc.DenseVectorPlan(s.context, stream, mc.DenseVectorSpec(n, k),
                                           static_weights=self.static_weights)
        elif m <= DECODE_MAX_M or self.lib is not None:
            plan = mc.DenseMatmulPlan(s.context, stream, mc.DenseMatmulSpec(m, n, k), library=self.lib,
                                      static_weights=self.static_weights)
        else:
            return None
        made.append(plan)
        kw["bf16_path"] = f"{type(plan).__name__} {getattr(plan, 'kernel_name', 'dense_vector')}"
        return self._run(type(plan).__name__, m, _enqueue(plan.execute, stream, a16, self.w16, d), d, n, sample, want)

    def _dense_f32(self, m: int, a16: Any, sample: list[int], want: np.ndarray, made: list[Any], temps: list[Any],
                   kw: dict[str, Any]) -> float | None:
        """The portable FP4 path's dense step alone (BF16 x BF16 -> FP32, DenseMatmulPlan); ``None`` on
        another path."""
        import mircuda as mc

        if kw.get("fp4_path") != "decode+dense":
            return None
        s, n, k, stream = self.s, self.n, self.k, self.s.stream
        plan: Any = mc.DenseMatmulPlan(s.context, stream, mc.DenseMatmulSpec(m, n, k), output=mc.f32, library=self.lib,
                                       static_weights=self.static_weights)
        made.append(plan)
        c32 = s.pool.allocate(mc.f32, stream, m * n)
        temps.append(c32)
        return self._run("DenseMatmulPlan bf16->f32", m, _enqueue(plan.execute, stream, a16, self.w16, c32), c32, n,
                         sample, want)

    def _cublas(self, m: int, a16: Any, d: Any, sample: list[int], want: np.ndarray) -> float | None:
        """cuBLAS through ``torch.matmul`` on the session's stream, in mircuda's memory (DLPack, no copies);
        ``None`` without torch, and (with a note) where torch raises."""
        if not self.torch_w:
            return None
        torch_ = self.s.torch_
        t, n, k = torch_.torch, self.n, self.k
        with t.cuda.stream(torch_.stream):
            held = [t.from_dlpack(a16).view(m, k), t.from_dlpack(d).view(m, n)]
        ws, stream = self.torch_w, torch_.stream

        def enqueue(i: int) -> None:
            with t.cuda.stream(stream):
                t.matmul(held[0], ws[i % len(ws)].t(), out=held[1])

        try:
            return self._run("cuBLAS (torch.matmul)", m, enqueue, d, n, sample, want)
        except Exception as exc:  # torch's own errors (RuntimeError...): recorded, the other columns go on
            self.notes.append(f"cuBLAS M={m} {n}x{k}: {type(exc).__name__}: {str(exc).splitlines()[0]}"[:200])
            return None
        finally:
            held.clear()  # torch lets go of the buffers before they are freed

    def _fp8(self, m: int, sample: list[int], d: Any, made: list[Any], temps: list[Any]) -> float | None:
        """BlockwiseFp8VectorPlan (M = 1) or BlockwiseFp8Plan on the FP8 banks; ``None`` (and a note) where
        the FP8 plans cannot run here."""
        import mircuda as mc

        if not self.fp8:
            return None
        s, n, k, stream, pool = self.s, self.n, self.k, self.s.stream, self.s.pool
        try:
            if m == 1:
                plan: Any = mc.BlockwiseFp8VectorPlan(s.context, stream, mc.DenseVectorSpec(n, k))
            else:
                plan = mc.BlockwiseFp8Plan(s.context, stream, mc.DenseMatmulSpec(m, n, k), library=self.lib)
        except (mc.CutlassNotFound, mc.UnsupportedPlatform) as exc:
            note = f"FP8 M={m}: {type(exc).__name__}: {exc}"[:200]
            if note not in self.notes:
                self.notes.append(note)
            return None
        made.append(plan)
        a8, sa8 = random_fp8(s.rng, m, k, 1)
        want = fp8_values(a8[sample], sa8[sample], 1) @ self.w8_64.T
        da8, dsa8 = stream.upload(pool, a8.ravel()), stream.upload(pool, sa8.ravel())
        temps += [da8, dsa8]
        wb, wsb = self.w8
        return self._run(type(plan).__name__, m, _enqueue(plan.execute, stream, da8, dsa8, wb, wsb, d), d, n, sample,
                         want)

    def close(self) -> None:
        self.torch_w.clear()
        self.s.release(self.buffers)
        self.buffers.clear()


def _configuration(plan: Any) -> str:
    """What a sweep candidate ran: the NVRTC kernel and its decoder, rows, warps (and block sums)."""
    engine = getattr(plan, "_engine", None) or getattr(plan, "_gemv", None)
    if engine is None:
        return ""
    out = f"{engine.symbol} decode={engine.decode} rows={engine.rows} warps={engine.warps} stages={engine.stages}"
    out += f" sum={engine.block_sum}" if engine.symbol == SWEEP_KERNELS["vector"] else ""
    return out + (f" row_warps={engine.row_warps}" if getattr(engine, "row_warps", 1) > 1 else "")


def _enqueue(execute: Callable[..., object], stream: Any, *operands: Any) -> Callable[[int], object]:
    """``enqueue(i)``: ``execute(stream, ...)`` with every list of banks in ``operands`` taken at bank
    ``i % banks`` and a trailing dict passed as keywords (banks of one shape all have the same count)."""
    args = list(operands)
    kw = args.pop() if args and isinstance(args[-1], dict) else {}
    banked = [j for j, a in enumerate(args) if isinstance(a, list)]
    count = len(args[banked[0]]) if banked else 1

    def enqueue(i: int) -> object:
        picked = [a[i % count] if j in banked else a for j, a in enumerate(args)]
        return execute(stream, *picked, **kw)

    return enqueue


def fp4_profile(args: Any) -> int:
    """The NVFP4 plans beside BF16, cuBLAS and FP8 over M x (N, K); returns 1 when a result was wrong."""
    import datetime
    import sys

    import mircuda as mc

    from ._errors import check_results_file
    from ._matmul_bench import _write_json, session

    ms, shapes, calls, repeats = grid(args)  # before the driver: bad flags are said without a GPU too
    check_results_file(args.json, getattr(args, "json_default", None))
    driver = mc.Driver.initialize()
    notes: list[str] = []
    failures: list[str] = []
    lib = None
    with session(driver, args.device) as s:
        info = s.info
        if s.torch_ is None:
            notes.append(s.why or "torch unavailable: no cuBLAS column")
        if max(ms) > DECODE_MAX_M:
            try:
                lib = mc.matmul.load_library()
            except mc.CutlassNotFound as exc:
                notes.append(f"no CUTLASS library, M > {DECODE_MAX_M} is not measured for mircuda: {exc}"[:300])
        fp8 = info.compute_capability >= (8, 9)
        if not fp8:
            notes.append(f"no FP8 column: the FP8 plans need compute capability >= 8.9 ({info.arch})")
        sweep = tuple(getattr(args, "sweep", None) or ())
        swept: list[SweepRow] = []
        static = bool(getattr(args, "static_weights", False))
        if static:
            notes.append("--static-weights: the FP4 and BF16 plans were made with static_weights=True (each call's "
                         "weight bank is written once, before the timing); the FP8 plans take no such argument")
        rows = collect(shapes, ms, lambda n, k: _ShapeBench(s, n, k, args.activation, lib, calls, repeats, fp8,
                                                            notes, failures, sweep, swept, static))
    title = (f"fp4-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs, L2 "
             f"{info.l2_cache_bytes >> 20} MiB): NVFP4 B x {args.activation} A -> BF16 beside BF16, cuBLAS and FP8; "
             f"cold weights, median of {repeats} x {calls} back-to-back calls; FP4 rate: weights' TB/s for M <= "
             f"{DECODE_MAX_M}, TFLOP/s above")
    print(table(rows, title))
    swept = sweep_rows(swept, rows)
    best = sweep_best(swept)
    if swept:
        print(sweep_table(swept, f"fp4-profile --sweep: {len(sweep)} candidate(s) at M <= {DECODE_MAX_M}, the same "
                                 "operands and timing; /default = candidate µs / default plan µs"))
    lines = goals(rows, static)
    for line in [f"goal: {g}" for g in lines] + [f"sweep: {b}" for b in best] + [f"note: {n}" for n in notes]:
        print(f"  {line}")
    _write_json(args.json, {"benchmark": "fp4-profile", "device": info.name, "arch": info.arch,
                            "activation": args.activation, "static_weights": static,
                            "library": str(lib.path) if lib is not None else None,
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                            "method": "back-to-back calls behind a spin kernel, events, median; weight banks >= 8x L2",
                            "calls": calls, "repeats": repeats, "notes": notes, "goals": lines,
                            "failures": failures, "rows": [asdict(r) for r in rows],
                            "sweep_candidates": [c.label for c in sweep], "sweep_best": best,
                            "sweep": [asdict(r) for r in swept]})
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print("fp4-profile: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def register(sub: Any) -> None:
    """Add ``fp4-profile`` to the CLI's subparsers."""
    from ._matmul_profile import dense_m_values

    p = sub.add_parser("fp4-profile", help="BlockScaledFp4Plan / BlockScaledFp4VectorPlan beside BF16, cuBLAS "
                                           "(torch) and FP8 over M and Llama-like (N, K) on cold weights (GPU)")
    add_device_argument(p)
    p.add_argument("--m", type=dense_m_values, default=None,
                   help=f"comma-separated M values, each below 2147418112 (default: {','.join(map(str, FP4_M))})")
    p.add_argument("--shapes", type=fp4_shape_values, default=None,
                   help="comma-separated NxK weight shapes, K a multiple of 16, each dimension below 2147418112 "
                        "(default: the four Llama-like ones)")
    p.add_argument("--activation", choices=("fp4", "bf16"), default="fp4",
                   help="the FP4 plans' activations: NVFP4 (default) or BF16 (no activation quantization)")
    p.add_argument("--quick", action="store_true",
                   help=f"M {','.join(map(str, QUICK[0]))}, shapes {','.join(f'{n}x{k}' for n, k in QUICK[1])}, "
                        f"{QUICK[2]} calls x {QUICK[3]} repeats (each overridden by its flag)")
    p.add_argument("--calls", type=positive_int, default=None, help="back-to-back calls per timed repeat (default 20)")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="timed repeats, the median is reported (default 7)")
    p.add_argument("--sweep", type=sweep_values, default=None,
                   help="for M <= 16 also measure these decode-kernel configurations: 'all' or comma-separated "
                        "kernel[:decode=bytes|pairs|e4m3|table|dp4a][:rows=R][:warps=1|2|4|8][:sum=fp16|fp32]"
                        "[:stages=2|3|4][:prefetch=0|1][:persistent=0|1][:rowwarps=1|2|4|8][:trigger=early|late] with "
                        "kernel vector (rows 4|8; decode=dp4a: the integer path, M <= 4, no sum or persistent=1; rowwarps > 1: dp4a "
                        "only, warps 1) or mma (rows 16|32; no dp4a, sum, prefetch, persistent or rowwarps)")
    p.add_argument("--static-weights", action="store_true",
                   help="make the FP4 and BF16 plans with static_weights=True (the promise that no kernel still running "
                        "writes the weights, which the profile keeps; the FP8 plans take no such argument)")
    p.add_argument("--json", default="benchmarks/results/fp4_profile.json", help=RESULTS_HELP)
    p.set_defaults(func=fp4_profile, json_default=p.get_default("json"))

