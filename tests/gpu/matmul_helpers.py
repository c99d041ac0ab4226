"""Helpers for the matrix-plan GPU tests: random operands, float64 references, error bounds."""

from __future__ import annotations

from typing import Any

import numpy as np

import mircuda as mc

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
