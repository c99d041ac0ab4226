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
from ._config import CompilerConfig
from ._nvrtc import CompiledProgram, nvrtc_compile, nvrtc_version, validate_arch
from ._options import CompileOptions
from ._resources import is_ptxas_report_line

__all__ = ["CudaSource", "ModuleSource", "check_name_expressions", "compile_program", "cuda_kernel"]


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
        name_expressions: C++ names (``"fill<float>"``, ``"ns::scale<4>"``) NVRTC instantiates and
            lowers (mangles); ``cuda_export("fill<float>", ...)`` then binds that kernel by its
            expression. Order kept, duplicates refused.
        digest: SHA-256 of name, text and name expressions, hex; part of every cache key.
    """

    text: str
    name: str
    name_expressions: tuple[str, ...] = ()
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
        object.__setattr__(self, "name_expressions", check_name_expressions(self.name_expressions))
        h = hashlib.sha256()
        h.update(self.name.encode())
        h.update(b"\0")
        h.update(self.text.encode())
        # Only when present, so that a source without expressions keeps the digest it always had.
        for expression in self.name_expressions:
            h.update(b"\0name-expression\0")
            h.update(expression.encode())
        object.__setattr__(self, "digest", h.hexdigest())

    def build(self, arch: str, options: CompileOptions) -> CompiledProgram:
        """Compile with NVRTC for ``arch`` (see :func:`compile_program`)."""
        return compile_program(self, arch, options)


def check_name_expressions(value: object, argument: str = "name_expressions") -> tuple[str, ...]:
    """Validate name expressions: a sequence (not a single str) of distinct, non-empty, single-line
    UTF-8 strs without NUL. Returns them as a tuple, stripped of surrounding blanks.

    Raises:
        ContractError: naming the argument (and the position of a bad expression).
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise ContractError(argument, "a sequence of C++ names such as ['fill<float>']", repr(value)[:80],
                            "wrap a single expression in a list" if isinstance(value, str) else "")
    out: list[str] = []
    for i, e in enumerate(value):
        if not isinstance(e, str) or not e.strip() or any(c in e for c in "\0\n\r"):
            raise ContractError(f"{argument}[{i}]", "a non-empty single-line C++ name such as 'fill<float>'",
                                repr(e)[:80])
        try:
            e.encode()
        except UnicodeEncodeError:
            raise ContractError(f"{argument}[{i}]", "text encodable as UTF-8", repr(e)[:80]) from None
        e = e.strip()
        if e in out:
            raise ContractError(f"{argument}[{i}]", "each expression once", f"{e!r} again")
        out.append(e)
    return tuple(out)


def compile_program(source: CudaSource, arch: str, options: CompileOptions | None = None,
                    include_paths: Sequence[str] = ()) -> CompiledProgram:
    """Compile ``source`` for ``arch`` with NVRTC; works on machines without a GPU. No cache: see
    :class:`OfflineCompiler` for the cached equivalent.

    Args:
        source: the translation unit.
        arch: ``sm_<N>`` (CUBIN or PTX), ``sm_<N>a`` (arch-specific, N >= 90), ``sm_<N>f`` (family,
            N >= 100), or ``compute_<N>[a|f]`` (PTX only); N among :func:`supported_archs`.
        options: :class:`CompileOptions` (default: C++17, CUBIN).
        include_paths: include roots (existing directories), searched in order before the toolkit headers
            (cudart and CCCL, always on the include path). Quoted includes search the including
            file's directory first (for the main source: the directory of ``source.name``, the
            working directory when the name has none).

    NVRTC's log of a successful compilation (warnings) is kept in ``CompiledProgram.log`` and also
    issued as a :class:`~mircuda.errors.CompileWarning`.

    Raises:
        ContractError: bad ``source``, ``arch``, ``options`` or ``include_paths`` (an entry that is not
            an existing directory is refused as ``include_paths[i]``, as by :class:`CompilerConfig`).
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
    CompilerConfig(include_paths=tuple(include_paths))  # each an existing directory, as the compilers require
    image, log, lowered = nvrtc_compile(source.text, source.name, arch, options, output=options.output,
                                        include_paths=include_paths, name_expressions=source.name_expressions)
    # ptxas' -v report is information the caller asked for (CompiledProgram.resource_usage), not a warning.
    warned = "\n".join(line for line in log.splitlines() if not is_ptxas_report_line(line)).strip()
    if warned:
        warn_at_caller(CompileWarning(f"NVRTC warnings for {source.name!r} ({arch}):\n{warned}"))
    return CompiledProgram(arch, options.output, image, log, nvrtc_version(), symbols=lowered)


def _caller_name(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def cuda_kernel(source: str, name: str | None = None, *, name_expressions: Sequence[str] = ()) -> CudaSource:
    """Wrap inline CUDA C source for :meth:`Compiler.compile`.

    Args:
        source: the CUDA C text of one translation unit; kernels to launch are ``extern "C"``, or
            templates (or C++ functions) named in ``name_expressions``.
        name: the program name NVRTC reports in diagnostics; defaults to the caller's ``file:line``.
        name_expressions: C++ names of kernels to instantiate and bind by that name, e.g.
            ``["fill<float>", "fill<__nv_bfloat16>"]`` then ``mc.cuda_export("fill<float>", ...)``.

    Example::

        src = mc.cuda_kernel('''
            template <typename T> __global__ void fill(T* out, T value, unsigned n) { ... }
        ''', name_expressions=["fill<float>", "fill<double>"])
        FillF32 = mc.cuda_export("fill<float>", out=mc.Out[mc.DeviceBuffer[mc.f32]], value=mc.f32, n=mc.u32)

    Raises:
        ContractError: ``source`` is not a str, or a name expression is empty, repeated or not a str.
        CompileError (at compile time): an expression names nothing; the message lists such expressions.
    """
    return CudaSource(source, _caller_name(1) if name is None else name, check_name_expressions(name_expressions))
