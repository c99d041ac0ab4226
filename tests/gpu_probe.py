"""Whether this machine can run the GPU tests and the CUTLASS tests (shared by conftest.py and tests
that check the no-GPU paths)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    import mircuda as mc

    try:
        driver = mc.Driver.initialize()
    except mc.MircudaError as exc:
        return f"no usable CUDA driver: {exc}"
    if not driver.devices():
        return "the CUDA driver reports no device"
    return None


@functools.lru_cache(maxsize=1)
def cutlass_unavailable_reason() -> str | None:
    """Why ``libmircuda_cutlass.so`` cannot be found the way the plans find it, or None."""
    from mircuda.matmul import _build

    try:
        _build.find_library()
    except _build.CutlassNotFound as exc:
        return f"no CUTLASS library: {exc}"
    return None
