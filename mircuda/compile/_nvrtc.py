"""The one NVRTC entry point of mircuda, :func:`nvrtc_compile`, and what describes its targets and
results (:func:`nvrtc_version`, :func:`supported_archs`, :func:`validate_arch`, :class:`CompiledProgram`).

Every NVRTC program mircuda creates goes through :func:`nvrtc_compile`: :func:`compile_program` (CUDA
C modules, CUBIN or PTX) and the relocatable compile of CUDA C device functions linked into Numba
kernels (PTX or LTO-IR, :mod:`mircuda.numba_ext`). It needs no GPU. This module imports nothing from
the rest of :mod:`mircuda.compile` except the options, so sources can depend on it and not the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from .. import _cuda
from ..errors import CompileError, ContractError
from ._options import RELOCATABLE_FLAG, CompileOptions
from ._resources import KernelResources, has_ptxas_report, parse_ptxas_report
from ._toolkit import toolkit_include_dirs

__all__ = ["CompiledProgram", "NvrtcOutput", "NvrtcResult", "nvrtc_compile", "nvrtc_version", "supported_archs",
           "validate_arch"]

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
            mangle, and for CUDA C each name expression (``"fill<float>"``) -> its lowered (mangled)
            name from ``nvrtcGetLoweredName`` (empty: the names are the same).
    """

    arch: str
    output: str
    image: bytes
    log: str
    nvrtc_version: tuple[int, int]
    abi: str = "c"
    symbols: tuple[tuple[str, str], ...] = ()

    def resource_usage(self) -> dict[str, KernelResources]:
        """Registers, shared memory, stack and spill bytes of each kernel, from the ptxas report in
        :attr:`log` (compile with ``CompileOptions(ptxas_verbose=True)``); no GPU needed.

        Keys are the kernel names as contracts spell them: a name expression (``"fill<float>"``)
        for the kernels the source lowered, else the name in the image; report order.

        Raises:
            ContractError: the program is not a CUBIN, or its log has no ptxas report.
        """
        if self.output != "cubin":
            raise ContractError("program", "a CUBIN (ptxas reports only when it builds one)", f"{self.output} output")
        if not has_ptxas_report(self.log):
            raise ContractError("program", "a program compiled with CompileOptions(ptxas_verbose=True)",
                                "a log without a ptxas report")
        by_image = {image: spelled for spelled, image in self.symbols}
        return {by_image.get(name, name): usage for name, usage in parse_ptxas_report(self.log).items()}


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
    if (suffix == "a" and sm < 90) or (suffix == "f" and sm < 100):
        raise ContractError("arch", f"a target NVRTC knows ('{suffix}' variants start at "
                            f"{'sm_90' if suffix == 'a' else 'sm_100'})", repr(arch))
    if sm not in supported_archs():
        raise ContractError("arch", f"one of NVRTC {'.'.join(map(str, nvrtc_version()))}'s targets "
                            f"{', '.join(f'sm_{a}' for a in supported_archs())}", repr(arch))
    return arch  # type: ignore[return-value]


NvrtcOutput = Literal["cubin", "ptx", "ltoir"]
"""What :func:`nvrtc_compile` returns: a CUBIN, PTX text, or LTO-IR (NVVM bitcode for nvJitLink)."""

# output -> the NVRTC getter suffix (nvrtcGet<X>Size / nvrtcGet<X>).
_GETTERS: dict[str, str] = {"cubin": "CUBIN", "ptx": "PTX", "ltoir": "LTOIR"}


class NvrtcResult(NamedTuple):
    """The output of one successful :func:`nvrtc_compile`.

    Attributes:
        image: the CUBIN, the LTO-IR, or the PTX text including NVRTC's terminating NUL.
        log: NVRTC's program log (warnings), stripped; empty when there was none.
        lowered_names: each name expression given to :func:`nvrtc_compile`, in order, with its
            lowered (mangled) name, e.g. ``("fill<float>", "_Z4fillIfEvPT_S0_")``.
    """

    image: bytes
    log: str
    lowered_names: tuple[tuple[str, str], ...] = ()


def nvrtc_compile(text: str, name: str, arch: str, options: CompileOptions, *, output: NvrtcOutput,
                  include_paths: Sequence[str] = (), relocatable: bool = False,
                  name_expressions: Sequence[str] = ()) -> NvrtcResult:
    """Compile one translation unit with NVRTC: create the program, compile it with ``options``'
    flags for ``arch``, the include roots ``include_paths`` (in order) and then the toolkit's header
    directories (:func:`~mircuda.compile._toolkit.toolkit_include_dirs`), read the log and the
    output, and destroy the program, on every path including errors.

    The caller has validated its arguments (:func:`compile_program` does for the public API).

    Args:
        text, name: the source and the program name NVRTC reports (its directory is searched first by
            quoted includes).
        arch: an NVRTC target (``sm_90``, ``compute_90a`` ...), already checked by :func:`validate_arch`.
        options: the standard, macros, fast math, registers and extra flags.
        output: ``"cubin"``, ``"ptx"`` or ``"ltoir"`` (adds ``-dlto``).
        include_paths: include roots searched before the toolkit headers.
        relocatable: ``--relocatable-device-code=true`` (device code linked later, e.g. by nvJitLink).
        name_expressions: C++ names of ``__global__`` functions or ``__device__`` variables
            (``"fill<float>"``, ``"ns::k<3>"``) to instantiate and look up (``nvrtcAddNameExpression``
            before the compile, ``nvrtcGetLoweredName`` after); already validated.

    Raises:
        CompileError: NVRTC rejected the source; ``.log`` holds its program log. When name
            expressions NVRTC could not resolve caused it, the message names them.
        NvrtcError: another NVRTC call failed (creating the program, reading its output).
    """
    mod = _cuda.nvrtc()
    prog = _cuda.nvrtc_call("nvrtcCreateProgram", text.encode(), name.encode(), 0, [], [])
    try:
        for expression in name_expressions:
            _cuda.nvrtc_call("nvrtcAddNameExpression", prog, expression.encode())
        flags = options.flags(arch)
        if relocatable and RELOCATABLE_FLAG not in flags:
            flags.append(RELOCATABLE_FLAG)
        if output == "ltoir":
            flags.append("-dlto")
        flags += [f"--include-path={p}" for p in (*include_paths, *toolkit_include_dirs())]
        (result,) = mod.nvrtcCompileProgram(prog, len(flags), [f.encode() for f in flags])
        log = _log(prog)
        if int(result) != 0:
            bad = unresolved_name_expressions(log, name_expressions)
            what = f"; name expressions it could not resolve: {', '.join(map(repr, bad))}" if bad else ""
            raise CompileError(f"NVRTC failed with {mod.nvrtcResult(int(result)).name}{what}", log, arch, name)
        getter = _GETTERS[output]
        size = int(_cuda.nvrtc_call(f"nvrtcGet{getter}Size", prog))  # PTX: includes the terminating NUL
        buf = b" " * size
        _cuda.nvrtc_call(f"nvrtcGet{getter}", prog, buf)
        lowered = tuple((e, bytes(_cuda.nvrtc_call("nvrtcGetLoweredName", prog, e.encode())).decode())
                        for e in name_expressions)
        return NvrtcResult(bytes(buf), log, lowered)
    finally:
        mod.nvrtcDestroyProgram(prog)


def unresolved_name_expressions(log: str, name_expressions: Sequence[str]) -> list[str]:
    """The name expressions a failed compile's log reports errors for.

    NVRTC compiles each expression as a ``#pragma nv_mangled_name <expression>`` line of an internal
    file ``__nv_name_map`` and quotes that line under each error it causes (NVRTC 12 and 13 logs);
    a valid expression is never quoted.
    """
    quoted = set(re.findall(r"^\s*#pragma nv_mangled_name (.*?)\s*$", log, re.MULTILINE))
    return [e for e in name_expressions if e.strip() in quoted]


def _log(prog: object) -> str:
    size = int(_cuda.nvrtc_call("nvrtcGetProgramLogSize", prog))
    if size <= 1:
        return ""
    buf = b" " * size
    _cuda.nvrtc_call("nvrtcGetProgramLog", prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace").strip()
