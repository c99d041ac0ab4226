"""Helpers for the matrix-plan GPU tests: random operands, float64 references, error bounds."""

from __future__ import annotations

from typing import Any

import numpy as np

import mircuda as mc
from helpers import download, upload

UNIT_ROUNDOFF = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 2.0**-24}
"""Unit roundoff of round-to-nearest in each output type (half an ulp at 1.0)."""
ACCUMULATION = 3e-5
"""FP32 accumulation error allowed, relative to sum |a_k b_k| (K up to 14336, ~sqrt(K) * 2**-24 * 4)."""


def random(rng: np.random.Generator, dtype: Any, *shape: int) -> np.ndarray:
    """Standard normal values rounded to ``dtype``, never all zero."""
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def assert_close(got: np.ndarray, want: np.ndarray, magnitude: np.ndarray, output: str) -> None:
    """Element-wise: ``|got - want| <= 2 u |want| + ACCUMULATION * magnitude`` with ``u`` the output's
    unit roundoff and ``magnitude = |alpha| sum_k |a_k b_k| + |beta c|`` (the scale of the sum)."""
    got64 = got.astype(np.float64)
    assert np.isfinite(got64).all(), "non-finite outputs (a poisoned value was read or not written)"
    bound = 2 * UNIT_ROUNDOFF[output] * np.abs(want) + ACCUMULATION * magnitude + 1e-30
    excess = np.abs(got64 - want) / bound
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    assert excess.max() <= 1.0, (f"{int((excess > 1).sum())} of {excess.size} outputs outside the bound; worst at "
                                 f"{worst}: got {got64[worst]!r}, want {want[worst]!r}, bound {bound[worst]:.3g}")


def poison(dtype: Any, count: int) -> np.ndarray:
    """NaNs of ``dtype``: an output a kernel must overwrite (and, with beta = 0, never read)."""
    return np.full(count, np.nan, dtype=np.float32).astype(dtype)


def guard_length(count: int) -> int:
    """Elements of poisoned guard band after an output of ``count`` elements: one more output row or
    tile's worth (a kernel that runs a partial tile past the last row or column writes there first)."""
    return max(count // 4, 1024)


def with_guard(values: np.ndarray) -> np.ndarray:
    """``values`` (flattened) followed by a NaN guard band of :func:`guard_length` elements."""
    flat = values.ravel()
    return np.concatenate([flat, poison(flat.dtype, guard_length(flat.size))])


def split_guard(got: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` elements of a downloaded output; asserts that the guard band after them is
    still the exact poison bits :func:`with_guard` put there (no write past the end)."""
    guard = got[count:]
    want = poison(got.dtype, guard.size)
    bits = np.dtype(f"u{got.dtype.itemsize}")
    changed = np.flatnonzero(guard.view(bits) != want.view(bits))
    assert guard.size == guard_length(count) and changed.size == 0, (
        f"{changed.size} elements written past the end of the {count}-element output "
        f"(first at offset +{int(changed[0]) if changed.size else 0})")
    return got[:count]


def assert_still_poisoned(context, stream, *bufs) -> None:  # type: ignore[no-untyped-def]
    """Each buffer still holds exactly the poison of :func:`poison` (synchronizes): nothing that was
    refused wrote to it."""
    for buf in bufs:
        got = download(context, stream, buf)
        bits = np.dtype(f"u{got.dtype.itemsize}")
        assert (got.view(bits) == poison(got.dtype, got.size).view(bits)).all(), f"{buf!r} was written"


def name(dtype: Any) -> str:
    return mc.dtypes.dtype_info(dtype).name


def run(context, stream, pool, rng, m, n, k, input, output, alpha, beta, kernel=None, splits=None,  # type: ignore[no-untyped-def]
        static_weights=False):
    """Execute one DenseMatmulPlan on fresh random operands (C poisoned when beta = 0, followed by a
    poisoned guard band that must stay untouched) and return ``(plan, got, want, magnitude, output
    name)`` for :func:`assert_close`."""
    out_t = input if output is None else output
    a, b = random(rng, input, m, k), random(rng, input, n, k)
    c0 = random(rng, out_t, m, n) if beta else poison(out_t, m * n).reshape(m, n)
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=input, output=output, kernel=kernel,
                              splits=splits, static_weights=static_weights)
    ba, bb, bc = (upload(context, stream, pool, x) for x in (a.ravel(), b.ravel(), with_guard(c0)))
    plan.execute(stream, ba, bb, bc, alpha, beta)
    got = split_guard(download(context, stream, bc), m * n).reshape(m, n)
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c0.astype(np.float64)
    want = alpha * (a64 @ b64.T) + (beta * c64 if beta else 0.0)
    magnitude = abs(alpha) * (np.abs(a64) @ np.abs(b64).T) + (abs(beta) * np.abs(c64) if beta else 0.0)
    for buf in (ba, bb, bc):
        buf.free(stream)
    return plan, got, want, magnitude, name(out_t)
