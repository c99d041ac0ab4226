"""The launch ABI module without a device: the generated launch function a reader can print, and the
public pieces another compiler's ABI is built from."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import mircuda as mc
from mircuda import launch
from mircuda.launch import _abi
from mircuda.launch._kernel import TypedKernel
from mircuda.runtime import Stream

PACKAGE = Path(mc.__file__).parent


class FakeContext:
    """Stands in for a Context: the generated code compares it by identity. Closed: finalizers do nothing."""

    _closed = True
    _handle = 1
    handle = 1


def _bound_kernel(contract: mc.KernelContract) -> TypedKernel:
    # What Module.kernel builds, minus the driver: the launch function is generated the same way.
    kernel = object.__new__(TypedKernel)
    kernel._contract = contract
    kernel._abi, kernel._handle, kernel._context = launch.LAUNCH_ABIS["c"], 0x40, FakeContext()
    kernel._config_dims = lambda c: (*c.grid, *c.block, c.shared_mem_bytes)  # type: ignore[method-assign]
    kernel._owner = threading.get_ident()
    kernel._thread_launchers = {}
    kernel.launch = kernel._generate(kernel._owner)  # type: ignore[method-assign]
    return kernel


AXPBY = mc.cuda_export("axpby", y=mc.InOut[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]], a=mc.f32,
                       n=mc.u32)


def test_launch_source_is_the_source_of_the_launch_function() -> None:
    kernel = _bound_kernel(AXPBY)
    source = kernel.launch_source()
    assert source == kernel.launch.__mircuda_source__
    tree = ast.parse(source)
    (fn,) = tree.body
    assert isinstance(fn, ast.FunctionDef) and fn.name == "launch"
    assert [a.arg for a in fn.args.args] == ["stream", "config", "y", "x", "a", "n"]
    # Compiled again, it is the same code the kernel runs.
    code = compile(source, "<reader>", "exec").co_consts[0]
    assert code.co_varnames == kernel.launch.__code__.co_varnames
    assert code.co_code == kernel.launch.__code__.co_code
    lines = source.splitlines()
    for i, name in enumerate(("y", "x")):  # each buffer: a fast identity test and its address, else its slow path
        fast = f"{name}.__class__ is _DB and {name}._scalar is _t{i} and {name}._context is _ctx and {name}._ptr"
        assert f"    if {fast}:" in lines
        assert f"        _a{i} = {name}._ptr" in lines and f"        _a{i} = _b{i}({name})" in lines
    assert "        _a3 = _v3(n)" in lines
    # One call per launch: the bound launcher tests the thread and the config and writes the values.
    hot = "_L(config, stream._handle, _a0, _a1, _a2, _a3)"
    assert lines.count(f"    _r = {hot}") == 1 and source.count(hot) == 3  # and the rebind and 201 retries
    assert "_ident()" not in source and ".value =" not in source


def test_launch_source_names_what_each_contract_declares() -> None:
    one = _bound_kernel(mc.cuda_export("k", flag=bool)).launch_source()
    assert "def launch(stream, config, flag=_M, *_extra, **_unknown):" in one
    assert "    if flag.__class__ is bool:" in one.splitlines()
    none = _bound_kernel(mc.cuda_export("empty")).launch_source()
    assert "def launch(stream, config, *_extra, **_unknown):" in none and "_s0" not in none


def test_the_printed_source_runs_as_printed(monkeypatch) -> None:
    """The source is not a description of the function: executing it in the kernel's namespace packs the
    same parameter block and calls the same entry point."""
    from mircuda import _cuda

    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(_cuda, "launch_kernel", lambda *args: calls.append(args) or 0)  # a Python bound launcher
    kernel = _bound_kernel(mc.cuda_export("k", n=mc.i32, a=mc.f32))
    stream = object.__new__(Stream)
    stream._context, stream._handle = kernel._context, 0x50
    kernel.launch(stream, mc.LaunchConfig(3, 32), 7, 0.5)
    block = kernel.launch.__mircuda_block__
    first = block.packed_bytes()
    namespace = dict(kernel.launch.__globals__)
    exec(compile(kernel.launch_source(), "<reader>", "exec"), namespace)
    namespace["launch"](stream, mc.LaunchConfig(3, 32), 7, 0.5)
    assert block.packed_bytes() == first and len(calls) == 2 and calls[0] == calls[1]
    assert calls[0][:8] == (0x40, 3, 1, 1, 32, 1, 1, 0) and calls[0][8] == 0x50


def test_the_abi_pieces_are_public_and_exported() -> None:
    for name in _abi.__all__:
        assert not name.startswith("_") and hasattr(_abi, name)
        assert getattr(launch, name) is getattr(_abi, name), name
        assert name in launch.__all__
    assert launch.LAUNCH_ABIS["c"].emit_writes is launch.emit_c_writes


def _private_launch_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and "launch" in node.module.split("."):
            parts = node.module.split(".")
            after = parts[parts.index("launch") + 1:]
            private_module = any(p.startswith("_") for p in after)
            private_names = [a.name for a in node.names if a.name.startswith("_")]
            if private_module or private_names:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} from {'.' * node.level}{node.module} "
                             f"import {', '.join(a.name for a in node.names)}")
    return found


def test_no_module_outside_launch_imports_its_private_names() -> None:
    # numba_ext's ABI is built from mircuda.launch's public pieces, not from launch's private modules.
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name != "launch":
            offenders += _private_launch_imports(path)
    assert offenders == []
