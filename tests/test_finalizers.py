"""Finalizers have one home for "never raise, wait while a capture is open": ``mircuda._cuda.finalizer``.

Read from the source (finalizers run only for objects a device creates): every ``weakref.finalize``
callback in the package is a module-level function the wrapper made, and no wrapped finalizer wraps
its body in a try/except the wrapper already gives.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import mircuda as mc

PACKAGE = Path(mc.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _finalize_calls() -> list[tuple[Path, ast.Call]]:
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "finalize"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "weakref"):
                calls.append((path, node))
    return calls


def _importable(path: Path) -> bool:
    try:
        importlib.import_module(_module_name(path))
    except ImportError:  # an optional dependency of that module is missing here
        return False
    return True


def test_the_scan_finds_the_package_finalizers() -> None:
    # Contexts, streams, events, profiler ranges, modules, device and pinned buffers, graphs, plans.
    assert len(_finalize_calls()) >= 10


@pytest.mark.parametrize("path, call", _finalize_calls(),
                         ids=lambda v: str(v.relative_to(PACKAGE)) if isinstance(v, Path) else str(v.lineno))
def test_every_weakref_finalize_callback_goes_through_the_never_raising_wrapper(path: Path, call: ast.Call) -> None:
    where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
    assert len(call.args) >= 2, f"{where}: weakref.finalize(obj, callback, ...) expected"
    callback = call.args[1]
    assert isinstance(callback, ast.Name), f"{where}: a module-level finalizer expected, not {ast.dump(callback)}"
    if not _importable(path):
        pytest.skip(f"{_module_name(path)} is not importable here")
    module = importlib.import_module(_module_name(path))
    fn = getattr(module, callback.id)
    assert getattr(fn, "__mircuda_finalizer__", False) is True, f"{where}: {callback.id} lacks _cuda.finalizer"


def _wrapped_functions() -> list[tuple[Path, ast.FunctionDef]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            decorators = [ast.unparse(d) for d in getattr(node, "decorator_list", ())]
            if isinstance(node, ast.FunctionDef) and "_cuda.finalizer" in decorators:
                found.append((path, node))
    return found


def test_wrapped_finalizers_do_not_swallow_exceptions_again() -> None:
    redundant = []
    for path, fn in _wrapped_functions():
        for node in ast.walk(fn):
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    broad = handler.type is None or ast.unparse(handler.type) in ("Exception", "BaseException")
                    if broad and all(isinstance(s, ast.Pass) for s in handler.body):
                        redundant.append(f"{path.relative_to(PACKAGE)}:{handler.lineno} ({fn.name})")
    assert len(_wrapped_functions()) >= 9
    assert redundant == []


def test_the_wrapper_never_raises_and_marks_what_it_wrapped() -> None:
    from mircuda import _cuda

    def failing() -> None:
        raise RuntimeError("never escapes")

    wrapped = _cuda.finalizer(failing)
    assert wrapped() is None and wrapped.__mircuda_finalizer__ is True and wrapped.__wrapped__ is failing
    assert not hasattr(failing, "__mircuda_finalizer__")
