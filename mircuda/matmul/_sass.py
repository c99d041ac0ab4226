"""Reading the SASS of ``libmircuda_cutlass.so``: the one home of finding ``cuobjdump``, disassembling one
arch's code and splitting it into functions, for the dense kernels' check (``cutlass-check``) and the
blockwise FP8 kernels' (:mod:`mircuda.matmul._fp8_sass`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["disassemble", "find_cuobjdump", "sass_functions"]


def find_cuobjdump() -> str | None:
    """``cuobjdump`` on ``PATH``, else beside the toolkit's ``nvcc`` (``MIRCUDA_NVCC``, ``CUDA_HOME``...);
    None when neither exists."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    from ..errors import CutlassNotFound
    from ._build import _find_nvcc

    try:
        candidate = _find_nvcc().parent / "cuobjdump"
    except CutlassNotFound:
        return None
    return str(candidate) if candidate.is_file() else None


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
