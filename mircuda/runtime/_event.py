"""Events: dependencies between streams and device-side timing."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..errors import ClosedResourceError, ContractError

if TYPE_CHECKING:
    from ._context import Context
    from ._stream import Stream

__all__ = ["Event"]


class Event:
    """A CUDA event. Create with :meth:`Context.create_event`.

    Without timing (the default) an event is a pure dependency (``CU_EVENT_DISABLE_TIMING``), which
    is cheaper to record and wait on.
    """

    __slots__ = ("_context", "_cu", "_handle", "_timing", "_finalizer", "__weakref__")
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER
    _context: Context
    _cu: Any  # CUevent
    _handle: int
    _timing: bool
    _finalizer: weakref.finalize[..., Event]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("create events with Context.create_event()")

    @classmethod
    def _create(cls, context: Context, timing: bool) -> Event:
        drv = _cuda.driver()
        flags = 0 if timing else int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self = object.__new__(cls)
        self._context = context
        self._cu = _cuda.call("cuEventCreate", flags)
        self._handle = int(self._cu)
        self._timing = bool(timing)
        self._finalizer = weakref.finalize(self, _destroy, self._cu)
        self._finalizer.atexit = False
        return self

    @property
    def handle(self) -> int:
        return self._handle

    @property
    def timing(self) -> bool:
        return self._timing

    def _check(self) -> None:
        if not self._handle:
            raise ClosedResourceError("the event was closed")
        self._context._make_current()

    def record(self, stream: Stream) -> None:
        """Record the event on ``stream`` (``cuEventRecord``): it completes when prior work does."""
        self._check()
        stream._check_usable("stream", self._context)
        r = _cuda.event_record(self._handle, stream._handle)
        if r:
            _cuda.raise_result(r, "cuEventRecord")

    def synchronize(self) -> None:
        """Block the calling thread until the recorded work has completed."""
        self._check()
        _cuda.call("cuEventSynchronize", self._cu)

    def query(self) -> bool:
        """True when the recorded work has completed; never blocks."""
        self._check()
        code, _ = _cuda.call_status("cuEventQuery", self._cu)
        if code == _cuda.CUDA_ERROR_NOT_READY:
            return False
        if code:
            _cuda.raise_result(code, "cuEventQuery")
        return True

    @staticmethod
    def elapsed_ms(start: Event, end: Event) -> float:
        """Milliseconds between two recorded timing events (``cuEventElapsedTime``).

        Raises:
            ContractError: either event was created with ``timing=False``.
            CudaError: an event was not recorded or has not completed (``CUDA_ERROR_NOT_READY``).
        """
        for name, ev in (("start", start), ("end", end)):
            if not isinstance(ev, Event):
                raise ContractError(name, "an Event", repr(ev))
            if not ev._timing:
                raise ContractError(name, "an Event created with timing=True", "an event without timing")
            ev._check()
        return float(_cuda.call("cuEventElapsedTime", start._cu, end._cu))

    def close(self) -> None:
        """Destroy the event. Idempotent."""
        self._handle = 0
        self._finalizer()

    def __enter__(self) -> Event:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@_cuda.finalizer
def _destroy(cu: Any) -> None:
    _cuda.call_status("cuEventDestroy", cu)
