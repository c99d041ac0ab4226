"""The one NVRTC entry point (``compile._nvrtc.nvrtc_compile``) without a GPU: both compiles go
through it with the same include search, every program it creates is destroyed (also on errors), and
the modules of ``mircuda.compile`` import each other without a circle."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import mircuda as mc
from mircuda import _cuda
from mircuda.compile._nvrtc import nvrtc_compile
from mircuda.compile._toolkit import toolkit_include_dirs

DEVICE_FN = 'extern "C" __device__ float twice(float x) { return 2.0f * x; }\n'


class _Spy:
    """``cuda.bindings.nvrtc`` with its program handles and compile flags recorded."""

    def __init__(self, mod: Any, fail: str = "") -> None:
        self._mod = mod
        self._fail = fail
        self.created: list[int] = []
        self.destroyed: list[int] = []
        self.flags: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        if name == self._fail:
            raise RuntimeError(f"{name} failed (injected)")
        return getattr(self._mod, name)

    def nvrtcCreateProgram(self, *args: Any) -> Any:
        err, prog = self._mod.nvrtcCreateProgram(*args)
        self.created.append(int(prog))
        return err, prog

    def nvrtcCompileProgram(self, prog: Any, n: int, flags: list[bytes]) -> Any:
        self.flags.append([f.decode() for f in flags])
        return self._mod.nvrtcCompileProgram(prog, n, flags)

    def nvrtcDestroyProgram(self, prog: Any) -> Any:
        self.destroyed.append(int(prog))
        return self._mod.nvrtcDestroyProgram(prog)


@pytest.fixture
def spy(monkeypatch) -> _Spy:
    s = _Spy(_cuda.nvrtc())
    monkeypatch.setattr(_cuda, "_nvrtc", s)
    return s


def _relocatable(source: mc.CudaSource, lto: bool, checks: list[tuple[str, str, tuple[str, ...]]],
                 include_dirs: tuple[str, ...] = ()) -> tuple[bytes, str]:
    from mircuda.numba_ext._cuda_c import compile_relocatable, link_source

    return compile_relocatable(link_source(source, include_dirs), "sm_90", mc.CompileOptions(), lto=lto,
                               checks=checks)


def test_a_compiled_program_is_destroyed(spy) -> None:
    prog = mc.compile_program(mc.cuda_kernel('extern "C" __global__ void k() {}', "ok.cu"), "sm_90")
    assert prog.image[:4] == b"\x7fELF"
    assert len(spy.created) == 1 and spy.destroyed == spy.created


def test_a_program_nvrtc_rejects_is_destroyed(spy) -> None:
    with pytest.raises(mc.CompileError, match="undefined_name"):
        mc.compile_program(mc.cuda_kernel('extern "C" __global__ void k() { undefined_name; }', "bad.cu"), "sm_90")
    assert len(spy.created) == 1 and spy.destroyed == spy.created


@pytest.mark.parametrize("fail", ["nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcGetProgramLogSize"])
def test_a_program_whose_output_cannot_be_read_is_destroyed(monkeypatch, fail) -> None:
    s = _Spy(_cuda.nvrtc(), fail)
    monkeypatch.setattr(_cuda, "_nvrtc", s)
    with pytest.raises(RuntimeError, match="injected"):
        mc.compile_program(mc.cuda_kernel('extern "C" __global__ void k() {}', "ok.cu"), "sm_90")
    assert len(s.created) == 1 and s.destroyed == s.created


@pytest.mark.parametrize("lto", [False, True])
def test_a_relocatable_program_is_destroyed_also_when_a_declaration_mismatches(spy, lto) -> None:
    source = mc.CudaSource(DEVICE_FN, "twice.cu")
    code, _ = _relocatable(source, lto, [("twice", "float32", ("float32",))])
    assert (b".visible .func" in code) != lto and code and not code.endswith(b"\0")
    with pytest.raises(mc.ContractError, match="twice"):
        _relocatable(source, lto, [("twice", "float32", ("int32",))])
    assert len(spy.created) == 2 and spy.destroyed == spy.created


def test_both_compiles_search_the_callers_roots_then_the_toolkit(spy, tmp_path) -> None:
    toolkit = toolkit_include_dirs()
    assert toolkit and any((Path(d) / "cuda_fp16.h").is_file() for d in toolkit)
    source = mc.CudaSource('#include <cuda_fp16.h>\n' + DEVICE_FN, "twice.cu")
    mc.compile_program(source, "sm_90", include_paths=[str(tmp_path)])
    _relocatable(source, True, [], (str(tmp_path),))
    expected = [f"--include-path={d}" for d in (str(tmp_path), *toolkit)]
    plain, relocatable = spy.flags
    assert [f for f in plain if f.startswith("--include-path=")] == expected
    assert [f for f in relocatable if f.startswith("--include-path=")] == expected
    assert "--relocatable-device-code=true" in relocatable and "-dlto" in relocatable
    assert "--relocatable-device-code=true" not in plain and "-dlto" not in plain


def test_the_entry_point_returns_each_output_kind() -> None:
    options = mc.CompileOptions()
    cubin = nvrtc_compile(DEVICE_FN, "twice.cu", "sm_90", options, output="cubin", relocatable=True)
    ptx = nvrtc_compile(DEVICE_FN, "twice.cu", "sm_90", options, output="ptx", relocatable=True)
    ltoir = nvrtc_compile(DEVICE_FN, "twice.cu", "sm_90", options, output="ltoir", relocatable=True)
    assert cubin.image[:4] == b"\x7fELF" and ptx.image.endswith(b"\0") and b".func" in ptx.image
    assert ltoir.image and ltoir.image[:4] != b"\x7fELF" and b".func" not in ltoir.image
    assert cubin.log == ptx.log == ltoir.log == ""


def _compile_imports() -> dict[str, set[str]]:
    """module -> the modules of mircuda.compile it imports (at import time or inside functions)."""
    package = Path(mc.__file__).parent / "compile"
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                edges |= {node.module} if node.module else {a.name for a in node.names}
        graph[path.stem] = edges - {"__init__"}
    return graph


def test_the_compile_modules_import_each_other_without_a_circle() -> None:
    graph = _compile_imports()
    assert "_source" in graph["_files"] and "_nvrtc" in graph["_source"]
    assert not graph["_nvrtc"] & {"_source", "_compiler", "_files"}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == 1:
            raise AssertionError("import circle: " + " -> ".join(path + [module]))
        if state.get(module) == 2:
            return
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        state[module] = 2

    for module in sorted(graph):
        visit(module, [])
