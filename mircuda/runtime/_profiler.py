"""Profiler ranges: ``cuProfilerStart``/``cuProfilerStop`` as a context manager."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from .. import _cuda

if TYPE_CHECKING:
    from ._context import Context

__all__ = ["ProfilerRange"]


class ProfilerRange:
    """An active profiler collection range (Nsight Systems / Nsight Compute ``--profile-from-start off``).

    ``stop()`` raises :class:`CudaError` if the driver fails; a range that is never stopped is stopped
    by a finalizer that never raises.
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _context: Context
    _active: bool
    _finalizer: weakref.finalize[..., ProfilerRange]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("start a range with Context.start_profiler_range()")

    @classmethod
    def _start(cls, context: Context) -> ProfilerRange:
        _cuda.call("cuProfilerStart")
        self = object.__new__(cls)
        self._context = context
        self._active = True
        self._finalizer = weakref.finalize(self, _stop_quietly, context.handle)
        self._finalizer.atexit = False
        return self

    @property
    def active(self) -> bool:
        return self._active

    def stop(self) -> None:
        """Stop the range (``cuProfilerStop``). Idempotent.

        Raises:
            CudaError: the driver failed to stop profiling.
        """
        if not self._active:
            return
        self._active = False
        self._finalizer.detach()
        self._context._make_current()
        _cuda.call("cuProfilerStop")

    def __enter__(self) -> ProfilerRange:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@_cuda.finalizer
def _stop_quietly(ctx_handle: int) -> None:
    _cuda.make_current(ctx_handle)
    _cuda.call_status("cuProfilerStop")
