"""NVRTC compilation of one source for one architecture; needs no GPU."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .. import _cuda
from .._caller import warn_at_caller
from ..errors import CompileError, CompileWarning, ContractError
from ._options import CompileOptions
from ._source import CudaSource
from ._toolkit import toolkit_include_dirs

__all__ = ["CompiledProgram", "compile_program", "nvrtc_version", "supported_archs", "validate_arch"]

_ARCH = re.compile(r"(sm|compute)_([1-9][0-9]*)([af]?)")


@dataclass(frozen=True)
class CompiledProgram:
    """The output of one NVRTC compilation.

    Attributes:
        arch: the target (``sm_90``, ``sm_120f`` ...).
        output: ``"cubin"`` or ``"ptx"``.
        image: the CUBIN, or the PTX text NUL-terminated (as ``cuModuleLoadData`` wants it).
        log: NVRTC's program log (warnings), possibly empty.
        nvrtc_version: ``(major, minor)`` of the NVRTC that compiled it.
        abi: how kernel parameters are passed: ``"c"`` (one value per parameter, C ABI) or another
            registered launch ABI (e.g. ``"numba"``: Numba's array structs).
        symbols: kernel names as contracts spell them -> names in the image, for compilers that
            mangle (empty: the names are the same).
    """

    arch: str
    output: str
    image: bytes
    log: str
    nvrtc_version: tuple[int, int]
    abi: str = "c"
    symbols: tuple[tuple[str, str], ...] = ()


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the loaded NVRTC library."""
    major, minor = _cuda.nvrtc_call("nvrtcVersion")
    return int(major), int(minor)


@lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """The SM numbers this NVRTC can target, e.g. ``(75, 80, ..., 90, 100, 120, 121)``."""
    return tuple(int(a) for a in _cuda.nvrtc_call("nvrtcGetSupportedArchs"))


def validate_arch(arch: object, output: str = "cubin") -> str:
    """Check an NVRTC target name (``sm_90``, ``sm_90a``, ``sm_120f``; ``compute_*`` for PTX only).

    Raises:
        ContractError: malformed, not supported by this NVRTC, or ``compute_*`` with CUBIN output.
    """
    m = _ARCH.fullmatch(arch) if isinstance(arch, str) and arch.isascii() else None
    if m is None:
        raise ContractError("arch", "an NVRTC target such as 'sm_90', 'sm_90a' or 'sm_120f'", repr(arch))
    if m.group(1) == "compute" and output == "cubin":
        raise ContractError("arch", "an sm_* target for CUBIN output", repr(arch),
                            "compute_* targets produce PTX only: pass CompileOptions(output='ptx')")
    sm = int(m.group(2))
    suffix = m.group(3)
    # Arch-specific ('a') targets exist from sm_90 on, family-specific ('f') from sm_100 on (PTX ISA 8.8).
    if suffix == "a" and sm < 90 or suffix == "f" and sm < 100:
        raise ContractError("arch", f"a target NVRTC knows ('{suffix}' variants start at "
                            f"{'sm_90' if suffix == 'a' else 'sm_100'})", repr(arch))
    if sm not in supported_archs():
        raise ContractError("arch", f"one of NVRTC {'.'.join(map(str, nvrtc_version()))}'s targets "
                            f"{', '.join(f'sm_{a}' for a in supported_archs())}", repr(arch))
    return arch  # type: ignore[return-value]


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
    mod = _cuda.nvrtc()
    prog = _cuda.nvrtc_call("nvrtcCreateProgram", source.text.encode(), source.name.encode(), 0, [], [])
    try:
        roots = list(include_paths) + list(toolkit_include_dirs())
        flags = options.flags(arch) + [f"--include-path={p}" for p in roots]
        flags = [f.encode() for f in flags]
        (result,) = mod.nvrtcCompileProgram(prog, len(flags), flags)
        log = _log(prog)
        if int(result) != 0:
            raise CompileError(f"NVRTC failed with {mod.nvrtcResult(int(result)).name}", log, arch, source.name)
        if options.output == "cubin":
            size = int(_cuda.nvrtc_call("nvrtcGetCUBINSize", prog))
            buf = b" " * size
            _cuda.nvrtc_call("nvrtcGetCUBIN", prog, buf)
        else:
            size = int(_cuda.nvrtc_call("nvrtcGetPTXSize", prog))  # includes the terminating NUL
            buf = b" " * size
            _cuda.nvrtc_call("nvrtcGetPTX", prog, buf)
        if log:
            warn_at_caller(CompileWarning(f"NVRTC warnings for {source.name!r} ({arch}):\n{log}"))
        return CompiledProgram(arch, options.output, bytes(buf), log, nvrtc_version())
    finally:
        mod.nvrtcDestroyProgram(prog)


def _log(prog: object) -> str:
    size = int(_cuda.nvrtc_call("nvrtcGetProgramLogSize", prog))
    if size <= 1:
        return ""
    buf = b" " * size
    _cuda.nvrtc_call("nvrtcGetProgramLog", prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace").strip()
