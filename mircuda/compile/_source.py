"""CUDA C sources as immutable values with a stable digest."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ContractError

if TYPE_CHECKING:
    from ._nvrtc import CompiledProgram
    from ._options import CompileOptions

__all__ = ["CudaSource", "ModuleSource", "cuda_kernel"]


@runtime_checkable
class ModuleSource(Protocol):
    """Anything :meth:`Compiler.compile` can turn into a module.

    ``digest`` identifies the source's content (with everything that changes the output: code,
    versions of the tools that compile it); ``build`` compiles it for one target.
    """

    name: str
    digest: str

    def build(self, arch: str, options: CompileOptions) -> CompiledProgram: ...


@dataclass(frozen=True)
class CudaSource:
    """One self-contained CUDA C translation unit.

    Attributes:
        text: the CUDA C source.
        name: the program name NVRTC uses in diagnostics (e.g. ``"fill.cu"``).
        digest: SHA-256 of name and text, hex; part of every cache key.
    """

    text: str
    name: str
    digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ContractError("source", "CUDA C source as str", type(self.text).__name__)
        if "\0" in self.text:
            raise ContractError("source", "text without NUL characters (NVRTC would stop reading there)",
                                f"a NUL at offset {self.text.index(chr(0))}")
        if not isinstance(self.name, str) or not self.name or "\0" in self.name or "\n" in self.name:
            raise ContractError("name", "a non-empty single-line str", repr(self.name))
        for field_name, value in (("source", self.text), ("name", self.name)):
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise ContractError(field_name, "text encodable as UTF-8", f"{exc.object[exc.start:exc.end]!r} "
                                    f"at offset {exc.start}") from None
        h = hashlib.sha256()
        h.update(self.name.encode())
        h.update(b"\0")
        h.update(self.text.encode())
        object.__setattr__(self, "digest", h.hexdigest())

    def build(self, arch: str, options: CompileOptions) -> CompiledProgram:
        """Compile with NVRTC for ``arch`` (see :func:`compile_program`)."""
        from ._nvrtc import compile_program

        return compile_program(self, arch, options)


def _caller_name(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def cuda_kernel(source: str, name: str | None = None) -> CudaSource:
    """Wrap inline CUDA C source for :meth:`Compiler.compile`.

    Args:
        source: the CUDA C text of one translation unit; kernels to launch are ``extern "C"``.
        name: the program name NVRTC reports in diagnostics; defaults to the caller's ``file:line``.

    Raises:
        ContractError: ``source`` is not a str.
    """
    return CudaSource(source, _caller_name(1) if name is None else name)
