"""A content digest of a Python function as Numba compiles it.

Numba freezes what a kernel refers to at compile time: its bytecode and constants, the global names
it reads (numbers, arrays, tuples, other jitted functions, declared CUDA C devices) and the values in
its closure. The digest covers all of those, recursively through called functions, and the source
text where Python can find it, so a change that can change the compiled kernel changes the digest.
Values the digest cannot inspect contribute their type name (and a ``repr`` without addresses).
"""

from __future__ import annotations

import builtins
import contextvars
import hashlib
import inspect
import re
import types as pytypes
from typing import Any

import numpy as np

__all__ = ["function_digest"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DEPTH = 16


_declared: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("mircuda_declared", default=None)


def function_digest(fn: Any) -> str:
    """SHA-256 (hex) of ``fn``'s code, constants, referenced globals, closure, defaults and source."""
    return digest_and_declarations(fn)[0]


def digest_and_declarations(fn: Any) -> tuple[str, list[Any]]:
    """:func:`function_digest` and the ``declare_device`` functions ``fn`` reaches (directly or through
    the device functions it calls), in discovery order."""
    h = hashlib.sha256()
    found: list[Any] = []
    token = _declared.set(found)
    try:
        _function(fn, h, set(), 0)
    finally:
        _declared.reset(token)
    return h.hexdigest(), found


def _put(h: Any, tag: str, data: bytes | str = b"") -> None:
    raw = data.encode() if isinstance(data, str) else data
    h.update(tag.encode() + b":" + str(len(raw)).encode() + b":" + raw + b";")


def _function(fn: Any, h: Any, seen: set[int], depth: int) -> None:
    fn = getattr(fn, "py_func", fn)  # a Numba dispatcher: the Python function it compiles
    if id(fn) in seen:
        _put(h, "seen", getattr(fn, "__qualname__", ""))
        return
    seen.add(id(fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        _value(fn, h, seen, depth + 1)
        return
    _put(h, "function", f"{fn.__module__}.{fn.__qualname__}")
    _code(code, h, seen, depth)
    fn_globals = getattr(fn, "__globals__", {})
    names = sorted(_global_names(code))
    for name in names:
        if name in fn_globals:
            _put(h, "global", name)
            value = fn_globals[name]
            _value(value, h, seen, depth + 1)
            if isinstance(value, pytypes.ModuleType):
                _module_members(value, names, h, seen, depth + 1)
        elif hasattr(builtins, name):
            _put(h, "builtin", name)
    for cell in fn.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            _put(h, "cell", "empty")
            continue
        _put(h, "cell")
        _value(contents, h, seen, depth + 1)
    _value(fn.__defaults__, h, seen, depth + 1)
    _value(fn.__kwdefaults__, h, seen, depth + 1)
    try:
        _put(h, "source", inspect.getsource(fn))
    except (OSError, TypeError):
        _put(h, "source", "unavailable")


def _code(code: pytypes.CodeType, h: Any, seen: set[int], depth: int) -> None:
    _put(h, "code", code.co_code)
    _put(h, "names", "\x1f".join(code.co_names))
    _put(h, "vars", "\x1f".join(code.co_varnames + code.co_freevars + code.co_cellvars))
    _put(h, "arity", f"{code.co_argcount},{code.co_kwonlyargcount},{code.co_flags}")
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _code(const, h, seen, depth)
        else:
            _value(const, h, seen, depth + 1)


def _module_members(module: pytypes.ModuleType, names: list[str], h: Any, seen: set[int], depth: int) -> None:
    # `helpers.bf16_to_f32(x)` reads a declared device (or a jitted function) through a module: its
    # linked CUDA C (or code) is part of the kernel. Library modules' members are identified by name.
    for name in names:
        member = getattr(module, name, None)
        if hasattr(member, "_mircuda_digest") or hasattr(member, "py_func"):
            _put(h, "member", name)
            _value(member, h, seen, depth)


def _global_names(code: pytypes.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _global_names(const)
    return names


def _value(v: Any, h: Any, seen: set[int], depth: int) -> None:
    if depth > _MAX_DEPTH:
        _put(h, "deep", type(v).__qualname__)
        return
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        _put(h, type(v).__name__, repr(v))
    elif isinstance(v, np.ndarray):
        _put(h, "ndarray", f"{v.dtype.str}{v.shape}")
        _put(h, "data", np.ascontiguousarray(v).tobytes())
    elif isinstance(v, (np.generic, np.dtype)):
        _put(h, "numpy", f"{type(v).__qualname__}:{v!r}")
    elif isinstance(v, (tuple, list, frozenset, set)):
        items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        _put(h, type(v).__name__, str(len(items)))
        for item in items:
            _value(item, h, seen, depth + 1)
    elif isinstance(v, dict):
        _put(h, "dict", str(len(v)))
        for key in sorted(v, key=repr):
            _value(key, h, seen, depth + 1)
            _value(v[key], h, seen, depth + 1)
    elif isinstance(v, pytypes.ModuleType):
        _put(h, "module", v.__name__)
    elif isinstance(v, pytypes.FunctionType) or hasattr(v, "py_func"):
        _put(h, "callee", repr(getattr(v, "targetoptions", "")))
        _function(v, h, seen, depth)
    elif isinstance(v, type):
        _put(h, "class", f"{v.__module__}.{v.__qualname__}")
    else:
        # Declared devices carry the digest of the CUDA C they link (mircuda.numba_ext.declare_device);
        # Numba types and other descriptors are identified by their repr.
        _put(h, "object", f"{type(v).__module__}.{type(v).__qualname__}")
        extra = getattr(v, "_mircuda_digest", None)
        if extra is not None:
            _put(h, "linked", extra)
            found = _declared.get()
            if found is not None and all(v is not f for f in found):
                found.append(v)
        sig = getattr(v, "sig", None)
        name = getattr(v, "name", None)
        _put(h, "repr", _ADDRESS.sub("", f"{name!r} {sig!r} {v!r}"))
