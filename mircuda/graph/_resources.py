"""What a graph holds: every DeviceBuffer reachable from its resource object.

The rule (documented on :meth:`Stream.capture`): starting from the resource object, mircuda visits

- a :class:`DeviceBuffer` (it is held; its contents are not visited),
- the values and keys of a ``dict``, the items of a ``list``, ``tuple``, ``set``, ``frozenset`` or
  ``collections.deque``,
- the fields of a dataclass instance, and the attributes of any other object: its ``__dict__`` and
  the ``__slots__`` of its class and bases,

once each (cycles are fine). It does not descend into mircuda's runtime handles (drivers, devices,
contexts, streams, events, pools, pinned buffers, compilers, modules, typed kernels, graphs, kernel
nodes), classes, modules, functions and methods, numpy arrays, or ``str``/``bytes``/numbers: they
hold no device buffer of the caller's. Values computed by properties are not visited.
"""

from __future__ import annotations

import threading

import collections
import dataclasses
import types
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..memory import DeviceBuffer

__all__ = ["reachable_buffers", "hold", "release"]

_LEAVES: tuple[type, ...] = (
    str, bytes, bytearray, memoryview, int, float, complex, bool, type(None), np.ndarray, np.generic,
    type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
    types.BuiltinMethodType, range, slice,
)
_SEQUENCES = (list, tuple, set, frozenset, collections.deque)
OPAQUE_MARKER = "_graph_opaque"
"""A class attribute set True on mircuda's runtime handles (Driver, Device, Context, Stream, Event,
ProfilerRange, MemoryPool, PinnedBuffer, Compiler, Module, TypedKernel, KernelContract, LaunchConfig,
Graph, KernelNode): resources in their own right, never containers of the caller's buffers, so the
walk does not look inside them."""


def _opaque(obj: Any) -> bool:
    return getattr(type(obj), OPAQUE_MARKER, False) is True


def _children(obj: Any) -> Iterator[Any]:
    if isinstance(obj, dict):
        yield from obj.keys()
        yield from obj.values()
        return
    if isinstance(obj, _SEQUENCES):
        yield from obj
        return
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield getattr(obj, f.name, None)
        # A dataclass may carry more than its fields (a __post_init__ attribute): fall through.
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        yield from d.values()
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                yield getattr(obj, name)
            except AttributeError:  # an unset slot
                pass


def reachable_buffers(resources: Any) -> list[DeviceBuffer[Any]]:
    """Every live (not freed) DeviceBuffer reachable from ``resources`` by the rule above, each once,
    in the order first reached."""
    found: dict[int, DeviceBuffer[Any]] = {}
    seen: set[int] = set()
    stack = [resources]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, DeviceBuffer):
            if not obj._freed:
                found[id(obj)] = obj
            continue
        if isinstance(obj, _LEAVES) or _opaque(obj):
            continue
        children = list(_children(obj))
        children.reverse()  # visit in declaration order
        stack.extend(children)
    return list(found.values())


_hold_lock = threading.RLock()  # graphs of one buffer may be made or closed in several threads at once
# (mircuda.parallel.capture_each); reentrant: a graph's finalizer may run inside hold()


def hold(buffers: Iterable[DeviceBuffer[Any]], held: dict[int, DeviceBuffer[Any]]) -> None:
    """Raise the hold count of each buffer not yet in ``held`` and add it there (keeping it alive)."""
    with _hold_lock:
        for buf in buffers:
            if id(buf) not in held and not buf._freed:
                buf._holds += 1
                held[id(buf)] = buf


def release(held: dict[int, DeviceBuffer[Any]]) -> None:
    """Lower the hold count of every buffer in ``held`` and empty it. Never raises."""
    with _hold_lock:
        for buf in held.values():
            try:
                buf._holds = max(0, buf._holds - 1)
            except Exception:  # pragma: no cover - finalizers never raise
                pass
        held.clear()
