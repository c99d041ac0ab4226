"""Reading the SASS of ``libmircuda_cutlass.so``: the one home of finding ``cuobjdump``, disassembling one
arch's code and splitting it into functions, for the dense kernels' check (``cutlass-check``) and the
blockwise FP8 kernels' (:mod:`mircuda.matmul._fp8_sass`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SassFunction", "SassReport", "check_functions", "disassemble", "find_cuobjdump", "sass_functions",
           "wheel_tool"]


@dataclass
class SassFunction:
    """One kernel's verdict: ``missing`` opcodes it must hold, ``unexpected`` ones it must not, how many
    times the first required opcode (the MMA) occurs, and the distinct MMA opcodes found."""

    name: str
    ok: bool
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mma_count: int = 0
    opcodes: list[str] = field(default_factory=list)


@dataclass
class SassReport:
    """The checked kernels of one arch's code; ``error`` when cuobjdump is missing, fails, or finds none."""

    arch: str
    functions: list[SassFunction]
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.functions) and all(f.ok for f in self.functions)


def check_functions(library: Path, arch: str, wanted: Callable[[str], bool], need: Sequence[str],
                    avoid: Sequence[str], opcodes: Callable[[str], list[str]], what: str) -> SassReport:
    """Disassemble ``library``'s ``arch`` code and check every function ``wanted`` (by mangled name) for
    each opcode of ``need`` (the MMA first) and none of ``avoid``; ``what`` names the kernels in the
    error when there is none."""
    sass, error = disassemble(library, arch)
    if error:
        return SassReport(arch, [], error)
    functions = []
    for name, body in sass_functions(sass):
        if not wanted(name):
            continue
        missing = [op for op in need if op not in body]
        unexpected = [op for op in avoid if op in body]
        functions.append(SassFunction(name[:160], not missing and not unexpected, missing, unexpected,
                                      body.count(need[0]), opcodes(body)))
    if not functions:
        return SassReport(arch, [], f"no {what} in the {arch} code of {library.name}")
    return SassReport(arch, functions)


def find_cuobjdump() -> str | None:
    """``cuobjdump`` on ``PATH``, else beside the toolkit's ``nvcc`` (``MIRCUDA_NVCC``, ``CUDA_HOME``...), else
    the ``nvidia-cuda-cuobjdump`` wheel's (:func:`wheel_tool`; the ``test`` extra installs it with
    ``nvidia-cuda-nvdisasm``, which ``cuobjdump -sass`` runs from the same folder); None when none exists."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    from ..errors import CutlassNotFound
    from ._build import _find_nvcc

    try:
        candidate = _find_nvcc().parent / "cuobjdump"
    except CutlassNotFound:
        candidate = None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    return wheel_tool("cuobjdump")


def wheel_tool(name: str) -> str | None:
    """The executable ``name`` of an NVIDIA CUDA tool wheel (``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``):
    ``nvidia/cu<major>/bin/<name>`` in the installed ``nvidia`` namespace package, the newest CUDA major first;
    None when no such file is executable."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    found = [path for root in roots for path in Path(root).glob(f"cu*/bin/{name}")
             if path.parent.parent.name[2:].isdigit() and path.is_file() and os.access(path, os.X_OK)]
    found.sort(key=lambda path: int(path.parent.parent.name[2:]), reverse=True)
    return str(found[0]) if found else None


def sass_functions(sass: str) -> list[tuple[str, str]]:
    """``(mangled name, body)`` of every function in ``cuobjdump -sass`` output (its ``Function : name``
    headers)."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", sass, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def disassemble(library: Path, arch: str) -> tuple[str, str]:
    """``(sass, error)``: ``cuobjdump -sass -arch <arch> <library>``'s output, or ``""`` and why not
    (cuobjdump missing or failing, e.g. no code of that arch in the library)."""
    tool = find_cuobjdump()
    if tool is None:
        return "", "cuobjdump not found (CUDA toolkit bin/ on PATH)"
    out = subprocess.run([tool, "-sass", "-arch", arch, str(library)], capture_output=True, text=True, check=False)
    if out.returncode:
        return "", f"cuobjdump failed: {out.stderr.strip()[:300]}"
    return out.stdout, ""
