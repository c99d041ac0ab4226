"""``python -m mircuda moe-profile``: the grouped NVFP4 plan (``VariableGroupedFp4Plan``) on mixture-of-experts
layers beside a per-expert loop of ``BlockScaledFp4Plan`` and torch's BF16 grouped matmul (issue 15's "Measure").

Layers: Mixtral-like (8 experts, N = 14336, K = 4096, top-2) and fine-grained (128 experts, N = 768,
K = 2048, top-8); tokens per step 1, 16, 256, 4096. Each token picks its top-k experts uniformly at random
(distinct); the activation rows are sorted by expert: groups = experts, compact offsets, capacity = tokens x
top-k. Columns:

- grouped: ``VariableGroupedFp4Plan`` (tiled bank scales, NVFP4 activations, routing on the device); its
  effective TB/s counts the codes and scales of the experts actually routed to, once;
- loop: ``BlockScaledFp4Plan`` per routed expert (host-driven: the routing read on the host, one plan per
  distinct row count, the same NVRTC kernels for <= 16 rows; above that its portable decode + dense path,
  which needs the CUTLASS library), linear scales, per-expert buffers;
- torch: ``torch._grouped_mm`` on BF16 weights ``[E, N, K]`` holding the same values (transposed view
  ``[E, K, N]``, int32 end offsets), where the installed torch has it.

Timing: :class:`~mircuda.timing.StreamTimer` (back-to-back calls behind a spin kernel, events, median);
weights rotated over banks of at least 8x the L2 (cold). The grouped plan's output is checked on three
sampled rows against float64. Goals (issue 15), shown met/miss, never asserted: tokens <= 16: >= 2.5 TB/s
and >= 2x faster than the loop; 4096 tokens: grouped TFLOP/s >= 0.8x torch's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ContractError
from ..timing import Column, ResultTable
from ._errors import RESULTS_HELP
from ._values import add_device_argument, positive_int

__all__ = ["LAYERS", "TOKENS", "QUICK", "MoeRow", "moe_row", "routing", "goals", "table", "grid", "register",
           "moe_profile", "expert_bytes", "SWEEP_ALL", "Candidate", "parse_candidates", "SweepRow", "sweep_rows",
           "sweep_table"]

LAYERS = {"mixtral": (8, 14336, 4096, 2), "fine": (128, 768, 2048, 8)}
"""name -> (experts, N, K, top-k)."""
TOKENS = (1, 16, 256, 4096)
QUICK = ((1, 16, 4096), 10, 5)
"""``--quick``: (tokens, calls, repeats) unless ``--tokens`` / ``--calls`` / ``--repeats`` say."""
DECODE_TOKENS = 16
DECODE_TBPS, LOOP_RATIO = 2.5, 2.0
PREFILL_TOKENS, TORCH_RATIO = 4096, 0.8
CHECK_LIMIT = 2e-2
"""Largest relative error (Frobenius, three sampled rows) accepted against float64 (BF16 output)."""


@dataclass
class MoeRow:
    """One layer and token count: µs per call (median) of each column, rates, ratios and goals."""

    layer: str
    tokens: int
    experts: int
    n: int
    k: int
    topk: int
    routed: int = 0
    grouped_us: float | None = None
    loop_us: float | None = None
    torch_us: float | None = None
    grouped_tbps: float | None = None
    grouped_tflops: float | None = None
    torch_tflops: float | None = None
    loop_ratio: float | None = None
    torch_ratio: float | None = None
    goal: str | None = None
    met: bool | None = None
    note: str = ""


def expert_bytes(n: int, k: int) -> int:
    """Bytes of one NVFP4 expert: E2M1 codes (N K/2) and UE4M3 scales (N K/16; the tiled padding not counted)."""
    return n * k // 2 + n * k // 16


def moe_row(layer: str, tokens: int, experts: int, n: int, k: int, topk: int, routed: int, *,
            grouped_us: float | None = None, loop_us: float | None = None, torch_us: float | None = None,
            note: str = "") -> MoeRow:
    """A row with its rates (``routed``: distinct experts with rows), ratios (``loop_ratio`` = loop µs /
    grouped µs; ``torch_ratio`` = grouped TFLOP/s / torch's = torch µs / grouped µs) and goal."""
    r = MoeRow(layer, tokens, experts, n, k, topk, routed, grouped_us, loop_us, torch_us, note=note)
    flops = 2 * tokens * topk * n * k
    if grouped_us is not None:
        r.grouped_tbps = routed * expert_bytes(n, k) / (grouped_us * 1e-6) / 1e12
        r.grouped_tflops = flops / (grouped_us * 1e-6) / 1e12
        r.loop_ratio = None if loop_us is None else loop_us / grouped_us
        r.torch_ratio = None if torch_us is None else torch_us / grouped_us
    if torch_us is not None:
        r.torch_tflops = flops / (torch_us * 1e-6) / 1e12
    if tokens <= DECODE_TOKENS and r.grouped_tbps is not None:
        r.goal = f">= {DECODE_TBPS:g} TB/s" + (f", loop/grouped >= {LOOP_RATIO:g}" if r.loop_ratio is not None else "")
        r.met = r.grouped_tbps >= DECODE_TBPS and (r.loop_ratio is None or r.loop_ratio >= LOOP_RATIO)
    elif tokens >= PREFILL_TOKENS and r.torch_ratio is not None:
        r.goal, r.met = f"TFLOP/s >= {TORCH_RATIO:g}x torch", r.torch_ratio >= TORCH_RATIO
    return r


COLUMNS = (Column("layer", "layer", 8, "<"), Column("tokens", "tokens", 6), Column("routed", "routed", 6),
           Column("grouped_us", "grouped µs", 10, format="{:.2f}"),
           Column("grouped_tbps", "TB/s", 6, format="{:.2f}"), Column("grouped_tflops", "TFLOP/s", 7, format="{:.0f}"),
           Column("loop_us", "loop µs", 9, format="{:.2f}"), Column("loop_ratio", "loop/grp", 8, format="{:.2f}"),
           Column("torch_us", "torch µs", 9, format="{:.2f}"), Column("torch_ratio", "TF/s ratio", 10, format="{:.2f}"),
           Column("verdict", "goal", 34, "<", sep="  "), Column("note", "", 0, "<", sep="  "))
"""moe-profile's columns: the grouped plan's µs, its TB/s over the routed experts' bytes and TFLOP/s; the
per-expert loop's µs and loop/grouped; torch's grouped BF16 µs and grouped/torch TFLOP/s; the goal."""


def table(rows: Iterable[MoeRow], title: str = "") -> ResultTable:
    return ResultTable(COLUMNS, [{**asdict(r), "verdict": None if r.goal is None else
                                  f"{r.goal}: {'met' if r.met else 'miss'}"} for r in rows], title=title, indent="  ")


def goals(rows: list[MoeRow]) -> list[str]:
    """Issue 15's goals as measured, one line per row that has one."""
    return [f"{r.layer} {r.tokens} tokens: {r.goal}: {'met' if r.met else 'NOT met'} ("
            + (f"{r.grouped_tbps:.2f} TB/s" if r.tokens <= DECODE_TOKENS else f"ratio {r.torch_ratio:.2f}")
            + (f", loop/grouped {r.loop_ratio:.2f}" if r.tokens <= DECODE_TOKENS and r.loop_ratio is not None else "")
            + ")" for r in rows if r.goal is not None]


def routing(rng: np.random.Generator, tokens: int, experts: int, topk: int) -> tuple[np.ndarray, np.ndarray]:
    """Each token's ``topk`` distinct experts, uniformly at random; returns ``(row_counts, offsets)`` int32
    ``[experts]`` of the rows sorted by expert (group g = expert g, compact offsets)."""
    choice = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk]
    counts = np.bincount(choice.ravel(), minlength=experts).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    return counts, offsets


def grid(args: Any) -> tuple[tuple[str, ...], tuple[int, ...], int, int]:
    """(layers, tokens, calls, repeats) of the command line.

    Raises:
        ContractError: ``--calls`` / ``--repeats`` below 1, ``--layers`` naming an unknown layer or one twice,
            ``--tokens`` above :data:`MAX_TOKENS` or repeated.
    """
    tokens_q, calls_q, repeats_q = QUICK
    layers = tuple(args.layers) if args.layers is not None else tuple(LAYERS)
    for name in layers:
        if name not in LAYERS:
            raise ContractError("--layers", f"comma-separated names of {', '.join(LAYERS)}", repr(name))
    tokens = args.tokens if args.tokens is not None else (tokens_q if args.quick else TOKENS)
    calls = args.calls if args.calls is not None else (calls_q if args.quick else 20)
    repeats = args.repeats if args.repeats is not None else (repeats_q if args.quick else 7)
    for flag, value in (("--calls", calls), ("--repeats", repeats)):
        if value < 1:
            raise ContractError(flag, "a positive integer", str(value))
    for value in tokens:
        if value > MAX_TOKENS:
            raise ContractError("--tokens", f"tokens per step up to {MAX_TOKENS} (the host draws a tokens x experts "
                                "routing array; rows = tokens x top-k must stay int32)", str(value))
    if len(set(tokens)) != len(tokens):
        raise ContractError("--tokens", "distinct token counts", ",".join(map(str, tokens)))
    if len(set(layers)) != len(layers):
        raise ContractError("--layers", "distinct layer names", ",".join(layers))
    return layers, tuple(tokens), calls, repeats


MAX_TOKENS = 65536
"""``--tokens`` limit: the 128-expert layer's host routing draw is tokens x 128 float64 (64 MiB here) and its
capacity tokens x 8 rows."""


SWEEP_ALL = ("e4m3:s2:w8:r16", "e4m3:s3:w8:r16", "e4m3:s4:w8:r16", "e4m3:s2:w8:r32", "e4m3:s3:w8:r32",
             "e4m3:s3:w4:r16", "e4m3:s4:w4:r16", "e4m3:s3:w16:r16", "e4m3:s2:w4:r32", "pairs:s2:w8:r16",
             "pairs:s3:w8:r16", "bytes:s2:w8:r16", "bytes:s3:w8:r16")
"""``--sweep all``: the split_k decode candidates one H200 run compares (bytes:s2:w8:r16 is the kernel
before the decode knobs)."""


@dataclass(frozen=True)
class Candidate:
    """One ``--sweep`` candidate: ``decode[:s<stages>][:w<warps>][:r<rows per block>][:m<rows per tile>]``, then
    ``[:p<persistent>][:l<lean tiles>][:g<register cap>][:t<split_k m-tile>][:o<row warps>]`` (:func:`parse_candidates`); a
    field left out takes the plan's default (:func:`~mircuda.matmul._moe_kernels.default_tuning`). With
    ``m`` the ``"vector"`` variant runs (tiles of 1, 2, 4 or 8 activation rows; 1-8 warps, 4 or 8 weight
    rows per block), else split_k (``tile_rows``: its m-tile, None the plan's choice)."""

    text: str
    decode: str | None = None
    stages: int | None = None
    warps: int | None = None
    frags: int | None = None
    rows_per_tile: int | None = None
    persistent: bool | None = None
    lean_tiles: bool | None = None
    max_registers: int | None = None
    tile_rows: int | None = None
    row_warps: int | None = None

    @property
    def variant(self) -> str:
        """``"vector"`` when the candidate names its tile rows (``m``), else ``"split_k"``."""
        return "split_k" if self.rows_per_tile is None else "vector"

    def resolve(self, default: Any) -> Any:
        """The :class:`~mircuda.matmul._moe_kernels.DecodeTuning` of this candidate over ``default``."""
        import dataclasses

        fields = {k: v for k, v in (("decode", self.decode), ("stages", self.stages), ("warps", self.warps),
                                    ("frags", self.frags), ("persistent", self.persistent),
                                    ("lean_tiles", self.lean_tiles), ("max_registers", self.max_registers),
                                    ("row_warps", self.row_warps))
                  if v is not None}
        return dataclasses.replace(default, **fields)

    def tuning(self, arch: str, k: int) -> Any:
        """The :class:`~mircuda.matmul._moe_kernels.DecodeTuning` the sweep gives the plan on target ``arch`` for
        K = ``k``: the candidate's fields, the rest None so that the plan fills them from the default of the
        decoder named (the decoder itself, when the candidate names none -- ``default:...`` -- is the plan's
        default for the candidate's variant and tile: ``"dp4a"`` for 1-row vector tiles with K % 32 == 0 on
        sm_90; over :func:`resolve`'s word-decoder default it was ``"e4m3"`` there)."""
        from ..matmul._moe_kernels import DecodeTuning, default_tuning

        decode = self.decode or default_tuning(arch, self.variant, self.rows_per_tile or 0, k).decode
        if self.decode is None and decode == "dp4a" and self.persistent and not self.lean_tiles:
            # a persistent grid keeps the word decoders (dp4a walks row blocks only in the lean walk), as the
            # single plan's persistent= does
            decode = default_tuning(arch, self.variant).decode
        return self.resolve(DecodeTuning(decode))  # the candidate's fields over an all-default tuning


_SWEEP_FIELDS = {"s": "stages", "w": "warps", "r": "weight rows per block", "m": "rows per tile",
                 "p": "the persistent grid", "l": "the lean tile walk, dp4a", "g": "the register cap, dp4a, 0: none",
                 "t": "the m-tile", "o": "row warps, dp4a"}
"""What each ``--sweep`` field sets (the refusal of a value names the field, then the values it takes)."""

SWEEP_VECTOR = ("e4m3:m1", "e4m3:m2", "e4m3:m4", "e4m3:m1:r8", "e4m3:s3:m1", "e4m3:s4:m1", "e4m3:m1:w1",
                "e4m3:m1:w2", "e4m3:m1:w4", "pairs:m1", "bytes:m1", "e4m3:m1:p1", "e4m3:s3:m1:p1", "e4m3:m2:p1")
"""``--sweep vector``: the ``"vector"`` variant's candidates (tile rows, stages, warps, rows per block,
decoder, the persistent grid ``p1``)."""


def parse_candidates(text: str) -> tuple[Candidate, ...]:
    """``--sweep``'s value: ``all`` (:data:`SWEEP_ALL`), ``vector`` (:data:`SWEEP_VECTOR`) or comma-separated
    candidates ``decode[:sN][:wN][:rN][:mN][:pN][:lN][:gN][:tN][:oN]`` (decode ``bytes``, ``pairs``, ``e4m3``, ``default``,
    or ``dp4a`` with ``m1``, the vector variant's integer path;
    stages 2-4; split_k: warps 4, 8 or 16, rows per block 16 or 32; with ``mN`` (the vector variant, N = 1,
    2, 4 or 8 rows per tile): warps 1, 2, 4 or 8, rows per block 4 or 8, ``p1`` the persistent grid; with
    ``dp4a``: ``l1`` the lean tile walk (``p1`` only with it), ``gN`` a register cap of
    :data:`~mircuda.matmul._moe_kernels.REGISTER_CAPS`, ``g0`` none; without ``g`` the plan's default cap,
    :func:`~mircuda.matmul._moe_kernels.default_register_cap`; ``oN`` row warps, N = 1, 2, 4 or 8 warps per block
    each taking its own weight-row block, N > 1 without ``l1``, ``p1`` or ``wN`` > 1 (``o1``: one row block per block;
    without ``o`` the plan's default, :func:`~mircuda.matmul._moe_kernels.default_row_warps`)); without ``m``, ``tN`` the split_k
    m-tile: 8, 16 or 32 activation rows per tile instead of the plan's choice).

    Raises:
        ContractError: ``--sweep`` naming an unknown field or value (the field, e.g. ``'s5' in 'bytes:s5'``, then
            the values that field takes), an empty item, or the same candidate twice (``p0`` is the same as no ``p``;
            ``default`` is always measured first).
    """
    import dataclasses

    from ..matmul._fp4 import ROW_WARPS
    from ..matmul._moe_kernels import (DECODES, FRAGS, REGISTER_CAPS, ROWS_PER_TILE, STAGES, TUNED_WARPS, VECTOR_DECODES,
                                       VECTOR_ROWS_PER_TILE, VECTOR_WARPS)

    form = "'all' or 'vector' (named lists) or comma-separated decode[:sN][:wN][:rN][:mN][:pN][:lN][:gN][:tN][:oN]"
    named = {"all": SWEEP_ALL, "vector": SWEEP_VECTOR}
    items = named.get(text.strip()) or tuple(t.strip() for t in text.split(","))
    if not text.strip() or any(not t for t in items):
        raise ContractError("--sweep", form + " without an empty item", repr(text[:80]))
    out: list[Candidate] = []
    for item in items:
        head, *rest = item.split(":")
        if head not in (*DECODES, *VECTOR_DECODES, "default"):
            raise ContractError("--sweep", f"a decode of {', '.join((*DECODES, *VECTOR_DECODES, 'default'))} first "
                                "(dp4a with m1)", repr(item))
        raw: dict[str, int] = {}
        for part in rest:
            key, num = part[:1], part[1:]
            # ASCII digits, at most two: str.isdigit() also takes '²' (which int() refuses) and int() refuses
            # more than 4300 digits; no field's value has more than two.
            if (key not in "swrmplgto" or not key or not (num.isascii() and num.isdigit()) or len(num) > 2
                    or (num[:1] == "0" and num != "0") or key in raw):
                raise ContractError("--sweep", "fields sN, wN, rN, mN, pN, lN, gN, tN, oN, each once",
                                    f"{part[:20]!r} in {item[:60]!r}")
            raw[key] = int(num)
        vector = "m" in raw
        if head in VECTOR_DECODES and (raw.get("m") != 1 or (raw.get("p") and not raw.get("l"))):
            raise ContractError("--sweep", f"{head} with m1 (1-row tiles of the vector variant), p1 only with l1",
                                repr(item))
        # g0 too: the word decoders never take a cap, so 'e4m3:m1:g0' would measure 'e4m3:m1' a second time
        if head not in VECTOR_DECODES and (raw.get("l") or "g" in raw or "o" in raw):
            raise ContractError("--sweep", "l1, gN (g0 included) and oN with dp4a only (the integer path's knobs)",
                                repr(item))
        if raw.get("o", 1) > 1 and (raw.get("l") or raw.get("p") or raw.get("w", 1) > 1):
            raise ContractError("--sweep", "oN > 1 without l1, p1 or wN > 1 (each warp takes its row block whole)",
                                repr(item))
        allowed = {"s": STAGES, "m": VECTOR_ROWS_PER_TILE, "w": VECTOR_WARPS if vector else TUNED_WARPS,
                   "r": tuple((4 if vector else 16) * f for f in FRAGS), "p": (0, 1) if vector else (),
                   "l": (0, 1), "g": REGISTER_CAPS, "t": () if vector else ROWS_PER_TILE[:3], "o": ROW_WARPS}
        for key, value in raw.items():
            if value not in allowed[key]:
                # the field refused first, then what that field takes in this candidate's variant
                values = [str(v) for v in allowed[key]]  # two or more, or none where the variant has no such field
                variant = "" if key in "smlgo" or not values else (" of the vector variant" if vector else " of split_k")
                takes = (f"takes N = {', '.join(values[:-1])} or {values[-1]}" if values else
                         f"is for {'split_k (without mN)' if vector else 'the vector variant (with mN)'} only")
                raise ContractError("--sweep", "fields sN, wN, rN, mN, pN, lN, gN, tN, oN with values they take",
                                    f"{key + str(value)!r} in {item!r}", f"{key}N ({_SWEEP_FIELDS[key]}{variant}) {takes}")
        frags = None if "r" not in raw else raw["r"] // (4 if vector else 16)
        cand = Candidate(item, None if head == "default" else head, raw.get("s"), raw.get("w"), frags,
                         raw.get("m"), True if raw.get("p") else None,  # p0, l0: the default, as none given
                         True if raw.get("l") else None, raw.get("g"),  # g0: no cap (the dp4a default caps at 80)
                         raw.get("t"), raw.get("o"))  # o1: one row block per block (the dp4a default on sm_90 is o2)
        if (cand.text == "default" and not rest) or any(dataclasses.replace(c, text="") == dataclasses.replace(cand, text="")
                                                       for c in out):
            raise ContractError("--sweep", "distinct candidates (the default plan is always measured first)",
                                repr(item[:60]))
        out.append(cand)
    return tuple(out)


def plan_label(plan: Any) -> str:
    """A grouped plan's kernel in one word: ``split_k`` and ``vector`` with their tuning label (vector: rows
    per tile ``m`` and 4 or 8 weight rows per block), the other variants or paths by name."""
    if plan.path != "portable":
        return str(plan.path)
    t = plan.tuning
    if plan.variant == "vector":
        label = t.label("vector")
        head, tail = (label[:-len(":persistent")], ":persistent") if t.persistent else (label, "")
        return f"vector:{head}:m{plan.rows_per_tile}{tail}"
    return t.label() if plan.variant == "split_k" else str(plan.variant)


@dataclass
class SweepRow:
    """One sweep candidate on one layer and token count."""

    layer: str
    tokens: int
    candidate: str
    tuning: str
    us: float | None = None
    tbps: float | None = None
    vs_default: float | None = None
    note: str = ""


def sweep_rows(layer: str, tokens: int, n: int, k: int, routed: int, measured: list[tuple[str, str, float | None]],
               default_label: str) -> list[SweepRow]:
    """Rows of one shape from ``(candidate, tuning label, µs or None)``: TB/s over the routed experts'
    bytes, ``vs_default`` = the default plan's µs / the candidate's (> 1: faster), the fastest marked."""
    base = next((us for _, label, us in measured if label == default_label and us is not None), None)
    rows = [SweepRow(layer, tokens, cand, label, us,
                     None if us is None else routed * expert_bytes(n, k) / (us * 1e-6) / 1e12,
                     None if us is None or base is None else base / us,
                     "default" if label == default_label else "") for cand, label, us in measured]
    timed = [r for r in rows if r.us is not None]
    if timed:
        best = min(timed, key=lambda r: r.us if r.us is not None else float("inf"))
        best.note = (best.note + ", " if best.note else "") + "fastest"
    return rows


SWEEP_COLUMNS = (Column("layer", "layer", 8, "<"), Column("tokens", "tokens", 6),
                 Column("candidate", "candidate", 16, "<", sep="  "), Column("tuning", "tuning", 16, "<", sep="  "),
                 Column("us", "µs", 9, format="{:.2f}"), Column("tbps", "TB/s", 6, format="{:.2f}"),
                 Column("vs_default", "default/µs", 10, format="{:.2f}"), Column("note", "", 0, "<", sep="  "))


def sweep_table(rows: Iterable[SweepRow], title: str = "") -> ResultTable:
    """The sweep's table: each candidate's µs and TB/s side by side, and the ratio to the default plan."""
    return ResultTable(SWEEP_COLUMNS, [asdict(r) for r in rows], title=title, indent="  ")


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want)) / max(float(np.linalg.norm(want)), 1e-300)


class _LayerBench:
    """One layer on the device: NVFP4 banks (tiled scales, contiguous) for the grouped plan, per-expert copies
    (linear scales) for the loop, BF16 banks for torch; :meth:`__call__` measures one token count."""

    def __init__(self, s: Any, name: str, lib: Any, calls: int, repeats: int, notes: list[str],
                 failures: list[str], variant: str | None = None) -> None:
        import mircuda as mc

        from ..matmul import fp4_scales_to_tiled
        from ..timing import bank_count
        from ._fp4_profile import random_fp4

        self.s, self.name, self.lib, self.calls, self.repeats = s, name, lib, calls, repeats
        self.notes, self.failures, self.variant = notes, failures, variant
        self.e, self.n, self.k, self.topk = LAYERS[name]
        e, n, k = self.e, self.n, self.k
        stream, pool = s.stream, s.pool
        self.buffers: list[Any] = []
        self.packed, self.scales = [], []
        for _ in range(e):
            p, sc = random_fp4(s.rng, n, k)
            self.packed.append(p)
            self.scales.append(sc)
        banks = bank_count(e * expert_bytes(n, k), s.info.l2_cache_bytes)
        codes = np.concatenate([p.ravel() for p in self.packed])
        tiled = np.concatenate([fp4_scales_to_tiled(sc).ravel() for sc in self.scales]).view(mc.e4m3)
        self.bank = [(self._keep(stream.upload(pool, codes)), self._keep(stream.upload(pool, tiled)))
                     for _ in range(banks)]
        del codes, tiled
        # The loop's per-expert buffers: copies of the bank's codes, linear scales.
        self.loop_bank = []
        for b in range(banks):
            experts = []
            for j in range(e):
                w = self._keep(pool.allocate(mc.u8, stream, n * k // 2))
                stream.copy_device_range(self.bank[b][0], j * n * k // 2, w, 0, n * k // 2)
                experts.append((w, self._keep(stream.upload(pool, self.scales[j].ravel().view(mc.e4m3)))))
            self.loop_bank.append(experts)
        self.torch_w: list[Any] = []
        torch_ = s.torch_
        if torch_ is not None and not hasattr(torch_.torch, "_grouped_mm"):
            notes.append(f"torch {torch_.torch.__version__} has no torch._grouped_mm: no torch column")
        elif torch_ is not None:
            self._torch_banks(bank_count(2 * e * n * k, s.info.l2_cache_bytes))

    def _keep(self, buf: Any) -> Any:
        self.buffers.append(buf)
        return buf

    def _torch_banks(self, count: int) -> None:
        from ._fp4_profile import dequantize_bf16

        t, ts = self.s.torch_.torch, self.s.torch_.stream
        with t.cuda.stream(ts):
            first = t.empty((self.e, self.n, self.k), dtype=t.bfloat16, device="cuda")
            for j in range(self.e):
                host = dequantize_bf16(self.packed[j], self.scales[j]).view(np.int16)
                first[j].copy_(t.from_numpy(host).view(t.bfloat16))
            self.torch_w = [first] + [first.clone() for _ in range(count - 1)]

    def _sample(self, counts: np.ndarray, offsets: np.ndarray, a_packed: np.ndarray, a_scales: np.ndarray,
                rows: list[int]) -> np.ndarray:
        """float64 reference of the sampled output rows (row r of expert e: A[r] . B_e^T)."""
        from ._fp4_profile import bf16_to_f64, dequantize_bf16

        out = np.empty((len(rows), self.n))
        for i, r in enumerate(rows):
            e = int(np.searchsorted(offsets + counts, r, side="right"))
            a64 = bf16_to_f64(dequantize_bf16(a_packed[r:r + 1], a_scales[r:r + 1]))[0]
            for lo in range(0, self.n, 2048):
                hi = min(self.n, lo + 2048)
                w = bf16_to_f64(dequantize_bf16(self.packed[e][lo:hi], self.scales[e][lo:hi]))
                out[i, lo:hi] = w @ a64
        return out

    def _rows(self, d: Any, rows: list[int]) -> np.ndarray:
        stream, pool, n = self.s.stream, self.s.pool, self.n
        tmp = pool.allocate(d.scalar_type, stream, len(rows) * n)
        for j, r in enumerate(rows):
            stream.copy_device_range(d, r * n, tmp, j * n, n)
        host = stream.download(tmp)
        tmp.free(stream)
        return host.astype(np.float64).reshape(len(rows), n)

    def _draw(self, tokens: int) -> tuple[np.ndarray, np.ndarray, int, int, np.ndarray, np.ndarray]:
        """One step's routing and NVFP4 activations: (counts, offsets, rows, experts routed to, codes, scales)."""
        from ._fp4_profile import random_fp4

        counts, offsets = routing(self.s.rng, tokens, self.e, self.topk)
        rows = tokens * self.topk
        a_packed, a_scales = random_fp4(self.s.rng, rows, self.k)
        return counts, offsets, rows, int((counts > 0).sum()), a_packed, a_scales

    def __call__(self, tokens: int) -> MoeRow:
        import mircuda as mc

        s, e, n, k, topk = self.s, self.e, self.n, self.k, self.topk
        stream, pool = s.stream, s.pool
        counts, offsets, rows, routed, a_packed, a_scales = self._draw(tokens)
        temps: list[Any] = []
        made: list[Any] = []
        kw: dict[str, Any] = {}

        def keep(buf: Any) -> Any:
            temps.append(buf)
            return buf

        try:
            a = keep(stream.upload(pool, a_packed.ravel()))
            sa = keep(stream.upload(pool, a_scales.ravel().view(mc.e4m3)))
            d = keep(pool.allocate(mc.bf16, stream, rows * n))
            rc, of = keep(stream.upload(pool, counts)), keep(stream.upload(pool, offsets))
            mi = keep(stream.upload(pool, np.arange(e, dtype=np.int32)))
            try:
                plan = mc.VariableGroupedFp4Plan(s.context, stream, mc.VariableGroupedFp4Spec(n, k, rows, e, e),
                                                 variant=self.variant)
                made.append(plan)
                stream.memset(d, 0xFF)
                plan.execute(stream, a, sa, self.bank[0][0], self.bank[0][1], d, rc, of, mi)
                sample = sorted({0, rows // 2, rows - 1})
                err = _relative(self._rows(d, sample), self._sample(counts, offsets, a_packed, a_scales, sample))
                if not err <= CHECK_LIMIT:
                    self.failures.append(f"grouped {self.name} {tokens} tokens: relative error {err:.2e}")
                if plan.read_error_flag():
                    self.failures.append(f"grouped {self.name} {tokens} tokens: the error flag is set")
                banks = self.bank

                def grouped(i: int) -> None:
                    w, sw = banks[i % len(banks)]
                    plan.execute(stream, a, sa, w, sw, d, rc, of, mi)

                kw["grouped_us"] = float(s.timer.median(grouped, self.calls, self.repeats))
                kw["note"] = (f"grouped: decode_grouped, {plan.cutlass_kernel}" if plan.path == "decode_grouped"
                              else f"grouped: {plan.path} {plan.variant}, {plan.rows_per_tile}-row tiles"
                              + (f", {plan_label(plan)}" if plan.path == "portable" else ""))
            except mc.MircudaError as exc:
                self.failures.append(f"grouped {self.name} {tokens}: {type(exc).__name__}: {exc}"[:300])
            kw["loop_us"] = self._loop(tokens, counts, offsets, a_packed, a_scales, d, made, keep)
            kw["torch_us"] = self._torch(tokens, counts, a_packed, a_scales)
        finally:
            for p in made:
                p.close()
            for buf in temps:
                buf.free(stream)
        return moe_row(self.name, tokens, e, n, k, topk, routed, **kw)

    def sweep(self, tokens: int, candidates: tuple[Candidate, ...]) -> list[SweepRow]:
        """Every candidate (split_k, or vector with mN) and the default plan on one routing and the same
        operands, each checked on three sampled rows against float64 and timed alike."""
        import mircuda as mc

        s, e, n, k = self.s, self.e, self.n, self.k
        stream, pool = s.stream, s.pool
        counts, offsets, rows, routed, a_packed, a_scales = self._draw(tokens)
        sample = sorted({0, rows // 2, rows - 1})
        want = self._sample(counts, offsets, a_packed, a_scales, sample)
        temps = [stream.upload(pool, a_packed.ravel()), stream.upload(pool, a_scales.ravel().view(mc.e4m3)),
                 pool.allocate(mc.bf16, stream, rows * n), stream.upload(pool, counts), stream.upload(pool, offsets),
                 stream.upload(pool, np.arange(e, dtype=np.int32))]
        a, sa, d, rc, of, mi = temps
        spec = mc.VariableGroupedFp4Spec(n, k, rows, e, e)
        measured: list[tuple[str, str, float | None]] = []
        default_label = ""
        try:
            for cand in (Candidate("default"), *candidates):
                label = cand.text
                try:
                    if cand.text == "default" and cand.decode is None and cand.stages is None:
                        plan = mc.VariableGroupedFp4Plan(s.context, stream, spec)
                        default_label = plan_label(plan)
                        label = default_label
                    else:
                        tuning = cand.tuning(s.context.device_info().arch, k)
                        plan = mc.VariableGroupedFp4Plan(s.context, stream, spec, variant=cand.variant, tuning=tuning,
                                                         rows_per_tile=cand.rows_per_tile or cand.tile_rows)
                        label = plan_label(plan) + (f":t{plan.rows_per_tile}" if cand.tile_rows else "")
                except mc.MircudaError as exc:
                    self.failures.append(f"sweep {self.name} {tokens} {cand.text}: {type(exc).__name__}: {exc}"[:300])
                    measured.append((cand.text, label, None))
                    continue
                try:
                    stream.memset(d, 0xFF)
                    plan.execute(stream, a, sa, self.bank[0][0], self.bank[0][1], d, rc, of, mi)
                    err = _relative(self._rows(d, sample), want)
                    if not err <= CHECK_LIMIT or plan.read_error_flag():
                        self.failures.append(f"sweep {self.name} {tokens} {cand.text}: relative error {err:.2e}")
                        measured.append((cand.text, label, None))
                        continue
                    def run(i: int, plan: Any = plan, banks: Any = self.bank) -> None:
                        w, sw = banks[i % len(banks)]
                        plan.execute(stream, a, sa, w, sw, d, rc, of, mi)

                    measured.append((cand.text, label, float(s.timer.median(run, self.calls, self.repeats))))
                finally:
                    plan.close()
        finally:
            for buf in temps:
                buf.free(stream)
        return sweep_rows(self.name, tokens, n, k, routed, measured, default_label)

    def _loop(self, tokens: int, counts: np.ndarray, offsets: np.ndarray, a_packed: np.ndarray, a_scales: np.ndarray,
              d: Any, made: list[Any], keep: Any) -> float | None:
        """The host-driven per-expert loop of BlockScaledFp4Plan; None (and a note) where it cannot run."""
        import mircuda as mc

        s, n, k, stream, pool = self.s, self.n, self.k, self.s.stream, self.s.pool
        plans: dict[int, Any] = {}
        work = []
        try:
            for j in np.nonzero(counts)[0]:
                c, o = int(counts[j]), int(offsets[j])
                if c not in plans:
                    plans[c] = mc.BlockScaledFp4Plan(s.context, stream, mc.DenseMatmulSpec(c, n, k), library=self.lib)
                    made.append(plans[c])
                aj = keep(stream.upload(pool, a_packed[o:o + c].ravel()))
                sj = keep(stream.upload(pool, a_scales[o:o + c].ravel().view(mc.e4m3)))
                dj = keep(pool.allocate(mc.bf16, stream, c * n))
                work.append((plans[c], int(j), aj, sj, dj))
        except (mc.CutlassNotFound, mc.UnsupportedPlatform) as exc:
            note = f"loop {self.name} {tokens} tokens: {type(exc).__name__}: {exc}"[:200]
            self.notes.append(note)
            return None
        bank = self.loop_bank

        def enqueue(i: int) -> None:
            experts = bank[i % len(bank)]
            for plan, j, aj, sj, dj in work:
                w, sw = experts[j]
                plan.execute(stream, aj, sj, w, sw, dj)

        return float(s.timer.median(enqueue, self.calls, self.repeats))

    def _torch(self, tokens: int, counts: np.ndarray, a_packed: np.ndarray, a_scales: np.ndarray) -> float | None:
        if not self.torch_w:
            return None
        from ._fp4_profile import dequantize_bf16

        t, ts = self.s.torch_.torch, self.s.torch_.stream
        ws = self.torch_w
        with t.cuda.stream(ts):
            x = t.from_numpy(dequantize_bf16(a_packed, a_scales).view(np.int16)).cuda().view(t.bfloat16)
            offs = t.from_numpy(np.cumsum(counts).astype(np.int32)).cuda()

        def enqueue(i: int) -> None:
            with t.cuda.stream(ts):
                t._grouped_mm(x, ws[i % len(ws)].transpose(-2, -1), offs=offs)  # BF16 out, torch's allocator

        try:
            return float(self.s.timer.median(enqueue, self.calls, self.repeats))
        except Exception as exc:  # torch's own errors: recorded, the other columns stand
            self.notes.append(f"torch {self.name} {tokens}: {type(exc).__name__}: {str(exc).splitlines()[0]}"[:200])
            return None

    def close(self) -> None:
        self.torch_w.clear()
        self.s.release(self.buffers)
        self.buffers.clear()


def moe_profile(args: Any) -> int:
    """The grouped NVFP4 plan beside the per-expert loop and torch over layers x tokens; 1 when a check failed."""
    import datetime
    import sys

    import mircuda as mc

    from ._errors import check_results_file
    from ._matmul_bench import _write_json, session

    layers, tokens, calls, repeats = grid(args)  # before the driver: bad flags are said without a GPU too
    candidates = parse_candidates(args.sweep) if getattr(args, "sweep", None) is not None else ()  # '' is refused
    if candidates and getattr(args, "variant", None) is not None:
        # the sweep's candidates name their variant (split_k, or vector with mN); --variant is the main table's
        raise ContractError("--variant", "no --variant with --sweep (each candidate names its variant: mN is "
                            "the vector variant, else split_k)", repr(args.variant))
    check_results_file(args.json, getattr(args, "json_default", None))
    driver = mc.Driver.initialize()
    notes: list[str] = []
    failures: list[str] = []
    rows: list[MoeRow] = []
    swept: list[SweepRow] = []
    with session(driver, args.device) as s:
        info = s.info
        if s.torch_ is None:
            notes.append(s.why or "torch unavailable: no torch column")
        lib = None
        try:
            lib = mc.matmul.load_library()
        except mc.CutlassNotFound as exc:
            notes.append(f"no CUTLASS library: the loop runs only where every expert has <= 16 rows ({exc})"[:300])
        for name in layers:
            bench = _LayerBench(s, name, lib, calls, repeats, notes, failures, args.variant)
            try:
                if candidates:  # the sweep replaces the main table: one GPU run compares the decode knobs
                    for t in tokens:
                        if t <= DECODE_TOKENS:
                            swept.extend(bench.sweep(t, candidates))
                        else:
                            notes.append(f"sweep: {name} {t} tokens skipped (decode candidates: <= {DECODE_TOKENS})")
                else:
                    rows.extend(bench(t) for t in tokens)
            finally:
                bench.close()
    title = (f"moe-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs): VariableGroupedFp4Plan "
             f"(NVFP4 x NVFP4 -> BF16) beside a per-expert BlockScaledFp4Plan loop and torch._grouped_mm (BF16); "
             f"cold weights, median of {repeats} x {calls} back-to-back calls")
    if candidates:
        print(sweep_table(swept, f"moe-profile --sweep on {info.name} ({info.arch}): VariableGroupedFp4Plan "
                                 f"decode candidates; cold weights, median of {repeats} x {calls} back-to-back calls"))
    else:
        print(table(rows, title))
    lines = goals(rows)
    for line in [f"goal: {g}" for g in lines] + [f"note: {n}" for n in notes]:
        print(f"  {line}")
    _write_json(args.json, {"benchmark": "moe-profile", "device": info.name, "arch": info.arch,
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                            "method": "back-to-back calls behind a spin kernel, events, median; weight banks >= 8x L2",
                            "layers": {k: LAYERS[k] for k in layers}, "calls": calls, "repeats": repeats,
                            "variant": args.variant, "sweep": [asdict(r) for r in swept],
                            "notes": notes, "goals": lines, "failures": failures, "rows": [asdict(r) for r in rows]})
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print("moe-profile: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def _layer_names(text: str) -> tuple[str, ...]:
    from ._values import comma_items

    return tuple(comma_items(text, "layer name"))


def register(sub: Any) -> None:
    """Add ``moe-profile`` to the CLI's subparsers."""
    from ._matmul_profile import m_values

    p = sub.add_parser("moe-profile", help="VariableGroupedFp4Plan on Mixtral-like and fine-grained MoE layers "
                                           "beside a per-expert BlockScaledFp4Plan loop and torch._grouped_mm (GPU)")
    add_device_argument(p)
    p.add_argument("--layers", type=_layer_names, default=None,
                   help=f"comma-separated layers of {', '.join(LAYERS)} (default: both)")
    p.add_argument("--tokens", type=m_values, default=None,
                   help=f"comma-separated tokens per step (default: {','.join(map(str, TOKENS))})")
    p.add_argument("--quick", action="store_true",
                   help=f"tokens {','.join(map(str, QUICK[0]))}, {QUICK[1]} calls x {QUICK[2]} repeats "
                        "(each overridden by its flag)")
    p.add_argument("--calls", type=positive_int, default=None, help="back-to-back calls per timed repeat (default 20)")
    p.add_argument("--repeats", type=positive_int, default=None, help="timed repeats, the median is reported (default 7)")
    p.add_argument("--variant", choices=("split_k", "split_n", "staged", "vector"), default=None,
                   help="force the portable grouped kernel's variant (default: the plan's choice per token count)")
    p.add_argument("--sweep", default=None,
                   help="compare decode knobs instead of the main table (tokens <= 16): 'all' (split_k), "
                        "'vector' or comma-separated decode[:sN][:wN][:rN][:mN][:pN][:lN][:gN][:tN][:oN] (decode "
                        "bytes/pairs/e4m3/default, dp4a with m1; stages 2-4; split_k: warps 4/8/16, weight rows per "
                        "block 16/32, tN the m-tile 8/16/32; mN: the vector variant with N = 1/2/4/8 rows per tile, "
                        "warps 1/2/4/8, rows per block 4/8, p1 the persistent grid; dp4a: l1 the lean tile walk (p1 "
                        "only with it), gN a register cap 72/80/96, g0 none, oN row warps 1/2/4/8, o1 none; without "
                        "g or o the plan's default: on sm_90 with 4 weight rows per block g80 and o2), each beside the "
                        "default plan with µs and TB/s")
    p.add_argument("--json", default="benchmarks/results/moe_profile.json", help=RESULTS_HELP)
    p.set_defaults(func=moe_profile, json_default=p.get_default("json"))
