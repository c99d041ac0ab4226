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


def name(dtype: Any) -> str:
    return mc.dtypes.dtype_info(dtype).name


def run(context, stream, pool, rng, m, n, k, input, output, alpha, beta, kernel=None):  # type: ignore[no-untyped-def]
    """Execute one DenseMatmulPlan on fresh random operands (C poisoned when beta = 0) and return
    ``(plan, got, want, magnitude, output name)`` for :func:`assert_close`."""
    out_t = input if output is None else output
    a, b = random(rng, input, m, k), random(rng, input, n, k)
    c0 = random(rng, out_t, m, n) if beta else poison(out_t, m * n).reshape(m, n)
    plan = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=input, output=output, kernel=kernel)
    ba, bb, bc = (upload(context, stream, pool, x.ravel()) for x in (a, b, c0))
    plan.execute(stream, ba, bb, bc, alpha, beta)
    got = download(context, stream, bc).reshape(m, n)
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c0.astype(np.float64)
    want = alpha * (a64 @ b64.T) + (beta * c64 if beta else 0.0)
    magnitude = abs(alpha) * (np.abs(a64) @ np.abs(b64).T) + (abs(beta) * np.abs(c64) if beta else 0.0)
    for buf in (ba, bb, bc):
        buf.free(stream)
    return plan, got, want, magnitude, name(out_t)
