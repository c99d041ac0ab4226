"""``matmul-profile --sweep``: every dense kernel the device can run, and every useful split-K slice
count, timed per (types, N, K, M) beside cuBLAS on cold weights; ``--table PATH`` writes the fastest
of each configuration as DenseMatmulPlan's measured table (:mod:`mircuda.matmul._tuned`).

The candidates (:func:`candidates`; ``--kernels PREFIX,...`` keeps those whose names start so, beside the
kernel a plan chooses now): the NVRTC decode kernels where they apply (the dense vector
kernel at M = 1, both forms of the batched GEMV at M <= 32: ``batched_gemv_*`` and
``batched_gemv_rows32_*``), the CUTLASS tensor-core families of the device's architecture (SM90: the
sm90_* families; SM12x: sm80_tensorop), with split-K kernels at
:data:`SPLIT_CHOICES` slices (at most :data:`MAX_SWAPPED_M` rows of A: beyond it the swapped tiles
repeat A's rows too often to win) and the non-swapped CUTLASS kernels from M = 17. Every candidate's
output is checked against float64 (three rows), so a sweep doubles as a numerics run of every kernel.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import Any

from ..matmul._library import KernelInfo
from ..matmul._tuned import TunedEntry, TunedTable

__all__ = ["SPLIT_CHOICES", "MAX_SWAPPED_M", "NONDETERMINISTIC", "candidates", "winners"]

SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
"""K slices tried for each split-K kernel (with the split-K rule's own count), where they fit: at most
the K tiles, and at most twice as many work units (tiles x slices) as SMs."""

MAX_SWAPPED_M = 512
"""The largest M at which the swapped (C^T = B A^T) split-K kernels are tried."""

NONDETERMINISTIC = "_nd_"
"""The mark of the stream-K entries with CUTLASS's ReductionMode::Nondeterministic (``..._streamk_nd_swz1_*``):
their split tiles add partial sums in whatever order the CTAs finish, so two runs may differ in the last bits.
They are timed (``kernel=`` takes them) but never become a table entry: a plan's default stays reproducible."""


def candidates(kernels: Sequence[KernelInfo], m: int, n: int, k: int, input: str, output: str,
               compute_capability: tuple[int, int], multiprocessors: int, only: tuple[str, ...] = (),
               keep: tuple[str, int] | None = None) -> list[tuple[KernelInfo, int | None]]:
    """(kernel, forced K slices or None) pairs to time for one configuration, in table order.

    ``only`` (``--kernels``): just the candidates whose names start with one of these prefixes, in table order,
    after ``keep``, the (kernel, K slices) a plan chooses now (where the listed ones lack it), so that a table entry
    changes only when a listed kernel beats it in the same run."""
    out = _all_candidates(kernels, m, n, k, input, output, compute_capability, multiprocessors)
    if not only:
        return out
    chosen = [(x, s) for x, s in out if x.name.startswith(only)]
    if keep is not None and not any(x.name == keep[0] and (s is None or s == keep[1]) for x, s in chosen):
        kept = next((x for x in kernels if x.name == keep[0]), None)
        if kept is not None:
            chosen.insert(0, (kept, keep[1] if kept.split_k else None))
    return chosen


def _all_candidates(kernels: Sequence[KernelInfo], m: int, n: int, k: int, input: str, output: str,
                    compute_capability: tuple[int, int], multiprocessors: int) -> list[tuple[KernelInfo, int | None]]:
    from ..matmul._gemv import GEMV_FAMILY, MAX_M, RULE_MAX_M
    from ..matmul._select import split_k_slices
    from ..matmul._spec import DenseMatmulSpec
    from ..matmul._vector import VECTOR_FAMILY

    arch_families = ("sm90_",) if compute_capability[0] == 9 else ("sm80_",)
    out: list[tuple[KernelInfo, int | None]] = []
    for x in kernels:
        if x.input != input or x.output != output or x.kind != "dense" or not x.runs_on(compute_capability):
            continue
        if x.family == VECTOR_FAMILY:
            if m == 1:
                out.append((x, None))
            continue
        if x.family == GEMV_FAMILY:
            if m <= MAX_M:
                out.append((x, None))
            continue
        if not x.family.startswith(arch_families):
            continue
        if not x.split_k:
            if m > RULE_MAX_M:
                out.append((x, None))
            continue
        if m > MAX_SWAPPED_M:
            continue
        tm, tn, tk = x.tile
        tiles = -(-n // tm) * -(-m // tn)
        k_tiles = -(-k // tk)
        rule = split_k_slices(DenseMatmulSpec(m, n, k), x, multiprocessors)
        for s in sorted({*SPLIT_CHOICES, rule}):
            if s <= k_tiles and (s == rule or tiles * s <= 2 * multiprocessors):
                out.append((x, s))
    return out


def winners(rows: Sequence[dict[str, Any]], device: str, compute_capability: tuple[int, int],
            multiprocessors: int, command: str) -> TunedTable:
    """The fastest candidate of each (types, N, K, M) among ``rows`` (dicts with input, output, n, k, m,
    kernel, splits, us, cublas_us; failed candidates are left out by the caller), leaving out the kernels
    marked :data:`NONDETERMINISTIC`."""
    best: dict[tuple[str, str, int, int, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["input"], r["output"], r["n"], r["k"], r["m"])
        if not math.isfinite(r["us"]) or NONDETERMINISTIC in r["kernel"]:
            continue
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    entries = tuple(TunedEntry(i, o, n, k, m, r["kernel"], r["splits"], r["us"], r.get("cublas_us"))
                    for (i, o, n, k, m), r in sorted(best.items()))
    return TunedTable(device, compute_capability, multiprocessors,
                      datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), command, entries)
