"""Relocatable device code: CUDA C translation units compiled apart and linked into one module by
nvJitLink (separate compilation, ``nvcc -rdc=true`` then a device link).

:func:`cuda_link` names the translation units (CUDA C sources, or relocatable programs already
compiled for one target) as one :class:`LinkedSource`, a :class:`ModuleSource` that
:meth:`Compiler.compile` and :meth:`OfflineCompiler.compile` accept like any other: each CUDA C input
is compiled by NVRTC with ``--relocatable-device-code=true`` to a relocatable CUBIN, and nvJitLink
links the objects into one CUBIN, where a ``__global__`` function of one unit calls an ``extern
__device__`` function (or reads an ``extern __device__`` variable) defined in another. With
``lto=True`` the units are compiled to LTO-IR and nvJitLink optimizes them as one program. The compilers'
caches key the result by every input's digest, the options, the target, NVRTC's and nvJitLink's
versions and every header each unit can include. :func:`link_program` is the uncached equivalent.

nvJitLink ships as the ``nvidia-nvjitlink`` wheel (``cuda.bindings.nvjitlink`` loads
``libnvJitLink.so``), which mircuda's dependency ``numba-cuda[cu13]`` installs; without it, linking
refuses with the install command.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .._caller import warn_at_caller
from ..errors import CompileWarning, ContractError, LinkError, UnsupportedPlatform
from ._config import CompilerConfig
from ._elf_symbols import global_definitions
from ._nvrtc import CompiledProgram, NvrtcOutput, nvrtc_compile, nvrtc_version, validate_arch
from ._options import CompileOptions
from ._resources import is_ptxas_report_line
from ._source import CudaSource

__all__ = ["LinkInput", "LinkedSource", "cuda_link", "duplicate_symbols", "link_program", "nvjitlink_module",
           "nvjitlink_version", "unresolved_symbols"]

LinkInput = CudaSource | CompiledProgram
"""One translation unit of a link: CUDA C, or a program compiled for the link's target (a relocatable
CUBIN from ``CompileOptions(relocatable_device_code=True)``, or PTX)."""

_DIGEST_FORMAT = "mircuda-link/2"  # 2: links of a symbol defined twice, once cached, are refused


def nvjitlink_module() -> Any:
    """``cuda.bindings.nvjitlink`` with its library loaded.

    Raises:
        UnsupportedPlatform: the bindings or ``libnvJitLink`` cannot be loaded (the message says why
            and how to install it).
    """
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()  # loads libnvJitLink: a missing library fails here, not in the middle of a link
    except Exception as exc:
        raise UnsupportedPlatform(
            f"linking relocatable device code needs nvJitLink: {type(exc).__name__}: "
            f"{(str(exc).splitlines() or [''])[0]} (install it with: pip install nvidia-nvjitlink)") from None
    return nvjitlink


@lru_cache(maxsize=1)
def nvjitlink_version() -> tuple[int, int]:
    """``(major, minor)`` of the loaded nvJitLink library (part of every linked program's cache key).

    Raises:
        UnsupportedPlatform: nvJitLink is not installed.
    """
    major, minor = nvjitlink_module().version()
    return int(major), int(minor)


@dataclass(frozen=True)
class LinkedSource:
    """Translation units to compile as relocatable device code and link into one module.

    Attributes:
        inputs: the units, in link order: :class:`CudaSource` (compiled for the link's target with
            the link's options and ``--relocatable-device-code=true``) or :class:`CompiledProgram`
            (CUBIN or PTX compiled for one target; the link must be for that target).
        name: the linked program's name in diagnostics and errors.
        lto: link-time optimization: the CUDA C inputs are compiled to LTO-IR (NVRTC ``-dlto``) and
            nvJitLink optimizes them as one program (``-lto``), so a kernel can inline a device
            function of another unit; ptxas then runs in nvJitLink, whose log holds the
            ``ptxas_verbose`` report.
        digest: SHA-256 (hex) of the name, ``lto`` and every input's digest (a program's: its target,
            output kind and image); part of every cache key.

    Raises:
        ContractError: no inputs, an input of another type, two inputs of the same content, or a
            name expression listed by two CUDA C inputs.
    """

    inputs: tuple[LinkInput, ...]
    name: str
    lto: bool = False
    digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.inputs, (str, bytes, CudaSource, CompiledProgram)) or not isinstance(
                self.inputs, (tuple, list)):
            raise ContractError("sources", "a sequence of CudaSource or CompiledProgram (one per translation "
                                "unit)", type(self.inputs).__name__)
        if not self.inputs:
            raise ContractError("sources", "at least one translation unit", "an empty sequence")
        if not isinstance(self.name, str) or not self.name or any(c in self.name for c in "\0\n"):
            raise ContractError("name", "a non-empty single-line str", repr(self.name))
        if type(self.lto) is not bool:
            raise ContractError("lto", "a bool", repr(self.lto))
        h = hashlib.sha256(f"{_DIGEST_FORMAT}\0{self.name}\0lto={int(self.lto)}".encode("utf-8", "surrogateescape"))
        seen: dict[str, int] = {}
        expressions: dict[str, int] = {}
        for i, unit in enumerate(self.inputs):
            digest = _input_digest(unit, i)
            if digest in seen:
                raise ContractError(f"sources[{i}]", "each translation unit once",
                                    f"the same unit as sources[{seen[digest]}]",
                                    "linking a unit twice defines its symbols twice")
            seen[digest] = i
            for expression in unit.name_expressions if isinstance(unit, CudaSource) else ():
                if expression in expressions:
                    raise ContractError(f"sources[{i}]", "each name expression in one unit only",
                                        f"{expression!r} also listed by sources[{expressions[expression]}]")
                expressions[expression] = i
            h.update(b"\0input\0" + digest.encode())
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "digest", h.hexdigest())

    @property
    def sources(self) -> tuple[CudaSource, ...]:
        """The CUDA C inputs, in link order."""
        return tuple(u for u in self.inputs if isinstance(u, CudaSource))

    @property
    def name_expressions(self) -> tuple[str, ...]:
        """Every CUDA C input's name expressions, in link order."""
        return tuple(e for s in self.sources for e in s.name_expressions)

    def build(self, arch: str, options: CompileOptions) -> CompiledProgram:
        """Compile and link for ``arch`` (see :func:`link_program`; no include roots)."""
        return link_program(self, arch, options)


def _input_digest(unit: object, index: int) -> str:
    if isinstance(unit, CudaSource):
        return unit.digest
    if isinstance(unit, CompiledProgram):
        if unit.abi != "c":
            raise ContractError(f"sources[{index}]", "a CUDA C program (C ABI)", f"a program of ABI {unit.abi!r}")
        h = hashlib.sha256(f"program\0{unit.arch}\0{unit.output}\0".encode())
        h.update(unit.image)
        for expression, lowered in unit.symbols:
            h.update(f"\0symbol\0{expression}\0{lowered}".encode())
        return h.hexdigest()
    raise ContractError(f"sources[{index}]", "a CudaSource (mc.cuda_kernel(...), mc.cuda_kernel_file(...)) or a "
                        "CompiledProgram", type(unit).__name__)


def _caller_name(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def cuda_link(sources: Sequence[LinkInput], name: str | None = None, *, lto: bool = False) -> LinkedSource:
    """Name CUDA C translation units (and relocatable programs) to be linked into one module.

    Args:
        sources: the units in link order: :class:`CudaSource` values (``mc.cuda_kernel``,
            ``mc.cuda_kernel_file``), each self-contained except for ``extern __device__``
            functions and variables another unit defines; or :class:`CompiledProgram` values
            compiled with ``CompileOptions(relocatable_device_code=True)`` (or PTX) for the target
            the link will be built for.
        name: the linked program's name in diagnostics; defaults to the caller's ``file:line``.
        lto: link-time optimization across the units (see :class:`LinkedSource`).

    Example::

        lib = mc.cuda_kernel('extern "C" __device__ float twice(float x) { return 2 * x; }', "lib.cu")
        app = mc.cuda_kernel('''extern "C" __device__ float twice(float x);
            extern "C" __global__ void scale(float* p) { p[threadIdx.x] = twice(p[threadIdx.x]); }''', "app.cu")
        module = compiler.compile(mc.cuda_link([lib, app]))    # cached like any source
        scale = module.kernel(mc.cuda_export("scale", p=mc.InOut[mc.DeviceBuffer[mc.f32]]))

    Raises:
        ContractError: see :class:`LinkedSource`.
        CompileError, LinkError (at compile time): NVRTC rejected a unit, or nvJitLink the link
            (``LinkError.unresolved`` names the undefined symbols).
    """
    return LinkedSource(sources, _caller_name(1) if name is None else name, lto)  # type: ignore[arg-type]


# nvJitLink's own error (no LTO); ptxas' (LTO: nvJitLink runs ptxas on the optimized program and
# forwards its log) for a function or a variable.
_UNDEFINED = re.compile(r"Undefined reference to '([^']+)'|Unresolved extern (?:function|variable) '([^']+)'")
# nvJitLink's error for a strong symbol of two CUBINs (13.x returns success and prints it to stderr
# instead; link_program refuses such a link first), NVVM's (LTO) for two LTO-IR units.
_DUPLICATE = re.compile(r"Multiple definition of '([^']+)'|Linking globals named '([^']+)': symbol multiply defined")


def _names(pattern: re.Pattern[str], log: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(next(g for g in m.groups() if g) for m in pattern.finditer(log)))


def unresolved_symbols(log: str) -> tuple[str, ...]:
    """The symbols an nvJitLink error log reports as undefined, in log order, each once.

    nvJitLink 12.x and 13.x write one ``error   : Undefined reference to '<symbol>' in '<unit>'``
    line per reference; with LTO, ptxas (run by nvJitLink) writes ``ptxas fatal   : Unresolved
    extern function '<symbol>'`` (or ``variable``).
    """
    return _names(_UNDEFINED, log)


def duplicate_symbols(log: str) -> tuple[str, ...]:
    """The symbols an nvJitLink error log reports as defined more than once, in log order, each once
    (``Multiple definition of '<symbol>'``; with LTO, NVVM's ``Linking globals named '<symbol>':
    symbol multiply defined!``)."""
    return _names(_DUPLICATE, log)


def link_program(source: LinkedSource, arch: str, options: CompileOptions | None = None,
                 include_paths: Sequence[str] = ()) -> CompiledProgram:
    """Compile every CUDA C unit of ``source`` for ``arch`` as relocatable device code (NVRTC; LTO-IR
    when ``source.lto``) and link all units into one CUBIN (nvJitLink); works without a GPU. No
    cache: the compilers cache it.

    Args:
        source: the units (:func:`cuda_link`).
        arch: an ``sm_*`` target (``sm_90``, ``sm_90a``, ``sm_120f`` ...); a :class:`CompiledProgram`
            input must have been compiled for exactly this target.
        options: applied to every CUDA C unit (standard, macros, fast math, registers, debug, ptxas
            report...); ``max_registers``, ``line_info`` and ``device_debug`` also go to nvJitLink
            (which compiles PTX inputs). Output must be ``"cubin"``.
        include_paths: include roots for the CUDA C units, as for :func:`compile_program`; each
            must be an existing directory.

    Returns:
        A CUBIN program: ``log`` holds each unit's NVRTC log and nvJitLink's info log, and with
        ``ptxas_verbose=True`` ptxas' report of every kernel (from NVRTC, or from nvJitLink with
        LTO), so :meth:`CompiledProgram.resource_usage` covers them all; ``symbols`` maps the units' name expressions to their lowered names.
        NVRTC warnings are also issued as :class:`~mircuda.errors.CompileWarning`.

    Raises:
        ContractError: bad ``source``, ``arch``, ``options`` or ``include_paths``, PTX output asked
            for, or a program input for another target.
        CompileError: NVRTC rejected a unit (named in the error).
        LinkError: a symbol defined by two units (``.duplicates``; found in the CUBINs' symbol
            tables before nvJitLink runs, or in its log), or nvJitLink rejected the link: ``.log`` is
            its error log and ``.unresolved`` the symbols it could not resolve.
        UnsupportedPlatform: nvJitLink is not installed, or (with ``lto``) older than NVRTC.
    """
    if not isinstance(source, LinkedSource):
        raise ContractError("source", "a LinkedSource (mc.cuda_link([...]))", type(source).__name__)
    options = CompileOptions() if options is None else options
    if not isinstance(options, CompileOptions):
        raise ContractError("options", "a CompileOptions", type(options).__name__)
    if options.output != "cubin":
        raise ContractError("output", "'cubin' for linked device code (nvJitLink links CUBINs)",
                            repr(options.output))
    validate_arch(arch, "cubin")
    if isinstance(include_paths, (str, bytes)) or not all(isinstance(p, str) and "\0" not in p for p in include_paths):
        raise ContractError("include_paths", "a sequence of directory paths (str)", repr(include_paths))
    CompilerConfig(include_paths=tuple(include_paths))  # each an existing directory, as the compilers require
    for i, unit in enumerate(source.inputs):
        if isinstance(unit, CompiledProgram) and unit.arch != arch:
            raise ContractError(f"sources[{i}]", f"a program compiled for {arch}, the link's target",
                                f"a program for {unit.arch}")
    nvjitlink = nvjitlink_module()  # refuse before compiling anything when nvJitLink is missing
    if source.lto and nvjitlink_version() < nvrtc_version():
        linker, compiler = (".".join(map(str, v)) for v in (nvjitlink_version(), nvrtc_version()))
        raise UnsupportedPlatform(f"LTO-IR from NVRTC {compiler} cannot be linked by the older nvJitLink {linker}: "
                                  f"pip install 'nvidia-nvjitlink>={compiler}', or link without lto")

    objects: list[tuple[str, str, bytes]] = []  # (unit name, "cubin", "ptx" or "ltoir", image)
    unit_output: NvrtcOutput = "ltoir" if source.lto else "cubin"
    logs: list[str] = []
    symbols: list[tuple[str, str]] = []
    for i, unit in enumerate(source.inputs):
        if isinstance(unit, CudaSource):
            image, log, lowered = nvrtc_compile(unit.text, unit.name, arch, options, output=unit_output,
                                                include_paths=include_paths, relocatable=True,
                                                name_expressions=unit.name_expressions)
            warned = "\n".join(line for line in log.splitlines() if not is_ptxas_report_line(line)).strip()
            if warned:
                warn_at_caller(CompileWarning(f"NVRTC warnings for {unit.name!r} ({arch}):\n{warned}"))
            objects.append((unit.name, unit_output, image))
            logs.append(log)
            symbols += lowered
        else:
            objects.append((f"{source.name}[{i}]", unit.output, unit.image))
            logs.append(unit.log)
            symbols += unit.symbols
    _refuse_duplicates(objects, arch, source.name)
    image, info = _link(nvjitlink, objects, arch, options, source.name, source.lto)
    log = "\n".join(text for text in (*logs, info) if text)
    return CompiledProgram(arch, "cubin", image, log, nvrtc_version(), symbols=tuple(symbols))


def _refuse_duplicates(objects: list[tuple[str, str, bytes]], arch: str, name: str) -> None:
    """A global symbol two CUBIN units define is refused here: nvJitLink 13.x would link it (keeping
    one definition), return success and print its error to the process's stderr."""
    where: dict[str, list[str]] = {}
    for unit_name, kind, image in objects:
        if kind == "cubin":
            for symbol in dict.fromkeys(global_definitions(image)):
                where.setdefault(symbol, []).append(unit_name)
    duplicates = {symbol: units for symbol, units in where.items() if len(units) > 1}
    if duplicates:
        places = "; ".join(f"{symbol!r} in {', '.join(map(repr, units))}" for symbol, units in duplicates.items())
        raise LinkError(f"{_symbols_message('defined more than once', tuple(duplicates))} ({places})", "", arch,
                        name, duplicates=tuple(duplicates))


def _symbols_message(what: str, symbols: tuple[str, ...]) -> str:
    return f"symbol{'s' if len(symbols) > 1 else ''} {', '.join(map(repr, symbols))} {what}"


# NVRTC's math flags -> nvJitLink's, which take effect in a link-time optimized program.
_LTO_MATH = {"--ftz=true": "-ftz=1", "--ftz=false": "-ftz=0", "--prec-div=true": "-prec-div=1",
             "--prec-div=false": "-prec-div=0", "--prec-sqrt=true": "-prec-sqrt=1",
             "--prec-sqrt=false": "-prec-sqrt=0", "--fmad=true": "-fma=1", "--fmad=false": "-fma=0"}


def _linker_options(arch: str, options: CompileOptions, lto: bool) -> list[str]:
    out = [f"-arch={arch}"]
    if options.max_registers is not None:
        out.append(f"-maxrregcount={options.max_registers}")
    if options.line_info:
        out.append("-lineinfo")
    if options.device_debug:
        out.append("-g")
    if lto:
        out.append("-lto")
        if options.fast_math:  # what --use_fast_math implies (NVRTC's documentation of the flag)
            out += ["-ftz=1", "-prec-div=0", "-prec-sqrt=0", "-fma=1"]
        out += [_LTO_MATH[f] for f in options.extra_flags if f in _LTO_MATH]
        if options.ptxas_verbose:  # ptxas runs here, not in NVRTC
            out.append("-Xptxas=-v")
    return out


def _link(nvjitlink: Any, objects: list[tuple[str, str, bytes]], arch: str, options: CompileOptions,
          name: str, lto: bool) -> tuple[bytes, str]:
    """nvJitLink one CUBIN out of ``objects``; returns it with the info log. The handle is destroyed
    on every path."""
    flags = _linker_options(arch, options, lto)
    try:
        handle = nvjitlink.create(len(flags), flags)
    except nvjitlink.nvJitLinkError as exc:
        raise LinkError(f"nvJitLink refused the options {' '.join(flags)} ({exc})", "", arch, name) from None
    try:
        kinds = {"cubin": nvjitlink.InputType.CUBIN, "ptx": nvjitlink.InputType.PTX,
                 "ltoir": nvjitlink.InputType.LTOIR}
        try:
            for unit_name, kind, image in objects:
                nvjitlink.add_data(handle, kinds[kind], image, len(image), unit_name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = _log(nvjitlink.get_error_log_size, nvjitlink.get_error_log, handle)
            missing, twice = unresolved_symbols(log), duplicate_symbols(log)
            # The symbols first: nvJitLink's status for an undefined reference is ERROR_INTERNAL (no
            # LTO) or ERROR_PTX_COMPILE (LTO), which says nothing of the cause.
            what = [f"unresolved {_symbols_message('', missing).strip()}"] if missing else []
            what += [_symbols_message("defined more than once", twice)] if twice else []
            status = f"nvJitLink failed with {_error_name(exc)}"
            message = f"{'; '.join(what)} ({status})" if what else status
            raise LinkError(message, log, arch, name, missing, twice) from None
        size = nvjitlink.get_linked_cubin_size(handle)
        buffer = bytearray(size)
        nvjitlink.get_linked_cubin(handle, buffer)
        return bytes(buffer), _log(nvjitlink.get_info_log_size, nvjitlink.get_info_log, handle)
    finally:
        nvjitlink.destroy(handle)


def _error_name(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    name = getattr(status, "name", None)
    return str(name) if name else str(exc)


def _log(size_of: Any, read: Any, handle: int) -> str:
    size = int(size_of(handle))
    if size <= 1:
        return ""
    buffer = bytearray(size)
    read(handle, buffer)
    return bytes(buffer).rstrip(b"\0").decode(errors="replace").strip()
