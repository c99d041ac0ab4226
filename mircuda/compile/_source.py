"""CUDA C sources as immutable values with a stable digest, and their compilation to one module
image (:func:`compile_program`, through the NVRTC entry point of :mod:`mircuda.compile._nvrtc`)."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .._caller import warn_at_caller
from ..errors import CompileWarning, ContractError
from ._nvrtc import CompiledProgram, nvrtc_compile, nvrtc_version, validate_arch
from ._options import CompileOptions

__all__ = ["CudaSource", "ModuleSource", "compile_program", "cuda_kernel"]


@runtime_checkable
class ModuleSource(Protocol):
    """Anything :meth:`Compiler.compile` can turn into a module.

    ``digest`` identifies the source's content (with everything that changes the output: code,
    versions of the tools that compile it); ``build`` compiles it for one target.
    """

    # Read-only: a frozen dataclass (CudaSource) provides them as fields.
    @property
    def name(self) -> str: ...

    @property
    def digest(self) -> str: ...

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
        return compile_program(self, arch, options)


def compile_program(source: CudaSource, arch: str, options: CompileOptions | None = None,
                    include_paths: Sequence[str] = ()) -> CompiledProgram:
    """Compile ``source`` for ``arch`` with NVRTC; works on machines without a GPU. No cache: see
    :class:`OfflineCompiler` for the cached equivalent.

    Args:
        source: the translation unit.
        arch: ``sm_<N>`` (CUBIN or PTX), ``sm_<N>a`` (arch-specific, N >= 90), ``sm_<N>f`` (family,
            N >= 100), or ``compute_<N>[a|f]`` (PTX only); N among :func:`supported_archs`.
        options: :class:`CompileOptions` (default: C++17, CUBIN).
        include_paths: include roots (directories), searched in order before the toolkit headers
            (cudart and CCCL, always on the include path). Quoted includes search the including
            file's directory first (for the main source: the directory of ``source.name``, the
            working directory when the name has none).

    NVRTC's log of a successful compilation (warnings) is kept in ``CompiledProgram.log`` and also
    issued as a :class:`~mircuda.errors.CompileWarning`.

    Raises:
        ContractError: bad ``source``, ``arch``, ``options`` or ``include_paths``.
        CompileError: NVRTC rejected the source; ``.log`` holds its program log.
    """
    if not isinstance(source, CudaSource):
        raise ContractError("source", "a CudaSource (mc.cuda_kernel(...))", type(source).__name__)
    options = CompileOptions() if options is None else options
    if not isinstance(options, CompileOptions):
        raise ContractError("options", "a CompileOptions", type(options).__name__)
    validate_arch(arch, options.output)
    if isinstance(include_paths, (str, bytes)) or not all(isinstance(p, str) and "\0" not in p for p in include_paths):
        raise ContractError("include_paths", "a sequence of directory paths (str)", repr(include_paths))
    image, log = nvrtc_compile(source.text, source.name, arch, options, output=options.output,
                               include_paths=include_paths)
    if log:
        warn_at_caller(CompileWarning(f"NVRTC warnings for {source.name!r} ({arch}):\n{log}"))
    return CompiledProgram(arch, options.output, image, log, nvrtc_version())


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
