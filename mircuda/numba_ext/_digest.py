"""A content digest of a Python function as Numba compiles it.

Numba freezes what a kernel refers to at compile time: its bytecode and constants, the global names
it reads (numbers, arrays, tuples, other jitted functions, declared CUDA C devices), the attributes
it reads from modules (``cfg.SCALE``, ``a.b.C``) and the values in its closure. The digest covers all
of those, recursively through called functions, and the source text where Python can find it, so a
change that can change the compiled kernel changes the digest.

Attributes of a module (a global or closure value) are hashed for every attribute name the code
names (``co_names``), through submodules: a superset of the ``LOAD_ATTR`` chains Numba resolves,
also when the module is first bound to a local. Functions reached that way are hashed in full (a
``register_jitable`` helper's body is compiled into the kernel), except those of Numba, NumPy, the math
modules and mircuda, which count by name (Numba resolves them by identity; the versions are hashed). Enum classes
contribute their members' names and values, namedtuple classes their fields and defaults, other
classes their qualified name (Numba types those by identity: numbers, exceptions, Numba types).
Values the digest cannot inspect contribute their type name (and a ``repr`` without addresses).
Nothing hashed depends on the process (no ``id``, no addresses), so the disk cache can use it.
"""

from __future__ import annotations

import builtins
import contextvars
import enum
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
                _module_members(value, names, h, seen, set(), depth + 1)
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
        if isinstance(contents, pytypes.ModuleType):
            _module_members(contents, names, h, seen, set(), depth + 1)
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


def _module_members(module: pytypes.ModuleType, names: list[str], h: Any, seen: set[int],
                    modules: set[int], depth: int) -> None:
    # Numba resolves `cfg.SCALE` (and `a.b.C`, and `m = cfg; m.SCALE`) at compile time and freezes the
    # value it finds, so every attribute of the module the code could name is part of the kernel: its
    # value (a number, an array, an enum class, a jitted function, a declared device with its CUDA
    # C...), and for a submodule its own attributes. A user's plain function is hashed in full (Numba
    # compiles a register_jitable helper's body into the kernel); builtins and the functions of Numba,
    # NumPy, math and mircuda count by name (Numba resolves its own implementations of them by identity).
    if depth > _MAX_DEPTH or id(module) in modules:  # id: never hashed, only which modules this walk saw
        return
    modules.add(id(module))
    missing = object()
    for name in names:
        try:  # getattr as Numba does: a module __getattr__ (lazy submodules, mc.numba_ext.helpers) answers
            member = getattr(module, name, missing)
        except Exception:  # a module __getattr__ that fails otherwise: Numba could not read it either
            member = missing
        if member is missing:
            continue
        _put(h, "member", name)
        if isinstance(member, pytypes.ModuleType):
            _put(h, "module", member.__name__)
            _module_members(member, names, h, seen, modules, depth + 1)
        elif isinstance(member, pytypes.BuiltinFunctionType) or (
                isinstance(member, pytypes.FunctionType) and _library_function(member)):
            _put(h, "plain", f"{getattr(member, '__module__', '')}.{getattr(member, '__qualname__', name)}")
        else:  # a user's function (register_jitable, @overload targets: Numba compiles its body) in full
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
    if isinstance(v, enum.Enum):  # before int and str: IntEnum and StrEnum members are both
        _class(type(v), h, seen, depth)
        _put(h, "enum", repr(v.name))  # None for an unnamed Flag combination (Flag(0), A | B on 3.10)
        _value(v.value, h, seen, depth + 1)
    elif v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        _put(h, type(v).__name__, repr(v))
    elif isinstance(v, np.ndarray):
        _put(h, "ndarray", f"{v.dtype.str}{v.shape}")
        if v.dtype.fields is not None:  # a record array: its fields' names, types and offsets
            _put(h, "fields", repr(v.dtype.descr))
        _put(h, "data", np.ascontiguousarray(v).tobytes())
    elif isinstance(v, (np.generic, np.dtype)):
        _put(h, "numpy", f"{type(v).__qualname__}:{v!r}")
    elif isinstance(v, (tuple, list, frozenset, set)):
        items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        if type(v) not in (tuple, list, frozenset, set):
            _class(type(v), h, seen, depth)  # a namedtuple: its field names say which item `p.x` is
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
        _class(v, h, seen, depth)
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


_LIBRARIES = ("numba", "numpy", "math", "cmath", "operator", "builtins", "mircuda")


def _library_function(fn: Any) -> bool:
    """A function of Numba, NumPy, the standard math modules or mircuda: Numba resolves those by identity (its
    own implementations), and their code is pinned by the versions the digest already names."""
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] in _LIBRARIES


def _class(cls: type, h: Any, seen: set[int], depth: int) -> None:
    # What Numba reads from a class it types: an Enum's members (`Mode.A.value` is a constant), a
    # namedtuple's fields and defaults. Other classes Numba types by identity (NumPy scalar types,
    # exception classes, Numba types) or not at all: their qualified name stands for them.
    _put(h, "class", f"{cls.__module__}.{cls.__qualname__}")
    if issubclass(cls, enum.Enum):
        _put(h, "bases", "\x1f".join(f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__))
        members = cls.__members__  # definition order, aliases included
        _put(h, "members", str(len(members)))
        for name, member in members.items():
            _put(h, "member", name)
            _value(member.value, h, seen, depth + 1)
    elif issubclass(cls, tuple) and isinstance(fields := getattr(cls, "_fields", None), tuple):
        _put(h, "fields", "\x1f".join(map(str, fields)))
        _value(dict(getattr(cls, "_field_defaults", {})), h, seen, depth + 1)
